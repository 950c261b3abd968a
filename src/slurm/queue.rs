//! Queue state of array tasks as `squeue` and `scontrol show job` report it (DESIGN 8).
//!
//! `squeue -h -r -t all -j IDS -o FORMAT` ([`SQUEUE_FORMAT`]) prints one line per array task, also
//! for tasks still pending inside the array's meta record (`-r`), and keeps finished tasks
//! (`-t all`) until Slurm purges them `MinJobAge` seconds after they end (default 300 s). A task
//! that was cancelled while still pending disappears at once (no line, and `scontrol show job`
//! says `Job A_T not found`): absent from the queue is a normal answer, not an error.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// `squeue -o` format for [`parse_squeue`]: job id (`%A`, the task's own id once it started; the
/// array's id while pending), array job id (`%F`), array task id (`%K`, `N/A` for a job that is
/// not an array), state (`%T`), reason (`%r`), node list (`%N`, empty while pending), separated
/// by `|` (none of these fields contains one).
pub const SQUEUE_FORMAT: &str = "%A|%F|%K|%T|%r|%N";

/// A job's state as `squeue %T` and `scontrol show job`'s `JobState=` spell it (upper case).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Waiting for resources, a throttle (`JobArrayTaskLimit`), a dependency or a hold.
    Pending,
    /// Allocated and running.
    Running,
    /// Suspended by an administrator or gang scheduling.
    Suspended,
    /// Finished; some processes may still be cleaned up.
    Completing,
    /// The batch script exited 0.
    Completed,
    /// Cancelled by `scancel` (user or administrator).
    Cancelled,
    /// The batch script exited non-zero or could not be launched.
    Failed,
    /// Killed at Slurm's time limit (`--time`).
    Timeout,
    /// Its node failed.
    NodeFail,
    /// Preempted by a higher-priority job.
    Preempted,
    /// Its node could not boot.
    BootFail,
    /// Killed at its `--deadline`.
    Deadline,
    /// Killed for exceeding its memory limit.
    OutOfMemory,
    /// Being requeued.
    Requeued,
    /// Any other state word, kept as printed (`RESIZING`, `REVOKED`, `SPECIAL_EXIT`, ...).
    #[serde(untagged)]
    Other(String),
}

impl TaskState {
    /// Parses a state word (`COMPLETED`; scontrol may add flags after `+`, which are dropped).
    pub fn parse(word: &str) -> TaskState {
        let word = word.split('+').next().unwrap_or(word).trim();
        match word {
            "PENDING" => TaskState::Pending,
            "RUNNING" => TaskState::Running,
            "SUSPENDED" => TaskState::Suspended,
            "COMPLETING" => TaskState::Completing,
            "COMPLETED" => TaskState::Completed,
            "CANCELLED" => TaskState::Cancelled,
            "FAILED" => TaskState::Failed,
            "TIMEOUT" => TaskState::Timeout,
            "NODE_FAIL" => TaskState::NodeFail,
            "PREEMPTED" => TaskState::Preempted,
            "BOOT_FAIL" => TaskState::BootFail,
            "DEADLINE" => TaskState::Deadline,
            "OUT_OF_MEMORY" => TaskState::OutOfMemory,
            "REQUEUED" => TaskState::Requeued,
            other => TaskState::Other(other.to_string()),
        }
    }

    /// The word as Slurm prints it.
    pub fn as_str(&self) -> &str {
        match self {
            TaskState::Pending => "PENDING",
            TaskState::Running => "RUNNING",
            TaskState::Suspended => "SUSPENDED",
            TaskState::Completing => "COMPLETING",
            TaskState::Completed => "COMPLETED",
            TaskState::Cancelled => "CANCELLED",
            TaskState::Failed => "FAILED",
            TaskState::Timeout => "TIMEOUT",
            TaskState::NodeFail => "NODE_FAIL",
            TaskState::Preempted => "PREEMPTED",
            TaskState::BootFail => "BOOT_FAIL",
            TaskState::Deadline => "DEADLINE",
            TaskState::OutOfMemory => "OUT_OF_MEMORY",
            TaskState::Requeued => "REQUEUED",
            TaskState::Other(s) => s,
        }
    }

