//! The real executor: a fresh, isolated process per run (DESIGN 4).
//!
//! # What one run looks like
//!
//! 1. The program is resolved against the run's own `PATH` (relative to its workdir) with
//!    [`resolve_program`]; the workdir must exist. Failures become [`Termination::SpawnFailed`].
//! 2. The child is forked with [`std::process::Command`]; between fork and exec it
//!    - moves into its own process group (`setpgid(0, 0)`), whose id is its pid,
//!    - pins itself to `spec.cpus` (`sched_setaffinity`),
//!    - asks for `SIGKILL` when its parent dies (`PR_SET_PDEATHSIG`) and exits at once if the
//!      parent already died,
//!    - marks every fd >= 3 close-on-exec (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`), so only
//!      fds 0/1/2 survive exec,
//!    - resets every signal disposition to the default and empties the signal mask.
//!
//!    stdin is `/dev/null`; stdout and stderr are files the kernel writes to directly.
//! 3. The parent waits on a pidfd with `poll`, waking for external smaps_rollup samples, the
//!    timeout, the SIGTERM grace period and (every 50 ms) the cancel flag. No thread is started.
//! 4. The leader is reaped with `wait4`, which gives the exit status and its rusage (user and
//!    system CPU seconds, peak RSS). `ended` and `wall_seconds` are taken here, so the stray
//!    cleanup below is not counted as run time. A run stopped on timeout or interrupt keeps
//!    its real status: `signal` is the signal that ended it (SIGTERM or SIGKILL), or
//!    `exit_code` is set when it caught SIGTERM and exited by itself.
//! 5. Any process left in the run's group (a background grandchild, say) gets SIGTERM, then
//!    SIGKILL after the grace period, and is reaped; these are `stray_processes_killed`.
//!
//! # Limits
//!
//! - `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
//!   [`Executor::execute`] blocks its calling thread until the run is over, so that thread always
//!   outlives the run.
//! - A process of the run that calls `setsid` (or `setpgid` into another group) leaves the run's
//!   process group and is not seen or killed by the group-wide signals; daemons that detach
//!   this way can outlive the run. Because the runner is a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`), such a process is reparented to the runner when its parent dies,
//!   but it is only reaped if it is still in the run's group.
//! - The runner must not set `SIGCHLD` to `SIG_IGN` (children would be auto-reaped and `wait4`
//!   would have no status to report).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags};

use super::{CancelFlag, Executor, MemorySample, RunOutcome, RunSpec, Termination};
use crate::manifest::EnvPolicy;

/// How often the wait loop wakes up to look at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Upper bound on waiting for SIGKILLed processes to disappear (a process in uninterruptible
/// sleep, `D` state, cannot die until its I/O finishes).
const KILL_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// `PATH` searched when the run's environment has none (what glibc's `execvp` uses).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Runs each [`RunSpec`] as a child process in its own process group.
///
/// Stateless; share one instance between threads. Create it with [`ProcessExecutor::new`],
/// which makes the runner a child subreaper; `ProcessExecutor` built by `Default` or as a
/// literal does that on its first [`Executor::execute`] call instead.
#[derive(Debug, Default, Clone)]
pub struct ProcessExecutor;

