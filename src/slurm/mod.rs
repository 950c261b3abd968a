//! The Slurm executor's building blocks (DESIGN 8): Slurm plans nothing for hwr-exp and hwr-exp
//! schedules nothing on a cluster. The plan's runs are submitted as job arrays; each array task
//! runs one planned run through a hidden subcommand of the same binary
//! ([`script::TASK_SUBCOMMAND`]) with the local executor, on its node.
//!
//! - [`client`]: `sbatch`, `squeue`, `scontrol`, `scancel` as typed calls ([`SlurmClient`]).
//! - [`array`](mod@array): `--array` specs (`0-3,7,9%2`) and the split of run indices into arrays below the
//!   cluster's `MaxArraySize`, each with an index offset ([`split`]).
//! - [`script`]: the batch script of one array ([`ScriptSpec::render`]).
//! - [`queue`]: task states and reasons as `squeue` / `scontrol show job` print them.
//! - [`log`](mod@log): what a task's own log file says (Slurm's `CANCELLED AT` line, the task's start).
//!
//! This module is a leaf: it imports no other hwr-exp module, so `runner`, `bundle` and `archive`
//! may use it. docs/slurm.md has the commands and their output as observed on a test cluster.

pub mod array;
pub mod client;
mod config;
mod error;
pub mod log;
pub mod partition;
pub mod queue;
pub mod script;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use array::{ArrayChunk, ArrayLimits, ArraySpec, ArraySpecError, SplitError, split};
pub use client::{
    CancelTarget, EnvPolicy, RetryNote, RetryPolicy, SlurmClient, Submission, TaggedArray,
    cluster_configured, sbatch_input_env,
};
pub use config::JobLimits;
pub use error::{SlurmError, refusal_limit};
pub use queue::{
    ActiveArray, ActiveQueue, Activity, JobRecord, JobRecords, QueueEntry, QueueSnapshot, TaskKey, TaskState,
};
pub use script::{ScriptError, ScriptSpec, TASK_SUBCOMMAND};

/// One submitted job array as a bundle records it: which plan indices its tasks run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SubmittedArray {
    /// The array's job id (sbatch's answer).
    pub job_id: u64,
    /// Plan index of task id 0: task `t` runs plan index `offset + t`.
    pub offset: usize,
    /// The `--array` value as submitted, throttle included (`0-7%2`).
    pub array: String,
    /// The batch script, relative to the bundle (`slurm/array-0.sbatch`).
    pub script: String,
    /// Where the two-phase submission got to (DESIGN 8): `held` once recorded, `released` after
    /// `scontrol release`, `cancelled` when hwr-exp cancelled it before release. Absent in
    /// bundles written before holds: released.
    #[serde(default)]
    pub state: ArrayState,
}

/// bundle.json `slurm.arrays[].state`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrayState {
    /// Submitted with `sbatch --hold` and recorded; no task can start until released.
    Held,
    /// Released (`scontrol release`): Slurm schedules its tasks.
    #[default]
    Released,
    /// Cancelled by hwr-exp before it was released (an interrupted or refused submission, or
    /// `resume` finding it held): none of its tasks ran.
    Cancelled,
}

/// The tag of one submission, in sbatch's `--comment`: `hwr-exp bundle=<bundle> script=<script>
/// offset=<n>`. The bundle is its absolute path (unique on the cluster's shared file system), the
/// script the batch script relative to the bundle. With the job name it finds an array that
/// `sbatch` submitted but whose id never reached bundle.json (the runner killed meanwhile):
/// [`SlurmClient::tagged`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The bundle folder, absolute, as the runner saw it.
    pub bundle: String,
    /// The batch script relative to the bundle (`slurm/array-0.sbatch`).
    pub script: String,
    /// Plan index of task 0.
    pub offset: usize,
}

impl Tag {
    const PREFIX: &'static str = "hwr-exp bundle=";

    /// The `--comment` value.
    pub fn comment(&self) -> String {
        format!(
            "{}{} script={} offset={}",
            Self::PREFIX,
            self.bundle,
            self.script,
            self.offset
        )
    }

    /// Reads a comment written by [`Tag::comment`]; `None` for any other comment.
    pub fn parse(comment: &str) -> Option<Tag> {
        let rest = comment.trim().strip_prefix(Self::PREFIX)?;
        let (rest, offset) = rest.rsplit_once(" offset=")?;
        let (bundle, script) = rest.rsplit_once(" script=")?;
        Some(Tag {
            bundle: bundle.to_string(),
            script: script.to_string(),
            offset: offset.parse().ok()?,
        })
    }
}

