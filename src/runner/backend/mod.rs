//! Where a session's runs execute: the one place that chooses between the backends (the
//! manifest's `[executor] kind`, `run --executor`, bundle.json `executor`). Nothing else matches
//! on [`ExecutorKind`].
//!
//! A backend answers, for a session:
//!
//! - **plan**: problems of the manifest that depend on where runs execute
//!   ([`Backend::plan_problems`]: a fixed CPU list outside the host's allowed set; any fixed list
//!   on Slurm) and whether the plan gives runs their CPUs ([`Backend::plans_cpus`]);
//! - **preflight**: the checks before a bundle exists beyond the common ones
//!   ([`Backend::preflight`]: the cluster answers), giving a [`Ready`] backend;
//! - **run**: execute or submit the session's runs and finish the bundle ([`crate::runner::experiment::execute`]);
//!   `resume` and `rerun` take the same path;
//! - **wait**, **cancel**: whether a session can be left running and attached to later
//!   ([`Backend::detaches`]: `run --detach`, `hwr-exp wait`, `hwr-exp cancel`: the engine's
//!   `archive::engine::Engine` over its folder here).
//!
//! # Adding a backend
//!
//! Its own module here (`backend/<name>.rs`, declared below), a variant of [`Backend`] and of
//! [`Ready`] with an arm in each `match` of this file (the compiler lists every one), and in the
//! manifest its `[executor] kind` value (`choices.rs`: the `ExecutorKind` variant, which
//! `run --executor` takes too; `manifest/raw.rs`; `manifest/validate/executor.rs`).
//! Nothing else matches on the backend: `run`, `rerun`, `resume`, `check`, `plan` and
//! `wait`/`cancel` ask this module.
//!
//! A batch engine's tasks all start the same entry point, `hwr-exp task --index I BUNDLE`
//! ([`super::task`]: the indexed-task contract); the Ray backend ([`ray`], a folder of its own)
//! is the model of a backend in one folder (docs/ray.md "Adding an engine").
//!
//! The local backend executes the runs in this process ([`super::execute`], through the
//! [`crate::exec::Launcher`] the session carries); the Slurm backend submits job arrays whose tasks
//! each run `hwr-exp slurm-task` with a launcher of their own ([`slurm`]); the Kubernetes
//! backend ([`kubernetes`]) submits one Indexed Job whose pods run the same task entry point
//! ([`crate::kubernetes`]: the Job, kubectl, reading pods) and watches its pods.

pub mod kubernetes;

pub mod local;

pub mod ray;

pub mod slurm;

use std::path::Path;

use crate::bundle::BundleInfo;
use crate::manifest::{ExecutorConfig, ExecutorKind, Manifest};
use crate::plan::PlanError;

