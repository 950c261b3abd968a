//! `hwr-exp resume BUNDLE [--allow-drift]`: finishes an interrupted or abandoned bundle in place.
//!
//! 1. The bundle folder is locked with `flock` (so two resumes exclude each other) and its runner
//!    must be gone: `.lock`'s pid is not a live hwr-exp (see [`super::liveness`]).
//! 2. The archived manifest.toml (its sha256 checked) is expanded again with the bundle's own folder
//!    and recorded seed; the run ids must equal plan.json's, in order.
//! 3. The working tree is captured (the results folder excluded) and compared with
//!    provenance.json; any difference refuses the resume unless `allow_drift`, which records it
//!    in bundle.json `notes` and, after the runs, in provenance.json (`drift`).
//! 4. Runs with a run.json whose termination is not `interrupted` are kept untouched; every other
//!    run is redone, in plan order. The files of its interrupted or lost attempt (partial output
//!    is data: the built-in probe prints what it has on SIGTERM) are first moved to
//!    `runs/<run-id>/attempts/<n>/`, n = 1 for the first kept attempt; the new run.json lists them
//!    (`earlier-attempts`) and says which attempt it is (`attempt`). bundle.json `counts` are
//!    recomputed from the run.json files kept.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::SystemTime;

use super::ArchiveError;
use super::liveness::{EffectiveStatus, effective_status, holder_pid};
use super::rerun::{archived_manifest, base_dir_now};
use crate::bundle::artifacts::ATTEMPTS;
use crate::bundle::write::rfc3339;
use crate::bundle::{BundleWriter, Outcome};
use crate::exec::{CancelFlag, Executor, Termination};
use crate::runner::session::{self, Finish, SessionError, SessionReport, execute_and_finish};

/// Choices of one resume.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    /// Run even when the working tree differs from the recorded provenance (recorded as a note).
    pub allow_drift: bool,
    /// No progress output.
    pub quiet: bool,
}

