//! On-disk bundle format (DESIGN 5): the JSON documents of a result bundle.
//!
//! Keys are kebab-case. Every document carries its format version (`bundle-format` in bundle.json,
//! `format` elsewhere); readers refuse a newer major version.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::artifacts::{Artifact, EarlierAttempt};
use super::summary::Summary;
use crate::exec::{Containment, SamplingSummary, SharedMemoryLeft, Termination};
use crate::manifest::Value;

/// The bundle format this build writes (major version).
pub const BUNDLE_FORMAT: u32 = 1;

/// Names of the files in a bundle folder.
pub mod files {
    /// Bundle summary and status.
    pub const BUNDLE: &str = "bundle.json";
    /// The manifest bytes as run.
    pub const MANIFEST: &str = "manifest.toml";
    /// Every run in order.
    pub const PLAN: &str = "plan.json";
    /// Host facts.
    pub const HOST: &str = "host.json";
    /// HEAD commit id or why there is none.
    pub const REVISION: &str = "revision.txt";
    /// `git status --short` format.
    pub const WORKING_TREE: &str = "working-tree.txt";
    /// `git diff HEAD` plus untracked files plus binary patches.
    pub const PATCH: &str = "working-tree.patch";
    /// Repository facts before and after the runs.
    pub const PROVENANCE: &str = "provenance.json";
    /// Folder holding one folder per run.
    pub const RUNS: &str = "runs";
    /// Folder holding one folder per Python environment: lock.txt, freeze.txt, python.txt.
    pub const ENVIRONMENTS: &str = "environments";
    /// Per-run record.
    pub const RUN: &str = "run.json";
    /// Per-run stderr.
    pub const STDERR: &str = "stderr.log";
    /// Per-run external memory samples.
    pub const MEMORY: &str = "memory.jsonl";
    /// Per-run breakdown of memory by mapping (first and last), where one was taken.
    pub const MAPPINGS: &str = crate::exec::MAPPINGS_FILE;
    /// SHA-256 of every file of the finished bundle except itself and the lock file, in
    /// `sha256sum` format ([`crate::bundle::checksums`]).
    pub const CHECKSUMS: &str = "checksums.sha256";
    /// Folder with the Slurm batch scripts, Slurm's task logs and the cancel marker.
    pub const SLURM: &str = "slurm";
    /// Folder with one host-facts file per node that ran a Slurm task, `hosts/<node>.json` (run.json `node`).
    pub const HOSTS: &str = "hosts";
    /// Marker written by `hwr-exp cancel` inside [`SLURM`]: a waiter that sees it finishes as on Ctrl-C.
    pub const CANCEL_REQUESTED: &str = "cancel-requested";
    /// Lock file: the writing process holds an exclusive `flock` on it for its whole life
    /// ([`crate::bundle::lock`]); its content, that process's pid, is information only.
    pub const LOCK: &str = ".lock";
}

/// `status` of a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BundleStatus {
    /// A runner is (or was, if it died) writing the bundle.
    Running,
    /// Every planned run finished.
    Complete,
    /// The runner was stopped by SIGINT/SIGTERM.
    Interrupted,
    /// The runner hit an error it could not record per run (disk full, for example).
    Failed,
}

impl BundleStatus {
    /// The name bundle.json `status` uses (`running`, `complete`, `interrupted`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            BundleStatus::Running => "running",
            BundleStatus::Complete => "complete",
            BundleStatus::Interrupted => "interrupted",
            BundleStatus::Failed => "failed",
        }
    }
}

/// How one run counts (`outcome` in run.json, keys of `counts` in bundle.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Exited 0 and the output check passed.
    Ok,
    /// Exited non-zero or was killed by a signal.
    Failed,
    /// Stopped by the runner's timeout.
    Timeout,
    /// Exited 0 but the output is invalid or empty where JSON was expected.
    InvalidOutput,
    /// The program could not be started.
    SpawnFailed,
    /// Stopped because the runner was interrupted.
    Interrupted,
    /// Slurm executor: the array task vanished without run.json (`lost-reason` says why).
    Lost,
}

