//! The one-run path of an array task on its node (`hwr-exp slurm-task` / `hwr-exp task`): the
//! allocation's CPUs, Slurm's ids in run.json, the pre-timeout signal and requeue.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::bundle::write::{NodeIds, TaskRunWriter};
use crate::bundle::{RunRecord, SlurmTaskIds};
use crate::exec::{CancelFlag, Termination};
use crate::slurm::{SlurmClient, script};

use super::*;

/// The node's hostname (`uname` nodename).
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The node's name as Slurm knows it: `SLURMD_NODENAME` (set by slurmd in every task; it differs
/// from the hostname where `NodeName` is not the hostname, e.g. several slurmd on one machine),
/// else `hostname`.
pub fn node_name(hostname: &str) -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hostname.to_string())
}

/// The Slurm ids of the task this process runs in, from `SLURM_JOB_ID`, `SLURM_ARRAY_JOB_ID` and
/// `SLURM_ARRAY_TASK_ID` (each `None` when unset or not a number).
pub fn task_ids_from_env() -> SlurmTaskIds {
    fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
        std::env::var(name).ok()?.trim().parse().ok()
    }
    SlurmTaskIds {
        job_id: var("SLURM_JOB_ID"),
        array_job_id: var("SLURM_ARRAY_JOB_ID"),
        array_task_id: var("SLURM_ARRAY_TASK_ID"),
    }
}

/// How a task ended ([`run_task`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TaskEnd {
    /// The run executed and its run.json was written (whatever the run's own outcome).
    Recorded(Box<RunRecord>),
    /// run.json was already there (the task ran before): nothing was done.
    AlreadyFinished,
    /// The task was stopped (SIGTERM from `scancel` or Slurm's time limit) before the run finished:
    /// no run.json, so the waiter records the run as `lost`.
    Stopped,
    /// The pre-timeout signal of `[executor] requeue = true` stopped the run and the task put
    /// itself back into the queue (`scontrol requeue`): it runs again, keeping this attempt.
    Requeued,
}

/// One planned run of a bundle on the node, as `hwr-exp slurm-task BUNDLE INDEX` does: writes the
/// node's host facts once (`hosts/<node>.json`, [`node_name`]), pins the run to the CPUs of the task's
/// allocation (`sched_getaffinity` of this process: what Slurm gave the task), runs it with the
/// launcher of `runs` ([`crate::runner::Runs::launch`]: timeout, sampling as locally) and writes its
/// folder and run.json with `hostname`, `node` and the Slurm ids. Takes no lock: the submitting or
/// waiting hwr-exp holds it. A run stopped by Slurm (`stopped_by_slurm`) gets no run.json: the
/// waiter records it as `lost`.
///
/// # Errors
/// I/O errors writing the run's files, a CPU set that cannot be read, or a run the runner could
/// not start for want of its own resources.
pub fn run_task(
    runs: crate::runner::Runs<'_>,
    index: usize,
    bundle: &Path,
    requeue: Option<&AtomicBool>,
) -> io::Result<TaskEnd> {
    let host = hostname();
    let node = node_name(&host);
    let writer = TaskRunWriter::new(
        bundle,
        NodeIds {
            hostname: Some(host),
            node: Some(node.clone()),
            slurm: Some(task_ids_from_env()),
        },
    );
    let mut run = runs.plan.run(index);
    if writer.finished(&run) {
        return Ok(TaskEnd::AlreadyFinished);
    }
    writer.write_node_host(&node, crate::provenance::host::collect)?;
    run.cpus =
        crate::cpus::allowed_cpus().map_err(|e| io::Error::other(format!("sched_getaffinity: {e}")))?;
    let run_dir = writer.prepare_run_dir(&run)?;
    {
        // The task's log (`slurm/logs/A_T.err`) keeps when its run started, for a waiter that
        // finds the task lost after Slurm forgot it (MinJobAge).
        use std::io::Write as _;
        let line = crate::slurm::log::start_line(&run.run_id, &crate::timestamp::now(), &node);
        let _ = writeln!(io::stderr(), "{line}");
    }
    let own_job = task_ids_from_env().job_id;
    let grace = runs.plan.grace;
    let done = AtomicBool::new(false);
    let executed = std::thread::scope(|scope| {
        // A requeueing task's pre-timeout watcher; a task without requeue has none.
        let watcher = requeue.and_then(|heard| {
            std::thread::Builder::new()
                .name("pre-timeout watcher".into())
                .spawn_scoped(scope, || {
                    watch_pre_timeout(heard, runs.cancel, &done, script::requeue_lead(grace), || {
                        let id = own_job.ok_or("no SLURM_JOB_ID")?;
                        telling(SlurmClient::new(), false)
                            .time_left(id)
                            .map_err(|e| e.to_string())
                    })
                })
                .ok()
        });
        let executed = runs.launch(run, run_dir, &mut || {});
        done.store(true, Ordering::SeqCst);
        if let Some(w) = &watcher {
            w.thread().unpark();
        }
        executed
    })?;
    if stopped_by_slurm(&executed.outcome, runs.cancel, || {
        let id = own_job?;
        let job = telling(SlurmClient::new(), false).show_job(id).ok().flatten()?;
        Some(job.state)
    }) {
        if requeue.is_some_and(|r| r.load(Ordering::SeqCst))
            && let Some(id) = own_job
        {
            // The pre-timeout signal: the run is stopped; the task goes back into the queue and
            // its next start keeps this attempt under attempts/ (prepare_run_dir).
            telling(SlurmClient::new(), false)
                .requeue(id)
                .map_err(|e| io::Error::other(format!("requeueing job {id}: {e}")))?;
            return Ok(TaskEnd::Requeued);
        }
        return Ok(TaskEnd::Stopped);
    }
    let record = writer.record_run(
        &executed.run,
        &executed.outcome,
        runs.plan.output_format,
        &runs.plan.metric_pointers,
    )?;
    Ok(TaskEnd::Recorded(Box::new(record)))
}

