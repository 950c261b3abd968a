//! Reading a result bundle (DESIGN 5).
//!
//! [`Bundle::open`] reads and checks `bundle.json` (refusing a newer major `bundle-format`); every other
//! file is read on demand. [`Bundle::runs`] streams `runs/<run-id>/run.json` one at a time in plan
//! order, so a caller that keeps only per-run summaries uses memory bounded by one run, not by the
//! bundle. Every error names the file it is about.
//!
//! This is the one bundle reader: `hwr-exp report`/`compare` ([`crate::report`]) and the archive
//! commands ([`crate::archive`]: list, verify, rerun, resume) both read through [`Bundle`]. Every JSON
//! document's format major version (`bundle-format` in bundle.json, `format` elsewhere) is checked
//! before its content is parsed ([`read_versioned`]). The reader never writes.
//!
//! The reader stays inside the bundle ([`super::contained`]): every file is opened without following
//! symbolic links and only regular files are read, JSON documents streamed and text files bounded
//! ([`TEXT_LIMIT`]); every name taken from a bundle file (`run-id` and `output` of plan.json and
//! run.json, the keys of run.json `sha256`) must be a plain file name, else the document is refused
//! with [`ReadError::Unsafe`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::contained::{
    enter, open_folder, open_in, open_regular, open_regular_at, read_bounded, read_small_beneath,
};

use super::format::{BUNDLE_FORMAT, BundleInfo, PlanFile, PlanHeader, RunRecord, files};
use super::plan_stream;
pub use super::read_error::ReadError;
use super::read_error::{checked_name, checked_name_in, io_error, json_error};
use crate::manifest::Value;
use crate::plan::PlannedRun;
use crate::provenance::host::{HOST_FORMAT, HostFacts};
use crate::provenance::{PROVENANCE_FORMAT, ProvenanceDoc};

#[derive(Debug, Clone)]
pub struct Bundle {
    dir: PathBuf,
    info: BundleInfo,
    /// `runs/`, opened without following a link the first time a run is read (a report opens
    /// 100,000 runs through it: one `openat` each instead of a walk from the bundle folder).
    runs: std::sync::Arc<std::sync::OnceLock<OwnedFd>>,
}

/// The names in a bundle's `runs/` at one moment ([`Bundle::run_folders_listed`]), kept as
/// 64-bit hashes (8 bytes a folder).
#[derive(Debug)]
pub struct ListedRunFolders {
    hashes: std::collections::HashSet<u64>,
}

impl ListedRunFolders {
    fn hash(name: &[u8]) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(name)
    }

    /// Whether `runs/<run_id>` may have been there when listed: `false` only when it was not
    /// (two names of the same hash both answer `true`).
    pub fn may_hold(&self, run_id: &str) -> bool {
        self.hashes.contains(&Self::hash(run_id.as_bytes()))
    }
}

/// One run's folder, `runs/<run-id>/` ([`Bundle::run_folder`]): its files are read beneath the
/// bundle's `runs/` folder, opened once per [`Bundle`], following no link.
#[derive(Debug)]
pub struct RunFolder<'b> {
    runs: &'b OwnedFd,
    bundle: &'b Bundle,
    run_id: &'b str,
}

