//! Submission of job arrays: the batch scripts, held submission recorded in bundle.json before
//! release, adoption of arrays a killed runner left, and `plan --format sbatch`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::bundle::{BundleWriter, files};
use crate::exec::CancelFlag;
use crate::manifest::{Manifest, SlurmConfig};
use crate::plan::Plan;
use crate::slurm::{
    ArrayLimits, ArrayState, CancelTarget, EnvPolicy, ScriptSpec, SlurmClient, SlurmError, SubmittedArray,
    Tag, script,
};

use super::*;
use crate::runner::session::SessionError;

/// What [`submit`] needs besides the plan.
#[derive(Debug, Clone, Copy)]
pub struct Submit<'a> {
    /// The cluster from [`preflight`].
    pub cluster: &'a Cluster,
    /// `[executor]` slurm keys.
    pub config: &'a SlurmConfig,
    /// `cpus-per-run`, `--cpus-per-task`.
    pub cpus_per_task: usize,
    /// Return after submitting (`run --detach`).
    pub detach: bool,
}

/// The batch scripts of runs `indices` of `plan` for the bundle folder `bundle`: one
/// [`ScriptSpec`] per array of [`crate::slurm::split`] (throttle `jobs`), not yet chained
/// (`after` is set at submission, when the previous array's id is known).
///
/// # Errors
/// A message when the cluster's limits allow no array, or the binary's path is unknown.
pub fn script_specs(
    plan: &Plan,
    indices: &[usize],
    config: &SlurmConfig,
    cpus_per_task: usize,
    limits: ArrayLimits,
    bundle: &Path,
) -> Result<Vec<ScriptSpec>, String> {
    let chunks = crate::slurm::split(indices, limits).map_err(|e| e.to_string())?;
    let binary = script_binary(
        std::env::current_exe().map_err(|e| format!("cannot find the hwr-exp binary's path: {e}"))?,
    );
    Ok(chunks
        .iter()
        .map(|chunk| ScriptSpec {
            job_name: script::job_name(&plan.experiment),
            comment: None,
            partition: config.partition.clone(),
            account: config.account.clone(),
            qos: config.qos.clone(),
            time_limit: script::time_limit(plan.timeout, plan.grace, config.time_margin),
            cpus_per_task: cpus_per_task.max(1),
            nodelist: config.nodes.clone(),
            exclude: config.exclude_nodes.clone(),
            requeue: config.requeue.then(|| script::requeue_lead(plan.grace)),
            array: chunk.spec(Some(plan.jobs.max(1))),
            offset: chunk.offset,
            after: None,
            extra_args: config.sbatch_args.clone(),
            binary: binary.clone(),
            bundle: bundle.to_path_buf(),
        })
        .collect())
}

/// The binary path a batch script execs, from `current_exe` (`/proc/self/exe`). A waiter submits
/// pieces for as long as the runs take; once its binary file is replaced meanwhile (a rebuild,
/// an upgrade), Linux names the running one `PATH (deleted)`, which no task can exec (every
/// later piece's tasks failed with exit 127). Then the path without that suffix is used: what
/// now stands there, as a fresh `hwr-exp wait` would submit.
pub(super) fn script_binary(exe: PathBuf) -> PathBuf {
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(original) if !exe.exists() => PathBuf::from(original),
        _ => exe,
    }
}

/// Why [`submit`] submitted nothing that runs.
#[derive(Debug)]
pub enum SubmitError {
    /// The cancel flag was set (Ctrl-C, SIGTERM) during the submission. Every array the
    /// submission created (recorded ones, and any found by its tag) was cancelled before release.
    Interrupted,
    /// sbatch refused a submission; the refusal is recorded in bundle.json `slurm.refusals`.
    Refused(String),
    /// Any other failure (a script, bundle.json, a Slurm command), described.
    Failed(String),
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Interrupted => write!(f, "interrupted"),
            SubmitError::Refused(m) | SubmitError::Failed(m) => write!(f, "{m}"),
        }
    }
}

/// The client of a submission: the cluster's, stopping at `cancel`, telling each retry of a
/// transient error (unless `quiet`), passing sbatch's input variables by `keep_sbatch_env`.
pub fn submission_client(
    cluster: &Cluster,
    config: &SlurmConfig,
    cancel: &CancelFlag,
    quiet: bool,
) -> SlurmClient {
    let client = cluster
        .client
        .clone()
        .with_cancel(cancel.clone())
        .with_env(if config.keep_sbatch_env {
            EnvPolicy::Keep
        } else {
            EnvPolicy::Clear
        });
    telling(client, quiet)
}

