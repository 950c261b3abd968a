//! `hwr-exp resume BUNDLE [--allow-drift]`: finishes an interrupted, failed (the runner could not
//! write it: a full disk, a file-size limit) or abandoned bundle in place.
//!
//! 1. Before anything else the bundle's lock is taken ([`BundleLock::acquire`], an exclusive
//!    `flock` on `.lock`, held until the resume ends): when a live process (a runner, another
//!    resume) holds it, the resume is refused. Holding the lock, a bundle.json that says
//!    `running` is abandoned.
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
//!    recomputed from the run.json files kept. A run.json that exists but cannot be read (malformed,
//!    truncated, written in a newer format) refuses the resume with the reader's reason before
//!    anything is moved.
//! 5. Nothing in the bundle changes before every check has passed, the backend's preflight (Slurm:
//!    `scontrol ping`, limits, partition) and the Slurm claim (no task of the bundle still queued
//!    or running, squeue answering) included: a refused resume leaves the bundle exactly as it
//!    was, its lock file too ([`BundleLock::abandon`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use super::ArchiveError;
use super::rerun::{archived_manifest, base_dir_now};
use crate::bundle::lock::{BundleLock, EffectiveStatus, LockError};
use crate::bundle::read::ReadError;
use crate::bundle::{BundleStatus, BundleWriter, Outcome};
use crate::exec::{CancelFlag, Launcher, Termination};
use crate::runner::backend::{Backend, Job};
use crate::runner::session::{self, Finish, Session, SessionError, SessionReport};
use crate::timestamp::rfc3339;

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
/// drifted without `allow_drift`; [`ArchiveError::Refused`] when the bundle is complete or
/// running, a run.json cannot be read, its manifest.toml was modified, or the manifest expands to other run ids;
/// [`ArchiveError::Write`] when writing the bundle fails (it is then marked `failed`).
pub fn resume(
    dir: &Path,
    opts: &ResumeOptions,
    launcher: &dyn Launcher,
    cancel: &CancelFlag,
) -> Result<SessionReport, ArchiveError> {
    let bundle = super::open(dir)?;
    let lock = BundleLock::acquire(bundle.dir()).map_err(|e| match e {
        LockError::Held { .. } => ArchiveError::Environment(format!(
            "{e}; resume only an interrupted, failed or abandoned bundle (see `hwr-exp list`)"
        )),
        LockError::Io { .. } => ArchiveError::Environment(e.to_string()),
    })?;
    match prepare(&bundle, opts, &lock) {
        Ok(prepared) => {
            let Prepared {
                plan,
                todo,
                info,
                on_disk,
                claim,
                write_plan,
                redo,
                resumed_note,
                results_dir,
                before,
                executor: executor_config,
                cpus_per_run,
                fail_fast,
            } = prepared;
            let backend = Backend::of(executor_config.kind);
            let job = crate::runner::backend::Job {
                config: &executor_config,
                cpus_per_run,
                detach: false,
            };
            let ready = match backend.preflight(&results_dir, opts.quiet, &plan, &job) {
                Ok(ready) => ready,
                Err(p) => {
                    let _ = lock.abandon();
                    return Err(ArchiveError::Session(SessionError::Preflight(p)));
                }
            };
            // Every check passed: only now is the bundle changed (a refused resume leaves it as
            // it was).
            let changes = Changes {
                on_disk,
                claim,
                write_plan,
                redo,
                resumed_note,
            };
            let info = match changes.make(bundle.dir(), &lock, &plan, info, opts.quiet) {
                Ok(info) => info,
                Err(e) => {
                    let _ = lock.release();
                    return Err(e);
                }
            };
            // The working-tree capture compared above is gone: hand its memory back before
            // runs are forked from this process.
            crate::exec::return_freed_memory();
            let writer =
                BundleWriter::reopen(bundle.dir(), info, lock).map_err(|source| ArchiveError::Write {
                    bundle: bundle.dir().to_path_buf(),
                    source,
                })?;
            // An earlier `hwr-exp cancel` is forgotten: the runs are redone.
            crate::bundle::write::remove_cancel_marker(writer.dir()).map_err(|source| {
                ArchiveError::Write {
                    bundle: writer.dir().to_path_buf(),
                    source,
                }
            })?;
            let session = Session {
                plan: std::borrow::Cow::Borrowed(&plan),
                indices: todo,
                writer: std::sync::Mutex::new(writer),
                launcher,
                cancel,
                progress: crate::runner::progress::Collect::deferred(opts.quiet),
                fail_fast,
                finish: Finish {
                    results_dir: &results_dir,
                    before: &before,
                    quiet: opts.quiet,
                },
                plan_json: None,
            };
            let job = Job {
                config: &executor_config,
                cpus_per_run,
                detach: false,
            };
            Ok(crate::runner::experiment::execute(&ready, session, &job)?)
        }
        Err(e) => {
            // Refused before anything changed: the bundle is left as it was, its lock file too.
            let _ = lock.abandon();
            Err(e)
        }
    }
}

