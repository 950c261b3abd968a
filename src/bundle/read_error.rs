//! The errors of the bundle reader ([`super::read`]) and of the plan.json stream
//! ([`super::plan_stream`]): [`ReadError`], each naming its file, and the maps and name checks
//! that make them.

use std::path::{Path, PathBuf};

use super::contained::{UnsafeName, plain_name};
#[cfg(doc)]
use super::format::BUNDLE_FORMAT;
#[cfg(doc)]
use crate::provenance::{PROVENANCE_FORMAT, host::HOST_FORMAT};

/// Errors reading a bundle. Each variant carries the path of the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The bundle folder itself does not exist or is not a folder.
    #[error("{path}: not a bundle folder ({reason})")]
    NotABundle {
        /// The folder given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file that must exist is missing.
    #[error("{path}: missing (every bundle has this file; is this a bundle folder?)")]
    Missing {
        /// The missing file.
        path: PathBuf,
    },
    /// A planned run has no `run.json`: the runner was stopped before the run finished.
    #[error("{path}: missing: run {run_id} did not finish (interrupted bundle?)")]
    RunMissing {
        /// `run-id` from plan.json.
        run_id: String,
        /// The `run.json` that is not there.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid JSON or does not have the expected shape (a truncated file lands here).
    #[error("{path}: {what}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// `"truncated JSON"`, `"not JSON"` or `"unexpected content"`.
        what: &'static str,
        /// The parser's message, with line and column.
        source: serde_json::Error,
    },
    /// The file was written by a newer, incompatible major format version.
    #[error(
        "{path}: written in format {found}, newer than the format {supported} this hwr-exp {version} reads; use a newer hwr-exp"
    )]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Format version found in the file.
        found: u64,
        /// Newest major version this build reads for this file ([`BUNDLE_FORMAT`],
        /// [`PROVENANCE_FORMAT`] or [`HOST_FORMAT`]).
        supported: u32,
        /// This build's version.
        version: &'static str,
    },
    /// A name read from the file would lead outside the bundle or is not a file name (a `../`
    /// run-id, an `output` with `/`).
    #[error("{path}: {what}: {source}")]
    Unsafe {
        /// The file holding the name.
        path: PathBuf,
        /// Where in the file (`runs[3].run-id`, `output`, `sha256` key).
        what: String,
        /// What is wrong with the name.
        source: UnsafeName,
    },
    /// The file contradicts plan.json: a run.json that is not the run plan.json plans in its
    /// folder (another run's, or edited), or a plan.json whose runs are out of order or repeated.
    #[error("{path}: {what}")]
    NotAsPlanned {
        /// The file.
        path: PathBuf,
        /// What disagrees (`run-id is "0700-b-r234", plan.json plans "0699-a-r234" here`).
        what: String,
    },
    /// The file has no format version key.
    #[error("{path}: no `{key}` format version key")]
    NoFormat {
        /// The file.
        path: PathBuf,
        /// The key looked for (`bundle-format` or `format`).
        key: &'static str,
    },
}

impl ReadError {
    /// The file (or folder) the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::NotABundle { path, .. }
            | ReadError::Missing { path }
            | ReadError::RunMissing { path, .. }
            | ReadError::Io { path, .. }
            | ReadError::Json { path, .. }
            | ReadError::NewerFormat { path, .. }
            | ReadError::Unsafe { path, .. }
            | ReadError::NotAsPlanned { path, .. }
            | ReadError::NoFormat { path, .. } => path,
        }
    }

    /// The message without the leading `<path>: ` (for callers that show the path separately,
    /// such as `hwr-exp verify`'s problem list).
    pub fn reason(&self) -> String {
        let text = self.to_string();
        let prefix = format!("{}: ", self.path().display());
        match text.strip_prefix(&prefix) {
            Some(rest) => rest.to_string(),
            None => text,
        }
    }
}

/// Maps an open or read error of `path`: "not found" is [`ReadError::Missing`].
pub(super) fn io_error(path: &Path, source: std::io::Error) -> ReadError {
    if source.kind() == std::io::ErrorKind::NotFound {
        ReadError::Missing {
            path: path.to_path_buf(),
        }
    } else {
        ReadError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Classifies a serde_json error for the message.
pub(super) fn json_error(path: &Path, source: serde_json::Error) -> ReadError {
    let what = match source.classify() {
        serde_json::error::Category::Eof => "truncated JSON",
        serde_json::error::Category::Syntax => "not JSON",
        serde_json::error::Category::Data | serde_json::error::Category::Io => "unexpected content",
    };
    ReadError::Json {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// Checks a name read from the file `path` with [`super::contained::plain_name`].
pub(super) fn checked_name(path: &Path, name: &str, what: impl FnOnce() -> String) -> Result<(), ReadError> {
    checked_name_in(|| path.to_path_buf(), name, what)
}

/// [`checked_name`] with the file's path made only for the error (a report checks 300,000
/// names of 100,000 runs).
pub(super) fn checked_name_in(
    path: impl FnOnce() -> PathBuf,
    name: &str,
    what: impl FnOnce() -> String,
) -> Result<(), ReadError> {
    plain_name(name).map(|_| ()).map_err(|source| ReadError::Unsafe {
        path: path(),
        what: what(),
        source,
    })
}
