//! Scheduling a plan's runs onto an [`Launcher`] and recording each into the bundle as it finishes.
//!
//! Runs execute in plan order. With `jobs > 1`, job slot `k` (its own disjoint CPUs) takes the runs
//! whose index is `k` modulo `jobs`, in order, so which CPUs a run gets is fixed by the plan.

pub mod adaptive;
pub mod backend;
pub mod binary;
pub mod environments;
pub mod experiment;
pub mod planning;
pub mod preflight;
pub mod progress;
pub mod session;
pub mod task;

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::bundle::reason::RunFailure;
use crate::bundle::write::{NodeIds, write_run_record};
use crate::bundle::{BundleWriter, files};
use crate::exec::{self, CancelFlag, Launcher, RunOutcome, RunSpec};
use crate::manifest::EnvPolicy;
use crate::plan::{Plan, PlannedRun};

pub use progress::Progress;

/// How the runs of one session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// Every requested run was executed and recorded.
    Complete,
    /// The cancel flag was set; the run in flight was stopped and recorded, the rest were not started.
    Interrupted,
    /// `--fail-fast`: a run was not ok, and no run started after it was recorded (runs in
    /// flight in other job slots ran to their end and were recorded); some runs were not started.
    FailedFast,
}

/// The child environment of `run`: its policy mapped to the launcher's [`exec::EnvPolicy`], then
/// its `set` and `unset` applied ([`exec::build_env`]). Used for running and for the preflight's
/// program lookup, so both see the same `PATH`.
pub fn run_env(run: &PlannedRun) -> Vec<(OsString, OsString)> {
    let policy = match run.env.policy {
        EnvPolicy::Inherit => exec::EnvPolicy::Inherit,
        EnvPolicy::Clean => exec::EnvPolicy::Clean,
    };
    let mut env = exec::build_env(policy, &run.env.set, &run.env.unset);
    // A run in a Python environment gets the venv's bin/ first on PATH (VIRTUAL_ENV is in `set`).
    if let Some(venv) = run.environment.as_ref().and_then(|e| e.venv.as_ref()) {
        let bin = venv.join("bin").into_os_string();
        match env.iter_mut().find(|(k, _)| k == "PATH") {
            Some((_, path)) => {
                let mut joined = bin;
                if !path.is_empty() {
                    joined.push(":");
                    joined.push(&*path);
                }
                *path = joined;
            }
            None => env.push((OsString::from("PATH"), bin)),
        }
    }
    env
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
        allocator: run.allocator.clone().map(|mut choice| {
            choice.sha256 = choice
                .path
                .as_deref()
                .and_then(|p| crate::allocator::sha256_cached(p).ok());
            choice
        }),
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
/// ([`RUNNER_RESOURCE_ERRORS`], the launcher's [`exec::StartError::os_error`], recorded as
/// [`RunOutcome::start_os_error`]): such a run is not recorded as `spawn-failed` but ends the
/// session like a bundle write error, so that `resume` redoes it once the cause is gone. `None` for
/// every other outcome.
fn runner_resource_error(outcome: &exec::RunOutcome) -> Option<io::Error> {
    if outcome.termination != exec::Termination::SpawnFailed {
        return None;
    }
    let errno = outcome
        .start_os_error
        .filter(|e| RUNNER_RESOURCE_ERRORS.contains(e))?;
    let text = outcome.error.as_deref().unwrap_or_default();
    let os = io::Error::from_raw_os_error(errno.raw_os_error());
    Some(io::Error::new(os.kind(), format!("cannot start the run: {text}")))
}

/// What executing runs needs, whoever records them: the plan, the launcher, the cancel flag and
/// the progress display. The local session ([`execute`]) and a Slurm array task
/// ([`backend::slurm::task::run_task`]) share it.
#[derive(Clone, Copy)]
pub struct Runs<'a> {
    /// The plan whose runs these are.
    pub plan: &'a Plan,
    /// Starts and supervises each run's process.
    pub launcher: &'a dyn Launcher,
    /// Set on Ctrl-C / SIGTERM: the run in flight is stopped, no other starts.
    pub cancel: &'a CancelFlag,
    /// Told when each run starts and ends.
    pub progress: &'a dyn Progress,
    /// `--fail-fast`: no run starts once a run that is not ok has been recorded (each run is
    /// then recorded before the next one of its slot starts).
    pub fail_fast: bool,
}

