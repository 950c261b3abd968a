//! The spawner: a small process, exec'd once from the runner's own binary, that forks each run's
//! child for the runner (issue 20 item 6).
//!
//! Forking the runner itself copies its page tables (every run's `clone3` walked the runner's
//! whole memory: threads' stacks, the heap, the plan) and leaves all its memory write-protected,
//! so the runner then takes a copy-on-write fault on each page it writes while the run starts and
//! a fault on each it writes later: together about a fifth of the CPU time of a `/bin/true` run
//! (perf). The forked copy's memory also counted into the run's peak RSS (`ru_maxrss` takes the
//! RSS of the copy at exec). The spawner is a fresh exec of the same binary (a few hundred KiB
//! of memory of its own), so its fork is cheap and the run's peak RSS is the program's own.
//!
//! The runner stays the run's parent: the spawner forks with `CLONE_PARENT`, so `wait4`,
//! `SIGCHLD`, the child subreaper and the child's `getppid` check are the runner's as before. The
//! child's parent-death signal fires when the runner thread that started the spawner exits, so
//! the spawner is started from a thread of its own that lives as long as the runner. The child
//! runs the same setup between fork and exec as a child forked by the runner (`spawn.rs`), except
//! that it resets only the signals the spawner ignores (read once; caught ones are reset by exec).
//!
//! One request per run on a Unix stream socket: a length-prefixed message with the program,
//! workdir, argv, environment and CPUs, and the descriptors (stdin, stdout and stderr pipes, the
//! report pipe, the v1 memory cgroup's `tasks`, the cgroup folder) as `SCM_RIGHTS`; the
//! answer is the child's pid or the errno of the fork (both encoded in `spawn_message.rs`). The child reports a failed setup step on
//! the runner's report pipe, as before. Where the spawner cannot start (no `/proc/self/exe`, a
//! binary that is not `hwr-exp`'s, a seccomp filter refusing `CLONE_PARENT`) or stops answering,
//! the runner forks itself, as before.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use rustix::thread::CpuSet;

use super::spawn_message::{LENGTH_BYTES, MAX_FDS, READY, SpawnAnswer, SpawnRequest};

/// The environment variable that makes `hwr-exp` serve as the spawner: the socket's fd number.
/// Only honoured together with [`ARG0`] as `argv[0]`.
const ENV: &str = "HWR_EXP_INTERNAL_SPAWNER";

/// `argv[0]` of the spawner process (what `ps` shows).
const ARG0: &str = "hwr-exp-spawner";

/// Set by [`enable`]: this binary serves as a spawner when asked (test harnesses do not).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Pid of the spawner (0 when none).
static SPAWNER_PID: AtomicI32 = AtomicI32::new(0);

/// `hwr-exp`'s `main` calls this first: when this process was started as the spawner it serves
/// until the runner goes and exits, never returning. Otherwise it marks the binary as one that
/// can serve ([`enable`]) and returns.
pub fn serve_if_asked() {
    let asked = std::env::args_os().next().is_some_and(|a| a == ARG0);
    if asked
        && let Some(fd) = std::env::var_os(ENV)
        && let Some(fd) = fd.to_str().and_then(|s| s.parse::<RawFd>().ok())
    {
        serve(fd);
    }
    enable();
}

/// Lets [`super::ProcessLauncher`] start runs through a spawner exec'd from this binary. Only
/// for a binary whose `main` calls [`serve_if_asked`] first (`hwr-exp` does).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// `true` when `pid` is this runner's spawner.
pub(super) fn is_spawner(pid: i32) -> bool {
    pid != 0 && SPAWNER_PID.load(Ordering::Relaxed) == pid
}

/// The runner's side: the socket to the spawner (locked for one request and its answer).
pub(super) struct Spawner {
    socket: Mutex<OwnedFd>,
    broken: AtomicBool,
}

/// Why the spawner did not start the child.
pub(super) enum Refused {
    /// The fork failed there with this error (as the runner's own fork would have).
    Fork(io::Error),
    /// The spawner is gone or cannot do it: the runner forks itself.
    Unavailable,
}

/// The spawner, started on first use; `None` where it cannot be (see the module docs).
pub(super) fn get() -> Option<&'static Spawner> {
    static SPAWNER: OnceLock<Option<Spawner>> = OnceLock::new();
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    SPAWNER
        .get_or_init(start)
        .as_ref()
        .filter(|s| !s.broken.load(Ordering::Relaxed))
}

/// Starts the spawner from a thread that never ends (see the module docs) and waits for its
/// first answer.
fn start() -> Option<Spawner> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("hwr-spawner".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = tx.send(launch());
            loop {
                std::thread::park();
            }
        })
        .ok()?;
    rx.recv().ok().flatten()
}

/// Makes the socket pair and execs the spawner with its end; `None` when it does not answer.
fn launch() -> Option<Spawner> {
    // The spawner's CPUs are the runner's allowed ones (this thread was made by one pinned away
    // from a run, and keeps that: it only waits); a run with no CPUs of its own inherits them.
    let mut allowed = CpuSet::new();
    super::pinning::runner_allowed()
        .iter()
        .filter(|&&c| c < CpuSet::MAX_CPU)
        .for_each(|&c| allowed.set(c));
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return None;
    }
    // SAFETY: both are new descriptors owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let raw = theirs.as_raw_fd();
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0(ARG0)
        .env_clear()
        .env(ENV, raw.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: prctl, fcntl and sched_setaffinity are raw system calls on data made before the
    // fork, and touch only this new process.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                || libc::fcntl(raw, libc::F_SETFD, 0) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // Best effort: where it fails the spawner keeps this thread's CPUs.
            let _ = rustix::thread::sched_setaffinity(None, &allowed);
            Ok(())
        });
    }
    let mut child = command.spawn().ok()?;
    drop(theirs);
    let mut ready = [0u8; 4];
    if read_exact(ours.as_raw_fd(), &mut ready).is_err() || &ready != READY {
        drop(ours);
        let _ = child.wait();
        return None;
    }
    SPAWNER_PID.store(child.id() as i32, Ordering::Relaxed);
    Some(Spawner {
        socket: Mutex::new(ours),
        broken: AtomicBool::new(false),
    })
}