impl ProcessExecutor {
    /// Creates the executor and makes the calling process a child subreaper
    /// (`prctl(PR_SET_CHILD_SUBREAPER, 1)`, once per process), so that orphaned grandchildren of a
    /// run are reparented to the runner, where they can be reaped.
    ///
    /// It also starts the [guardian](super::guardian), once per process, which kills the runs'
    /// process groups if the runner dies (SIGKILL included).
    pub fn new() -> Self {
        become_subreaper();
        super::guardian::ensure_started();
        ProcessExecutor
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

impl Executor for ProcessExecutor {
    fn execute(&self, spec: &RunSpec, cancel: &CancelFlag) -> RunOutcome {
        become_subreaper();
        super::guardian::ensure_started();
        let started = SystemTime::now();
        let start = Instant::now();
        if cancel.load(Ordering::Relaxed) {
            let mut outcome = RunOutcome::empty(started, start);
            outcome.termination = Termination::Interrupted;
            outcome.error = Some("the runner was interrupted before this run started".into());
            return outcome;
        }
        match spawn(spec) {
            Ok(child) => {
                let pgid = child.pid;
                super::guardian::group_started(pgid);
                let outcome = supervise(spec, cancel, child, started, start);
                super::guardian::group_ended(pgid);
                outcome
            }
            Err(error) => {
                let mut outcome = RunOutcome::empty(started, start);
                outcome.termination = Termination::SpawnFailed;
                outcome.error = Some(error);
                outcome
            }
        }
    }
}

impl RunOutcome {
    /// An outcome with nothing measured yet, ended now.
    fn empty(started: SystemTime, start: Instant) -> RunOutcome {
        RunOutcome {
            termination: Termination::SpawnFailed,
            exit_code: None,
            signal: None,
            error: None,
            cpus_effective: None,
            pid: None,
            started,
            ended: SystemTime::now(),
            wall_seconds: start.elapsed().as_secs_f64(),
            user_seconds: None,
            sys_seconds: None,
            peak_rss_bytes: None,
            stray_processes_killed: 0,
            memory_samples: 0,
        }
    }
}

/// Builds a run's environment.
///
/// - `policy`: [`EnvPolicy::Inherit`] starts from the runner's whole environment;
///   [`EnvPolicy::Clean`] keeps only `PATH`, `HOME`, `LANG`, `LC_*`, `TERM`, `USER` and `TMPDIR`
///   from it (those that are set).
/// - then every `(name, value)` of `set` is applied in order (a later one overrides an earlier
///   one; an empty value stays an empty string, it does not unset);
/// - then every name in `unset` is removed.
///
/// Returns `(name, value)` pairs without duplicates, in the runner's order followed by new names
/// in `set` order.
pub fn build_env(policy: EnvPolicy, set: &[(String, String)], unset: &[String]) -> Vec<(OsString, OsString)> {
    let keep = |name: &OsStr| match policy {
        EnvPolicy::Inherit => true,
        EnvPolicy::Clean => {
            let b = name.as_bytes();
            matches!(b, b"PATH" | b"HOME" | b"LANG" | b"TERM" | b"USER" | b"TMPDIR") || b.starts_with(b"LC_")
        }
    };
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().filter(|(k, _)| keep(k)).collect();
    for (name, value) in set {
        match env.iter_mut().find(|(k, _)| k == name.as_str()) {
            Some(slot) => slot.1 = OsString::from(value),
            None => env.push((OsString::from(name), OsString::from(value))),
        }
    }
    env.retain(|(k, _)| !unset.iter().any(|u| k == u.as_str()));
    env
}

/// Finds the file `argv0` names, as `execvp` in the run's child would.
///
/// - `argv0` containing `/` is a path, relative ones are taken relative to `workdir`;
/// - otherwise each entry of `path_var` (the run's `PATH`; `None` = unset, then `/bin:/usr/bin`
///   is searched as glibc does) is tried in order; empty and relative entries are relative to
///   `workdir`. The first regular file with an execute permission bit wins.
///
/// Returns the absolute path of the program.
///
/// # Errors
/// A message for the user: for a bare name not found, it names `PATH` and lists the directories
/// searched; for a path, it says whether the file is missing, not a regular file or not
/// executable.
pub fn resolve_program(argv0: &str, path_var: Option<&OsStr>, workdir: &Path) -> Result<PathBuf, String> {
    if argv0.is_empty() {
        return Err("the command is empty (argv[0] is an empty string)".to_string());
    }
    if argv0.contains('/') {
        let path = workdir.join(argv0);
        return match check_executable(&path) {
            Ok(()) => Ok(path),
            Err(why) => Err(format!("`{argv0}` ({}) {why}", path.display())),
        };
    }
    let (path_text, path_note) = match path_var {
        Some(p) => (p.to_os_string(), ""),
        None => (
            OsString::from(DEFAULT_PATH),
            " (PATH is not set in the run's environment; searched the default)",
        ),
    };
    let mut not_executable = None;
    let mut searched = Vec::new();
    for dir in path_text.as_bytes().split(|&b| b == b':') {
        let dir = Path::new(OsStr::from_bytes(dir));
        searched.push(dir.display().to_string());
        let candidate = workdir.join(dir).join(argv0);
        match check_executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if candidate.exists() && not_executable.is_none() => {
                not_executable = Some(format!("{}: {why}", candidate.display()))
            }
            Err(_) => {}
        }
    }
    let list = searched
        .iter()
        .map(|d| if d.is_empty() { "." } else { d.as_str() })
        .collect::<Vec<_>>()
        .join(", ");
    match not_executable {
        Some(found) => Err(format!(
            "`{argv0}` was found in PATH but cannot be executed ({found}); PATH entries searched{path_note}: {list}"
        )),
        None => Err(format!(
            "`{argv0}` was not found in PATH{path_note}; PATH entries searched: {list}"
        )),
    }
}

/// `Ok` when `path` is a regular file (after symlinks) with an execute bit; otherwise the reason.
fn check_executable(path: &Path) -> Result<(), &'static str> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => "does not exist",
        io::ErrorKind::PermissionDenied => "cannot be accessed (permission denied)",
        _ => "cannot be inspected",
    })?;
    if !meta.is_file() {
        return Err("is not a regular file");
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err("is not executable (no execute permission)");
    }
    Ok(())
}

