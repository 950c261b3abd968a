//! One `hwr-exp run` from a validated manifest to a finished bundle:
//! plan -> preflight -> provenance -> bundle -> execute -> provenance after -> finish.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use crate::bundle::write::{bundle_path, rfc3339, sha256_bytes};
use crate::bundle::{BundleInfo, BundleStatus, BundleWriter, Outcome, files};
use crate::exec::{CancelFlag, Executor};
use crate::exit_codes;
use crate::manifest::{Diagnostics, Manifest};
use crate::plan::{self, Plan, PlanContext};

use super::{SessionEnd, SessionSettings, progress};

/// Choices of one session that do not come from the manifest.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Folder holding `<experiment>/<bundle>`; relative to the current directory.
    pub results_dir: PathBuf,
    /// No progress output.
    pub quiet: bool,
    /// Bundle this session reruns (recorded as `parent`).
    pub parent: Option<String>,
    /// Notes recorded in bundle.json.
    pub notes: Vec<String>,
}

/// Why a session did not produce a bundle.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Problems found by plan expansion, located in the manifest (exit 2; nothing written).
    #[error("{0}")]
    Plan(Diagnostics),
    /// Preflight problems (exit 3; nothing written).
    #[error("preflight failed:\n  {}", .0.join("\n  "))]
    Preflight(Vec<String>),
    /// The environment could not be read (exit 3; nothing written).
    #[error("{0}")]
    Environment(String),
    /// Writing the bundle failed after it was created; the bundle is marked `failed` (exit 1).
    #[error("writing bundle {bundle}: {source}")]
    Bundle {
        /// The bundle folder.
        bundle: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl SessionError {
    /// The documented exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::Plan(_) => exit_codes::USAGE,
            SessionError::Preflight(_) | SessionError::Environment(_) => exit_codes::ENVIRONMENT,
            SessionError::Bundle { .. } => exit_codes::RUN_FAILED,
        }
    }
}

/// What a finished session produced.
#[derive(Debug, Clone)]
pub struct SessionReport {
    /// The bundle folder.
    pub bundle: PathBuf,
    /// Final status.
    pub status: BundleStatus,
    /// Finished runs by outcome.
    pub counts: BTreeMap<Outcome, usize>,
    /// Planned runs.
    pub planned: usize,
    /// Whether the working tree changed during the session.
    pub drift: bool,
    /// Exit code: 0 all ok, 1 some run not ok, 130 interrupted.
    pub exit_code: i32,
}

/// Plan context for a bundle folder: the running binary, the allowed CPUs, a fresh fallback seed.
///
/// # Errors
/// When the binary's path or the allowed CPU set cannot be read.
pub fn plan_context(bundle: &Path) -> Result<PlanContext, SessionError> {
    let hwr_exp = std::env::current_exe()
        .map_err(|e| SessionError::Environment(format!("cannot find the hwr-exp binary's path: {e}")))?;
    let allowed_cpus = crate::exec::affinity::allowed_cpus()
        .map_err(|e| SessionError::Environment(format!("sched_getaffinity: {e}")))?;
    Ok(PlanContext {
        hwr_exp: hwr_exp.display().to_string(),
        bundle: bundle.to_path_buf(),
        allowed_cpus,
        fallback_seed: fastrand::u64(..1 << 53),
    })
}

/// Expands the manifest, turning plan errors into located diagnostics.
///
/// # Errors
/// [`SessionError::Plan`] with every problem located at its manifest key.
pub fn expand(manifest: &Manifest, ctx: &PlanContext) -> Result<Plan, SessionError> {
    plan::expand(manifest, ctx).map_err(|errors| {
        let mut all: Option<Diagnostics> = None;
        for e in errors {
            let d = manifest.diagnostic(&e.key, e.message, e.help);
            match &mut all {
                Some(a) => a.items.extend(d.items),
                None => all = Some(d),
            }
        }
        SessionError::Plan(all.expect("plan errors are never empty"))
    })
}

