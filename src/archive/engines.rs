//! The registry of the batch engines' bundle verbs ([`super::engine::Engine`]): which engine a
//! bundle's `wait`, `cancel` and indexed task go to, by the executor the bundle records ([`of`]),
//! and the one indexed-task entry (`hwr-exp task --index I BUNDLE`, `hwr-exp slurm-task BUNDLE
//! INDEX`, [`task`]). Adding an engine: its module beside this one and one arm of [`of`].

use std::path::Path;

use super::ArchiveError;
use super::engine::Engine;
use crate::bundle::read::Bundle;
use crate::exec::{CancelFlag, Launcher};
use crate::runner::Runs;
use crate::runner::backend::Backend;
use crate::runner::backend::slurm::task::TaskEnd;

/// The engine of `bundle`, by bundle.json `executor`: Ray's verbs for `ray`, Slurm's for the rest
/// (Kubernetes pods run Slurm's task: the pod's CPUs are its allowed set; `wait` and `cancel`
/// refuse a bundle that is no Slurm one, naming it).
pub fn of(bundle: &Bundle) -> &'static dyn Engine {
    match Backend::recorded(bundle.info()) {
        Some(Backend::Ray) => &super::ray::Ray,
        Some(Backend::Local | Backend::Slurm | Backend::Kubernetes) | None => &super::slurm::Slurm,
    }
}

/// The engine of the bundle in `dir` ([`of`]).
///
/// # Errors
/// As [`super::open`].
pub fn of_dir(dir: &Path) -> Result<&'static dyn Engine, ArchiveError> {
    Ok(of(&super::open(dir)?))
}

/// Task `index` of the bundle in `dir` on this node, through its engine ([`Engine::run_task`]).
/// Takes no lock.
///
/// # Errors
/// [`ArchiveError::Refused`] for an index outside the plan; bundle read errors;
/// [`ArchiveError::Write`] when the run's files cannot be written.
pub fn task(
    dir: &Path,
    index: usize,
    launcher: &dyn Launcher,
    cancel: &CancelFlag,
) -> Result<TaskEnd, ArchiveError> {
    let bundle = super::open(dir)?;
    let engine = of(&bundle);
    let (manifest, plan) = super::slurm::bundle_plan(&bundle)?;
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
    engine
        .run_task(runs, index, bundle.dir(), &manifest)
        .map_err(|source| ArchiveError::Write {
            bundle: bundle.dir().to_path_buf(),
            source,
        })
}