/// What [`prepare`] hands to the execution of a resume.
struct Prepared {
    plan: crate::plan::Plan,
    /// Plan indices of the runs to redo.
    todo: Vec<usize>,
    /// bundle.json to write when reopening (before [`Changes::make`]).
    info: crate::bundle::BundleInfo,
    /// bundle.json as read under the lock.
    on_disk: crate::bundle::BundleInfo,
    /// Slurm: arrays to record and held arrays to cancel.
    claim: Option<super::slurm::Claim>,
    /// plan.json is missing and is written again from the archived manifest.
    write_plan: bool,
    /// Plan indices of the runs to redo that have a folder, whose files move to `attempts/<n>/`
    /// (indices, not paths: a path per run is what made a large resume large).
    redo: Vec<usize>,
    /// The last note: when, by whom, how many runs.
    resumed_note: String,
    results_dir: std::path::PathBuf,
    /// The capture recorded when the bundle was created.
    before: crate::provenance::Snapshot,
    /// `[executor]` (its kind the bundle's backend) and `cpus-per-run` of the archived manifest
    /// (the Slurm backend submits with them).
    executor: crate::manifest::ExecutorConfig,
    cpus_per_run: usize,
    /// bundle.json `overrides` `fail-fast`: the resume stops after a run that is not ok too.
    fail_fast: bool,
}

/// What a resume changes in the bundle once every check passed ([`Changes::make`]).
struct Changes {
    on_disk: crate::bundle::BundleInfo,
    claim: Option<super::slurm::Claim>,
    write_plan: bool,
    redo: Vec<usize>,
    resumed_note: String,
}

impl Changes {
    /// Records and cancels what the Slurm claim found, writes plan.json again when it was
    /// missing, moves the files of the runs to redo into `attempts/<n>/`; gives the bundle.json
    /// to reopen the bundle with (`info` plus what was done).
    fn make(
        self,
        dir: &Path,
        lock: &BundleLock,
        plan: &crate::plan::Plan,
        mut info: crate::bundle::BundleInfo,
        quiet: bool,
    ) -> Result<crate::bundle::BundleInfo, ArchiveError> {
        let write_err = |source| ArchiveError::Write {
            bundle: dir.to_path_buf(),
            source,
        };
        if let Some(claim) = self.claim {
            let mut on_disk = self.on_disk;
            let notes = claim.apply(dir, lock, &mut on_disk, quiet)?;
            info.slurm = on_disk.slurm;
            info.notes.extend(notes);
        }
        if self.write_plan {
            let sha = crate::bundle::write::write_plan_file(dir, plan).map_err(write_err)?;
            info.setup_sha256
                .insert(crate::bundle::files::PLAN.to_string(), sha);
            info.notes.push(
                "plan.json was missing (the runner stopped before writing it, or could not write it): written again from the archived manifest".into(),
            );
        }
        let runs = dir.join(crate::bundle::files::RUNS);
        for &i in &self.redo {
            crate::bundle::write::keep_attempt(&runs.join(plan.run(i).run_id)).map_err(write_err)?;
        }
        info.notes.push(self.resumed_note);
        Ok(info)
    }
}