impl Outcome {
    /// The name run.json `outcome` and bundle.json `counts` use (`ok`, `invalid-output`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Timeout => "timeout",
            Outcome::InvalidOutput => "invalid-output",
            Outcome::SpawnFailed => "spawn-failed",
            Outcome::Interrupted => "interrupted",
            Outcome::Lost => "lost",
        }
    }
}

/// bundle.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BundleInfo {
    /// Format version of the bundle ([`BUNDLE_FORMAT`]).
    pub bundle_format: u32,
    /// Version of hwr-exp that wrote it.
    pub hwr_exp_version: String,
    /// Absolute path of the hwr-exp binary that wrote it (`{hwr-exp}` in its runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hwr_exp_path: Option<String>,
    /// sha256 (hex) of that binary: `{hwr-exp}` is that exact file. Absent in bundles written
    /// before this key existed, or when the binary could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hwr_exp_sha256: Option<String>,
    /// `[experiment] name`.
    pub experiment: String,
    /// `[experiment] description`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Lifecycle state.
    pub status: BundleStatus,
    /// Time the bundle was created ([`crate::timestamp::rfc3339`]: RFC 3339 UTC, milliseconds).
    pub created: String,
    /// Time the last run finished or the runner stopped ([`crate::timestamp::rfc3339`]).
    #[serde(default)]
    pub finished: Option<String>,
    /// Number of planned runs.
    pub planned_runs: usize,
    /// Finished runs by outcome.
    pub counts: BTreeMap<Outcome, usize>,
    /// sha256 (hex) of manifest.toml.
    pub manifest_sha256: String,
    /// sha256 (hex) of the other files written once when the bundle was set up, before any run
    /// started (plan.json, host.json, revision.txt, working-tree.txt, working-tree.patch), by
    /// name. The runner rewrites bundle.json from memory, so a run that edits one of these files
    /// (they are all within its reach) cannot hide the edit: `verify` compares them, and the
    /// runner notes a change when it finishes. Empty in bundles written before this key existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub setup_sha256: BTreeMap<String, String>,
    /// Absolute path of the manifest file as run (relative paths in it resolve against its folder).
    pub manifest_path: String,
    /// Bundle folder this one reruns or resumes from, when any.
    #[serde(default)]
    pub parent: Option<String>,
    /// Pid of the runner that writes (or wrote) the bundle; information only (liveness is the
    /// lock, [`crate::bundle::lock`]).
    pub runner_pid: u32,
    /// Shuffle seed used for `order = "shuffled"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Free-form notes (`rerun --at-recorded-revision`, `resume --allow-drift` record here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Where the runs execute: `"local"` or `"slurm"` (DESIGN 8); absent in bundles written before
    /// executors existed, which are local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// `[environments]`: each Python environment built for the runs, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environments: BTreeMap<String, EnvironmentRecord>,
    /// Slurm executor: the submitted job arrays, appended as each is submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmSubmissions>,
    /// What `run` was told to change in the manifest's plan and execution (`--where`,
    /// `--repetitions`, `--fail-fast`); absent when nothing was. `resume`, `rerun` and the Slurm
    /// tasks apply it again, so they expand the same plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Overrides>,
    /// Adaptive `repetitions` (DESIGN 3, 5): the rule, the rounds run, and why each cell stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRecord>,
    /// `hwr-exp bisect`: the session this bundle is a step of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bisect: Option<BisectStep>,
}

/// bundle.json `overrides`: the command-line options of `run` that changed what the manifest
/// says, as given.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Overrides {
    /// `--where KEY=VALUE`, in the order given (`["mode=reuse", "elements=64"]`): only the cells
    /// matching them were planned ([`crate::plan::select`]).
    #[serde(default, rename = "where", skip_serializing_if = "Vec::is_empty")]
    pub where_: Vec<String>,
    /// `--repetitions N`: repetitions of each cell instead of `[schedule] repetitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetitions: Option<u32>,
    /// `--fail-fast`: no run started after the first run that was not ok.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_fast: bool,
}