/// Where the runs of a session execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// On this machine, under this process.
    Local,
    /// As Slurm job arrays, one array task per run (DESIGN 8).
    Slurm,
    /// On an existing Ray cluster, one fresh Ray task process per run ([`ray`]).
    Ray,
    /// As one Kubernetes Indexed Job, one completion index per run (DESIGN 8, [`crate::kubernetes`]).
    Kubernetes,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 4] = [Backend::Local, Backend::Slurm, Backend::Ray, Backend::Kubernetes];

    /// The backend of an `[executor] kind`.
    pub fn of(kind: ExecutorKind) -> Backend {
        match kind {
            ExecutorKind::Local => Backend::Local,
            ExecutorKind::Slurm => Backend::Slurm,
            ExecutorKind::Ray => Backend::Ray,
            ExecutorKind::Kubernetes => Backend::Kubernetes,
        }
    }

    /// The `[executor] kind` of this backend.
    pub fn kind(self) -> ExecutorKind {
        match self {
            Backend::Local => ExecutorKind::Local,
            Backend::Slurm => ExecutorKind::Slurm,
            Backend::Ray => ExecutorKind::Ray,
            Backend::Kubernetes => ExecutorKind::Kubernetes,
        }
    }

    /// Its name: the `kind` value, `run --executor`, bundle.json `executor`
    /// ([`ExecutorKind::as_str`]).
    pub fn name(self) -> &'static str {
        self.kind().as_str()
    }

    /// The backend named `name` ([`Backend::name`]).
    pub fn named(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The backend a bundle's runs executed on (bundle.json `executor`); `None` for a bundle
    /// without one (written before it was recorded) or with a name this build does not know.
    pub fn recorded(info: &BundleInfo) -> Option<Backend> {
        info.executor.as_deref().and_then(Backend::named)
    }

    /// Sets the `[executor] kind` of a bundle's archived `manifest` to the backend the bundle
    /// recorded ([`Backend::recorded`]; `run --executor` may have overridden the manifest), so
    /// that it expands to the plan the bundle ran.
    pub fn apply_recorded(info: &BundleInfo, manifest: &mut Manifest) {
        if let Some(backend) = Backend::recorded(info) {
            manifest.executor.kind = backend.kind();
        }
    }

    /// Whether the plan gives each run its CPUs (from `[isolation] cpus`, the job slots): locally
    /// yes; on Slurm each task runs on the CPUs of its allocation (DESIGN 8) and `jobs` is the
    /// array throttle.
    pub fn plans_cpus(self) -> bool {
        match self {
            Backend::Local => true,
            Backend::Slurm | Backend::Ray | Backend::Kubernetes => false,
        }
    }

    /// The manifest's problems that depend on where its runs execute, located at their keys,
    /// found before the plan is expanded: locally, CPUs of `[isolation] cpus` outside `allowed`
    /// (this process's allowed set, [`super::preflight::cpus_outside_allowed_set`]); on Slurm, any
    /// fixed CPU list (possible when `run --executor slurm` overrides a local manifest).
    pub fn plan_problems(self, manifest: &Manifest, allowed: &[usize]) -> Vec<PlanError> {
        match self {
            Backend::Local => super::preflight::cpus_outside_allowed_set(manifest, allowed),
            Backend::Slurm => slurm::fixed_cpus_problem(manifest).into_iter().collect(),
            Backend::Ray => ray::fixed_cpus_problem(manifest).into_iter().collect(),
            Backend::Kubernetes => crate::kubernetes::plan_problems(manifest),
        }
    }

    /// Whether a session can be left running (`run --detach`), attached to (`hwr-exp wait`) and
    /// cancelled from elsewhere (`hwr-exp cancel`): its runs do not depend on this process.
    pub fn detaches(self) -> bool {
        match self {
            Backend::Local => false,
            Backend::Slurm | Backend::Ray => true,
            // Not yet: `wait` and `cancel` are Slurm's and Ray's (docs/kubernetes.md).
            Backend::Kubernetes => false,
        }
    }

    /// Where this process holds its runs when that is not inside the runner's own cgroup, and
    /// why ([`crate::exec::placement_note`]): locally the session warns and notes it; on Slurm the
    /// runs are the tasks' (each task's runner says so in its own output).
    pub fn containment_note(self) -> Option<&'static str> {
        match self {
            Backend::Local => crate::exec::placement_note(),
            Backend::Slurm | Backend::Ray | Backend::Kubernetes => None,
        }
    }

    /// The backend's own checks before a bundle exists (after the common ones,
    /// [`super::preflight::check`]): locally none; on Slurm the cluster must answer
    /// ([`slurm::preflight`], which warns unless `quiet` about folders the nodes may not
    /// reach, and which refuses a request above the partition's limits).
    ///
    /// # Errors
    /// One message per problem (exit 3 through [`SessionError::Preflight`](crate::runner::session::SessionError::Preflight)).
    pub fn preflight(
        self,
        results_dir: &Path,
        quiet: bool,
        plan: &crate::plan::Plan,
        job: &Job<'_>,
    ) -> Result<Ready, Vec<String>> {
        Ok(match self {
            Backend::Local => Ready::Local,
            Backend::Slurm => {
                let request = slurm::Request {
                    config: &job.config.slurm,
                    timeout: plan.timeout,
                    grace: plan.grace,
                    cpus_per_task: job.cpus_per_run,
                };
                Ready::Slurm(slurm::preflight(results_dir, quiet, &request)?)
            }
            Backend::Ray => Ready::Ray(ray::preflight(&job.config.ray)?),
            Backend::Kubernetes => Ready::Kubernetes(crate::kubernetes::preflight(&job.config.kubernetes)?),
        })
    }
}

/// A backend whose preflight passed, with what it found.
#[derive(Debug, Clone)]
pub enum Ready {
    /// [`Backend::Local`].
    Local,
    /// [`Backend::Slurm`], with the cluster as its preflight found it.
    Slurm(slurm::Cluster),
    /// [`Backend::Ray`], with the cluster's address and the driver's Python.
    Ray(ray::RayCluster),
    /// [`Backend::Kubernetes`], with kubectl as its preflight found it.
    Kubernetes(crate::kubernetes::Cluster),
}

/// The manifest's choices for the backend of one session.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// `[executor]`.
    pub config: &'a ExecutorConfig,
    /// `[isolation] cpus-per-run` (Slurm: `--cpus-per-task`).
    pub cpus_per_run: usize,
    /// Return once the runs are handed over, without waiting (`run --detach`; only where
    /// [`Backend::detaches`]).
    pub detach: bool,
}

impl<'a> Job<'a> {
    /// The choices of `manifest`, not detached.
    pub fn of(manifest: &'a Manifest) -> Job<'a> {
        Job {
            config: &manifest.executor,
            cpus_per_run: manifest.isolation.cpus_per_run,
            detach: false,
        }
    }
}

impl Ready {
    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            Ready::Local => Backend::Local,
            Ready::Slurm(_) => Backend::Slurm,
            Ready::Ray(_) => Backend::Ray,
            Ready::Kubernetes(_) => Backend::Kubernetes,
        }
    }
}
