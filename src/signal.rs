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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
    /// Exit the process at once with this code (`run`, `resume`: a second Ctrl-C does not wait for
    /// the run in flight; the runs' parent-death signal then stops them).
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

/// Installs handlers for [`STOP_SIGNALS`] that set the returned flag and record the signal's
/// number; `second` says what a signal does once the flag is set. Process-wide: call it once per
/// process, before the work it guards.
///
/// # Errors
/// [`SignalError`] when signal-hook cannot register a handler.
pub fn install(second: SecondSignal) -> Result<Signals, SignalError> {
    let signals = Signals {
        flag: Arc::new(AtomicBool::new(false)),
        last: Arc::new(AtomicUsize::new(0)),
    };
    for sig in STOP_SIGNALS {
        // Order matters: the conditional exit checks the flag before this signal sets it, so only
        // a signal arriving while the flag is already set exits.
        if let SecondSignal::Exit(code) = second {
            let flag = Arc::clone(&signals.flag);
            let exit = move || {
                if flag.load(Ordering::SeqCst) {
                    if TERMINAL_LINE.load(Ordering::SeqCst) {
                        // A progress bar is drawn on stderr: erase its line, so that it does not
                        // stay on the terminal with the shell's prompt after it.
                        let erase = b"\r\x1b[2K";
                        // SAFETY: write(2) on fd 2 with a valid buffer is async-signal-safe.
                        let _ = unsafe { libc::write(2, erase.as_ptr().cast(), erase.len()) };
                    }
                    signal_hook::low_level::exit(code);
                }
            };
            // SAFETY: the action only loads atomics, calls write(2) and _exit(2), all
            // async-signal-safe; it allocates and locks nothing.
            unsafe { signal_hook::low_level::register(sig, exit) }.map_err(SignalError)?;
        }
        signal_hook::flag::register(sig, Arc::clone(&signals.flag)).map_err(SignalError)?;
        let number = usize::try_from(sig).expect("signal numbers are positive");
        signal_hook::flag::register_usize(sig, Arc::clone(&signals.last), number).map_err(SignalError)?;
    }
    Ok(signals)
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
