//! Thin wrappers around Slurm's client commands `sbatch`, `squeue`, `scontrol` and `scancel`
//! (DESIGN 8: shell out as submitit, Snakemake and Nextflow do; no `sacct`, no library binding).
//!
//! Each call runs one command with stdin closed, captures stdout and stderr, and returns a typed
//! answer or a [`SlurmError`] carrying the command line, the exit status and stderr. The commands
//! find the cluster through `SLURM_CONF` in the environment, as every Slurm client does;
//! [`SlurmClient::with_conf`] sets it for this client's commands only.
//!
//! Behaviour relied on (Slurm 22.05.8; docs/slurm.md has the transcripts):
//! - `sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER` and exits 0; a refused submission
//!   exits 1 with `sbatch: error: Batch job submission failed: ...` on stderr.
//! - `squeue -j IDS` exits 1 with `slurm_load_jobs error: Invalid job id specified` when none of
//!   the ids is known any more (purged); [`SlurmClient::queue`] answers an empty snapshot then.
//! - `scontrol show job A_T` exits 1 printing `Job A_T not found` for a task Slurm forgot.
//! - `scancel` of an unknown job exits 0 silently.
//! - With `SLURM_CONF` naming a missing file, `scontrol` retries for 60 s before failing:
//!   [`cluster_configured`] checks the file first.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Tag;

/// A child's pipe: read, and polled by its descriptor.
trait ReadFd: Read {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_>;
}

impl ReadFd for std::process::ChildStdout {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

impl ReadFd for std::process::ChildStderr {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}
use super::array::ArrayLimits;
use super::config::{JobLimits, array_limits, job_limits, parse_config, parse_submit_limit};
use super::error::SlurmError;
use super::queue::{
    self, ACTIVE_FORMAT, ACTIVE_STATES, ActiveQueue, JobRecord, JobRecords, QueueSnapshot, RECORDS_FORMAT,
    SQUEUE_FORMAT, TaskKey, TaskState,
};

/// Back-off for transient errors ([`SlurmError::is_transient`]): up to `attempts` tries, the
/// pause doubling from `first_delay` to at most `max_delay`. Permanent errors fail at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (1 = no retry).
    pub attempts: u32,
    /// Pause before the second try.
    pub first_delay: Duration,
    /// Longest pause.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// One try, no retry: for quick looks (`list`, `plan --format sbatch`) that must not wait
    /// for a controller that is down.
    pub fn once() -> Self {
        RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        }
    }
}

impl Default for RetryPolicy {
    /// 6 tries, pauses 1, 2, 4, 8, 16 s (31 s in all: a slurmctld restart takes a few seconds).
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            first_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(16),
        }
    }
}

/// One retry about to happen, for the progress display.
#[derive(Debug, Clone)]
pub struct RetryNote {
    /// The program (`sbatch`, `squeue`, ...).
    pub program: String,
    /// Slurm's message of the failed try.
    pub message: String,
    /// The pause before the next try.
    pub delay: Duration,
    /// The try about to be made (2 = the first retry).
    pub attempt: u32,
    /// Tries in all.
    pub attempts: u32,
}

impl std::fmt::Display for RetryNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed ({}); retrying in {:.0} s (try {} of {})",
            self.program,
            self.message,
            self.delay.as_secs_f64(),
            self.attempt,
            self.attempts
        )
    }
}

/// Which environment variables reach `sbatch` (issue 25: the recorded batch script is what runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EnvPolicy {
    /// `SBATCH_*` and `SLURM_*` variables (but `SLURM_CONF`) are removed from sbatch's
    /// environment: sbatch reads them as options that override the script's `#SBATCH` lines.
    #[default]
    Clear,
    /// They are passed on (`keep-sbatch-env = true`); the bundle records them.
    Keep,
}

/// The variables of this process's environment that sbatch reads as input and that
/// [`EnvPolicy::Clear`] removes: every `SBATCH_*`, and every `SLURM_*` but `SLURM_CONF` (a
/// runner started inside an allocation inherits `SLURM_JOB_*`, `SLURM_MEM_PER_CPU`, ...), sorted.
pub fn sbatch_input_env() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            sbatch_input(&k).then(|| (k, v.to_string_lossy().into_owned()))
        })
        .collect();
    vars.sort();
    vars
}

