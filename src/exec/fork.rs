//! The child's side of a start: the program image and setup prepared before the fork, the
//! `clone3` fork itself, and what the child does between fork and exec (only async-signal-safe
//! calls on data prepared before, no allocation, no locks). Used by the runner's own fork
//! (`spawn.rs`) and by the spawner's (`spawner.rs`).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::process::{Pid, Signal};
use rustix::thread::CpuSet;

/// The program, its argv and environment as C strings, and the workdir, prepared before the
/// fork (the child may not allocate).
pub(super) struct Image {
    pub(super) program: CString,
    pub(super) workdir: CString,
    pub(super) argv: Vec<CString>,
    pub(super) envp: Vec<CString>,
    /// Null-terminated pointer arrays into the two vectors above.
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
}

impl Image {
    /// # Errors
    /// `InvalidInput` when a string holds a NUL byte.
    pub(super) fn new(
        program: &OsStr,
        argv: &[String],
        env: &[(OsString, OsString)],
        workdir: &Path,
    ) -> io::Result<Image> {
        let c = |b: &[u8]| CString::new(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
        let argv: Vec<CString> = argv.iter().map(|a| c(a.as_bytes())).collect::<io::Result<_>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<io::Result<_>>()?;
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Ok(Image {
            program: c(program.as_bytes())?,
            workdir: c(workdir.as_os_str().as_bytes())?,
            argv_ptrs: ptrs(&argv),
            envp_ptrs: ptrs(&envp),
            argv,
            envp,
        })
    }

    /// An image of strings made elsewhere (the spawner's decoded request).
    pub(super) fn from_parts(
        program: CString,
        workdir: CString,
        argv: Vec<CString>,
        envp: Vec<CString>,
    ) -> Image {
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Image {
            program,
            workdir,
            argv_ptrs: ptrs(&argv),
            envp_ptrs: ptrs(&envp),
            argv,
            envp,
        }
    }
}

/// What the child does between fork and exec, prepared by the parent.
pub(super) struct Setup<'a> {
    pub(super) image: &'a Image,
    /// Descriptors (all above 2) that become the child's 0, 1 and 2.
    pub(super) stdio: [RawFd; 3],
    pub(super) cpus: Option<CpuSet>,
    /// The runner: the child's parent (checked after the parent-death signal is set).
    pub(super) parent: Pid,
    /// `tasks` of the run's v1 memory cgroup, open for writing; joined best effort.
    pub(super) memcg: Option<RawFd>,
    /// The signals (bit `n - 1` for signal `n`) whose disposition the child must reset: those
    /// ignored in the forking process, where that is known to stay so (the spawner's, read once);
    /// `None`: all of them.
    pub(super) reset: Option<u64>,
}

/// The steps of the child's setup, reported with the errno when one fails.
#[derive(Clone, Copy)]
#[repr(u32)]
pub(super) enum Step {
    Cgroup,
    Stdio,
    Workdir,
    Session,
    Affinity,
    DeathSignal,
    Exec,
    Clone,
}

impl Step {
    /// The step a child's report names by `code` (`step as u32`); an unknown code is [`Step::Exec`].
    pub(super) fn from_code(code: u32) -> Step {
        match code {
            0 => Step::Cgroup,
            1 => Step::Stdio,
            2 => Step::Workdir,
            3 => Step::Session,
            4 => Step::Affinity,
            5 => Step::DeathSignal,
            _ => Step::Exec,
        }
    }
}

/// What each [`Step`] is called in messages.
pub(super) const STEPS: [&str; 8] = [
    "joining the run's cgroup",
    "setting up stdin/stdout/stderr",
    "changing to the working directory",
    "starting a new session",
    "setting the CPU affinity",
    "setting the parent-death signal",
    "exec",
    "fork",
];

