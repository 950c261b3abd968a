//! Scheduling a plan's runs onto an [`Executor`] and recording each into the bundle as it finishes.
//!
//! Runs execute in plan order. With `jobs > 1`, job slot `k` (its own disjoint CPUs) takes the runs
//! whose index is `k` modulo `jobs`, in order, so which CPUs a run gets is fixed by the plan.

pub mod preflight;
pub mod progress;
pub mod session;
pub mod slurm;

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::bundle::reason::RunFailure;
use crate::bundle::write::{NodeIds, TaskRunWriter, write_run_record};
use crate::bundle::{BundleWriter, RunRecord, files};
use crate::exec::{self, CancelFlag, Executor, RunOutcome, RunSpec, Termination};
use crate::manifest::{EnvPolicy, OutputFormat};
use crate::plan::{Plan, PlannedRun};

pub use progress::Progress;

/// How the runs of one session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// Every requested run was executed and recorded.
    Complete,
    /// The cancel flag was set; the run in flight was stopped and recorded, the rest were not started.
    Interrupted,
}

/// The child environment of `run`: its policy mapped to the executor's [`exec::EnvPolicy`], then
/// its `set` and `unset` applied ([`exec::build_env`]). Used for running and for the preflight's
/// program lookup, so both see the same `PATH`.
pub fn run_env(run: &PlannedRun) -> Vec<(OsString, OsString)> {
    let policy = match run.env.policy {
        EnvPolicy::Inherit => exec::EnvPolicy::Inherit,
        EnvPolicy::Clean => exec::EnvPolicy::Clean,
    };
    exec::build_env(policy, &run.env.set, &run.env.unset)
}

/// The [`RunSpec`] of one planned run of `plan`, with its files inside `run_dir` (the output,
/// `stderr.log`, and `memory.jsonl` when the plan samples memory).
pub fn run_spec(plan: &Plan, run: &PlannedRun, run_dir: &std::path::Path) -> RunSpec {
    RunSpec {
        argv: run.argv.clone(),
        workdir: run.workdir.clone(),
        env: run_env(run),
        cpus: run.cpus.clone(),
        timeout: plan.timeout,
        grace: plan.grace,
        stdout_path: run_dir.join(&run.output),
        stderr_path: run_dir.join(files::STDERR),
        memory_path: plan.sample_interval.map(|_| run_dir.join(files::MEMORY)),
        sample_interval: plan.sample_interval.unwrap_or(Duration::from_millis(100)),
    }
}

/// OS errors that, when a run cannot be started, come from the runner's own situation rather
/// than from the run: too many open files (process or system), a full disk or quota, a file-size
/// limit.
const RUNNER_RESOURCE_ERRORS: [rustix::io::Errno; 5] = [
    rustix::io::Errno::MFILE,
    rustix::io::Errno::NFILE,
    rustix::io::Errno::NOSPC,
    rustix::io::Errno::DQUOT,
    rustix::io::Errno::FBIG,
];

