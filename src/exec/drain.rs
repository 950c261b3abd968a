//! The run's stdout and stderr as pipes the runner drains into the bundle's files.
//!
//! A run's stdout is never the output file itself: a program that reopens `/dev/stdout` or
//! `/dev/stderr` (`echo b > /dev/stdout`, `tee /dev/stderr`, a logger given the path) opens the
//! file anew, and the shell's `>` truncates it, losing everything written before (BenchExec
//! issue 535); `O_APPEND` does not prevent that truncation. Reopening a pipe truncates nothing,
//! so the child gets the write end of a pipe and the runner copies every byte, in order, into the
//! file. When stdout and stderr go to the same file they share one pipe, so their interleaving is
//! the order the run wrote them in, as with `2>&1`.
//!
//! No thread is made for it: the supervising thread, which waits in `poll` for the run's end
//! anyway, polls the pipes' read ends (non-blocking) in the same call ([`Drain::wait`]) and copies
//! what arrives. While what is left of a run is being stopped, its waits go through
//! [`Drain::wait`] as well, so a writer is never blocked on a full pipe. [`Drain::finish`] is
//! called once no process of the run is alive: it reads what is left in the pipes (without
//! blocking: a writer that escaped the run cannot keep the runner waiting). A write error (disk
//! full) is kept and returned; the pipes are still read, so the run never blocks on a full pipe.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::pipe::PipeFlags;

/// Bytes read from a pipe at a time.
const CHUNK: usize = 64 * 1024;

/// The read ends of a run's output pipes and the files they are copied to.
pub(super) struct Sinks {
    /// (read end, file) pairs: one for stdout, one more when stderr goes to another file.
    pairs: Vec<(OwnedFd, File)>,
}

/// The write ends handed to the child as its stdout and stderr (the same pipe twice when both go
/// to one file), and the [`Sinks`] the runner drains.
pub(super) struct Pipes {
    /// The child's stdout.
    pub stdout: OwnedFd,
    /// The child's stderr.
    pub stderr: OwnedFd,
    /// What [`Drain::new`] copies.
    pub sinks: Sinks,
}

impl Pipes {
    /// Pipes (close-on-exec in the runner, the read ends non-blocking) for `stdout` and `stderr`; `stderr` is `None` when
    /// it is the same file as `stdout`.
    ///
    /// # Errors
    /// `pipe2` or `dup` failed (out of descriptors).
    pub(super) fn new(stdout: File, stderr: Option<File>) -> io::Result<Pipes> {
        let (out_r, out_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
        rustix::io::ioctl_fionbio(&out_r, true)?;
        let mut pairs = vec![(out_r, stdout)];
        let err_w = match stderr {
            Some(file) => {
                let (err_r, err_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
                rustix::io::ioctl_fionbio(&err_r, true)?;
                pairs.push((err_r, file));
                err_w
            }
            None => out_w.try_clone()?,
        };
        Ok(Pipes {
            stdout: out_w,
            stderr: err_w,
            sinks: Sinks { pairs },
        })
    }
}

/// Most bytes copied from one pipe per wake-up, so that a fast writer cannot keep the supervisor
/// from its other work (the timeout, samples).
const BURST: usize = 16 * CHUNK;

/// Copies a run's output pipes into its files, from the supervising thread.
pub(super) struct Drain {
    /// (read end, file) pairs still open: a pipe at its end (every writer closed) is dropped.
    pairs: Vec<(OwnedFd, File)>,
    /// Read buffer, allocated at the first byte (a run that prints nothing needs none).
    buf: Vec<u8>,
    /// The first read or write error.
    error: Option<io::Error>,
}

impl Drain {
    /// A drain of `sinks` (nothing is started: see [`Drain::wait`]).
    pub(super) fn new(sinks: Sinks) -> Drain {
        Drain {
            pairs: sinks.pairs,
            buf: Vec::new(),
            error: None,
        }
    }

    /// Waits up to `timeout` for `until_ready` (a pidfd: the leader's exit) to become readable,
    /// copying whatever the pipes bring meanwhile. Returns `true` when `until_ready` is ready,
    /// `false` when the time is up (or when the wait was interrupted by a signal: the caller
    /// re-evaluates). With `None`, just copies for `timeout`.
    pub(super) fn wait(&mut self, until_ready: Option<&OwnedFd>, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let ts = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            });
            let mut fds: Vec<PollFd<'_>> = until_ready
                .iter()
                .map(|fd| PollFd::new(*fd, PollFlags::IN))
                .chain(self.pairs.iter().map(|(r, _)| PollFd::new(r, PollFlags::IN)))
                .collect();
            let target = usize::from(until_ready.is_some());
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) => {}
                Err(Errno::INTR) => return false,
                Err(e) => {
                    // Should not happen; never spin on a broken poll: nap instead.
                    self.error.get_or_insert(e.into());
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                    return false;
                }
            }
            let done = target == 1 && !fds[0].revents().is_empty();
            let ready: Vec<bool> = fds[target..].iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            if ready.contains(&true) {
                self.copy(Some(&ready));
            }
            if done {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
        }
    }

    /// Copies what the pipes hold now (all of them, or those marked in `ready`), up to [`BURST`]
    /// bytes each; drops the pipes that are at their end. Returns the bytes copied.
    fn copy(&mut self, ready: Option<&[bool]>) -> usize {
        if self.buf.is_empty() {
            self.buf = vec![0u8; CHUNK];
        }
        let mut ended = Vec::new();
        let mut total = 0;
        for (i, (r, file)) in self.pairs.iter_mut().enumerate() {
            if ready.is_some_and(|ready| !ready.get(i).copied().unwrap_or(false)) {
                continue;
            }
            let mut copied = 0;
            while copied < BURST {
                match copy_once(r, file, &mut self.buf) {
                    Ok(0) => {
                        ended.push(i);
                        break;
                    }
                    Ok(n) => copied += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        self.error.get_or_insert(e);
                        // A read error would repeat: stop reading this pipe.
                        ended.push(i);
                        break;
                    }
                }
            }
            total += copied;
        }
        for i in ended.into_iter().rev() {
            let (_, mut file) = self.pairs.swap_remove(i);
            if let Err(e) = file.flush() {
                self.error.get_or_insert(e);
            }
        }
        total
    }

    /// Copies what is left in the pipes. Call it when no process of the run is alive.
    ///
    /// # Errors
    /// The first read or write error of the copy (the file then lacks some of the output).
    pub(super) fn finish(mut self) -> io::Result<()> {
        // No process of the run is alive, so what they wrote is in the pipes now; a writer
        // that escaped the run may still write, but is not waited for.
        while !self.pairs.is_empty() && self.copy(None) > 0 {}
        for (_, file) in &mut self.pairs {
            if let Err(e) = file.flush() {
                self.error.get_or_insert(e);
            }
        }
        self.error.map_or(Ok(()), Err)
    }
}

