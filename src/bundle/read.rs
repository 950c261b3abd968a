//! Reading a result bundle (DESIGN 5).
//!
//! [`Bundle::open`] reads and checks `bundle.json` (refusing a newer major `bundle-format`); every other
//! file is read on demand. [`Bundle::runs`] streams `runs/<run-id>/run.json` one at a time in plan
//! order, so a caller that keeps only per-run summaries uses memory bounded by one run, not by the
//! bundle. Every error names the file it is about.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::format::{BUNDLE_FORMAT, BundleInfo, PlanFile, PlannedRunRecord, RunRecord, files};

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
        /// Newest major version this build reads ([`BUNDLE_FORMAT`]).
        supported: u32,
        /// This build's version.
        version: &'static str,
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
            | ReadError::NoFormat { path, .. } => path,
        }
    }
}

/// An open bundle folder: `bundle.json` has been read and its format checked.
#[derive(Debug, Clone)]
pub struct Bundle {
    dir: PathBuf,
    info: BundleInfo,
}

/// Reads a whole file, mapping "not found" to [`ReadError::Missing`].
fn read_bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    std::fs::read(path).map_err(|source| {
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
    })
}

/// Classifies a serde_json error for the message.
fn json_error(path: &Path, source: serde_json::Error) -> ReadError {
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

/// The format version keys a document may carry; every other key is skipped by the parser
/// without being built into values.
#[derive(serde::Deserialize)]
struct VersionProbe {
    #[serde(rename = "bundle-format")]
    bundle_format: Option<serde_json::Value>,
    format: Option<serde_json::Value>,
}

/// Reads only `version_key` (`bundle-format` or `format`) of a JSON document.
fn version_of(bytes: &[u8], version_key: &'static str) -> Result<Option<u64>, serde_json::Error> {
    let probe: VersionProbe = serde_json::from_slice(bytes)?;
    let value = if version_key == "bundle-format" {
        probe.bundle_format
    } else {
        probe.format
    };
    Ok(value.and_then(|v| v.as_u64()))
}

/// Parses a versioned JSON document: checks `version_key` against [`BUNDLE_FORMAT`] before
/// deserializing, so a newer format gives [`ReadError::NewerFormat`], not a shape error.
fn parse_versioned<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    version_key: &'static str,
) -> Result<T, ReadError> {
    let found = version_of(bytes, version_key)
        .map_err(|e| json_error(path, e))?
        .ok_or_else(|| ReadError::NoFormat {
            path: path.to_path_buf(),
            key: version_key,
        })?;
    if found > u64::from(BUNDLE_FORMAT) {
        return Err(ReadError::NewerFormat {
            path: path.to_path_buf(),
            found,
            supported: BUNDLE_FORMAT,
            version: env!("CARGO_PKG_VERSION"),
        });
    }
    serde_json::from_slice(bytes).map_err(|e| json_error(path, e))
}

