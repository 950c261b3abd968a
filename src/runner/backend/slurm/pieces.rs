//! Submission in pieces and the release of held arrays one after another (DESIGN 8).
//!
//! Slurm refuses a submission that would bring the job records it holds to `MaxJobCount` (every
//! array task counts, pending ones included, finished ones until purged `MinJobAge` after they
//! ended), and an association's `MaxSubmitJobs` / `GrpSubmitJobs` bounds a user's pending and
//! running tasks. `sbatch` then retries for about two minutes and fails. So a plan is submitted
//! in pieces ([`Feeder`]): only what fits now, measured by one `squeue -a -t all` count
//! ([`SlurmClient::job_records`]), and the next piece as room frees, from the waiter's loop.
//!
//! Within and across pieces the arrays are submitted held; [`govern`] releases them in order,
//! one at a time: the next array once the previous ones have no pending task left, its
//! throttle (`jobs`) lowered to the slots the previous arrays' last running tasks leave and
//! raised as those end. So `jobs` bounds the running tasks over all arrays, as the old
//! `afterany` chain did, without a piece waiting for the previous piece's slowest task.

use std::time::{Duration, Instant};

use super::arrays::{PieceParams, Release, SubmitError, submit};
use crate::bundle::BundleWriter;
use crate::manifest::SlurmConfig;
use crate::plan::Plan;
use crate::slurm::{ActiveQueue, ArrayLimits, JobLimits, SlurmClient, SubmittedArray};

/// How often the waiter counts the cluster's job records while runs wait for room.
pub const ROOM_CHECK: Duration = Duration::from_secs(5);

/// One step [`govern`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `scontrol update JobId=A ArrayTaskThrottle=N`.
    Throttle(u64, u32),
    /// `scontrol release A`.
    Release(u64),
}

/// The steps that keep at most `jobs` tasks of `arrays` (job ids in submission order) running,
/// from the active tasks `queue` lists: while some released array still has pending tasks (the
/// first such is the front), the held arrays after it stay held, and the front's throttle is
/// raised to `jobs` minus the tasks the other arrays still run (those only end: none of them
/// has a pending task, so the sum never exceeds `jobs`). With no released array pending, the
/// first held one is released with throttle `jobs` minus the running tasks, once at least one
/// slot is free. Arrays `queue` does not list are over and ignored.
pub fn govern(queue: &ActiveQueue, arrays: &[u64], jobs: u32) -> Vec<Step> {
    let jobs = jobs.max(1);
    let running = queue.started() as u32;
    let listed = |id: &u64| queue.arrays.get(id).map(|a| (*id, a));
    let front = arrays
        .iter()
        .filter_map(listed)
        .find(|(_, a)| !a.pending.is_empty() && !a.held);
    if let Some((id, a)) = front {
        let others = running - a.started.len() as u32;
        let want = jobs.saturating_sub(others).max(1);
        return match a.throttle {
            Some(t) if t < want => vec![Step::Throttle(id, want)],
            _ => Vec::new(),
        };
    }
    let Some((id, a)) = arrays
        .iter()
        .filter_map(listed)
        .find(|(_, a)| !a.pending.is_empty() && a.held)
    else {
        return Vec::new();
    };
    let free = jobs.saturating_sub(running);
    if free == 0 {
        return Vec::new();
    }
    let mut steps = Vec::new();
    if free < jobs || a.throttle.is_some_and(|t| t > free) {
        steps.push(Step::Throttle(id, free));
    }
    steps.push(Step::Release(id));
    steps
}

/// Whether [`govern`] is about to act: a held array waits behind a front array (the first
/// released one with pending tasks) that has at most `jobs` tasks pending, or behind none; or the
/// front's throttle is below `jobs` (raised as the earlier arrays' last tasks end). The waiter
/// then polls at its shortest pause, so that an array boundary costs no slot a poll's pause
/// (the pause is up to 2 s while runs flow).
pub fn boundary_near(queue: &ActiveQueue, arrays: &[u64], jobs: u32) -> bool {
    let jobs = jobs.max(1);
    let listed = |id: &u64| queue.arrays.get(id);
    let held_waiting = arrays
        .iter()
        .filter_map(listed)
        .any(|a| !a.pending.is_empty() && a.held);
    match arrays
        .iter()
        .filter_map(listed)
        .find(|a| !a.pending.is_empty() && !a.held)
    {
        Some(front) => {
            front.throttle.is_some_and(|t| t < jobs) || (held_waiting && front.pending.len() <= jobs as usize)
        }
        None => held_waiting,
    }
}