fn sbatch_input(name: &str) -> bool {
    name.starts_with("SBATCH_") || (name.starts_with("SLURM_") && name != "SLURM_CONF")
}

/// Variables that change what `squeue`, `scontrol` and `scancel` print or select
/// (`SQUEUE_FORMAT`, `SQUEUE_STATES`, `SLURM_TIME_FORMAT`, `SCANCEL_INTERACTIVE`, ...): hwr-exp
/// parses their output and names what it selects, so these are always removed.
fn query_input(name: &str) -> bool {
    name.starts_with("SQUEUE_")
        || name.starts_with("SCANCEL_")
        || name.starts_with("SCONTROL_")
        || name == "SLURM_TIME_FORMAT"
}

/// An array found by its tag ([`SlurmClient::tagged`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedArray {
    /// The array's job id.
    pub job_id: u64,
    /// The tag of its `--comment`.
    pub tag: Tag,
    /// Tasks (or pending meta-records) not yet finished.
    pub active: usize,
    /// Of those, pending on a hold (`JobHeldUser`, `JobHeldAdmin`).
    pub held: usize,
}

/// What `sbatch --parsable` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The job id (of the array, for an array).
    pub job_id: u64,
    /// The cluster name after `;`, printed on federated / multi-cluster setups.
    pub cluster: Option<String>,
    /// sbatch's stderr on success (warnings), trimmed; empty when quiet.
    pub warnings: String,
}

/// What to cancel with `scancel`: a whole job (array) or one array task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelTarget {
    /// A job id; for an array, every task of it.
    Job(u64),
    /// One task, `A_T`.
    Task(TaskKey),
}

impl std::fmt::Display for CancelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CancelTarget::Job(id) => write!(f, "{id}"),
            CancelTarget::Task(key) => write!(f, "{key}"),
        }
    }
}

/// Called before each retry ([`RetryNote`]), for the progress display.
pub type RetryObserver = Arc<dyn Fn(&RetryNote) + Send + Sync>;

/// Runs Slurm's client commands. Cheap to clone; holds no connection. Transient failures are
/// retried ([`RetryPolicy`]); a set cancel flag stops a command in flight and the pauses.
#[derive(Clone, Default)]
pub struct SlurmClient {
    /// Folder holding `sbatch`, `squeue`, `scontrol`, `scancel`; `None` = look them up in `PATH`.
    bin_dir: Option<PathBuf>,
    /// `SLURM_CONF` for the commands; `None` = inherit the environment's.
    conf: Option<PathBuf>,
    /// Retries of transient errors.
    retry: RetryPolicy,
    /// Told of each retry.
    observer: Option<RetryObserver>,
    /// Stops commands in flight when set.
    cancel: Option<Arc<AtomicBool>>,
    /// sbatch's environment.
    env: EnvPolicy,
}

impl std::fmt::Debug for SlurmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmClient")
            .field("bin_dir", &self.bin_dir)
            .field("conf", &self.conf)
            .field("retry", &self.retry)
            .field("observer", &self.observer.is_some())
            .field("cancel", &self.cancel)
            .field("env", &self.env)
            .finish()
    }
}

pub use super::error::DEADLINE_VAR;

/// Default deadline of one call of `scontrol`, `squeue`, `sbatch` or `scancel`.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// The deadline of one Slurm command: [`DEADLINE_VAR`] when set to a valid duration, else
/// [`DEFAULT_DEADLINE`]. A command still running then is killed and reported as
/// [`SlurmError::TimedOut`] naming the command (a hung controller never hangs hwr-exp).
pub fn command_deadline() -> Duration {
    std::env::var(DEADLINE_VAR)
        .ok()
        .and_then(|v| humantime::parse_duration(v.trim()).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_DEADLINE)
}

/// Whether `SLURM_CONF` is set in this process's environment and names an existing file. Slurm's
/// clients without it fall back to `/etc/slurm/slurm.conf` or DNS SRV records; with it naming a
/// missing file they retry for a minute, which a quick "is there a cluster?" check must avoid.
pub fn cluster_configured() -> bool {
    std::env::var_os("SLURM_CONF").is_some_and(|c| Path::new(&c).is_file())
}

