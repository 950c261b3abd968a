//! Waiting for a bundle's arrays: `squeue` of the active tasks, run.json files read once their
//! task ended, lost tasks recorded with Slurm's reason, adaptive rounds, cancel.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use crate::bundle::reason::RunFailure;
use crate::bundle::write::LostTask;
use crate::bundle::{BundleWriter, RunRecord, SlurmTaskIds, files};
use crate::exec::Termination;
use crate::plan::Plan;
use crate::slurm::{CancelTarget, SlurmClient, SlurmError, SubmittedArray, TaskMap};

use super::arrays::{Release, Submit, SubmitError, submission_client};
use super::pieces::{Feeder, apply, govern, read_limits};
use super::*;
use crate::runner::progress::FAILURE_TAIL_LINES;
use crate::runner::session::{Session, SessionError, SessionReport};
use crate::runner::{Progress, SessionEnd};

/// Submits the session's runs (see [`super::arrays::submit`]), then, unless `submit.detach`, waits for them
/// ([`wait()`]) and finishes the session as the local backend does (provenance after, counts,
/// status, exit code). Detached, the bundle stays `running` without a lock holder and the report
/// says so (exit 0). Interrupted while submitting, the bundle is finished `interrupted` (exit 130)
/// with nothing of the submission left in the queue.
///
/// # Errors
/// [`SessionError::Preflight`] when nothing could be submitted (exit 3; the bundle is marked
/// `failed`, an sbatch refusal recorded); [`SessionError::Bundle`] when writing the bundle fails.
pub fn submit_and_wait(mut session: Session<'_>, params: &Submit<'_>) -> Result<SessionReport, SessionError> {
    let (plan, quiet) = (session.plan.clone(), session.finish.quiet);
    let plan: &Plan = &plan;
    let client = submission_client(params.cluster, params.config, session.cancel, quiet);
    let indices = std::mem::take(&mut session.indices);
    let writer = session.writer_mut();
    if !quiet {
        // Said before submitting, so the bundle can be found even if this process is killed.
        crate::runner::progress::say(format_args!(
            "submitting {} into {}",
            crate::runner::progress::runs(indices.len()),
            writer.dir().display()
        ));
    }
    let release = if params.detach {
        Release::Chained
    } else {
        Release::Governed
    };
    let fed = read_limits(&client, params.cluster.limits, params.config.account.as_deref())
        .map_err(SubmitError::Failed)
        .and_then(|limits| {
            let mut feeder = Feeder::new(&indices, limits, params.config, params.cpus_per_task);
            feeder
                .feed(plan, writer, &client, release, quiet, 0)
                .map(|arrays| (feeder, arrays))
        });
    let (feeder, arrays) = match fed {
        Ok(f) => f,
        Err(SubmitError::Interrupted) => {
            return session.finish(Ok(SessionEnd::Interrupted), Vec::new());
        }
        Err(e) => {
            let reason = format!("submitting to slurm: {e}");
            let _ = writer.fail(&reason, SystemTime::now());
            return Err(SessionError::Preflight(vec![format!(
                "{reason} (the bundle {} is marked failed with this reason)",
                writer.dir().display()
            )]));
        }
    };
    let jobs: Vec<u64> = arrays.iter().map(|a| a.job_id).collect();
    if params.detach {
        if plan.adaptive.is_some() && !quiet {
            crate::runner::progress::say(format_args!(
                "adaptive repetitions: the first rounds are submitted; `hwr-exp wait {}` judges them at each look and submits the further rounds (nothing does while no waiter runs)",
                writer.dir().display()
            ));
        }
        if feeder.remaining() > 0 && !quiet {
            crate::runner::progress::say(format_args!(
                "{} not submitted yet (no room under the cluster's limits): `hwr-exp wait {}` submits them as room frees",
                crate::runner::progress::runs(feeder.remaining()),
                writer.dir().display()
            ));
        }
        // Dropping the session's writer releases the lock; `hwr-exp wait` takes it later.
        return Ok(SessionReport {
            bundle: writer.dir().to_path_buf(),
            status: crate::bundle::BundleStatus::Running,
            counts: BTreeMap::new(),
            planned: plan.len(),
            drift: false,
            exit_code: crate::exit_codes::SUCCESS,
            failures: Default::default(),
            slurm_jobs: jobs,
            slurm_unsubmitted: feeder.remaining(),
            failed_fast: false,
        });
    }
    let arrays = writer
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.clone())
        .unwrap_or_default();
    session.indices = indices;
    let waiting = Waiting {
        // The waiter checks the cancel flag itself and must still be able to scancel then.
        client: client.without_cancel(),
        arrays,
        shared_fs: params.cluster.shared_fs,
        feeder: Some(feeder),
        detach_on_stop: false,
    };
    wait_and_finish(session, &waiting)
}