/// A started child: its pid (also its process group id) and a pidfd for polling.
struct Child {
    pid: i32,
    pidfd: Option<OwnedFd>,
}

/// Prepares and forks/execs the child. Errors are user-facing messages.
fn spawn(spec: &RunSpec) -> Result<Child, String> {
    let Some(argv0) = spec.argv.first() else {
        return Err("the command is empty (no argv)".to_string());
    };
    match std::fs::metadata(&spec.workdir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "working directory {} is not a directory",
                spec.workdir.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "working directory {} cannot be used: {e}",
                spec.workdir.display()
            ));
        }
    }
    let path_var = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = resolve_program(argv0, path_var, &spec.workdir)?;
    let create = |path: &Path, what: &str| {
        File::create(path).map_err(|e| format!("cannot create {what} file {}: {e}", path.display()))
    };
    let stdout = create(&spec.stdout_path, "stdout")?;
    // The same path for both shares one open file (one offset), as `2>&1` would.
    let stderr = if spec.stderr_path == spec.stdout_path {
        stdout
            .try_clone()
            .map_err(|e| format!("cannot duplicate the stdout file descriptor: {e}"))?
    } else {
        create(&spec.stderr_path, "stderr")?
    };

    // Everything the child needs is computed here: between fork and exec only
    // async-signal-safe calls are allowed (no allocation, no locks).
    let cpu_set = if spec.cpus.is_empty() {
        None
    } else {
        let mut set = rustix::thread::CpuSet::new();
        for &cpu in &spec.cpus {
            if cpu >= rustix::thread::CpuSet::MAX_CPU {
                return Err(format!("CPU {cpu} is beyond the largest supported CPU number"));
            }
            set.set(cpu);
        }
        Some(set)
    };
    let parent = rustix::process::getpid();

    // A bare name runs as its resolved absolute path (what execvp would exec); a path is
    // passed as written, and a relative one is resolved by the kernel after the chdir to the
    // workdir, so a script sees the same `$0` as when started from a shell in that directory.
    let exec_path: &OsStr = if argv0.contains('/') {
        OsStr::new(argv0)
    } else {
        program.as_os_str()
    };
    let mut command = Command::new(exec_path);
    command
        .arg0(argv0)
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    // SAFETY: the closure only makes raw system calls (setpgid, sched_setaffinity, prctl,
    // getppid, _exit, close_range, sigaction, sigprocmask), which are async-signal-safe; it does
    // not allocate or take locks, and it reads only data moved into it before the fork.
    unsafe {
        command.pre_exec(move || child_setup(parent, cpu_set.as_ref()));
    }
    let child = command.spawn().map_err(|e| {
        let mut msg = format!("cannot start `{argv0}` ({}): {e}", program.display());
        if e.raw_os_error() == Some(libc::EINVAL) && !spec.cpus.is_empty() {
            msg.push_str(&format!(
                " (setting CPU affinity to {} may have failed: CPUs not allowed or offline)",
                super::affinity::format_cpu_list(&spec.cpus)
            ));
        }
        msg
    })?;
    let pid = child.id() as i32;
    // `child` is dropped without waiting; the pid stays ours until `wait4` reaps it.
    drop(child);
    // The child is not reaped yet, so the pid cannot have been reused.
    let pidfd = Pid::from_raw(pid).and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok());
    Ok(Child { pid, pidfd })
}