/// A run that has been executed and not yet recorded.
pub struct Executed {
    /// The planned run.
    pub run: PlannedRun,
    /// What the launcher measured.
    pub outcome: RunOutcome,
    /// Its folder in the bundle.
    pub run_dir: PathBuf,
}

impl Runs<'_> {
    /// Whether the cancel flag is set.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// Executes `run`, whose folder `run_dir` has been made, with the launcher ([`run_spec`]),
    /// calling `started` once its program has been started ([`Launcher::execute_then`]).
    ///
    /// # Errors
    /// A run the runner could not start for want of its own resources (`runner_resource_error`):
    /// not the run's fault, so it is left unrecorded (resume redoes it) and the session stops.
    pub fn launch(
        &self,
        run: PlannedRun,
        run_dir: PathBuf,
        started: &mut dyn FnMut(),
    ) -> io::Result<Executed> {
        let spec = run_spec(self.plan, &run, &run_dir);
        self.progress.run_started(&run);
        let outcome = self.launcher.execute_then(&spec, self.cancel, started);
        if let Some(e) = runner_resource_error(&outcome) {
            return Err(e);
        }
        Ok(Executed {
            run,
            outcome,
            run_dir,
        })
    }
}

/// The state the job slots of one local session share: where runs are recorded, how many are
/// done, the first error.
struct Shared<'a> {
    runs: Runs<'a>,
    writer: &'a Mutex<BundleWriter>,
    total: usize,
    done: AtomicUsize,
    failed: Mutex<Option<io::Error>>,
    /// `--fail-fast` only: a run that is not ok has been recorded.
    not_ok: std::sync::atomic::AtomicBool,
    /// Held while a run is counted and reported, so that `[n/N]` lines of several job slots come
    /// out in order.
    reporting: Mutex<()>,
}

impl Shared<'_> {
    fn writer(&self) -> io::Result<std::sync::MutexGuard<'_, BundleWriter>> {
        self.writer
            .lock()
            .map_err(|_| io::Error::other("bundle writer poisoned"))
    }

    /// Keeps the first error; the session stops at it.
    fn fail(&self, e: io::Error) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert(e);
        }
    }

    /// No further run starts: cancelled, the bundle could not be written, or (`--fail-fast`) a
    /// run was not ok.
    fn stopped(&self) -> bool {
        self.runs.cancelled()
            || self.not_ok.load(Ordering::SeqCst)
            || self.failed.lock().map(|f| f.is_some()).unwrap_or(true)
    }

    /// Makes the empty folder of `run`.
    fn make_dir(&self, run: &PlannedRun) -> io::Result<PathBuf> {
        self.writer()?.prepare_run_dir(run)
    }

    /// Records one executed run ([`write_run_record`]: checks its output, hashes its files, lists
    /// the artifacts and earlier attempts in its folder, writes run.json atomically: its presence
    /// marks the run finished), counts it in bundle.json ([`BundleWriter::count_run`]) and
    /// reports it. No process of the run is alive by then ([`Launcher::execute`] returns after
    /// the last one), so the folder does not change afterwards. The writer's lock is held only
    /// for the folder's path and the count, so a recording thread never keeps the next run's
    /// folder waiting. Nothing is recorded after the bundle could not be written: resume redoes
    /// the run.
    fn record(&self, executed: Executed) {
        if self.failed.lock().map(|f| f.is_some()).unwrap_or(true) {
            return;
        }
        let Executed {
            run,
            outcome,
            run_dir,
        } = executed;
        let recorded = write_run_record(
            &run_dir,
            &run,
            &outcome,
            self.runs.plan.output_format,
            &self.runs.plan.metric_pointers,
            NodeIds::default(),
        )
        .and_then(|record| self.writer()?.count_run(&record).map(|()| record));
        match recorded {
            Ok(record) => {
                let failure = RunFailure::read(&record, &run_dir, progress::FAILURE_TAIL_LINES);
                if self.runs.fail_fast && record.outcome != crate::bundle::Outcome::Ok {
                    self.not_ok.store(true, Ordering::SeqCst);
                }
                let _reporting = self.reporting.lock();
                let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
                self.runs
                    .progress
                    .run_finished(&run, &record, failure.as_ref(), n, self.total);
            }
            Err(e) => self.fail(e),
        }
    }
}

