//! Reading a bundle's files with their format versions checked.
//!
//! Every JSON document carries its format major version (`bundle-format` in bundle.json, `format`
//! elsewhere); a newer major version than this build writes is refused with a message naming the
//! file. The reader never writes.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::ArchiveError;
use crate::bundle::{BUNDLE_FORMAT, BundleInfo, RunRecord, files};
use crate::provenance::ProvenanceDoc;
use crate::provenance::host::HostFacts;

/// Reads a JSON document, checking that its `version_key` (a top-level integer) is at most
/// `newest`.
///
/// # Errors
/// [`ArchiveError::Unreadable`] naming `path` when the file cannot be read, is not JSON of the
/// expected shape, lacks the version key or has a newer major version.
pub fn read_versioned<T: DeserializeOwned>(
    path: &Path,
    version_key: &str,
    newest: u32,
) -> Result<T, ArchiveError> {
    let unreadable = |message: String| ArchiveError::Unreadable {
        path: path.to_path_buf(),
        message,
    };
    let bytes = fs::read(path).map_err(|e| unreadable(format!("cannot read: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| unreadable(format!("not valid JSON: {e}")))?;
    match value.get(version_key).and_then(serde_json::Value::as_u64) {
        Some(v) if v <= u64::from(newest) => {}
        Some(v) => {
            return Err(unreadable(format!(
                "`{version_key}` is {v}, newer than the {newest} this hwr-exp {} reads; use a newer hwr-exp",
                env!("CARGO_PKG_VERSION")
            )));
        }
        None => return Err(unreadable(format!("no integer `{version_key}` key"))),
    }
    serde_json::from_value(value).map_err(|e| unreadable(format!("unexpected content: {e}")))
}

/// A bundle folder with its bundle.json read.
#[derive(Debug, Clone)]
pub struct ArchivedBundle {
    /// The bundle folder, absolute (made absolute lexically against the current directory).
    pub dir: PathBuf,
    /// bundle.json.
    pub info: BundleInfo,
}

/// One entry of plan.json `runs`, reduced to what archive commands need.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PlanEntry {
    /// Run id (the run's folder name under `runs/`).
    pub run_id: String,
    /// 0-based plan index.
    pub index: usize,
    /// Output file name inside the run folder.
    pub output: String,
}

#[derive(Deserialize)]
struct PlanIds {
    runs: Vec<PlanEntry>,
}

/// Opens a bundle folder: it must be a directory holding bundle.json.
///
/// # Errors
/// [`ArchiveError::BadPath`] when `dir` is not a directory or holds no bundle.json;
/// [`ArchiveError::Unreadable`] when bundle.json cannot be read or is newer.
pub fn open(dir: &Path) -> Result<ArchivedBundle, ArchiveError> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !abs.is_dir() {
        return Err(ArchiveError::BadPath {
            path: dir.to_path_buf(),
            message: "no such bundle folder".into(),
        });
    }
    let info_path = abs.join(files::BUNDLE);
    if !info_path.exists() {
        return Err(ArchiveError::BadPath {
            path: dir.to_path_buf(),
            message: format!("not a bundle folder (no {})", files::BUNDLE),
        });
    }
    let info = read_versioned(&info_path, "bundle-format", BUNDLE_FORMAT)?;
    Ok(ArchivedBundle { dir: abs, info })
}

impl ArchivedBundle {
    /// Path of a file in the bundle folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The runs of plan.json in plan order.
    ///
    /// # Errors
    /// [`ArchiveError::Unreadable`] naming plan.json.
    pub fn plan(&self) -> Result<Vec<PlanEntry>, ArchiveError> {
        read_versioned::<PlanIds>(&self.path(files::PLAN), "format", BUNDLE_FORMAT).map(|p| p.runs)
    }

    /// provenance.json.
    ///
    /// # Errors
    /// [`ArchiveError::Unreadable`] naming provenance.json.
    pub fn provenance(&self) -> Result<ProvenanceDoc, ArchiveError> {
        read_versioned(
            &self.path(files::PROVENANCE),
            "format",
            crate::provenance::PROVENANCE_FORMAT,
        )
    }

    /// host.json.
    ///
    /// # Errors
    /// [`ArchiveError::Unreadable`] naming host.json.
    pub fn host(&self) -> Result<HostFacts, ArchiveError> {
        read_versioned(
            &self.path(files::HOST),
            "format",
            crate::provenance::host::HOST_FORMAT,
        )
    }

    /// The archived manifest text (manifest.toml).
    ///
    /// # Errors
    /// [`ArchiveError::Unreadable`] naming manifest.toml when unreadable or not UTF-8.
    pub fn manifest_source(&self) -> Result<String, ArchiveError> {
        let path = self.path(files::MANIFEST);
        fs::read_to_string(&path).map_err(|e| ArchiveError::Unreadable {
            path,
            message: format!("cannot read: {e}"),
        })
    }

    /// The folder of one run, `runs/<run-id>`.
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.dir.join(files::RUNS).join(run_id)
    }

    /// The run.json of a run, `None` when the run has none (not finished).
    ///
    /// # Errors
    /// [`ArchiveError::Unreadable`] naming run.json when it exists but cannot be read or is newer.
    pub fn run_record(&self, run_id: &str) -> Result<Option<RunRecord>, ArchiveError> {
        let path = self.run_dir(run_id).join(files::RUN);
        if !path.exists() {
            return Ok(None);
        }
        read_versioned(&path, "format", BUNDLE_FORMAT).map(Some)
    }

    /// The recorded HEAD commit (40 hex digits from revision.txt), `None` when revision.txt says
    /// why there is none or is missing.
    pub fn revision(&self) -> Option<String> {
        let text = fs::read_to_string(self.path(files::REVISION)).ok()?;
        let line = text.lines().next()?.trim();
        (line.len() == 40 && line.bytes().all(|b| b.is_ascii_hexdigit())).then(|| line.to_string())
    }

    /// The folder that holds `<experiment>/<bundle>` folders: the bundle's grandparent.
    pub fn results_dir(&self) -> PathBuf {
        self.dir
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.dir.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        #[derive(Deserialize, Debug)]
        struct Doc {
            #[allow(dead_code)]
            format: u32,
        }
        std::fs::write(&p, r#"{"format": 1}"#).unwrap();
        assert!(read_versioned::<Doc>(&p, "format", 1).is_ok());
        std::fs::write(&p, r#"{"format": 2}"#).unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err().to_string();
        assert!(
            e.starts_with(&p.display().to_string()) && e.contains("newer"),
            "{e}"
        );
        std::fs::write(&p, r#"{"other": 1}"#).unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err().to_string();
        assert!(e.contains("no integer `format`"), "{e}");
        std::fs::write(&p, "{").unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no bundle.json"), "{e}");
    }
}
