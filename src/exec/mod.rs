//! One run: spawn, pin, environment, capture, timeout, contain, measure (DESIGN 4).
//!
//! The scheduler only sees the [`Launcher`] trait, so scheduling tests need no processes.
//! [`ProcessLauncher`] is the real implementation. A launcher starts and supervises one process
//! on this host; where the runs of a session execute (here, or on a Slurm cluster's nodes, where
//! each array task uses a launcher of its own) is the backend's choice (`runner::backend`).
//!
//! # What one run looks like
//!
//! 1. The environment is built from the policy, `env` and `env-unset` ([`build_env`], in
//!    `environment.rs`).
//! 2. The supervising thread pins itself away from the CPUs of the runs in flight when another
//!    allowed CPU is free (`pinning.rs`; run.json `runner-cpus`).
//! 3. The run's containment is prepared (`containment.rs`): a per-run cgroup v2 where one can be
//!    made (`cgroup.rs`), else the process-tree fallback (`tree.rs`); `HWR_CONTAINMENT` chooses
//!    (see [`CONTAINMENT_VAR`]). Its cgroup may have been made ahead, by [`Launcher::prepare`] on
//!    another thread while the run before executed.
//! 4. The program is resolved against the run's own `PATH` (relative to its workdir) with
//!    [`resolve_program`]; the workdir must exist. Failures become [`Termination::SpawnFailed`].
//!    The child is forked (`spawn.rs`) with `clone3(CLONE_INTO_CGROUP)`, so it starts in the
//!    run's cgroup (where `clone3` is refused: `fork`, and the child joins the cgroup itself);
//!    the parent sets the child's CPUs before it first runs. In `hwr-exp` the fork is made by
//!    the spawner (`spawner.rs`), a small process exec'd once from the same binary, with
//!    `CLONE_PARENT`, so the runner stays the parent while its own memory is neither copied
//!    nor write-protected per run; elsewhere (a test binary, a spawner that cannot start) the
//!    runner forks itself. It is a forked copy, not a child
//!    sharing the memory of its parent as `vfork` and `posix_spawn` make: at exec the kernel takes
//!    the peak RSS of the memory the child leaves into the run's `ru_maxrss`, which for a
//!    shared memory is the parent's own. Between fork and exec the child
//!    - starts its own session (`setsid`): it has no controlling terminal, so opening
//!      `/dev/tty` fails at once (ENXIO) instead of stopping the run; the session id and the
//!      process group id are its pid,
//!    - pins itself to `spec.cpus` (`sched_setaffinity`),
//!    - asks for `SIGKILL` when its parent dies (`PR_SET_PDEATHSIG`) and exits at once if the
//!      parent already died,
//!    - marks every fd >= 3 close-on-exec (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`), so only
//!      fds 0/1/2 survive exec,
//!    - resets every signal disposition to the default and empties the signal mask.
//!
//!    stdin is `/dev/null`; stdout and stderr are pipes that the supervising thread copies
//!    into the output file and `stderr.log` while it waits (`drain.rs`): a run that reopens
//!    `/dev/stdout` truncates nothing; both go through one pipe when they name the same file.
//! 5. The parent waits on a pidfd with `poll` (`supervise.rs`), waking for external memory
//!    samples of every process of the run (`sampling.rs`), the timeout, the SIGTERM grace period
//!    and (every 50 ms) the cancel flag; the same `poll` watches the output pipes, so no thread is
//!    made per run. On timeout or interrupt every
//!    process of the run gets SIGTERM, and SIGKILL after the grace period.
//! 6. The leader is reaped with `wait4`, which gives the exit status and its rusage (user and
//!    system CPU seconds, peak RSS). `ended` and `wall_seconds` are taken here, so the stray
//!    cleanup below is not counted as run time. A run stopped on timeout or interrupt keeps
//!    its real status: `signal` is the signal that ended it (SIGTERM or SIGKILL), or
//!    `exit_code` is set when it caught SIGTERM and exited by itself.
//! 7. Whatever of the run is left (a background process, a `setsid` daemon) gets SIGTERM, then
//!    SIGKILL after the grace period, until nothing is left; these are `stray_processes_killed`.
//!    Orphans that came back to the runner are reaped (`children.rs`) and the cgroup is removed
//!    (once runs are prepared ahead, an empty cgroup is left for the next [`Launcher::prepare`]
//!    or [`Launcher::tidy`] to remove, still listed with the guardian).
//!    When [`Launcher::execute`] returns, no process of the run is alive.
//!
//! The guardian (`guardian.rs`) does the same for every run in flight if the runner dies.
//!
//! # Limits
//!
//! - `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
//!   [`Launcher::execute`] blocks its calling thread until the run is over, so that thread always
//!   outlives the run; a run forked by the spawner has as parent thread the runner thread that
//!   started the spawner, which lives as long as the runner.
//! - The process-tree fallback can lose a process that leaves the run's session, loses its
//!   parent and drops `HWR_RUN_ID` from its environment while other runs are in flight (see
//!   `tree.rs`); a cgroup cannot.
//! - The runner must not set `SIGCHLD` to `SIG_IGN` (children would be auto-reaped and `wait4`
//!   would have no status to report).

