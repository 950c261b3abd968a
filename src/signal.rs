//! The process's one setup of the stopping signals and the [`CancelFlag`] they set (docs/DESIGN.md 4:
//! Ctrl-C or SIGTERM to the runner stops the run in flight, the bundle is marked `interrupted`;
//! DESIGN 7: the probe prints what it has). SIGHUP (the terminal was closed) and SIGQUIT (Ctrl-\\)
//! are handled exactly like SIGTERM: [`STOP_SIGNALS`].
//!
//! [`catch_file_size_limit`] makes a write beyond `RLIMIT_FSIZE` fail with `EFBIG` instead of
//! killing the process with SIGXFSZ, so the runner can report the file and mark its bundle.
//!
//! The handlers only store into atomics (signal-hook's `flag` registrations, async-signal-safe);
//! the code that was interrupted polls them between steps and does the rest from normal context.
//! This module imports no other module of the crate.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGXFSZ};

/// The signals that stop the work in progress: SIGINT (Ctrl-C), SIGTERM, SIGHUP (terminal closed),
/// SIGQUIT (Ctrl-\\). All four are handled the same way by [`install`].
pub const STOP_SIGNALS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// Shared cancellation flag: `true` once one of [`STOP_SIGNALS`] arrived. The executor polls it while a
/// run is in flight (`exec::CancelFlag` names the same type).
pub type CancelFlag = Arc<AtomicBool>;

/// Whether a progress bar is drawn on stderr (a terminal) at the moment ([`terminal_line`]).
static TERMINAL_LINE: AtomicBool = AtomicBool::new(false);

/// Says whether a progress bar is drawn on stderr (set when one starts, cleared when it is
/// erased): a second stop signal, which exits at once ([`SecondSignal::Exit`]), first erases the
/// bar's line, so that the bar does not stay on the terminal.
pub fn terminal_line(drawn: bool) {
    TERMINAL_LINE.store(drawn, Ordering::SeqCst);
}

/// What a signal does when the cancel flag is already set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecondSignal {
    /// Exit the process with this code (`run`, `resume`: a second Ctrl-C does not wait for the run
    /// in flight; the runs' parent-death signal then stops them), after the function given to
    /// [`before_forced_exit`] has marked the bundle.
    Exit(i32),
    /// Set the flag again and nothing more, so that the interrupted code always finishes its
    /// cleanup (`rerun --at-recorded-revision` removes its temporary worktree; the probe prints its
    /// document).
    SetFlag,
}

/// The installed handlers of [`STOP_SIGNALS`]: the cancel flag and the number of the last signal received.
#[derive(Debug, Clone)]
pub struct Signals {
    flag: CancelFlag,
    last: Arc<AtomicUsize>,
}

impl Signals {
    /// The flag the handlers set.
    pub fn cancel_flag(&self) -> &CancelFlag {
        &self.flag
    }

    /// The number of the last signal received (`SIGTERM` = 15, `SIGINT` = 2, `SIGHUP` = 1,
    /// `SIGQUIT` = 3); `None` before any.
    pub fn received(&self) -> Option<i32> {
        match self.last.load(Ordering::SeqCst) {
            0 => None,
            n => i32::try_from(n).ok(),
        }
    }

    /// The signal number cell itself (0 = none yet), for loops that poll a plain atomic.
    pub fn last_signal(&self) -> &AtomicUsize {
        &self.last
    }
}

