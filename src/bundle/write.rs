//! Writing a bundle: folder creation, setup files, status updates (atomic files in
//! [`super::atomic`], run folders and run.json in [`super::run_folder`]).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

pub use super::atomic::FileError;
use super::atomic::{
    DIR_MODE, Durability, TEMPORARY_PREFIX, create_dir, on, remove_stale_temporaries, remove_temporaries_in,
    write_atomic, write_atomic_with, write_json, write_json_atomic,
};
use super::format::*;
use super::lock::{BundleLock, LockError};
use super::run_folder::run_record;
pub use super::run_folder::{NodeIds, TaskRunWriter, classify, keep_attempt, write_run_record};
use crate::exec::RunOutcome;
use crate::manifest::OutputFormat;
use crate::plan::PlannedRun;
use crate::provenance::host::HostFacts;
use crate::provenance::{ProvenanceDoc, Snapshot};
use crate::timestamp::rfc3339;

/// The files written once when a bundle is set up, besides manifest.toml (which bundle.json
/// `manifest-sha256` covers) and provenance.json (rewritten from memory when the bundle is
/// finished): their sha256 go into bundle.json `setup-sha256`.
pub const SETUP_FILES: [&str; 5] = [
    files::PLAN,
    files::HOST,
    files::REVISION,
    files::WORKING_TREE,
    files::PATCH,
];

/// Writes plan.json of `plan` into the bundle folder `dir` (streamed, [`super::plan_file`]; a
/// temporary name, then renamed) and returns its sha256, computed as it is written. The local
/// runner calls it from a thread of its own while the first runs execute, then records the sha256
/// ([`BundleWriter::record_setup_sha256`]).
///
/// # Errors
/// I/O errors, naming plan.json.
pub fn write_plan_file(dir: &Path, plan: &crate::plan::Plan) -> io::Result<String> {
    let path = dir.join(files::PLAN);
    let mut sha = String::new();
    write_atomic_with(&path, |out| {
        let mut hashed = crate::digest::Sha256Writer::new(out);
        super::plan_file::write_plan_json(plan, &mut hashed)?;
        sha = hashed.finish();
        Ok(())
    })
    .map_err(on(&path, "write"))?;
    Ok(sha)
}

/// The steps [`test_pause`] knows.
const PAUSE_STEPS: [&str; 6] = ["staged", "manifest", "plan", "host", "provenance", "published"];

/// Checks the test hook `HWR_TEST_PAUSE_AT` (see [`test_pause`]): unset, or one of its steps; a
/// misspelt step would never pause and the test waiting for it would hang.
///
/// # Errors
/// The value and the steps.
pub fn check_test_pause_setting() -> Result<(), String> {
    match std::env::var_os("HWR_TEST_PAUSE_AT") {
        None => Ok(()),
        Some(v) if PAUSE_STEPS.iter().any(|s| v == *s) => Ok(()),
        Some(v) => Err(format!(
            "HWR_TEST_PAUSE_AT={:?} (a test hook) is not one of {}",
            v.to_string_lossy(),
            PAUSE_STEPS.join(", ")
        )),
    }
}

