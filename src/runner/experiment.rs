//! One `hwr-exp run` from a validated manifest to a finished bundle:
//! plan -> preflight -> provenance -> bundle -> execute (its backend) -> provenance after ->
//! finish ([`super::session`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::bundle::write::{bundle_path, test_pause};
use crate::bundle::{BundleInfo, BundleStatus, BundleWriter, files};
use crate::digest::sha256_bytes;
use crate::exec::{CancelFlag, Launcher};
use crate::manifest::Manifest;
use crate::plan::{Plan, PlanContext};
use crate::timestamp::rfc3339;

use super::backend::{Backend, Job, Ready};
use super::planning::expand;
use super::progress::{self};
use super::session::*;

/// Runs a validated manifest into a new bundle under `opts.results_dir`.
///
/// # Errors
/// See [`SessionError`]: nothing is written unless the error is [`SessionError::Bundle`] with a
/// bundle left behind ([`BundleLeft`]).
pub fn run_manifest(
    manifest: &Manifest,
    opts: &RunOptions,
    launcher: &dyn Launcher,
    cancel: &CancelFlag,
) -> Result<SessionReport, SessionError> {
    let results_dir = std::path::absolute(&opts.results_dir).unwrap_or_else(|_| opts.results_dir.clone());
    let created = SystemTime::now();
    let planned = plan_and_check(manifest, opts, &results_dir, created)?;

    // Earlier bundles and the one being written live under results/: leave them out of the
    // working-tree record, or every run would record its own output as drift.
    let before = crate::provenance::capture_limited(
        &planned.plan.repo_start,
        &[&results_dir],
        patch_limits(&manifest.provenance),
    );
    for warning in before.warnings() {
        progress::say(format_args!("warning: {warning}"));
    }
    // Run cgroups outside the runner's own cgroup: whatever stops that cgroup misses the runs.
    let placement = planned.backend.backend().containment_note();
    if let Some(note) = placement {
        progress::say(format_args!("warning: {note}"));
    }
    let host = crate::provenance::host::collect();

    let info = bundle_info(manifest, opts, created, &planned, &before, placement);
    let Planned {
        mut dir,
        ctx,
        mut plan,
        built,
        backend,
    } = planned;
    // The first files are written into a hidden staging folder that is renamed into place when
    // complete: a runner killed during the setup leaves no bundle that cannot be read. Two runners
    // started in the same second may pick the same name: the rename fails for the second, which
    // re-plans with a new name.
    let mut writer = BundleWriter::stage(&dir, info).map_err(|source| SessionError::Bundle {
        bundle: dir.clone(),
        source,
        left: BundleLeft::NotCreated,
    })?;
    let manifest_bytes = manifest.source.as_bytes();
    // The local backend writes plan.json while the first runs execute (a 1,000,000-run plan is
    // about 440 MB of JSON, seconds of writing and hashing); the Slurm backend, whose submission
    // may return at once (`--detach`), writes it before the bundle is published.
    // Adaptive plans are rewritten after each round (`runner::adaptive`): written before, too.
    let plan_in_background = backend.backend().name() == "local" && !opts.detach && plan.adaptive.is_none();
    let first_files = |writer: &BundleWriter, plan: &Plan| -> std::io::Result<()> {
        test_pause("staged");
        writer.write_file(files::MANIFEST, manifest_bytes)?;
        test_pause("manifest");
        if !plan_in_background {
            writer.write_streamed(files::PLAN, |out| {
                crate::bundle::plan_file::write_plan_json(plan, out)
            })?;
        }
        test_pause("plan");
        crate::bundle::write::write_host(writer.dir(), &host)?;
        test_pause("host");
        crate::bundle::write::write_provenance(writer.dir(), &before)?;
        for b in &built {
            writer.write_environment(
                &b.name,
                &[
                    ("lock.txt", b.lock.as_bytes()),
                    ("freeze.txt", b.freeze.as_bytes()),
                    ("python.txt", b.python.as_bytes()),
                ],
            )?;
        }
        test_pause("provenance");
        Ok(())
    };
    let mut attempts = 0;
    loop {
        let staged = first_files(&writer, &plan)
            .and_then(|()| writer.seal_setup_files())
            .and_then(|()| writer.publish(&dir));
        match staged {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 20 => {
                attempts += 1;
                dir = bundle_path(&results_dir, &manifest.experiment.name, created);
                plan = expand(
                    manifest,
                    &PlanContext {
                        bundle: dir.clone(),
                        ..ctx.clone()
                    },
                )?;
            }
            Err(source) => {
                // Dropping the unpublished writer removes its staging folder.
                drop(writer);
                return Err(SessionError::Bundle {
                    bundle: dir,
                    source,
                    left: BundleLeft::NotCreated,
                });
            }
        }
    }
    test_pause("published");
    crate::exec::return_freed_memory();
    let job = Job {
        detach: opts.detach,
        ..Job::of(manifest)
    };
    let bundle_dir = writer.dir().to_path_buf();
    let (plan, bundle_dir, before, results_dir) = (&plan, &bundle_dir, &before, &results_dir);
    std::thread::scope(|scope| {
        let plan_json = plan_in_background.then(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let written = std::thread::Builder::new()
                .name("plan.json writer".into())
                .spawn_scoped(scope, move || {
                    let _ = tx.send(crate::bundle::write::write_plan_file(bundle_dir, plan));
                });
            match written {
                Ok(_) => rx,
                Err(e) => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    let _ = tx.send(Err(e));
                    rx
                }
            }
        });
        let session = Session {
            plan: std::borrow::Cow::Borrowed(plan),
            indices: (0..plan.len()).collect(),
            writer: Mutex::new(writer),
            launcher,
            cancel,
            progress: progress::Collect::deferred(opts.quiet),
            fail_fast: opts.overrides.as_ref().is_some_and(|o| o.fail_fast),
            finish: Finish {
                results_dir,
                before,
                quiet: opts.quiet,
            },
            plan_json,
        };
        execute(&backend, session, &job)
    })
}

