//! The result bundle: versioned on-disk format ([`mod@format`]), the only writer of bundle files
//! ([`mod@write`] and [`run_folder`], over [`atomic`]: one atomic write, one file mode, one
//! timestamp format), the reader ([`read`]) and ownership by an OS lock with the effective status
//! derived from it ([`lock`]) (DESIGN 5).

pub mod artifacts;
pub mod atomic;
pub mod checksums;
pub mod contained;
pub mod format;
pub mod live;
pub mod lock;
pub mod output;
pub mod output_summary;
pub mod plan_file;
mod plan_stream;
pub mod read;
mod read_error;
pub mod reason;
pub mod retention;
pub mod run_folder;
pub mod summary;
mod surrogates;
pub mod walk;
pub mod write;

pub use format::*;
pub use write::BundleWriter;