impl Overrides {
    /// The record of `selection` and `fail_fast`; `None` when they change nothing.
    pub fn of(selection: &crate::plan::select::Selection, fail_fast: bool) -> Option<Overrides> {
        (!selection.is_empty() || fail_fast).then(|| Overrides {
            where_: selection.filters.iter().map(ToString::to_string).collect(),
            repetitions: selection.repetitions,
            fail_fast,
        })
    }

    /// The plan selection recorded (`where`, `repetitions`).
    ///
    /// # Errors
    /// A `where` entry that is not `KEY=VALUE` (a bundle edited by hand).
    pub fn selection(&self) -> Result<crate::plan::select::Selection, String> {
        Ok(crate::plan::select::Selection {
            filters: self
                .where_
                .iter()
                .map(|w| crate::plan::select::Filter::parse(w))
                .collect::<Result<_, _>>()?,
            repetitions: self.repetitions,
        })
    }

    /// The command-line words that give these overrides: `--where mode=reuse --fail-fast`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for w in &self.where_ {
            args.push("--where".to_owned());
            args.push(w.clone());
        }
        if let Some(n) = self.repetitions {
            args.push("--repetitions".to_owned());
            args.push(n.to_string());
        }
        if self.fail_fast {
            args.push("--fail-fast".to_owned());
        }
        args
    }
}

/// bundle.json `adaptive`: the state of an adaptive `repetitions` rule, rewritten after each
/// round (so an interrupted bundle says where it was and `resume` continues the rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AdaptiveRecord {
    /// `min`, `max`, `until`, `time-budget-seconds`.
    #[serde(flatten)]
    pub rule: crate::manifest::Adaptive,
    /// Rounds run (the most runs any cell has).
    pub rounds: u32,
    /// Wall seconds spent in rounds, summed over the run and its resumes (what the time budget
    /// counts).
    pub elapsed_seconds: f64,
    /// Why no further round was run: the cells' reasons combined (`time budget` when the budget
    /// stopped any cell, else `max reached` when any cell reached `max`, else `decided`, else
    /// `no estimates` or `no control`); `None` while rounds remain (a running or interrupted
    /// bundle).
    pub stopping_reason: Option<StoppingReason>,
    /// Every cell, plan order.
    pub cells: Vec<AdaptiveCell>,
    /// The sequential design the rule judges with (looks, the level at each, its name:
    /// [`crate::stats::sequential::Design::for_rule`]); the report judges with the same. `None`
    /// in bundles of versions that looked after every run at 0.05.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<crate::stats::sequential::Design>,
}

/// One cell of [`AdaptiveRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AdaptiveCell {
    /// Matrix values.
    pub cell: BTreeMap<String, Value>,
    /// Runs of the cell in the plan.
    pub runs: u32,
    /// The verdict that decides it (private-bytes growth against its control, DESIGN 9); for a
    /// control cell, `control`; `None` before the first decision or without a control.
    pub verdict: Option<String>,
    /// Why the cell got no further round; `None` while it may get one.
    pub stopping_reason: Option<StoppingReason>,
}

/// Why an adaptive cell stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StoppingReason {
    /// Its verdict is `above control`, `below control` or `equivalent` (a control cell: every
    /// cell compared with it is decided).
    #[serde(rename = "decided")]
    Decided,
    /// It has `max` runs.
    #[serde(rename = "max reached")]
    MaxReached,
    /// The time budget was spent.
    #[serde(rename = "time budget")]
    TimeBudget,
    /// It has no control to be compared with (and is no control): it gets `min` runs.
    #[serde(rename = "no control")]
    NoControl,
    /// No run of the bundle gave retention samples (every run failed, timed out without output,
    /// or prints another schema): nothing can be decided, so no cell gets more than `min` runs.
    #[serde(rename = "no estimates")]
    NoEstimates,
    /// Its control gave no data: every finished run of the control cell failed (or none gave
    /// numbers), so no further run can be compared; the control stops too.
    #[serde(rename = "control failed")]
    ControlFailed,
}