/// Where a job slot hands each executed run: recorded at once ([`Inline`]), or by a
/// [`Recorder`] thread while the next run executes.
trait Hand {
    /// The slot's next run has been started; `after` is the run after it (plan index).
    fn started(&mut self, after: Option<usize>);
    /// A run has ended.
    fn ended(&mut self, executed: Executed);
}

/// Each run is recorded before the next one starts; nothing is made ahead.
struct Inline<'s, 'a>(&'s Shared<'a>);

impl Hand for Inline<'_, '_> {
    fn started(&mut self, _: Option<usize>) {}
    fn ended(&mut self, executed: Executed) {
        self.0.record(executed);
    }
}

/// What a job slot's recorder is handed: a run to record, and the run whose folder (and launcher
/// resources) it makes first.
type Work = (Option<Executed>, Option<usize>);

/// A job slot's recording thread, pinned to CPUs no run uses, and the slot's end of the
/// rendezvous with it. The last executed run waits here until the next run has started; it is
/// handed over then if the recorder is free (with the run after the next, whose folder the
/// recorder makes first), and otherwise before the run after that starts (and the slot makes
/// that run's folder itself). So the recorder is at most three runs behind: the run it is
/// recording, one waiting to be handed over, and the run that has just ended.
struct Recorder {
    to: std::sync::mpsc::SyncSender<Work>,
    pending: Option<Executed>,
}

impl Recorder {
    /// Starts the recorder of `slot` in `scope`, on `cpus`; the slot's second run is made while
    /// the first one executes.
    fn start<'scope, 'env: 'scope>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        slot: &'env Slot<'_, '_>,
        cpus: &'env [usize],
    ) -> Recorder {
        // A rendezvous: a run is handed over only to a recorder that is free for it.
        let (to, work) = std::sync::mpsc::sync_channel::<Work>(0);
        scope.spawn(move || {
            exec::pin_current_thread(cpus);
            for (done, next) in work {
                if let Some(next) = next
                    && !slot.shared.stopped()
                {
                    slot.make_ahead(next);
                }
                if let Some(done) = done {
                    slot.shared.record(done);
                }
            }
        });
        if let Some(&second) = slot.runs.get(1) {
            let _ = to.send((None, Some(second)));
        }
        Recorder { to, pending: None }
    }

    /// Hands the pending run over, waiting for the recorder to be free.
    fn flush(&mut self) {
        if let Some(executed) = self.pending.take() {
            // A recorder that has stopped only happens with a panic, which the scope propagates.
            let _ = self.to.send((Some(executed), None));
        }
    }
}

impl Hand for Recorder {
    fn started(&mut self, after: Option<usize>) {
        let Some(executed) = self.pending.take() else {
            return;
        };
        if let Err(std::sync::mpsc::TrySendError::Full((kept, _))) = self.to.try_send((Some(executed), after))
        {
            self.pending = kept;
        }
    }

    fn ended(&mut self, executed: Executed) {
        self.flush();
        self.pending = Some(executed);
    }
}

impl Drop for Recorder {
    /// Every executed run is recorded: the last one is handed over; dropping the sender then ends
    /// the recorder's loop.
    fn drop(&mut self) {
        self.flush();
    }
}

/// One job slot: its runs (ascending plan order), executed one after another, each in a folder
/// the slot claims (made ahead by its recorder, or made here).
struct Slot<'s, 'a> {
    shared: &'s Shared<'a>,
    runs: Vec<usize>,
    ahead: Mutex<NextDir>,
}

impl Slot<'_, '_> {
    /// Makes the folder of run `index` ahead and lets the launcher prepare it.
    fn make_ahead(&self, index: usize) {
        let runs = self.shared.runs;
        NextDir::make(&self.ahead, index, runs.plan, |run| {
            let dir = self.shared.make_dir(run)?;
            runs.launcher.prepare(&run_spec(runs.plan, run, &dir));
            Ok(dir)
        });
    }

    /// Executes the slot's runs, handing each to `hand`, until they are done or the session stops.
    fn execute(&self, hand: &mut dyn Hand) {
        for (k, &i) in self.runs.iter().enumerate() {
            if self.shared.stopped() {
                return;
            }
            let after = self.runs.get(k + 1).copied();
            let run = self.shared.runs.plan.run(i);
            let run_dir = match NextDir::claim(&self.ahead, i) {
                Some(dir) => dir,
                None => match self.shared.make_dir(&run) {
                    Ok(dir) => dir,
                    Err(e) => return self.shared.fail(e),
                },
            };
            match self.shared.runs.launch(run, run_dir, &mut || hand.started(after)) {
                Ok(executed) => hand.ended(executed),
                Err(e) => return self.shared.fail(e),
            }
        }
    }
}