/// Runs in the child between fork and exec. Only async-signal-safe calls.
fn child_setup(parent: Pid, cpus: Option<&rustix::thread::CpuSet>) -> io::Result<()> {
    // SAFETY (all blocks below): plain system calls with valid arguments.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(set) = cpus {
        rustix::thread::sched_setaffinity(None, set)?;
    }
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The parent may have died before the prctl: then nobody would kill us.
        if libc::getppid() != parent.as_raw_nonzero().get() {
            libc::_exit(1);
        }
        // Only fds 0/1/2 cross exec. Marking instead of closing keeps std's exec-error pipe
        // (itself close-on-exec) working.
        let r = libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        );
        if r != 0 {
            // Kernel older than 5.11: mark one fd at a time up to the soft fd limit.
            let mut lim: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as i32
            } else {
                4096
            };
            for fd in 3..max {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                    libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                }
            }
        }
        // Default dispositions for every signal (ignored ones would survive exec) and an empty
        // signal mask. The raw system call, because glibc's wrappers refuse its internal
        // real-time signals 32 and 33, which can also arrive ignored. An all-zero kernel
        // `struct sigaction` is SIG_DFL with no flags on every architecture; 64 bytes cover the
        // largest layout. The kernel's signal set is 8 bytes (`_NSIG / 8`) on
        // x86-64, AArch64 and RISC-V; where it is larger (MIPS) the call fails and nothing changes.
        let dfl = [0u64; 8];
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    dfl.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    Ok(())
}

/// Why the runner is stopping the run.
#[derive(Clone, Copy)]
enum StopReason {
    Timeout,
    Interrupted,
}

/// Appends [`MemorySample`] lines to `memory.jsonl`.
struct Sampler {
    out: BufWriter<File>,
    interval: Duration,
    next: Instant,
    count: u32,
    live: bool,
}

impl Sampler {
    /// Takes one sample if the process is still there; turns itself off when it is gone.
    fn sample(&mut self, pid: i32, start: Instant) {
        let now = Instant::now();
        self.next = now + self.interval;
        if !self.live {
            return;
        }
        match crate::memory::Rollup::read_pid(pid as u32) {
            // A zombie's smaps_rollup is empty: the process is gone.
            Ok(leader) if leader.rss.is_some() => {
                // The whole group, not only the leader: with `shell = "python3 ..."` the leader is
                // /bin/sh (dash does not exec the last command) and the program is its child.
                let mut rollup = leader;
                let mut processes = 1;
                for member in group_members(pid).into_iter().filter(|&m| m != pid) {
                    if let Ok(r) = crate::memory::Rollup::read_pid(member as u32)
                        && r.rss.is_some()
                    {
                        rollup.add(&r);
                        processes += 1;
                    }
                }
                let sample = MemorySample {
                    t_seconds: now.duration_since(start).as_secs_f64(),
                    processes,
                    rollup,
                };
                if serde_json::to_writer(&mut self.out, &sample).is_ok() && self.out.write_all(b"\n").is_ok()
                {
                    self.count += 1;
                } else {
                    self.live = false;
                }
            }
            _ => self.live = false,
        }
    }
}

