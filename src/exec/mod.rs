//! One run: spawn, pin, environment, capture, timeout, measure (DESIGN 4).
//!
//! The scheduler only sees the [`Executor`] trait, so scheduling tests need no processes.
//! [`ProcessExecutor`] is the real implementation.

pub mod affinity;
pub mod guardian;
mod process;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

pub use process::{ProcessExecutor, build_env, resolve_program};

/// Everything needed to start one run; paths are absolute.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Program and arguments; `argv[0]` without `/` is looked up in the child's `PATH`.
    pub argv: Vec<String>,
    /// Working directory of the child.
    pub workdir: PathBuf,
    /// The child's complete environment (already built from policy, `env`, `env-unset`, `HWR_*`).
    pub env: Vec<(OsString, OsString)>,
    /// CPUs to pin the child to (sched_setaffinity in the child before exec). Empty = no pinning.
    pub cpus: Vec<usize>,
    /// Whole-run limit; `None` = none.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM to the process group and SIGKILL.
    pub grace: Duration,
    /// File the child's stdout is streamed to (created/truncated).
    pub stdout_path: PathBuf,
    /// File the child's stderr is streamed to (created/truncated).
    pub stderr_path: PathBuf,
    /// Where external smaps_rollup samples go as JSON lines ([`MemorySample`]); `None` = no sampling.
    pub memory_path: Option<PathBuf>,
    /// Sampling period for `memory_path`.
    pub sample_interval: Duration,
}

/// How a run ended (`termination` in run.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Termination {
    /// The process exited by itself (any exit code, including 124 from its own `timeout`).
    Exited,
    /// The process was killed by a signal the runner did not send.
    Signaled,
    /// The runner's timeout expired; the group got SIGTERM, then SIGKILL after grace.
    Timeout,
    /// The program could not be started (not found, not executable, bad workdir).
    SpawnFailed,
    /// The runner was interrupted (Ctrl-C / SIGTERM) and stopped this run.
    Interrupted,
}

/// What one run did, as measured by the executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// How the run ended.
    pub termination: Termination,
    /// Exit code when the process exited.
    pub exit_code: Option<i32>,
    /// Signal number that ended the process, if a signal did.
    pub signal: Option<i32>,
    /// Spawn error text when `termination` is `SpawnFailed`.
    pub error: Option<String>,
    /// CPUs the child actually ran on: `Cpus_allowed_list` of `/proc/<pid>/status`, read after spawn.
    pub cpus_effective: Option<Vec<usize>>,
    /// Child pid.
    pub pid: Option<u32>,
    /// Wall-clock start and end.
    pub started: SystemTime,
    /// Wall-clock end.
    pub ended: SystemTime,
    /// Wall time in seconds (monotonic clock).
    pub wall_seconds: f64,
    /// User CPU seconds from `wait4` rusage.
    pub user_seconds: Option<f64>,
    /// System CPU seconds from `wait4` rusage.
    pub sys_seconds: Option<f64>,
    /// Peak RSS in bytes (`ru_maxrss` from `wait4`, KiB x 1024).
    pub peak_rss_bytes: Option<u64>,
    /// Processes of the run's group still alive after the leader exited, which the runner then killed.
    pub stray_processes_killed: u32,
    /// Number of external memory samples written.
    pub memory_samples: u32,
}

/// One external sample of the run's process, one JSON line of memory.jsonl. Bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MemorySample {
    /// Seconds since the run started.
    pub t_seconds: f64,
    /// Live processes of the run's process group that were read (1 for a plain `argv` program;
    /// a `shell` command also counts its `/bin/sh`).
    #[serde(default = "one")]
    pub processes: u32,
    /// smaps_rollup figures summed over those processes. PSS, private and anonymous bytes add up
    /// exactly; RSS counts pages shared between them once per process.
    #[serde(flatten)]
    pub rollup: crate::memory::Rollup,
}

fn one() -> u32 {
    1
}

/// Shared cancellation flag: set by the runner's SIGINT/SIGTERM handler.
pub type CancelFlag = Arc<AtomicBool>;

/// Executes one run to completion.
pub trait Executor: Send + Sync {
    /// Runs `spec` and reports what happened. Never panics on a failing command: spawn errors
    /// become [`Termination::SpawnFailed`]. When `cancel` becomes true the run is stopped as on
    /// timeout and reported as [`Termination::Interrupted`].
    fn execute(&self, spec: &RunSpec, cancel: &CancelFlag) -> RunOutcome;
}
