//! The bundle verbs of the batch engines behind one trait, [`Engine`]: `hwr-exp wait BUNDLE`,
//! `hwr-exp cancel BUNDLE` and the indexed task a node runs. Each engine's verbs are its own
//! module ([`super::slurm`], [`super::ray`]) over its mechanics in [`crate::runner::backend`];
//! [`super::engines`] chooses one by the executor the bundle records.

use std::path::Path;
use std::time::SystemTime;

use super::ArchiveError;
use crate::bundle::lock::BundleLock;
use crate::bundle::read::Bundle;
use crate::bundle::{BundleStatus, BundleWriter};
use crate::exec::CancelFlag;
use crate::manifest::Manifest;
use crate::runner::Runs;
use crate::runner::backend::slurm::task::TaskEnd;
use crate::runner::session::SessionReport;

/// What `hwr-exp cancel` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// A waiter holds the bundle: it saw the marker and finishes the bundle as interrupted.
    ByWaiter,
    /// No waiter: this process stopped the tasks and marked the bundle interrupted.
    Marked,
    /// The bundle was already finished (its status); its tasks were stopped anyway.
    AlreadyFinished(String),
}

/// A batch engine's verbs on a bundle it ran.
pub trait Engine: Sync {
    /// Runs plan index `index` of `bundle` on this node (`runs` over the bundle's plan, rebuilt
    /// from its archived `manifest`): [`crate::runner::task`]'s contract, with what the engine
    /// adds (Slurm's pre-timeout requeue).
    ///
    /// # Errors
    /// I/O errors writing the run's files.
    fn run_task(
        &self,
        runs: Runs<'_>,
        index: usize,
        bundle: &Path,
        manifest: &Manifest,
    ) -> std::io::Result<TaskEnd>;

    /// `hwr-exp wait BUNDLE`: attaches to the bundle's running tasks and finishes the bundle as
    /// `run` does.
    ///
    /// # Errors
    /// [`ArchiveError`]s of the engine (not its bundle, not running, a waiter already there).
    fn wait(&self, dir: &Path, quiet: bool, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError>;

    /// `hwr-exp cancel BUNDLE`: stops the bundle's tasks; the bundle ends `interrupted`.
    ///
    /// # Errors
    /// [`ArchiveError`]s of the engine.
    fn cancel(&self, dir: &Path) -> Result<Cancelled, ArchiveError>;
}

/// Marks the bundle in `dir` `interrupted` under `lock` after its tasks were stopped with no
/// waiter there: bundle.json's counts from the run.json files on disk, `more` for what the engine
/// adds to bundle.json (Slurm: arrays adopted by their tag), then finished now.
///
/// # Errors
/// Bundle read errors; [`ArchiveError::Write`] when bundle.json cannot be written.
pub(super) fn mark_interrupted(
    dir: &Path,
    lock: BundleLock,
    more: impl FnOnce(&Bundle, &mut BundleWriter) -> std::io::Result<()>,
) -> Result<Cancelled, ArchiveError> {
    let bundle = super::open(dir)?;
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    let mut info = bundle.info().clone();
    info.counts.clear();
    for planned in bundle.planned_runs()? {
        if let Ok(Some(r)) = bundle.run_record(&planned?.run_id) {
            *info.counts.entry(r.outcome).or_default() += 1;
        }
    }
    let mut writer = BundleWriter::reopen(bundle.dir(), info, lock).map_err(write_err)?;
    more(&bundle, &mut writer).map_err(write_err)?;
    writer
        .finish(BundleStatus::Interrupted, SystemTime::now())
        .map_err(write_err)?;
    Ok(Cancelled::Marked)
}
