//! What a task's own log file (`slurm/logs/<array job id>_<task id>.err`) says about how it ran:
//! the line slurmstepd writes when Slurm ends a task (`slurmstepd: error: *** JOB 26 ON vm
//! CANCELLED AT 2026-12-01T15:26:05 DUE TO PREEMPTION ***`), and the line `hwr-exp slurm-task`
//! writes when it starts its run ([`START_PREFIX`]). The file outlives Slurm's memory of the task
//! (`MinJobAge`), so a waiter that comes late still learns why and when a task ended.
//!
//! Observed on Slurm 22.05-24.11 (docs/slurm.md): `CANCELLED AT <local time>` for `scancel`,
//! `... DUE TO TIME LIMIT`, `... DUE TO PREEMPTION`, `... DUE TO NODE FAILURE`; times are the
//! controller's local time without a zone, as `scontrol` prints them.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::queue::{TaskKey, TaskState};
use super::script::SLURM_DIR;

/// Start of the line `hwr-exp slurm-task` writes to its stderr (the task's `.err` log) just
/// before it starts its run: `hwr-exp slurm-task: run 000-a-r1 started at 2026-12-01T15:26:06.256Z
/// on vm`. Each start of the task (a requeued task starts again) appends one.
pub const START_PREFIX: &str = "hwr-exp slurm-task: run ";

/// The task's stderr log in the bundle folder `bundle` (`--error` of the batch script).
pub fn task_log(bundle: &Path, key: TaskKey) -> PathBuf {
    bundle
        .join(SLURM_DIR)
        .join("logs")
        .join(format!("{}_{}.err", key.array_job_id, key.task_id))
}

/// The start line [`START_PREFIX`] for run `run_id` starting at `at` (RFC 3339) on `host`.
pub fn start_line(run_id: &str, at: &str, host: &str) -> String {
    format!("{START_PREFIX}{run_id} started at {at} on {host}")
}

/// What the log of one task says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskLog {
    /// The last start line's time ([`START_PREFIX`], RFC 3339 as written).
    pub started: Option<String>,
    /// The last line in which slurmstepd says how Slurm ended the task, trimmed
    /// (`slurmstepd-vm: error: *** JOB 26 ON vm CANCELLED AT 2026-12-01T15:26:05 ***`).
    pub ended_by_slurm: Option<SlurmEnd>,
}

/// Slurm's own line about ending a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmEnd {
    /// The line as written, trimmed.
    pub line: String,
    /// The state the line means: `CANCELLED`, `TIMEOUT` (`DUE TO TIME LIMIT`), `PREEMPTED`,
    /// `NODE_FAIL` (`DUE TO NODE FAILURE`), `DEADLINE`.
    pub state: TaskState,
    /// The time after `AT` as printed (local time, no zone), if any.
    pub at: Option<String>,
}

impl TaskLog {
    /// Reads the log at `path`; a missing or unreadable file says nothing.
    pub fn read(path: &Path) -> TaskLog {
        std::fs::read(path)
            .map(|b| TaskLog::parse(&String::from_utf8_lossy(&b)))
            .unwrap_or_default()
    }

    /// The log's lines as [`TaskLog::read`] judges them.
    pub fn parse(text: &str) -> TaskLog {
        let mut log = TaskLog::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(START_PREFIX)
                && let Some((_, after)) = rest.split_once(" started at ")
            {
                log.started = after.split_whitespace().next().map(str::to_string);
                // Slurm's word about an earlier start (a requeued task) is not about this one.
                log.ended_by_slurm = None;
            } else if let Some(end) = slurm_end(line) {
                log.ended_by_slurm = Some(end);
            }
        }
        log
    }
}