/// The tag of the script `slurm/<name>` of the bundle `writer` holds ([`Tag`]).
fn tag_of(writer: &BundleWriter, name: &str, offset: usize) -> Tag {
    Tag {
        bundle: writer.dir().to_string_lossy().into_owned(),
        script: format!("{}/{name}", files::SLURM),
        offset,
    }
}

/// How one piece's arrays are built and handed over ([`submit`]).
#[derive(Debug, Clone, Copy)]
pub struct PieceParams<'a> {
    /// `[executor]` slurm keys.
    pub config: &'a SlurmConfig,
    /// `cpus-per-run`, `--cpus-per-task`.
    pub cpus_per_task: usize,
    /// `MaxArraySize` and `max_array_tasks`.
    pub limits: ArrayLimits,
    /// Held for the waiter to release, or chained for a detached bundle.
    pub release: Release,
}

/// Submits runs `indices` of `plan` into the bundle `writer` holds as a two-phase commit (DESIGN
/// 8): for each array its script `slurm/array-<n>.sbatch` (numbered after the arrays already
/// recorded, tagged in `--comment` with the bundle and the script: [`Tag`]), `sbatch --hold`,
/// the job id recorded in bundle.json as `held` at once; once every array is recorded,
/// `scontrol release` of them all and the state `released`. A runner killed at any moment leaves
/// nothing running that bundle.json does not record: before the record the array is held (and
/// `wait`, `cancel`, `resume` find it by its tag), after it the record names it. Arrays are
/// chained (`--dependency=afterany:<previous>`) so that `jobs` bounds the running tasks, for
/// [`Release::Chained`] (`run --detach`: no waiter). For [`Release::Governed`] they are neither
/// chained nor released here: they stay `held` and the waiter releases them in order
/// ([`govern`](super::pieces::govern)), recording each release.
///
/// The sbatch input variables of this environment (`SBATCH_*`, `SLURM_*`) are removed from
/// sbatch's environment and their names recorded (`slurm.cleared-env`), or with
/// `keep-sbatch-env` passed on and recorded with their values (`slurm.kept-env`).
///
/// # Errors
/// [`SubmitError::Interrupted`] when `client`'s cancel flag was set; [`SubmitError::Refused`] when
/// sbatch refused an array (recorded in `slurm.refusals`); [`SubmitError::Failed`] otherwise. In
/// every case the arrays of this submission are cancelled (none was released).
pub fn submit(
    plan: &Plan,
    indices: &[usize],
    writer: &mut BundleWriter,
    submit: &PieceParams<'_>,
    client: &SlurmClient,
) -> Result<Vec<SubmittedArray>, SubmitError> {
    let specs = script_specs(
        plan,
        indices,
        submit.config,
        submit.cpus_per_task,
        submit.limits,
        writer.dir(),
    )
    .map_err(SubmitError::Failed)?;
    let env = crate::slurm::sbatch_input_env();
    writer
        .record_sbatch_env(&env, submit.config.keep_sbatch_env)
        .map_err(|e| SubmitError::Failed(format!("recording sbatch's environment in bundle.json: {e}")))?;
    let first = writer.info().slurm.as_ref().map_or(0, |s| s.arrays.len());
    let mut done: Vec<SubmittedArray> = Vec::new();
    let mut result = (|| -> Result<(), SubmitError> {
        for (k, mut spec) in specs.into_iter().enumerate() {
            if submit.release == Release::Chained {
                spec.after = done.last().map(|a| a.job_id);
            }
            let name = format!("array-{}.sbatch", first + k);
            let tag = tag_of(writer, &name, spec.offset);
            spec.comment = Some(tag.comment());
            let text = spec.render().map_err(|e| SubmitError::Failed(e.to_string()))?;
            let path = writer
                .write_slurm_script(&name, &text)
                .map_err(|e| SubmitError::Failed(format!("writing {}/{name}: {e}", files::SLURM)))?;
            let submission = match client.submit_held(&path, &spec.job_name, &tag) {
                Ok(s) => s,
                Err(SlurmError::Interrupted { .. }) => return Err(SubmitError::Interrupted),
                Err(e @ SlurmError::Failed { .. }) => {
                    let message = e.slurm_message();
                    let limit = crate::slurm::refusal_limit(&message).map(str::to_string);
                    let refusal = crate::bundle::SbatchRefusal {
                        at: crate::timestamp::rfc3339(SystemTime::now()),
                        script: tag.script.clone(),
                        message,
                        limit,
                    };
                    let text = format!("sbatch refused {}: {}", tag.script, refusal.describe());
                    writer.add_sbatch_refusal(refusal).map_err(|w| {
                        SubmitError::Failed(format!("{text}; recording it in bundle.json: {w}"))
                    })?;
                    return Err(SubmitError::Refused(format!("{text}\n  ({e})")));
                }
                Err(e) => return Err(SubmitError::Failed(e.to_string())),
            };
            let array = SubmittedArray {
                job_id: submission.job_id,
                offset: spec.offset,
                array: spec.array.to_string(),
                script: tag.script.clone(),
                state: ArrayState::Held,
            };
            done.push(array.clone());
            writer.add_slurm_array(array).map_err(|e| {
                SubmitError::Failed(format!("recording job {} in bundle.json: {e}", submission.job_id))
            })?;
        }
        if submit.release == Release::Governed {
            return Ok(());
        }
        let ids: Vec<u64> = done.iter().map(|a| a.job_id).collect();
        match client.release(&ids) {
            Ok(()) => {}
            Err(SlurmError::Interrupted { .. }) => return Err(SubmitError::Interrupted),
            Err(e) => return Err(SubmitError::Failed(format!("releasing the held arrays: {e}"))),
        }
        writer
            .set_slurm_array_state(&ids, ArrayState::Released)
            .map_err(|e| SubmitError::Failed(format!("recording the release in bundle.json: {e}")))
    })();
    if result.is_err() {
        // Nothing of this submission was released (or the release was interrupted): cancel every
        // array it made, the recorded ones and any sbatch created without telling its id.
        let cleanup = client.without_cancel();
        let job_name = script::job_name(&plan.experiment);
        let recorded: BTreeSet<u64> = writer
            .info()
            .slurm
            .iter()
            .flat_map(|s| s.arrays.iter().map(|a| a.job_id))
            .collect();
        match cleanup.tagged(&job_name, writer.dir()) {
            Ok(found) => {
                for orphan in found.iter().filter(|a| !recorded.contains(&a.job_id) && a.active > 0) {
                    if let Some(array) = adoptable(writer.dir(), orphan) {
                        let _ = writer.add_slurm_array(array.clone());
                        done.push(array);
                    }
                }
            }
            Err(e) => {
                result = result.map_err(|r| {
                    SubmitError::Failed(format!(
                        "{r}; and squeue could not be asked for arrays tagged with this bundle ({e}): look with `squeue -n {job_name} -o %F|%k` and cancel them"
                    ))
                })
            }
        }
        let ids: Vec<u64> = done.iter().map(|a| a.job_id).collect();
        let targets: Vec<CancelTarget> = ids.iter().copied().map(CancelTarget::Job).collect();
        if cleanup.cancel(&targets).is_ok() {
            let _ = writer.set_slurm_array_state(&ids, ArrayState::Cancelled);
        }
    }
    result.map(|()| {
        let mut done = done;
        if submit.release == Release::Chained {
            for a in &mut done {
                a.state = ArrayState::Released;
            }
        }
        done
    })
}