mod cgroup;
mod children;
mod containment;
mod drain;
mod environment;
mod fork;
pub mod guardian;
mod memcg;
mod pinning;
mod sampling;
mod shm;
mod spawn;
mod spawn_message;
pub mod spawner;
mod supervise;
mod tree;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

pub use containment::{
    CONTAINMENT_VAR, Containment, EscapedProcess, check_setting as check_containment_setting, placement_note,
};
pub use environment::{CLEAN_KEPT, CLEAN_KEPT_PREFIX, EnvPolicy, build_env, clean_keeps};
pub use pinning::pin_current_thread;
pub use sampling::{MAPPINGS_FILE, PRIOR_NS_PER_PAGE, WALK_BUDGET};
pub use shm::{SharedMemoryKind, SharedMemoryLeft};
pub use spawn::{resolve_program, return_freed_memory};

/// Everything needed to start one run; paths are absolute.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Program and arguments; `argv[0]` without `/` is looked up in the child's `PATH`.
    pub argv: Vec<String>,
    /// Working directory of the child.
    pub workdir: PathBuf,
    /// The child's complete environment (already built from policy, `env`, `env-unset`, `HWR_*`
    /// with [`build_env`]).
    pub env: Vec<(OsString, OsString)>,
    /// CPUs to pin the child to (sched_setaffinity in the child before exec). Empty = no pinning.
    pub cpus: Vec<usize>,
    /// Whole-run limit; `None` = none.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM to every process of the run and SIGKILL.
    pub grace: Duration,
    /// File the child's stdout is streamed to (created/truncated).
    pub stdout_path: PathBuf,
    /// File the child's stderr is streamed to (created/truncated).
    pub stderr_path: PathBuf,
    /// Where external memory samples go as JSON lines ([`MemorySample`]; see `sampling.rs`);
    /// `None` = no sampling. The per-mapping breakdown goes to [`MAPPINGS_FILE`] beside it.
    pub memory_path: Option<PathBuf>,
    /// Sampling period for `memory_path`.
    pub sample_interval: Duration,
    /// The allocator the run is given (`LD_PRELOAD` is already in `env`): after the program
    /// starts, its `/proc/<pid>/maps` is read until the dynamic loader has mapped its libraries,
    /// to see whether the allocator is in effect ([`RunOutcome::allocator`]). `None` = no check.
    pub allocator: Option<crate::allocator::Choice>,
}

/// Why a run could not be started: the message run.json records (`error`) and the OS error
/// behind it, when there is one (the `errno` of the failed `open`, `mkdir`, `dup`, `clone` or
/// `execve`), for callers that decide by it (the runner's own resource errors, `EMFILE`,
/// `ENOSPC`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    /// What could not be done, for the user.
    pub message: String,
    /// The OS error that caused it; `None` when the cause is not an OS error (program not found,
    /// not executable, a CPU number out of range).
    pub os_error: Option<rustix::io::Errno>,
}

impl StartError {
    /// An error with no OS error behind it.
    pub fn new(message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            os_error: None,
        }
    }

    /// `message` caused by `cause` (its `raw_os_error`, if any, is kept).
    pub fn os(message: impl Into<String>, cause: &std::io::Error) -> StartError {
        StartError {
            message: message.into(),
            os_error: cause.raw_os_error().map(rustix::io::Errno::from_raw_os_error),
        }
    }

    /// The same cause with a message that says more (`format!("...: {self}")`).
    fn context(self, message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            os_error: self.os_error,
        }
    }
}