impl RunFolder<'_> {
    /// The folder's path (for messages).
    pub fn dir(&self) -> PathBuf {
        self.bundle.run_dir(self.run_id)
    }

    /// Opens the regular file `name` of the folder without following links
    /// ([`super::contained::open_regular_at`] in the folder entered with
    /// [`super::contained::enter`]).
    ///
    /// # Errors
    /// [`ReadError::Unsafe`] when `name` is not a plain file name, [`ReadError::Missing`] when it
    /// or the folder is absent, [`ReadError::Io`] when either is a symbolic link or of the wrong
    /// kind, or cannot be opened.
    pub fn open(&self, name: &str) -> Result<File, ReadError> {
        let path = || self.dir().join(name);
        checked_name(&path(), name, || "file name".into())?;
        enter(self.runs, Path::new(self.run_id))
            .and_then(|folder| open_regular_at(&folder, Path::new(name)))
            .map(|(f, _)| f)
            .map_err(|e| io_error(&path(), e))
    }

    /// Reads the regular file `name` of the folder whole when it is shorter than `limit` bytes,
    /// the quick way ([`super::contained::read_small_beneath`]); `Ok(None)` when that cannot
    /// answer, and [`RunFolder::open`] then says what is wrong.
    ///
    /// # Errors
    /// [`ReadError::Unsafe`] when `name` is not a plain file name, [`ReadError::Io`] when the
    /// opened file cannot be read.
    pub fn read_small(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
        checked_name_in(|| self.dir().join(name), name, || "file name".into())?;
        read_small_beneath(self.runs, &Path::new(self.run_id).join(name), limit)
            .map_err(|e| io_error(&self.dir().join(name), e))
    }

    /// Reads and checks the folder's run.json: its `run-id`, `output` and the keys of its
    /// `sha256` must be plain file names.
    ///
    /// # Errors
    /// As [`read_versioned`]; [`ReadError::Unsafe`] for a name that is not a plain file name.
    pub fn record(&self) -> Result<RunRecord, ReadError> {
        let path = || self.dir().join(files::RUN);
        let record: RunRecord = match self.read_small(files::RUN, WHOLE_LIMIT)? {
            Some(bytes) => parse_run_record(path, &bytes)?,
            None => parse_versioned(&path(), self.open(files::RUN)?, "format", BUNDLE_FORMAT)?,
        };
        checked_name_in(path, &record.run_id, || "run-id".into())?;
        checked_name_in(path, &record.output, || "output".into())?;
        for name in record.sha256.keys() {
            checked_name_in(path, name, || "a key of sha256".into())?;
        }
        Ok(record)
    }
}

/// Whether `record` (a run.json) is the run `planned` (its plan.json entry): the same run-id,
/// index, repetition and cell; else what differs. A run.json copied from another run's folder or
/// edited would otherwise be reported as that other run, or invent a cell the plan has not.
fn as_planned(record: &RunRecord, planned: &PlannedRun) -> Result<(), String> {
    if record.run_id != planned.run_id {
        return Err(format!(
            "run-id is {}, plan.json plans {} here (another run's run.json?)",
            json_text(&record.run_id),
            json_text(&planned.run_id)
        ));
    }
    if record.index != planned.index || record.repetition != planned.repetition {
        return Err(format!(
            "index {} and repetition {}, plan.json's {} and {}",
            record.index, record.repetition, planned.index, planned.repetition
        ));
    }
    // The same keys and values, in whatever order (run.json's cell is sorted by key).
    let same_cell = record.cell.len() == planned.cell.len()
        && planned.cell.iter().all(|(k, v)| record.cell.get(k) == Some(v));
    if !same_cell {
        let planned_cell: BTreeMap<&str, &Value> =
            planned.cell.iter().map(|(k, v)| (k.as_str(), v)).collect();
        return Err(format!(
            "cell is {}, plan.json's {}",
            json_text(&record.cell),
            json_text(&planned_cell)
        ));
    }
    Ok(())
}

/// A value's JSON text, for messages.
fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| e.to_string())
}

/// Most bytes read from a bundle text file (revision.txt, manifest.toml), 64 MiB.
pub const TEXT_LIMIT: u64 = 64 << 20;

/// The format version keys a document may carry; every other key is skipped by the parser
/// without being built into values.
#[derive(serde::Deserialize)]
struct VersionProbe {
    #[serde(rename = "bundle-format")]
    bundle_format: Option<serde_json::Value>,
    format: Option<serde_json::Value>,
}

/// Reads only `version_key` (`bundle-format` or `format`) of a JSON document.
fn version_of(
    reader: impl std::io::Read,
    version_key: &'static str,
) -> Result<Option<u64>, serde_json::Error> {
    Ok(serde_json::from_reader::<_, VersionProbe>(reader)?.get(version_key))
}

/// [`version_of`] a document held in memory.
fn version_of_slice(bytes: &[u8], version_key: &'static str) -> Result<Option<u64>, serde_json::Error> {
    Ok(serde_json::from_slice::<VersionProbe>(bytes)?.get(version_key))
}