/// Steps 2 to 4 of the module docs, under the bundle's lock: checks the status, the manifest, the
/// plan and the working tree (Slurm: that no task of the bundle still runs), and computes the new
/// bundle.json and the runs to redo. Changes nothing in the bundle: [`Changes::make`] does, after
/// the backend's preflight.
fn prepare(
    bundle: &crate::bundle::read::Bundle,
    opts: &ResumeOptions,
    _held: &BundleLock,
) -> Result<Prepared, ArchiveError> {
    // Re-read under the lock: a runner or another resume may have finished it meanwhile.
    let bundle = super::open(bundle.dir())?;
    let info = bundle.info().clone();
    let previous = resumable_status(&bundle, &info)?;
    // Slurm: one owner of the bundle's tasks. Live arrays refuse the resume; arrays found by
    // their tag are recorded, held ones cancelled, once every check has passed.
    let claim = if info.is_slurm() {
        Some(super::slurm::claim_for_resume(&bundle, opts.quiet)?)
    } else {
        None
    };
    // Ray: no second driver while the bundle's driver runs.
    if info.executor.as_deref() == Some("ray") {
        super::ray::claim_for_resume(&bundle)?;
    }

    let provenance = bundle.provenance_doc()?;
    let (base_dir, moved) = base_dir_now(&bundle, Some(&provenance));
    let mut manifest = archived_manifest(&bundle, &base_dir)?;
    Backend::apply_recorded(&info, &mut manifest);
    let overrides = super::apply_recorded(&info, &mut manifest)?;
    let mut ctx = session::plan_context(bundle.dir())?;
    if let Some(seed) = info.seed {
        ctx.fallback_seed = seed;
    }
    // [environments]: the bundle's own locks, into the same (cached) venvs.
    if !manifest.environments.is_empty() {
        let locks = manifest
            .environments
            .iter()
            .filter_map(|(name, _)| {
                let path = bundle
                    .dir()
                    .join(crate::bundle::files::ENVIRONMENTS)
                    .join(name)
                    .join("lock.txt");
                Some((name.clone(), std::fs::read_to_string(path).ok()?))
            })
            .collect();
        let built = crate::runner::environments::build_all(
            &manifest,
            &crate::runner::environments::Locks::Given(locks, info.created.clone()),
            opts.quiet,
        )
        .map_err(|p| ArchiveError::Session(SessionError::Preflight(p)))?;
        ctx.environments = crate::runner::environments::context_map(&built);
    }
    let mut plan = crate::runner::planning::expand(&manifest, &ctx)?;
    // A runner stopped in its first seconds may not have written plan.json yet (the local runner
    // writes it while the first runs execute): it is written from the archived manifest.
    let write_plan =
        plan.adaptive.is_none() && matches!(bundle.plan_header(), Err(ReadError::Missing { .. }));
    super::slurm::recorded_rounds(&bundle, &mut plan)?;
    let recorded_len = check_run_ids(&bundle, &plan, write_plan)?;

    let results_dir = bundle.results_dir();
    crate::runner::preflight::check(&plan, &results_dir)
        .map_err(|p| ArchiveError::Session(SessionError::Preflight(p)))?;
    // The limits the bundle recorded (bundles made before they were: the manifest's), so that an
    // unchanged tree gives the same patch.
    let limits = provenance
        .before
        .patch_limits()
        .unwrap_or_else(|| session::patch_limits(&manifest.provenance));
    let now = crate::provenance::capture_limited(&plan.repo_start, &[&results_dir], limits);
    let mut changed = crate::provenance::differences(&provenance.before, &now);
    // A capture that recorded errors (a file it could not read, a git call that failed) holds
    // less than the tree: sameness cannot be confirmed against it, whatever the fields say.
    if let Some(first) = provenance.before.errors().first() {
        changed.push(format!(
            "the recorded capture is incomplete ({} error(s), first: {first})",
            provenance.before.errors().len()
        ));
    }
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

    let Sorted { counts, todo, redo } = sort_runs(&bundle, &plan, write_plan)?;
    let mut new_info = info.clone();
    new_info.counts = counts;
    new_info.finished = None;
    new_info.notes.extend(notes);
    let resumed_note = format!(
        "resumed at {} by hwr-exp {} (pid {}): {} of {} runs to run, previous status {}",
        rfc3339(SystemTime::now()),
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        todo.len(),
        recorded_len,
        previous.as_str()
    );
    Ok(Prepared {
        plan,
        todo,
        info: new_info,
        on_disk: info,
        claim,
        write_plan,
        redo,
        resumed_note,
        results_dir,
        before: provenance.before,
        executor: manifest.executor.clone(),
        cpus_per_run: manifest.isolation.cpus_per_run,
        fail_fast: overrides.is_some_and(|o| o.fail_fast),
    })
}

