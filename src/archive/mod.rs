//! Archived bundles (issue 5): listing, verifying, rerunning and resuming result bundles that were
//! checked into a repository and read again months later.
//!
//! - [`list`]: one line (or JSON object) per bundle under a results folder, with the bundle's
//!   effective status (`abandoned` when bundle.json says `running` but no runner is alive).
//! - [`verify`]: every recorded sha256, the manifest bytes, and whether `working-tree.patch`
//!   still applies to `revision.txt` (`git apply --check` on a temporary index).
//! - [`rerun`]: the archived manifest bytes into a new bundle naming the old one as `parent`,
//!   optionally inside a temporary git worktree rebuilt at the recorded revision.
//! - [`resume`]: the unfinished runs of an interrupted or abandoned bundle, into the same bundle.
//!
//! Bundles are read with the format types of [`crate::bundle::format`]; every document's format
//! major version is checked ([`read`]).

pub mod list;
pub mod liveness;
pub mod read;
pub mod rerun;
pub mod resume;
pub mod verify;

use std::path::PathBuf;

use crate::exit_codes;
use crate::runner::session::SessionError;

/// Why an archive command could not do its work (as opposed to problems it found and reports,
/// such as [`verify::Problem`]s).
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The path given is not a bundle folder or a results folder (exit 2).
    #[error("{path}: {message}")]
    BadPath {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A bundle file could not be read or parsed, or has a newer format (exit 2).
    #[error("{path}: {message}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why (I/O error, JSON error, newer format).
        message: String,
    },
    /// The command refuses to act on this bundle as it is (exit 2): complete bundle for resume,
    /// archived manifest modified, the plan expands differently here.
    #[error("{0}")]
    Refused(String),
    /// The environment does not allow the command (exit 3): a live runner holds the bundle, the
    /// working tree differs from the recorded provenance, the repository lacks the recorded
    /// revision, the patch does not apply, git failed.
    #[error("{0}")]
    Environment(String),
    /// The run session itself failed (its own exit code).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Writing into the bundle failed (exit 1; the bundle is marked `failed` when possible).
    #[error("writing bundle {bundle}: {source}")]
    Write {
        /// The bundle folder.
        bundle: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl ArchiveError {
    /// The documented exit code (DESIGN 6) for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ArchiveError::BadPath { .. } | ArchiveError::Unreadable { .. } | ArchiveError::Refused(_) => {
                exit_codes::USAGE
            }
            ArchiveError::Environment(_) => exit_codes::ENVIRONMENT,
            ArchiveError::Session(e) => e.exit_code(),
            ArchiveError::Write { .. } => exit_codes::RUN_FAILED,
        }
    }
}