impl Bundle {
    /// Opens the bundle folder `dir`: reads `bundle.json` and checks its `bundle-format`.
    ///
    /// # Errors
    /// [`ReadError::NotABundle`] when `dir` is not a folder, [`ReadError::Missing`] without
    /// bundle.json, [`ReadError::NewerFormat`] for a newer major format, [`ReadError::Json`] when
    /// bundle.json is truncated or malformed, [`ReadError::Io`] otherwise.
    pub fn open(dir: impl AsRef<Path>) -> Result<Bundle, ReadError> {
        let dir = dir.as_ref().to_path_buf();
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ReadError::NotABundle {
                    path: dir,
                    reason: "not a directory".into(),
                });
            }
            Err(e) => {
                return Err(ReadError::NotABundle {
                    path: dir,
                    reason: e.to_string(),
                });
            }
        }
        let path = dir.join(files::BUNDLE);
        let info = parse_versioned(&path, &read_bytes(&path)?, "bundle-format")?;
        Ok(Bundle { dir, info })
    }

    /// The bundle folder as given to [`Bundle::open`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The contents of bundle.json.
    pub fn info(&self) -> &BundleInfo {
        &self.info
    }

    /// Path of a file at the bundle's top level, e.g. `path(files::HOST)`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Reads plan.json (every planned run in execution order).
    ///
    /// # Errors
    /// Missing, unreadable, malformed or newer-format plan.json.
    pub fn plan(&self) -> Result<PlanFile, ReadError> {
        let path = self.path(files::PLAN);
        parse_versioned(&path, &read_bytes(&path)?, "format")
    }

    /// Reads a top-level JSON file as an untyped value.
    fn json_value(&self, name: &str) -> Result<serde_json::Value, ReadError> {
        let path = self.path(name);
        serde_json::from_slice(&read_bytes(&path)?).map_err(|e| json_error(&path, e))
    }

    /// Reads host.json (hostname, kernel, cpu-model, ...) as an untyped JSON value.
    ///
    /// # Errors
    /// Missing, unreadable or malformed host.json.
    pub fn host(&self) -> Result<serde_json::Value, ReadError> {
        self.json_value(files::HOST)
    }

    /// Reads provenance.json (repo, head, branch, dirty, drift, ...) as an untyped JSON value.
    ///
    /// # Errors
    /// Missing, unreadable or malformed provenance.json.
    pub fn provenance(&self) -> Result<serde_json::Value, ReadError> {
        self.json_value(files::PROVENANCE)
    }

    /// Reads revision.txt: the HEAD commit id, or the line saying why there is none; trimmed.
    ///
    /// # Errors
    /// Missing or unreadable revision.txt.
    pub fn revision(&self) -> Result<String, ReadError> {
        let path = self.path(files::REVISION);
        let bytes = read_bytes(&path)?;
        Ok(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// Reads manifest.toml: the manifest text as run.
    ///
    /// # Errors
    /// Missing or unreadable manifest.toml.
    pub fn manifest_text(&self) -> Result<String, ReadError> {
        let path = self.path(files::MANIFEST);
        let bytes = read_bytes(&path)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Folder of one run: `runs/<run-id>/`.
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.dir.join(files::RUNS).join(run_id)
    }

    /// Path of a run's saved stdout: `runs/<run-id>/<output>`.
    pub fn run_output_path(&self, run: &RunRecord) -> PathBuf {
        self.run_dir(&run.run_id).join(&run.output)
    }

    /// Path of a run's external memory samples: `runs/<run-id>/memory.jsonl` (may not exist).
    pub fn run_memory_path(&self, run: &RunRecord) -> PathBuf {
        self.run_dir(&run.run_id).join(files::MEMORY)
    }

    /// Path of a run's stderr: `runs/<run-id>/stderr.log`.
    pub fn run_stderr_path(&self, run: &RunRecord) -> PathBuf {
        self.run_dir(&run.run_id).join(files::STDERR)
    }

    /// Reads one run's `run.json`.
    ///
    /// # Errors
    /// [`ReadError::RunMissing`] when the run did not finish, otherwise as [`Bundle::plan`].
    pub fn read_run(&self, planned: &PlannedRunRecord) -> Result<RunRecord, ReadError> {
        let path = self.run_dir(&planned.run_id).join(files::RUN);
        let bytes = match read_bytes(&path) {
            Err(ReadError::Missing { path }) => {
                return Err(ReadError::RunMissing {
                    run_id: planned.run_id.clone(),
                    path,
                });
            }
            other => other?,
        };
        parse_versioned(&path, &bytes, "format")
    }

    /// Reads plan.json and returns an iterator over the planned runs' records, one `run.json` read per
    /// step, in plan order. A run that never finished yields [`ReadError::RunMissing`]; callers that
    /// report partial bundles skip those and stop on other errors.
    ///
    /// # Errors
    /// As [`Bundle::plan`].
    pub fn runs(&self) -> Result<Runs<'_>, ReadError> {
        let plan = self.plan()?;
        Ok(Runs {
            bundle: self,
            planned: plan.runs.into_iter(),
        })
    }
}

/// Iterator over a bundle's run records in plan order (see [`Bundle::runs`]).
#[derive(Debug)]
pub struct Runs<'a> {
    bundle: &'a Bundle,
    planned: std::vec::IntoIter<PlannedRunRecord>,
}

impl Runs<'_> {
    /// Number of planned runs not yet yielded.
    pub fn remaining(&self) -> usize {
        self.planned.len()
    }
}

impl Iterator for Runs<'_> {
    type Item = Result<RunRecord, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let planned = self.planned.next()?;
        Some(self.bundle.read_run(&planned))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.planned.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_format_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bundle.json"), r#"{"bundle-format": 99}"#).unwrap();
        let err = Bundle::open(dir.path()).unwrap_err();
        assert!(matches!(err, ReadError::NewerFormat { found: 99, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("bundle.json") && msg.contains("format 99"), "{msg}");
    }

    #[test]
    fn truncated_bundle_json_says_truncated() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bundle.json"), r#"{"bundle-format": 1, "hwr"#).unwrap();
        let msg = Bundle::open(dir.path()).unwrap_err().to_string();
        assert!(msg.contains("bundle.json: truncated JSON"), "{msg}");
    }

    #[test]
    fn missing_folder_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = Bundle::open(dir.path().join("nope")).unwrap_err();
        assert!(matches!(err, ReadError::NotABundle { .. }));
        let err = Bundle::open(dir.path()).unwrap_err();
        assert!(matches!(err, ReadError::Missing { .. }));
        assert!(err.path().ends_with("bundle.json"));
    }
}
