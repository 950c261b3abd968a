//! Archived bundles: listing, verifying, rerunning and resuming result bundles that were
//! checked into a repository and read again months later.
//!
//! - [`list`]: one line (or JSON object) per bundle under a results folder, with the bundle's
//!   effective status (`abandoned` when bundle.json says `running` but no process holds the
//!   bundle's lock, [`crate::bundle::lock`]).
//! - [`verify`]: every recorded sha256, the manifest bytes, and whether `working-tree.patch`
//!   still applies to `revision.txt` (`git apply --check` on a temporary index).
//! - [`rerun`]: the archived manifest bytes into a new bundle naming the old one as `parent`,
//!   optionally inside a temporary git worktree rebuilt at the recorded revision.
//! - [`locate`]: the bundle a shorter name stands for (an experiment folder, `latest`, `latest~1`).
//! - [`bisect`]: the first commit between a good and a bad one at which the selected cells retain
//!   memory against their control, each probed commit a bundle.
//! - [`resume`]: the unfinished runs of an interrupted, failed or abandoned bundle, into the same bundle.
//!
//! Bundles are read with [`crate::bundle::read::Bundle`] (opened by [`open`]); every document's
//! format major version is checked there.

pub mod bisect;
pub mod engine;
pub mod engines;
pub mod list;
pub mod locate;
pub mod ray;
pub mod rerun;
pub mod resume;
pub mod slurm;
pub mod submodules;
pub mod verify;

use std::path::{Path, PathBuf};

use crate::bundle::files;
use crate::bundle::read::{Bundle, ReadError};
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
    /// A bundle file could not be read or parsed, or has a newer format (exit 2); the message
    /// names the file.
    #[error(transparent)]
    Read(#[from] ReadError),
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
    /// Writing into the bundle failed (exit 3; the message names the file).
    #[error("writing bundle {bundle}: {source}")]
    Write {
        /// The bundle folder.
        bundle: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Applies to a bundle's archived `manifest` the plan selection its `run` was given (bundle.json
/// `overrides`: `--where`, `--repetitions`, [`crate::plan::select::apply`]), so that it expands
/// to the plan the bundle ran (the executor is [`crate::runner::backend::Backend::apply_recorded`]'s).
/// Returns the recorded overrides (`--fail-fast` among them), `None` when there are none.
///
/// # Errors
/// [`ArchiveError::Refused`] when the recorded selection does not apply to the manifest (a
/// bundle edited by hand).
pub fn apply_recorded(
    info: &crate::bundle::BundleInfo,
    manifest: &mut crate::manifest::Manifest,
) -> Result<Option<crate::bundle::Overrides>, ArchiveError> {
    let Some(overrides) = &info.overrides else {
        return Ok(None);
    };
    let refused = |e: String| {
        ArchiveError::Refused(format!(
            "bundle.json overrides ({}) do not apply to its manifest: {e}",
            overrides.to_args().join(" ")
        ))
    };
    let selection = overrides.selection().map_err(refused)?;
    crate::plan::select::apply(manifest, &selection).map_err(|e| refused(e.to_string()))?;
    Ok(Some(overrides.clone()))
}

impl ArchiveError {
    /// The documented exit code (DESIGN 6) for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ArchiveError::BadPath { .. } | ArchiveError::Read(_) | ArchiveError::Refused(_) => {
                exit_codes::USAGE
            }
            ArchiveError::Environment(_) | ArchiveError::Write { .. } => exit_codes::ENVIRONMENT,
            ArchiveError::Session(e) => e.exit_code(),
        }
    }
}

/// Opens the bundle folder `dir` for an archive command, made absolute lexically against the
/// current directory (so [`Bundle::dir`] is absolute and [`Bundle::results_dir`] is its
/// grandparent).
///
/// # Errors
/// [`ArchiveError::BadPath`] naming `dir` when it is not a directory or holds no bundle.json;
/// [`ArchiveError::Read`] when bundle.json cannot be read, is malformed or has a newer format.
pub fn open(dir: &Path) -> Result<Bundle, ArchiveError> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let bad = |message: String| ArchiveError::BadPath {
        path: dir.to_path_buf(),
        message,
    };
    match Bundle::open(&abs) {
        Ok(bundle) => Ok(bundle),
        Err(ReadError::NotABundle { .. }) => Err(bad("no such bundle folder".into())),
        Err(ReadError::Missing { .. }) => Err(bad(format!("not a bundle folder (no {})", files::BUNDLE))),
        Err(e) => Err(e.into()),
    }
}
