//! Commands on a bundle whose runs execute on Ray (DESIGN 8, docs/ray.md): `hwr-exp wait BUNDLE`
//! (attach to the bundle's driver and finish the bundle), `hwr-exp cancel BUNDLE` (stop the
//! driver, which cancels its tasks; the bundle ends interrupted), `resume`'s ownership rule (no
//! second driver while one runs) and the indexed task a Ray task runs on its node
//! (`hwr-exp task --index I BUNDLE`). The mechanics are in [`crate::runner::backend::ray`].

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::ArchiveError;
use super::engine::Cancelled;
use crate::bundle::lock::{BundleLock, LockError};
use crate::bundle::read::Bundle;
use crate::bundle::{BundleStatus, BundleWriter};
use crate::exec::CancelFlag;
use crate::manifest::Manifest;
use crate::runner::Runs;
use crate::runner::backend::ray::{self as rray, Driver, DriverRecord};
use crate::runner::backend::slurm::task::TaskEnd;
use crate::runner::session::{Finish, Session, SessionReport};

/// The bundle's latest driver, refusing a bundle without one or whose driver runs on another
/// host (its pid means nothing here).
fn driver_here(bundle: &Bundle) -> Result<DriverRecord, ArchiveError> {
    let dir = bundle.dir();
    let record = DriverRecord::latest(dir)
        .map_err(|e| ArchiveError::Refused(format!("{}: {e}", dir.display())))?
        .ok_or_else(|| {
            ArchiveError::Refused(format!(
                "{}: no ray driver recorded (ray/driver-0.json): nothing was submitted; resume it to submit its runs",
                dir.display()
            ))
        })?;
    if !record.on_this_host() {
        return Err(ArchiveError::Refused(format!(
            "{}: its ray driver (pid {}) runs on {}, not on this host: run this command there",
            dir.display(),
            record.pid,
            record.host
        )));
    }
    Ok(record)
}

/// `resume`'s ownership rule on Ray: refused while the bundle's latest driver still runs
/// (submitting again would run its runs twice at once).
///
/// # Errors
/// [`ArchiveError::Refused`] naming `wait` and `cancel`.
pub fn claim_for_resume(bundle: &Bundle) -> Result<(), ArchiveError> {
    let Ok(Some(record)) = DriverRecord::latest(bundle.dir()) else {
        return Ok(());
    };
    let dir = bundle.dir().display();
    if !record.on_this_host() {
        return Err(ArchiveError::Refused(format!(
            "{dir}: its ray driver (pid {}) ran on {}; resume it there, where hwr-exp can tell whether the driver still runs",
            record.pid, record.host
        )));
    }
    if record.alive() {
        return Err(ArchiveError::Refused(format!(
            "{dir}: its ray driver (pid {}) still runs this bundle's tasks; resuming now would run them twice. Wait for them with `hwr-exp wait {dir}` or stop them with `hwr-exp cancel {dir}`, then resume the runs that did not finish",
            record.pid
        )));
    }
    Ok(())
}

/// The Ray engine's verbs ([`super::engine::Engine`]).
pub struct Ray;

impl super::engine::Engine for Ray {
    /// A Ray task: claims `cpus-per-run` free CPUs of its node ([`crate::runner::task::run_task`]).
    fn run_task(
        &self,
        runs: Runs<'_>,
        index: usize,
        bundle: &Path,
        manifest: &Manifest,
    ) -> std::io::Result<TaskEnd> {
        crate::runner::task::run_task(runs, index, bundle, manifest.isolation.cpus_per_run)
    }

