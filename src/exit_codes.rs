//! Process exit codes (DESIGN 6).

/// Every run exited 0 with a valid output.
pub const SUCCESS: i32 = 0;
/// Some run failed, timed out or gave invalid output; the bundle is complete.
pub const RUN_FAILED: i32 = 1;
/// Usage or manifest error; nothing was written.
pub const USAGE: i32 = 2;
/// Environment or preflight error; nothing was written.
pub const ENVIRONMENT: i32 = 3;
/// Interrupted by SIGINT/SIGTERM; the bundle is kept with status `interrupted`.
pub const INTERRUPTED: i32 = 130;
