//! A manifest's plan for its backend: the expansion with the backend's own rules (CPUs, fixed
//! lists, allocators) and every problem located at its manifest key; `check`'s look at this
//! machine.

use crate::manifest::{Diagnostics, Manifest};
use crate::plan::{self, Plan, PlanContext};

use super::backend::Backend;
use super::session::SessionError;

/// Expands the manifest for its backend ([`Backend::plan_problems`], [`Backend::plans_cpus`]:
/// locally its CPUs are checked against the allowed set `ctx.allowed_cpus`), turning every
/// problem into a located diagnostic.
///
/// # Errors
/// [`SessionError::Plan`] with every problem located at its manifest key: CPUs outside the
/// allowed set first, then the expansion's problems.
pub fn expand(manifest: &Manifest, ctx: &PlanContext) -> Result<Plan, SessionError> {
    let backend = Backend::of(manifest.executor.kind);
    let mut errors = backend.plan_problems(manifest, &ctx.allowed_cpus);
    let ctx = PlanContext {
        plans_cpus: backend.plans_cpus(),
        ..ctx.clone()
    };
    match plan::expand(manifest, &ctx) {
        Ok(plan) => {
            errors.extend(super::preflight::allocator_paths(&plan));
            if errors.is_empty() {
                return Ok(plan);
            }
        }
        Err(e) => errors.extend(e),
    }
    Err(located(manifest, errors))
}

/// `errors` located in `manifest` as one [`SessionError::Plan`]; a problem found at a key that
/// no command-line option replaced, in a manifest some option changed, says which were given.
fn located(manifest: &Manifest, errors: Vec<plan::PlanError>) -> SessionError {
    let mut all: Option<Diagnostics> = None;
    // Options that replaced manifest values: a problem at another key may still come from them
    // (`--repetitions 2` with an output name without `{repetition}`, `--executor slurm` with an
    // adaptive rule), so it says which were given.
    let given: Vec<&str> = manifest.overridden.values().map(String::as_str).collect();
    for mut e in errors {
        if !given.is_empty() && manifest.option_for(&e.key).is_none() {
            let note = format!("planned with {} from the command line", given.join(" "));
            e.help = Some(match e.help.take() {
                Some(h) => format!("{h}; {note}"),
                None => note,
            });
        }
        let d = manifest.diagnostic(&e.key, e.message, e.help);
        match &mut all {
            Some(a) => a.items.extend(d.items),
            None => all = Some(d),
        }
    }
    SessionError::Plan(all.expect("located problems are not none"))
}

/// `hwr-exp check`'s look at this machine for a manifest whose runs execute here (not on
/// Slurm, where the nodes resolve them): the workdirs and programs `run`'s preflight would refuse
/// ([`super::preflight::programs_and_workdirs`]), located at the manifest's `workdir` and at its
/// `argv` program (or `shell`).
///
/// # Errors
/// [`SessionError::Plan`] with one located diagnostic per problem.
pub fn missing_here(manifest: &Manifest, plan: &Plan) -> Result<(), SessionError> {
    if Backend::of(manifest.executor.kind) != Backend::Local {
        return Ok(());
    }
    let errors = super::preflight::missing_here(manifest, plan);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(located(manifest, errors))
    }
}