/// The status `bundle` (its bundle.json `info`, read under the lock) is resumed from: `running`
/// is abandoned, as this process holds the lock.
///
/// # Errors
/// [`ArchiveError::Refused`] when that status cannot be resumed (complete without lost runs, or
/// other than interrupted, failed or abandoned).
fn resumable_status(
    bundle: &crate::bundle::read::Bundle,
    info: &crate::bundle::BundleInfo,
) -> Result<EffectiveStatus, ArchiveError> {
    // This process holds the lock, so no other process writes the bundle: `running` is abandoned.
    let previous = match info.status {
        BundleStatus::Running => EffectiveStatus::Abandoned,
        other => EffectiveStatus::recorded(other),
    };
    match previous {
        // `failed`: the runner could not write the bundle (full disk, a limit) and marked it so.
        EffectiveStatus::Interrupted | EffectiveStatus::Abandoned | EffectiveStatus::Failed => {}
        // Slurm executor: a finished bundle with lost tasks (scancel, node failure) is resumed
        // for those runs alone.
        EffectiveStatus::Complete if info.counts.get(&Outcome::Lost).is_some_and(|&n| n > 0) => {}
        other => {
            return Err(ArchiveError::Refused(format!(
                "{}: status is {}; only an interrupted, failed or abandoned bundle can be resumed (use `hwr-exp rerun` for a new bundle)",
                bundle.dir().display(),
                other.as_str()
            )));
        }
    }
    Ok(previous)
}

/// Compares the run ids of `plan` (the archived manifest expanded again) with plan.json's, in
/// order; when plan.json is missing (`write_plan`) the plan's own run ids stand for it. Returns
/// the number of runs plan.json records.
///
/// # Errors
/// [`ArchiveError::Refused`] when the run ids differ (naming the first difference); reading
/// plan.json's errors.
fn check_run_ids(
    bundle: &crate::bundle::read::Bundle,
    plan: &crate::plan::Plan,
    write_plan: bool,
) -> Result<usize, ArchiveError> {
    // plan.json is streamed (a 1,000,000-run plan is hundreds of MB): first the run ids against
    // the re-expanded plan, later the run records.
    // (A missing plan.json is written from this plan once every check has passed: until then the
    // plan's own run ids stand for it.)
    let mut recorded_len = if write_plan { plan.len() } else { 0 };
    let mut mismatch = None;
    let recorded: Box<dyn Iterator<Item = _>> = if write_plan {
        Box::new(std::iter::empty())
    } else {
        Box::new(bundle.planned_runs()?)
    };
    for (i, entry) in recorded.enumerate() {
        let entry = entry?;
        recorded_len = i + 1;
        if mismatch.is_none() && (i >= plan.len() || plan.run(i).run_id != entry.run_id) {
            mismatch = Some((i, entry.run_id));
        }
    }
    if mismatch.is_none() && recorded_len < plan.len() {
        mismatch = Some((recorded_len, "none".into()));
    }
    if let Some((i, recorded_id)) = mismatch {
        let here = (i < plan.len()).then(|| plan.run(i).run_id);
        return Err(ArchiveError::Refused(format!(
            "{}: the archived manifest expands here to other runs than plan.json records (run {i}: {} here, {recorded_id} recorded; {} runs here, {recorded_len} recorded); use `hwr-exp rerun`",
            bundle.dir().display(),
            here.as_deref().unwrap_or("none"),
            plan.len(),
        )));
    }
    Ok(recorded_len)
}

