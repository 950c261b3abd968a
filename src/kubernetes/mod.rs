//! The kubernetes executor (DESIGN 8, docs/kubernetes.md): a session's runs as one Kubernetes
//! Indexed Job, one completion index a run, each pod running the task entry point that Slurm's
//! array tasks run, the bundle on a PersistentVolumeClaim the manifest names.
//!
//! - [`job`]: the Job, typed with k8s-openapi (`plan --format k8s` prints it);
//! - [`kubectl`]: the `kubectl` calls (apply, get pods, delete);
//! - [`watch`]: submit and watch the pods, runs gone without run.json recorded `lost`.
//!
//! Registered as [`crate::runner::backend::Backend::Kubernetes`].

pub mod job;
pub mod kubectl;
pub mod watch;

use std::path::Path;
use std::time::SystemTime;

use crate::manifest::{CpuSelection, KubernetesConfig, Manifest};
use crate::plan::PlanError;
use crate::runner::session::SessionError;

/// What the kubernetes preflight found: the kubectl to submit with and the context it uses.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// kubectl with the manifest's context and namespace.
    pub kubectl: kubectl::Kubectl,
    /// The context kubectl uses (the manifest's, else kubectl's current context).
    pub context: String,
}

/// The manifest's problems on Kubernetes found before the plan is expanded (also when `run
/// --executor kubernetes` overrides a local manifest): a fixed CPU list (Kubernetes places each
/// pod) and adaptive repetitions (the Job is submitted whole).
pub fn plan_problems(manifest: &Manifest) -> Vec<PlanError> {
    let mut problems = Vec::new();
    if let CpuSelection::List(_) = manifest.isolation.cpus {
        problems.push(PlanError {
            key: "isolation.cpus".into(),
            message: "a fixed CPU list cannot be used with the kubernetes executor: each pod runs on the CPUs Kubernetes gives it".into(),
            help: Some("write cpus = \"auto\" and set cpus-per-run (the pod's CPU request and limit)".into()),
        });
    }
    if manifest.schedule.adaptive.is_some() {
        problems.push(PlanError {
            key: "schedule.repetitions".into(),
            message: "adaptive repetitions cannot be used with the kubernetes executor yet: it submits the whole plan as one Indexed Job".into(),
            help: Some("give a fixed number, like repetitions = 10, or run with --executor local".into()),
        });
    }
    problems
}

/// The kubernetes checks before a bundle exists: `image` and `volume` are set and kubectl answers
/// with a context (the manifest's `context`, else its current context).
///
/// # Errors
/// One message per problem.
pub fn preflight(config: &KubernetesConfig) -> Result<Cluster, Vec<String>> {
    let missing = job::missing_keys(config);
    if !missing.is_empty() {
        return Err(vec![format!(
            "the kubernetes executor needs [executor] {}: the pods' container image (with hwr-exp on its PATH) and the PersistentVolumeClaim holding the results folder (docs/kubernetes.md)",
            missing.join(" and ")
        )]);
    }
    let kubectl = kubectl::Kubectl {
        context: config.context.clone(),
        namespace: config.namespace.clone(),
    };
    match kubectl.context_in_use() {
        Ok(context) if !context.is_empty() => Ok(Cluster { kubectl, context }),
        Ok(_) => Err(vec![
            "kubectl has no current context: set [executor] context, or `kubectl config use-context NAME`"
                .into(),
        ]),
        Err(e) => Err(vec![format!("kubectl does not answer: {e}")]),
    }
}

/// `hwr-exp plan --format k8s`: the Indexed Job `run` would submit for `manifest` into a new
/// bundle under `results_dir`, as JSON (which `kubectl apply -f` reads). Nothing is submitted
/// or written.
///
/// # Errors
/// [`SessionError::Plan`] for manifest problems; [`SessionError::Preflight`] when `image` or
/// `volume` is missing.
pub fn plan_job(manifest: &Manifest, results_dir: &Path) -> Result<String, SessionError> {
    let config = &manifest.executor.kubernetes;
    let missing = job::missing_keys(config);
    if !missing.is_empty() {
        return Err(SessionError::Preflight(vec![format!(
            "plan --format k8s needs [executor] {} (with kind = \"kubernetes\"): the pods' container image and the PersistentVolumeClaim holding the results folder (docs/kubernetes.md)",
            missing.join(" and ")
        )]));
    }
    let results_dir = std::path::absolute(results_dir).unwrap_or_else(|_| results_dir.to_path_buf());
    let dir = crate::bundle::write::bundle_path(&results_dir, &manifest.experiment.name, SystemTime::now());
    let ctx = crate::runner::session::plan_context(&dir)?;
    let plan = crate::runner::session::expand(manifest, &ctx)?;
    let indices: Vec<usize> = (0..plan.len()).collect();
    let params = job::JobParams {
        config,
        name: job::job_name(&dir, &plan.experiment, 1),
        experiment: &plan.experiment,
        bundle: &dir,
        indices: &indices,
        jobs: plan.jobs,
        cpus_per_run: manifest.isolation.cpus_per_run,
        timeout: plan.timeout,
        grace: plan.grace,
    };
    job::to_json(&job::build(&params)).map_err(|e| SessionError::Environment(e.to_string()))
}

#[cfg(test)]
mod tests;