/// What waiting for submitted arrays needs besides the session.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// The cluster's client.
    pub client: SlurmClient,
    /// Every array of the bundle (bundle.json `slurm.arrays`).
    pub arrays: Vec<SubmittedArray>,
    /// Whether the bundle is on a file system the nodes share ([`SHARED_FS_LOST_GRACE`]).
    pub shared_fs: bool,
    /// Runs of the session not submitted yet, submitted as room frees; `None` when every run
    /// of the session has a task.
    pub feeder: Option<Feeder>,
    /// What a stop request (Ctrl-C, SIGTERM) does: `false` cancels the arrays and ends the
    /// session interrupted (`run`, `resume`); `true` stops waiting and leaves the tasks to Slurm
    /// and the bundle `running` ([`Detached`]: `hwr-exp wait`, which attached to them). `hwr-exp
    /// cancel`'s marker cancels either way.
    pub detach_on_stop: bool,
}

/// Why [`wait()`] stopped waiting at a stop request when [`Waiting::detach_on_stop`]: the tasks go
/// on in Slurm and the bundle stays `running`, without a waiter.
#[derive(Debug, thiserror::Error)]
#[error(
    "stopped waiting ({signal}); the bundle's tasks go on in slurm and the bundle stays running: `hwr-exp wait {bundle}` attaches again, `hwr-exp cancel {bundle}` stops them"
)]
pub struct Detached {
    /// The stop request, as said (`Ctrl-C or another stop signal`).
    pub signal: &'static str,
    /// The bundle folder.
    pub bundle: String,
}

/// Waits for the session's runs ([`wait()`]) with the progress display, then finishes the session
/// ([`Session::finish`]). Shared by `run`, `wait` and `resume`.
///
/// # Errors
/// As [`Session::finish`]; a recorded array spec that does not parse is a bundle error;
/// [`SessionError::Environment`] when squeue fails with an error that is not transient
/// ([`QueueRefused`]: the bundle is left `running` for a later `hwr-exp wait`).
pub fn wait_and_finish(mut session: Session<'_>, waiting: &Waiting) -> Result<SessionReport, SessionError> {
    let map = match TaskMap::new(&waiting.arrays) {
        Ok(map) => map,
        Err(e) => {
            let source = io::Error::new(io::ErrorKind::InvalidData, e);
            let writer = session
                .writer
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            return Err(crate::runner::session::failed_bundle(writer, source));
        }
    };
    if !session.finish.quiet {
        crate::runner::progress::say(format_args!(
            "waiting for {} of slurm job(s) {} in {}",
            crate::runner::progress::runs(session.indices.len()),
            map.job_ids()
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            session.dir().display()
        ));
    }
    session.progress.start(session.indices.len());
    let grace = if waiting.shared_fs {
        SHARED_FS_LOST_GRACE
    } else {
        Duration::ZERO
    };
    let started = Instant::now();
    let mut feeder = waiting.feeder.clone();
    let end = wait(
        &mut session,
        &waiting.client,
        map,
        grace,
        feeder.as_mut(),
        waiting.detach_on_stop,
    );
    // Adaptive repetitions: the rule judges the bundle at each look (as the local runner does,
    // `runner::adaptive`) and each further round is submitted as an array of its own once the
    // previous one has ended. The cluster's refusal to answer squeue ends the waiting first.
    let refused = |end: &io::Result<SessionEnd>| {
        end.as_ref()
            .err()
            .and_then(|e| e.get_ref())
            .is_some_and(|r| r.is::<QueueRefused>())
    };
    let end = match &waiting.feeder {
        Some(template) if session.plan.adaptive.is_some() && !refused(&end) => {
            crate::runner::adaptive::rounds::continue_rounds_with(
                &mut session,
                end,
                started,
                &mut |session, new| next_round(session, waiting, template, grace, new),
            )
        }
        _ => end,
    };
    if let Err(e) = &end
        && let Some(stopped) = e.get_ref().and_then(|r| r.downcast_ref::<QueueRefused>())
    {
        // The tasks go on in Slurm: the bundle is left `running` without a waiter, as `run
        // --detach` leaves it (dropping the session releases the lock), for a later `wait`.
        return Err(SessionError::Environment(stopped.to_string()));
    }
    if let Err(e) = &end
        && let Some(detached) = e.get_ref().and_then(|r| r.downcast_ref::<Detached>())
    {
        // As above: left `running` for a later `wait` (the lock is released with the session).
        return Err(SessionError::Detached(detached.to_string()));
    }
    let jobs: Vec<u64> = session
        .writer_mut()
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.iter().map(|a| a.job_id).collect())
        .unwrap_or_default();
    session.finish(end, jobs)
}