/// What [`run_manifest`] has planned and checked before anything is written.
struct Planned {
    /// The new bundle's folder (renamed when another runner takes the name first).
    dir: std::path::PathBuf,
    /// The context the plan was expanded in (the environments built included).
    ctx: PlanContext,
    plan: Plan,
    /// The manifest's Python environments, built.
    built: Vec<super::environments::Built>,
    /// The backend, its preflight passed.
    backend: Ready,
}

/// Plans `manifest` into a new bundle folder under `results_dir` named for `created`, builds its
/// Python environments and runs the preflight checks (the runner's, then the backend's).
///
/// # Errors
/// [`SessionError`] from planning; [`SessionError::Preflight`] when an environment cannot be
/// built or a preflight check fails. Nothing is written.
fn plan_and_check(
    manifest: &Manifest,
    opts: &RunOptions,
    results_dir: &std::path::Path,
    created: SystemTime,
) -> Result<Planned, SessionError> {
    let dir = bundle_path(results_dir, &manifest.experiment.name, created);
    let mut ctx = plan_context(&dir)?;
    let mut plan = expand(manifest, &ctx)?;
    // The manifest and plan are valid: build its Python environments (preflight, before any run).
    let locks = match &opts.locks {
        Some(given) => super::environments::Locks::Given(given.clone(), rfc3339(created)),
        None => super::environments::Locks::Resolve(
            opts.exclude_newer.clone().unwrap_or_else(|| rfc3339(created)),
        ),
    };
    let built =
        super::environments::build_all(manifest, &locks, opts.quiet).map_err(SessionError::Preflight)?;
    if !built.is_empty() {
        ctx.environments = super::environments::context_map(&built);
        plan = expand(manifest, &ctx)?;
    }
    super::preflight::check(&plan, results_dir).map_err(SessionError::Preflight)?;
    let backend = Backend::of(manifest.executor.kind)
        .preflight(results_dir, opts.quiet, &plan, &Job::of(manifest))
        .map_err(SessionError::Preflight)?;
    Ok(Planned {
        dir,
        ctx,
        plan,
        built,
        backend,
    })
}