/// Slurm's `*** JOB <id> ON <node> CANCELLED AT <time> [DUE TO <why>] ***` line, if `line` is one.
fn slurm_end(line: &str) -> Option<SlurmEnd> {
    let open = line.find("*** JOB ")?;
    let body = line[open..].trim_end();
    if !body.ends_with("***") || !body.contains(" CANCELLED AT ") {
        return None;
    }
    let upper = body.to_ascii_uppercase();
    let state = if upper.contains("DUE TO TIME LIMIT") {
        TaskState::Timeout
    } else if upper.contains("DUE TO PREEMPTION") {
        TaskState::Preempted
    } else if upper.contains("DUE TO NODE FAIL") {
        TaskState::NodeFail
    } else if upper.contains("DUE TO DEADLINE") {
        TaskState::Deadline
    } else {
        TaskState::Cancelled
    };
    let at = body
        .split_once(" CANCELLED AT ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_string);
    Some(SlurmEnd {
        line: line.trim().to_string(),
        state,
        at,
    })
}

/// A time as Slurm prints it (`2026-12-01T15:26:05`, the local time of the host reading it: the
/// test and single-site clusters share one zone) or as RFC 3339 (`...Z`); `None` when neither.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    if let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return SystemTime::try_from(ts).ok();
    }
    let civil = text.parse::<jiff::civil::DateTime>().ok()?;
    let zoned = civil.to_zoned_datetime(jiff::tz::TimeZone::system()).ok()?;
    SystemTime::try_from(zoned.timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_slurms_end_lines_and_the_tasks_start_line() {
        let text = "hwr-exp slurm-task: run 000-1-r1 started at 2026-12-01T15:26:06.256Z on vm\n\
                    slurmstepd-vm: error: *** JOB 26 ON vm CANCELLED AT 2026-12-01T15:26:05 ***\n";
        let log = TaskLog::parse(text);
        assert_eq!(log.started.as_deref(), Some("2026-12-01T15:26:06.256Z"));
        let end = log.ended_by_slurm.unwrap();
        assert_eq!(end.state, TaskState::Cancelled);
        assert_eq!(end.at.as_deref(), Some("2026-12-01T15:26:05"));
        assert!(end.line.starts_with("slurmstepd-vm: error: *** JOB 26"));
        for (why, state) in [
            ("DUE TO TIME LIMIT", TaskState::Timeout),
            ("DUE TO PREEMPTION", TaskState::Preempted),
            ("DUE TO NODE FAILURE", TaskState::NodeFail),
        ] {
            let line =
                format!("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-12-01T15:27:03 {why} ***");
            assert_eq!(
                TaskLog::parse(&line).ended_by_slurm.unwrap().state,
                state,
                "{line}"
            );
        }
        // The last start wins (a requeued task starts again), and Slurm's end of the start
        // before it is forgotten; a run's own stderr is elsewhere.
        let twice = "hwr-exp slurm-task: run a started at 2026-12-01T10:00:00.000Z on n1\n\
                     slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-12-01T10:30:00 DUE TO PREEMPTION ***\n\
                     hwr-exp slurm-task: run a started at 2026-12-01T11:00:00.000Z on n2\n";
        let log = TaskLog::parse(twice);
        assert_eq!(log.started.as_deref(), Some("2026-12-01T11:00:00.000Z"));
        assert_eq!(log.ended_by_slurm, None);
        assert_eq!(TaskLog::parse("*** JOB 3 something else ***"), TaskLog::default());
        assert_eq!(TaskLog::read(Path::new("/nonexistent/x.err")), TaskLog::default());
    }

    #[test]
    fn times_in_both_forms() {
        let utc = parse_time("2026-12-01T15:26:06.256Z").unwrap();
        assert_eq!(rfc(utc), "2026-12-01T15:26:06Z");
        assert!(parse_time("2026-12-01T15:26:05").is_some());
        assert!(parse_time("Unknown").is_none());
    }

    fn rfc(t: SystemTime) -> String {
        jiff::Timestamp::try_from(t)
            .unwrap()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    #[test]
    fn the_log_of_a_task() {
        let key = TaskKey {
            array_job_id: 25,
            task_id: 3,
        };
        assert_eq!(
            task_log(Path::new("/b"), key),
            Path::new("/b/slurm/logs/25_3.err")
        );
        assert!(start_line("r", "t", "h").starts_with(START_PREFIX));
    }
}