/// The handlers could not be installed (`sigaction` failed); exit 3 at the command line.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the signal handlers (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXFSZ)")]
pub struct SignalError(#[source] io::Error);

/// How close together two deliveries of the same stop signal must be to count as one request
/// ([`install`]): GNU `timeout` passes its SIGTERM (or a Ctrl-C's SIGINT) on to the child and then
/// to its whole process group, so the runner receives the same signal two or three times within
/// microseconds; a person pressing Ctrl-C again takes longer than this.
pub const DUPLICATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// The current request, claimed in one step by its first delivery: its signal number in the low
/// 8 bits and its `CLOCK_MONOTONIC` time in milliseconds above them (0 = no request yet). One word
/// and one compare-and-swap, because two different signals sent back to back can be handled at the
/// same moment on two threads: each must see the other's claim ([`classify`]).
static REQUEST: AtomicU64 = AtomicU64::new(0);
/// What runs before a forced exit ([`SecondSignal::Exit`]): set by [`before_forced_exit`].
static BEFORE_EXIT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets the function a forced exit ([`SecondSignal::Exit`]) runs, from normal context on a thread
/// of its own, before the process exits: the runner marks the bundle it is writing `interrupted`
/// there, so that no exit leaves it `running`. Only the first call counts. A third stop signal
/// while the function runs exits at once.
pub fn before_forced_exit(f: fn()) {
    let _ = BEFORE_EXIT.set(f);
}

/// `CLOCK_MONOTONIC` in milliseconds (async-signal-safe: `clock_gettime(2)` is).
fn monotonic_millis() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes into a valid timespec; it is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut t) };
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000 + u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000_000
}

/// What one delivery of a stop signal is ([`classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// The first delivery of the first request: it claimed [`REQUEST`].
    First,
    /// The same signal again within [`DUPLICATE_WINDOW`] of the first: the same request.
    Duplicate,
    /// Another signal, or the same one later: a new request.
    Repeat,
}

/// Claims `request` for a delivery of `sig` at `now_ms`, or says how it relates to the claim
/// already there. Lock-free and async-signal-safe: one compare-and-swap, so that of two handlers
/// running at once exactly one is [`Delivery::First`].
fn classify(request: &AtomicU64, sig: i32, now_ms: u64) -> Delivery {
    let sig = u64::try_from(sig).unwrap_or(0) & 0xff;
    let mine = (now_ms.max(1) << 8) | sig;
    match request.compare_exchange(0, mine, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => Delivery::First,
        Err(claim) => {
            let window = u64::try_from(DUPLICATE_WINDOW.as_millis()).unwrap_or(u64::MAX);
            let same = claim & 0xff == sig;
            if same && now_ms.saturating_sub(claim >> 8) < window {
                Delivery::Duplicate
            } else {
                Delivery::Repeat
            }
        }
    }
}

/// Milliseconds since the first delivery of the current request; `None` before any.
fn request_age_ms() -> Option<u64> {
    match REQUEST.load(Ordering::SeqCst) {
        0 => None,
        claim => Some(monotonic_millis().saturating_sub(claim >> 8)),
    }
}