/// How a run ended (`termination` in run.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Termination {
    /// The process exited by itself (any exit code, including 124 from its own `timeout`).
    Exited,
    /// The process was killed by a signal the runner did not send.
    Signaled,
    /// The runner's timeout expired; the run got SIGTERM, then SIGKILL after grace.
    Timeout,
    /// The program could not be started (not found, not executable, bad workdir).
    SpawnFailed,
    /// The runner was interrupted (Ctrl-C / SIGTERM) and stopped this run.
    Interrupted,
    /// Slurm executor only: the array task left the queue without writing run.json (scancel,
    /// node failure, Slurm's time limit); recorded by the waiting hwr-exp, never by a launcher.
    Lost,
}

impl Termination {
    /// The name run.json `termination` uses (`exited`, `spawn-failed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Termination::Exited => "exited",
            Termination::Signaled => "signaled",
            Termination::Timeout => "timeout",
            Termination::SpawnFailed => "spawn-failed",
            Termination::Interrupted => "interrupted",
            Termination::Lost => "lost",
        }
    }
}

/// What one run did, as measured by the launcher.
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
    /// The OS error behind `error` when the run could not be started ([`StartError::os_error`]).
    #[serde(skip)]
    pub start_os_error: Option<rustix::io::Errno>,
    /// CPUs the child may run on, read back after its exec (`sched_getaffinity(pid)`, as
    /// `Cpus_allowed_list` of `/proc/<pid>/status` shows them).
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
    /// The largest peak RSS of a single process, bytes: `ru_maxrss` from `wait4` (KiB x 1024),
    /// which is the larger of the leader's own peak and the largest peak among the descendants
    /// the leader waited for. Not the tree's peak (see `cgroup_memory_peak_bytes`), and not
    /// always the leader's.
    pub peak_rss_bytes: Option<u64>,
    /// Processes of the run still alive after the leader exited (or was stopped), which the
    /// runner then killed.
    pub stray_processes_killed: u32,
    /// Processes of the run found outside its cgroup when it ended (they moved themselves out).
    pub escaped_processes: Vec<EscapedProcess>,
    /// Number of external memory samples written.
    pub memory_samples: u32,
    /// How sampling went (interval achieved, page-table walks, their cost); `None` when the run
    /// was not sampled.
    pub sampling: Option<SamplingSummary>,
    /// Where `cgroup_memory_peak_bytes` (and the samples' cgroup figures) come from:
    /// `cgroup2 memory.peak` or `cgroup1 memory.max_usage_in_bytes`.
    pub cgroup_memory_source: Option<String>,
    /// SysV shared memory segments and `/dev/shm` files that appeared during the run and
    /// outlived it.
    pub shared_memory_left: Vec<SharedMemoryLeft>,
    /// How the run's processes were held together; `None` when nothing was started.
    pub containment: Option<Containment>,
    /// CPUs the supervising (and sampling) thread of the runner could run on during the run
    /// (`sched_getaffinity` of that thread).
    pub runner_cpus: Option<Vec<usize>>,
    /// The peak of all the run's processes together, bytes: `memory.peak` of the run's cgroup
    /// v2 where it has the memory controller, else `memory.max_usage_in_bytes` of its v1 memory
    /// cgroup (`cgroup_memory_source` says which). Page cache and kernel memory charged to the
    /// run are included.
    pub cgroup_memory_peak_bytes: Option<u64>,
    /// What was seen of [`RunSpec::allocator`] in the process's maps; `None` without one.
    pub allocator: Option<crate::allocator::Record>,
}

/// Which file a [`MemorySample`]'s per-process figures come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SampleSource {
    /// `/proc/<pid>/smaps_rollup` of every process (a page-table walk): `rss`, `pss`, `pss-anon`,
    /// `private`, `anonymous`, `swap` come from it (`rss-anon`, `rss-file`, `rss-shmem` from
    /// status). Samples written before this field existed are all of this kind.
    #[default]
    #[serde(rename = "smaps_rollup")]
    SmapsRollup,
    /// `/proc/<pid>/status` of every process (counters, no walk): `rss`, `rss-anon`,
    /// `rss-file`, `rss-shmem`, `swap`; no `pss`, `private` or `anonymous`.
    #[serde(rename = "status")]
    Status,
}

