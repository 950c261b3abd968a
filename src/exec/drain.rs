//! The run's stdout and stderr as pipes the runner drains into the bundle's files.
//!
//! A run's stdout is never the output file itself: a program that reopens `/dev/stdout` or
//! `/dev/stderr` (`echo b > /dev/stdout`, `tee /dev/stderr`, a logger given the path) opens the
//! file anew, and the shell's `>` truncates it, losing everything written before (BenchExec
//! issue 535); `O_APPEND` does not prevent that truncation. Reopening a pipe truncates nothing,
//! so the child gets the write end of a pipe and one thread of the runner copies every byte, in
//! order, into the file. When stdout and stderr go to the same file they share one pipe, so their
//! interleaving is the order the run wrote them in, as with `2>&1`.
//!
//! The thread ([`Drain::start`]) waits with `poll` on the pipes and on a stop pipe; [`Drain::finish`]
//! is called once no process of the run is alive: it closes the stop pipe, the thread reads what
//! is left in the pipes (without blocking: a writer that escaped the run cannot keep the runner
//! waiting) and ends. A write error (disk full) is kept and returned; the thread goes on reading
//! so the run never blocks on a full pipe.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::thread::JoinHandle;

use rustix::event::{PollFd, PollFlags};
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
    /// What [`Drain::start`] copies.
    pub sinks: Sinks,
}

impl Pipes {
    /// Pipes (close-on-exec in the runner) for `stdout` and `stderr`; `stderr` is `None` when
    /// it is the same file as `stdout`.
    ///
    /// # Errors
    /// `pipe2` or `dup` failed (out of descriptors).
    pub(super) fn new(stdout: File, stderr: Option<File>) -> io::Result<Pipes> {
        let (out_r, out_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
        let mut pairs = vec![(out_r, stdout)];
        let err_w = match stderr {
            Some(file) => {
                let (err_r, err_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
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

/// The thread copying a run's output pipes into its files.
pub(super) struct Drain {
    /// Closed by [`Drain::finish`]: the thread then empties the pipes and ends.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Drain {
    /// Starts the thread (it inherits the caller's CPU affinity: the runner's, away from the
    /// run's CPUs).
    ///
    /// # Errors
    /// The stop pipe or the thread could not be made.
    pub(super) fn start(sinks: Sinks) -> io::Result<Drain> {
        let (stop_r, stop_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
        let thread = std::thread::Builder::new()
            .name("hwr-output".to_owned())
            .spawn(move || copy_all(sinks.pairs, &stop_r))?;
        Ok(Drain {
            stop: Some(stop_w),
            thread: Some(thread),
        })
    }

    /// Copies what is left in the pipes and waits for the thread. Call it when no process of the
    /// run is alive.
    ///
    /// # Errors
    /// The first read or write error of the copy (the file then lacks some of the output).
    pub(super) fn finish(mut self) -> io::Result<()> {
        drop(self.stop.take());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the output copying thread panicked")),
            None => Ok(()),
        }
    }
}

/// The thread's loop: copies each pipe to its file until every pipe is at its end, or until
/// `stop` is closed, then reads what is left without blocking.
fn copy_all(mut pairs: Vec<(OwnedFd, File)>, stop: &OwnedFd) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut first_error: Option<io::Error> = None;
    let keep = |e: io::Error, first: &mut Option<io::Error>| {
        first.get_or_insert(e);
    };
    loop {
        if pairs.is_empty() {
            break;
        }
        let mut fds: Vec<PollFd<'_>> = pairs
            .iter()
            .map(|(r, _)| PollFd::new(r, PollFlags::IN))
            .chain(std::iter::once(PollFd::new(stop, PollFlags::IN)))
            .collect();
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => {
                keep(e.into(), &mut first_error);
                break;
            }
        }
        let ready: Vec<bool> = fds[..pairs.len()]
            .iter()
            .map(|f| !f.revents().is_empty())
            .collect();
        let stopped = !fds[pairs.len()].revents().is_empty();
        drop(fds);
        let mut ended = Vec::new();
        for (i, (r, file)) in pairs.iter_mut().enumerate() {
            if !ready[i] {
                continue;
            }
            match copy_once(r, file, &mut buf) {
                Ok(0) => ended.push(i),
                Ok(_) => {}
                Err(e) => keep(e, &mut first_error),
            }
        }
        for i in ended.into_iter().rev() {
            pairs.swap_remove(i);
        }
        if stopped {
            break;
        }
    }
    // Stopped: no process of the run is alive, so what they wrote is in the pipes now.
    for (r, file) in &mut pairs {
        if let Err(e) = rustix::io::ioctl_fionbio(&*r, true) {
            keep(e.into(), &mut first_error);
            continue;
        }
        loop {
            match copy_once(r, file, &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    keep(e, &mut first_error);
                    break;
                }
            }
        }
    }
    for (_, file) in &mut pairs {
        if let Err(e) = file.flush() {
            keep(e, &mut first_error);
        }
    }
    first_error.map_or(Ok(()), Err)
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
        let drain = Drain::start(pipes.sinks).unwrap();
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
    fn two_files_get_their_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (o, e) = (dir.path().join("o"), dir.path().join("e"));
        let pipes = Pipes::new(File::create(&o).unwrap(), Some(File::create(&e).unwrap())).unwrap();
        let drain = Drain::start(pipes.sinks).unwrap();
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        write_fd(&pipes.stdout, &big);
        write_fd(&pipes.stderr, b"err\n");
        drop(pipes.stdout);
        drop(pipes.stderr);
        drain.finish().unwrap();
        assert_eq!(std::fs::read(&o).unwrap(), big);
        assert_eq!(std::fs::read(&e).unwrap(), b"err\n");
    }
}
