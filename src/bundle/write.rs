//! Writing a bundle: folder creation, atomic files, per-run records, status updates.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::format::*;
use crate::exec::{RunOutcome, Termination};
use crate::manifest::OutputFormat;
use crate::plan::PlannedRun;

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, then a rename.
/// A reader sees the old file or the new one, never a partial one.
///
/// # Errors
/// I/O errors creating, writing or renaming the temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// Like [`write_atomic`], with the content produced by `fill` through a buffered writer.
///
/// # Errors
/// As [`write_atomic`], and errors returned by `fill`.
pub fn write_atomic_with(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Mode 0644 (less the umask) like any other file, not the temporary file's 0600: bundles are
    // shared and checked in.
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)?;
    let mut out = io::BufWriter::new(tmp);
    fill(&mut out)?;
    let tmp = out.into_inner().map_err(|e| e.into_error())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Serializes `value` as pretty JSON (with a trailing newline) and writes it with [`write_atomic`].
///
/// # Errors
/// As [`write_atomic`]; serialization errors as `InvalidData`.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// sha256 of a file's bytes as lowercase hex, read in 64 KiB blocks.
///
/// # Errors
/// I/O errors opening or reading the file.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// sha256 (lowercase hex) of no bytes at all.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// sha256 of bytes as lowercase hex.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 3339 UTC text of a time, e.g. `2026-11-30T01:02:03.456Z`.
pub fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

/// Chooses a new bundle folder path `<results>/<experiment>/<YYYYMMDDTHHMMSSZ>-<4 hex>` (not created).
pub fn bundle_path(results_dir: &Path, experiment: &str, now: SystemTime) -> PathBuf {
    let stamp = jiff::Timestamp::try_from(now)
        .map(|t| t.strftime("%Y%m%dT%H%M%SZ").to_string())
        .unwrap_or_default();
    results_dir
        .join(experiment)
        .join(format!("{stamp}-{:04x}", fastrand::u16(..)))
}

/// Checks a run's stdout file: for JSON, exactly one JSON document (streamed, never loaded whole);
/// for text, anything non-empty is valid.
pub fn check_output(path: &Path, format: OutputFormat) -> (OutputCheck, Option<String>) {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return (OutputCheck::Invalid, Some(format!("cannot read output: {e}"))),
    };
    let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
    if empty {
        return (OutputCheck::Empty, None);
    }
    if format == OutputFormat::Text {
        return (OutputCheck::Valid, None);
    }
    let mut de = serde_json::Deserializer::from_reader(Utf8Checked::new(BufReader::new(file)));
    let result = serde::de::Deserialize::deserialize(&mut de).and_then(|serde::de::IgnoredAny| de.end());
    match result {
        Ok(()) => (OutputCheck::Valid, None),
        Err(e) if e.is_eof() && e.line() == 1 && e.column() == 0 => (OutputCheck::Empty, None),
        Err(e) => (OutputCheck::Invalid, Some(e.to_string())),
    }
}

/// A reader that fails with `InvalidData` at the first byte sequence that is not UTF-8.
/// (`serde_json` skips over string contents it ignores without checking them.)
struct Utf8Checked<R> {
    inner: R,
    /// Bytes of an incomplete character at the end of the previous read.
    carry: Vec<u8>,
}

impl<R: Read> Utf8Checked<R> {
    fn new(inner: R) -> Self {
        Utf8Checked {
            inner,
            carry: Vec::new(),
        }
    }
}

impl<R: Read> Read for Utf8Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut chunk = std::mem::take(&mut self.carry);
        chunk.extend_from_slice(&buf[..n]);
        match std::str::from_utf8(&chunk) {
            Ok(_) => {}
            Err(e) if e.error_len().is_none() && n > 0 => self.carry = chunk[e.valid_up_to()..].to_vec(),
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not UTF-8 (byte {} of the output)", e.valid_up_to()),
                ));
            }
        }
        Ok(n)
    }
}

/// How a run counts, from its termination and output check.
pub fn classify(outcome: &RunOutcome, check: OutputCheck, format: OutputFormat) -> Outcome {
    match outcome.termination {
        Termination::SpawnFailed => Outcome::SpawnFailed,
        Termination::Timeout => Outcome::Timeout,
        Termination::Interrupted => Outcome::Interrupted,
        Termination::Signaled => Outcome::Failed,
        Termination::Exited if outcome.exit_code != Some(0) => Outcome::Failed,
        Termination::Exited => match (format, check) {
            (_, OutputCheck::Valid) | (OutputFormat::Text, OutputCheck::Empty) => Outcome::Ok,
            _ => Outcome::InvalidOutput,
        },
    }
}

