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

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::contained::{
    UnsafeName, enter, open_folder, open_in, open_regular, open_regular_at, plain_name, read_bounded,
    read_small_beneath,
};

use super::format::{
    BUNDLE_FORMAT, BundleInfo, PlanEntry, PlanFile, PlanHeader, PlannedRunRecord, RunEntry, RunRecord, files,
};
use crate::provenance::host::{HOST_FORMAT, HostFacts};
use crate::provenance::{PROVENANCE_FORMAT, ProvenanceDoc};

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

/// An open bundle folder: `bundle.json` has been read and its format checked.
#[derive(Debug, Clone)]
pub struct Bundle {
    dir: PathBuf,
    info: BundleInfo,
    /// `runs/`, opened without following a link the first time a run is read (a report opens
    /// 100,000 runs through it: one `openat` each instead of a walk from the bundle folder).
    runs: std::sync::Arc<std::sync::OnceLock<OwnedFd>>,
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
        self.record_as()
    }

    /// [`RunFolder::record`], read as `R` ([`RunRecord`] whole, or
    /// [`crate::bundle::RunRecordBrief`] for what a report shows).
    ///
    /// # Errors
    /// As [`RunFolder::record`].
    pub fn record_as<R: RunEntry>(&self) -> Result<R, ReadError> {
        let path = || self.dir().join(files::RUN);
        let record: R = match self.read_small(files::RUN, WHOLE_LIMIT)? {
            Some(bytes) => parse_run_record(path, &bytes)?,
            None => parse_versioned(&path(), self.open(files::RUN)?, "format", BUNDLE_FORMAT)?,
        };
        checked_name_in(path, record.run_id(), || "run-id".into())?;
        checked_name_in(path, record.output(), || "output".into())?;
        for name in record.sha256().keys() {
            checked_name_in(path, name, || "a key of sha256".into())?;
        }
        Ok(record)
    }
}