/// `struct clone_args` of `clone3(2)` (the kernel's layout, the same on every architecture).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Forks, in the spawner (`spawner.rs`), the child of `setup` with `clone3` and `flags`
/// (`CLONE_PARENT`), into the cgroup folder `cgroup` where given; the child runs [`child`] with
/// the report pipe `report`. Returns the child's pid.
///
/// # Errors
/// The error of `clone3`.
pub(super) fn clone_child(
    setup: &Setup<'_>,
    report: RawFd,
    flags: u64,
    cgroup: Option<RawFd>,
) -> io::Result<i32> {
    let pid = clone3_fork(flags, None, cgroup)?;
    if pid == 0 {
        child(setup, report, None);
    }
    Ok(pid)
}

/// `clone3` as `fork` (no `CLONE_VM`, no new stack) with `flags`, into the cgroup folder
/// `cgroup` from the child's start (`CLONE_INTO_CGROUP`) where given, storing a pidfd in
/// `pidfd` where given (`CLONE_PIDFD` must be in `flags` then). Returns 0 in the child, the
/// child's pid in the parent. The exit signal is `SIGCHLD`, or none with `CLONE_PARENT` (the
/// kernel requires it: the child then gets the caller's own). The one `clone3` of the runner's
/// own fork (`fork_exec` in `spawn.rs`) and the spawner's ([`clone_child`]).
///
/// The child may only make raw system calls on data prepared before (a copy of a
/// multi-threaded process) and must end in exec or `_exit`: the callers run [`child`].
///
/// # Errors
/// The error of `clone3` (`ENOSYS`, `EPERM` under a seccomp filter, `E2BIG`/`EINVAL` for
/// flags the kernel does not know, `EAGAIN`/`ENOMEM`).
pub(super) fn clone3_fork(flags: u64, pidfd: Option<&mut RawFd>, cgroup: Option<RawFd>) -> io::Result<i32> {
    let mut args = CloneArgs {
        flags,
        exit_signal: if flags & libc::CLONE_PARENT as u64 != 0 {
            0
        } else {
            libc::SIGCHLD as u64
        },
        ..CloneArgs::default()
    };
    if let Some(fd) = pidfd {
        args.pidfd = std::ptr::from_mut(fd) as u64;
    }
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir as u64;
    }
    // SAFETY: clone3 without CLONE_VM or a new stack works as fork: the child gets a copy of
    // this thread's memory, and the caller has it run only `child` (see above).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as i32)
}

/// The signals ignored (`SIG_IGN`) in this process now: bit `n - 1` for signal `n`. A signal
/// whose disposition cannot be read counts as ignored.
pub(super) fn ignored_signals() -> u64 {
    let mut mask = 0u64;
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // The kernel's struct sigaction starts with the handler; 64 bytes cover every layout.
        let mut old = [0u64; 8];
        // SAFETY: only reads the disposition into a local buffer large enough for it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<u64>(),
                old.as_mut_ptr(),
                8usize,
            )
        };
        if r != 0 || old[0] == libc::SIG_IGN as u64 {
            mask |= 1 << (sig - 1);
        }
    }
    mask
}