/// One further round of adaptive repetitions (`new`: the round's plan indices, already in the
/// session's plan and in plan.json): submitted held as job arrays of their own (`array-<n>.sbatch`
/// numbered after the bundle's earlier arrays, recorded in bundle.json before release), with
/// `template`'s limits and keys ([`Feeder::for_round`]), then waited for ([`wait()`]) over every
/// array of the bundle.
///
/// # Errors
/// The submission fails (sbatch refuses: recorded in `slurm.refusals`), or as [`wait()`].
fn next_round(
    session: &mut Session<'_>,
    waiting: &Waiting,
    template: &Feeder,
    grace: Duration,
    new: &[usize],
) -> io::Result<SessionEnd> {
    let quiet = session.finish.quiet;
    let mut feeder = template.for_round(new);
    let plan = session.plan.clone();
    match feeder.feed(
        &plan,
        session.writer_mut(),
        &waiting.client,
        Release::Governed,
        quiet,
        0,
    ) {
        Ok(arrays) => {
            if !quiet && !arrays.is_empty() {
                crate::runner::progress::say(format_args!(
                    "submitted the round as slurm job(s) {}",
                    arrays
                        .iter()
                        .map(|a| a.job_id.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Err(SubmitError::Interrupted) => return Ok(SessionEnd::Interrupted),
        Err(e) => {
            return Err(io::Error::other(format!(
                "submitting the next round of adaptive repetitions: {e}"
            )));
        }
    }
    let arrays = session
        .writer_mut()
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.clone())
        .unwrap_or_default();
    let map = TaskMap::new(&arrays).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    session.indices = new.to_vec();
    wait(
        session,
        &waiting.client,
        map,
        grace,
        Some(&mut feeder),
        waiting.detach_on_stop,
    )
}

/// Why [`wait()`] stopped waiting: `squeue` failed with an error that is not transient
/// ([`SlurmError::is_transient`]: no controller down or overloaded, so asking again would fail
/// again, e.g. `Invalid user for SlurmUser`). The tasks go on in Slurm; the bundle stays `running`.
#[derive(Debug, thiserror::Error)]
#[error(
    "squeue failed and asking again would not help: {error}\n  the bundle's tasks go on in slurm; once squeue works, `hwr-exp wait {bundle}` waits for them again (or `hwr-exp cancel {bundle}` stops them)"
)]
pub struct QueueRefused {
    /// The failed squeue call.
    pub error: SlurmError,
    /// The bundle folder.
    pub bundle: String,
}

/// The shortest pause between two polls of [`wait()`].
pub const POLL_MIN: Duration = POLL;

/// The longest pause between two polls of [`wait()`] while nothing changes.
pub const POLL_MAX: Duration = Duration::from_secs(5);

/// The longest pause between two polls of [`wait()`] while runs start and end with much work still
/// ahead: the progress display and the next piece then lag the queue by at most this (plus one
/// `squeue`); the next array's release does not (the pause is bounded by the tasks ahead of it).
pub const POLL_FLOW_MAX: Duration = Duration::from_secs(10);

/// How many changes (a task started, a run finished or was lost, arrays submitted) one poll aims
/// to see while runs flow. A poll costs one `squeue` process (12-20 ms of CPU on the 2-core test
/// machine, most of it the client's start-up and its three RPCs, whatever the answer's size) and
/// a job-info RPC in slurmctld, so at a fixed 0.25 s a cluster starting 20 tasks a second cost
/// the waiter 2 ms of CPU per run and more job-info RPCs than a hand-written `squeue` loop. At
/// 64 changes a poll (up to 2 s) 20,000 runs still made 745 job-info RPCs against the hand
/// loop's 539 (324 in another round, its squeue slower under load); aiming at 256 (capped at
/// [`POLL_FLOW_MAX`]) polls a bundle ending 15-20 runs a second every 7-10 s.
pub const POLL_BATCH: u32 = 256;

/// The next pause of [`wait()`], given the time `since` the previous poll, the `changes` this one
/// saw and the tasks `ahead` that can start or end before the waiter has something to do (the
/// front array's pending tasks while a held array waits behind it, else the bundle's tasks not
/// over: [`tasks_ahead`](super::pieces::tasks_ahead)):
/// - nothing changed: half as long again as `previous`, up to [`POLL_MAX`];
/// - else the pause in which `min(POLL_BATCH, ahead)` changes are expected at the rate just
///   seen (`since * aim / changes`), between [`POLL_MIN`] and [`POLL_FLOW_MAX`]. A task is one or
///   two changes (its start, if seen, and its end), so the next poll comes before about half of
///   the tasks ahead have gone: a busy bundle with much work left is polled every 10 s, an array
///   boundary or the bundle's end are approached with shorter pauses, and a burst of changes
///   (many tasks ending at once) is looked at again after [`POLL_MIN`].
pub fn next_pause(previous: Duration, since: Duration, changes: usize, ahead: usize) -> Duration {
    if changes == 0 {
        return (previous + previous / 2).clamp(POLL_MIN, POLL_MAX);
    }
    let aim = u32::try_from(ahead).unwrap_or(u32::MAX).clamp(1, POLL_BATCH);
    let changes = u32::try_from(changes).unwrap_or(u32::MAX);
    (since.saturating_mul(aim) / changes).clamp(POLL_MIN, POLL_FLOW_MAX)
}

/// What [`wait()`] keeps per run still waited for: which runs have no counted run.json yet, since
/// when a run's task is gone without one, which tasks were seen running and on which node.
#[derive(Debug, Default)]
pub(super) struct Waited {
    /// Runs without a counted run.json.
    pub(super) pending: BTreeSet<usize>,
    /// When each run's task was first seen gone from the queue without a run.json.
    pub(super) gone_since: BTreeMap<usize, Instant>,
    /// Runs whose task was seen running.
    pub(super) started: BTreeSet<usize>,
    /// The node each started task runs on (for a lost run whose task Slurm no longer knows).
    pub(super) seen_on: BTreeMap<usize, String>,
}

impl Waited {
    pub(super) fn new(indices: &[usize]) -> Self {
        Waited {
            pending: indices.iter().copied().collect(),
            ..Waited::default()
        }
    }

    /// Forgets run `i`, which has its run.json now: nothing of it is kept.
    pub(super) fn finished(&mut self, i: usize) {
        self.pending.remove(&i);
        self.gone_since.remove(&i);
        self.started.remove(&i);
        self.seen_on.remove(&i);
    }
}

/// Waits until every run of the session has a run.json. Each poll asks `squeue` once for the
/// active tasks of the bundle's arrays ([`SlurmClient::active`]: the states of tasks not over,
/// an array's pending rest as one line) and looks at a run's folder only once its task is no
/// longer active: no folder of a pending or running task is opened. An array a successful poll
/// no longer lists is over and not asked about again (so one array left in the queue is one
/// `REQUEST_JOB_INFO_SINGLE`, not a whole-table `REQUEST_JOB_INFO`). It releases held arrays in
/// order ([`govern`]), submits the next piece when `feeder` has runs left and room frees
/// ([`Feeder::feed`]), and pauses [`next_pause`]: up to [`POLL_FLOW_MAX`] while runs start and
/// end with much work ahead, shorter as the tasks ahead of the next array or of the bundle's end
/// run out (and after a burst of changes, down to [`POLL_MIN`]), growing to [`POLL_MAX`] while
/// nothing changes; [`POLL_MIN`] while an array boundary is near
/// ([`boundary_near`](super::pieces::boundary_near)). A run whose task ended, still without run.json
/// `lost_grace` later, is recorded as `lost` with Slurm's account of the task (`scontrol show
/// job`). Each run.json found is counted in bundle.json. When `squeue` fails with a transient
/// error (after the client's retries), only folders of runs seen running are looked at until it
/// answers again; any other squeue failure stops the waiting ([`QueueRefused`]).
///
/// The cancel flag (Ctrl-C) or the marker `slurm/cancel-requested` (`hwr-exp cancel`) cancels
/// every array (`scancel`), waits up to [`CANCEL_WAIT`] until none of their tasks is active and
/// ends [`SessionEnd::Interrupted`]; runs without run.json stay so (`resume` submits them again).
///
/// # Errors
/// I/O errors writing bundle.json or a lost run's run.json; an error holding [`QueueRefused`] when
/// squeue fails with an error that is not transient.
pub fn wait(
    session: &mut Session<'_>,
    client: &SlurmClient,
    mut map: TaskMap,
    lost_grace: Duration,
    mut feeder: Option<&mut Feeder>,
    detach_on_stop: bool,
) -> io::Result<SessionEnd> {
    let (plan, cancel, total, quiet) = (
        session.plan.clone(),
        session.cancel,
        session.indices.len(),
        session.finish.quiet,
    );
    let plan: &Plan = &plan;
    let (indices, progress) = (&session.indices, &session.progress);
    let writer = session
        .writer
        .get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut waited = Waited::new(indices);
    let mut done = 0usize;
    let marker = writer.dir().join(files::SLURM).join(files::CANCEL_REQUESTED);
    let mut warned = false;
    let mut pause = POLL_MIN;
    let mut last_poll = Instant::now();
    // The bundle's tasks pending at the last poll (none known before the first).
    let mut queued = 0usize;
    // Arrays a poll no longer listed: every task of theirs is over, they are not asked about.
    let mut over: BTreeSet<u64> = BTreeSet::new();
    let order = |writer: &BundleWriter| -> Vec<u64> {
        writer
            .info()
            .slurm
            .as_ref()
            .map(|s| s.arrays.iter().map(|a| a.job_id).collect())
            .unwrap_or_default()
    };
    // The last pending-reason summary shown (`2 pending (PartitionTimeLimit)`).
    let mut shown_pending: Option<String> = None;
    loop {
        if let Some(end) = stop(cancel, &marker, detach_on_stop, writer, client, &map) {
            return end;
        }
        let mut changes = 0usize;
        if let Some(f) = feeder.as_deref_mut()
            && f.remaining() > 0
        {
            match f.feed(plan, writer, client, Release::Governed, quiet, queued) {
                Ok(arrays) if !arrays.is_empty() => {
                    changes += 1;
                    let all = writer
                        .info()
                        .slurm
                        .as_ref()
                        .map(|s| s.arrays.clone())
                        .unwrap_or_default();
                    map = TaskMap::new(&all).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                Ok(_) => {}
                Err(e) => crate::runner::progress::say(format_args!(
                    "warning: submitting the next piece failed, trying again later: {e}"
                )),
            }
        }
        let asked: Vec<u64> = map
            .job_ids()
            .into_iter()
            .filter(|id| !over.contains(id))
            .collect();
        let queue = match client.active(&asked) {
            Ok(q) => {
                warned = false;
                Some(q)
            }
            Err(e @ SlurmError::Failed { .. }) if !e.is_transient() => {
                return Err(io::Error::other(QueueRefused {
                    error: e,
                    bundle: writer.dir().display().to_string(),
                }));
            }
            Err(e) => {
                if !warned {
                    crate::runner::progress::say(format_args!("warning: squeue failed, retrying: {e}"));
                    warned = true;
                }
                None
            }
        };
        // `hwr-exp cancel` writes the marker before it runs scancel: a snapshot taken after that
        // scancel shows the cancelled tasks gone, and they must not be recorded as lost.
        if let Some(end) = stop(cancel, &marker, detach_on_stop, writer, client, &map) {
            return end;
        }
        let mut near = false;
        let mut ahead = waited.pending.len();
        if let Some(q) = &queue {
            over.extend(asked.iter().filter(|id| !q.arrays.contains_key(id)));
            queued = q.arrays.values().map(|a| a.pending.len()).sum();
            near = super::pieces::boundary_near(q, &order(writer), plan.jobs);
            ahead = super::pieces::tasks_ahead(q, &order(writer));
            let released = apply(client, &govern(q, &order(writer), plan.jobs));
            if !released.is_empty() {
                writer.set_slurm_array_state(&released, crate::slurm::ArrayState::Released)?;
            }
            let reasons = q.pending_reasons(|k| map.index(k).is_some_and(|i| waited.pending.contains(&i)));
            let text = crate::slurm::queue::pending_text(&reasons);
            if text != shown_pending {
                progress.waiting(text.as_deref());
                shown_pending = text;
            }
        }
        let look = Look {
            plan,
            client,
            map: &map,
            progress,
            queue: queue.as_ref(),
            lost_grace,
            total,
        };
        // Runs whose task Slurm no longer lists as active: their folders are looked at.
        let (ended, started) = look.ended(&mut waited);
        changes += started;
        changes += look.record_ended(ended, writer, &mut waited, &mut done)?;
        if waited.pending.is_empty() {
            return Ok(SessionEnd::Complete);
        }
        pause = if near {
            POLL_MIN
        } else {
            next_pause(pause, last_poll.elapsed(), changes, ahead)
        };
        last_poll = Instant::now();
        // Sleep in slices, so that Ctrl-C and `hwr-exp cancel` are seen within POLL_MIN.
        let until = Instant::now() + pause;
        while Instant::now() < until && !cancel.load(Ordering::SeqCst) && !marker.exists() {
            std::thread::sleep(POLL_MIN.min(until.saturating_duration_since(Instant::now())));
        }
    }
}

/// How [`wait()`] ends when the cancel flag (Ctrl-C) is set or the `marker`
/// `slurm/cancel-requested` (`hwr-exp cancel`) exists; `None` while neither is. Stopped by the
/// flag alone with `detach_on_stop`, an error holding [`Detached`] (the arrays stay queued); else
/// every array of `map` is cancelled ([`cancel_arrays`]) and the session ends
/// [`SessionEnd::Interrupted`].
fn stop(
    cancel: &crate::exec::CancelFlag,
    marker: &Path,
    detach_on_stop: bool,
    writer: &BundleWriter,
    client: &SlurmClient,
    map: &TaskMap,
) -> Option<io::Result<SessionEnd>> {
    if !cancel.load(Ordering::SeqCst) && !marker.exists() {
        return None;
    }
    if detach_on_stop && !marker.exists() {
        return Some(Err(io::Error::other(Detached {
            signal: "Ctrl-C or another stop signal",
            bundle: writer.dir().display().to_string(),
        })));
    }
    cancel_arrays(&client.without_cancel(), map);
    Some(Ok(SessionEnd::Interrupted))
}

/// What one poll of [`wait()`] looks at the runs still waited for with.
struct Look<'a> {
    plan: &'a Plan,
    client: &'a SlurmClient,
    map: &'a TaskMap,
    progress: &'a crate::runner::progress::Collect,
    /// This poll's answer from `squeue`; `None` when it failed (transiently).
    queue: Option<&'a crate::slurm::ActiveQueue>,
    /// How long a run whose task ended may stay without run.json before it is lost.
    lost_grace: Duration,
    /// The session's runs.
    total: usize,
}

impl Look<'_> {
    /// The runs of `waited` whose task may have ended (no longer active; without an answer from
    /// squeue, those seen running), and how many tasks were seen starting (shown, and kept in
    /// `waited` with their node).
    fn ended(&self, waited: &mut Waited) -> (Vec<usize>, usize) {
        let mut started = 0usize;
        let mut ended: Vec<usize> = Vec::new();
        for &i in &waited.pending {
            let Some(key) = self.map.task(i) else {
                continue;
            };
            match self.queue {
                Some(q) => match q.activity(key) {
                    Some(crate::slurm::Activity::Started(state, nodes)) => {
                        if let Some(n) = nodes
                            && !waited.seen_on.contains_key(&i)
                        {
                            waited.seen_on.insert(i, n.to_string());
                        }
                        if *state == crate::slurm::TaskState::Running && waited.started.insert(i) {
                            started += 1;
                            self.progress.run_started(&self.plan.run(i));
                        }
                    }
                    Some(crate::slurm::Activity::Pending) => {}
                    None => ended.push(i),
                },
                // No answer from squeue: only runs seen running may have ended.
                None if waited.started.contains(&i) => ended.push(i),
                None => {}
            }
        }
        (ended, started)
    }

    /// Looks at the folders of the `ended` runs: a run.json found is counted (a failed run's once
    /// Slurm says the task ended on its own), a run still without one `lost_grace` after its task
    /// ended, or one Slurm killed, is recorded as lost. Each run finished is forgotten by
    /// `waited`, shown, and counted in `done`. Returns the changes seen.
    ///
    /// # Errors
    /// I/O errors writing bundle.json or a lost run's run.json.
    fn record_ended(
        &self,
        ended: Vec<usize>,
        writer: &mut BundleWriter,
        waited: &mut Waited,
        done: &mut usize,
    ) -> io::Result<usize> {
        let mut changes = 0usize;
        for i in ended {
            let run = self.plan.run(i);
            let path = writer.run_dir(&run).join(files::RUN);
            let Some(key) = self.map.task(i) else {
                continue;
            };
            let read = crate::bundle::read::read_versioned::<RunRecord>(
                &path,
                "format",
                crate::bundle::BUNDLE_FORMAT,
            );
            let lost = match read {
                Ok(record) if !needs_slurms_word(&record) => {
                    writer.count_run(&record)?;
                    changes += 1;
                    *done = finished(
                        waited,
                        i,
                        &run,
                        &record,
                        writer,
                        self.progress,
                        (*done, self.total),
                    );
                    continue;
                }
                Ok(record) => {
                    // A run that failed may have died of Slurm's signal before its task learnt
                    // that Slurm sent it: trust the record once Slurm says the task ended on its
                    // own (its task is no longer active; without an answer from squeue, wait).
                    if self.queue.is_none() {
                        continue;
                    }
                    let account = SlurmAccount::of(self.client, key, None, writer.dir());
                    if !account.killed {
                        writer.count_run(&record)?;
                        changes += 1;
                        *done = finished(
                            waited,
                            i,
                            &run,
                            &record,
                            writer,
                            self.progress,
                            (*done, self.total),
                        );
                        continue;
                    }
                    let started = crate::slurm::log::parse_time(&record.start);
                    let ended = crate::slurm::log::parse_time(&record.end).unwrap_or_else(SystemTime::now);
                    account.lost(key, started, ended)
                }
                Err(_) => {
                    if self.queue.is_none() {
                        continue;
                    }
                    let since = *waited.gone_since.entry(i).or_insert_with(Instant::now);
                    if since.elapsed() < self.lost_grace {
                        continue;
                    }
                    let account = SlurmAccount::of(self.client, key, None, writer.dir());
                    // Read again: the task may have written run.json since the first look.
                    if path.exists() {
                        continue;
                    }
                    let (started, ended) = (account.started, account.ended.unwrap_or_else(SystemTime::now));
                    account.lost(key, started, ended)
                }
            };
            let mut lost = lost;
            // The node the task started on, as this waiter saw it, when Slurm forgot the task.
            if lost.node.is_none() {
                lost.node = waited.seen_on.get(&i).cloned();
            }
            // record_lost counts the run in bundle.json itself.
            let record = writer.record_lost(&run, self.plan.output_format, lost)?;
            changes += 1;
            *done = finished(
                waited,
                i,
                &run,
                &record,
                writer,
                self.progress,
                (*done, self.total),
            );
        }
        Ok(changes)
    }
}

/// Run `i` of the bundle `writer` holds has its run.json `record`, counted in bundle.json: `waited`
/// forgets it, `progress` shows it (with its failure's tail). Returns the runs done now, given
/// `(done, total)` before.
fn finished(
    waited: &mut Waited,
    i: usize,
    run: &crate::plan::PlannedRun,
    record: &RunRecord,
    writer: &BundleWriter,
    progress: &crate::runner::progress::Collect,
    (done, total): (usize, usize),
) -> usize {
    waited.finished(i);
    let failure = RunFailure::read(record, &writer.run_dir(run), FAILURE_TAIL_LINES);
    progress.run_finished(run, record, failure.as_ref(), done + 1, total);
    done + 1
}

/// Whether a run.json a task wrote needs Slurm's word before it is trusted: a run that did not
/// end ok by itself (failed, invalid output) may have been ended by Slurm (its processes got
/// Slurm's SIGTERM before the task did, and exited 143 or died of it). Lost records, the run's
/// own timeouts and ok runs are taken as they are.
fn needs_slurms_word(record: &RunRecord) -> bool {
    record.outcome != crate::bundle::Outcome::Ok
        && matches!(record.termination, Termination::Exited | Termination::Signaled)
}

/// What Slurm says about one task that ended: from `scontrol show job` while Slurm knows it, else
/// the `squeue` entry, else the task's log file (`slurm/logs/A_T.err`, which outlives
/// `MinJobAge`).
#[derive(Debug, Clone)]
struct SlurmAccount {
    /// Slurm itself ended the task ([`crate::slurm::TaskState::killed_by_slurm`], or the log's
    /// `CANCELLED AT` line when Slurm no longer knows it).
    killed: bool,
    /// The account as one line (`PREEMPTED (exit code 0:15): *** JOB 7 ON n1 CANCELLED AT ...
    /// DUE TO PREEMPTION ***`).
    reason: String,
    node: Option<String>,
    job_id: Option<u64>,
    /// When the task's run started (its log's start line, else `StartTime`).
    started: Option<SystemTime>,
    /// When it ended (`EndTime`, else the log's `CANCELLED AT`).
    ended: Option<SystemTime>,
}

impl SlurmAccount {
    fn of(
        client: &SlurmClient,
        key: crate::slurm::TaskKey,
        entry: Option<&crate::slurm::QueueEntry>,
        bundle: &Path,
    ) -> SlurmAccount {
        use crate::slurm::log::{TaskLog, parse_time, task_log};
        let job = client.show_task(key).ok().flatten();
        let log = TaskLog::read(&task_log(bundle, key));
        let said = log.ended_by_slurm.as_ref().map(|e| {
            let line = e.line.find("*** JOB").map_or(e.line.as_str(), |at| &e.line[at..]);
            line.to_string()
        });
        let with_log = |head: String| match &said {
            Some(line) => format!("{head}: {line}"),
            None => head,
        };
        let (killed, reason) = match (&job, entry) {
            (Some(j), _) => (j.state.killed_by_slurm(), with_log(j.describe())),
            (None, Some(e)) => (
                e.state.killed_by_slurm(),
                with_log(format!(
                    "{}{}",
                    e.state,
                    e.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
                )),
            ),
            (None, None) => match &log.ended_by_slurm {
                Some(end) => (
                    true,
                    format!(
                        "{} (no longer known to Slurm; its log {}/logs/{key}.err says: {})",
                        end.state,
                        files::SLURM,
                        said.clone().unwrap_or_default()
                    ),
                ),
                None => (
                    false,
                    "no longer known to Slurm (cancelled while pending, or purged after MinJobAge), and its log says nothing".into(),
                ),
            },
        };
        let node = job
            .as_ref()
            .and_then(|j| j.nodes.clone())
            .or_else(|| entry.and_then(|e| e.nodes.clone()));
        // The reason names the node the task was on (run.json `node` too).
        let reason = match &node {
            Some(n) => format!("{reason} on node {n}"),
            None => reason,
        };
        let started = log
            .started
            .as_deref()
            .and_then(parse_time)
            .or_else(|| job.as_ref()?.start_time.as_deref().and_then(parse_time));
        // Slurm gives whole seconds: the end lies within the second it names, and not after now.
        let ended = job
            .as_ref()
            .and_then(|j| j.end_time.as_deref().and_then(parse_time))
            .or_else(|| log.ended_by_slurm.as_ref()?.at.as_deref().and_then(parse_time))
            .map(|t| (t + Duration::from_millis(999)).min(SystemTime::now()).max(t));
        SlurmAccount {
            killed,
            reason,
            node,
            job_id: job.as_ref().map(|j| j.job_id).or(entry.map(|e| e.job_id)),
            started,
            ended,
        }
    }

    /// The lost record's facts for task `key`, with the run's `started`/`ended` times.
    fn lost(self, key: crate::slurm::TaskKey, started: Option<SystemTime>, ended: SystemTime) -> LostTask {
        LostTask {
            reason: self.reason,
            node: self.node,
            task: Some(SlurmTaskIds {
                job_id: self.job_id,
                array_job_id: Some(key.array_job_id),
                array_task_id: Some(key.task_id),
            }),
            started,
            ended,
        }
    }
}

/// Cancels every array of `map` and waits up to [`CANCEL_WAIT`] until `squeue` shows none of their
/// tasks active (a cancelled task is gone once its processes are).
pub fn cancel_arrays(client: &SlurmClient, map: &TaskMap) {
    let targets: Vec<CancelTarget> = map.job_ids().into_iter().map(CancelTarget::Job).collect();
    if let Err(e) = client.cancel(&targets) {
        crate::runner::progress::say(format_args!("warning: {e}"));
    }
    let until = Instant::now() + CANCEL_WAIT;
    while Instant::now() < until {
        match client.active(&map.job_ids()) {
            Ok(q) if q.is_empty() => return,
            Err(_) => return,
            Ok(_) => std::thread::sleep(POLL),
        }
    }
}
