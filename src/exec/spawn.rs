//! Starting the child: program lookup as `execvp` does it, output files, the fork (`clone3` into
//! the run's cgroup where the kernel allows it, else `fork`), and the setup between fork and exec
//! (cgroup, stdio, workdir, session, CPU affinity, parent-death signal, fds, signal dispositions).
//!
//! `std::process::Command` cannot start a child inside a cgroup: moving it there afterwards
//! (writing its pid into `cgroup.procs`) takes the kernel's cgroup migration path, which waits
//! for an RCU grace period (measured at 15 ms per run on a loaded 2-core machine), while
//! `clone3(CLONE_INTO_CGROUP)` creates the process in the cgroup at no extra cost.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, PidfdFlags};
use rustix::thread::CpuSet;

use super::drain::{Drain, Pipes};
use super::fork::{Image, MEMCG_NOT_JOINED, STEPS, Setup, Step, child, clone3_fork};
use super::spawn_message::SpawnRequest;
use super::{RunSpec, StartError};

/// `PATH` searched when the run's environment has none (what glibc's `execvp` uses).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// A started child: its pid (also its session and process group id) and a pidfd for polling
/// (`None` on kernels without `pidfd_open`, before 5.3).
pub(super) struct Child {
    pub(super) pid: i32,
    pub(super) pidfd: Option<OwnedFd>,
    /// The run's stdout and stderr pipes, copied into their files by the supervisor's waits
    /// ([`super::drain`]); finished once no process of the run is alive.
    pub(super) drain: Option<Drain>,
    /// Whether the child joined the v1 memory cgroup it was given (its write to that
    /// `tasks` succeeded; reported back by the child, so no read of the cgroup is needed).
    pub(super) memcg_joined: bool,
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

/// Prepares and forks/execs the child of `spec`: checks the workdir, resolves the program,
/// creates the stdout/stderr files, then starts the child in the cgroup whose folder is open as
/// `cgroup` (when given) with [`child`] run between fork and exec. The leader is registered with
/// the orphan reaper before anyone can see it.
///
/// # Errors
/// User-facing messages: bad workdir, program not found or not executable, output file not
/// creatable, fork/exec failure (with a hint when the CPU affinity may be the cause).
///
/// `memcg` is the `tasks` file of the run's v1 memory cgroup (`memcg.rs`), open for writing:
/// the child joins it (best effort) before anything else.
pub(super) fn spawn(
    spec: &RunSpec,
    cgroup: Option<BorrowedFd<'_>>,
    memcg: Option<BorrowedFd<'_>>,
) -> Result<Child, StartError> {
    let Some(argv0) = spec.argv.first() else {
        return Err(StartError::new("the command is empty (no argv)"));
    };
    match std::fs::metadata(&spec.workdir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(StartError::new(format!(
                "working directory {} is not a directory",
                spec.workdir.display()
            )));
        }
        Err(e) => {
            return Err(StartError::os(
                format!("working directory {} cannot be used: {e}", spec.workdir.display()),
                &e,
            ));
        }
    }
    let path_var = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = resolve_program(argv0, path_var, &spec.workdir).map_err(StartError::new)?;
    let create = |path: &Path, what: &str| {
        File::create(path)
            .map_err(|e| StartError::os(format!("cannot create {what} file {}: {e}", path.display()), &e))
    };
    let stdout = create(&spec.stdout_path, "stdout")?;
    // The same path for both: one pipe for both, as `2>&1` would (one order of bytes).
    let stderr = if spec.stderr_path == spec.stdout_path {
        None
    } else {
        Some(create(&spec.stderr_path, "stderr")?)
    };
    // The child writes into pipes the runner copies into the files: reopening `/dev/stdout`
    // then truncates nothing (see `drain.rs`).
    let pipes = Pipes::new(stdout, stderr)
        .map_err(|e| StartError::os(format!("cannot make the pipes for the run's output: {e}"), &e))?;
    let drain = Drain::new(pipes.sinks);
    let (stdout, stderr) = (pipes.stdout, pipes.stderr);