/// Installs handlers for [`STOP_SIGNALS`] that set the returned flag and record the signal's
/// number; `second` says what a new request does once the flag is set. Deliveries of the same
/// signal within [`DUPLICATE_WINDOW`] of the first are one request (GNU `timeout` sends its signal
/// twice). Process-wide: call it once per process, before the work it guards.
///
/// With [`SecondSignal::Exit`], a second request wakes a thread that erases the progress bar's
/// line, runs the function given to [`before_forced_exit`] (the bundle is marked) and exits with
/// the code; a third request exits at once.
///
/// # Errors
/// [`SignalError`] when signal-hook cannot register a handler or the wake-up pipe cannot be made.
pub fn install(second: SecondSignal) -> Result<Signals, SignalError> {
    let signals = Signals {
        flag: Arc::new(AtomicBool::new(false)),
        last: Arc::new(AtomicUsize::new(0)),
    };
    let wake = match second {
        SecondSignal::Exit(code) => Some(forced_exit_thread(code, Arc::clone(&signals.flag))?),
        SecondSignal::SetFlag => None,
    };
    let forcing = Arc::new(AtomicBool::new(false));
    for sig in STOP_SIGNALS {
        let flag = Arc::clone(&signals.flag);
        let last = Arc::clone(&signals.last);
        let forcing = Arc::clone(&forcing);
        let wake = wake.clone();
        let action = move || {
            let delivery = classify(&REQUEST, sig, monotonic_millis());
            if delivery == Delivery::First || wake.is_none() {
                last.store(usize::try_from(sig).unwrap_or(0), Ordering::SeqCst);
            }
            flag.store(true, Ordering::SeqCst);
            if let (Some((fd, code)), Delivery::Repeat) = (&wake, delivery) {
                if forcing.swap(true, Ordering::SeqCst) {
                    // A request while the forced exit runs: exit at once.
                    signal_hook::low_level::exit(*code);
                }
                // SAFETY: write(2) on an open pipe with a valid one-byte buffer is async-signal-safe.
                let _ = unsafe { libc::write(fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
            }
        };
        // SAFETY: the action only loads and stores atomics, reads the monotonic clock and calls
        // write(2) and _exit(2), all async-signal-safe; it allocates and locks nothing.
        unsafe { signal_hook::low_level::register(sig, action) }.map_err(SignalError)?;
    }
    Ok(signals)
}

/// The line a person at a terminal reads once a second Ctrl-C would stop the runner at once
/// ([`DUPLICATE_WINDOW`] after the first request, while the run in flight is still being stopped).
pub const STOP_AT_ONCE_HINT: &str =
    "stopping: waiting for the run in flight to end; Ctrl-C again stops at once (that run gets no run.json)";

/// Says [`STOP_AT_ONCE_HINT`] on stderr when a request is in progress (`flag`), its
/// [`DUPLICATE_WINDOW`] has passed (so that a second Ctrl-C now counts) and a progress bar is
/// drawn on a terminal (a person is there to read it; the bar's line is erased first and drawn
/// again below by the bar). Returns whether it was said.
fn hint_when_due(flag: &AtomicBool) -> bool {
    let window = u64::try_from(DUPLICATE_WINDOW.as_millis()).unwrap_or(u64::MAX);
    let due = flag.load(Ordering::SeqCst) && request_age_ms().is_some_and(|age| age >= window);
    if !due || !TERMINAL_LINE.load(Ordering::SeqCst) {
        return false;
    }
    let line = format!("\r\x1b[2K{STOP_AT_ONCE_HINT}\n");
    let _ = io::Write::write_all(&mut io::stderr(), line.as_bytes());
    true
}

/// Starts the thread that performs a forced exit with `code` once a byte arrives on the returned
/// pipe (written by the signal handler); meanwhile it says [`STOP_AT_ONCE_HINT`] when due
/// ([`hint_when_due`], `flag` is the handlers' cancel flag).
fn forced_exit_thread(code: i32, flag: CancelFlag) -> Result<(Arc<std::os::fd::OwnedFd>, i32), SignalError> {
    let (reader, writer) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| SignalError(e.into()))?;
    std::thread::Builder::new()
        .name("forced-exit".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            let mut hinted = false;
            let tick = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            loop {
                // Until the hint is said, look every 100 ms whether it is due; then just wait.
                let mut fds = [rustix::event::PollFd::new(&reader, rustix::event::PollFlags::IN)];
                match rustix::event::poll(&mut fds, (!hinted).then_some(&tick)) {
                    Ok(0) => {
                        hinted = hint_when_due(&flag);
                        continue;
                    }
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return,
                }
                match rustix::io::read(&reader, &mut byte) {
                    Ok(1) => break,
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    // The write end is never closed; anything else: no forced exit is possible.
                    _ => return,
                }
            }
            if TERMINAL_LINE.load(Ordering::SeqCst) {
                // A progress bar is drawn on stderr: erase its line, so that it does not stay on
                // the terminal with the shell's prompt after it.
                let _ = io::Write::write_all(&mut io::stderr(), b"\r\x1b[2K");
            }
            if let Some(before) = BEFORE_EXIT.get() {
                before();
            }
            signal_hook::low_level::exit(code);
        })
        .map_err(SignalError)?;
    Ok((Arc::new(writer), code))
}