/// Test hook, for the test suite only (not a user setting): when the environment variable
/// `HWR_TEST_PAUSE_AT` equals `step`, prints `paused at <step>` on stderr and sleeps until the
/// process is killed, so a test can kill the runner at an exact point of the bundle's setup.
/// Steps: `staged`, `manifest`, `plan`, `host`, `provenance`, `published`.
pub fn test_pause(step: &str) {
    if std::env::var_os("HWR_TEST_PAUSE_AT").is_some_and(|v| v == step) {
        let _ = writeln!(io::stderr().lock(), "paused at {step}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// A task Slurm ended without a run.json of the run's own ([`BundleWriter::record_lost`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LostTask {
    /// Slurm's account of the task (`CANCELLED (exit code 0:15)`, the log's `CANCELLED AT ...
    /// DUE TO PREEMPTION` line).
    pub reason: String,
    /// The node Slurm named, if any.
    pub node: Option<String>,
    /// The task's Slurm ids (`None` on other engines).
    pub task: Option<SlurmTaskIds>,
    /// When the task's run started (the task's log, `scontrol` `StartTime`), if known.
    pub started: Option<SystemTime>,
    /// When Slurm ended it (`EndTime`, the log's `CANCELLED AT`), else when it was found lost.
    pub ended: SystemTime,
}

/// The SHA-256 helpers run.json and bundle.json record with (defined in [`crate::digest`]).
pub use crate::digest::{sha256_bytes, sha256_file};

/// Chooses a new bundle folder path `<results>/<experiment>/<YYYYMMDDTHHMMSSZ>-<4 hex>` (not created).
pub fn bundle_path(results_dir: &Path, experiment: &str, now: SystemTime) -> PathBuf {
    let stamp = jiff::Timestamp::try_from(now)
        .map(|t| t.strftime("%Y%m%dT%H%M%SZ").to_string())
        .unwrap_or_default();
    results_dir
        .join(experiment)
        .join(format!("{stamp}-{:04x}", fastrand::u16(..)))
}

/// working-tree.patch up to this size (4 MiB) is read into memory and then written; a larger one
/// is copied in blocks from the capture's temporary file.
const PATCH_READ_WHOLE_BYTES: u64 = 4 * 1024 * 1024;

/// Writes the provenance files of a capture into the bundle folder `dir`: `revision.txt`,
/// `working-tree.txt`, `working-tree.patch` and `provenance.json` (without the after-run check),
/// each atomically.
///
/// # Errors
/// I/O errors creating, writing or renaming the files.
pub fn write_provenance(dir: &Path, before: &Snapshot) -> io::Result<()> {
    write_atomic(&dir.join(files::REVISION), before.revision_text().as_bytes())?;
    write_atomic(
        &dir.join(files::WORKING_TREE),
        before.working_tree_text().as_bytes(),
    )?;
    // From the capture's temporary file: a small patch read first (one descriptor open at a
    // time, as the other setup files), a larger one copied in blocks (never in memory whole).
    let patch = before.patch();
    if patch.len() <= PATCH_READ_WHOLE_BYTES {
        write_atomic(&dir.join(files::PATCH), &patch.read_all()?)?;
    } else {
        write_atomic_with(&dir.join(files::PATCH), |out| patch.copy_to(out).map(|_| ()))?;
    }
    write_json_atomic(&dir.join(files::PROVENANCE), &ProvenanceDoc::before_run(before))
}

/// Rewrites `provenance.json` in the bundle folder `dir` with `before`, the after-run check from
/// `after` and `drift` ([`ProvenanceDoc::after_run`]). Returns `drift`.
///
/// # Errors
/// I/O errors writing the file.
pub fn write_provenance_after(dir: &Path, before: &Snapshot, after: &Snapshot) -> io::Result<bool> {
    let doc = ProvenanceDoc::after_run(before, after);
    write_json_atomic(&dir.join(files::PROVENANCE), &doc)?;
    Ok(doc.drift == Some(true))
}

/// Writes `host.json` (pretty JSON, trailing newline) into the bundle folder `dir` atomically.
///
/// # Errors
/// I/O errors creating, writing or renaming the file.
pub fn write_host(dir: &Path, host: &HostFacts) -> io::Result<()> {
    write_json_atomic(&dir.join(files::HOST), host)
}

/// A bundle being written by one process. A new bundle is set up in a hidden staging folder next
/// to its final place ([`BundleWriter::stage`]) and renamed into place once its first files are
/// complete ([`BundleWriter::publish`]), so a bundle folder that can be seen always holds
/// bundle.json, manifest.toml, plan.json, host.json and the provenance files. The writer holds the
/// bundle's exclusive lock ([`BundleLock`], taken in the staging folder before anything else) from
/// creation (or reopening) until [`BundleWriter::finish`]; dropping the writer without finishing
/// releases the lock and leaves bundle.json `running`, which readers then show as abandoned.
/// Dropping a writer that was never published removes its staging folder.
#[derive(Debug)]
pub struct BundleWriter {
    dir: PathBuf,
    info: BundleInfo,
    /// The bundle's lock, `None` once released by [`BundleWriter::finish`].
    lock: Option<BundleLock>,
    /// When bundle.json was last written; per-run count updates are written at most once a second
    /// (each rewrite is a new inode, which costs more than a short run on ext4).
    saved_at: std::time::Instant,
    /// `true` while `dir` is the staging folder of a bundle not yet published.
    staged: bool,
}

impl BundleWriter {
    /// Creates and publishes a bundle at once ([`BundleWriter::stage`] then
    /// [`BundleWriter::publish`]): for callers with no first files to write.
    ///
    /// # Errors
    /// As [`BundleWriter::stage`] and [`BundleWriter::publish`].
    pub fn create(dir: &Path, info: BundleInfo) -> io::Result<BundleWriter> {
        let mut writer = BundleWriter::stage(dir, info)?;
        writer.publish(dir)?;
        Ok(writer)
    }

    /// Starts a new bundle whose final folder will be `dir`: creates a hidden staging folder
    /// `.tmp-<name>-<random>` beside it (same filesystem, so the later rename is atomic) with
    /// `runs/`, takes the bundle's lock inside it, and writes bundle.json with status `running`.
    /// [`BundleWriter::dir`] is the staging folder until [`BundleWriter::publish`].
    ///
    /// # Errors
    /// I/O errors naming the folder or file (a lock that cannot be taken in the new folder is
    /// reported as an I/O error too).
    pub fn stage(dir: &Path, info: BundleInfo) -> io::Result<BundleWriter> {
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(on(parent, "create folder"))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let staging = tempfile::Builder::new()
            .prefix(&format!("{TEMPORARY_PREFIX}{name}-"))
            .tempdir_in(parent)
            .map_err(on(parent, "create a staging folder in"))?
            .keep();
        let mut writer = BundleWriter {
            dir: staging.clone(),
            info,
            lock: None,
            saved_at: std::time::Instant::now(),
            staged: true,
        };
        // From here on, dropping `writer` removes the staging folder.
        fs::set_permissions(&staging, fs::Permissions::from_mode(DIR_MODE))
            .map_err(on(&staging, "set the mode of"))?;
        create_dir(&staging.join(files::RUNS))?;
        let lock = BundleLock::acquire(&staging).map_err(|e| match e {
            LockError::Io { path, source } => on(&path, "lock")(source),
            held => io::Error::new(io::ErrorKind::WouldBlock, held.to_string()),
        })?;
        writer.lock = Some(lock);
        writer.save_info(Durability::Synced)?;
        Ok(writer)
    }

    /// Moves a staged bundle to its final folder `dir` with one rename that never replaces an
    /// existing folder (`renameat2(RENAME_NOREPLACE)`), then syncs the parent folder. The lock
    /// file moves with the folder and stays locked. Does nothing for a published writer.
    ///
    /// # Errors
    /// `AlreadyExists` when `dir` exists (another runner took the name: choose another and call
    /// again); other I/O errors naming the folder.
    pub fn publish(&mut self, dir: &Path) -> io::Result<()> {
        if !self.staged {
            return Ok(());
        }
        rename_no_replace(&self.dir, dir).map_err(on(dir, "create bundle folder"))?;
        self.dir = dir.to_path_buf();
        self.staged = false;
        if self.info.status == BundleStatus::Running {
            *super::live::hold() = Some(dir.to_path_buf());
        }
        if let Some(lock) = &mut self.lock {
            lock.moved_to(dir);
        }
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            // The rename itself is durable only once the folder holding it is synced.
            fs::File::open(parent)
                .and_then(|f| f.sync_all())
                .map_err(on(parent, "sync folder"))?;
        }
        Ok(())
    }

    /// Opens an existing bundle for more runs (resume) under `lock`, taken by the caller before it
    /// read anything it relies on: removes the temporary files a killed writer left
    /// ([`remove_stale_temporaries`]), sets status `running` and `runner-pid` and writes
    /// bundle.json.
    ///
    /// # Errors
    /// I/O errors removing stale files or writing bundle.json, naming the file.
    pub fn reopen(dir: &Path, mut info: BundleInfo, lock: BundleLock) -> io::Result<BundleWriter> {
        remove_stale_temporaries(dir)?;
        info.status = BundleStatus::Running;
        info.runner_pid = std::process::id();
        BundleWriter::start(dir, info, lock)
    }

    /// [`BundleWriter::reopen`] for a bundle whose Slurm tasks may still be writing their run
    /// folders (`hwr-exp wait`): removes stale temporary files at the top level only, never in
    /// `runs/`, where a live task's atomic write may be under way; so no run folder is opened.
    ///
    /// # Errors
    /// As [`BundleWriter::reopen`].
    pub fn reopen_while_tasks_run(
        dir: &Path,
        mut info: BundleInfo,
        lock: BundleLock,
    ) -> io::Result<BundleWriter> {
        remove_temporaries_in(dir)?;
        info.status = BundleStatus::Running;
        info.runner_pid = std::process::id();
        BundleWriter::start(dir, info, lock)
    }

    /// Writes bundle.json from `info` into the existing folder `dir`, whose lock is `lock`.
    fn start(dir: &Path, info: BundleInfo, lock: BundleLock) -> io::Result<BundleWriter> {
        let mut writer = BundleWriter {
            dir: dir.to_path_buf(),
            info,
            lock: Some(lock),
            saved_at: std::time::Instant::now(),
            staged: false,
        };
        writer.save_info(Durability::Synced)?;
        Ok(writer)
    }

    /// The bundle folder (the staging folder until [`BundleWriter::publish`]).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// bundle.json as last written.
    pub fn info(&self) -> &BundleInfo {
        &self.info
    }

    /// Records the adaptive rule's state (bundle.json `adaptive`) and writes bundle.json durably.
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn set_adaptive(&mut self, record: super::format::AdaptiveRecord) -> io::Result<()> {
        self.info.adaptive = Some(record);
        self.save_info(Durability::Synced)
    }

    /// Rewrites plan.json with `fill` after an adaptive round was added (`planned` runs now): its
    /// sha256 in `setup-sha256` follows, and `planned-runs`. A plan.json that a run changed
    /// since it was written is noted first, as [`BundleWriter::finish`] would.
    ///
    /// # Errors
    /// I/O errors writing or reading plan.json or writing bundle.json.
    pub fn rewrite_plan(
        &mut self,
        planned: usize,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        for note in self.changed_setup_files() {
            if note.starts_with(files::PLAN) && !self.info.notes.contains(&note) {
                self.info.notes.push(note);
            }
        }
        let path = self.dir.join(files::PLAN);
        write_atomic_with(&path, fill)?;
        let sha =
            super::contained::sha256_in(&self.dir, Path::new(files::PLAN)).map_err(on(&path, "read"))?;
        self.info.setup_sha256.insert(files::PLAN.to_string(), sha);
        self.info.planned_runs = planned;
        self.save_info(Durability::Synced)
    }

    /// Writes a file at the bundle's top level atomically (manifest.toml, plan.json, ...).
    ///
    /// # Errors
    /// As [`write_atomic`].
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        write_atomic(&self.dir.join(name), bytes)
    }

    /// Writes `environments/<name>/<file>` for each `(file, bytes)`, creating the folder.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_environment(&self, name: &str, parts: &[(&str, &[u8])]) -> io::Result<()> {
        let dir = self.dir.join(files::ENVIRONMENTS).join(name);
        std::fs::create_dir_all(&dir)?;
        for (file, bytes) in parts {
            write_atomic(&dir.join(file), bytes)?;
        }
        Ok(())
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

    /// Creates the run folder. A run redone in place finds what an earlier attempt left there:
    /// it is kept under `attempts/<n>/` ([`keep_attempt`]), never deleted.
    ///
    /// # Errors
    /// I/O errors.
    pub fn prepare_run_dir(&self, run: &PlannedRun) -> io::Result<PathBuf> {
        let dir = self.run_dir(run);
        match create_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                keep_attempt(&dir)?;
            }
            other => other?,
        }
        Ok(dir)
    }

    /// Adds a recorded run (by [`write_run_record`], locally or in a Slurm array task) to
    /// bundle.json's counts (written at most once a second while running, and always by
    /// [`BundleWriter::finish`]).
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn count_run(&mut self, record: &RunRecord) -> io::Result<()> {
        *self.info.counts.entry(record.outcome).or_default() += 1;
        if self.saved_at.elapsed() >= std::time::Duration::from_secs(1) {
            self.save_info(Durability::Unsynced)?;
        }
        Ok(())
    }

    /// Records a Slurm array task that Slurm ended (or that left the queue) without a run.json of
    /// the run's own: a run.json with termination `lost`, `start`/`end`/`wall-seconds` from
    /// `lost.started` and `lost.ended` (when the task started and ended, as Slurm or the task's
    /// log tell; `wall-seconds` 0 only when the start is unknown), `lost-reason` = Slurm's account
    /// of the task and `hostname` = the node Slurm named, if any; counted as [`Outcome::Lost`].
    /// The run folder is created when the task never got to it; a run.json the task wrote before
    /// Slurm's kill reached it is replaced.
    ///
    /// # Errors
    /// I/O errors creating the folder or writing run.json / bundle.json.
    pub fn record_lost(
        &mut self,
        run: &PlannedRun,
        format: OutputFormat,
        lost: LostTask,
    ) -> io::Result<RunRecord> {
        let dir = self.run_dir(run);
        if !dir.exists() {
            create_dir(&dir)?;
        }
        let node = NodeIds {
            hostname: lost.node.clone(),
            node: lost.node,
            slurm: lost.task,
        };
        let mut outcome = RunOutcome::lost(lost.ended);
        if let Some(started) = lost.started.filter(|s| *s <= lost.ended) {
            outcome.started = started;
            outcome.wall_seconds = lost
                .ended
                .duration_since(started)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
        }
        let mut record = run_record(&dir, run, &outcome, format, node)?;
        record.lost_reason = Some(lost.reason);
        write_json(&dir.join(files::RUN), Durability::Unsynced, &record)?;
        self.count_run(&record)?;
        Ok(record)
    }

    /// Appends one submitted Slurm array to bundle.json `slurm.arrays` (and sets `executor =
    /// "slurm"`) and writes bundle.json durably at once, so that a crash between two submissions
    /// loses no job id.
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn add_slurm_array(&mut self, array: crate::slurm::SubmittedArray) -> io::Result<()> {
        self.info.executor = Some("slurm".into());
        self.info
            .slurm
            .get_or_insert_with(SlurmSubmissions::default)
            .arrays
            .push(array);
        self.save_info(Durability::Synced)
    }

    /// Sets the [`crate::slurm::ArrayState`] of the recorded arrays `job_ids` and writes
    /// bundle.json durably (the second phase of a submission: `released`).
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn set_slurm_array_state(
        &mut self,
        job_ids: &[u64],
        state: crate::slurm::ArrayState,
    ) -> io::Result<()> {
        if let Some(s) = &mut self.info.slurm {
            for a in s.arrays.iter_mut().filter(|a| job_ids.contains(&a.job_id)) {
                a.state = state;
            }
        }
        self.save_info(Durability::Synced)
    }

    /// Appends an sbatch refusal to bundle.json `slurm.refusals` and writes it durably.
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn add_sbatch_refusal(&mut self, refusal: SbatchRefusal) -> io::Result<()> {
        self.info.executor = Some("slurm".into());
        self.info
            .slurm
            .get_or_insert_with(SlurmSubmissions::default)
            .refusals
            .push(refusal);
        self.save_info(Durability::Synced)
    }

    /// Records sbatch's input variables of the submitting environment (bundle.json
    /// `slurm.cleared-env`, names only, or `slurm.kept-env` with values), merged with what earlier
    /// submissions recorded; writes bundle.json only when something is new.
    ///
    /// # Errors
    /// I/O errors writing bundle.json.
    pub fn record_sbatch_env(&mut self, vars: &[(String, String)], kept: bool) -> io::Result<()> {
        if vars.is_empty() {
            return Ok(());
        }
        let s = self.info.slurm.get_or_insert_with(SlurmSubmissions::default);
        let before = (s.cleared_env.clone(), s.kept_env.clone());
        for (k, v) in vars {
            if kept {
                s.kept_env.insert(k.clone(), v.clone());
            } else if !s.cleared_env.contains(k) {
                s.cleared_env.push(k.clone());
            }
        }
        if before == (s.cleared_env.clone(), s.kept_env.clone()) {
            return Ok(());
        }
        self.save_info(Durability::Synced)
    }

    /// Writes the batch script `slurm/<name>` atomically (mode [`super::atomic::FILE_MODE`]) and creates
    /// `slurm/logs/` (Slurm does not create the folder of `--output`). Returns the script's path.
    ///
    /// # Errors
    /// I/O errors creating the folders or writing the file.
    pub fn write_slurm_script(&self, name: &str, text: &str) -> io::Result<PathBuf> {
        let slurm = self.dir.join(files::SLURM);
        for d in [slurm.clone(), slurm.join("logs")] {
            match create_dir(&d) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        let path = slurm.join(name);
        write_atomic(&path, text.as_bytes())?;
        Ok(path)
    }

    /// Records the sha256 of the [`SETUP_FILES`] in bundle.json `setup-sha256` and writes
    /// bundle.json durably. Called once the setup files are written, before any run starts.
    ///
    /// # Errors
    /// I/O errors reading a setup file or writing bundle.json, naming the file.
    pub fn seal_setup_files(&mut self) -> io::Result<()> {
        for name in SETUP_FILES {
            // The files were just written by this runner and no run has started yet: a plain
            // open (one descriptor) reads them. plan.json may be written later, while the first
            // runs execute ([`write_plan_file`], [`BundleWriter::record_setup_sha256`]).
            let path = self.dir.join(name);
            if name == files::PLAN && !path.exists() {
                continue;
            }
            let sha = sha256_file(&path).map_err(on(&path, "read"))?;
            self.info.setup_sha256.insert(name.to_string(), sha);
        }
        self.save_info(Durability::Synced)
    }

    /// Records `sha256` as the setup-sha256 of the setup file `name` (plan.json written after the
    /// bundle was published, [`write_plan_file`]); bundle.json is written when next saved.
    pub fn record_setup_sha256(&mut self, name: &str, sha256: String) {
        self.info.setup_sha256.insert(name.to_string(), sha256);
    }

    /// The [`SETUP_FILES`] whose sha256 differs from `setup-sha256` (or that cannot be read), each
    /// with a note saying so: a process of some run edited, replaced or removed it.
    fn changed_setup_files(&self) -> Vec<String> {
        self.info
            .setup_sha256
            .iter()
            .filter_map(|(name, recorded)| {
                match super::contained::sha256_in(&self.dir, Path::new(name)) {
                    Ok(sha) if &sha == recorded => None,
                    Ok(sha) => Some(format!(
                        "{name} was changed while the runs executed (sha256 {sha}, {recorded} when the bundle was set up): not by hwr-exp"
                    )),
                    Err(e) => Some(format!(
                        "{name} cannot be read any more ({e}); it was written when the bundle was set up"
                    )),
                }
            })
            .collect()
    }

    /// Sets the final status and `finished` time, notes any setup file that changed since the
    /// setup ([`BundleWriter::seal_setup_files`]), writes bundle.json, then `checksums.sha256`
    /// ([`super::checksums::write_checksums`]), then removes the lock file and releases the lock
    /// ([`BundleLock::release`]).
    ///
    /// # Errors
    /// I/O errors writing bundle.json or the checksum list (the lock is then kept until the writer is dropped;
    /// a `failed` bundle is finished without the list when it cannot be written) or
    /// removing the lock file.
    pub fn finish(&mut self, status: BundleStatus, at: SystemTime) -> io::Result<()> {
        for note in self.changed_setup_files() {
            if !self.info.notes.contains(&note) {
                self.info.notes.push(note);
            }
        }
        self.info.status = status;
        self.info.finished = Some(rfc3339(at));
        self.save_info(Durability::Synced)?;
        match super::checksums::write_checksums(&self.dir) {
            Ok(()) => {}
            // A bundle marked `failed` because its files cannot be written (a full disk, a file-size
            // limit) keeps that mark even when the list cannot be written either: `resume` finishes
            // the bundle and writes the list then, and `verify` reports the list as missing until then.
            Err(_) if status == BundleStatus::Failed => {}
            Err(e) => return Err(e),
        }
        match self.lock.take() {
            Some(lock) => lock.release(),
            None => Ok(()),
        }
    }

    /// Finishes the bundle `failed` with `reason` in bundle.json `notes` (`failed: REASON`), so that
    /// a failed bundle always says why.
    ///
    /// # Errors
    /// As [`BundleWriter::finish`].
    pub fn fail(&mut self, reason: &str, at: SystemTime) -> io::Result<()> {
        let note = format!("failed: {reason}");
        if !self.info.notes.contains(&note) {
            self.info.notes.push(note);
        }
        self.finish(BundleStatus::Failed, at)
    }

    fn save_info(&mut self, durability: Durability) -> io::Result<()> {
        self.saved_at = std::time::Instant::now();
        // Held while bundle.json is written: a forced exit marks the bundle after this write.
        let mut live = super::live::hold();
        write_json(&self.dir.join(files::BUNDLE), durability, &self.info)?;
        let running = self.info.status == BundleStatus::Running && !self.staged;
        if running {
            *live = Some(self.dir.clone());
        } else if live.as_deref() == Some(self.dir.as_path()) {
            *live = None;
        }
        Ok(())
    }
}