impl StoppingReason {
    /// The name bundle.json and the report use.
    pub fn as_str(self) -> &'static str {
        match self {
            StoppingReason::Decided => "decided",
            StoppingReason::MaxReached => "max reached",
            StoppingReason::TimeBudget => "time budget",
            StoppingReason::NoControl => "no control",
            StoppingReason::NoEstimates => "no estimates",
            StoppingReason::ControlFailed => "control failed",
        }
    }
}

/// bundle.json `bisect`: which `hwr-exp bisect` session a bundle is a step of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BisectStep {
    /// The session's id (`<YYYYMMDDTHHMMSSZ>-<4 hex>`), shared by its steps.
    pub session: String,
    /// The probed commit.
    pub commit: String,
    /// The step's number, 1-based.
    pub step: u32,
}

/// bundle.json `environments.<name>`: a Python environment as built (its files are under
/// `environments/<name>/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EnvironmentRecord {
    /// sha256 (hex) of `environments/<name>/lock.txt`.
    pub lock_sha256: String,
    /// The `uv pip compile --exclude-newer` time the lock was resolved with (RFC 3339); absent for
    /// a lock taken from the bundle (`resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_newer: Option<String>,
    /// The venv the runs used.
    pub venv: String,
    /// The venv's cache key: sha256 (hex) of everything that makes it (interpreter, platform, lock,
    /// index settings; the venv's `.hwr-exp-key` lists them). Absent in bundles from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venv_key: Option<String>,
    /// The interpreter the venv was made from (`sys.executable` as uv found it). Absent in bundles
    /// from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
    /// Whether the venv was already built (reused from the cache).
    pub reused: bool,
}

/// bundle.json `slurm`: what was submitted to Slurm for this bundle.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SlurmSubmissions {
    /// Every submitted array in submission order (`resume` appends); the latest submission of a
    /// plan index is the one that counts ([`crate::slurm::TaskMap`]).
    pub arrays: Vec<crate::slurm::SubmittedArray>,
    /// Every submission sbatch refused, in order, with Slurm's message and the limit it names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<SbatchRefusal>,
    /// Names of the `SBATCH_*` / `SLURM_*` variables of the submitting environment that hwr-exp
    /// removed from sbatch's environment (they would override the recorded script); values are not
    /// recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleared_env: Vec<String>,
    /// With `keep-sbatch-env = true`: those variables as passed to sbatch, name and value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kept_env: BTreeMap<String, String>,
}

/// bundle.json `slurm.refusals[]`: one submission sbatch refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SbatchRefusal {
    /// When (RFC 3339 UTC).
    pub at: String,
    /// The batch script refused, relative to the bundle.
    pub script: String,
    /// Slurm's message (`Invalid partition name specified`).
    pub message: String,
    /// The limit or setting the message names (`partition`, `MaxJobCount`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

impl SbatchRefusal {
    /// `Invalid partition name specified (limit: partition ...)`.
    pub fn describe(&self) -> String {
        match &self.limit {
            Some(l) => format!("{} (limit: {l})", self.message),
            None => self.message.clone(),
        }
    }
}

impl BundleInfo {
    /// Whether the bundle's runs execute on Slurm (`executor = "slurm"`).
    pub fn is_slurm(&self) -> bool {
        self.executor.as_deref() == Some("slurm")
    }
}

/// run.json `slurm`: the ids of the array task that ran the run, from the task's environment.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SlurmTaskIds {
    /// `SLURM_JOB_ID`: the task's own job id.
    pub job_id: Option<u64>,
    /// `SLURM_ARRAY_JOB_ID`: the array's job id.
    pub array_job_id: Option<u64>,
    /// `SLURM_ARRAY_TASK_ID`.
    pub array_task_id: Option<u32>,
}