    /// Whether the task is over and will not run (again) by itself: every state except pending,
    /// running, suspended, completing, requeued and unknown words (an unknown word counts as
    /// still active, so a waiter keeps waiting rather than calling a live task lost).
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            TaskState::Completed
                | TaskState::Cancelled
                | TaskState::Failed
                | TaskState::Timeout
                | TaskState::NodeFail
                | TaskState::Preempted
                | TaskState::BootFail
                | TaskState::Deadline
                | TaskState::OutOfMemory
        ) || matches!(self, TaskState::Other(s) if s == "SPECIAL_EXIT" || s == "REVOKED")
    }
}

impl TaskState {
    /// Whether Slurm itself ended the task (`scancel`, time limit, preemption, node failure,
    /// deadline, boot failure, Slurm's memory limit): a run ended so did not fail on its own,
    /// whatever exit code its processes gave when signalled.
    pub fn killed_by_slurm(&self) -> bool {
        matches!(
            self,
            TaskState::Cancelled
                | TaskState::Timeout
                | TaskState::Preempted
                | TaskState::NodeFail
                | TaskState::Deadline
                | TaskState::BootFail
                | TaskState::OutOfMemory
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One array task: the array's job id and the task id (`A_T`, as `scancel` and `scontrol` take it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskKey {
    /// The array's job id (sbatch's answer; `%F`, `ArrayJobId=`).
    pub array_job_id: u64,
    /// The task id (`%K`, `ArrayTaskId=`, `SLURM_ARRAY_TASK_ID`).
    pub task_id: u32,
}

impl fmt::Display for TaskKey {
    /// `A_T`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.array_job_id, self.task_id)
    }
}

/// One line of `squeue -o` [`SQUEUE_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// `%A`: the task's own job id once started (`SLURM_JOB_ID` inside it); the array's job id
    /// while pending, and for the task that started last.
    pub job_id: u64,
    /// `%F`: the array's job id (equal to `job_id` for a job that is not an array).
    pub array_job_id: u64,
    /// `%K`: the task id; `None` for a job that is not an array.
    pub task_id: Option<u32>,
    /// `%T`.
    pub state: TaskState,
    /// `%r`: why it waits or how it ended (`JobArrayTaskLimit`, `Dependency`, `NonZeroExitCode`,
    /// `TimeLimit`); `None` when Slurm says `None`.
    pub reason: Option<String>,
    /// `%N`: node list; `None` while pending.
    pub nodes: Option<String>,
}

impl QueueEntry {
    /// The `A_T` key of an array task; `None` for a job that is not an array.
    pub fn key(&self) -> Option<TaskKey> {
        self.task_id.map(|task_id| TaskKey {
            array_job_id: self.array_job_id,
            task_id,
        })
    }
}

/// A line [`parse_squeue`] could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read squeue line {line:?}: {reason}")]
pub struct QueueParseError {
    /// The line as printed.
    pub line: String,
    /// What is wrong with it.
    pub reason: String,
}

/// `None`-like words Slurm prints for an empty field.
fn optional(field: &str) -> Option<String> {
    let f = field.trim();
    (!f.is_empty() && f != "None" && f != "(null)" && f != "N/A").then(|| f.to_string())
}

/// Parses `squeue -h -r -o` [`SQUEUE_FORMAT`] output (blank lines skipped). An unexpanded array
/// line (`%K` = `2-5%2`, printed without `-r`) is an error: ask with `-r`.
///
/// # Errors
/// [`QueueParseError`] for the first line with the wrong field count or a bad number.
pub fn parse_squeue(text: &str) -> Result<Vec<QueueEntry>, QueueParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |reason: String| QueueParseError {
            line: line.to_string(),
            reason,
        };
        let fields: Vec<&str> = line.split('|').collect();
        let [job, array_job, task, state, reason, nodes] = fields[..] else {
            return Err(bad(format!(
                "expected 6 `|`-separated fields, found {}",
                fields.len()
            )));
        };
        let id = |s: &str, what: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("{what} `{s}` is not a job id")))
        };
        let task_id = match task.trim() {
            "N/A" => None,
            t => Some(
                t.parse::<u32>()
                    .map_err(|_| bad(format!("task id `{t}` is not one number (use squeue -r)")))?,
            ),
        };
        out.push(QueueEntry {
            job_id: id(job, "job id")?,
            array_job_id: id(array_job, "array job id")?,
            task_id,
            state: TaskState::parse(state),
            reason: optional(reason),
            nodes: optional(nodes),
        });
    }
    Ok(out)
}

