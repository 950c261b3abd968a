//! Process exit codes (DESIGN 6).

/// Every run exited 0 with a valid output.
pub const SUCCESS: i32 = 0;
/// Some run failed, timed out or gave invalid output; the bundle is complete.
pub const RUN_FAILED: i32 = 1;
/// Usage or manifest error; nothing was written.
pub const USAGE: i32 = 2;
/// Environment or preflight error: nothing was written, or the bundle could not be written (a full
/// disk, a limit; it is then marked `failed` or shows as abandoned, and `resume` finishes it).
pub const ENVIRONMENT: i32 = 3;
/// Interrupted by SIGINT/SIGTERM; the bundle is kept with status `interrupted`.
pub const INTERRUPTED: i32 = 130;

/// An error that ends the process, with the documented exit code (above) it ends it with. Each
/// library error names its own code (`SessionError::exit_code`, `ArchiveError::exit_code`,
/// `ProbeError::exit_code`); `main` wraps it here once, prints it once and exits with [`Failure::code`].
#[derive(Debug)]
pub struct Failure {
    code: i32,
    error: anyhow::Error,
}

impl Failure {
    /// `error`, ending the process with `code`.
    pub fn new(code: i32, error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code,
            error: error.into(),
        }
    }

    /// A usage or manifest error (exit [`USAGE`]).
    pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure::new(USAGE, error)
    }

    /// An environment or preflight error (exit [`ENVIRONMENT`]).
    pub fn environment(error: impl Into<anyhow::Error>) -> Failure {
        Failure::new(ENVIRONMENT, error)
    }

    /// The exit code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The error, with its chain of causes.
    pub fn error(&self) -> &anyhow::Error {
        &self.error
    }
}

/// The process exit status for an exit code above: codes outside 0..=255 (none are documented)
/// become [`RUN_FAILED`].
pub fn status(code: i32) -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(RUN_FAILED as u8))
}