/// How the line a requeueing task writes to its log (`slurm/logs/A_T.err`) when it hears its
/// pre-timeout signal begins (the task's pre-timeout watcher writes it, then says what it decided).
pub const PRE_TIMEOUT_PREFIX: &str = "slurm: pre-timeout signal: ";

/// A requeueing task's answer to its pre-timeout signal (`[executor] requeue = true`), run
/// beside the run until `done`. Once `requeue` is set (SIGUSR2, [`crate::signal::install_pre_timeout`])
/// it asks Slurm how long the job has left (`time_left`: `squeue -h -j $SLURM_JOB_ID -o %L`) and
/// sets `cancel` (the run is stopped: SIGTERM, SIGKILL after grace) when only `lead` (the grace
/// period plus the requeue margin, [`script::requeue_lead`]) is left, or at once when that is
/// already past, the time left is unknown or cannot be read. Slurm checks its signal times about
/// once a minute, so the signal may come up to a minute earlier than `--signal=B:USR2@<lead>`
/// asked: stopping at once would interrupt runs that had time to finish and requeue a task
/// twice. A job without a time limit is never stopped by this watcher.
pub(super) fn watch_pre_timeout(
    requeue: &AtomicBool,
    cancel: &CancelFlag,
    done: &AtomicBool,
    lead: Duration,
    time_left: impl FnOnce() -> Result<Option<Duration>, String>,
) {
    // The run's end unparks this thread; the signal is looked for once a second (the lead
    // leaves 30 s to spare).
    while !requeue.load(Ordering::SeqCst) {
        if done.load(Ordering::SeqCst) {
            return;
        }
        std::thread::park_timeout(Duration::from_secs(1));
    }
    let heard = Instant::now();
    let stop_at = match time_left() {
        Ok(Some(left)) => {
            let wait = left.saturating_sub(lead);
            crate::runner::progress::say(format_args!(
                "{PRE_TIMEOUT_PREFIX}{}s left: the run is stopped in {}s unless it ends first",
                left.as_secs(),
                wait.as_secs()
            ));
            heard + wait
        }
        // No time limit: Slurm will not end the job for time.
        Ok(None) => {
            crate::runner::progress::say(format_args!("{PRE_TIMEOUT_PREFIX}no time limit: the run goes on"));
            return;
        }
        Err(e) => {
            crate::runner::progress::say(format_args!(
                "{PRE_TIMEOUT_PREFIX}the job's time left is unknown ({e}): stopping the run now"
            ));
            heard
        }
    };
    loop {
        if done.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        if now >= stop_at {
            cancel.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::park_timeout((stop_at - now).min(Duration::from_millis(500)));
    }
}

/// How long a task whose run ended badly waits for its own SIGTERM to set the cancel flag
/// ([`stopped_by_slurm`]) before it asks Slurm.
const SIGTERM_SETTLE: Duration = Duration::from_millis(500);

/// Whether the task was stopped by Slurm (`scancel`, preemption, time limit, node failure) rather
/// than its run ending by itself: the run was stopped by the cancel flag, or the flag is set by
/// the time it ended. Slurm signals every process of the job, in no set order, so the run may die
/// of that SIGTERM (or catch it and exit 143, as many programs do) before this process's own
/// SIGTERM has set the flag. So a run that did not exit 0 gives the flag [`SIGTERM_SETTLE`] to
/// arrive, and then Slurm's own state of the task decides (`slurm_state`: `scontrol show job
/// $SLURM_JOB_ID`): any state but RUNNING means Slurm is ending it (CANCELLED, TIMEOUT,
/// PREEMPTED, NODE_FAIL, REQUEUED...). Slurm sets that state before it sends a signal. Only the
/// task path asks; a local run's SIGTERM is the run's own business. The waiter checks again
/// ([`wait`]: a failed run's record is trusted only once Slurm says the task ended by itself).
fn stopped_by_slurm(
    outcome: &crate::exec::RunOutcome,
    cancel: &CancelFlag,
    slurm_state: impl FnOnce() -> Option<crate::slurm::TaskState>,
) -> bool {
    let stopped = || outcome.termination == Termination::Interrupted || cancel.load(Ordering::SeqCst);
    if stopped() {
        return true;
    }
    let ended_badly = outcome.signal.is_some() || outcome.exit_code.is_some_and(|c| c != 0);
    if !ended_badly {
        return false;
    }
    let until = Instant::now() + SIGTERM_SETTLE;
    while Instant::now() < until {
        if stopped() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stopped() || slurm_state().is_some_and(|s| s != crate::slurm::TaskState::Running)
}