/// Waits for the child, samples, enforces timeout and cancellation, reaps, cleans the group.
fn supervise(
    spec: &RunSpec,
    cancel: &CancelFlag,
    child: Child,
    started: SystemTime,
    start: Instant,
) -> RunOutcome {
    let pid = child.pid;
    let mut outcome = RunOutcome::empty(started, start);
    outcome.pid = Some(pid as u32);
    outcome.cpus_effective = read_cpus_allowed(pid);

    let mut sampler = match &spec.memory_path {
        Some(path) => match File::create(path) {
            Ok(f) => Some(Sampler {
                out: BufWriter::new(f),
                interval: spec.sample_interval.max(Duration::from_millis(1)),
                // The first sample comes one interval in: right after spawn the child is still
                // exec'ing (a copy of the runner), and reading it costs more than a short run.
                next: start + spec.sample_interval.max(Duration::from_millis(1)),
                count: 0,
                live: true,
            }),
            Err(e) => {
                outcome.error = Some(format!(
                    "cannot create memory sample file {}: {e}",
                    path.display()
                ));
                None
            }
        },
        None => None,
    };
    let deadline = spec.timeout.map(|t| start + t);
    let mut stop: Option<(StopReason, Instant)> = None; // reason, SIGKILL time
    let mut killed = false;
    loop {
        let now = Instant::now();
        if stop.is_none() {
            let reason = if cancel.load(Ordering::Relaxed) {
                Some(StopReason::Interrupted)
            } else if deadline.is_some_and(|d| now >= d) {
                Some(StopReason::Timeout)
            } else {
                None
            };
            if let Some(reason) = reason {
                signal_group(pid, libc::SIGTERM);
                stop = Some((reason, now + spec.grace));
            }
        }
        if let Some((_, kill_at)) = stop
            && !killed
            && now >= kill_at
        {
            signal_group(pid, libc::SIGKILL);
            killed = true;
        }
        if let Some(s) = sampler.as_mut()
            && s.live
            && now >= s.next
        {
            s.sample(pid, start);
        }
        // Sleep until the next thing to do, the child's exit, or the cancel check.
        let mut wake = now + CANCEL_POLL;
        match stop {
            None => {
                if let Some(d) = deadline {
                    wake = wake.min(d);
                }
            }
            Some((_, kill_at)) if !killed => wake = wake.min(kill_at),
            Some(_) => {}
        }
        if let Some(s) = sampler.as_ref().filter(|s| s.live) {
            wake = wake.min(s.next);
        }
        if wait_exit(pid, child.pidfd.as_ref(), wake.saturating_duration_since(now)) {
            break;
        }
    }

    // Reap the leader with its resource usage.
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = loop {
        // SAFETY: valid pointers to local variables.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break true;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break false;
    };
    outcome.ended = SystemTime::now();
    outcome.wall_seconds = start.elapsed().as_secs_f64();
    if reaped {
        if libc::WIFEXITED(status) {
            outcome.exit_code = Some(libc::WEXITSTATUS(status));
        } else if libc::WIFSIGNALED(status) {
            outcome.signal = Some(libc::WTERMSIG(status));
        }
        let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        outcome.user_seconds = Some(secs(usage.ru_utime));
        outcome.sys_seconds = Some(secs(usage.ru_stime));
        outcome.peak_rss_bytes = Some(usage.ru_maxrss.max(0) as u64 * 1024);
    } else {
        outcome.error = Some(format!("wait4({pid}) failed: {}", io::Error::last_os_error()));
    }
    outcome.termination = match stop {
        Some((StopReason::Timeout, _)) => Termination::Timeout,
        Some((StopReason::Interrupted, _)) => Termination::Interrupted,
        None if outcome.signal.is_some() => Termination::Signaled,
        None => Termination::Exited,
    };

    // The group id is the leader's pid, now free for reuse once the group is empty. The kernel
    // hands out pids cyclically, so another group with this id cannot appear in the few
    // microseconds before the emptiness check; while the group has members its id stays
    // reserved.
    let kill_at = stop.map(|(_, k)| k);
    outcome.stray_processes_killed = clean_group(pid, spec.grace, kill_at);

    if let Some(mut s) = sampler {
        let _ = s.out.flush();
        outcome.memory_samples = s.count;
    }
    outcome
}