/// The report code of a child that could not join its v1 memory cgroup (it goes on).
pub(super) const MEMCG_NOT_JOINED: u32 = 100;

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The child, between fork and exec. Only async-signal-safe calls on data prepared before the
/// fork: joins the run's cgroup when `join` is given (writes `0`, meaning "the writer", into that
/// `cgroup.procs` fd: the `fork` fallback), moves the prepared descriptors onto 0/1/2, changes to
/// the workdir, starts a new session (no controlling terminal; session and process group id =
/// its pid), pins its CPUs, asks for SIGKILL on the parent's death (and exits if the parent
/// already died), marks every fd >= 3 close-on-exec, resets every signal disposition and the
/// signal mask, and execs. A failed step is written to `report` as (step, errno); then it exits
/// with 127.
pub(super) fn child(setup: &Setup<'_>, report: RawFd, join: Option<RawFd>) -> ! {
    let fail = |step: Step, errno: i32| -> ! {
        let mut msg = [0u8; 8];
        msg[0..4].copy_from_slice(&(step as u32).to_ne_bytes());
        msg[4..8].copy_from_slice(&errno.to_ne_bytes());
        // SAFETY: raw write of a local buffer, then _exit: both async-signal-safe.
        unsafe {
            libc::write(report, msg.as_ptr().cast(), msg.len());
            libc::_exit(127)
        }
    };
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    if let Some(fd) = setup.memcg {
        // SAFETY: `fd` is open in the parent for the whole spawn, so in this copy of it too.
        // Best effort: a run outside its memory cgroup only lacks the tree's peak; the parent
        // is told, and goes on.
        if let Err(e) = rustix::io::write(unsafe { BorrowedFd::borrow_raw(fd) }, b"0") {
            let mut msg = [0u8; 8];
            msg[0..4].copy_from_slice(&MEMCG_NOT_JOINED.to_ne_bytes());
            msg[4..8].copy_from_slice(&errno(e).to_ne_bytes());
            // SAFETY: raw write of a local buffer: async-signal-safe.
            unsafe {
                libc::write(report, msg.as_ptr().cast(), msg.len());
            }
        }
    }
    if let Some(fd) = join {
        // SAFETY: `fd` is open in the parent for the whole spawn, so in this copy of it too.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        if let Err(e) = rustix::io::write(fd, b"0") {
            fail(Step::Cgroup, errno(e));
        }
    }
    for (target, &fd) in setup.stdio.iter().enumerate() {
        // SAFETY: dup2 of a descriptor open in this process onto 0, 1 or 2 (the sources are
        // all above 2, so none is overwritten before it is moved); the copy has no CLOEXEC.
        if unsafe { libc::dup2(fd, target as i32) } < 0 {
            fail(Step::Stdio, last_errno());
        }
    }
    if let Err(e) = rustix::process::chdir(setup.image.workdir.as_c_str()) {
        fail(Step::Workdir, errno(e));
    }
    if let Err(e) = rustix::process::setsid() {
        fail(Step::Session, errno(e));
    }
    if let Some(set) = &setup.cpus
        && let Err(e) = rustix::thread::sched_setaffinity(None, set)
    {
        fail(Step::Affinity, errno(e));
    }
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        fail(Step::DeathSignal, errno(e));
    }
    // The parent may have died before the prctl: then nobody would kill us.
    if rustix::process::getppid() != Some(setup.parent) {
        fail(Step::DeathSignal, libc::ESRCH);
    }
    mark_fds_cloexec();
    reset_signals(setup.reset);
    // SAFETY: the pointers are to NUL-terminated strings and null-terminated arrays that the
    // parent keeps alive (this process's copy of them is unchanged since the fork).
    unsafe {
        libc::execve(
            setup.image.program.as_ptr(),
            setup.image.argv_ptrs.as_ptr(),
            setup.image.envp_ptrs.as_ptr(),
        );
    }
    fail(Step::Exec, last_errno())
}

/// The calling thread's errno.
fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Marks every fd >= 3 close-on-exec, so only fds 0/1/2 cross exec. Marking instead of closing
/// keeps the step-report pipe (itself close-on-exec) working until exec. Async-signal-safe.
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

/// Default dispositions for every signal in `which` (bit `n - 1` for signal `n`; `None`: every
/// signal; ignored ones would survive exec, caught ones are reset by exec itself) and an empty
/// signal mask. Async-signal-safe.
///
/// The raw system call, because glibc's wrappers refuse its internal real-time signals 32 and
/// 33, which can also arrive ignored, and rustix offers `rt_sigaction` and `rt_sigprocmask` only
/// in its unstable `runtime` module. An all-zero kernel `struct sigaction` is SIG_DFL with no
/// flags on every architecture; 64 bytes cover the largest layout. The kernel's signal set is 8
/// bytes (`_NSIG / 8`) on x86-64, AArch64 and RISC-V; where it is larger (MIPS) the call fails
/// and nothing changes.
fn reset_signals(which: Option<u64>) {
    let dfl = [0u64; 8];
    let which = which.unwrap_or(u64::MAX);
    for sig in 1..=64 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP && which & (1 << (sig - 1)) != 0 {
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