impl Spawner {
    /// Asks the spawner to fork the child of `request`; returns its pid (a child of the runner).
    ///
    /// # Errors
    /// [`Refused::Fork`] with the fork's error, or [`Refused::Unavailable`] when the spawner
    /// cannot serve (then it is not asked again).
    pub(super) fn spawn(&self, request: &SpawnRequest<'_>) -> Result<i32, Refused> {
        let socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        let (message, fds) = request.encode();
        let answer = send(socket.as_raw_fd(), &message, &fds).and_then(|()| {
            let mut answer = [0u8; SpawnAnswer::BYTES];
            read_exact(socket.as_raw_fd(), &mut answer).map(|()| answer)
        });
        let Ok(answer) = answer else {
            self.give_up();
            return Err(Refused::Unavailable);
        };
        let errno = match SpawnAnswer::decode(answer) {
            SpawnAnswer::Started(pid) => return Ok(pid),
            SpawnAnswer::Failed(errno) => errno,
        };
        match errno {
            // No clone3 or no CLONE_PARENT/CLONE_INTO_CGROUP there (old kernel, seccomp).
            libc::ENOSYS | libc::EPERM | libc::E2BIG | libc::EINVAL => {
                self.give_up();
                Err(Refused::Unavailable)
            }
            e => Err(Refused::Fork(io::Error::from_raw_os_error(e))),
        }
    }

    /// Stops using the spawner: it is told to go (its socket stays open until the runner exits,
    /// which ends it), and it is reaped if it has exited.
    fn give_up(&self) {
        self.broken.store(true, Ordering::Relaxed);
        let pid = SPAWNER_PID.load(Ordering::Relaxed);
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty());
        }
    }
}

/// Sends `bytes` with `fds` attached to the first part.
fn send(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the sendmsg call, and
    // the control buffer is CMSG_SPACE bytes, enough for one header and the descriptors.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast::<RawFd>(), fds.len());
        loop {
            let r = libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
            if r >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break r;
            }
        }
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    write_all(socket, &bytes[sent as usize..])
}

fn write_all(fd: RawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: a write from a live buffer.
        let r = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[r as usize..];
    }
    Ok(())
}

fn read_exact(fd: RawFd, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: a read into a live buffer.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match r {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            r if r < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            r => buf = &mut buf[r as usize..],
        }
    }
    Ok(())
}

/// The spawner's whole life: answers requests on `socket` until the runner closes it, then exits.
fn serve(socket: RawFd) -> ! {
    let runner = rustix::process::getppid();
    // The runner may have died before the parent-death signal was set.
    if runner.is_none_or(|p| p.as_raw_nonzero().get() == 1) || write_all(socket, READY).is_err() {
        std::process::exit(0);
    }
    // Nothing in this process changes a signal's disposition from here on: its children reset
    // only the ignored ones (caught ones are reset by exec).
    let ignored = super::fork::ignored_signals();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Some((len, fds)) = receive(socket, &mut buf) else {
            std::process::exit(0);
        };
        let answer = SpawnAnswer::of(start_child(&buf[..len], &fds, runner, ignored));
        drop(fds);
        if write_all(socket, &answer.encode()).is_err() {
            std::process::exit(0);
        }
    }
}

/// Receives one request into `buf` (grown as needed): its length and descriptors. `None` at the
/// end of the socket or on a malformed request.
fn receive(socket: RawFd, buf: &mut Vec<u8>) -> Option<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: LENGTH_BYTES,
    };
    let mut fds = Vec::new();
    // SAFETY: an all-zero msghdr is valid; its buffers outlive the call; the descriptors the
    // kernel passed are read from the control messages it filled in and owned from then on.
    let got = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let r = loop {
            let r = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL);
            if r >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break r;
            }
        };
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let n =
                    ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..n {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        r
    };
    if got != LENGTH_BYTES as isize {
        return None;
    }
    let len = SpawnRequest::length([buf[0], buf[1], buf[2], buf[3]])?;
    if buf.len() < len {
        buf.resize(len, 0);
    }
    read_exact(socket, &mut buf[LENGTH_BYTES..len]).ok()?;
    Some((len, fds))
}

/// Decodes one request and forks its child with `CLONE_PARENT` (into the cgroup where one is
/// given); the child runs [`super::fork::child`]. Returns the child's pid.
fn start_child(
    message: &[u8],
    fds: &[OwnedFd],
    runner: Option<rustix::process::Pid>,
    ignored: u64,
) -> io::Result<i32> {
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let request = SpawnRequest::decode(message, &raw)?;
    let parent = runner.ok_or_else(|| io::Error::from_raw_os_error(libc::EBADMSG))?;
    let image = super::fork::Image::from_parts(
        request.program.into_owned(),
        request.workdir.into_owned(),
        request.argv.into_owned(),
        request.envp.into_owned(),
    );
    let setup = super::fork::Setup {
        image: &image,
        stdio: request.stdio,
        cpus: request.cpus,
        parent,
        memcg: request.memcg,
        reset: Some(ignored),
    };
    super::fork::clone_child(&setup, request.report, libc::CLONE_PARENT as u64, request.cgroup)
}