/// The leader's own figures in one sample, bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LeaderFigures {
    /// The leader's pid.
    pub pid: i32,
    /// The thread whose `/proc/<pid>/task/<tid>/` was read, when the main thread has exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_thread: Option<i32>,
    /// Its `/proc/<pid>/status` counters.
    #[serde(flatten)]
    pub status: crate::memory::StatusCounters,
    /// `Pss` of its smaps_rollup (walk samples only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pss: Option<u64>,
    /// `Pss_Anon` (walk samples only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pss_anon: Option<u64>,
    /// `Private_Clean + Private_Dirty` (walk samples only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<u64>,
    /// `Anonymous` (walk samples only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<u64>,
}

/// How a run's sampling went (run.json `sampling`). Seconds unless named otherwise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SamplingSummary {
    /// `sample-interval` as the manifest asked.
    pub requested_interval_seconds: f64,
    /// Mean time between consecutive samples; `None` with fewer than two.
    #[serde(default)]
    pub achieved_interval_seconds: Option<f64>,
    /// Longest time between consecutive samples.
    #[serde(default)]
    pub longest_gap_seconds: Option<f64>,
    /// Whether samples came at the requested interval (the mean gap within 25% + 2 ms of it,
    /// and at least one sample); when not, `note` says why.
    pub honoured: bool,
    /// Samples written (memory.jsonl lines).
    pub samples: u32,
    /// Of those, samples with smaps_rollup (page-table walk) figures.
    pub walk_samples: u32,
    /// Mean time between walk samples; `None` with fewer than two.
    #[serde(default)]
    pub walk_interval_seconds: Option<f64>,
    /// Share of the run's wall time the walks may take (0.01).
    pub walk_budget: f64,
    /// Time spent in page-table walks (smaps_rollup and smaps reads), summed.
    pub walk_cost_seconds: f64,
    /// The longest single smaps_rollup read.
    pub longest_walk_seconds: f64,
    /// `walk-cost-seconds` / the run's wall time.
    #[serde(default)]
    pub walk_share: Option<f64>,
    /// Time spent taking samples, everything included (status, walks, cgroup files, writing).
    pub cost_seconds: f64,
    /// Per-mapping breakdowns taken (mappings.json holds the first and the last).
    #[serde(default)]
    pub mapping_breakdowns: u32,
    /// Whether a process was read through a live thread (its main thread had exited).
    #[serde(default)]
    pub read_through_thread: bool,
    /// What was not as requested: no sample, an interval not kept, walks rarer than samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One external sample of the run's process, one JSON line of memory.jsonl. Bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MemorySample {
    /// Seconds since the run started.
    pub t_seconds: f64,
    /// Live processes of the run that were read: every process in the run's cgroup
    /// (`cgroup.procs`) or tracked tree (1 for a plain `argv` program; a `shell` command also
    /// counts its `/bin/sh`).
    #[serde(default = "one")]
    pub processes: u32,
    /// Which file the per-process figures come from (see [`SampleSource`]).
    #[serde(default)]
    pub source: SampleSource,
    /// Figures summed over those processes: `rss`, `swap` always; `pss`, `pss-anon`, `private`,
    /// `anonymous` in smaps_rollup samples only. `pss` is the tree's figure: shared pages are
    /// divided among the processes that map them, so the sum counts each page once. `rss`
    /// counts a page shared by two processes twice. `private` is the sum of each process's
    /// private bytes: a page mapped by two processes of the run is private to neither and is
    /// not in it, so for a tree it is "memory no other process maps", not "memory of the run".
    #[serde(flatten)]
    pub rollup: crate::memory::Rollup,
    /// `RssAnon` of `/proc/<pid>/status`, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_anon: Option<u64>,
    /// `RssFile`, summed (counts a file page once per process that maps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_file: Option<u64>,
    /// `RssShmem`, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_shmem: Option<u64>,
    /// The leader's own figures (absent once the leader is gone, or in old samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderFigures>,
    /// Whether this walk sample read `/proc/<pid>/smaps` (a per-mapping breakdown, kept in
    /// mappings.json as `first` or `last`) rather than smaps_rollup. Absent when not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub breakdown: bool,
    /// What taking this sample cost the runner, seconds (the reads and the walk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_seconds: Option<f64>,
    /// `memory.current` of the run's cgroup v2, else `memory.usage_in_bytes` of its v1 memory
    /// cgroup, bytes (page cache and kernel memory charged to the run included). Only where the
    /// run has a memory cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_memory_current: Option<u64>,
    /// `memory.peak` (cgroup v2, Linux 5.19+) or `memory.max_usage_in_bytes` (v1) of the run's
    /// memory cgroup so far, bytes: the tree's peak. Only where the run has a memory cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_memory_peak: Option<u64>,
}