/// One read from the pipe `r` written whole to `file`; returns the bytes read (0 at the end of
/// the pipe). A write error is returned after the bytes were read, so the pipe keeps moving.
fn copy_once(r: &OwnedFd, file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let n = loop {
        match rustix::io::read(r.as_fd(), &mut *buf) {
            Ok(n) => break n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    file.write_all(&buf[..n])?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_fd(fd: &OwnedFd, bytes: &[u8]) {
        let mut f = File::from(fd.try_clone().unwrap());
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn one_file_for_both_keeps_the_order_and_finish_reads_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let pipes = Pipes::new(File::create(&path).unwrap(), None).unwrap();
        let drain = Drain::new(pipes.sinks);
        write_fd(&pipes.stdout, b"a\n");
        write_fd(&pipes.stderr, b"b\n");
        write_fd(&pipes.stdout, b"c\n");
        // A writer still open (as one that escaped the run): finish does not wait for it.
        let kept = pipes.stdout.try_clone().unwrap();
        drop(pipes.stdout);
        drop(pipes.stderr);
        drain.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a\nb\nc\n");
        drop(kept);
    }

    #[test]
    fn two_files_get_their_own_bytes_while_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let (o, e) = (dir.path().join("o"), dir.path().join("e"));
        let pipes = Pipes::new(File::create(&o).unwrap(), Some(File::create(&e).unwrap())).unwrap();
        let mut drain = Drain::new(pipes.sinks);
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        // The writer needs the pipe drained to get 1 MB through (a pipe holds 64 KiB): only
        // waiting copies it, as the supervisor does while the run executes.
        let (stdout, stderr) = (pipes.stdout, pipes.stderr);
        let expected = big.clone();
        let writer = std::thread::spawn(move || {
            write_fd(&stdout, &big);
            write_fd(&stderr, b"err\n");
        });
        while !writer.is_finished() {
            assert!(!drain.wait(None, Duration::from_millis(5)));
        }
        writer.join().unwrap();
        drain.finish().unwrap();
        assert_eq!(std::fs::read(&o).unwrap(), expected);
        assert_eq!(std::fs::read(&e).unwrap(), b"err\n");
    }

    /// `wait` returns once the fd it waits for is readable, and copies what came meanwhile.
    #[test]
    fn wait_returns_when_its_fd_is_ready() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let pipes = Pipes::new(File::create(&path).unwrap(), None).unwrap();
        let mut drain = Drain::new(pipes.sinks);
        let (exit_r, exit_w) = rustix::pipe::pipe().unwrap();
        write_fd(&pipes.stdout, b"x\n");
        assert!(!drain.wait(Some(&exit_r), Duration::from_millis(20)));
        write_fd(&exit_w, b"!");
        assert!(drain.wait(Some(&exit_r), Duration::from_secs(60)));
        drop((pipes.stdout, pipes.stderr));
        drain.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"x\n");
    }
}