/// plan.json's fields other than `runs` (read by [`crate::bundle::read::Bundle::plan_header`]
/// without reading the runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PlanHeader {
    /// Format version ([`BUNDLE_FORMAT`]).
    pub format: u32,
    /// `interleaved`, `grouped` or `shuffled`.
    pub order: crate::manifest::Order,
    /// Seed used when shuffled.
    pub seed: Option<u64>,
    /// Runs at once.
    pub jobs: u32,
    /// Matrix keys in manifest order.
    pub matrix_keys: Vec<String>,
    /// `output-format`.
    pub output_format: crate::manifest::OutputFormat,
    /// External sampling period in seconds; `None` = off.
    pub sample_interval_seconds: Option<f64>,
}

/// plan.json. Reading it whole holds every run in memory: readers of large plans use
/// [`crate::bundle::read::Bundle::planned_runs`], one run at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PlanFile {
    /// Format version ([`BUNDLE_FORMAT`]).
    pub format: u32,
    /// `interleaved`, `grouped` or `shuffled`.
    pub order: crate::manifest::Order,
    /// Seed used when shuffled.
    pub seed: Option<u64>,
    /// Runs at once.
    pub jobs: u32,
    /// Matrix keys in manifest order.
    pub matrix_keys: Vec<String>,
    /// `output-format`.
    pub output_format: crate::manifest::OutputFormat,
    /// External sampling period in seconds; `None` = off.
    pub sample_interval_seconds: Option<f64>,
    /// Every run in execution order.
    pub runs: Vec<crate::plan::PlannedRun>,
}

/// Result of checking a run's stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputCheck {
    /// JSON that parses (or any non-empty text for `output-format = "text"`).
    Valid,
    /// Not one JSON document; `output-check-reason` says why.
    Invalid,
    /// Nothing was printed.
    Empty,
}

pub use crate::exec::EscapedProcess;