fn one() -> u32 {
    1
}

/// Shared cancellation flag: set by the runner's SIGINT/SIGTERM handler.
pub type CancelFlag = Arc<AtomicBool>;

/// Launches one run's process on this host and supervises it to completion (timeout, cancel,
/// containment, sampling): one process tree per call, nothing about sessions or bundles.
pub trait Launcher: Send + Sync {
    /// Runs `spec` and reports what happened. Never panics on a failing command: spawn errors
    /// become [`Termination::SpawnFailed`]. When `cancel` becomes true the run is stopped as on
    /// timeout and reported as [`Termination::Interrupted`].
    fn execute(&self, spec: &RunSpec, cancel: &CancelFlag) -> RunOutcome;

    /// [`Launcher::execute`], calling `started` once as soon as the run's program has been
    /// started (or has failed to start), before the wait for its end: the caller's moment to
    /// hand work to another thread while the run executes. This default calls it first.
    fn execute_then(&self, spec: &RunSpec, cancel: &CancelFlag, started: &mut dyn FnMut()) -> RunOutcome {
        started();
        self.execute(spec, cancel)
    }

    /// Makes ready ahead what executing `spec` will need, and finishes clean-up left by runs
    /// that have ended; called from another thread while an earlier run executes, so that less
    /// is done between one run and the next. [`Launcher::execute`] of `spec` (matched by its
    /// `stdout_path`) uses what was made and makes itself what was not. Whoever calls this calls
    /// [`Launcher::tidy`] once done. This default does nothing.
    fn prepare(&self, _spec: &RunSpec) {}

    /// Finishes the clean-up left for later and drops what [`Launcher::prepare`] made for runs
    /// that were not executed. This default does nothing.
    fn tidy(&self) {}
}

/// Runs each [`RunSpec`] as a child process in its own session, contained (see the module docs).
///
/// Share one instance between threads (clones share its state). Create it with
/// [`ProcessLauncher::new`], which makes the runner a child subreaper; one built by `Default`
/// does that on its first [`Launcher::execute`] call instead.
///
/// [`Launcher::prepare`] makes a run's cgroup ahead; once it has been called, the empty cgroups
/// of ended runs are removed by the next `prepare` or by [`Launcher::tidy`] instead of between
/// two runs. Dropping the last clone tidies too.
#[derive(Debug, Default, Clone)]
pub struct ProcessLauncher {
    ahead: Arc<Ahead>,
}

/// What [`ProcessLauncher`] keeps between runs.
#[derive(Debug, Default)]
struct Ahead {
    /// What [`Launcher::prepare`] made, by the `stdout_path` of its run.
    made: std::sync::Mutex<Vec<(PathBuf, Made)>>,
    /// Set by the first [`Launcher::prepare`]: from then on empty cgroups are left in
    /// `leftovers` and ended runs' memory cgroups in `memcgs`, since someone will call `prepare`
    /// or `tidy` again.
    deferring: AtomicBool,
    /// Empty cgroups of ended runs, to be removed.
    leftovers: containment::Leftovers,
    /// v1 memory cgroups of ended runs, to be removed.
    memcgs: memcg::Ended,
}

/// What [`Launcher::prepare`] made for one run.
#[derive(Debug)]
struct Made {
    /// Its cgroup (only where runs get one).
    containment: Option<containment::RunContainment>,
    /// Its v1 memory cgroup (only where it is measured and its cgroup has no memory controller).
    memcg: Option<memcg::RunMemcg>,
}