/// A bundle being written by one runner. Not shared between processes: the folder is created with
/// `create_dir` (fails when it exists) and holds a lock file with the runner's pid.
#[derive(Debug)]
pub struct BundleWriter {
    dir: PathBuf,
    info: BundleInfo,
    /// When bundle.json was last written; per-run count updates are written at most once a second
    /// (each rewrite is a new inode, which costs more than a short run on ext4).
    saved_at: std::time::Instant,
}

impl BundleWriter {
    /// Creates the bundle folder (and `runs/`), the lock file, and bundle.json with status `running`.
    ///
    /// # Errors
    /// `AlreadyExists` when the folder exists (another runner took the name); other I/O errors.
    pub fn create(dir: &Path, info: BundleInfo) -> io::Result<BundleWriter> {
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::create_dir(dir)?;
        fs::create_dir(dir.join(files::RUNS))?;
        BundleWriter::start(dir, info)
    }

    /// Opens an existing bundle for more runs (resume): takes the lock and sets status `running`.
    ///
    /// # Errors
    /// I/O errors writing the lock or bundle.json.
    pub fn reopen(dir: &Path, mut info: BundleInfo) -> io::Result<BundleWriter> {
        info.status = BundleStatus::Running;
        info.runner_pid = std::process::id();
        BundleWriter::start(dir, info)
    }

    /// Takes the lock of the existing folder `dir` and writes bundle.json from `info`.
    fn start(dir: &Path, info: BundleInfo) -> io::Result<BundleWriter> {
        let mut writer = BundleWriter {
            dir: dir.to_path_buf(),
            info,
            saved_at: std::time::Instant::now(),
        };
        writer.lock()?;
        writer.save_info()?;
        Ok(writer)
    }

    fn lock(&self) -> io::Result<()> {
        write_atomic(
            &self.dir.join(files::LOCK),
            format!("{}\n", std::process::id()).as_bytes(),
        )
    }

    /// The bundle folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// bundle.json as last written.
    pub fn info(&self) -> &BundleInfo {
        &self.info
    }

