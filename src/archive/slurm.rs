//! Commands on a bundle whose runs execute on Slurm (DESIGN 8): `hwr-exp wait BUNDLE` (attach to
//! a detached submission and finish the bundle), `hwr-exp cancel BUNDLE` (cancel its arrays, mark
//! it interrupted) and the hidden `hwr-exp slurm-task BUNDLE INDEX` an array task runs on its node.
//! The mechanics are in [`crate::runner::slurm`]; this module opens the bundle and rebuilds its
//! plan from the archived manifest, as `resume` does.

use std::path::Path;
use std::time::SystemTime;

use super::ArchiveError;
use super::rerun::{archived_manifest, base_dir_now};
use crate::bundle::lock::{BundleLock, LockError};
use crate::bundle::read::Bundle;
use crate::bundle::{BundleStatus, BundleWriter};
use crate::exec::{CancelFlag, Launcher};
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::runner::Runs;
use crate::runner::backend::Backend;
use crate::runner::session::{self, Finish, Session, SessionReport};
use crate::runner::slurm::{self as rslurm, TaskEnd};
use crate::slurm::{CancelTarget, SlurmClient, SubmittedArray, TaskMap};

/// The archived manifest of `bundle` with the executor the bundle records, expanded again with the
/// bundle's folder and seed: the same plan the submitting hwr-exp wrote to plan.json.
///
/// # Errors
/// As [`archived_manifest`] and [`session::expand`].
pub fn bundle_plan(bundle: &Bundle) -> Result<(Manifest, Plan), ArchiveError> {
    let (base_dir, _) = base_dir_now(bundle, None);
    let mut manifest = archived_manifest(bundle, &base_dir)?;
    Backend::apply_recorded(bundle.info(), &mut manifest);
    super::apply_recorded(bundle.info(), &mut manifest)?;
    let mut ctx = session::plan_context(bundle.dir())?;
    if let Some(seed) = bundle.info().seed {
        ctx.fallback_seed = seed;
    }
    let plan = session::expand(&manifest, &ctx)?;
    Ok((manifest, plan))
}

/// The arrays a Slurm bundle recorded, or a refusal naming the bundle when it is not one.
fn recorded_arrays(bundle: &Bundle) -> Result<Vec<SubmittedArray>, ArchiveError> {
    match &bundle.info().slurm {
        Some(s)
            if Backend::recorded(bundle.info()).is_some_and(Backend::detaches) && !s.arrays.is_empty() =>
        {
            Ok(s.arrays.clone())
        }
        _ => Err(ArchiveError::Refused(format!(
            "{}: not a bundle submitted to slurm (no slurm.arrays in bundle.json)",
            bundle.dir().display()
        ))),
    }
}

/// `hwr-exp slurm-task BUNDLE INDEX`: runs plan index `index` of the bundle on this node
/// ([`rslurm::run_task`]). Takes no lock.
///
/// # Errors
/// [`ArchiveError::Refused`] for an index outside the plan; bundle read errors; [`ArchiveError::Write`]
/// when the run's files cannot be written.
pub fn task(
    dir: &Path,
    index: usize,
    launcher: &dyn Launcher,
    cancel: &CancelFlag,
    requeue: &std::sync::atomic::AtomicBool,
) -> Result<TaskEnd, ArchiveError> {
    let bundle = super::open(dir)?;
    let (_, plan) = bundle_plan(&bundle)?;
    if index >= plan.len() {
        return Err(ArchiveError::Refused(format!(
            "{}: plan index {index} is outside the plan ({} runs)",
            bundle.dir().display(),
            plan.len()
        )));
    }
    let runs = Runs {
        plan: &plan,
        launcher,
        cancel,
        progress: &crate::runner::progress::Quiet,
        fail_fast: false,
    };
    rslurm::run_task(runs, index, bundle.dir(), requeue).map_err(|source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    })
}

/// Takes the bundle's lock for a waiter, refusing when another process (a waiter) holds it.
fn lock_for_waiting(bundle: &Bundle) -> Result<BundleLock, ArchiveError> {
    BundleLock::acquire(bundle.dir()).map_err(|e| match e {
        LockError::Held { .. } => {
            ArchiveError::Environment(format!("{e}; another hwr-exp already waits for this bundle"))
        }
        LockError::Io { .. } => ArchiveError::Environment(e.to_string()),
    })
}