impl Made {
    fn drop_all(self) {
        if let Some(c) = self.containment {
            c.abandon();
        }
        if let Some(m) = self.memcg {
            m.remove();
        }
    }
}

impl Ahead {
    fn tidy(&self) {
        self.leftovers.remove_all();
        self.memcgs.remove_all();
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, made) in made {
            made.drop_all();
        }
    }

    /// What was made ahead for `spec`'s run, if anything.
    fn take(&self, spec: &RunSpec) -> Option<Made> {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let i = made.iter().position(|(key, _)| *key == spec.stdout_path)?;
        Some(made.swap_remove(i).1)
    }
}

/// Whether a run of `spec` in `containment` needs a v1 memory cgroup of its own for the tree's
/// peak: only when it is measured and its cgroup (if any) has no memory controller.
fn needs_memcg(spec: &RunSpec, containment: Option<&containment::RunContainment>) -> bool {
    spec.memory_path.is_some() && !containment.is_some_and(containment::RunContainment::has_memory)
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.tidy();
    }
}

impl ProcessLauncher {
    /// Creates the launcher and makes the calling process a child subreaper
    /// (`prctl(PR_SET_CHILD_SUBREAPER, 1)`, once per process), so that orphaned grandchildren of a
    /// run are reparented to the runner, where they can be reaped.
    ///
    /// It also starts the [guardian], once per process, which stops the runs in
    /// flight if the runner dies (SIGKILL included).
    pub fn new() -> Self {
        become_subreaper();
        containment::placement_note();
        guardian::ensure_started();
        ProcessLauncher::default()
    }
}

/// Makes this process a child subreaper, once. Failure (very old kernel) only weakens the
/// zombie reaping of strays, so it is ignored.
fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    });
}

impl Launcher for ProcessLauncher {
    fn execute(&self, spec: &RunSpec, cancel: &CancelFlag) -> RunOutcome {
        self.execute_then(spec, cancel, &mut || {})
    }

    fn execute_then(&self, spec: &RunSpec, cancel: &CancelFlag, started: &mut dyn FnMut()) -> RunOutcome {
        become_subreaper();
        containment::placement_note();
        guardian::ensure_started();
        let started_at = SystemTime::now();
        let start = Instant::now();
        if cancel.load(Ordering::Relaxed) {
            started();
            let mut outcome = RunOutcome::empty(started_at, start);
            outcome.termination = Termination::Interrupted;
            outcome.error = Some("the runner was interrupted before this run started".into());
            return outcome;
        }
        let placement = pinning::place_runner(&spec.cpus);
        let (made, mut memcg_made) = match self.ahead.take(spec) {
            Some(Made { containment, memcg }) => (containment.map(Ok), memcg),
            None => (None, None),
        };
        let containment = match made.unwrap_or_else(|| containment::RunContainment::prepare(spec)) {
            Ok(c) => c,
            Err(error) => {
                started();
                if let Some(m) = memcg_made.take() {
                    m.remove();
                }
                let mut outcome = RunOutcome::empty(started_at, start);
                outcome.start_os_error = error.os_error;
                outcome.error = Some(error.message);
                outcome.runner_cpus = placement.runner_cpus.clone();
                return outcome;
            }
        };
        let kind = containment.kind();
        // The tree's peak: the run's cgroup v2 has it where it has the memory controller, else
        // a v1 memory cgroup of the run's own, where the host has one (only when measuring),
        // made ahead where runs are prepared.
        let later = self.ahead.deferring.load(Ordering::Relaxed);
        let memcg = if needs_memcg(spec, Some(&containment)) {
            memcg_made.take().or_else(|| self.ahead.memcgs.reuse_or_create())
        } else {
            None
        };
        if let Some(m) = memcg_made {
            self.ahead.memcgs.push(m);
        }
        let shm_before = shm::snapshot();
        let child = spawn::spawn(
            spec,
            containment.cgroup_dir(),
            memcg.as_ref().map(|m| m.procs_fd()),
        );
        started();
        let mut outcome = match child {
            Ok(child) => {
                let measure = supervise::Measure {
                    memcg,
                    memcg_later: later.then_some(&self.ahead.memcgs),
                    shm_before,
                };
                supervise::supervise(
                    spec,
                    cancel,
                    child,
                    (containment, later.then_some(&self.ahead.leftovers)),
                    measure,
                    started_at,
                    start,
                )
            }
            Err(error) => {
                containment.abandon();
                if let Some(m) = memcg {
                    m.remove();
                }
                let mut outcome = RunOutcome::empty(started_at, start);
                outcome.termination = Termination::SpawnFailed;
                outcome.start_os_error = error.os_error;
                outcome.error = Some(error.message);
                outcome
            }
        };
        outcome.containment = Some(kind);
        outcome.runner_cpus = placement.runner_cpus.clone();
        if outcome.allocator.is_none() {
            outcome.allocator = spec.allocator.as_ref().map(crate::allocator::Record::unseen);
        }
        outcome
    }