/// The queue's view of array tasks at one moment: task key -> entry. Tasks Slurm no longer
/// knows (purged, or cancelled while pending) are simply absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Array tasks by key (entries of jobs that are not arrays are left out).
    pub tasks: BTreeMap<TaskKey, QueueEntry>,
}

impl QueueSnapshot {
    /// Builds the map from parsed lines; a later line for the same task replaces an earlier one.
    pub fn from_entries(entries: impl IntoIterator<Item = QueueEntry>) -> Self {
        let tasks = entries
            .into_iter()
            .filter_map(|e| e.key().map(|k| (k, e)))
            .collect();
        QueueSnapshot { tasks }
    }

    /// The entry of one task, `None` when Slurm does not list it.
    pub fn get(&self, key: TaskKey) -> Option<&QueueEntry> {
        self.tasks.get(&key)
    }

    /// Number of listed tasks in each state.
    pub fn counts(&self) -> BTreeMap<TaskState, usize> {
        let mut out = BTreeMap::new();
        for e in self.tasks.values() {
            *out.entry(e.state.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Whether some listed task is not finished (pending, running, ...).
    pub fn any_active(&self) -> bool {
        self.tasks.values().any(|e| !e.state.is_finished())
    }

    /// Why the listed tasks that `wanted` keeps wait: pending tasks counted by Slurm's reason
    /// (`%r`), see [`pending_text`].
    pub fn pending_reasons(&self, mut wanted: impl FnMut(TaskKey) -> bool) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (k, e) in &self.tasks {
            if e.state == TaskState::Pending && wanted(*k) {
                let reason = e.reason.clone().unwrap_or_else(|| "None".into());
                *out.entry(reason).or_insert(0) += 1;
            }
        }
        out
    }
}

/// Pending tasks by reason in words, most frequent first: `3 pending (2 Resources, 1
/// PartitionTimeLimit)`, `1 pending (ReqNodeNotAvail, UnavailableNodes:n2)`; `None` when
/// nothing is pending.
pub fn pending_text(reasons: &BTreeMap<String, usize>) -> Option<String> {
    let total: usize = reasons.values().sum();
    if total == 0 {
        return None;
    }
    let mut by: Vec<(&String, &usize)> = reasons.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = if by.len() == 1 {
        vec![by[0].0.clone()]
    } else {
        by.iter().map(|(r, n)| format!("{n} {r}")).collect()
    };
    Some(format!("{total} pending ({})", parts.join(", ")))
}

/// `squeue -t` states of a task that is not over: the complement of [`TaskState::is_finished`]
/// (`squeue -t` takes these words; `-t all` would add every finished task still in memory).
pub const ACTIVE_STATES: &str = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,REQUEUE_HOLD,REQUEUE_FED,RESIZING,SIGNALING,STAGE_OUT,STOPPED";

/// `squeue -o` format for [`parse_active`]: array job id (`%F`), task ids (`%K`: one id for a
/// started task, an unexpanded spec such as `2-9%2` for an array's pending rest), state (`%T`),
/// reason (`%r`), node list (`%N`).
pub const ACTIVE_FORMAT: &str = "%F|%K|%T|%r|%N";

/// The reason `squeue %r` gives a job held by `sbatch --hold` or `scontrol hold`.
pub const HELD_REASON: &str = "JobHeldUser";

/// One array in [`ActiveQueue`]: its pending tasks (as ids) and its started, not yet finished
/// tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveArray {
    /// Ids of tasks still pending, sorted.
    pub pending: Vec<u32>,
    /// Whether the pending rest is held (`JobHeldUser`).
    pub held: bool,
    /// The throttle of the pending rest (`%N` of its spec); `None` when unlimited or unknown.
    pub throttle: Option<u32>,
    /// Started tasks not yet over (running, completing, suspended, ...): id -> (state, nodes).
    pub started: BTreeMap<u32, (TaskState, Option<String>)>,
    /// Each pending line's reason (`%r`, `None` as `"None"`) and its number of tasks.
    pub reasons: Vec<(String, Vec<u32>)>,
}

/// The active (not finished) tasks of some arrays, from one `squeue -h -j IDS -t`
/// [`ACTIVE_STATES`] `-o` [`ACTIVE_FORMAT`] call, without `-r`: an array's pending rest is one
/// line whatever its size, so the answer has about one line per running task plus one per
/// array. A task of those arrays that is absent has ended (or was never submitted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveQueue {
    /// By array job id.
    pub arrays: BTreeMap<u64, ActiveArray>,
    /// Lines read (the answer's size).
    pub lines: usize,
}