impl VersionProbe {
    /// The integer value of `version_key` (`bundle-format`, else `format`).
    fn get(self, version_key: &str) -> Option<u64> {
        let value = if version_key == "bundle-format" {
            self.bundle_format
        } else {
            self.format
        };
        value.and_then(|v| v.as_u64())
    }
}

/// Parses the versioned JSON document `file` (at `path`), streamed: checks the integer
/// `version_key` (`bundle-format` or `format`) against `newest` in a first pass, so a newer format
/// gives [`ReadError::NewerFormat`], not a shape error, then deserializes it in a second pass.
fn parse_versioned<T: DeserializeOwned>(
    path: &Path,
    file: File,
    version_key: &'static str,
    newest: u32,
) -> Result<T, ReadError> {
    let check = |found| check_version(path, version_key, newest, found);
    // A small document (every run.json) is read whole and parsed from memory, several times
    // faster than through a reader; a large one (plan.json of a big bundle) is streamed twice.
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    if len < WHOLE_LIMIT {
        let mut bytes = Vec::with_capacity(len as usize + 1);
        let mut file = file;
        (&mut file)
            .take(WHOLE_LIMIT)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, e))?;
        if (bytes.len() as u64) < WHOLE_LIMIT {
            return parse_versioned_bytes(|| path.to_path_buf(), &bytes, version_key, newest);
        }
        file.rewind().map_err(|e| io_error(path, e))?;
        return parse_versioned_streamed(path, file, version_key, check);
    }
    parse_versioned_streamed(path, file, version_key, check)
}

/// [`parse_versioned`] of a document read whole.
fn parse_versioned_bytes<T: DeserializeOwned>(
    path: impl Fn() -> PathBuf,
    bytes: &[u8],
    version_key: &'static str,
    newest: u32,
) -> Result<T, ReadError> {
    let found = version_of_slice(bytes, version_key).map_err(|e| json_error(&path(), e))?;
    if !matches!(found, Some(v) if v <= u64::from(newest)) {
        check_version(&path(), version_key, newest, found)?;
    }
    serde_json::from_slice(bytes).map_err(|e| json_error(&path(), e))
}

/// A run.json read whole, parsed once (the hot path of a report, one per run): as
/// [`parse_versioned_bytes`] with `format` and [`BUNDLE_FORMAT`], whose two passes it makes only
/// when the one fails, so the same documents give the same errors: a newer `format` is
/// [`ReadError::NewerFormat`] whether or not the rest has the shape this version reads.
fn parse_run_record(path: impl Fn() -> PathBuf, bytes: &[u8]) -> Result<RunRecord, ReadError> {
    match serde_json::from_slice::<RunRecord>(bytes) {
        Ok(record) if record.format <= BUNDLE_FORMAT => Ok(record),
        Ok(record) => {
            check_version(&path(), "format", BUNDLE_FORMAT, Some(record.format.into())).map(|()| record)
        }
        Err(_) => parse_versioned_bytes(path, bytes, "format", BUNDLE_FORMAT),
    }
}

/// The version `found` under `version_key` must be there and at most `newest`.
fn check_version(
    path: &Path,
    version_key: &'static str,
    newest: u32,
    found: Option<u64>,
) -> Result<(), ReadError> {
    let found = found.ok_or_else(|| ReadError::NoFormat {
        path: path.to_path_buf(),
        key: version_key,
    })?;
    if found > u64::from(newest) {
        return Err(ReadError::NewerFormat {
            path: path.to_path_buf(),
            found,
            supported: newest,
            version: env!("CARGO_PKG_VERSION"),
        });
    }
    Ok(())
}

/// Documents shorter than this are read whole by [`parse_versioned`], bytes.
const WHOLE_LIMIT: u64 = 1 << 20;

/// [`parse_versioned`] of a large document: the version probe and the parse each stream it.
fn parse_versioned_streamed<T: DeserializeOwned>(
    path: &Path,
    file: File,
    version_key: &'static str,
    check: impl FnOnce(Option<u64>) -> Result<(), ReadError>,
) -> Result<T, ReadError> {
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    check(version_of(&mut reader, version_key).map_err(|e| json_error(path, e))?)?;
    reader.rewind().map_err(|e| io_error(path, e))?;
    serde_json::from_reader(reader).map_err(|e| json_error(path, e))
}