    /// Removes the empty cgroups of ended runs, then makes `spec`'s cgroup (where runs get one,
    /// listed with the guardian) and gives it a v1 memory cgroup (where it needs one): an ended
    /// run's that can serve again (`memcg.rs`), else a new one; the other
    /// ended runs' memory cgroups are removed.
    fn prepare(&self, spec: &RunSpec) {
        self.ahead.deferring.store(true, Ordering::Relaxed);
        self.ahead.leftovers.remove_all();
        let containment = containment::RunContainment::prepare_ahead(spec);
        let memcg = if needs_memcg(spec, containment.as_ref()) {
            self.ahead.memcgs.reuse_or_create()
        } else {
            self.ahead.memcgs.remove_all();
            None
        };
        if containment.is_some() || memcg.is_some() {
            let mut list = self.ahead.made.lock().unwrap_or_else(|e| e.into_inner());
            list.push((spec.stdout_path.clone(), Made { containment, memcg }));
        }
    }

    fn tidy(&self) {
        self.ahead.tidy();
    }
}

impl RunOutcome {
    /// The outcome of a run that never reported back (a Slurm task that left the queue without
    /// run.json): termination [`Termination::Lost`], started and ended at `at`, nothing measured.
    pub fn lost(at: SystemTime) -> RunOutcome {
        RunOutcome {
            termination: Termination::Lost,
            started: at,
            ended: at,
            wall_seconds: 0.0,
            ..RunOutcome::empty(at, Instant::now())
        }
    }

    /// An outcome with nothing measured yet, ended now.
    fn empty(started: SystemTime, start: Instant) -> RunOutcome {
        RunOutcome {
            termination: Termination::SpawnFailed,
            exit_code: None,
            signal: None,
            error: None,
            start_os_error: None,
            cpus_effective: None,
            pid: None,
            started,
            ended: SystemTime::now(),
            wall_seconds: start.elapsed().as_secs_f64(),
            user_seconds: None,
            sys_seconds: None,
            peak_rss_bytes: None,
            stray_processes_killed: 0,
            escaped_processes: Vec::new(),
            memory_samples: 0,
            sampling: None,
            cgroup_memory_source: None,
            shared_memory_left: Vec::new(),
            containment: None,
            runner_cpus: None,
            cgroup_memory_peak_bytes: None,
            allocator: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` is the serde name, both ways, of every variant.
    #[test]
    fn termination_names_are_the_serde_names() {
        for v in [
            Termination::Exited,
            Termination::Signaled,
            Termination::Timeout,
            Termination::SpawnFailed,
            Termination::Interrupted,
            Termination::Lost,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{v:?}");
            assert_eq!(
                serde_json::from_value::<Termination>(v.as_str().into()).unwrap(),
                v
            );
        }
    }

    /// A start error keeps the OS error of its cause, and a wrapping message keeps it too.
    #[test]
    fn start_errors_keep_the_os_error() {
        let cause = std::io::Error::from_raw_os_error(libc::EMFILE);
        let e = StartError::os(format!("cannot create stdout file: {cause}"), &cause);
        assert_eq!(e.os_error, Some(rustix::io::Errno::MFILE));
        assert_eq!(e.to_string(), format!("cannot create stdout file: {cause}"));
        let wrapped = e.context("outer");
        assert_eq!(
            (wrapped.message.as_str(), wrapped.os_error),
            ("outer", Some(rustix::io::Errno::MFILE))
        );
        let plain = StartError::os("x", &std::io::Error::other("not an OS error"));
        assert_eq!(plain.os_error, None);
        assert_eq!(StartError::new("y").os_error, None);
    }
}
