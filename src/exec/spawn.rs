//! Starting the child: program lookup as `execvp` does it, output files, and the setup between
//! fork and exec (cgroup, session, CPU affinity, parent-death signal, fds, signal dispositions).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::process::{Pid, PidfdFlags, Signal};
use rustix::thread::CpuSet;

use super::RunSpec;

/// `PATH` searched when the run's environment has none (what glibc's `execvp` uses).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// A started child: its pid (also its session and process group id) and a pidfd for polling
/// (`None` on kernels without `pidfd_open`, before 5.3).
pub(super) struct Child {
    pub(super) pid: i32,
    pub(super) pidfd: Option<OwnedFd>,
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
/// creates the stdout/stderr files, then starts the child with [`child_setup`] run between fork
/// and exec: it joins the cgroup whose `cgroup.procs` is open as `join` (when given) and starts
/// its own session. The leader is registered with the orphan reaper before anyone can see it.
///
/// # Errors
/// User-facing messages: bad workdir, program not found or not executable, output file not
/// creatable, fork/exec failure (with a hint when the CPU affinity may be the cause).
pub(super) fn spawn(spec: &RunSpec, join: Option<RawFd>) -> Result<Child, String> {
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
        let mut set = CpuSet::new();
        for &cpu in &spec.cpus {
            if cpu >= CpuSet::MAX_CPU {
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
    // SAFETY: the closure only makes raw system calls (write, setsid, sched_setaffinity, prctl,
    // getppid, close_range, fcntl, getrlimit, rt_sigaction, sigprocmask), which are
    // async-signal-safe; it does not allocate or take locks, and it reads only data moved into
    // it before the fork (`join` is an fd the caller keeps open until after the spawn).
    unsafe {
        command.pre_exec(move || child_setup(parent, join, cpu_set.as_ref()));
    }
    let spawned = super::children::spawn_registered(|| -> io::Result<_> {
        let child = command.spawn()?;
        let pid = child.id() as i32;
        Ok((child, pid))
    });
    let child = spawned.map_err(|e| {
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

/// Runs in the child between fork and exec. Only async-signal-safe calls: joins the run's
/// cgroup (writes `0`, meaning "the writer", into the `cgroup.procs` fd `join`), starts a new
/// session (no controlling terminal; session and process group id = its pid), pins the CPUs,
/// asks for SIGKILL on the parent's death, marks every fd >= 3 close-on-exec, resets every signal
/// disposition and the signal mask.
fn child_setup(parent: Pid, join: Option<RawFd>, cpus: Option<&CpuSet>) -> io::Result<()> {
    if let Some(fd) = join {
        // SAFETY: `fd` is open in the parent for the whole spawn, so in this copy of it too.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::io::write(fd, b"0")?;
    }
    rustix::process::setsid()?;
    if let Some(set) = cpus {
        rustix::thread::sched_setaffinity(None, set)?;
    }
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    // The parent may have died before the prctl: then nobody would kill us. Failing here makes
    // std's child exit with status 1 before exec (nobody is left to read the error).
    if rustix::process::getppid() != Some(parent) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    mark_fds_cloexec();
    reset_signals();
    Ok(())
}

/// Marks every fd >= 3 close-on-exec, so only fds 0/1/2 cross exec. Marking instead of closing
/// keeps std's exec-error pipe (itself close-on-exec) working. Async-signal-safe.
///
/// libc because rustix has no `close_range`, and the fallback works on raw fd numbers that may
/// not be open (rustix's `BorrowedFd` requires an open one).
fn mark_fds_cloexec() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes fd flags; the arguments are
    // plain integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        )
    };
    if r == 0 {
        return;
    }
    // Kernel older than 5.11: mark one fd at a time up to the soft fd limit.
    let max = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
        .min(1 << 20) as i32;
    for fd in 3..max {
        // SAFETY: fcntl F_GETFD/F_SETFD on a raw fd number only reads or sets its flags; an fd
        // that is not open gives EBADF, which is ignored.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Default dispositions for every signal (ignored ones would survive exec) and an empty signal
/// mask. Async-signal-safe.
///
/// The raw system call, because glibc's wrappers refuse its internal real-time signals 32 and
/// 33, which can also arrive ignored, and rustix offers `rt_sigaction` and `rt_sigprocmask` only
/// in its unstable `runtime` module. An all-zero kernel `struct sigaction` is SIG_DFL with no
/// flags on every architecture; 64 bytes cover the largest layout. The kernel's signal set is 8
/// bytes (`_NSIG / 8`) on x86-64, AArch64 and RISC-V; where it is larger (MIPS) the call fails
/// and nothing changes.
fn reset_signals() {
    let dfl = [0u64; 8];
    for sig in 1..=64 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: `dfl` outlives the call and is large enough for the kernel's struct
            // sigaction; the old action is not requested (null).
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    dfl.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
        }
    }
    // SAFETY: an all-zero sigset_t is a valid value for sigemptyset to initialise; both
    // pointers are to a local or null.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}