/// The tasks of `queue` that can start or end before the waiter has something to do, for its
/// pause ([`super::wait::next_pause`]): while a held array waits, the pending tasks of the front
/// array (the first released one with pending tasks; none: 0), whose last start is when the next
/// array is due; else every task listed (pending and started), whose last end is the bundle's.
pub fn tasks_ahead(queue: &ActiveQueue, arrays: &[u64]) -> usize {
    let listed = |id: &u64| queue.arrays.get(id);
    let held_waiting = arrays
        .iter()
        .filter_map(listed)
        .any(|a| !a.pending.is_empty() && a.held);
    if held_waiting {
        return arrays
            .iter()
            .filter_map(listed)
            .find(|a| !a.pending.is_empty() && !a.held)
            .map_or(0, |a| a.pending.len());
    }
    queue
        .arrays
        .values()
        .map(|a| a.pending.len() + a.started.len())
        .sum()
}

/// Applies [`govern`]'s steps; a failed step is said and tried again at the next poll. Returns
/// the arrays released (for bundle.json's `state`).
pub fn apply(client: &SlurmClient, steps: &[Step]) -> Vec<u64> {
    let mut released = Vec::new();
    for step in steps {
        let result = match *step {
            Step::Throttle(id, n) => client.set_throttle(id, n),
            Step::Release(id) => client.release(&[id]).map(|()| released.push(id)),
        };
        // The array's last tasks ended between the snapshot and the update: nothing to throttle.
        let over = |e: &crate::slurm::SlurmError| {
            matches!(step, Step::Throttle(..)) && e.to_string().contains("Job has already finished")
        };
        if let Err(e) = result
            && !over(&e)
        {
            crate::runner::progress::say(format_args!("warning: {e}"));
            break;
        }
    }
    released
}

/// What limits how many tasks may be submitted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `MaxArraySize`, `max_array_tasks`.
    pub arrays: ArrayLimits,
    /// `MaxJobCount`, `MinJobAge`, accounting.
    pub jobs: JobLimits,
    /// The user's association submit limit (`MaxSubmitJobs` / `GrpSubmitJobs`), when one is set.
    pub user_submit: Option<u64>,
}

impl Limits {
    /// The smallest piece worth an `sbatch`: a tenth of `MaxJobCount` (or of the submit limit),
    /// at most one array, at least one task; smaller pieces wait for more room.
    pub fn min_piece(&self) -> u64 {
        let bound = match (self.jobs.max_job_count, self.user_submit) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return 1,
        };
        (bound / 10)
            .min(u64::from(self.arrays.max_array_size.max(1)))
            .max(1)
    }

    /// Tasks that may be submitted given the cluster's records now: `MaxJobCount - 1 -
    /// records - margin` (Slurm refuses a submission that reaches `MaxJobCount`; the margin of
    /// 1% leaves room for other users' submissions meanwhile) and the user's submit limit minus
    /// the user's pending and running tasks. `u64::MAX` when no limit is known.
    pub fn room(&self, records: crate::slurm::JobRecords) -> u64 {
        let global = self.jobs.max_job_count.map_or(u64::MAX, |max| {
            max.saturating_sub(1 + max / 100).saturating_sub(records.total)
        });
        let user = self
            .user_submit
            .map_or(u64::MAX, |max| max.saturating_sub(records.user_active));
        global.min(user)
    }

    /// Whether a count is needed at all (some limit is known).
    pub fn bounded(&self) -> bool {
        self.jobs.max_job_count.is_some() || self.user_submit.is_some()
    }
}