/// Resumes a bundle (see the module docs). Returns the report of the finished session; its
/// `counts` and `planned` cover the whole bundle, kept runs included.
///
/// # Errors
/// [`ArchiveError::Environment`] when a live runner or another resume holds the bundle or the tree
/// drifted without `allow_drift`; [`ArchiveError::Refused`] when the bundle is not interrupted or
/// abandoned, its manifest.toml was modified, or the manifest expands to other run ids;
/// [`ArchiveError::Write`] when writing the bundle fails (it is then marked `failed`).
pub fn resume(
    dir: &Path,
    opts: &ResumeOptions,
    executor: &dyn Executor,
    cancel: &CancelFlag,
) -> Result<SessionReport, ArchiveError> {
    let bundle = super::open(dir)?;
    let folder = fs::File::open(bundle.dir()).map_err(|e| ArchiveError::BadPath {
        path: dir.to_path_buf(),
        message: format!("cannot open: {e}"),
    })?;
    // Held until this function returns (the fd is closed on drop).
    if let Err(e) = rustix::fs::flock(&folder, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        return Err(ArchiveError::Environment(format!(
            "{}: another hwr-exp resume holds this bundle ({e})",
            bundle.dir().display()
        )));
    }
    // Re-read under the lock: a concurrent resume may have finished it meanwhile.
    let bundle = super::open(bundle.dir())?;
    let info = bundle.info().clone();
    match effective_status(bundle.dir(), &info) {
        EffectiveStatus::Interrupted | EffectiveStatus::Abandoned => {}
        EffectiveStatus::Running => {
            return Err(ArchiveError::Environment(format!(
                "{}: a live runner (pid {}) holds this bundle (.lock)",
                bundle.dir().display(),
                holder_pid(bundle.dir(), &info)
            )));
        }
        other => {
            return Err(ArchiveError::Refused(format!(
                "{}: status is {}; only an interrupted or abandoned bundle can be resumed (use `hwr-exp rerun` for a new bundle)",
                bundle.dir().display(),
                other.as_str()
            )));
        }
    }

    let provenance = bundle.provenance_doc()?;
    let (base_dir, moved) = base_dir_now(&bundle, Some(&provenance));
    let manifest = archived_manifest(&bundle, &base_dir)?;
    let mut ctx = session::plan_context(bundle.dir())?;
    if let Some(seed) = info.seed {
        ctx.fallback_seed = seed;
    }
    let plan = session::expand(&manifest, &ctx)?;
    let recorded = bundle.plan()?.runs;
    let mismatch = (0..plan.len().max(recorded.len()))
        .find(|&i| i >= plan.len() || i >= recorded.len() || plan.run(i).run_id != recorded[i].run_id);
    if let Some(i) = mismatch {
        let here = (i < plan.len()).then(|| plan.run(i).run_id);
        return Err(ArchiveError::Refused(format!(
            "{}: the archived manifest expands here to other runs than plan.json records (run {i}: {} here, {} recorded; {} runs here, {} recorded); use `hwr-exp rerun`",
            bundle.dir().display(),
            here.as_deref().unwrap_or("none"),
            recorded.get(i).map_or("none", |r| r.run_id.as_str()),
            plan.len(),
            recorded.len()
        )));
    }

    let results_dir = bundle.results_dir();
    crate::runner::preflight::check(&manifest, &plan, &results_dir, &ctx.allowed_cpus)
        .map_err(|p| ArchiveError::Session(SessionError::Preflight(p)))?;
    let repo_start = manifest
        .provenance
        .repo
        .clone()
        .unwrap_or_else(|| manifest.base_dir.clone());
    let now = crate::provenance::capture_excluding(&repo_start, &[&results_dir]);
    let changed = crate::provenance::differences(&provenance.before, &now);
    let mut notes: Vec<String> = moved.into_iter().collect();
    if !changed.is_empty() {
        if !opts.allow_drift {
            return Err(ArchiveError::Environment(format!(
                "the working tree differs from the recorded provenance ({}); commit or stash to match it, or resume with --allow-drift (the drift is recorded)",
                changed.join(", ")
            )));
        }
        notes.push(format!(
            "resumed with --allow-drift: the working tree differed from the recorded provenance: {}",
            changed.join(", ")
        ));
    }

    // Finished runs are kept untouched; the rest are redone from an empty folder.
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut todo = Vec::new();
    for (i, entry) in recorded.iter().enumerate() {
        match bundle.run_record(&entry.run_id) {
            Ok(Some(r)) if r.termination != Termination::Interrupted => {
                *counts.entry(r.outcome).or_default() += 1;
            }
            _ => todo.push(i),
        }
    }
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    for &i in &todo {
        keep_attempt(&bundle.run_dir(&recorded[i].run_id)).map_err(write_err)?;
    }
    let mut new_info = info.clone();
    new_info.counts = counts;
    new_info.finished = None;
    new_info.notes.extend(notes);
    new_info.notes.push(format!(
        "resumed at {} by hwr-exp {} (pid {}): {} of {} runs to run, previous status {}",
        rfc3339(SystemTime::now()),
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        todo.len(),
        recorded.len(),
        effective_status(bundle.dir(), &info).as_str()
    ));
    let writer = BundleWriter::reopen(bundle.dir(), new_info).map_err(write_err)?;
    let finish = Finish {
        repo_start: &repo_start,
        results_dir: &results_dir,
        before: &provenance.before,
        quiet: opts.quiet,
    };
    Ok(execute_and_finish(
        &manifest, &plan, &todo, writer, executor, cancel, &finish,
    )?)
}

/// Moves every entry of the run folder `run_dir` except `attempts/` into `attempts/<n>/`, with n
/// one more than the highest attempt kept there (1 for the first). Nothing happens when the
/// folder does not exist or holds nothing else.
///
/// # Errors
/// I/O errors reading the folder, creating `attempts/<n>/` or renaming into it.
fn keep_attempt(run_dir: &Path) -> std::io::Result<()> {
    let entries = match fs::read_dir(run_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut moving = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_name() != ATTEMPTS {
            moving.push(entry.file_name());
        }
    }
    if moving.is_empty() {
        return Ok(());
    }
    let attempts = run_dir.join(ATTEMPTS);
    let last = match fs::read_dir(&attempts) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .max()
            .unwrap_or(0),
        Err(_) => 0,
    };
    let folder = attempts.join((last + 1).to_string());
    fs::create_dir_all(&folder)?;
    for name in moving {
        fs::rename(run_dir.join(&name), folder.join(&name))?;
    }
    Ok(())
}