    /// Writes a file at the bundle's top level atomically (manifest.toml, plan.json, ...).
    ///
    /// # Errors
    /// As [`write_atomic`].
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        write_atomic(&self.dir.join(name), bytes)
    }

    /// Writes a JSON file at the bundle's top level atomically.
    ///
    /// # Errors
    /// As [`write_json_atomic`].
    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> io::Result<()> {
        write_json_atomic(&self.dir.join(name), value)
    }

    /// Writes a top-level file atomically, its content produced by `fill` (plan.json is streamed).
    ///
    /// # Errors
    /// As [`write_atomic_with`].
    pub fn write_streamed(
        &self,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        write_atomic_with(&self.dir.join(name), fill)
    }

    /// The folder of one run, `runs/<run-id>`.
    pub fn run_dir(&self, run: &PlannedRun) -> PathBuf {
        self.dir.join(files::RUNS).join(&run.run_id)
    }

    /// Creates (or empties, when a half-written run is redone) the run folder. Earlier attempts
    /// kept by `resume` (`attempts/`) stay.
    ///
    /// # Errors
    /// I/O errors.
    pub fn prepare_run_dir(&self, run: &PlannedRun) -> io::Result<PathBuf> {
        let dir = self.run_dir(run);
        match fs::create_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                for entry in fs::read_dir(&dir)? {
                    let entry = entry?;
                    if entry.file_name() == super::artifacts::ATTEMPTS {
                        continue;
                    }
                    if entry.file_type()?.is_dir() {
                        fs::remove_dir_all(entry.path())?;
                    } else {
                        fs::remove_file(entry.path())?;
                    }
                }
            }
            other => other?,
        }
        Ok(dir)
    }

    /// Records one finished run: checks its output, hashes its files, lists the files the run
    /// wrote into its folder (artifacts) and the earlier attempts kept there, writes run.json
    /// atomically (its presence marks the run finished) and updates the counts in bundle.json
    /// (written at most once a second while running, and always by [`BundleWriter::finish`]).
    /// No process of the run is alive by then ([`crate::exec::Executor::execute`] returns after
    /// the last one), so the folder does not change afterwards.
    ///
    /// # Errors
    /// I/O errors writing run.json or bundle.json.
    pub fn record_run(
        &mut self,
        run: &PlannedRun,
        outcome: &RunOutcome,
        format: OutputFormat,
    ) -> io::Result<RunRecord> {
        let dir = self.run_dir(run);
        let (output_check, output_check_reason) = if outcome.termination == Termination::SpawnFailed {
            (OutputCheck::Empty, None)
        } else {
            check_output(&dir.join(&run.output), format)
        };
        let mut sha256 = BTreeMap::new();
        for name in [run.output.as_str(), files::STDERR, files::MEMORY] {
            let path = dir.join(name);
            // Most of a short run's files are empty: their sha256 is known without reading them.
            let empty = fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0);
            if empty {
                sha256.insert(name.to_string(), EMPTY_SHA256.to_string());
            } else if path.exists() {
                sha256.insert(name.to_string(), sha256_file(&path)?);
            }
        }
        let own = [run.output.as_str(), files::STDERR, files::MEMORY, files::RUN];
        let (artifacts, earlier_attempts) = super::artifacts::scan_run_folder(&dir, &own)?;
        let record = RunRecord {
            format: BUNDLE_FORMAT,
            run_id: run.run_id.clone(),
            index: run.index,
            cell: run.cell.iter().cloned().collect(),
            repetition: run.repetition,
            argv: run.argv.clone(),
            workdir: run.workdir.display().to_string(),
            env: run.env.clone(),
            cpus_requested: run.cpus.clone(),
            cpus_effective: outcome.cpus_effective.clone(),
            pid: outcome.pid,
            start: rfc3339(outcome.started),
            end: rfc3339(outcome.ended),
            wall_seconds: outcome.wall_seconds,
            user_seconds: outcome.user_seconds,
            sys_seconds: outcome.sys_seconds,
            peak_rss_bytes: outcome.peak_rss_bytes,
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            termination: outcome.termination,
            error: outcome.error.clone(),
            output: run.output.clone(),
            output_check,
            output_check_reason,
            outcome: classify(outcome, output_check, format),
            containment: outcome.containment,
            stray_processes_killed: outcome.stray_processes_killed,
            runner_cpus: outcome.runner_cpus.clone(),
            cgroup_memory_peak_bytes: outcome.cgroup_memory_peak_bytes,
            memory_samples: outcome.memory_samples,
            sha256,
            artifacts,
            attempt: earlier_attempts.iter().map(|a| a.attempt).max().unwrap_or(0) + 1,
            earlier_attempts,
        };
        write_json_atomic(&dir.join(files::RUN), &record)?;
        *self.info.counts.entry(record.outcome).or_default() += 1;
        if self.saved_at.elapsed() >= std::time::Duration::from_secs(1) {
            self.save_info()?;
        }
        Ok(record)
    }

    /// Sets the final status and `finished` time, writes bundle.json and removes the lock.
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn finish(&mut self, status: BundleStatus, at: SystemTime) -> io::Result<()> {
        self.info.status = status;
        self.info.finished = Some(rfc3339(at));
        self.save_info()?;
        match fs::remove_file(self.dir.join(files::LOCK)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn save_info(&mut self) -> io::Result<()> {
        self.saved_at = std::time::Instant::now();
        write_json_atomic(&self.dir.join(files::BUNDLE), &self.info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_checks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        let check = |text: &str, f| {
            fs::write(&p, text).unwrap();
            check_output(&p, f).0
        };
        assert_eq!(check("{\"a\": 1}\n", OutputFormat::Json), OutputCheck::Valid);
        assert_eq!(check("", OutputFormat::Json), OutputCheck::Empty);
        assert_eq!(
            check("warning: x\n{\"a\": 1}", OutputFormat::Json),
            OutputCheck::Invalid
        );
        assert_eq!(check("{\"a\": 1} {}", OutputFormat::Json), OutputCheck::Invalid);
        assert_eq!(check("{\"a\": ", OutputFormat::Json), OutputCheck::Invalid);
        assert_eq!(check("anything", OutputFormat::Text), OutputCheck::Valid);
        fs::write(&p, b"{\"a\": \"\xff\"}").unwrap();
        assert_eq!(
            check_output(&p, OutputFormat::Json).0,
            OutputCheck::Invalid,
            "invalid UTF-8"
        );
        fs::write(&p, "{\"a\": \"\u{e9}\u{1f600}\"}".as_bytes()).unwrap();
        assert_eq!(
            check_output(&p, OutputFormat::Json).0,
            OutputCheck::Valid,
            "multi-byte characters"
        );
        assert_eq!(check("", OutputFormat::Text), OutputCheck::Empty);
    }

    #[test]
    fn atomic_write_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_json_atomic(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json_atomic(&p, &serde_json::json!({"a": 2})).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\n  \"a\": 2\n}\n");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o444, 0o444, "readable by everyone, not 0600: {mode:o}");
        assert_eq!(sha256_bytes(b""), EMPTY_SHA256);
        assert_eq!(
            sha256_bytes(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