/// run.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunRecord {
    /// Format version ([`BUNDLE_FORMAT`]).
    pub format: u32,
    /// Same as in plan.json.
    pub run_id: String,
    /// 0-based plan index.
    pub index: usize,
    /// Matrix values.
    pub cell: BTreeMap<String, Value>,
    /// 1-based repetition.
    pub repetition: u32,
    /// argv as executed.
    pub argv: Vec<String>,
    /// Working directory.
    pub workdir: String,
    /// Environment changes.
    pub env: crate::plan::RunEnv,
    /// CPUs requested.
    pub cpus_requested: Vec<usize>,
    /// CPUs the child was allowed on, read back after its exec (`sched_getaffinity(pid)`, what
    /// `Cpus_allowed_list` of `/proc/<pid>/status` shows).
    pub cpus_effective: Option<Vec<usize>>,
    /// Child pid.
    pub pid: Option<u32>,
    /// Start time ([`crate::timestamp::rfc3339`]).
    pub start: String,
    /// End time ([`crate::timestamp::rfc3339`]).
    pub end: String,
    /// Wall time, seconds.
    pub wall_seconds: f64,
    /// User CPU time, seconds (wait4).
    pub user_seconds: Option<f64>,
    /// System CPU time, seconds (wait4).
    pub sys_seconds: Option<f64>,
    /// The largest peak RSS of one process of the run, bytes: `ru_maxrss` of `wait4`, the larger
    /// of the leader's own peak and the largest among the descendants it waited for. Not the
    /// tree's peak (`cgroup-memory-peak-bytes`) and not always the leader's.
    pub peak_rss_bytes: Option<u64>,
    /// Exit code when exited.
    pub exit_code: Option<i32>,
    /// Signal number when killed by a signal.
    pub signal: Option<i32>,
    /// How the run ended.
    pub termination: Termination,
    /// Spawn error or other runner-side message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Output file name inside the run folder.
    pub output: String,
    /// Output check result.
    pub output_check: OutputCheck,
    /// Why the output is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_check_reason: Option<String>,
    /// How the run counts.
    pub outcome: Outcome,
    /// How the run's processes were held together: `cgroup` or `process-tree`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Containment>,
    /// Processes of the run still alive after its leader ended, which the runner killed.
    #[serde(default)]
    pub stray_processes_killed: u32,
    /// Processes of the run found outside its cgroup when it ended (a root process moved
    /// itself into another cgroup): not contained, not counted in `stray-processes-killed`;
    /// killed when still in the run's session. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escaped_processes: Vec<EscapedProcess>,
    /// CPUs the runner's supervising and sampling thread could run on during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_cpus: Option<Vec<usize>>,
    /// The peak of all the run's processes together, bytes, from its memory cgroup (page cache
    /// and kernel memory charged to the run included); `cgroup-memory-source` names the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_memory_peak_bytes: Option<u64>,
    /// `cgroup2 memory.peak` or `cgroup1 memory.max_usage_in_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_memory_source: Option<String>,
    /// `[environments]`: the run's Python environment (name, lock sha256, venv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::plan::RunEnvironment>,
    /// `[isolation] allocator`: name, path and sha256 of the library preloaded, and whether the
    /// run's process was seen with it loaded (`seen-loaded`, from its `/proc/<pid>/maps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<crate::allocator::Record>,
    /// Number of lines in memory.jsonl.
    #[serde(default)]
    pub memory_samples: u32,
    /// How the run's sampling went ([`SamplingSummary`]); absent when it was not sampled (and
    /// in bundles written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingSummary>,
    /// SysV shared memory segments and `/dev/shm` files that appeared during the run and
    /// outlived it (kept, never removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_memory_left: Vec<SharedMemoryLeft>,
    /// sha256 (hex) of the runner's own files of the run folder (output, stderr.log,
    /// memory.jsonl), by file name.
    pub sha256: BTreeMap<String, String>,
    /// Slurm executor: the node's hostname (`gethostname`) the run executed on, or the node Slurm
    /// named for a `lost` run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Slurm executor: the node's name as Slurm knows it (`SLURMD_NODENAME` in the task, else
    /// the hostname), which names its host facts `hosts/<node>.json`; for a `lost` run, the node
    /// Slurm named for the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Slurm executor: the array task's ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmTaskIds>,
    /// Termination `lost`: Slurm's account of the task (`CANCELLED (None, exit code 0:15)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_reason: Option<String>,
    /// Everything else the run wrote into its folder, in name order.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// 1-based number of this attempt: `resume` keeps the files of interrupted or lost attempts
    /// under `attempts/<n>/` and runs the run again.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The files of the earlier attempts, as found under `attempts/<n>/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_attempts: Vec<EarlierAttempt>,
    /// The figures a report takes from the output ([`Summary`]), made once when the run was
    /// recorded; absent when the output is not valid JSON (`output-format = "json"` only), and
    /// in bundles written before it existed (a report then reads the output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
}

fn first_attempt() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` is the serde name, both ways, of every variant.
    #[test]
    fn names_are_the_serde_names() {
        for v in [
            Outcome::Ok,
            Outcome::Failed,
            Outcome::Timeout,
            Outcome::InvalidOutput,
            Outcome::SpawnFailed,
            Outcome::Interrupted,
            Outcome::Lost,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{v:?}");
            assert_eq!(serde_json::from_value::<Outcome>(v.as_str().into()).unwrap(), v);
        }
        for v in [
            BundleStatus::Running,
            BundleStatus::Complete,
            BundleStatus::Interrupted,
            BundleStatus::Failed,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{v:?}");
            assert_eq!(
                serde_json::from_value::<BundleStatus>(v.as_str().into()).unwrap(),
                v
            );
        }
    }
}
