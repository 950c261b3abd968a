//! The kubernetes executor (DESIGN 8, docs/kubernetes.md): a session's runs as one Kubernetes
//! Indexed Job, one completion index a run, each pod running the task entry point that Slurm's
//! array tasks run, the bundle on a PersistentVolumeClaim the manifest names.
//!
//! - [`job`]: the Job, typed with k8s-openapi (`plan --format k8s` prints it);
//! - [`kubectl`]: the `kubectl` calls (apply, get pods, delete);
//! - [`pods`]: reading the Job's pods: an index's state, a failed pod's account.
//!
//! Submitting and watching (runs gone without run.json recorded `lost`) is the backend's,
//! [`crate::runner::backend::kubernetes`].
//!
//! Registered as [`crate::runner::backend::Backend::Kubernetes`].

pub mod job;
pub mod kubectl;
pub mod pods;

use crate::manifest::{CpuSelection, KubernetesConfig, Manifest};
use crate::plan::PlanError;

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

#[cfg(test)]
mod tests;