/// Whether `record` (a run.json) is the run `planned` (its plan.json entry): the same run-id,
/// index, repetition and cell; else what differs. A run.json copied from another run's folder or
/// edited would otherwise be reported as that other run, or invent a cell the plan has not.
fn as_planned(record: &impl RunEntry, planned: &impl PlanEntry) -> Result<(), String> {
    if record.run_id() != planned.run_id() {
        return Err(format!(
            "run-id is {}, plan.json plans {} here (another run's run.json?)",
            json_text(&record.run_id()),
            json_text(&planned.run_id())
        ));
    }
    if record.index() != planned.index() || record.repetition() != planned.repetition() {
        return Err(format!(
            "index {} and repetition {}, plan.json's {} and {}",
            record.index(),
            record.repetition(),
            planned.index(),
            planned.repetition()
        ));
    }
    if record.cell() != planned.cell() {
        return Err(format!(
            "cell is {}, plan.json's {}",
            json_text(record.cell()),
            json_text(planned.cell())
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

/// Maps an open or read error of `path`: "not found" is [`ReadError::Missing`].
fn io_error(path: &Path, source: std::io::Error) -> ReadError {
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
fn parse_run_record<R: RunEntry>(path: impl Fn() -> PathBuf, bytes: &[u8]) -> Result<R, ReadError> {
    match serde_json::from_slice::<R>(bytes) {
        Ok(record) if record.format() <= BUNDLE_FORMAT => Ok(record),
        Ok(record) => {
            check_version(&path(), "format", BUNDLE_FORMAT, Some(record.format().into())).map(|()| record)
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

/// Checks a name read from the file `path` with [`super::contained::plain_name`].
fn checked_name(path: &Path, name: &str, what: impl FnOnce() -> String) -> Result<(), ReadError> {
    checked_name_in(|| path.to_path_buf(), name, what)
}

/// [`checked_name`] with the file's path made only for the error (a report checks 300,000
/// names of 100,000 runs).
fn checked_name_in(
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
        plan_stream::read::<PlannedRunRecord>(&path, file, None)
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
        self.planned_runs_as()
    }

    /// [`Bundle::planned_runs`], each entry read as `R` ([`PlannedRunRecord`] whole, or
    /// [`crate::bundle::PlannedRunBrief`] for what says which run it is).
    ///
    /// # Errors
    /// As [`Bundle::planned_runs`].
    pub fn planned_runs_as<R: PlanEntry>(&self) -> Result<PlannedRuns<R>, ReadError> {
        let path = self.path(files::PLAN);
        let file = self.open_file(Path::new(files::PLAN))?;
        // Runs go over in batches: one channel hand-over (and thread wake-up) per PLAN_BATCH runs
        // instead of per run.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Result<R, ReadError>>>(8);
        let thread = std::thread::Builder::new()
            .name("plan.json reader".into())
            .spawn(move || {
                let mut batch = Vec::with_capacity(PLAN_BATCH);
                let result = plan_stream::read(
                    &path,
                    file,
                    Some(&mut |run: R| {
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
    pub fn read_run(&self, planned: &impl PlanEntry) -> Result<RunRecord, ReadError> {
        self.read_run_folder(planned).map(|(record, _)| record)
    }

    /// Reads one run's `run.json` as [`Bundle::read_run`] does, and returns it with the run's
    /// folder, opened once, for reading its other files.
    ///
    /// # Errors
    /// As [`Bundle::read_run`].
    pub fn read_run_folder<'b>(
        &'b self,
        planned: &'b impl PlanEntry,
    ) -> Result<(RunRecord, RunFolder<'b>), ReadError> {
        self.read_run_folder_as(planned)
    }

    /// [`Bundle::read_run_folder`], run.json read as `R` ([`RunRecord`] whole, or
    /// [`crate::bundle::RunRecordBrief`] for what a report shows).
    ///
    /// # Errors
    /// As [`Bundle::read_run`].
    pub fn read_run_folder_as<'b, R: RunEntry>(
        &'b self,
        planned: &'b impl PlanEntry,
    ) -> Result<(R, RunFolder<'b>), ReadError> {
        let run_id = planned.run_id();
        let read = self
            .checked_run_folder(run_id)
            .and_then(|folder| Ok((folder.record_as()?, folder)))
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
pub struct PlannedRuns<R = PlannedRunRecord> {
    rx: std::sync::mpsc::Receiver<Vec<Result<R, ReadError>>>,
    batch: std::vec::IntoIter<Result<R, ReadError>>,
    thread: Option<std::thread::JoinHandle<()>>,
    failed: bool,
}

/// Planned runs the reading thread of [`Bundle::planned_runs`] hands over at once.
const PLAN_BATCH: usize = 64;

impl<R> Iterator for PlannedRuns<R> {
    type Item = Result<R, ReadError>;

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

impl<R> Drop for PlannedRuns<R> {
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

/// plan.json parsed in one streamed pass: the header fields kept, each run handed to a callback
/// as it is parsed (or, without one, the reading stopped at `runs` once the header is complete).
mod plan_stream {
    use std::fmt;
    use std::fs::File;
    use std::io::BufReader;
    use std::path::{Path, PathBuf};

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use super::{ReadError, checked_name, json_error};
    use crate::bundle::format::{BUNDLE_FORMAT, PlanEntry, PlanHeader};

    /// Called with each run; `false` stops the reading (the receiver is gone).
    pub(super) type OnRun<'a, R> = &'a mut dyn FnMut(R) -> bool;

    /// The message of the error that stops the parser on purpose.
    const STOP: &str = "hwr-exp: stop reading plan.json";

    struct Seed<'a, 'b, 'm, R> {
        path: &'b Path,
        on_run: Option<OnRun<'a, R>>,
        /// An error of ours (newer format, unsafe name) that stopped the parser.
        error: &'b mut Option<ReadError>,
        /// What has been read so far (kept when the parser is stopped).
        fields: &'b mut Fields,
        /// How the runs are taken and how many were handed over ([`Progress`]).
        progress: &'b mut Progress<'m>,
    }

    /// How one pass over plan.json takes its runs, and how far it got.
    struct Progress<'m> {
        /// Runs handed to the callback so far.
        delivered: usize,
        /// Runs a pass over a document already read in part skips unseen: those the first pass
        /// handed over.
        skip: usize,
        /// The document is mapped ([`Mapped`]): each run is taken as its raw text and parsed
        /// from it, and the mapped pages before it are let go.
        mapped: Option<&'m Mapped>,
        /// The mapped pass met something it leaves to the streamed one to say (a run that does
        /// not parse): set when it stopped for that.
        retry: bool,
    }

    /// plan.json mapped into memory: parsed as a slice, several times faster than through a
    /// reader (a 100,000-run plan is 40 MB).
    struct Mapped {
        map: memmap2::Mmap,
        /// Bytes from the start whose pages were let go.
        dropped: std::cell::Cell<usize>,
    }

    /// Pages let go at a time, bytes.
    const DROP_STEP: usize = 4 << 20;

    impl Mapped {
        /// Maps `file` when it is a regular file of at least 1 MiB (a smaller one is streamed:
        /// too little to gain); `None` when it cannot be mapped.
        fn of(file: &File) -> Option<Mapped> {
            let meta = file.metadata().ok()?;
            if !meta.is_file() || meta.len() < (1 << 20) {
                return None;
            }
            // SAFETY: plan.json is written once, under a temporary name, and renamed into place
            // (`write_atomic_with`); a new plan.json is a new file, so the mapped bytes do not
            // change under the parser. A file truncated by someone else meanwhile would fault.
            let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
            let _ = map.advise(memmap2::Advice::Sequential);
            Some(Mapped {
                map,
                dropped: std::cell::Cell::new(0),
            })
        }

        /// The run whose text starts at `at` (a pointer into the map) was parsed: the pages
        /// wholly before it are let go, a few MiB at a time, so that the pages read stay out of
        /// the report's resident memory (they stay in the page cache).
        fn parsed_up_to(&self, at: *const u8) {
            let offset = (at as usize).saturating_sub(self.map.as_ptr() as usize);
            let dropped = self.dropped.get();
            if offset < dropped + DROP_STEP {
                return;
            }
            let upto = offset & !(DROP_STEP - 1);
            // SAFETY: a shared, read-only file mapping: MADV_DONTNEED only drops this process's
            // page table entries for the range; a later read of those bytes (an error's line and
            // column are counted from the start) faults them in again from the file.
            let _ = unsafe {
                self.map
                    .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, dropped, upto - dropped)
            };
            self.dropped.set(upto);
        }
    }

    #[derive(Default)]
    struct Fields {
        format: Option<u64>,
        order: Option<crate::manifest::Order>,
        seed: Option<Option<u64>>,
        jobs: Option<u32>,
        matrix_keys: Option<Vec<String>>,
        output_format: Option<crate::manifest::OutputFormat>,
        sample_interval_seconds: Option<Option<f64>>,
        runs: bool,
    }

    impl Fields {
        fn complete(&self) -> bool {
            self.format.is_some()
                && self.order.is_some()
                && self.seed.is_some()
                && self.jobs.is_some()
                && self.matrix_keys.is_some()
                && self.output_format.is_some()
                && self.sample_interval_seconds.is_some()
        }
    }

    impl<'de, R: PlanEntry> DeserializeSeed<'de> for Seed<'_, '_, '_, R> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de, R: PlanEntry> Visitor<'de> for Seed<'_, '_, '_, R> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a plan.json object")
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
            let f = &mut *self.fields;
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "format" => {
                        let v: u64 = map.next_value()?;
                        if v > u64::from(BUNDLE_FORMAT) {
                            *self.error = Some(newer(self.path, v));
                            return Err(de::Error::custom(STOP));
                        }
                        f.format = Some(v);
                    }
                    "order" => f.order = Some(map.next_value()?),
                    "seed" => f.seed = Some(map.next_value()?),
                    "jobs" => f.jobs = Some(map.next_value()?),
                    "matrix-keys" => f.matrix_keys = Some(map.next_value()?),
                    "output-format" => f.output_format = Some(map.next_value()?),
                    "sample-interval-seconds" => f.sample_interval_seconds = Some(map.next_value()?),
                    "runs" => {
                        f.runs = true;
                        match self.on_run.as_mut() {
                            None if f.complete() => return Err(de::Error::custom(STOP)),
                            None => {
                                map.next_value::<IgnoredAny>()?;
                            }
                            Some(on_run) => map.next_value_seed(RunsSeed {
                                path: self.path,
                                on_run: &mut **on_run,
                                error: &mut *self.error,
                                progress: &mut *self.progress,
                            })?,
                        }
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }

    struct RunsSeed<'a, 'b, 'm, R> {
        path: &'b Path,
        on_run: &'a mut dyn FnMut(R) -> bool,
        error: &'b mut Option<ReadError>,
        progress: &'b mut Progress<'m>,
    }

    impl<'de, R: PlanEntry> DeserializeSeed<'de> for RunsSeed<'_, '_, '_, R> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de, R: PlanEntry> Visitor<'de> for RunsSeed<'_, '_, '_, R> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array of planned runs")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0usize;
            loop {
                let run = match self.progress.mapped {
                    Some(mapped) => {
                        let Some(text) = seq.next_element::<&'de serde_json::value::RawValue>()? else {
                            break;
                        };
                        let Ok(run) = serde_json::from_str::<R>(text.get()) else {
                            // The streamed pass says what is wrong, where, in the file's terms.
                            self.progress.retry = true;
                            return Err(de::Error::custom(STOP));
                        };
                        mapped.parsed_up_to(text.get().as_ptr());
                        run
                    }
                    None => match seq.next_element::<R>()? {
                        Some(run) => run,
                        None => break,
                    },
                };
                if i < self.progress.skip {
                    // Handed over (and checked) by the mapped pass before this one.
                    i += 1;
                    continue;
                }
                let checked = checked_name(self.path, run.run_id(), || format!("runs[{i}].run-id"))
                    .and_then(|()| checked_name(self.path, run.output(), || format!("runs[{i}].output")))
                    .and_then(|()| {
                        // A run's index is its place in the plan: a repeated or moved entry
                        // would be reported twice, or as another run.
                        (run.index() == i)
                            .then_some(())
                            .ok_or_else(|| ReadError::NotAsPlanned {
                                path: self.path.to_path_buf(),
                                what: format!(
                                    "runs[{i}] ({}) has index {}: a run's index is its place in runs",
                                    run.run_id(),
                                    run.index()
                                ),
                            })
                    });
                if let Err(e) = checked {
                    *self.error = Some(e);
                    return Err(de::Error::custom(STOP));
                }
                if !(self.on_run)(run) {
                    return Err(de::Error::custom(STOP));
                }
                self.progress.delivered += 1;
                i += 1;
            }
            Ok(())
        }
    }

    fn newer(path: &Path, found: u64) -> ReadError {
        ReadError::NewerFormat {
            path: path.to_path_buf(),
            found,
            supported: BUNDLE_FORMAT,
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    /// Reads plan.json at `path` from `file` in one pass, handing each run to `on_run` (none:
    /// stop at `runs` once the header is complete) and returning the header.
    ///
    /// A plan.json of 1 MiB or more is mapped and parsed from memory ([`Mapped`]); when that pass
    /// meets an error it does not say itself (anything but a newer format or a name or index of
    /// ours), the file is read again streamed, as a smaller one is, the runs already handed over
    /// skipped, so that every error is the streamed parser's, with its line and column.
    pub(super) fn read<E: PlanEntry>(
        path: &Path,
        file: File,
        mut on_run: Option<OnRun<'_, E>>,
    ) -> Result<PlanHeader, ReadError> {
        let path: PathBuf = path.to_path_buf();
        let mut skip = 0;
        if let Some(mapped) = Mapped::of(&file) {
            let mut progress = Progress {
                delivered: 0,
                skip: 0,
                mapped: Some(&mapped),
                retry: false,
            };
            let mut de = serde_json::Deserializer::from_slice(&mapped.map);
            let again = on_run.as_mut().map(|f| &mut **f as OnRun<'_, E>);
            match pass(&path, &mut de, again, &mut progress) {
                Err(Pass::Retry) => skip = progress.delivered,
                Err(Pass::Failed(e)) => return Err(e),
                Ok(fields) => return header(&path, fields),
            }
        }
        let mut file = file;
        std::io::Seek::rewind(&mut file).map_err(|e| super::io_error(&path, e))?;
        let mut progress = Progress {
            delivered: 0,
            skip,
            mapped: None,
            retry: false,
        };
        let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(256 * 1024, file));
        match pass(&path, &mut de, on_run, &mut progress) {
            Ok(fields) => header(&path, fields),
            Err(Pass::Failed(e)) => Err(e),
            Err(Pass::Retry) => unreachable!("only a mapped pass retries"),
        }
    }

    /// How a pass over plan.json failed.
    enum Pass {
        /// With this error, to be returned.
        Failed(ReadError),
        /// The mapped pass leaves the error to the streamed one ([`read`]).
        Retry,
    }

    /// One pass of [`read`] through `de`: the header fields read, the runs handed to `on_run`.
    fn pass<'de, R: serde_json::de::Read<'de>, E: PlanEntry>(
        path: &Path,
        de: &mut serde_json::Deserializer<R>,
        on_run: Option<OnRun<'_, E>>,
        progress: &mut Progress<'_>,
    ) -> Result<Fields, Pass> {
        let mut error = None;
        let mut fields = Fields::default();
        let header_only = on_run.is_none();
        let mapped = progress.mapped.is_some();
        let parsed = Seed {
            path,
            on_run,
            error: &mut error,
            fields: &mut fields,
            progress,
        }
        .deserialize(&mut *de)
        .and_then(|()| de.end());
        if let Err(e) = parsed {
            if let Some(ours) = error {
                return Err(Pass::Failed(ours));
            }
            let stopped = e.to_string().starts_with(STOP);
            if mapped && (progress.retry || !stopped) {
                return Err(Pass::Retry);
            }
            if !stopped {
                return Err(Pass::Failed(json_error(path, e)));
            }
            if !header_only {
                // The receiver is gone: nobody reads what follows.
                return Err(Pass::Failed(ReadError::Io {
                    path: path.to_path_buf(),
                    source: std::io::Error::other("reading stopped"),
                }));
            }
        }
        Ok(fields)
    }

    /// The header of plan.json at `path` from the `fields` a pass read.
    fn header(path: &Path, fields: Fields) -> Result<PlanHeader, ReadError> {
        let path = path.to_path_buf();
        let missing =
            |key: &'static str| json_error(&path, <serde_json::Error as de::Error>::missing_field(key));
        if !fields.runs {
            return Err(missing("runs"));
        }
        Ok(PlanHeader {
            format: fields
                .format
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| ReadError::NoFormat {
                    path: path.clone(),
                    key: "format",
                })?,
            order: fields.order.ok_or_else(|| missing("order"))?,
            seed: fields.seed.flatten(),
            jobs: fields.jobs.ok_or_else(|| missing("jobs"))?,
            matrix_keys: fields.matrix_keys.ok_or_else(|| missing("matrix-keys"))?,
            output_format: fields.output_format.ok_or_else(|| missing("output-format"))?,
            sample_interval_seconds: fields.sample_interval_seconds.flatten(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle folder holding a bundle.json and the given plan.json.
    fn with_plan(plan: &str) -> (tempfile::TempDir, Bundle) {
        let dir = tempfile::tempdir().unwrap();
        let info = include_str!("../../tests/fixtures/bundles/interrupted/bundle.json");
        std::fs::write(dir.path().join("bundle.json"), info).unwrap();
        std::fs::write(dir.path().join("plan.json"), plan).unwrap();
        let b = Bundle::open(dir.path()).unwrap();
        (dir, b)
    }

    fn run_json(i: usize) -> String {
        format!(
            r#"{{"run-id":"{i:03}-r1","index":{i},"cell":{{}},"repetition":1,"argv":["true"],"workdir":"/","output":"{i:03}.json","env":{{"policy":"inherit","set":[],"unset":[]}},"cpus":[0],"timeout-seconds":null,"grace-seconds":5.0}}"#
        )
    }

    fn plan_text(runs: usize, header_last: bool) -> String {
        let header = r#""format":1,"order":"interleaved","seed":null,"jobs":1,"matrix-keys":["a"],"output-format":"json","sample-interval-seconds":0.1"#;
        let runs: Vec<String> = (0..runs).map(run_json).collect();
        let runs = format!(r#""runs":[{}]"#, runs.join(",\n"));
        if header_last {
            format!("{{{runs},{header}}}")
        } else {
            format!("{{{header},{runs}}}")
        }
    }

    #[test]
    fn plan_runs_stream_in_order_wherever_the_header_is() {
        for header_last in [false, true] {
            let (_d, b) = with_plan(&plan_text(1000, header_last));
            let h = b.plan_header().unwrap();
            assert_eq!(
                (h.matrix_keys.clone(), h.sample_interval_seconds),
                (vec!["a".to_string()], Some(0.1))
            );
            let ids: Vec<usize> = b.planned_runs().unwrap().map(|r| r.unwrap().index).collect();
            assert_eq!(ids, (0..1000).collect::<Vec<_>>());
            assert_eq!(b.plan().unwrap().runs.len(), 1000);
        }
    }

    #[test]
    fn a_truncated_plan_yields_its_runs_then_one_error() {
        let text = plan_text(10, false);
        let cut = text.find(&run_json(6)).unwrap() + 20;
        let (_d, b) = with_plan(&text[..cut]);
        let items: Vec<_> = b.planned_runs().unwrap().collect();
        assert_eq!(items.len(), 7, "6 runs, then the error");
        assert!(items[..6].iter().all(Result::is_ok));
        let e = items[6].as_ref().unwrap_err();
        assert!(e.to_string().contains("plan.json: truncated JSON"), "{e}");
    }

    /// A plan of `runs` runs, one per line, large enough (at least 1 MiB) to be mapped.
    fn mapped_plan(runs: usize) -> String {
        let text = plan_text(runs, false);
        assert!(
            text.len() >= 1 << 20,
            "{} bytes: too small to be mapped",
            text.len()
        );
        text
    }

    #[test]
    fn a_mapped_plan_streams_every_run_wherever_the_header_is() {
        for header_last in [false, true] {
            let (_d, b) = with_plan(&plan_text(6000, header_last));
            assert_eq!(b.plan_header().unwrap().matrix_keys, vec!["a".to_string()]);
            let ids: Vec<usize> = b.planned_runs().unwrap().map(|r| r.unwrap().index).collect();
            assert_eq!(ids, (0..6000).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_run_a_mapped_plan_cannot_parse_is_said_as_the_streamed_reader_says_it() {
        // Run 4000 is on line 4001 (the header and run 0 share line 1): the error names the
        // file's line, once, after the 4000 runs before it, each handed over once.
        let bad = run_json(4000).replace("\"repetition\":1", "\"repetition\":\"one\"");
        let text = mapped_plan(6000).replace(&run_json(4000), &bad);
        let (_d, b) = with_plan(&text);
        let items: Vec<_> = b.planned_runs().unwrap().collect();
        assert_eq!(items.len(), 4001);
        let ids: Vec<usize> = items[..4000].iter().map(|r| r.as_ref().unwrap().index).collect();
        assert_eq!(ids, (0..4000).collect::<Vec<_>>());
        let e = items[4000].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("plan.json: unexpected content") && e.contains("line 4001"),
            "{e}"
        );

        // A cut in the middle of a run: its syntax error, with the runs before it.
        let cut = text.find(&run_json(5000)).unwrap() + 30;
        let (_d, b) = with_plan(&text[..cut]);
        let items: Vec<_> = b.planned_runs().unwrap().collect();
        assert_eq!(items.len(), 4001, "stops at the first error, run 4000");
        let text = mapped_plan(6000);
        let cut = text.find(&run_json(5000)).unwrap() + 30;
        let (_d, b) = with_plan(&text[..cut]);
        let items: Vec<_> = b.planned_runs().unwrap().collect();
        assert_eq!(items.len(), 5001);
        assert!(items[..5000].iter().all(Result::is_ok));
        let e = items[5000].as_ref().unwrap_err().to_string();
        assert!(e.contains("plan.json: truncated JSON"), "{e}");
    }

    #[test]
    fn a_mapped_plan_stops_at_an_unsafe_name_and_a_newer_format() {
        let text = mapped_plan(6000).replace("\"4000-r1\"", "\"../x\"");
        let (_d, b) = with_plan(&text);
        let items: Vec<_> = b.planned_runs().unwrap().collect();
        assert_eq!(items.len(), 4001);
        let e = items[4000].as_ref().unwrap_err().to_string();
        assert!(e.contains("runs[4000].run-id"), "{e}");
        let (_d, b) = with_plan(&mapped_plan(6000).replace("\"format\":1", "\"format\":7"));
        assert!(matches!(
            b.plan_header(),
            Err(ReadError::NewerFormat { found: 7, .. })
        ));
        let first = b.planned_runs().unwrap().next().unwrap();
        assert!(matches!(first, Err(ReadError::NewerFormat { found: 7, .. })));
    }

    /// What `planned_runs_as::<R>()` gives, each entry as (run-id, index, repetition, cell,
    /// output) or its error's text.
    fn entries<R: PlanEntry>(b: &Bundle) -> Vec<Result<String, String>> {
        b.planned_runs_as::<R>()
            .unwrap()
            .map(|r| {
                r.map(|r| {
                    format!(
                        "{} {} {} {:?} {}",
                        r.run_id(),
                        r.index(),
                        r.repetition(),
                        r.cell(),
                        r.output()
                    )
                })
                .map_err(|e| e.to_string())
            })
            .collect()
    }

    #[test]
    fn a_brief_plan_entry_is_checked_as_the_whole_one_with_the_same_errors() {
        use crate::bundle::PlannedRunBrief;
        // Run 1 of 3 (small plans, streamed) and run 4000 of 6000 (mapped) spoilt in a field the
        // brief entry does not keep: the same runs before it, then the same error.
        let spoilt = [
            (r#""argv":["true"]"#, r#""argv":"true""#),
            (r#""argv":["true"]"#, r#""argv":[7]"#),
            (r#""argv":["true"],"#, ""),
            (r#""workdir":"/""#, r#""workdir":null"#),
            (r#""set":[]"#, r#""set":[["A"]]"#),
            (r#""set":[]"#, r#""set":[["A",1]]"#),
            (r#""unset":[]"#, r#""unset":{}"#),
            (r#""policy":"inherit""#, r#""policy":3"#),
            (r#""cpus":[0]"#, r#""cpus":[-1]"#),
            (r#""cpus":[0]"#, r#""cpus":["0"]"#),
            (r#""timeout-seconds":null"#, r#""timeout-seconds":"1s""#),
            (r#""grace-seconds":5.0"#, r#""grace-seconds":true"#),
            (r#""grace-seconds":5.0"#, r#""grace-seconds":5.0,"allocator":3"#),
            (r#""env":{"#, r#""env":[{"#),
        ];
        for (runs, spoilt_run) in [(3, 1), (6000, 4000)] {
            let plain = plan_text(runs, false);
            let (_d, b) = with_plan(&plain);
            let whole = entries::<PlannedRunRecord>(&b);
            assert_eq!(entries::<PlannedRunBrief>(&b), whole);
            assert_eq!(whole.len(), runs);
            let at = plain.find(&run_json(spoilt_run)).unwrap();
            for (from, to) in spoilt {
                let entry = run_json(spoilt_run).replacen(from, to, 1);
                assert_ne!(entry, run_json(spoilt_run), "{from}");
                let text = format!(
                    "{}{entry}{}",
                    &plain[..at],
                    &plain[at + run_json(spoilt_run).len()..]
                );
                let (_d, b) = with_plan(&text);
                let whole = entries::<PlannedRunRecord>(&b);
                assert_eq!(whole.len(), spoilt_run + 1, "{to}");
                assert!(whole[spoilt_run].is_err(), "{to}");
                assert_eq!(entries::<PlannedRunBrief>(&b), whole, "{to}");
            }
        }
        // An allocator name is read as the whole entry reads it.
        let text = plan_text(2, false).replace(
            r#""grace-seconds":5.0}"#,
            r#""grace-seconds":5.0,"allocator":"jemalloc"}"#,
        );
        let (_d, b) = with_plan(&text);
        assert_eq!(entries::<PlannedRunBrief>(&b), entries::<PlannedRunRecord>(&b));
        assert!(entries::<PlannedRunBrief>(&b).iter().all(Result::is_ok));
    }

    /// The probe-size-compare fixture bundle, copied to be spoilt.
    fn fixture_copy() -> tempfile::TempDir {
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).unwrap();
            for entry in std::fs::read_dir(from).unwrap() {
                let entry = entry.unwrap();
                let target = to.join(entry.file_name());
                if entry.file_type().unwrap().is_dir() {
                    copy(&entry.path(), &target);
                } else {
                    std::fs::copy(entry.path(), target).unwrap();
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bundles/probe-size-compare");
        copy(&fixture, dir.path());
        dir
    }

    /// Run `index`'s run.json read brief and whole: what the brief keeps (as text), or the error.
    fn brief_and_whole(b: &Bundle, index: usize) -> (Result<String, String>, Result<String, String>) {
        use crate::bundle::RunRecordBrief;
        let planned = b.planned_runs().unwrap().nth(index).unwrap().unwrap();
        let kept = |r: &RunRecordBrief| {
            format!(
                "{} {} {} {:?} {} {:?} {:?} {:?} {:?} {:?} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {}",
                r.format,
                r.run_id,
                r.index,
                r.cell,
                r.repetition,
                r.wall_seconds,
                r.peak_rss_bytes,
                r.exit_code,
                r.signal,
                r.termination,
                r.output,
                r.output_check,
                r.output_check_reason,
                r.outcome,
                r.cgroup_memory_peak_bytes,
                r.allocator,
                r.sampling,
                r.sha256,
                r.hostname,
                r.node,
                r.lost_reason,
                r.attempt
            )
        };
        let brief = b
            .read_run_folder_as::<RunRecordBrief>(&planned)
            .map(|(r, _)| kept(&r))
            .map_err(|e| e.to_string());
        let whole = b
            .read_run_folder_as::<RunRecord>(&planned)
            .map(|(r, _)| {
                // The whole record's kept fields, through the brief type.
                let text = serde_json::to_string(&r).unwrap();
                kept(&serde_json::from_str::<RunRecordBrief>(&text).unwrap())
            })
            .map_err(|e| e.to_string());
        (brief, whole)
    }

    #[test]
    fn a_brief_run_record_keeps_what_the_whole_one_has_and_fails_as_it_fails() {
        let dir = fixture_copy();
        let b = Bundle::open(dir.path()).unwrap();
        for index in 0..b.planned_runs().unwrap().count() {
            let (brief, whole) = brief_and_whole(&b, index);
            assert!(whole.is_ok(), "{whole:?}");
            assert_eq!(brief, whole);
        }
        let run = dir.path().join("runs/001-get_tensor-65536-r1/run.json");
        let plain: serde_json::Value = serde_json::from_slice(&std::fs::read(&run).unwrap()).unwrap();
        let spoilt: &[(&str, serde_json::Value)] = &[
            ("argv", serde_json::json!("hwr-exp")),
            ("argv", serde_json::json!([1])),
            ("workdir", serde_json::json!(null)),
            (
                "env",
                serde_json::json!({"policy": "inherit", "set": [["A"]], "unset": []}),
            ),
            (
                "env",
                serde_json::json!({"policy": "inherit", "set": [], "unset": [7]}),
            ),
            ("env", serde_json::json!({"set": [], "unset": []})),
            ("cpus-requested", serde_json::json!([-1])),
            ("cpus-effective", serde_json::json!("0")),
            ("pid", serde_json::json!(-1)),
            ("start", serde_json::json!(5)),
            ("user-seconds", serde_json::json!("1s")),
            ("error", serde_json::json!(7)),
            ("containment", serde_json::json!("chroot")),
            ("stray-processes-killed", serde_json::json!(-1)),
            ("runner-cpus", serde_json::json!(["a"])),
            ("cgroup-memory-source", serde_json::json!(1)),
            ("environment", serde_json::json!(5)),
            ("memory-samples", serde_json::json!("13")),
            ("shared-memory-left", serde_json::json!(3)),
            ("slurm", serde_json::json!("x")),
            ("artifacts", serde_json::json!({})),
            ("earlier-attempts", serde_json::json!(1)),
            ("format", serde_json::json!(99)),
            ("wall-seconds", serde_json::json!("0.2")),
        ];
        for (key, value) in spoilt {
            let mut doc = plain.clone();
            doc[*key] = value.clone();
            std::fs::write(&run, serde_json::to_vec(&doc).unwrap()).unwrap();
            let (brief, whole) = brief_and_whole(&b, 1);
            assert!(whole.is_err(), "{key} = {value}: {whole:?}");
            assert_eq!(brief, whole, "{key} = {value}");
        }
        for key in [
            "argv",
            "workdir",
            "env",
            "cpus-requested",
            "start",
            "end",
            "sha256",
        ] {
            let mut doc = plain.clone();
            doc.as_object_mut().unwrap().remove(key);
            std::fs::write(&run, serde_json::to_vec(&doc).unwrap()).unwrap();
            let (brief, whole) = brief_and_whole(&b, 1);
            assert!(whole.is_err(), "without {key}");
            assert_eq!(brief, whole, "without {key}");
        }
    }

    #[test]
    fn an_unsafe_run_id_stops_the_runs_with_its_place() {
        let text = plan_text(3, false).replace("\"001-r1\"", "\"../x\"");
        let (_d, b) = with_plan(&text);
        let items: Vec<_> = b.planned_runs().unwrap().collect();
        assert_eq!(items.len(), 2);
        let e = items[1].as_ref().unwrap_err();
        assert!(e.to_string().contains("runs[1].run-id"), "{e}");
    }

    #[test]
    fn dropping_the_runs_early_stops_the_reader() {
        let (_d, b) = with_plan(&plan_text(5000, false));
        let first: Vec<_> = b.planned_runs().unwrap().take(3).collect();
        assert_eq!(first.len(), 3);
        // Dropped above with thousands of runs unread: the reading thread was joined.
    }

    #[test]
    fn a_newer_plan_format_is_refused() {
        let (_d, b) = with_plan(&plan_text(2, false).replace("\"format\":1", "\"format\":7"));
        assert!(matches!(
            b.plan_header(),
            Err(ReadError::NewerFormat { found: 7, .. })
        ));
        let first = b.planned_runs().unwrap().next().unwrap();
        assert!(matches!(first, Err(ReadError::NewerFormat { found: 7, .. })));
    }

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

    #[test]
    fn versioned_reader_checks_the_key_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        #[derive(serde::Deserialize, Debug)]
        struct Doc {
            #[allow(dead_code)]
            format: u32,
        }
        std::fs::write(&p, r#"{"format": 1}"#).unwrap();
        assert!(read_versioned::<Doc>(&p, "format", 1).is_ok());
        std::fs::write(&p, r#"{"format": 2}"#).unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::NewerFormat {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with(&p.display().to_string()) && msg.contains("newer"),
            "{msg}"
        );
        assert!(e.reason().starts_with("written in format 2"), "{}", e.reason());
        std::fs::write(&p, r#"{"other": 1}"#).unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
        assert!(e.to_string().contains("no `format` format version key"), "{e}");
        std::fs::write(&p, r#"{"format": "1"}"#).unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
        assert!(matches!(e, ReadError::NoFormat { .. }), "{e}");
        std::fs::write(&p, "{").unwrap();
        let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
        assert!(e.to_string().contains("truncated JSON"), "{e}");
    }

    #[test]
    fn run_record_is_none_until_the_run_finished_and_commit_needs_40_hex() {
        let dir = tempfile::tempdir().unwrap();
        let info = serde_json::json!({
            "bundle-format": 1, "hwr-exp-version": "0.1.0", "experiment": "x", "status": "running",
            "created": "2026-11-30T00:00:00Z", "planned-runs": 1, "counts": {},
            "manifest-sha256": "", "manifest-path": "/x.toml", "runner-pid": 1
        });
        std::fs::write(dir.path().join("bundle.json"), info.to_string()).unwrap();
        let b = Bundle::open(dir.path()).unwrap();
        assert!(b.run_record("0000-x").unwrap().is_none());
        std::fs::create_dir_all(b.run_dir("0000-x")).unwrap();
        std::fs::write(b.run_dir("0000-x").join("run.json"), r#"{"format": 7}"#).unwrap();
        let e = b.run_record("0000-x").unwrap_err();
        assert!(matches!(e, ReadError::NewerFormat { found: 7, .. }), "{e}");

        assert_eq!(b.recorded_commit(), None, "no revision.txt");
        std::fs::write(b.path("revision.txt"), "no commit: not a git repository\n").unwrap();
        assert_eq!(b.recorded_commit(), None);
        let id = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(b.path("revision.txt"), format!("{id}\n")).unwrap();
        assert_eq!(b.recorded_commit().as_deref(), Some(id));
    }
}