    // Everything the child needs is computed here: between fork and exec only
    // async-signal-safe calls are allowed (no allocation, no locks).
    let cpu_set = if spec.cpus.is_empty() {
        None
    } else {
        let mut set = CpuSet::new();
        for &cpu in &spec.cpus {
            if cpu >= CpuSet::MAX_CPU {
                return Err(StartError::new(format!(
                    "CPU {cpu} is beyond the largest supported CPU number"
                )));
            }
            set.set(cpu);
        }
        Some(set)
    };
    // A bare name runs as its resolved absolute path (what execvp would exec); a path is
    // passed as written, and a relative one is resolved by the kernel after the chdir to the
    // workdir, so a script sees the same `$0` as when started from a shell in that directory.
    let exec_path: &OsStr = if argv0.contains('/') {
        OsStr::new(argv0)
    } else {
        program.as_os_str()
    };
    let fail = |what: &str, e: io::Error| {
        let mut msg = format!("cannot start `{argv0}` ({}): {what}: {e}", program.display());
        if e.raw_os_error() == Some(libc::EINVAL) && what == STEPS[Step::Affinity as usize] {
            msg.push_str(&format!(
                " (CPUs {} not allowed or offline)",
                crate::cpus::format_cpu_list(&spec.cpus)
            ));
        }
        StartError::os(msg, &e)
    };
    let image = Image::new(exec_path, &spec.argv, &spec.env, &spec.workdir)
        .map_err(|e| fail("bad argument or environment", e))?;
    let stdin = File::open("/dev/null").map_err(|e| fail("opening /dev/null", e))?;
    let fds = [
        above_stdio(stdin.into()),
        above_stdio(stdout),
        above_stdio(stderr),
    ];
    let fds = match fds {
        [Ok(a), Ok(b), Ok(c)] => [a, b, c],
        [Err(e), _, _] | [_, Err(e), _] | [_, _, Err(e)] => return Err(fail("duplicating a descriptor", e)),
    };
    let setup = Setup {
        image: &image,
        stdio: [fds[0].as_raw_fd(), fds[1].as_raw_fd(), fds[2].as_raw_fd()],
        cpus: cpu_set,
        parent: rustix::process::getpid(),
        memcg: memcg.map(|fd| fd.as_raw_fd()),
        reset: None,
    };
    let started = fork_exec(&setup, cgroup);
    // The runner keeps no write end: the pipes end when the run's last process is gone.
    drop(fds);
    match started {
        Ok(mut child) => {
            child.drain = Some(drain);
            Ok(child)
        }
        Err((step, e)) => {
            let _ = drain.finish();
            Err(fail(STEPS[step as usize], e))
        }
    }
}

/// Hands the runner's freed heap memory back to the kernel (glibc's `malloc_trim(0)`; nothing
/// elsewhere). Each run is a forked copy of the runner, and at exec the kernel takes the RSS of
/// that copy into the run's peak RSS (`ru_maxrss`): memory the runner freed but malloc kept would
/// count as the run's. Called once the bundle's setup is done (the working-tree capture is the
/// runner's largest transient use).
pub fn return_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of malloc's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `fd` itself when it is above 2, else a close-on-exec duplicate above 2: the child moves its
/// three descriptors onto 0, 1 and 2, and none of them may be overwritten before it is moved.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// Whether `clone3` works here: unknown (0), yes (1), no (2: old kernel, or a seccomp filter
/// that refuses it, as container runtimes do); then `fork` is used and the child joins its
/// cgroup itself.
static CLONE3: AtomicU8 = AtomicU8::new(0);