/// The folder of a job slot's next run, made ahead by the slot's recorder thread while the run
/// before executes (with [`Launcher::prepare`] of its spec), so that the runner has less to do
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

/// Executes the runs of `runs.plan` whose indices are in `indices` (ascending plan order) and
/// records each into `writer` as soon as it finishes.
///
/// Each job slot (`Slot`) executes its runs one after another. Where some allowed CPU is used
/// by no job slot (`recording_cpus`), a slot's runs are recorded (output check, hashes,
/// run.json, progress) by a thread of its own pinned to those CPUs (`Recorder`), which gets each
/// run once the next one has been started: recording a run then overlaps the next run, and never
/// shares its CPU (when recording takes longer than running, as for a huge output, the next run
/// waits for it); every executed run is recorded before this returns. Before it records a run,
/// that thread makes the folder of the run after the one executing and has the launcher prepare
/// it ([`Launcher::prepare`]); the launcher is tidied ([`Launcher::tidy`]) once every slot is
/// done. Where no CPU is free, each run is recorded before the next one starts, and nothing is
/// made ahead. A run stopped by the cancel flag is recorded (termination `interrupted`).
///
/// # Errors
/// The first I/O error writing the bundle, or the first run that could not be started for lack of
/// a resource of the runner (see `RUNNER_RESOURCE_ERRORS`); runs in flight in other job slots are
/// finished first.
pub fn execute(runs: Runs<'_>, indices: &[usize], writer: &Mutex<BundleWriter>) -> io::Result<SessionEnd> {
    let plan = runs.plan;
    let shared = Shared {
        runs,
        writer,
        total: indices.len(),
        done: AtomicUsize::new(0),
        failed: Mutex::new(None),
        not_ok: std::sync::atomic::AtomicBool::new(false),
        reporting: Mutex::new(()),
    };
    // With --fail-fast a run is recorded (its output checked) before the next one starts, so
    // that no run starts after one that is not ok.
    let recording_cpus = recording_cpus(plan).filter(|_| !runs.fail_fast);
    let slot = |k: usize| Slot {
        shared: &shared,
        runs: indices
            .iter()
            .copied()
            .filter(|&i| plan.jobs <= 1 || plan.slot_of(i) == k)
            .collect(),
        ahead: Mutex::new(NextDir::default()),
    };
    let execute_slot = |slot: Slot<'_, '_>| {
        match &recording_cpus {
            None => slot.execute(&mut Inline(slot.shared)),
            Some(cpus) => std::thread::scope(|s| slot.execute(&mut Recorder::start(s, &slot, cpus))),
        }
        NextDir::discard(slot.ahead);
    };
    if plan.jobs <= 1 {
        execute_slot(slot(0));
    } else {
        std::thread::scope(|s| {
            for k in 0..plan.jobs as usize {
                let (slot, execute_slot) = (slot(k), &execute_slot);
                s.spawn(move || execute_slot(slot));
            }
        });
    }
    runs.launcher.tidy();
    if let Some(e) = shared.failed.into_inner().ok().flatten() {
        return Err(e);
    }
    let all_done = shared.done.load(Ordering::SeqCst) >= shared.total;
    if runs.cancelled() {
        Ok(SessionEnd::Interrupted)
    } else if !all_done && shared.not_ok.load(Ordering::SeqCst) {
        Ok(SessionEnd::FailedFast)
    } else if !all_done {
        Ok(SessionEnd::Interrupted)
    } else {
        Ok(SessionEnd::Complete)
    }
}

/// The variable naming hwr-exp's cache folder (built Python environments, binary checksums);
/// default `$XDG_CACHE_HOME/hwr-exp`, else `$HOME/.cache/hwr-exp`.
pub const CACHE_VAR: &str = "HWR_EXP_CACHE";

/// hwr-exp's cache folder ([`CACHE_VAR`]); `None` when neither it, `XDG_CACHE_HOME` nor `HOME`
/// is set. Not created here.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    var(CACHE_VAR)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("hwr-exp")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("hwr-exp")))
}

#[cfg(test)]
mod tests;