/// Plan index <-> array task, over every array a bundle submitted (in submission order). When a
/// plan index was submitted more than once (`resume`), the latest submission is the one that
/// counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskMap {
    by_index: BTreeMap<usize, TaskKey>,
    by_task: BTreeMap<TaskKey, usize>,
}

impl TaskMap {
    /// Builds the map from the recorded arrays; arrays hwr-exp cancelled before release
    /// ([`ArrayState::Cancelled`]) run nothing and are left out.
    ///
    /// # Errors
    /// [`ArraySpecError`] when a recorded `array` value does not parse.
    pub fn new(arrays: &[SubmittedArray]) -> Result<Self, ArraySpecError> {
        let mut map = TaskMap::default();
        for a in arrays.iter().filter(|a| a.state != ArrayState::Cancelled) {
            for &task_id in ArraySpec::parse(&a.array)?.task_ids() {
                let key = TaskKey {
                    array_job_id: a.job_id,
                    task_id,
                };
                let index = a.offset + task_id as usize;
                if let Some(old) = map.by_index.insert(index, key) {
                    map.by_task.remove(&old);
                }
                map.by_task.insert(key, index);
            }
        }
        Ok(map)
    }

    /// The task currently responsible for a plan index.
    pub fn task(&self, index: usize) -> Option<TaskKey> {
        self.by_index.get(&index).copied()
    }

    /// The plan index a task runs; `None` for a task superseded by a later submission or unknown.
    pub fn index(&self, key: TaskKey) -> Option<usize> {
        self.by_task.get(&key).copied()
    }

    /// The array job ids to ask `squeue` about (those with at least one current task).
    pub fn job_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.by_task.keys().map(|k| k.array_job_id).collect();
        ids.dedup();
        ids
    }

    /// Number of plan indices with a task.
    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    /// Whether no index has a task.
    pub fn is_empty(&self) -> bool {
        self.by_index.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(job_id: u64, offset: usize, spec: &str) -> SubmittedArray {
        SubmittedArray {
            job_id,
            offset,
            array: spec.into(),
            script: format!("slurm/array-{job_id}.sbatch"),
            state: ArrayState::Released,
        }
    }

    #[test]
    fn tags_round_trip_and_other_comments_are_no_tags() {
        let tag = Tag {
            bundle: "/shared/res ults/x script=y/20261201T000000Z-ab12".into(),
            script: "slurm/array-3.sbatch".into(),
            offset: 22,
        };
        assert_eq!(Tag::parse(&tag.comment()), Some(tag.clone()));
        assert_eq!(Tag::parse("(null)"), None);
        assert_eq!(Tag::parse("hwr-exp bundle=/x script=s offset=z"), None);
        let mut cancelled = array(30, 0, "0-1");
        cancelled.state = ArrayState::Cancelled;
        let map = TaskMap::new(&[array(29, 0, "0-1"), cancelled]).unwrap();
        assert_eq!(
            map.job_ids(),
            [29],
            "a cancelled, never released array runs nothing"
        );
    }

    #[test]
    fn maps_plan_indices_to_tasks_and_back_latest_submission_first() {
        let arrays = [
            array(10, 0, "0-10%2"),
            array(11, 11, "0-3%2"),
            // resume of runs 3 and 12
            array(20, 0, "3,12%2"),
        ];
        let map = TaskMap::new(&arrays).unwrap();
        assert_eq!(map.len(), 15);
        let t = |array_job_id, task_id| TaskKey {
            array_job_id,
            task_id,
        };
        assert_eq!(map.task(0), Some(t(10, 0)));
        assert_eq!(map.task(14), Some(t(11, 3)));
        assert_eq!(map.task(3), Some(t(20, 3)));
        assert_eq!(map.task(12), Some(t(20, 12)));
        assert_eq!(map.index(t(10, 3)), None, "superseded by the resume");
        assert_eq!(map.index(t(11, 1)), None, "superseded by the resume");
        assert_eq!(map.index(t(11, 2)), Some(13));
        assert_eq!(map.job_ids(), [10, 11, 20]);
        assert!(TaskMap::new(&[array(1, 0, "x")]).is_err());
        let json = serde_json::to_string(&arrays[1]).unwrap();
        assert_eq!(
            json,
            r#"{"job-id":11,"offset":11,"array":"0-3%2","script":"slurm/array-11.sbatch","state":"released"}"#
        );
        let old: SubmittedArray = serde_json::from_str(
            r#"{"job-id":11,"offset":11,"array":"0-3%2","script":"slurm/array-11.sbatch"}"#,
        )
        .unwrap();
        assert_eq!(old.state, ArrayState::Released, "bundles from before holds");
    }
}