/// Forks the child (into the cgroup `cgroup` from its very start, with `clone3(CLONE_INTO_CGROUP)`
/// where the kernel offers it), registers it as a leader, sets its CPUs from the parent while it
/// waits to run (so it starts where it will run, with no forced migration), and waits for its
/// exec.
///
/// # Errors
/// The step that failed and its error; a child that failed is reaped.
fn fork_exec(setup: &Setup<'_>, cgroup: Option<BorrowedFd<'_>>) -> Result<Child, (Step, io::Error)> {
    // The child reports a failed step as 8 bytes (step, errno) on this pipe; exec closes it.
    let (report_r, report_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| (Step::Clone, e.into()))?;
    let mut pidfd: RawFd = -1;
    let (pid, pidfd) = super::children::register_spawn(|| {
        if let Some(spawner) = super::spawner::get() {
            let request = SpawnRequest {
                program: Cow::Borrowed(&setup.image.program),
                workdir: Cow::Borrowed(&setup.image.workdir),
                argv: Cow::Borrowed(&setup.image.argv),
                envp: Cow::Borrowed(&setup.image.envp),
                cpus: setup.cpus,
                stdio: setup.stdio,
                report: report_w.as_raw_fd(),
                memcg: setup.memcg,
                cgroup: cgroup.map(|d| d.as_raw_fd()),
            };
            match spawner.spawn(&request) {
                Ok(pid) => {
                    // The child cannot be reaped before this: only the runner may, and the
                    // orphan reaper waits for the registry this closure holds.
                    let fd = Pid::from_raw(pid)
                        .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok());
                    return Ok((pid, fd));
                }
                Err(super::spawner::Refused::Fork(e)) => return Err((Step::Clone, e)),
                Err(super::spawner::Refused::Unavailable) => {}
            }
        }
        if CLONE3.load(Ordering::Relaxed) != 2 {
            match clone3_fork(
                libc::CLONE_PIDFD as u64,
                Some(&mut pidfd),
                cgroup.map(|d| d.as_raw_fd()),
            ) {
                Ok(0) => child(setup, report_w.as_raw_fd(), None),
                Ok(pid) => {
                    CLONE3.store(1, Ordering::Relaxed);
                    // SAFETY: CLONE_PIDFD stored a new pidfd that nothing else owns.
                    let fd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
                    return Ok((pid, fd));
                }
                // No clone3 (Linux < 5.3, a seccomp filter) or no CLONE_INTO_CGROUP (< 5.7).
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOSYS | libc::EPERM | libc::E2BIG | libc::EINVAL)
                    ) && CLONE3.load(Ordering::Relaxed) == 0 =>
                {
                    CLONE3.store(2, Ordering::Relaxed);
                }
                Err(e) => return Err((Step::Clone, e)),
            }
        }
        // The fallback: fork, and the child joins its cgroup by writing 0 into cgroup.procs.
        let procs = match cgroup {
            Some(dir) => Some(
                rustix::fs::openat(
                    dir,
                    "cgroup.procs",
                    OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| (Step::Cgroup, e.into()))?,
            ),
            None => None,
        };
        // SAFETY: the child runs only `child` (raw system calls on data prepared before), as
        // required after fork in a multi-threaded process.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child(setup, report_w.as_raw_fd(), procs.as_ref().map(|p| p.as_raw_fd()));
        }
        if pid < 0 {
            return Err((Step::Clone, io::Error::last_os_error()));
        }
        let fd = Pid::from_raw(pid).and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok());
        Ok((pid, fd))
    })?;
    drop(report_w);
    if let (Some(set), Some(p)) = (&setup.cpus, Pid::from_raw(pid)) {
        // Best effort: the child sets its CPUs itself too, and reports a failure.
        let _ = rustix::thread::sched_setaffinity(Some(p), set);
    }
    // The report pipe brings, before exec closes it: a note that joining the memory cgroup
    // failed (not fatal), then a failed step; nothing at all is the usual case.
    let mut memcg_joined = setup.memcg.is_some();
    let mut report = [0u8; 8];
    let got = loop {
        let got = read_report(&report_r, &mut report);
        if got == report.len()
            && u32::from_ne_bytes([report[0], report[1], report[2], report[3]]) == MEMCG_NOT_JOINED
        {
            memcg_joined = false;
            continue;
        }
        break got;
    };
    if got == 0 {
        return Ok(Child {
            pid,
            pidfd,
            drain: None,
            memcg_joined,
        });
    }
    // The child failed before exec and exits: reap it.
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty());
    }
    super::children::spawn_failed(pid);
    let step = u32::from_ne_bytes(report[0..4].try_into().unwrap_or_default());
    let errno = i32::from_ne_bytes(report[4..8].try_into().unwrap_or_default());
    Err((Step::from_code(step), io::Error::from_raw_os_error(errno)))
}

/// Reads up to 8 bytes of the child's report; returns how many came before the pipe's end.
fn read_report(report_r: &OwnedFd, report: &mut [u8; 8]) -> usize {
    let mut got = 0;
    while got < report.len() {
        match rustix::io::read(report_r, &mut report[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    got
}