/// Reads the JSON document at `path` (any file of a bundle), checking its integer `version_key`
/// (`"bundle-format"` or `"format"`; any other key is treated as absent) against `newest` before
/// deserializing it as `T`. The file is streamed; a symbolic link at its last part is not
/// followed and only a regular file is read ([`super::contained::open_regular`]).
///
/// # Errors
/// [`ReadError::Missing`] when the file does not exist, [`ReadError::Io`] when it cannot be read
/// or is not a regular file, [`ReadError::Json`] when it is not JSON of the expected shape,
/// [`ReadError::NoFormat`] without an integer version key, [`ReadError::NewerFormat`] when the
/// version is above `newest`.
pub fn read_versioned<T: DeserializeOwned>(
    path: &Path,
    version_key: &'static str,
    newest: u32,
) -> Result<T, ReadError> {
    let file = open_regular(path).map_err(|e| io_error(path, e))?;
    parse_versioned(path, file, version_key, newest)
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
        let bundle_json = dir.join(files::BUNDLE);
        let file = open_in(&dir, Path::new(files::BUNDLE)).map_err(|e| io_error(&bundle_json, e))?;
        let info = parse_versioned(&bundle_json, file, "bundle-format", BUNDLE_FORMAT)?;
        Ok(Bundle {
            dir,
            info,
            runs: Default::default(),
        })
    }

    /// Opens the regular file `rel` (relative, plain names) of the bundle without following links
    /// ([`super::contained::open_in`]).
    ///
    /// # Errors
    /// [`ReadError::Missing`] when absent, [`ReadError::Io`] when it is a symbolic link, FIFO,
    /// device or folder, or cannot be opened.
    pub fn open_file(&self, rel: &Path) -> Result<File, ReadError> {
        open_in(&self.dir, rel).map_err(|e| io_error(&self.dir.join(rel), e))
    }

    /// Reads the versioned JSON document `rel` of the bundle (see [`read_versioned`]).
    fn versioned<T: DeserializeOwned>(
        &self,
        rel: &Path,
        key: &'static str,
        newest: u32,
    ) -> Result<T, ReadError> {
        parse_versioned(&self.dir.join(rel), self.open_file(rel)?, key, newest)
    }

    /// Reads the text file `rel` of the bundle, at most [`TEXT_LIMIT`] bytes.
    fn text(&self, rel: &str) -> Result<Vec<u8>, ReadError> {
        let path = self.path(rel);
        read_bounded(self.open_file(Path::new(rel))?, TEXT_LIMIT).map_err(|e| io_error(&path, e))
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

    /// Reads plan.json whole (every planned run in execution order, all in memory); every
    /// `run-id` and `output` must be a plain file name. Large plans are read with
    /// [`Bundle::plan_header`] and [`Bundle::planned_runs`] instead.
    ///
    /// # Errors
    /// Missing, unreadable, malformed or newer-format plan.json; [`ReadError::Unsafe`] for a
    /// `run-id` or `output` that is not a plain file name.
    pub fn plan(&self) -> Result<PlanFile, ReadError> {
        let header = self.plan_header()?;
        let runs = self.planned_runs()?.collect::<Result<Vec<_>, _>>()?;
        Ok(PlanFile {
            format: header.format,
            order: header.order,
            seed: header.seed,
            jobs: header.jobs,
            matrix_keys: header.matrix_keys,
            output_format: header.output_format,
            sample_interval_seconds: header.sample_interval_seconds,
            runs,
        })
    }

    /// Reads plan.json's fields other than `runs`. plan.json as hwr-exp writes it has them
    /// before `runs`, and the reading stops there; elsewhere the runs are skipped unread.
    ///
    /// # Errors
    /// Missing, unreadable, malformed or newer-format plan.json.
    pub fn plan_header(&self) -> Result<PlanHeader, ReadError> {
        let path = self.path(files::PLAN);
        let file = self.open_file(Path::new(files::PLAN))?;
        plan_stream::read(&path, file, None)
    }

    /// The planned runs of plan.json in execution order, parsed one at a time by a reading
    /// thread as the iterator is advanced (memory bounded by a few runs, whatever the plan's
    /// size); every `run-id` and `output` must be a plain file name. The iterator ends after an
    /// error.
    ///
    /// # Errors
    /// Missing or unopenable plan.json at once; a malformed, truncated or newer-format plan.json
    /// and [`ReadError::Unsafe`] names as an item of the iterator.
    pub fn planned_runs(&self) -> Result<PlannedRuns, ReadError> {
        let path = self.path(files::PLAN);
        let file = self.open_file(Path::new(files::PLAN))?;
        // Runs go over in batches: one channel hand-over (and thread wake-up) per PLAN_BATCH runs
        // instead of per run.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Result<PlannedRun, ReadError>>>(2);
        let thread = std::thread::Builder::new()
            .name("plan.json reader".into())
            .spawn(move || {
                let mut batch = Vec::with_capacity(PLAN_BATCH);
                let result = plan_stream::read(
                    &path,
                    file,
                    Some(&mut |run: PlannedRun| {
                        batch.push(Ok(run));
                        batch.len() < PLAN_BATCH
                            || tx
                                .send(std::mem::replace(&mut batch, Vec::with_capacity(PLAN_BATCH)))
                                .is_ok()
                    }),
                );
                if let Err(e) = result {
                    batch.push(Err(e));
                }
                if !batch.is_empty() {
                    let _ = tx.send(batch);
                }
            })
            .map_err(|e| io_error(&self.path(files::PLAN), e))?;
        Ok(PlannedRuns {
            rx,
            batch: Vec::new().into_iter(),
            thread: Some(thread),
            failed: false,
        })
    }

    /// Reads a top-level JSON file as an untyped value, streamed.
    fn json_value(&self, name: &str) -> Result<serde_json::Value, ReadError> {
        let path = self.path(name);
        let reader = BufReader::new(self.open_file(Path::new(name))?);
        serde_json::from_reader(reader).map_err(|e| json_error(&path, e))
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

    /// Reads provenance.json typed, its `format` checked against [`PROVENANCE_FORMAT`].
    ///
    /// # Errors
    /// As [`read_versioned`], naming provenance.json.
    pub fn provenance_doc(&self) -> Result<ProvenanceDoc, ReadError> {
        self.versioned(Path::new(files::PROVENANCE), "format", PROVENANCE_FORMAT)
    }

    /// The SHA-256 of `working-tree.patch` recorded in provenance.json (`patch-sha256` of the
    /// capture before the first run), read through [`Bundle::provenance_doc`].
    ///
    /// # Errors
    /// As [`Bundle::provenance_doc`].
    pub fn recorded_patch_sha256(&self) -> Result<String, ReadError> {
        Ok(self.provenance_doc()?.before.patch_sha256().to_owned())
    }

    /// Reads host.json typed, its `format` checked against [`HOST_FORMAT`].
    ///
    /// # Errors
    /// As [`read_versioned`], naming host.json.
    pub fn host_facts(&self) -> Result<HostFacts, ReadError> {
        self.versioned(Path::new(files::HOST), "format", HOST_FORMAT)
    }

    /// Reads revision.txt: the HEAD commit id, or the line saying why there is none; trimmed.
    ///
    /// # Errors
    /// Missing or unreadable revision.txt.
    pub fn revision(&self) -> Result<String, ReadError> {
        let bytes = self.text(files::REVISION)?;
        Ok(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// The recorded HEAD commit: the first line of revision.txt when it is 40 hex digits; `None`
    /// when revision.txt says why there is no commit, or is missing or unreadable.
    pub fn recorded_commit(&self) -> Option<String> {
        let text = self.revision().ok()?;
        let line = text.lines().next()?.trim();
        (line.len() == 40 && line.bytes().all(|b| b.is_ascii_hexdigit())).then(|| line.to_string())
    }

    /// Reads manifest.toml: the manifest text as run.
    ///
    /// # Errors
    /// Missing or unreadable manifest.toml.
    pub fn manifest_text(&self) -> Result<String, ReadError> {
        let bytes = self.text(files::MANIFEST)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The folder that holds `<experiment>/<bundle>` folders: the grandparent of [`Bundle::dir`]
    /// (the bundle folder itself when it has no grandparent).
    pub fn results_dir(&self) -> PathBuf {
        self.dir
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.dir.clone())
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

    /// Opens the regular file `name` in the folder of `run` (`runs/<run-id>/<name>`) without
    /// following links ([`Bundle::open_file`]); `run`'s names were checked when it was read.
    ///
    /// # Errors
    /// As [`Bundle::open_file`]; [`ReadError::Unsafe`] when `name` is not a plain file name.
    pub fn open_run_file(&self, run_id: &str, name: &str) -> Result<File, ReadError> {
        let path = self.run_dir(run_id).join(name);
        checked_name(&path, run_id, || "run-id".into())?;
        checked_name(&path, name, || "file name".into())?;
        let runs = self.runs_folder().map_err(|e| io_error(&path, e))?;
        RunFolder {
            runs,
            bundle: self,
            run_id,
        }
        .open(name)
    }

    /// The folder of one run, `runs/<run_id>/`, whose files are then read beneath `runs/`
    /// (opened once per [`Bundle`]) without following links.
    ///
    /// # Errors
    /// [`ReadError::Unsafe`] when `run_id` is not a plain file name, [`ReadError::Missing`] when
    /// `runs/` does not exist, [`ReadError::Io`] when it is a link or not a folder.
    pub fn run_folder<'b>(&'b self, run_id: &'b str) -> Result<RunFolder<'b>, ReadError> {
        checked_name(&self.run_dir(run_id), run_id, || "run-id".into())?;
        let runs = self
            .runs_folder()
            .map_err(|e| io_error(&self.run_dir(run_id), e))?;
        Ok(RunFolder {
            runs,
            bundle: self,
            run_id,
        })
    }

    /// `runs/`, opened without following a link the first time it is asked for.
    fn runs_folder(&self) -> std::io::Result<&OwnedFd> {
        if let Some(fd) = self.runs.get() {
            return Ok(fd);
        }
        let fd = enter(&open_folder(&self.dir)?, Path::new(files::RUNS))?;
        // Another thread may have set it meanwhile: either descriptor is the same folder.
        let _ = self.runs.set(fd);
        Ok(self.runs.get().expect("set above"))
    }

    /// The run folders `runs/` holds now, listed once (`getdents` on the folder opened as
    /// [`Bundle::run_folder`] opens it): what lets a reader of a bundle whose runs mostly did not
    /// run skip looking each one up. `None` when `runs/` holds more than `most` entries (the
    /// listing stops there: a finished large bundle is not listed whole) or cannot be listed;
    /// the reader then looks each run up.
    pub fn run_folders_listed(&self, most: usize) -> Option<ListedRunFolders> {
        let mut dir = rustix::fs::Dir::read_from(self.runs_folder().ok()?).ok()?;
        let mut hashes = std::collections::HashSet::new();
        while let Some(entry) = dir.read() {
            let entry = entry.ok()?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                if hashes.len() == most {
                    return None;
                }
                hashes.insert(ListedRunFolders::hash(name));
            }
        }
        Some(ListedRunFolders { hashes })
    }

    /// Reads and checks `runs/<run_id>/run.json` ([`RunFolder::record`]).
    fn run_json(&self, run_id: &str) -> Result<RunRecord, ReadError> {
        self.checked_run_folder(run_id)?.record()
    }

    /// [`Bundle::run_folder`] of a `run_id` read from plan.json; a missing `runs/` is a missing
    /// run.json.
    fn checked_run_folder<'b>(&'b self, run_id: &'b str) -> Result<RunFolder<'b>, ReadError> {
        let path = || self.run_dir(run_id).join(files::RUN);
        checked_name_in(path, run_id, || "run-id (from plan.json)".into())?;
        let runs = self.runs_folder().map_err(|e| io_error(&path(), e))?;
        Ok(RunFolder {
            runs,
            bundle: self,
            run_id,
        })
    }

    /// Reads one run's `run.json` (see [`Bundle::run_record`] for the checks).
    ///
    /// # Errors
    /// [`ReadError::RunMissing`] when the run did not finish, otherwise as [`Bundle::run_record`].
    pub fn read_run(&self, planned: &PlannedRun) -> Result<RunRecord, ReadError> {
        self.read_run_folder(planned).map(|(record, _)| record)
    }

    /// Reads one run's `run.json` as [`Bundle::read_run`] does, and returns it with the run's
    /// folder, opened once, for reading its other files.
    ///
    /// # Errors
    /// As [`Bundle::read_run`].
    pub fn read_run_folder<'b>(
        &'b self,
        planned: &'b PlannedRun,
    ) -> Result<(RunRecord, RunFolder<'b>), ReadError> {
        let run_id = planned.run_id.as_str();
        let read = self
            .checked_run_folder(run_id)
            .and_then(|folder| Ok((folder.record()?, folder)))
            .and_then(|(record, folder)| {
                as_planned(&record, planned).map_err(|what| ReadError::NotAsPlanned {
                    path: self.run_dir(run_id).join(files::RUN),
                    what,
                })?;
                Ok((record, folder))
            });
        match read {
            Err(ReadError::Missing { path }) => Err(ReadError::RunMissing {
                run_id: run_id.to_string(),
                path,
            }),
            other => other,
        }
    }

    /// Reads `runs/<run-id>/run.json`, `None` when the run has none (it did not finish). The file is
    /// opened without following links and streamed; `run_id` and the run.json's `run-id`, `output`
    /// and `sha256` keys must be plain file names.
    ///
    /// # Errors
    /// As [`read_versioned`] when run.json exists but cannot be read, is malformed or newer;
    /// [`ReadError::Unsafe`] for a name that is not a plain file name.
    pub fn run_record(&self, run_id: &str) -> Result<Option<RunRecord>, ReadError> {
        match self.run_json(run_id) {
            Ok(record) => Ok(Some(record)),
            Err(ReadError::Missing { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Returns an iterator over the planned runs' records, one `run.json` read per step, in plan
    /// order (plan.json streamed, [`Bundle::planned_runs`]). A run that never finished yields
    /// [`ReadError::RunMissing`]; callers that report partial bundles skip those and stop on other
    /// errors.
    ///
    /// # Errors
    /// As [`Bundle::planned_runs`].
    pub fn runs(&self) -> Result<Runs<'_>, ReadError> {
        Ok(Runs {
            bundle: self,
            planned: self.planned_runs()?,
        })
    }
}

/// The planned runs of plan.json, one at a time ([`Bundle::planned_runs`]).
#[derive(Debug)]
pub struct PlannedRuns {
    rx: std::sync::mpsc::Receiver<Vec<Result<PlannedRun, ReadError>>>,
    batch: std::vec::IntoIter<Result<PlannedRun, ReadError>>,
    thread: Option<std::thread::JoinHandle<()>>,
    failed: bool,
}

/// Planned runs the reading thread of [`Bundle::planned_runs`] hands over at once.
const PLAN_BATCH: usize = 64;

impl Iterator for PlannedRuns {
    type Item = Result<PlannedRun, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(item) = self.batch.next() {
                self.failed = item.is_err();
                return Some(item);
            }
            match self.rx.recv() {
                Ok(batch) => self.batch = batch.into_iter(),
                Err(_) => break,
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        None
    }
}

impl Drop for PlannedRuns {
    fn drop(&mut self) {
        // Dropping the receiver first makes the reading thread's next send fail: it stops.
        let (_, rx) = std::sync::mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.rx, rx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Iterator over a bundle's run records in plan order (see [`Bundle::runs`]).
#[derive(Debug)]
pub struct Runs<'a> {
    bundle: &'a Bundle,
    planned: PlannedRuns,
}

impl Iterator for Runs<'_> {
    type Item = Result<RunRecord, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(match self.planned.next()? {
            Ok(planned) => self.bundle.read_run(&planned),
            Err(e) => Err(e),
        })
    }
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