/// `hwr-exp wait BUNDLE`: attaches to a submitted (detached) Slurm bundle: takes its lock, waits
/// for every run's run.json with the progress display (recording lost tasks), then finishes it as
/// `run` does (provenance after, counts, status, exit code).
///
/// # Errors
/// [`ArchiveError::Refused`] for a bundle that is not a Slurm one or not `running`;
/// [`ArchiveError::Environment`] when a waiter holds it; session errors.
pub fn wait(dir: &Path, quiet: bool, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError> {
    let bundle = super::open(dir)?;
    recorded_arrays(&bundle)?;
    let lock = lock_for_waiting(&bundle)?;
    let prepared = (|| {
        let bundle = super::open(bundle.dir())?;
        if bundle.info().status != BundleStatus::Running {
            return Err(ArchiveError::Refused(format!(
                "{}: status is {}; nothing to wait for (resume an interrupted bundle)",
                bundle.dir().display(),
                bundle.info().status.as_str()
            )));
        }
        let arrays = recorded_arrays(&bundle)?;
        let (_, plan) = bundle_plan(&bundle)?;
        let before = bundle.provenance_doc()?.before;
        Ok((bundle, arrays, plan, before))
    })();
    let (bundle, arrays, plan, before) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = lock.release();
            return Err(e);
        }
    };
    let mut info = bundle.info().clone();
    // Every run.json is counted again as the wait finds it.
    info.counts.clear();
    let writer = BundleWriter::reopen(bundle.dir(), info, lock).map_err(|source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    })?;
    let indices: Vec<usize> = {
        let map = TaskMap::new(&arrays).map_err(|e| ArchiveError::Refused(e.to_string()))?;
        (0..plan.len()).filter(|&i| map.task(i).is_some()).collect()
    };
    let results_dir = bundle.results_dir();
    let session = Session {
        plan: std::borrow::Cow::Borrowed(&plan),
        indices,
        writer: std::sync::Mutex::new(writer),
        // No run executes in this process.
        launcher: &crate::exec::ProcessLauncher::default(),
        cancel,
        progress: crate::runner::progress::Collect::deferred(quiet),
        // The Slurm executor submits every run at once: `--fail-fast` is refused for it.
        fail_fast: false,
        finish: Finish {
            results_dir: &results_dir,
            before: &before,
            quiet,
        },
    };
    let waiting = rslurm::Waiting {
        client: SlurmClient::new(),
        arrays,
        shared_fs: rslurm::on_shared_fs(bundle.dir()).unwrap_or(false),
    };
    Ok(rslurm::wait_and_finish(session, &waiting)?)
}

/// What `hwr-exp cancel` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// A waiter holds the bundle: it saw the marker and finishes the bundle as interrupted.
    ByWaiter,
    /// No waiter: this process cancelled the arrays and marked the bundle interrupted.
    Marked,
    /// The bundle was already finished; its arrays were cancelled anyway (a no-op for Slurm).
    AlreadyFinished(String),
}

/// `hwr-exp cancel BUNDLE`: writes the cancel marker (`slurm/cancel-requested`), `scancel`s every
/// array of the bundle, and, when no waiter holds the bundle, waits until none of the tasks is
/// active and marks the bundle `interrupted` itself.
///
/// # Errors
/// [`ArchiveError::Refused`] for a bundle that is not a Slurm one; Slurm and write errors.
pub fn cancel(dir: &Path) -> Result<Cancelled, ArchiveError> {
    let bundle = super::open(dir)?;
    let arrays = recorded_arrays(&bundle)?;
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    let client = SlurmClient::new();
    let map = TaskMap::new(&arrays).map_err(|e| ArchiveError::Refused(e.to_string()))?;
    if bundle.info().status != BundleStatus::Running {
        let targets: Vec<CancelTarget> = map.job_ids().into_iter().map(CancelTarget::Job).collect();
        client
            .cancel(&targets)
            .map_err(|e| ArchiveError::Environment(e.to_string()))?;
        return Ok(Cancelled::AlreadyFinished(
            bundle.info().status.as_str().to_string(),
        ));
    }
    crate::bundle::write::write_cancel_marker(bundle.dir(), SystemTime::now()).map_err(write_err)?;
    let targets: Vec<CancelTarget> = map.job_ids().into_iter().map(CancelTarget::Job).collect();
    client
        .cancel(&targets)
        .map_err(|e| ArchiveError::Environment(e.to_string()))?;
    match BundleLock::acquire(bundle.dir()) {
        Err(LockError::Held { .. }) => Ok(Cancelled::ByWaiter),
        Err(e) => Err(ArchiveError::Environment(e.to_string())),
        Ok(lock) => {
            rslurm::cancel_arrays(&client, &map);
            let bundle = super::open(bundle.dir())?;
            let mut info = bundle.info().clone();
            info.counts.clear();
            for planned in bundle.plan()?.runs {
                if let Ok(Some(r)) = bundle.run_record(&planned.run_id) {
                    *info.counts.entry(r.outcome).or_default() += 1;
                }
            }
            let mut writer = BundleWriter::reopen(bundle.dir(), info, lock).map_err(write_err)?;
            writer
                .finish(BundleStatus::Interrupted, SystemTime::now())
                .map_err(write_err)?;
            Ok(Cancelled::Marked)
        }
    }
}