/// The record of an array found by its tag ([`SlurmClient::tagged`]) but not in bundle.json: its
/// `--array` read back from the tagged script in the bundle, its state `held` when every active
/// task is held, else `released`. `None` when the script cannot be read or has no `--array` line.
pub fn adoptable(bundle: &Path, found: &crate::slurm::TaggedArray) -> Option<SubmittedArray> {
    let text = std::fs::read_to_string(bundle.join(&found.tag.script)).ok()?;
    let array = text
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --array="))?
        .trim()
        .to_string();
    crate::slurm::ArraySpec::parse(&array).ok()?;
    Some(SubmittedArray {
        job_id: found.job_id,
        offset: found.tag.offset,
        array,
        script: found.tag.script.clone(),
        state: if found.active > 0 && found.held == found.active {
            ArrayState::Held
        } else {
            ArrayState::Released
        },
    })
}

/// `hwr-exp plan --format sbatch`: the batch scripts `run` would submit for `manifest` (whose
/// executor the caller set to slurm) into a new bundle under `results_dir`, each headed by a
/// comment line naming its file in the bundle. The cluster's array limits are used when it
/// answers; otherwise one array is assumed and a comment says so. Nothing is submitted or written.
///
/// # Errors
/// [`SessionError::Plan`] for manifest problems; [`SessionError::Environment`] when a script
/// cannot be rendered.
pub fn plan_scripts(manifest: &Manifest, results_dir: &Path) -> Result<String, SessionError> {
    let results_dir = std::path::absolute(results_dir).unwrap_or_else(|_| results_dir.to_path_buf());
    let dir = crate::bundle::write::bundle_path(&results_dir, &manifest.experiment.name, SystemTime::now());
    let ctx = crate::runner::session::plan_context(&dir)?;
    let plan = crate::runner::planning::expand(manifest, &ctx)?;
    // A quick look: a controller that is down gives the one-array note at once, not after retries.
    let client = SlurmClient::new().with_retry(crate::slurm::RetryPolicy::once());
    let (limits, note) = match client.ping().and_then(|()| client.array_limits()) {
        Ok(l) => (l, None),
        Err(e) => (
            ArrayLimits {
                max_array_size: u32::MAX,
                max_array_tasks: None,
            },
            Some(format!(
                "# note: no Slurm cluster answered ({}); one array assumed, `run` splits by the cluster's MaxArraySize",
                e.to_string().lines().next().unwrap_or_default()
            )),
        ),
    };
    let all: Vec<usize> = (0..plan.len()).collect();
    let specs = script_specs(
        &plan,
        &all,
        &manifest.executor.slurm,
        manifest.isolation.cpus_per_run,
        limits,
        &dir,
    )
    .map_err(SessionError::Environment)?;
    let mut out = String::new();
    if let Some(n) = note {
        out.push_str(&n);
        out.push('\n');
    }
    out.push_str("# each array is submitted with `sbatch --hold` and released (`scontrol release`) once its job id is in bundle.json\n");
    if let Some(rule) = plan.adaptive {
        out.push_str(&format!(
            "# adaptive repetitions: these are the first rounds ({} runs per cell); at each look of the design ({}) the waiter judges the cells and submits the undecided ones' runs up to the next look as new arrays, up to {} runs per cell\n",
            rule.min,
            crate::runner::adaptive::design_of(rule).looks_text(),
            rule.max
        ));
    }
    let env = crate::slurm::sbatch_input_env();
    if manifest.executor.slurm.keep_sbatch_env {
        if !env.is_empty() {
            out.push_str("# sbatch environment kept (keep-sbatch-env = true; recorded in bundle.json slurm.kept-env); these override the #SBATCH lines:\n");
            for (k, v) in &env {
                out.push_str(&format!("#   {k}={}\n", v.replace('\n', "\\n")));
            }
        }
    } else if !env.is_empty() {
        out.push_str(&format!(
            "# removed from sbatch's environment so that this script is what runs (recorded in bundle.json slurm.cleared-env; keep-sbatch-env = true keeps them): {}\n",
            env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let mut specs = specs;
    for (k, spec) in specs.iter_mut().enumerate() {
        spec.comment = Some(
            Tag {
                bundle: dir.to_string_lossy().into_owned(),
                script: format!("{}/array-{k}.sbatch", files::SLURM),
                offset: spec.offset,
            }
            .comment(),
        );
    }
    for (k, spec) in specs.iter().enumerate() {
        let chained = if k == 0 {
            "; submitted held (sbatch --hold), released by the waiter".to_string()
        } else {
            format!(
                "; submitted held, released once array-{} has no pending task (run --detach: --dependency=afterany:<job id of array-{}>)",
                k - 1,
                k - 1
            )
        };
        out.push_str(&format!("# ---- {}/array-{k}.sbatch{chained}\n", files::SLURM));
        out.push_str(
            &spec
                .render()
                .map_err(|e| SessionError::Environment(e.to_string()))?,
        );
    }
    Ok(out)
}

/// How a piece's arrays are handed to Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Submitted held; [`govern`](super::pieces::govern) releases them (a waiter is there).
    Governed,
    /// Chained with `--dependency=afterany` on the previous array and not held (`run --detach`:
    /// no waiter releases anything, so Slurm keeps `jobs` across arrays).
    Chained,
}