/// Where [`ActiveQueue::activity`] finds a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity<'a> {
    /// In its array's pending rest.
    Pending,
    /// Started and not over: its state and nodes.
    Started(&'a TaskState, Option<&'a str>),
}

impl ActiveQueue {
    /// Where the task is, `None` when it is not active (ended, or unknown to Slurm).
    pub fn activity(&self, key: TaskKey) -> Option<Activity<'_>> {
        let array = self.arrays.get(&key.array_job_id)?;
        if let Some((state, nodes)) = array.started.get(&key.task_id) {
            return Some(Activity::Started(state, nodes.as_deref()));
        }
        array
            .pending
            .binary_search(&key.task_id)
            .is_ok()
            .then_some(Activity::Pending)
    }

    /// Why the pending tasks that `wanted` keeps wait, counted by Slurm's reason (`%r`) as
    /// [`QueueSnapshot::pending_reasons`] does; a hold hwr-exp put on an array that waits for
    /// earlier ones is `held for earlier arrays`.
    pub fn pending_reasons(&self, mut wanted: impl FnMut(TaskKey) -> bool) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (&array_job_id, a) in &self.arrays {
            for (reason, ids) in &a.reasons {
                let n = ids
                    .iter()
                    .filter(|&&task_id| {
                        wanted(TaskKey {
                            array_job_id,
                            task_id,
                        })
                    })
                    .count();
                if n > 0 {
                    let reason = if reason == HELD_REASON {
                        "held for earlier arrays".to_string()
                    } else {
                        reason.clone()
                    };
                    *out.entry(reason).or_insert(0) += n;
                }
            }
        }
        out
    }

    /// Started tasks over all arrays.
    pub fn started(&self) -> usize {
        self.arrays.values().map(|a| a.started.len()).sum()
    }

    /// Whether no task is active.
    pub fn is_empty(&self) -> bool {
        self.arrays
            .values()
            .all(|a| a.pending.is_empty() && a.started.is_empty())
    }
}

/// Parses `squeue -h -t ACTIVE_STATES -o` [`ACTIVE_FORMAT`] output (without `-r`). Lines of jobs
/// that are not arrays (`%K` = `N/A`) are skipped.
///
/// # Errors
/// [`QueueParseError`] for the first line with the wrong field count, a bad job id or task spec.
pub fn parse_active(text: &str) -> Result<ActiveQueue, QueueParseError> {
    let mut out = ActiveQueue::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        out.lines += 1;
        let bad = |reason: String| QueueParseError {
            line: line.to_string(),
            reason,
        };
        let fields: Vec<&str> = line.split('|').collect();
        let [array_job, tasks, state, reason, nodes] = fields[..] else {
            return Err(bad(format!(
                "expected 5 `|`-separated fields, found {}",
                fields.len()
            )));
        };
        let tasks = tasks.trim();
        if tasks == "N/A" {
            continue;
        }
        let array_job_id: u64 = array_job
            .trim()
            .parse()
            .map_err(|_| bad(format!("array job id `{array_job}` is not a job id")))?;
        let state = TaskState::parse(state);
        let entry = out.arrays.entry(array_job_id).or_default();
        if state == TaskState::Pending {
            let spec = super::array::ArraySpec::parse(tasks).map_err(|e| bad(e.to_string()))?;
            entry.pending.extend_from_slice(spec.task_ids());
            if spec.throttle.is_some() {
                entry.throttle = spec.throttle;
            }
            entry.held |= reason.trim() == HELD_REASON;
            entry.reasons.push((
                optional(reason).unwrap_or_else(|| "None".into()),
                spec.task_ids().to_vec(),
            ));
        } else {
            let id: u32 = tasks
                .parse()
                .map_err(|_| bad(format!("task id `{tasks}` of a started task is not one number")))?;
            entry.started.insert(id, (state, optional(nodes)));
        }
    }
    for a in out.arrays.values_mut() {
        a.pending.sort_unstable();
        a.pending.dedup();
    }
    Ok(out)
}

/// `squeue -o` format for [`parse_job_records`]: task ids (`%K`), state (`%T`), user (`%u`).
pub const RECORDS_FORMAT: &str = "%K|%T|%u";