/// Blocks until the child has exited (`true`) or `timeout` has passed (`false`).
fn wait_exit(pid: i32, pidfd: Option<&OwnedFd>, timeout: Duration) -> bool {
    match pidfd {
        Some(fd) => {
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(n) => n > 0,
                Err(rustix::io::Errno::INTR) => false, // the caller's loop re-evaluates
                // Should not happen; never spin on a broken pidfd.
                Err(_) => wait_exit(pid, None, timeout),
            }
        }
        None => {
            // No pidfd (kernel < 5.3): check with waitid(WNOWAIT) and nap briefly.
            let until = Instant::now() + timeout;
            let mut nap = Duration::from_micros(100);
            loop {
                if exited_nowait(pid) {
                    return true;
                }
                let now = Instant::now();
                if now >= until {
                    return false;
                }
                std::thread::sleep(nap.min(until - now));
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    }
}

/// `true` when `pid` has exited and is waiting to be reaped (it is not reaped here).
fn exited_nowait(pid: i32) -> bool {
    // SAFETY: an all-zero siginfo_t is valid; waitid only writes into it.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() != 0
    }
}

/// Sends `sig` to process group `pgid`; `true` when at least one process got it.
fn signal_group(pgid: i32, sig: i32) -> bool {
    // SAFETY: kill has no memory-safety preconditions; pgid > 1 so -pgid never means "all".
    pgid > 1 && unsafe { libc::kill(-pgid, sig) } == 0
}

/// Reaps zombies of group `pgid` that are our children (reparented orphans).
fn reap_group(pgid: i32) {
    loop {
        let mut status = 0;
        // SAFETY: valid pointer to a local.
        let r = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if r <= 0 {
            return;
        }
    }
}

/// After the leader is reaped: kills and reaps whatever is left of its process group.
///
/// SIGTERM, then SIGKILL at `kill_at` (when the run was already being stopped) or after
/// `grace`. Returns how many live (non-zombie) processes were found in the group.
fn clean_group(pgid: i32, grace: Duration, kill_at: Option<Instant>) -> u32 {
    reap_group(pgid);
    if !signal_group(pgid, 0) {
        return 0; // fast path: the group is empty
    }
    let strays = count_group_members(pgid);
    signal_group(pgid, libc::SIGTERM);
    let kill_at = kill_at.unwrap_or_else(|| Instant::now() + grace);
    if !wait_group_gone(pgid, kill_at) {
        signal_group(pgid, libc::SIGKILL);
        wait_group_gone(pgid, Instant::now() + KILL_WAIT_LIMIT);
    }
    strays
}

/// Polls until group `pgid` has no process left (reaping ours) or `until` passes.
fn wait_group_gone(pgid: i32, until: Instant) -> bool {
    let mut nap = Duration::from_micros(200);
    loop {
        reap_group(pgid);
        if !signal_group(pgid, 0) {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep(nap.min(until - now));
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

/// Number of live processes (zombies not counted) whose process group is `pgid`, from the
/// `pgrp` field of every `/proc/<pid>/stat`.
fn count_group_members(pgid: i32) -> u32 {
    group_members(pgid).len() as u32
}

/// Pids of live (non-zombie) processes in process group `pgid`, scanned from `/proc/*/stat`.
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the parenthesised command name: state ppid pgrp ...
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
            pgrp == Some(pgid) && state != Some("Z") && state != Some("X")
        })
        .collect()
}

/// `Cpus_allowed_list` of `/proc/<pid>/status`, or `None` when unreadable.
fn read_cpus_allowed(pid: i32) -> Option<Vec<usize>> {
    use std::io::Read;
    // procfs files report size 0; a buffer of the right size avoids many small reads.
    let mut status = String::with_capacity(2048);
    File::open(format!("/proc/{pid}/status"))
        .and_then(|mut f| f.read_to_string(&mut status))
        .ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    super::affinity::parse_cpu_list(line).ok()
}