/// Reads [`Limits`] from the cluster: `scontrol show config`, and `sacctmgr` where the cluster
/// keeps accounting (skipped without it).
///
/// # Errors
/// A message when `scontrol show config` fails; an `sacctmgr` failure is a warning (no submit
/// limit assumed).
pub fn read_limits(
    client: &SlurmClient,
    arrays: ArrayLimits,
    account: Option<&str>,
) -> Result<Limits, String> {
    let jobs = client.job_limits().map_err(|e| e.to_string())?;
    let user_submit = if jobs.accounting {
        match client.user_submit_limit(&user_name(), account) {
            Ok(limit) => limit,
            Err(e) => {
                crate::runner::progress::say(format_args!(
                    "warning: cannot read the association's submit limit ({e}); none assumed"
                ));
                None
            }
        }
    } else {
        None
    };
    Ok(Limits {
        arrays,
        jobs,
        user_submit,
    })
}

/// This process's user name as Slurm shows it (`%u`): `USER`, else the uid's name from
/// `/etc/passwd`, else the uid.
pub fn user_name() -> String {
    if let Ok(u) = std::env::var("USER")
        && !u.is_empty()
    {
        return u;
    }
    let uid = rustix::process::getuid().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

/// Runs not yet submitted, and when to look for room for them.
#[derive(Debug, Clone)]
pub struct Feeder {
    /// Plan indices still to submit, ascending.
    unsubmitted: std::collections::VecDeque<usize>,
    limits: Limits,
    config: SlurmConfig,
    cpus_per_task: usize,
    next_check: Option<Instant>,
    said_waiting: bool,
    /// Feeds an adaptive round ([`Feeder::for_round`]): its last piece is not announced (the
    /// round's own line says what was submitted).
    round: bool,
}

impl Feeder {
    /// A feeder of plan `indices` (any order).
    pub fn new(indices: &[usize], limits: Limits, config: &SlurmConfig, cpus_per_task: usize) -> Self {
        let mut sorted = indices.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        Feeder {
            unsubmitted: sorted.into(),
            limits,
            config: config.clone(),
            cpus_per_task,
            next_check: None,
            said_waiting: false,
            round: false,
        }
    }

    /// A feeder of the runs `indices` of a further adaptive round, with this feeder's limits,
    /// `[executor]` keys and `--cpus-per-task` (its own runs are not taken over).
    pub fn for_round(&self, indices: &[usize]) -> Self {
        Feeder {
            round: true,
            ..Feeder::new(indices, self.limits, &self.config, self.cpus_per_task)
        }
    }

    /// Runs still to submit.
    pub fn remaining(&self) -> usize {
        self.unsubmitted.len()
    }

    /// Submits the next piece when it is time to look ([`ROOM_CHECK`]) and room allows at least
    /// [`Limits::min_piece`] tasks (or every remaining run): the first runs still unsubmitted,
    /// as many as fit, split into arrays under `MaxArraySize` and recorded in bundle.json
    /// ([`super::arrays::submit`]). Returns the arrays submitted (none when there is no room).
    /// While `queued` (the bundle's tasks Slurm lists as pending, held ones included, at the
    /// last poll) is at least [`Limits::min_piece`], Slurm has work enough: the records are not
    /// counted (each count lists every record of the cluster, `squeue -a -t all`) and the next
    /// piece waits, bigger for it.
    ///
    /// # Errors
    /// [`SubmitError`] when the count or a submission fails (arrays submitted by
    /// this call before the failure are cancelled; the runs stay unsubmitted).
    pub fn feed(
        &mut self,
        plan: &Plan,
        writer: &mut BundleWriter,
        client: &SlurmClient,
        release: Release,
        quiet: bool,
        queued: usize,
    ) -> Result<Vec<SubmittedArray>, SubmitError> {
        if self.unsubmitted.is_empty() || queued as u64 >= self.limits.min_piece() {
            return Ok(Vec::new());
        }
        let now = Instant::now();
        if self.next_check.is_some_and(|t| now < t) {
            return Ok(Vec::new());
        }
        self.next_check = Some(now + ROOM_CHECK);
        let left = self.unsubmitted.len() as u64;
        let room = if self.limits.bounded() {
            let records = client
                .job_records(&user_name())
                .map_err(|e| SubmitError::Failed(e.to_string()))?;
            self.limits.room(records)
        } else {
            u64::MAX
        };
        let take = room.min(left);
        if take < self.limits.min_piece().min(left) {
            if !quiet && !self.said_waiting {
                self.said_waiting = true;
                crate::runner::progress::say(format_args!(
                    "{} wait for room under the cluster's limits (MaxJobCount {}{}): submitted as earlier tasks leave Slurm's memory",
                    crate::runner::progress::runs(self.unsubmitted.len()),
                    self.limits
                        .jobs
                        .max_job_count
                        .map_or("unknown".into(), |n| n.to_string()),
                    self.limits
                        .user_submit
                        .map(|n| format!(", your submit limit {n}"))
                        .unwrap_or_default()
                ));
            }
            return Ok(Vec::new());
        }
        let piece: Vec<usize> = self.unsubmitted.iter().take(take as usize).copied().collect();
        let params = PieceParams {
            config: &self.config,
            cpus_per_task: self.cpus_per_task,
            limits: self.limits.arrays,
            release,
        };
        let arrays = submit(plan, &piece, writer, &params, client)?;
        self.unsubmitted.drain(..piece.len());
        self.said_waiting = false;
        if !quiet && (!self.unsubmitted.is_empty() || (!self.round && piece.len() < plan.len())) {
            crate::runner::progress::say(format_args!(
                "submitted {} in {} array(s); {} left to submit as room frees",
                crate::runner::progress::runs(piece.len()),
                arrays.len(),
                self.unsubmitted.len()
            ));
        }
        Ok(arrays)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::{ActiveArray, TaskState};

    fn array(pending: &[u32], held: bool, throttle: Option<u32>, running: &[u32]) -> ActiveArray {
        ActiveArray {
            pending: pending.to_vec(),
            held,
            throttle,
            started: running
                .iter()
                .map(|&t| (t, (TaskState::Running, Some("n1".into()))))
                .collect(),
            reasons: Vec::new(),
        }
    }

    fn queue(arrays: Vec<(u64, ActiveArray)>) -> ActiveQueue {
        ActiveQueue {
            arrays: arrays.into_iter().collect(),
            lines: 0,
        }
    }

    #[test]
    fn an_array_boundary_is_near_when_the_front_runs_low_or_its_throttle_is_lowered() {
        // Plenty pending in the front array: nothing to do soon.
        let q = queue(vec![
            (10, array(&[5, 6, 7, 8, 9], false, Some(4), &[1, 2, 3, 4])),
            (11, array(&[0, 1], true, Some(4), &[])),
        ]);
        assert!(!boundary_near(&q, &[10, 11], 4));
        // The front's last 4 pending: the held array is released soon.
        let q = queue(vec![
            (10, array(&[6, 7, 8, 9], false, Some(4), &[2, 3, 4, 5])),
            (11, array(&[0, 1], true, Some(4), &[])),
        ]);
        assert!(boundary_near(&q, &[10, 11], 4));
        // Released with a lowered throttle: raised as the earlier array's tasks end.
        let q = queue(vec![
            (10, array(&[], false, Some(4), &[8, 9])),
            (11, array(&[1], false, Some(2), &[0])),
        ]);
        assert!(boundary_near(&q, &[10, 11], 4));
        // One array, at its full throttle: no boundary at all.
        let q = queue(vec![(10, array(&[3], false, Some(4), &[0, 1, 2]))]);
        assert!(!boundary_near(&q, &[10], 4));
    }

    #[test]
    fn the_tasks_ahead_are_the_front_arrays_pending_ones_while_an_array_is_held_else_all_listed() {
        // A held array waits: the front's 5 pending tasks, not its running ones nor the held 2.
        let q = queue(vec![
            (10, array(&[5, 6, 7, 8, 9], false, Some(4), &[1, 2, 3, 4])),
            (11, array(&[0, 1], true, Some(4), &[])),
        ]);
        assert_eq!(tasks_ahead(&q, &[10, 11]), 5);
        // Held behind no released array with pending tasks: the release is due now.
        let q = queue(vec![
            (10, array(&[], false, Some(4), &[8, 9])),
            (11, array(&[0, 1], true, Some(4), &[])),
        ]);
        assert_eq!(tasks_ahead(&q, &[10, 11]), 0);
        // Nothing held: every task not over, pending and started, of every array.
        let q = queue(vec![
            (10, array(&[], false, Some(4), &[8, 9])),
            (11, array(&[3, 4, 5], false, Some(2), &[1, 2])),
        ]);
        assert_eq!(tasks_ahead(&q, &[10, 11]), 7);
        assert_eq!(tasks_ahead(&queue(vec![]), &[10, 11]), 0);
    }

    #[test]
    fn the_first_held_array_is_released_with_the_free_slots() {
        // Nothing runs yet: release the first array as submitted (%4).
        let q = queue(vec![
            (10, array(&[0, 1, 2, 3, 4], true, Some(4), &[])),
            (11, array(&[0, 1], true, Some(4), &[])),
        ]);
        assert_eq!(govern(&q, &[10, 11], 4), vec![Step::Release(10)]);
        // Array 10 released and pending: 11 stays held.
        let q = queue(vec![
            (10, array(&[3, 4], false, Some(4), &[0, 1, 2])),
            (11, array(&[0, 1], true, Some(4), &[])),
        ]);
        assert_eq!(govern(&q, &[10, 11], 4), vec![]);
    }

    #[test]
    fn a_straggler_does_not_hold_the_next_array_back() {
        // Array 10 has no pending task, one straggler runs: 11 starts with 3 of the 4 slots.
        let q = queue(vec![
            (10, array(&[], false, Some(4), &[4])),
            (11, array(&[0, 1, 2], true, Some(4), &[])),
        ]);
        assert_eq!(
            govern(&q, &[10, 11], 4),
            vec![Step::Throttle(11, 3), Step::Release(11)]
        );
        // Then 11 runs 3, the straggler still runs: nothing to change.
        let q = queue(vec![
            (10, array(&[], false, Some(4), &[4])),
            (11, array(&[3], false, Some(3), &[0, 1, 2])),
        ]);
        assert_eq!(govern(&q, &[10, 11], 4), vec![]);
        // The straggler ended: 11 gets its fourth slot back.
        let q = queue(vec![(11, array(&[3], false, Some(3), &[0, 1, 2]))]);
        assert_eq!(govern(&q, &[10, 11], 4), vec![Step::Throttle(11, 4)]);
        // Every slot taken by the previous array: wait.
        let q = queue(vec![
            (10, array(&[], false, Some(2), &[7, 8])),
            (11, array(&[0], true, Some(2), &[])),
        ]);
        assert_eq!(govern(&q, &[10, 11], 2), vec![]);
        // Arrays Slurm no longer lists are over.
        assert_eq!(govern(&queue(vec![]), &[10, 11], 2), vec![]);
    }

    fn limits(max_job_count: Option<u64>, user_submit: Option<u64>) -> Limits {
        Limits {
            arrays: ArrayLimits {
                max_array_size: 11,
                max_array_tasks: None,
            },
            jobs: JobLimits {
                max_job_count,
                min_job_age: Some(300),
                accounting: user_submit.is_some(),
            },
            user_submit,
        }
    }

    #[test]
    fn room_is_what_max_job_count_and_the_submit_limit_leave() {
        let records = |total, user_active| crate::slurm::JobRecords { total, user_active };
        // MaxJobCount=30: at most 29 records; 1% of 30 rounds to no margin.
        assert_eq!(limits(Some(30), None).room(records(0, 0)), 29);
        assert_eq!(limits(Some(30), None).room(records(25, 25)), 4);
        assert_eq!(limits(Some(30), None).room(records(40, 0)), 0);
        // 10,000: a margin of 100.
        assert_eq!(limits(Some(10_000), None).room(records(0, 0)), 9_899);
        assert_eq!(limits(Some(10_000), Some(500)).room(records(100, 80)), 420);
        assert_eq!(limits(None, None).room(records(5, 5)), u64::MAX);
        assert!(!limits(None, None).bounded());
        assert_eq!(limits(Some(30), None).min_piece(), 3);
        assert_eq!(limits(Some(10_000), None).min_piece(), 11, "at most one array");
        assert_eq!(limits(Some(5), None).min_piece(), 1);
        assert_eq!(limits(None, None).min_piece(), 1);
    }
}