/// What counts against the cluster's submission limits at one moment, from `squeue -h -a -t all
/// -o` [`RECORDS_FORMAT`] (every user's jobs, finished ones still in memory included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobRecords {
    /// Job records counted as `MaxJobCount` counts them: each task of an array's pending rest
    /// counts one, as does every other job or task, finished ones until purged (`MinJobAge`).
    pub total: u64,
    /// Pending or running jobs (tasks counted one by one) of the user asked about: what the
    /// association's `MaxSubmitJobs` counts.
    pub user_active: u64,
}

/// Parses `squeue -h -a -t all -o` [`RECORDS_FORMAT`] output, counting `user_active` for `user`.
///
/// # Errors
/// [`QueueParseError`] for a line without three fields or a task spec that does not parse.
pub fn parse_job_records(text: &str, user: &str) -> Result<JobRecords, QueueParseError> {
    let mut out = JobRecords::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |reason: String| QueueParseError {
            line: line.to_string(),
            reason,
        };
        let fields: Vec<&str> = line.split('|').collect();
        let [tasks, state, owner] = fields[..] else {
            return Err(bad(format!(
                "expected 3 `|`-separated fields, found {}",
                fields.len()
            )));
        };
        let n = match tasks.trim() {
            "N/A" => 1,
            t => super::array::ArraySpec::parse(t)
                .map_err(|e| bad(e.to_string()))?
                .task_ids()
                .len() as u64,
        };
        out.total += n;
        if owner.trim() == user && !TaskState::parse(state).is_finished() {
            out.user_active += n;
        }
    }
    Ok(out)
}

/// One record of `scontrol -o show job A_T`: the fields hwr-exp reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// `JobId=`: the task's own job id.
    pub job_id: u64,
    /// `ArrayJobId=`; `None` for a job that is not an array.
    pub array_job_id: Option<u64>,
    /// `ArrayTaskId=` as printed: one id for a task (`2`), a spec for the pending rest of an
    /// array (`1,3%1`).
    pub array_task_id: Option<String>,
    /// `JobState=`.
    pub state: TaskState,
    /// `Reason=`; `None` when Slurm says `None`.
    pub reason: Option<String>,
    /// `ExitCode=` as printed, `status:signal` (`3:0` exited 3; `0:9` killed by signal 9).
    pub exit_code: Option<String>,
    /// `NodeList=`; `None` while pending.
    pub nodes: Option<String>,
    /// `StartTime=` as printed (local time, `2026-11-30T18:59:04`); `None` when `Unknown`/`None`.
    pub start_time: Option<String>,
    /// `EndTime=` as printed; `None` when unknown.
    pub end_time: Option<String>,
}

impl JobRecord {
    /// One line for a report: `STATE`, then `(reason, exit code X:Y)` where Slurm has them,
    /// e.g. `CANCELLED`, `TIMEOUT (TimeLimit, exit code 0:15)`, `FAILED (NonZeroExitCode, exit code 3:0)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = &self.reason {
            parts.push(r.clone());
        }
        if let Some(code) = self.exit_code.as_deref().filter(|c| *c != "0:0") {
            parts.push(format!("exit code {code}"));
        }
        if parts.is_empty() {
            self.state.to_string()
        } else {
            format!("{} ({})", self.state, parts.join(", "))
        }
    }
}