/// Runs a validated manifest into a new bundle under `opts.results_dir`.
///
/// # Errors
/// See [`SessionError`]: nothing is written unless the error is [`SessionError::Bundle`].
pub fn run_manifest(
    manifest: &Manifest,
    opts: &RunOptions,
    executor: &dyn Executor,
    cancel: &CancelFlag,
) -> Result<SessionReport, SessionError> {
    let results_dir = std::path::absolute(&opts.results_dir).unwrap_or_else(|_| opts.results_dir.clone());
    let created = SystemTime::now();
    let mut dir = bundle_path(&results_dir, &manifest.experiment.name, created);
    let ctx = plan_context(&dir)?;
    let mut plan = expand(manifest, &ctx)?;
    super::preflight::check(manifest, &plan, &results_dir, &ctx.allowed_cpus)
        .map_err(SessionError::Preflight)?;

    let repo_start = manifest
        .provenance
        .repo
        .clone()
        .unwrap_or_else(|| manifest.base_dir.clone());
    // Earlier bundles and the one being written live under results/: leave them out of the
    // working-tree record, or every run would record its own output as drift.
    let before = crate::provenance::capture_excluding(&repo_start, &[&results_dir]);
    for warning in before.warnings() {
        eprintln!("warning: {warning}");
    }
    let host = crate::provenance::host::collect();

    let info = BundleInfo {
        bundle_format: crate::bundle::BUNDLE_FORMAT,
        hwr_exp_version: env!("CARGO_PKG_VERSION").to_string(),
        experiment: manifest.experiment.name.clone(),
        description: manifest.experiment.description.clone(),
        status: BundleStatus::Running,
        created: rfc3339(created),
        finished: None,
        planned_runs: plan.len(),
        counts: BTreeMap::new(),
        manifest_sha256: sha256_bytes(manifest.source.as_bytes()),
        manifest_path: std::path::absolute(&manifest.path)
            .unwrap_or_else(|_| manifest.path.clone())
            .display()
            .to_string(),
        parent: opts.parent.clone(),
        runner_pid: std::process::id(),
        seed: plan.seed,
        notes: opts.notes.iter().chain(before.warnings()).cloned().collect(),
    };
    // Two runners started in the same second may pick the same name: create_dir fails for the second,
    // which re-plans with a new name.
    let mut attempts = 0;
    let writer = loop {
        match BundleWriter::create(&dir, info.clone()) {
            Ok(w) => break w,
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
            Err(source) => return Err(SessionError::Bundle { bundle: dir, source }),
        }
    };
    let files = (|| -> std::io::Result<()> {
        writer.write_file(files::MANIFEST, manifest.source.as_bytes())?;
        writer.write_streamed(files::PLAN, |out| plan.write_json(manifest, out))?;
        crate::bundle::write::write_host(writer.dir(), &host)?;
        crate::bundle::write::write_provenance(writer.dir(), &before)
    })();
    if let Err(source) = files {
        let mut writer = writer;
        let _ = writer.finish(BundleStatus::Failed, SystemTime::now());
        return Err(SessionError::Bundle { bundle: dir, source });
    }
    let all: Vec<usize> = (0..plan.len()).collect();
    let finish = Finish {
        repo_start: &repo_start,
        results_dir: &results_dir,
        before: &before,
        quiet: opts.quiet,
    };
    execute_and_finish(manifest, &plan, &all, writer, executor, cancel, &finish)
}

/// What [`execute_and_finish`] needs besides the plan: where to check the repository after the
/// runs, which folder to leave out of that check, the capture to compare with, and whether to be quiet.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    /// Where the repository is discovered from.
    pub repo_start: &'a Path,
    /// The results folder, left out of the working-tree record.
    pub results_dir: &'a Path,
    /// The capture recorded when the bundle was created.
    pub before: &'a crate::provenance::Snapshot,
    /// No progress output.
    pub quiet: bool,
}

/// Executes the runs `indices` of `plan` into the bundle `writer` holds, then records the after-run
/// provenance check (drift) and the final status. Shared by `run`, `rerun` and `resume`.
///
/// # Errors
/// [`SessionError::Bundle`] when the bundle cannot be written; it is then marked `failed`.
pub fn execute_and_finish(
    manifest: &Manifest,
    plan: &Plan,
    indices: &[usize],
    writer: BundleWriter,
    executor: &dyn Executor,
    cancel: &CancelFlag,
    finish: &Finish<'_>,
) -> Result<SessionReport, SessionError> {
    let dir = writer.dir().to_path_buf();
    let settings = SessionSettings {
        output_format: manifest.command.output_format,
        sample_interval: manifest.measure.sample_interval,
        env_policy: manifest.isolation.env_policy,
    };
    if !finish.quiet {
        // Said at the start too, so the bundle can be found even if the runner is killed.
        eprintln!("writing {} runs into {}", indices.len(), dir.display());
    }
    let writer = Mutex::new(writer);
    let progress = progress::for_terminal(finish.quiet, indices.len());
    let end = super::execute(
        plan,
        indices,
        &writer,
        executor,
        cancel,
        &settings,
        progress.as_ref(),
    );
    progress.finish();
    let result = end.and_then(|end| {
        let after = crate::provenance::capture_after(finish.repo_start, &[finish.results_dir], finish.before);
        let drift = crate::bundle::write::write_provenance_after(&dir, finish.before, &after)?;
        Ok((end, drift))
    });
    let bundle_err = |source| SessionError::Bundle {
        bundle: dir.clone(),
        source,
    };
    let mut writer = writer
        .into_inner()
        .map_err(|_| bundle_err(std::io::Error::other("bundle writer poisoned")))?;
    let (end, drift) = match result {
        Ok(r) => r,
        Err(source) => {
            let _ = writer.finish(BundleStatus::Failed, SystemTime::now());
            return Err(bundle_err(source));
        }
    };
    let status = match end {
        SessionEnd::Complete => BundleStatus::Complete,
        SessionEnd::Interrupted => BundleStatus::Interrupted,
    };
    writer.finish(status, SystemTime::now()).map_err(bundle_err)?;
    let counts = writer.info().counts.clone();
    let exit_code = if status == BundleStatus::Interrupted || cancel.load(Ordering::SeqCst) {
        exit_codes::INTERRUPTED
    } else if counts.keys().all(|o| *o == Outcome::Ok) {
        exit_codes::SUCCESS
    } else {
        exit_codes::RUN_FAILED
    };
    Ok(SessionReport {
        bundle: dir,
        status,
        counts,
        planned: plan.len(),
        drift,
        exit_code,
    })
}

/// `8 runs: 6 ok, 1 failed, 1 timeout` (outcomes in a fixed order; runs not started listed as such).
pub fn summarize(report: &SessionReport) -> String {
    let finished: usize = report.counts.values().sum();
    let mut parts: Vec<String> = report
        .counts
        .iter()
        .map(|(o, n)| {
            format!(
                "{n} {}",
                serde_json::to_value(o)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            )
        })
        .collect();
    if finished < report.planned {
        parts.push(format!("{} not run", report.planned - finished));
    }
    format!("{} runs: {}", report.planned, parts.join(", "))
}