/// Installs a SIGUSR2 handler for a Slurm task (`hwr-exp slurm-task`): the pre-timeout signal of
/// `[executor] requeue = true` (`--signal=B:USR2@...`). It only sets the returned flag: the task
/// then asks Slurm how long the job has left (Slurm may send the signal up to a minute earlier than
/// asked), stops its run (SIGTERM, SIGKILL after grace, as on timeout) when just the grace period
/// and the requeue margin are left, and requeues itself once the run has stopped; a run that ends
/// by itself before that is recorded as usual (`runner::slurm::run_task`). Process-wide; call it
/// once, after [`install`].
///
/// # Errors
/// [`SignalError`] when signal-hook cannot register the handler.
pub fn install_pre_timeout() -> Result<Arc<AtomicBool>, SignalError> {
    let requeue = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&requeue)).map_err(SignalError)?;
    Ok(requeue)
}

/// Catches SIGXFSZ with a handler that does nothing, so that a write beyond the file-size limit
/// (`RLIMIT_FSIZE`, `ulimit -f`) fails with `EFBIG` ("File too large") and the caller reports it,
/// instead of the signal's default action killing the process. A caught signal (unlike an ignored
/// one) is reset to its default action by `execve`, so the runs see SIGXFSZ as usual. Process-wide;
/// call it once at start-up.
///
/// # Errors
/// [`SignalError`] when signal-hook cannot register the handler.
pub fn catch_file_size_limit() -> Result<(), SignalError> {
    let seen = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(SIGXFSZ, seen).map_err(SignalError)?;
    Ok(())
}

/// The name of a signal this module handles (`"SIGTERM"`, `"SIGINT"`, `"SIGHUP"`, `"SIGQUIT"`),
/// `"signal N"` for others.
pub fn name(signal: i32) -> String {
    match signal {
        SIGTERM => "SIGTERM".to_owned(),
        SIGINT => "SIGINT".to_owned(),
        SIGHUP => "SIGHUP".to_owned(),
        SIGQUIT => "SIGQUIT".to_owned(),
        other => format!("signal {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_handled_signals() {
        assert_eq!(name(SIGTERM), "SIGTERM");
        assert_eq!(name(SIGINT), "SIGINT");
        assert_eq!(name(SIGHUP), "SIGHUP");
        assert_eq!(name(SIGQUIT), "SIGQUIT");
        assert_eq!(name(9), "signal 9");
    }

    #[test]
    fn the_same_signal_within_the_window_is_a_duplicate_and_later_a_repeat() {
        let request = AtomicU64::new(0);
        assert_eq!(classify(&request, SIGTERM, 5_000), Delivery::First);
        assert_eq!(classify(&request, SIGTERM, 5_999), Delivery::Duplicate);
        assert_eq!(classify(&request, SIGTERM, 6_000), Delivery::Repeat);
        assert_eq!(classify(&request, SIGINT, 5_001), Delivery::Repeat);
    }

    /// Two different signals sent back to back may be handled at the same moment on two threads
    /// (CI saw SIGTERM and SIGINT both taken as the first request, so the second never forced the
    /// exit): exactly one delivery claims the request and the other is a repeat, every time.
    #[test]
    fn of_two_signals_handled_at_once_exactly_one_is_first() {
        for _ in 0..2_000 {
            let request = std::sync::Arc::new(AtomicU64::new(0));
            let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
            let handle = |sig: i32| {
                let request = std::sync::Arc::clone(&request);
                let gate = std::sync::Arc::clone(&gate);
                std::thread::spawn(move || {
                    gate.wait();
                    classify(&request, sig, 42)
                })
            };
            let (term, int) = (handle(SIGTERM), handle(SIGINT));
            let mut seen = [term.join().unwrap(), int.join().unwrap()];
            seen.sort_by_key(|d| *d as u8);
            assert_eq!(seen, [Delivery::First, Delivery::Repeat]);
        }
    }

    #[test]
    fn a_raised_signal_sets_the_flag_and_records_its_number() {
        // Exit on a repeat, so that a Ctrl-C on the test process after this test still stops it.
        let signals = install(SecondSignal::Exit(130)).unwrap();
        assert_eq!(signals.received(), None);
        assert!(!signals.cancel_flag().load(Ordering::SeqCst));
        signal_hook::low_level::raise(SIGINT).unwrap();
        assert!(signals.cancel_flag().load(Ordering::SeqCst));
        assert_eq!(signals.received(), Some(SIGINT));
    }
}