    fn wait(&self, dir: &Path, quiet: bool, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError> {
        wait(dir, quiet, cancel)
    }

    fn cancel(&self, dir: &Path) -> Result<Cancelled, ArchiveError> {
        cancel(dir)
    }
}

/// `hwr-exp wait BUNDLE` for a Ray bundle: takes its lock, counts the runs already recorded,
/// follows the latest driver's events for the rest (recording lost tasks), then finishes the
/// bundle as `run` does.
///
/// # Errors
/// [`ArchiveError::Refused`] for a bundle not `running` or without a driver on this host;
/// [`ArchiveError::Environment`] when a waiter holds it; session errors.
fn wait(dir: &Path, quiet: bool, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError> {
    let bundle = super::open(dir)?;
    let record = driver_here(&bundle)?;
    let lock = super::slurm::lock_for_waiting(&bundle)?;
    let prepared = (|| {
        let bundle = super::open(bundle.dir())?;
        if bundle.info().status != BundleStatus::Running {
            return Err(ArchiveError::Refused(format!(
                "{}: status is {}; nothing to wait for (resume an interrupted bundle)",
                bundle.dir().display(),
                bundle.info().status.as_str()
            )));
        }
        let (manifest, plan) = super::slurm::bundle_plan(&bundle)?;
        let before = bundle.provenance_doc()?.before;
        let indices = record
            .indices(bundle.dir())
            .map_err(|e| ArchiveError::Refused(e.to_string()))?;
        Ok((bundle, manifest, plan, before, indices))
    })();
    let (bundle, manifest, plan, before, indices) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = lock.release();
            return Err(e);
        }
    };
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    let mut info = bundle.info().clone();
    info.counts.clear();
    let mut writer = BundleWriter::reopen_while_tasks_run(bundle.dir(), info, lock).map_err(write_err)?;
    // Runs of earlier drivers (a resumed bundle) are counted as recorded; the driver's own runs
    // are counted as its events report them.
    for planned in bundle.planned_runs()? {
        let planned = planned?;
        if indices.binary_search(&planned.index).is_err()
            && let Ok(Some(r)) = bundle.run_record(&planned.run_id)
        {
            writer.count_run(&r).map_err(write_err)?;
        }
    }
    let results_dir = bundle.results_dir();
    let session = Session {
        plan: std::borrow::Cow::Borrowed(&plan),
        indices,
        writer: std::sync::Mutex::new(writer),
        launcher: &crate::exec::ProcessLauncher::default(),
        cancel,
        progress: crate::runner::progress::Collect::deferred(quiet),
        fail_fast: false,
        finish: Finish {
            results_dir: &results_dir,
            before: &before,
            quiet,
        },
        plan_json: None,
    };
    // Adaptive repetitions: further rounds need the cluster (the driver's address).
    let cluster = match plan.adaptive {
        Some(_) => match rray::preflight(&manifest.executor.ray) {
            Ok(cluster) => Some(rray::RayCluster {
                address: record.address.clone(),
                ..cluster
            }),
            Err(problems) => {
                crate::runner::progress::say(format_args!(
                    "warning: the adaptive rule cannot submit further rounds from here ({}); `hwr-exp resume` continues it",
                    problems.join("; ")
                ));
                None
            }
        },
        None => None,
    };
    let submit = cluster.as_ref().map(|cluster| rray::Submit {
        cluster,
        cpus_per_run: manifest.isolation.cpus_per_run,
        detach: false,
    });
    let driver = Driver { record, child: None };
    Ok(rray::wait_and_finish(session, driver, submit.as_ref())?)
}

/// `hwr-exp cancel BUNDLE` for a Ray bundle: writes the cancel marker, sends SIGTERM to the
/// driver (it cancels its tasks; their hwr-exp stops each run) and, when no waiter holds the
/// bundle, waits for the driver to exit and marks the bundle `interrupted` itself.
///
/// # Errors
/// [`ArchiveError::Refused`] for a driver on another host; write errors.
fn cancel(dir: &Path) -> Result<Cancelled, ArchiveError> {
    let bundle = super::open(dir)?;
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    if bundle.info().status != BundleStatus::Running {
        if let Ok(record) = driver_here(&bundle) {
            record.terminate();
        }
        return Ok(Cancelled::AlreadyFinished(
            bundle.info().status.as_str().to_string(),
        ));
    }
    let record = driver_here(&bundle)?;
    crate::bundle::write::write_cancel_marker(bundle.dir(), SystemTime::now()).map_err(write_err)?;
    record.terminate();
    match BundleLock::acquire(bundle.dir()) {
        Err(LockError::Held { .. }) => Ok(Cancelled::ByWaiter),
        Err(e) => Err(ArchiveError::Environment(e.to_string())),
        Ok(lock) => {
            let until = Instant::now() + rray::CANCEL_WAIT + Duration::from_secs(30);
            while record.alive() && Instant::now() < until {
                std::thread::sleep(rray::POLL);
            }
            super::engine::mark_interrupted(bundle.dir(), lock, |_, _| Ok(()))
        }
    }
}