impl Drop for BundleWriter {
    /// A bundle never published is removed with its staging folder (best effort; `list` skips
    /// hidden folders either way).
    fn drop(&mut self) {
        if self.staged {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            super::live::forget(&self.dir);
        }
    }
}

/// `rename(from, to)` for a folder, failing with `AlreadyExists` when `to` exists (a plain rename
/// would replace an empty folder). Uses `renameat2(RENAME_NOREPLACE)`; on filesystems without it,
/// checks for `to` first (a race with another runner choosing the same random name is then
/// possible, and harmless but for a lost empty folder).
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes `info` as the bundle.json of `dir` (durably) for a process that holds the bundle's
/// `lock` but no [`BundleWriter`]: `resume` and `cancel` recording an array found by its tag
/// before deciding what to do.
///
/// # Errors
/// I/O errors writing bundle.json.
pub fn rewrite_info(dir: &Path, _lock: &BundleLock, info: &BundleInfo) -> io::Result<()> {
    write_json(&dir.join(files::BUNDLE), Durability::Synced, info)
}

/// Writes the cancel marker `slurm/cancel-requested` of the bundle folder `dir` (`hwr-exp
/// cancel`): a waiter that sees it cancels the arrays and finishes the bundle as interrupted.
///
/// # Errors
/// I/O errors creating the folder or writing the file.
pub fn write_cancel_marker(dir: &Path, at: SystemTime) -> io::Result<()> {
    let slurm = dir.join(files::SLURM);
    match create_dir(&slurm) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    write_atomic(
        &slurm.join(files::CANCEL_REQUESTED),
        format!("{}\n", rfc3339(at)).as_bytes(),
    )
}

/// Removes the cancel marker of the bundle folder `dir` (a `resume` submits again); absent is fine.
///
/// # Errors
/// I/O errors other than the marker being absent.
pub fn remove_cancel_marker(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(files::SLURM).join(files::CANCEL_REQUESTED)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