/// Parses `scontrol -o show job` output: one record per line of `Key=Value` words. Only the
/// fields of [`JobRecord`] are read; their values never contain spaces. (`JobName=` may, which
/// is why hwr-exp's own job names have none.) Lines without `JobId=` are skipped.
///
/// # Errors
/// A message naming the line when `JobId=` or `JobState=` is missing or not a number.
pub fn parse_scontrol_jobs(text: &str) -> Result<Vec<JobRecord>, QueueParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with("JobId=")) {
        let bad = |reason: &str| QueueParseError {
            line: line.to_string(),
            reason: reason.to_string(),
        };
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for word in line.split_whitespace() {
            if let Some((k, v)) = word.split_once('=') {
                // First occurrence wins: JobId= opens the record, later words cannot replace it.
                fields.entry(k).or_insert(v);
            }
        }
        let job_id = fields
            .get("JobId")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad("JobId= is not a number"))?;
        let state = fields
            .get("JobState")
            .map(|s| TaskState::parse(s))
            .ok_or_else(|| bad("no JobState="))?;
        let text = |k: &str| fields.get(k).and_then(|v| optional(v));
        let time = |k: &str| text(k).filter(|v| v != "Unknown");
        out.push(JobRecord {
            job_id,
            array_job_id: fields.get("ArrayJobId").and_then(|v| v.parse().ok()),
            array_task_id: text("ArrayTaskId"),
            state,
            reason: text("Reason"),
            exit_code: text("ExitCode"),
            nodes: text("NodeList"),
            start_time: time("StartTime"),
            end_time: time("EndTime"),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `squeue -h -r -t all -j 7 -o '%A|%F|%K|%T|%r|%N'` after one task exited 3, one was killed
    /// by a signal, one was cancelled (Slurm 22.05.8, test cluster).
    const SQUEUE: &str = "\
11|7|2|FAILED|JobLaunchFailure|vm
10|7|1|FAILED|NonZeroExitCode|vm
7|7|3|CANCELLED|None|vm
9|7|0|RUNNING|None|vm
12|12|1|PENDING|JobArrayTaskLimit|
2|2|N/A|COMPLETED|None|vm
";

    /// `squeue -h -j 5,8 -t ACTIVE_STATES -o '%F|%K|%T|%r|%N'` (Slurm 22.05.8, test cluster): array
    /// 5 with two running tasks and its pending rest, array 8 held.
    const ACTIVE: &str = "\
5|2-10%2|PENDING|JobArrayTaskLimit|
5|1|RUNNING|None|vm
5|0|COMPLETING|None|vm
8|0-3,7%2|PENDING|JobHeldUser|
9|N/A|RUNNING|None|vm
";

    #[test]
    fn parses_the_compact_active_listing() {
        let q = parse_active(ACTIVE).unwrap();
        assert_eq!(q.lines, 5);
        assert_eq!(q.arrays.len(), 2, "the job that is not an array is left out");
        let key = |array_job_id, task_id| TaskKey {
            array_job_id,
            task_id,
        };
        assert_eq!(q.activity(key(5, 2)), Some(Activity::Pending));
        assert_eq!(q.activity(key(5, 10)), Some(Activity::Pending));
        assert_eq!(
            q.activity(key(5, 1)),
            Some(Activity::Started(&TaskState::Running, Some("vm")))
        );
        assert_eq!(
            q.activity(key(5, 0)),
            Some(Activity::Started(&TaskState::Completing, Some("vm")))
        );
        assert_eq!(q.activity(key(5, 11)), None, "not active: ended");
        assert_eq!(q.activity(key(8, 5)), None);
        assert_eq!(q.activity(key(8, 7)), Some(Activity::Pending));
        assert_eq!(q.activity(key(6, 0)), None, "an array Slurm does not list");
        assert!(!q.arrays[&5].held && q.arrays[&8].held);
        assert_eq!(q.arrays[&5].throttle, Some(2));
        assert_eq!(q.started(), 2);
        assert!(!q.is_empty());
        let reasons = q.pending_reasons(|k| k.task_id != 7);
        assert_eq!(reasons["JobArrayTaskLimit"], 8, "2-10 but 7");
        assert_eq!(reasons["held for earlier arrays"], 4);
        assert!(parse_active("").unwrap().is_empty());
        assert!(parse_active("5|2-x|PENDING|None|\n").is_err());
        assert!(
            parse_active("5|2-3|RUNNING|None|vm\n").is_err(),
            "a started task is one id"
        );
        assert!(parse_active("5|2|RUNNING\n").is_err());
        // Every active state word is one squeue takes, and none of them is a finished state.
        for word in ACTIVE_STATES.split(',') {
            assert!(!TaskState::parse(word).is_finished(), "{word}");
        }
    }

    #[test]
    fn counts_job_records_as_max_job_count_does() {
        // `squeue -h -a -t all -o '%K|%T|%u'`: a held array of 11, a pending rest of 6, two
        // finished tasks, another user's plain job.
        let text =
            "0-10|PENDING|root\n2-7%2|PENDING|root\n1|COMPLETED|root\n0|RUNNING|root\nN/A|PENDING|ann\n";
        let r = parse_job_records(text, "root").unwrap();
        assert_eq!(r.total, 11 + 6 + 1 + 1 + 1);
        assert_eq!(r.user_active, 11 + 6 + 1);
        assert_eq!(parse_job_records(text, "ann").unwrap().user_active, 1);
        assert!(parse_job_records("x|PENDING|root\n", "root").is_err());
        assert!(parse_job_records("1|PENDING\n", "root").is_err());
    }

    #[test]
    fn parses_squeue_lines() {
        let entries = parse_squeue(SQUEUE).unwrap();
        assert_eq!(entries.len(), 6);
        assert_eq!(
            entries[1],
            QueueEntry {
                job_id: 10,
                array_job_id: 7,
                task_id: Some(1),
                state: TaskState::Failed,
                reason: Some("NonZeroExitCode".into()),
                nodes: Some("vm".into()),
            }
        );
        assert_eq!(entries[2].reason, None);
        assert_eq!(entries[4].nodes, None);
        assert_eq!(entries[5].task_id, None);
        let snap = QueueSnapshot::from_entries(entries);
        assert_eq!(snap.tasks.len(), 5, "the job that is not an array is left out");
        let key = TaskKey {
            array_job_id: 7,
            task_id: 3,
        };
        assert_eq!(key.to_string(), "7_3");
        assert_eq!(snap.get(key).unwrap().state, TaskState::Cancelled);
        assert!(snap.any_active());
        assert_eq!(snap.counts()[&TaskState::Failed], 2);
    }

    #[test]
    fn rejects_unexpanded_or_malformed_lines() {
        let err = parse_squeue("1|1|2-5%2|PENDING|JobArrayTaskLimit|\n").unwrap_err();
        assert!(err.reason.contains("squeue -r"), "{err}");
        assert!(parse_squeue("1|1|2|PENDING\n").is_err());
        assert!(parse_squeue("x|1|2|PENDING|None|\n").is_err());
        assert_eq!(parse_squeue("\n\n").unwrap(), vec![]);
    }

    #[test]
    fn states_round_trip_and_know_when_a_task_is_over() {
        for word in [
            "PENDING",
            "RUNNING",
            "COMPLETED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "RESIZING",
        ] {
            assert_eq!(TaskState::parse(word).as_str(), word);
        }
        assert_eq!(TaskState::parse("CANCELLED+"), TaskState::Cancelled);
        assert!(TaskState::Timeout.is_finished());
        assert!(TaskState::OutOfMemory.is_finished());
        assert!(!TaskState::Pending.is_finished());
        assert!(!TaskState::Completing.is_finished());
        assert!(!TaskState::Other("RESIZING".into()).is_finished());
        assert!(TaskState::Other("SPECIAL_EXIT".into()).is_finished());
        assert_eq!(
            serde_json::to_string(&TaskState::NodeFail).unwrap(),
            "\"NODE_FAIL\""
        );
        assert_eq!(
            serde_json::to_string(&TaskState::Other("RESIZING".into())).unwrap(),
            "\"RESIZING\""
        );
    }

    #[test]
    fn parses_scontrol_one_line_records() {
        // `scontrol -o show job 8` after Slurm's time limit, and a cancelled pending remainder.
        let text = "JobId=8 JobName=hwr-exp:t UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 \
Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 \
Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:26 TimeLimit=00:01:00 \
StartTime=2026-11-30T18:59:31 EndTime=2026-11-30T19:00:57 NodeList=vm BatchHost=vm\n\
JobId=12 ArrayJobId=12 ArrayTaskId=1,3%1 ArrayTaskThrottle=1 JobName=t4 JobState=CANCELLED \
Reason=JobArrayTaskLimit ExitCode=0:0 StartTime=Unknown EndTime=2026-11-30T19:00:10 NodeList=(null)\n";
        let jobs = parse_scontrol_jobs(text).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].state, TaskState::Timeout);
        assert_eq!(jobs[0].array_job_id, None);
        assert_eq!(jobs[0].describe(), "TIMEOUT (TimeLimit, exit code 0:15)");
        assert_eq!(jobs[1].array_task_id.as_deref(), Some("1,3%1"));
        assert_eq!(jobs[1].nodes, None);
        assert_eq!(jobs[1].start_time, None);
        assert_eq!(jobs[1].describe(), "CANCELLED (JobArrayTaskLimit)");
        let cancelled = JobRecord {
            reason: None,
            exit_code: Some("0:0".into()),
            ..jobs[1].clone()
        };
        assert_eq!(cancelled.describe(), "CANCELLED");
        assert!(parse_scontrol_jobs("JobId=x JobState=RUNNING\n").is_err());
        assert!(parse_scontrol_jobs("JobId=3 Reason=None\n").is_err());
        assert_eq!(parse_scontrol_jobs("Job 12_2 not found\n").unwrap(), vec![]);
    }
}
