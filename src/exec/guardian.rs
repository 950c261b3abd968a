//! The guardian: kills the runs' process groups when the runner dies, however it dies.
//!
//! The parent-death signal (`PR_SET_PDEATHSIG`) set in each run reaches only the run's leader; a
//! shell's children or a Python subprocess would live on after a SIGKILL of the runner. So the runner
//! forks, once, a small guardian process in its own process group (terminal signals do not reach it)
//! that reads "group started" / "group ended" records from a pipe. When the pipe reaches end-of-file
//! (the runner's end closed: it exited, was killed, or crashed), the guardian sends SIGKILL to every
//! group still listed and exits. Each record is one 4-byte write (atomic on a pipe): `+pgid` when a
//! run starts, `-pgid` when its group is gone.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;

/// Most groups the guardian tracks at once (one per job slot is in use at a time).
const SLOTS: usize = 1024;

/// The write end of the guardian's pipe, or `None` when the guardian could not be started (the
/// runs then rely on the parent-death signal alone).
fn channel() -> Option<&'static OwnedFd> {
    static CHANNEL: OnceLock<Option<OwnedFd>> = OnceLock::new();
    CHANNEL.get_or_init(start).as_ref()
}

/// Starts the guardian, if it is not running yet. Called by [`super::ProcessExecutor::new`].
pub fn ensure_started() {
    let _ = channel();
}

/// Records that a run's process group `pgid` exists.
pub fn group_started(pgid: i32) {
    send(pgid);
}

/// Records that the process group `pgid` is empty.
pub fn group_ended(pgid: i32) {
    send(-pgid);
}

fn send(record: i32) {
    if let Some(fd) = channel() {
        let bytes = record.to_ne_bytes();
        // A failed write (guardian gone) only loses the protection; the run itself is unaffected.
        let _ = rustix::io::write(fd, &bytes);
    }
}

fn start() -> Option<OwnedFd> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
    let (rfd, wfd) = (read.as_raw_fd(), write.as_raw_fd());
    // SAFETY: after fork the child only makes async-signal-safe system calls (close_range,
    // setpgid, read, kill, _exit) on memory it owns, as required in a multi-threaded process.
    match unsafe { libc::fork() } {
        0 => unsafe { guardian_main(rfd, wfd) },
        -1 => None,
        _ => {
            drop(read);
            Some(write)
        }
    }
}

/// The guardian's whole life. Never returns.
unsafe fn guardian_main(rfd: i32, wfd: i32) -> ! {
    unsafe {
        libc::close(wfd);
        // Keep only the pipe: holding the runner's stdout or other files open would delay the
        // end-of-file that the runner's own parent waits for.
        if rfd > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (rfd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (rfd + 1) as u32, u32::MAX, 0u32);
        libc::setpgid(0, 0);
        let mut groups = [0i32; SLOTS];
        let mut buf = [0u8; 4];
        loop {
            let n = libc::read(rfd, buf.as_mut_ptr().cast(), 4);
            if n == 4 {
                let record = i32::from_ne_bytes(buf);
                if record > 0 {
                    if let Some(slot) = groups.iter_mut().find(|g| **g == 0) {
                        *slot = record;
                    }
                } else if let Some(slot) = groups.iter_mut().find(|g| **g == -record) {
                    *slot = 0;
                }
            } else if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            } else {
                break;
            }
        }
        for &g in groups.iter().filter(|g| **g > 0) {
            libc::kill(-g, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}