/// The error of a run that could not be started because the runner ran out of a resource
/// ([`RUNNER_RESOURCE_ERRORS`], read from the `(os error N)` of the executor's spawn error text):
/// such a run is not recorded as `spawn-failed` but ends the session like a bundle write error, so
/// that `resume` redoes it once the cause is gone. `None` for every other outcome.
fn runner_resource_error(outcome: &exec::RunOutcome) -> Option<io::Error> {
    if outcome.termination != exec::Termination::SpawnFailed {
        return None;
    }
    let text = outcome.error.as_deref()?;
    let code: i32 = text
        .rsplit_once("(os error ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(digits, _)| digits.parse().ok())?;
    RUNNER_RESOURCE_ERRORS
        .iter()
        .any(|e| e.raw_os_error() == code)
        .then(|| io::Error::from_raw_os_error(code))
        .map(|os| io::Error::new(os.kind(), format!("cannot start the run: {text}")))
}

/// Where [`execute_one`] puts a run: its folder and its record. Implemented by the local
/// runner's bundle writer (behind its mutex) and by a Slurm task's lock-free [`TaskRunWriter`].
pub trait RunRecorder: Sync {
    /// Creates the run's empty folder and returns its path.
    ///
    /// # Errors
    /// I/O errors.
    fn prepare_run_dir(&self, run: &PlannedRun) -> io::Result<std::path::PathBuf>;
    /// Writes the finished run's run.json (and counts it).
    ///
    /// # Errors
    /// I/O errors.
    fn record_run(
        &self,
        run: &PlannedRun,
        outcome: &RunOutcome,
        format: OutputFormat,
    ) -> io::Result<RunRecord>;
}

impl RunRecorder for Mutex<BundleWriter> {
    fn prepare_run_dir(&self, run: &PlannedRun) -> io::Result<std::path::PathBuf> {
        self.lock()
            .map_err(|_| io::Error::other("bundle writer poisoned"))?
            .prepare_run_dir(run)
    }
    /// Records one finished run ([`write_run_record`]: checks its output, hashes its files, lists
    /// the artifacts and earlier attempts in its folder, writes run.json atomically: its
    /// presence marks the run finished), then counts it in bundle.json
    /// ([`BundleWriter::count_run`]). No process of the run is alive by then
    /// ([`Executor::execute`] returns after the last one), so the folder does not change
    /// afterwards. The lock is held only for the folder's path and the count, so a recording
    /// thread never keeps the next run's folder waiting.
    fn record_run(
        &self,
        run: &PlannedRun,
        outcome: &RunOutcome,
        format: OutputFormat,
    ) -> io::Result<RunRecord> {
        let lock = || {
            self.lock()
                .map_err(|_| io::Error::other("bundle writer poisoned"))
        };
        let run_dir = lock()?.run_dir(run);
        let record = write_run_record(&run_dir, run, outcome, format, NodeIds::default())?;
        lock()?.count_run(&record)?;
        Ok(record)
    }
}

impl RunRecorder for TaskRunWriter {
    fn prepare_run_dir(&self, run: &PlannedRun) -> io::Result<std::path::PathBuf> {
        TaskRunWriter::prepare_run_dir(self, run)
    }
    fn record_run(
        &self,
        run: &PlannedRun,
        outcome: &RunOutcome,
        format: OutputFormat,
    ) -> io::Result<RunRecord> {
        TaskRunWriter::record_run(self, run, outcome, format)
    }
}

/// A run that has been executed and not yet recorded: what [`run_one`] hands to [`record_one`].
struct Executed {
    run: PlannedRun,
    outcome: RunOutcome,
    run_dir: PathBuf,
}

/// Executes one planned run of `plan` and records it: prepares its folder, runs it with
/// `executor` ([`run_spec`]) and writes its run.json through `recorder`; returns the record and
/// the run's folder. A run the runner could not start for want of its own resources
/// (`runner_resource_error`) is an error, not a record. A run stopped by the
/// cancel flag is recorded (termination `interrupted`) only when `record_interrupted`; otherwise,
/// when the flag is set by the time the run ended, the answer is `Ok(None)` and the folder is left
/// without run.json (a Slurm task stopped by `scancel`, which the waiting hwr-exp then records as
/// `lost`).
///
/// # Errors
/// I/O errors preparing the folder or writing run.json.
pub fn execute_one(
    plan: &Plan,
    run: &PlannedRun,
    recorder: &dyn RunRecorder,
    executor: &dyn Executor,
    cancel: &CancelFlag,
    progress: &dyn Progress,
    record_interrupted: bool,
) -> io::Result<Option<(RunRecord, PathBuf)>> {
    let run = run.clone();
    let run_dir = recorder.prepare_run_dir(&run)?;
    match run_one(
        plan,
        (run, run_dir),
        executor,
        cancel,
        progress,
        record_interrupted,
        &mut || {},
    )? {
        Some(executed) => {
            let record = recorder.record_run(&executed.run, &executed.outcome, plan.output_format)?;
            Ok(Some((record, executed.run_dir)))
        }
        None => Ok(None),
    }
}

/// The first half of [`execute_one`]: executes the run whose folder `run_dir` has been prepared,
/// calling `started` once its program has been started ([`Executor::execute_then`]); `Ok(None)`
/// for a run stopped by the cancel flag when it is not to be recorded.
///
/// # Errors
/// A run the runner could not start for want of its own resources.
fn run_one(
    plan: &Plan,
    (run, run_dir): (PlannedRun, PathBuf),
    executor: &dyn Executor,
    cancel: &CancelFlag,
    progress: &dyn Progress,
    record_interrupted: bool,
    started: &mut dyn FnMut(),
) -> io::Result<Option<Executed>> {
    let spec = run_spec(plan, &run, &run_dir);
    progress.run_started(&run);
    let outcome = executor.execute_then(&spec, cancel, started);
    if let Some(e) = runner_resource_error(&outcome) {
        // Not the run's fault: leave it unrecorded (resume redoes it) and stop.
        return Err(e);
    }
    if !record_interrupted {
        // A Slurm task stopped by scancel or its time limit: Slurm signals every process of the
        // job, so the run may die of that SIGTERM before this process's own SIGTERM has set the
        // cancel flag. Give the flag a moment in that case.
        let stopped = || outcome.termination == Termination::Interrupted || cancel.load(Ordering::SeqCst);
        if !stopped() && outcome.signal == Some(libc::SIGTERM) {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        if stopped() {
            return Ok(None);
        }
    }
    Ok(Some(Executed {
        run,
        outcome,
        run_dir,
    }))
}

/// The folder of a job slot's next run, made ahead by the slot's recorder thread while the run
/// before executes (with [`Executor::prepare`] of its spec), so that the runner has less to do
/// between two runs.
#[derive(Default)]
struct NextDir {
    /// The latest run (plan index) the runner has reached; its folder is the runner's business.
    claimed: Option<usize>,
    /// A folder made ahead, and the run it is for.
    made: Option<(usize, PathBuf)>,
}

impl NextDir {
    /// The runner's side, at the run `index`: its folder if it was made ahead, else `None` (the
    /// run is claimed: the recorder no longer makes it). Waits while the recorder is making it.
    /// A folder made for an earlier run (not executed) is removed; one made for a later run stays.
    fn claim(slot: &Mutex<NextDir>, index: usize) -> Option<PathBuf> {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.claimed = Some(index);
        match slot.made.take() {
            Some((i, dir)) if i == index => Some(dir),
            Some((i, dir)) if i < index => {
                let _ = std::fs::remove_dir(dir);
                None
            }
            later => {
                slot.made = later;
                None
            }
        }
    }

    /// The recorder's side: makes the folder of run `index` with `make` unless the runner has
    /// claimed that run, or a later one (a slot's runs are in ascending plan order), already:
    /// making the folder of a run that has started would empty it. A failure is left for the
    /// runner to meet (and report) itself.
    fn make(
        slot: &Mutex<NextDir>,
        index: usize,
        plan: &Plan,
        make: impl FnOnce(&PlannedRun) -> io::Result<PathBuf>,
    ) {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let reached = slot.claimed.is_some_and(|c| c >= index);
        if reached || slot.made.as_ref().is_some_and(|(i, _)| *i >= index) {
            return;
        }
        if let Ok(dir) = make(&plan.run(index))
            && let Some((_, stale)) = slot.made.replace((index, dir))
        {
            let _ = std::fs::remove_dir(stale);
        }
    }

    /// At the end of the slot's runs: removes a folder made for a run that was not executed (it
    /// is empty; one redone by resume keeps its `attempts/`, and stays).
    fn discard(slot: Mutex<NextDir>) {
        if let Some((_, dir)) = slot.into_inner().unwrap_or_else(|e| e.into_inner()).made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The CPUs on which the runner may record runs while other runs execute: the runner's allowed
/// CPUs that no job slot of `plan` uses. `None` when there are none, or when some slot's runs are
/// not pinned (they may use any CPU).
fn recording_cpus(plan: &Plan) -> Option<Vec<usize>> {
    if plan.slots.is_empty() || plan.slots.iter().any(Vec::is_empty) {
        return None;
    }
    let free: Vec<usize> = crate::cpus::allowed_cpus()
        .ok()?
        .into_iter()
        .filter(|c| !plan.slots.iter().any(|slot| slot.contains(c)))
        .collect();
    (!free.is_empty()).then_some(free)
}

/// Executes the runs of `plan` whose indices are in `indices` (ascending plan order) and records
/// each into `writer` as soon as it finishes.
///
/// Each job slot executes its runs one after another. Where some allowed CPU is used by no job
/// slot (`recording_cpus`), a slot's runs are recorded (output check, hashes, run.json,
/// progress) by a thread of its own pinned to those CPUs, which gets each run once the next one
/// has been started: recording a run then overlaps the next run, and never shares its CPU. A
/// slot's recorder is at most three runs behind (the run it is recording, one waiting to be
/// handed over, and the run that has just ended: when recording takes longer than running, as
/// for a huge output, the next run waits for it); every executed run is recorded before this
/// returns. Before it records a run, that thread makes the folder of the run after the one
/// executing and has the executor prepare it ([`Executor::prepare`]); the executor is tidied
/// ([`Executor::tidy`]) once every slot is done. Where no CPU is free, each run
/// is recorded before the next one starts, and nothing is made ahead.
///
/// # Errors
/// The first I/O error writing the bundle, or the first run that could not be started for lack of
/// a resource of the runner (see `RUNNER_RESOURCE_ERRORS`); runs in flight in other job slots are
/// finished first.
pub fn execute(
    plan: &Plan,
    indices: &[usize],
    writer: &Mutex<BundleWriter>,
    executor: &dyn Executor,
    cancel: &CancelFlag,
    progress: &dyn Progress,
) -> io::Result<SessionEnd> {
    let total = indices.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let failed: Mutex<Option<io::Error>> = Mutex::new(None);
    let reporting = Mutex::new(());
    let fail = |e: io::Error| {
        if let Ok(mut f) = failed.lock() {
            f.get_or_insert(e);
        }
    };
    let has_failed = || failed.lock().map(|f| f.is_some()).unwrap_or(true);
    let record = |executed: Executed| {
        if has_failed() {
            // Not recorded after the bundle could not be written: resume redoes it.
            return;
        }
        match writer.record_run(&executed.run, &executed.outcome, plan.output_format) {
            Ok(record) => {
                let failure = RunFailure::read(&record, &executed.run_dir, progress::FAILURE_TAIL_LINES);
                // Counted and reported under one lock, so that `[n/N]` lines of several job
                // slots come out in order.
                let _reporting = reporting.lock();
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                progress.run_finished(&executed.run, &record, failure.as_ref(), n, total);
            }
            Err(e) => fail(e),
        }
    };
    let recording_cpus = recording_cpus(plan);
    let slot_loop = |slot: usize| {
        let runs: Vec<usize> = indices
            .iter()
            .copied()
            .filter(|&i| plan.jobs <= 1 || plan.slot_of(i) == slot)
            .collect();
        let next_dir = Mutex::new(NextDir::default());
        // The run after the one executing now.
        let upcoming = std::cell::Cell::new(None);
        // `hand_off` takes each executed run; `started` is called once the next run is started.
        let execute_runs = |hand_off: &mut dyn FnMut(Executed), started: &mut dyn FnMut()| {
            for (k, &i) in runs.iter().enumerate() {
                if cancel.load(Ordering::SeqCst) || has_failed() {
                    return;
                }
                upcoming.set(runs.get(k + 1).copied());
                let run = plan.run(i);
                let run_dir = match NextDir::claim(&next_dir, i) {
                    Some(dir) => dir,
                    None => match writer.prepare_run_dir(&run) {
                        Ok(dir) => dir,
                        Err(e) => return fail(e),
                    },
                };
                match run_one(plan, (run, run_dir), executor, cancel, progress, true, started) {
                    Ok(Some(executed)) => hand_off(executed),
                    Ok(None) => return,
                    Err(e) => return fail(e),
                }
            }
        };
        let Some(cpus) = &recording_cpus else {
            return execute_runs(&mut |executed| record(executed), &mut || {});
        };
        std::thread::scope(|s| {
            // A rendezvous: a run is handed over only to a recorder that is free for it, with
            // the index of a run whose folder (and executor resources) it makes first.
            type Work = (Option<Executed>, Option<usize>);
            let (to_recorder, work) = std::sync::mpsc::sync_channel::<Work>(0);
            s.spawn(|| {
                exec::pin_current_thread(cpus);
                for (done, next) in work {
                    if let Some(next) = next
                        && !cancel.load(Ordering::SeqCst)
                        && !has_failed()
                    {
                        NextDir::make(&next_dir, next, plan, |run| {
                            let dir = writer.prepare_run_dir(run)?;
                            executor.prepare(&run_spec(plan, run, &dir));
                            Ok(dir)
                        });
                    }
                    if let Some(done) = done {
                        record(done);
                    }
                }
            });
            // The last executed run waits here until the next run has started; if the recorder
            // is still busy then, it is handed over before the run after that (and the runner
            // makes that run's folder itself).
            let pending: std::cell::RefCell<Option<Executed>> = std::cell::RefCell::new(None);
            let hand_over = |block: bool| {
                let executed = pending.borrow_mut().take();
                if block {
                    if let Some(executed) = executed {
                        let kept = to_recorder.send((Some(executed), None)).err();
                        *pending.borrow_mut() = kept.and_then(|e| e.0.0);
                    }
                    return;
                }
                if executed.is_none() {
                    return;
                }
                match to_recorder.try_send((executed, upcoming.get())) {
                    Err(std::sync::mpsc::TrySendError::Full((kept, _))) => *pending.borrow_mut() = kept,
                    // A recorder that has stopped only happens with a panic, which the scope
                    // propagates.
                    Err(std::sync::mpsc::TrySendError::Disconnected(_)) | Ok(()) => {}
                }
            };
            // The second run is made while the first one is.
            if let Some(&second) = runs.get(1) {
                let _ = to_recorder.send((None, Some(second)));
            }
            execute_runs(
                &mut |executed| {
                    hand_over(true);
                    *pending.borrow_mut() = Some(executed);
                },
                &mut || hand_over(false),
            );
            hand_over(true);
            drop(to_recorder);
        });
        NextDir::discard(next_dir);
    };
    if plan.jobs <= 1 {
        slot_loop(0);
    } else {
        std::thread::scope(|s| {
            for slot in 0..plan.jobs as usize {
                let slot_loop = &slot_loop;
                s.spawn(move || slot_loop(slot));
            }
        });
    }
    executor.tidy();
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    if done.load(Ordering::SeqCst) < total || cancel.load(Ordering::SeqCst) {
        Ok(SessionEnd::Interrupted)
    } else {
        Ok(SessionEnd::Complete)
    }
}

#[cfg(test)]
mod tests;