/// The bundle.json of a new bundle (`running`) for `manifest` run with `opts` at `created`, as
/// `planned`; its notes are `opts`' and then the warnings of the working-tree capture `before`
/// and the backend's `placement` note.
fn bundle_info(
    manifest: &Manifest,
    opts: &RunOptions,
    created: SystemTime,
    planned: &Planned,
    before: &crate::provenance::Snapshot,
    placement: Option<&str>,
) -> BundleInfo {
    let (plan, built) = (&planned.plan, &planned.built);
    BundleInfo {
        bundle_format: crate::bundle::BUNDLE_FORMAT,
        hwr_exp_version: super::binary::running().version.clone(),
        hwr_exp_path: Some(super::binary::running().path.display().to_string()),
        hwr_exp_sha256: super::binary::running().sha256.clone(),
        experiment: manifest.experiment.name.clone(),
        description: manifest.experiment.description.clone(),
        status: BundleStatus::Running,
        created: rfc3339(created),
        finished: None,
        planned_runs: plan.len(),
        counts: BTreeMap::new(),
        manifest_sha256: sha256_bytes(manifest.source.as_bytes()),
        setup_sha256: BTreeMap::new(),
        manifest_path: std::path::absolute(&manifest.path)
            .unwrap_or_else(|_| manifest.path.clone())
            .display()
            .to_string(),
        parent: opts.parent.clone(),
        runner_pid: std::process::id(),
        seed: plan.seed,
        notes: opts
            .notes
            .iter()
            .chain(before.warnings())
            .cloned()
            .chain(placement.map(str::to_string))
            .collect(),
        executor: Some(planned.backend.backend().name().to_string()),
        environments: built
            .iter()
            .map(|b| {
                (
                    b.name.clone(),
                    crate::bundle::EnvironmentRecord {
                        lock_sha256: b.lock_sha256.clone(),
                        exclude_newer: b.exclude_newer.clone(),
                        venv: b.venv.display().to_string(),
                        venv_key: Some(b.key.clone()),
                        interpreter: Some(b.interpreter.clone()),
                        reused: b.reused,
                    },
                )
            })
            .collect(),
        slurm: None,
        overrides: opts.overrides.clone(),
        adaptive: plan
            .adaptive
            .map(|rule| super::adaptive::initial_record(plan, rule, 0.0)),
        bisect: opts.bisect.clone(),
    }
}

/// Executes (locally, [`local::execute_and_finish`](super::backend::local::execute_and_finish)) or submits and waits for (Slurm,
/// [`submit_and_wait`](super::backend::slurm::wait::submit_and_wait)) the session's runs, and finishes the bundle. Shared by
/// `run`, `rerun` and `resume`.
///
/// # Errors
/// As [`Session::finish`]; Slurm: [`SessionError::Preflight`] when nothing could be submitted.
pub fn execute(ready: &Ready, session: Session<'_>, job: &Job<'_>) -> Result<SessionReport, SessionError> {
    match ready {
        Ready::Local => super::backend::local::execute_and_finish(session),
        Ready::Slurm(cluster) => {
            let submit = super::backend::slurm::arrays::Submit {
                cluster,
                config: &job.config.slurm,
                cpus_per_task: job.cpus_per_run,
                detach: job.detach,
            };
            super::backend::slurm::wait::submit_and_wait(session, &submit)
        }
        Ready::Ray(cluster) => {
            let submit = super::backend::ray::Submit {
                cluster,
                cpus_per_run: job.cpus_per_run,
                detach: job.detach,
            };
            super::backend::ray::submit_and_wait(session, &submit)
        }
        Ready::Kubernetes(cluster) => {
            let submit = super::backend::kubernetes::Submit {
                kubectl: cluster.kubectl.clone(),
                config: &job.config.kubernetes,
                cpus_per_run: job.cpus_per_run,
            };
            super::backend::kubernetes::submit_and_wait(session, &submit)
        }
    }
}