/// The runs of a resume: outcomes of the runs kept, plan indices of the runs to redo (`todo`)
/// and of those among them whose folder's files move to `attempts/<n>/` (`redo`).
struct Sorted {
    counts: BTreeMap<Outcome, usize>,
    todo: Vec<usize>,
    redo: Vec<usize>,
}

/// Sorts the runs of `bundle` (plan.json's, else `plan`'s when plan.json is missing:
/// `write_plan`) into kept and redone (step 4 of the module docs). Reads only.
///
/// # Errors
/// [`ArchiveError::Refused`] when `runs/` cannot be listed or a run.json cannot be read; reading
/// plan.json's errors.
fn sort_runs(
    bundle: &crate::bundle::read::Bundle,
    plan: &crate::plan::Plan,
    write_plan: bool,
) -> Result<Sorted, ArchiveError> {
    // Finished runs are kept untouched; the rest are redone from an empty folder. A run.json that
    // exists but cannot be read (malformed, truncated, a newer format) refuses the resume before
    // anything is deleted: it may record a finished run this build does not understand.
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut todo = Vec::new();
    let mut redo = Vec::new();
    // One listing of runs/: a run without a folder never started and is redone without a look;
    // only the folders there are opened (a 1,000,000-run bundle stopped early has a few).
    let present = run_folders(bundle.dir())?;
    let run_ids: Box<dyn Iterator<Item = Result<String, ArchiveError>>> = if write_plan {
        Box::new((0..plan.len()).map(|i| Ok(plan.run(i).run_id)))
    } else {
        Box::new(
            bundle
                .planned_runs()?
                .map(|e| e.map(|e| e.run_id).map_err(ArchiveError::from)),
        )
    };
    for (i, run_id) in run_ids.enumerate() {
        let run_id = run_id?;
        if present
            .binary_search_by(|n| n.as_ref().cmp(run_id.as_str()))
            .is_err()
        {
            todo.push(i);
            continue;
        }
        match bundle.run_record(&run_id) {
            Ok(Some(r)) if !matches!(r.termination, Termination::Interrupted | Termination::Lost) => {
                *counts.entry(r.outcome).or_default() += 1;
            }
            Ok(_) => {
                todo.push(i);
                redo.push(i);
            }
            Err(e) => {
                return Err(ArchiveError::Refused(format!(
                    "{e}; resume keeps every finished run and deletes nothing it cannot read: use a hwr-exp that reads it, or move the run folder {} away to have the run redone",
                    bundle.run_dir(&run_id).display()
                )));
            }
        }
    }
    Ok(Sorted { counts, todo, redo })
}

/// The names of the folders in the bundle's `runs/` (one listing; none when there is no
/// `runs/`), sorted for lookup by run id. Names that are not UTF-8 are no run id and left out.
///
/// # Errors
/// [`ArchiveError::Refused`] when `runs/` cannot be listed, naming it.
fn run_folders(bundle: &Path) -> Result<Vec<Box<str>>, ArchiveError> {
    let runs = bundle.join(crate::bundle::files::RUNS);
    let refused = |e: std::io::Error| ArchiveError::Refused(format!("{}: cannot list: {e}", runs.display()));
    let entries = match std::fs::read_dir(&runs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(refused(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        if let Ok(name) = entry.map_err(refused)?.file_name().into_string() {
            names.push(name.into_boxed_str());
        }
    }
    names.sort_unstable();
    Ok(names)
}