impl SlurmClient {
    /// A client that finds the programs in `PATH` and the cluster through the environment's
    /// `SLURM_CONF` (or Slurm's own defaults).
    pub fn new() -> Self {
        SlurmClient::default()
    }

    /// This client's commands get `SLURM_CONF=conf`.
    pub fn with_conf(mut self, conf: impl Into<PathBuf>) -> Self {
        self.conf = Some(conf.into());
        self
    }

    /// This client runs the programs from `dir` instead of `PATH` (a site install, or fakes in tests).
    pub fn with_bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// This client retries transient errors by `policy`.
    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// This client tells `observer` of every retry before pausing.
    pub fn with_observer(mut self, observer: RetryObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// This client's commands and pauses stop when `flag` is set ([`SlurmError::Interrupted`]).
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// The same client without the cancel flag: for the clean-up after an interruption.
    pub fn without_cancel(&self) -> Self {
        let mut c = self.clone();
        c.cancel = None;
        c
    }

    /// This client passes sbatch's input variables by `policy`.
    pub fn with_env(mut self, policy: EnvPolicy) -> Self {
        self.env = policy;
        self
    }

    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst))
    }

    fn program(&self, name: &str) -> PathBuf {
        match &self.bin_dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        }
    }

    /// The command line as text for error messages, with `SLURM_CONF=...` first when this client
    /// sets it.
    fn describe(&self, program: &Path, args: &[OsString]) -> String {
        let mut words = Vec::new();
        if let Some(c) = &self.conf {
            words.push(format!("SLURM_CONF={}", quote(c.as_os_str())));
        }
        words.push(quote(program.as_os_str()));
        words.extend(args.iter().map(|a| quote(a)));
        words.join(" ")
    }

    /// Runs `name args...` with [`RetryPolicy`] retries of transient errors; `Ok((stdout,
    /// stderr))` on exit 0.
    fn run(&self, name: &str, args: &[OsString]) -> Result<(String, String), SlurmError> {
        self.run_retrying(name, args, &mut || None)
    }

    /// As [`SlurmClient::run`]; before each retry `before_retry` may answer instead (`sbatch`:
    /// the job the failed try created after all, found by its tag).
    fn run_retrying(
        &self,
        name: &str,
        args: &[OsString],
        before_retry: &mut dyn FnMut() -> Option<(String, String)>,
    ) -> Result<(String, String), SlurmError> {
        let mut attempt = 1;
        let mut delay = self.retry.first_delay;
        loop {
            match self.run_once(name, args) {
                Err(e) if e.is_transient() && attempt < self.retry.attempts.max(1) => {
                    attempt += 1;
                    if let Some(observer) = &self.observer {
                        observer(&RetryNote {
                            program: name.to_string(),
                            message: e.slurm_message(),
                            delay,
                            attempt,
                            attempts: self.retry.attempts,
                        });
                    }
                    self.pause(delay).map_err(|()| SlurmError::Interrupted {
                        command: self.describe(&self.program(name), args),
                    })?;
                    delay = (delay * 2).min(self.retry.max_delay);
                    if let Some(answer) = before_retry() {
                        return Ok(answer);
                    }
                }
                other => return other,
            }
        }
    }

    /// Sleeps `d`, `Err` as soon as the cancel flag is set.
    fn pause(&self, d: Duration) -> Result<(), ()> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if self.cancelled() {
                return Err(());
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
        }
        if self.cancelled() { Err(()) } else { Ok(()) }
    }

    /// Runs `name args...` once. stdout and stderr are read while the child runs, so a large
    /// answer never blocks it: without a cancel flag by this thread (`wait_with_output`, which
    /// polls both pipes), with one by two reader threads while this one watches the flag and kills
    /// the child when it is set. A waiter's client has no cancel flag: a thread per pipe and call
    /// would give each call's buffers to one of glibc's per-thread arenas (up to 8 per core), whose
    /// freed memory stays resident, so the waiter's memory grew with the calls it made.
    fn run_once(&self, name: &str, args: &[OsString]) -> Result<(String, String), SlurmError> {
        let program = self.program(name);
        let mut cmd = Command::new(&program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            let Some(k) = k.to_str() else { continue };
            let drop = if name == "sbatch" {
                self.env == EnvPolicy::Clear && sbatch_input(k)
            } else {
                query_input(k)
            };
            if drop {
                cmd.env_remove(k);
            }
        }
        if let Some(c) = &self.conf {
            cmd.env("SLURM_CONF", c);
        }
        let spawn_err = |source| SlurmError::Spawn {
            command: self.describe(&program, args),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let (status, out, err) = self.collect(&mut child, &program, args)?;
        self.outcome(&program, args, status, &out, &err)
    }

    /// Reads the child's stdout and stderr while it runs (one thread, `poll(2)` on both pipes, so
    /// no large answer blocks it and no reader thread is made per call), until it has exited and
    /// both pipes are closed. Stops it (SIGKILL) when the cancel flag is set
    /// ([`SlurmError::Interrupted`]) or at the deadline ([`command_deadline`],
    /// [`SlurmError::TimedOut`]); a child that exited while a process it left holds the pipes
    /// open is taken at the deadline with what it wrote.
    fn collect(
        &self,
        child: &mut std::process::Child,
        program: &Path,
        args: &[OsString],
    ) -> Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>), SlurmError> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let io_err = |source| SlurmError::Spawn {
            command: self.describe(program, args),
            source,
        };
        let limit = command_deadline();
        let deadline = Instant::now() + limit;
        let mut pipes: [Option<Box<dyn ReadFd>>; 2] = [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn ReadFd>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn ReadFd>),
        ];
        let mut bufs = [Vec::new(), Vec::new()];
        let mut chunk = vec![0u8; 64 * 1024];
        let mut exited = None;
        loop {
            if exited.is_none() {
                exited = child.try_wait().map_err(io_err)?;
            }
            if let Some(status) = exited
                && pipes.iter().all(Option::is_none)
            {
                return Ok((status, std::mem::take(&mut bufs[0]), std::mem::take(&mut bufs[1])));
            }
            let stop = if self.cancelled() {
                Some(SlurmError::Interrupted {
                    command: self.describe(program, args),
                })
            } else if Instant::now() >= deadline {
                if let Some(status) = exited {
                    return Ok((status, std::mem::take(&mut bufs[0]), std::mem::take(&mut bufs[1])));
                }
                Some(SlurmError::TimedOut {
                    command: self.describe(program, args),
                    after: limit,
                })
            } else {
                None
            };
            if let Some(e) = stop {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
            let nap = Timespec {
                tv_sec: 0,
                tv_nsec: 25_000_000,
            };
            if pipes.iter().all(Option::is_none) {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let ready: Vec<bool> = {
                let mut fds: Vec<PollFd<'_>> = pipes
                    .iter()
                    .flatten()
                    .map(|p| PollFd::from_borrowed_fd(p.fd(), PollFlags::IN))
                    .collect();
                match poll(&mut fds, Some(&nap)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(io_err(e.into())),
                }
                fds.iter().map(|f| !f.revents().is_empty()).collect()
            };
            let mut open = ready.into_iter();
            for (pipe, buf) in pipes.iter_mut().zip(bufs.iter_mut()) {
                let Some(p) = pipe else { continue };
                if !open.next().unwrap_or(false) {
                    continue;
                }
                match p.read(&mut chunk) {
                    Ok(0) => *pipe = None,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err(e)),
                }
            }
        }
    }

    /// The result of a finished call of `program args`: `Ok((stdout, stderr))` on exit 0, else
    /// [`SlurmError::Failed`] with stderr (or stdout when stderr is empty).
    fn outcome(
        &self,
        program: &Path,
        args: &[OsString],
        status: std::process::ExitStatus,
        out: &[u8],
        err: &[u8],
    ) -> Result<(String, String), SlurmError> {
        let stdout = String::from_utf8_lossy(out).into_owned();
        let stderr = String::from_utf8_lossy(err).trim().to_string();
        if status.success() {
            Ok((stdout, stderr))
        } else {
            Err(SlurmError::Failed {
                command: self.describe(program, args),
                status: status.to_string(),
                stderr: if stderr.is_empty() {
                    stdout.trim().to_string()
                } else {
                    stderr
                },
            })
        }
    }

    /// `scontrol ping`: `Ok` when the controller answers (`Slurmctld(primary) at HOST is UP`).
    ///
    /// # Errors
    /// [`SlurmError::Failed`] when it is down (exit 1, `... is DOWN` on stdout) or the
    /// configuration cannot be read; [`SlurmError::Spawn`] without a Slurm client.
    pub fn ping(&self) -> Result<(), SlurmError> {
        self.run("scontrol", &args(["ping"])).map(|_| ())
    }

    /// `scontrol show config` as `(key, value)` pairs in printed order (`MaxArraySize`, `11`).
    /// Lines are `Key<spaces>= value`; the header and the trailing ping lines are skipped.
    ///
    /// # Errors
    /// [`SlurmError`] when the command fails.
    pub fn config(&self) -> Result<Vec<(String, String)>, SlurmError> {
        let (out, _) = self.run("scontrol", &args(["show", "config"]))?;
        Ok(parse_config(&out))
    }

    /// Every partition's limits, `scontrol -o show partition`.
    ///
    /// # Errors
    /// [`SlurmError`] when the command fails.
    pub fn partitions(&self) -> Result<Vec<super::partition::PartitionLimits>, SlurmError> {
        let (out, _) = self.run("scontrol", &args(["-o", "show", "partition"]))?;
        Ok(super::partition::parse_partitions(&out))
    }

    /// The cluster's array limits: `MaxArraySize` and `max_array_tasks=` of `SchedulerParameters`
    /// from `scontrol show config`.
    ///
    /// # Errors
    /// [`SlurmError::Parse`] when `MaxArraySize` is missing or not a number; command errors.
    pub fn array_limits(&self) -> Result<ArrayLimits, SlurmError> {
        let config = self.config()?;
        array_limits(&config).map_err(|reason| SlurmError::Parse {
            command: self.describe(&self.program("scontrol"), &args(["show", "config"])),
            reason,
            output: config
                .iter()
                .filter(|(k, _)| k == "MaxArraySize" || k == "SchedulerParameters")
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
        })
    }

    /// `sbatch --parsable ARGS...`: submits and returns the job id. The batch script, when there
    /// is one, is the last of `args`; `--wrap=CMD` submits a one-line job instead.
    ///
    /// # Errors
    /// [`SlurmError::Failed`] with sbatch's reason (`Invalid job array specification`,
    /// `Invalid partition name specified`); [`SlurmError::Parse`] for an answer without a job id.
    pub fn sbatch<I, S>(&self, sbatch_args: I) -> Result<Submission, SlurmError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut all = args(["--parsable"]);
        all.extend(sbatch_args.into_iter().map(|a| a.as_ref().to_os_string()));
        let (out, warnings) = self.run("sbatch", &all)?;
        parse_submission(&out, warnings).map_err(|reason| SlurmError::Parse {
            command: self.describe(&self.program("sbatch"), &all),
            reason,
            output: out,
        })
    }

    /// `sbatch --parsable SCRIPT`: submits a batch script whose `#SBATCH` lines say everything.
    ///
    /// # Errors
    /// As [`SlurmClient::sbatch`].
    pub fn submit_script(&self, script: &Path) -> Result<Submission, SlurmError> {
        self.sbatch([script.as_os_str()])
    }

    /// `sbatch --parsable --hold SCRIPT`: the first phase of a submission (DESIGN 8). The script
    /// carries `tag` in its `#SBATCH --comment` and `job_name` in `--job-name`; no task of the
    /// array can start before [`SlurmClient::release`]. A transient failure is retried, but first
    /// the queue is asked for an array with this tag: a try that timed out may have created it,
    /// and it is answered instead of submitting a second one.
    ///
    /// # Errors
    /// As [`SlurmClient::sbatch`]; [`SlurmError::Interrupted`] when the cancel flag stopped it
    /// (an array may exist then: look for it with [`SlurmClient::tagged`]).
    pub fn submit_held(&self, script: &Path, job_name: &str, tag: &Tag) -> Result<Submission, SlurmError> {
        let all = args(["--parsable", "--hold"])
            .into_iter()
            .chain([script.as_os_str().to_os_string()])
            .collect::<Vec<_>>();
        let mut found = || {
            let bundle = Path::new(&tag.bundle);
            let arrays = self.tagged(job_name, bundle).ok()?;
            let hit = arrays.into_iter().find(|a| a.tag == *tag)?;
            Some((format!("{}\n", hit.job_id), String::new()))
        };
        let (out, warnings) = self.run_retrying("sbatch", &all, &mut found)?;
        parse_submission(&out, warnings).map_err(|reason| SlurmError::Parse {
            command: self.describe(&self.program("sbatch"), &all),
            reason,
            output: out,
        })
    }

    /// `scontrol release IDS`: the second phase; releasing an array twice is no error.
    ///
    /// # Errors
    /// [`SlurmError`] when scontrol fails (an id Slurm does not know: `Invalid job id`).
    pub fn release(&self, job_ids: &[u64]) -> Result<(), SlurmError> {
        if job_ids.is_empty() {
            return Ok(());
        }
        let ids = job_ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        self.run("scontrol", &args(["release", &ids])).map(|_| ())
    }

    /// Every array Slurm still lists whose job name is `job_name` and whose `--comment` is a
    /// [`Tag`] of `bundle` (`squeue -h -t all -n NAME -o %F|%T|%r|%k`), in job id order, with
    /// how many of its tasks are active and held. Finds arrays whose id never reached
    /// bundle.json; finished ones are listed until Slurm purges them.
    ///
    /// # Errors
    /// [`SlurmError`] when squeue fails.
    pub fn tagged(&self, job_name: &str, bundle: &Path) -> Result<Vec<TaggedArray>, SlurmError> {
        let all = args(["-h", "-t", "all", "-n", job_name, "-o", "%F|%T|%r|%k"]);
        let out = match self.run("squeue", &all) {
            Ok((out, _)) => out,
            Err(e) if e.stderr().contains("Invalid job id specified") => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let bundle = bundle.to_string_lossy();
        let mut found: std::collections::BTreeMap<u64, TaggedArray> = Default::default();
        for line in out.lines() {
            let mut f = line.splitn(4, '|');
            let (Some(id), Some(state), Some(reason), Some(comment)) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let (Ok(job_id), Some(tag)) = (id.trim().parse::<u64>(), Tag::parse(comment)) else {
                continue;
            };
            if tag.bundle != bundle {
                continue;
            }
            let a = found.entry(job_id).or_insert(TaggedArray {
                job_id,
                tag,
                active: 0,
                held: 0,
            });
            if !TaskState::parse(state).is_finished() {
                a.active += 1;
                if reason.trim().starts_with("JobHeld") {
                    a.held += 1;
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// `squeue -h -r -t all -j IDS -o FORMAT`: every task of the given arrays that Slurm still
    /// lists, finished ones included until purged. No ids gives an empty snapshot without running
    /// anything; ids Slurm no longer knows are simply absent.
    ///
    /// # Errors
    /// [`SlurmError::Failed`] (other than `Invalid job id specified`), [`SlurmError::Parse`].
    pub fn queue(&self, job_ids: &[u64]) -> Result<QueueSnapshot, SlurmError> {
        if job_ids.is_empty() {
            return Ok(QueueSnapshot::default());
        }
        let ids = job_ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let all = args(["-h", "-r", "-t", "all", "-j", &ids, "-o", SQUEUE_FORMAT]);
        let out = match self.run("squeue", &all) {
            Ok((out, _)) => out,
            Err(e) if e.stderr().contains("Invalid job id specified") => return Ok(QueueSnapshot::default()),
            Err(e) => return Err(e),
        };
        let entries = queue::parse_squeue(&out).map_err(|e| SlurmError::Parse {
            command: self.describe(&self.program("squeue"), &all),
            reason: e.to_string(),
            output: out.clone(),
        })?;
        Ok(QueueSnapshot::from_entries(entries))
    }

    /// `scontrol -o show job A_T`: Slurm's record of one task, `None` when Slurm no longer knows
    /// it (`Job A_T not found` / `Invalid job id specified`: purged after `MinJobAge`, or cancelled
    /// while pending).
    ///
    /// # Errors
    /// Other command failures; [`SlurmError::Parse`] for a record without `JobState=`.
    pub fn show_task(&self, key: TaskKey) -> Result<Option<JobRecord>, SlurmError> {
        self.show_job_text(&key.to_string())
    }

    /// `scontrol -o show job ID`: Slurm's record of one job by its own id (`SLURM_JOB_ID` inside a
    /// task), `None` when Slurm no longer knows it.
    ///
    /// # Errors
    /// As [`SlurmClient::show_task`].
    pub fn show_job(&self, job_id: u64) -> Result<Option<JobRecord>, SlurmError> {
        self.show_job_text(&job_id.to_string())
    }

    /// `squeue -h -j ID -o %L`: the time left before the job's time limit, as Slurm counts it at
    /// the moment of asking (`[D-]H:MM:SS` or `M:SS`, whole seconds). `Ok(None)` when the job
    /// has no limit (`UNLIMITED`). Read by a requeueing task when its pre-timeout signal arrives
    /// (Slurm may send that signal up to a minute early).
    ///
    /// # Errors
    /// [`SlurmError::Failed`] when squeue fails (an unknown job id included),
    /// [`SlurmError::Parse`] when it does not list the job or its answer is no Slurm time
    /// (`INVALID`, `NOT_SET`).
    pub fn time_left(&self, job_id: u64) -> Result<Option<Duration>, SlurmError> {
        let all = args(["-h", "-j", &job_id.to_string(), "-o", "%L"]);
        let (out, _) = self.run("squeue", &all)?;
        let line = out
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        super::partition::parse_time(line)
            .map(|secs| secs.map(Duration::from_secs))
            .map_err(|reason| SlurmError::Parse {
                command: self.describe(&self.program("squeue"), &all),
                reason,
                output: out.clone(),
            })
    }

    /// `scontrol requeue ID`: puts a running job (a task, by its own job id) back into the queue;
    /// Slurm ends its processes and starts it again later. The job must be requeueable
    /// (`--requeue`).
    ///
    /// # Errors
    /// [`SlurmError`] when scontrol refuses or fails.
    pub fn requeue(&self, job_id: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &args(["requeue", &job_id.to_string()]))
            .map(|_| ())
    }

    fn show_job_text(&self, id: &str) -> Result<Option<JobRecord>, SlurmError> {
        let all = args(["-o", "show", "job", id]);
        let out = match self.run("scontrol", &all) {
            Ok((out, _)) => out,
            Err(e) if e.stderr().contains("not found") || e.stderr().contains("Invalid job id") => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let records = queue::parse_scontrol_jobs(&out).map_err(|e| SlurmError::Parse {
            command: self.describe(&self.program("scontrol"), &all),
            reason: e.to_string(),
            output: out.clone(),
        })?;
        Ok(records.into_iter().next())
    }

    /// `squeue -h -j IDS -t ACTIVE_STATES -o ACTIVE_FORMAT` (no `-r`): the tasks of the given
    /// arrays that are not over, an array's pending rest as one line ([`ActiveQueue`]). A task
    /// of these arrays that is absent has ended. No ids gives an empty answer without running
    /// anything; ids Slurm no longer knows are simply absent.
    ///
    /// # Errors
    /// [`SlurmError::Failed`] (other than `Invalid job id specified`), [`SlurmError::Parse`].
    pub fn active(&self, job_ids: &[u64]) -> Result<ActiveQueue, SlurmError> {
        if job_ids.is_empty() {
            return Ok(ActiveQueue::default());
        }
        let ids = job_ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let all = args(["-h", "-j", &ids, "-t", ACTIVE_STATES, "-o", ACTIVE_FORMAT]);
        let out = match self.run("squeue", &all) {
            Ok((out, _)) => out,
            Err(e) if e.stderr().contains("Invalid job id specified") => return Ok(ActiveQueue::default()),
            Err(e) => return Err(e),
        };
        queue::parse_active(&out).map_err(|e| SlurmError::Parse {
            command: self.describe(&self.program("squeue"), &all),
            reason: e.to_string(),
            output: out.clone(),
        })
    }

    /// `squeue -h -a -t all -o %K|%T|%u`: every job record the controller holds, counted as
    /// `MaxJobCount` counts them, and the pending or running tasks of `user` ([`JobRecords`]).
    ///
    /// # Errors
    /// [`SlurmError::Failed`], [`SlurmError::Parse`].
    pub fn job_records(&self, user: &str) -> Result<JobRecords, SlurmError> {
        let all = args(["-h", "-a", "-t", "all", "-o", RECORDS_FORMAT]);
        let (out, _) = self.run("squeue", &all)?;
        queue::parse_job_records(&out, user).map_err(|e| SlurmError::Parse {
            command: self.describe(&self.program("squeue"), &all),
            reason: e.to_string(),
            output: out.lines().take(5).collect::<Vec<_>>().join("\n"),
        })
    }

    /// The cluster's limits on job records from `scontrol show config` ([`JobLimits`]).
    ///
    /// # Errors
    /// Command errors.
    pub fn job_limits(&self) -> Result<JobLimits, SlurmError> {
        Ok(job_limits(&self.config()?))
    }

    /// The smallest `MaxSubmitJobs` / `GrpSubmitJobs` of `user`'s associations (those of
    /// `account` only, when given), from `sacctmgr -nP show assoc where user=USER format=
    /// Account,MaxSubmit,GrpSubmit`. `None` when no association sets one, when the cluster keeps
    /// no accounting (`sacctmgr` says it needs `accounting_storage/slurmdbd`) or `sacctmgr` is
    /// not installed: no limit is known then, and none is assumed.
    ///
    /// # Errors
    /// Other `sacctmgr` failures (slurmdbd down), an answer that does not parse.
    pub fn user_submit_limit(&self, user: &str, account: Option<&str>) -> Result<Option<u64>, SlurmError> {
        let all = args([
            "-nP",
            "show",
            "assoc",
            "where",
            &format!("user={user}"),
            "format=Account,MaxSubmit,GrpSubmit",
        ]);
        let out = match self.run("sacctmgr", &all) {
            Ok((out, _)) => out,
            Err(SlurmError::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) if e.stderr().contains("accounting_storage") => return Ok(None),
            Err(e) => return Err(e),
        };
        parse_submit_limit(&out, account).map_err(|reason| SlurmError::Parse {
            command: self.describe(&self.program("sacctmgr"), &all),
            reason,
            output: out.clone(),
        })
    }

    /// `scontrol update JobId=JOB ArrayTaskThrottle=N`: at most `n` tasks of the array run at
    /// once from now on (0 = no limit).
    ///
    /// # Errors
    /// [`SlurmError::Failed`].
    pub fn set_throttle(&self, job_id: u64, n: u32) -> Result<(), SlurmError> {
        self.run(
            "scontrol",
            &args([
                "update",
                &format!("JobId={job_id}"),
                &format!("ArrayTaskThrottle={n}"),
            ]),
        )
        .map(|_| ())
    }

    /// `scancel TARGETS...`: cancels whole arrays and single tasks. Cancelling a job Slurm does
    /// not know is not an error (scancel exits 0). No targets runs nothing.
    ///
    /// # Errors
    /// [`SlurmError`] when scancel fails (no permission, controller down).
    pub fn cancel(&self, targets: &[CancelTarget]) -> Result<(), SlurmError> {
        if targets.is_empty() {
            return Ok(());
        }
        let all: Vec<OsString> = targets.iter().map(|t| OsString::from(t.to_string())).collect();
        self.run("scancel", &all).map(|_| ())
    }
}

fn args<'a>(words: impl IntoIterator<Item = &'a str>) -> Vec<OsString> {
    words.into_iter().map(OsString::from).collect()
}

/// A word shell-quoted for messages (lossy for non-UTF-8).
fn quote(word: &OsStr) -> String {
    let text = word.to_string_lossy();
    if text.is_empty() {
        return "''".into();
    }
    shlex::try_quote(&text)
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| text.escape_debug().to_string())
}

/// `JOBID` or `JOBID;CLUSTER` (one line) from `sbatch --parsable`.
fn parse_submission(stdout: &str, warnings: String) -> Result<Submission, String> {
    let line = stdout
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .ok_or("no job id printed")?;
    let (id, cluster) = match line.split_once(';') {
        Some((id, c)) => (id, Some(c.to_string())),
        None => (line, None),
    };
    let job_id = id.parse().map_err(|_| format!("`{id}` is not a job id"))?;
    Ok(Submission {
        job_id,
        cluster,
        warnings,
    })
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
