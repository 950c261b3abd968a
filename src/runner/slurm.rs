//! The Slurm executor's session (DESIGN 8): preflight against the cluster, submission of the plan's
//! runs as chained job arrays, waiting for their run.json files while watching `squeue`, and the
//! one-run path an array task takes on its node.
//!
//! - [`preflight`]: `scontrol ping`, `MaxArraySize` from `scontrol show config`, and a warning when
//!   the results folder or the binary is on a node-local file system (`statfs`).
//! - [`submit_and_wait`]: after the bundle was created on the submitting host (by
//!   [`super::session::run_manifest`], provenance included), [`submit`] writes one batch script per
//!   array into `slurm/` and submits it, recording each job id in bundle.json at once; then
//!   [`wait`] and [`Session::finish`] as for the local backend.
//! - [`run_task`]: what `hwr-exp slurm-task BUNDLE INDEX` does on the node: one planned run with
//!   a launcher of its own ([`super::Runs::launch`]) inside the task's CPU allocation
//!   (`sched_getaffinity`), its folder and run.json written without the bundle's lock.
//!
//! Adaptive repetitions (issue 36 item 2): [`wait_and_finish`] hands the bundle, once a round's
//! runs all have run.json, to `adaptive::continue_rounds_with` (the local runner's one
//! decision loop); each further round is submitted as arrays of its own and waited for
//! (`next_round`), so `run`, `wait` (after `run --detach`) and `resume` all continue the rule.
//!
//! The choice of this backend is made in [`super::backend`].

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::bundle::reason::RunFailure;
use crate::bundle::write::{LostTask, NodeIds, TaskRunWriter};
use crate::bundle::{BundleWriter, RunRecord, SlurmTaskIds, files};
use crate::exec::{CancelFlag, Termination};
use crate::manifest::{CpuSelection, Manifest, SlurmConfig};
use crate::plan::{Plan, PlanError};
use crate::slurm::{
    ArrayLimits, ArrayState, CancelTarget, EnvPolicy, RetryNote, ScriptSpec, SlurmClient, SlurmError,
    SubmittedArray, Tag, TaskMap, script,
};

use super::progress::FAILURE_TAIL_LINES;
use super::session::{Session, SessionError, SessionReport};
use super::slurm_pieces::{Feeder, Release, apply, govern, read_limits};
use super::{Progress, SessionEnd};

/// How often [`wait`] looks for run.json files and asks `squeue`.
pub const POLL: Duration = Duration::from_millis(250);

/// How long a task may be gone from the queue without a visible run.json before it is `lost`, on
/// a shared file system: NFS caches attributes, so a fresh run.json may show up late on the
/// submitting host. On a local file system the queue is read before the files, so a finished
/// task's run.json is already visible and no grace is needed.
pub const SHARED_FS_LOST_GRACE: Duration = Duration::from_secs(30);

/// How long a cancelled waiter waits for `squeue` to show no active task of its arrays.
pub const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// The cluster as the preflight found it.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The client (Slurm's commands from `PATH`, the cluster from `SLURM_CONF`).
    pub client: SlurmClient,
    /// `MaxArraySize` and `max_array_tasks`.
    pub limits: ArrayLimits,
    /// Whether the results folder is on a file system the nodes may share (`statfs`).
    pub shared_fs: bool,
}

/// The fixed-CPU-list problem of a manifest run with the Slurm executor (DESIGN 3: `cpus` must be
/// `"auto"`, the task's allocation), located at `isolation.cpus`; `None` for `"auto"`.
pub fn fixed_cpus_problem(manifest: &Manifest) -> Option<PlanError> {
    match manifest.isolation.cpus {
        CpuSelection::Auto => None,
        CpuSelection::List(_) => Some(PlanError {
            key: "isolation.cpus".into(),
            message: "a fixed CPU list cannot be used with the slurm executor: each task runs on the CPUs Slurm allocates".into(),
            help: Some("write cpus = \"auto\" and set cpus-per-run (it becomes --cpus-per-task)".into()),
        }),
    }
}

/// `statfs` magic numbers (`f_type`) of file systems that several hosts mount: NFS, Lustre, GPFS,
/// BeeGFS, CephFS, CIFS, SMB2, AFS, GlusterFS/other FUSE.
const SHARED_FS_MAGIC: &[u32] = &[
    0x6969,
    0x0BD0_0BD0,
    0x4750_4653,
    0x1983_0326,
    0x00C3_6400,
    0xFF53_4D42,
    0xFE53_4D42,
    0x5346_414F,
    0x6573_5546,
];

/// Whether `path` (or its nearest existing ancestor) is on a file system other hosts may mount,
/// judged by `statfs(2)` `f_type` against `SHARED_FS_MAGIC`; `None` when statfs fails.
pub fn on_shared_fs(path: &Path) -> Option<bool> {
    let mut probe = path.to_path_buf();
    while !probe.exists() {
        probe = probe.parent()?.to_path_buf();
    }
    let stat = rustix::fs::statfs(&probe).ok()?;
    // f_type is a signed or unsigned word depending on the architecture; magics are 32-bit.
    #[allow(clippy::unnecessary_cast)]
    let magic = (stat.f_type as i64 as u64 & 0xFFFF_FFFF) as u32;
    Some(SHARED_FS_MAGIC.contains(&magic))
}

/// The Slurm preflight (before a bundle exists): the controller answers `scontrol ping`, the array
/// limits are read from `scontrol show config`. Prints a warning (unless `quiet`) when the results
/// folder or the hwr-exp binary is on a node-local file system: tasks on other nodes could not
/// reach them (one-node clusters are fine, so this is no error).
///
/// Then each task's request (`--time` = timeout + grace + time-margin, `--cpus-per-task`,
/// `--mem`/`--mem-per-cpu`/`--nodes` of `sbatch-args`) is checked against the limits of its
/// partition (`partition`, else the cluster's default) from `scontrol show partition`
/// ([`crate::slurm::partition::check`]): a request above `MaxTime`, `MaxMemPerNode`,
/// `MaxMemPerCPU`, `MaxCPUsPerNode` or the node count is refused with both numbers, since its
/// tasks would pend forever.
///
/// # Errors
/// One message per problem (exit 3 through [`SessionError::Preflight`]).
pub fn preflight(results_dir: &Path, quiet: bool, request: &Request<'_>) -> Result<Cluster, Vec<String>> {
    // Every Slurm command the session will run is found before a bundle exists (DESIGN 4: a
    // failed preflight writes nothing); `scontrol` is also asked to answer next.
    let cwd = std::env::current_dir().unwrap_or_else(|_| Path::new("/").to_path_buf());
    let path = std::env::var_os("PATH");
    let missing: Vec<String> = ["scontrol", "sbatch", "squeue", "scancel"]
        .into_iter()
        .filter_map(|program| crate::exec::resolve_program(program, path.as_deref(), &cwd).err())
        .map(|why| format!("slurm executor: {why} (is Slurm's client installed and in PATH?)"))
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let client = telling(SlurmClient::new(), quiet);
    client
        .ping()
        .map_err(|e| vec![format!("slurm executor: the cluster does not answer: {e}")])?;
    let limits = client
        .array_limits()
        .map_err(|e| vec![format!("slurm executor: {e}")])?;
    check_partition(&client, request)?;
    let shared_fs = on_shared_fs(results_dir).unwrap_or(false);
    if !quiet {
        let exe = std::env::current_exe().ok();
        for (what, path) in [
            ("results folder", Some(results_dir.to_path_buf())),
            ("hwr-exp binary", exe),
        ] {
            if let Some(p) = path
                && on_shared_fs(&p) == Some(false)
            {
                super::progress::say(format_args!(
                    "warning: the {what} {} is on a local file system; tasks on other nodes cannot reach it (fine on a one-node cluster)",
                    p.display()
                ));
            }
        }
    }
    Ok(Cluster {
        client,
        limits,
        shared_fs,
    })
}

/// What one session's tasks ask Slurm for, checked by [`preflight`] against the partition.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `[executor]` slurm keys.
    pub config: &'a SlurmConfig,
    /// Each run's timeout (`None`: none, no `--time`).
    pub timeout: Option<Duration>,
    /// Each run's grace.
    pub grace: Duration,
    /// `cpus-per-run`, `--cpus-per-task`.
    pub cpus_per_task: usize,
}

/// Refuses a request above its partition's limits ([`preflight`]). A partition that
/// `scontrol show partition` does not list is left to sbatch to refuse (its message is recorded).
fn check_partition(client: &SlurmClient, request: &Request<'_>) -> Result<(), Vec<String>> {
    use crate::slurm::partition;
    let config = request.config;
    let mut task = partition::TaskRequest {
        time: script::time_limit(request.timeout, request.grace, config.time_margin)
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0)),
        cpus: request.cpus_per_task.max(1) as u64,
        nodes: 1,
        ..partition::TaskRequest::default()
    };
    partition::request_from_args(&config.sbatch_args, &mut task)
        .map_err(|e| vec![format!("slurm executor: {e}")])?;
    let partitions = client
        .partitions()
        .map_err(|e| vec![format!("slurm executor: {e}")])?;
    let chosen = match &config.partition {
        Some(name) => partitions.iter().find(|p| &p.name == name),
        None => partitions.iter().find(|p| p.default),
    };
    let Some(p) = chosen else { return Ok(()) };
    let problems = partition::check(p, &task);
    if problems.is_empty() {
        return Ok(());
    }
    Err(problems
        .into_iter()
        .map(|m| format!("slurm executor: {m}"))
        .collect())
}

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
fn script_binary(exe: PathBuf) -> PathBuf {
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

/// `client` telling each retry of a transient error on stderr (`slurm: squeue failed (Socket
/// timed out on send/recv operation); retrying in 1 s (try 2 of 6)`), unless `quiet`.
pub fn telling(client: SlurmClient, quiet: bool) -> SlurmClient {
    if quiet {
        client
    } else {
        client.with_observer(std::sync::Arc::new(|note: &RetryNote| {
            super::progress::say(format_args!("slurm: {note}"));
        }))
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
/// ([`govern`]), recording each release.
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

/// Submits the session's runs (see [`submit`]), then, unless `submit.detach`, waits for them
/// ([`wait`]) and finishes the session as the local backend does (provenance after, counts,
/// status, exit code). Detached, the bundle stays `running` without a lock holder and the report
/// says so (exit 0). Interrupted while submitting, the bundle is finished `interrupted` (exit 130)
/// with nothing of the submission left in the queue.
///
/// # Errors
/// [`SessionError::Preflight`] when nothing could be submitted (exit 3; the bundle is marked
/// `failed`, an sbatch refusal recorded); [`SessionError::Bundle`] when writing the bundle fails.
pub fn submit_and_wait(mut session: Session<'_>, params: &Submit<'_>) -> Result<SessionReport, SessionError> {
    let (plan, quiet) = (session.plan.clone(), session.finish.quiet);
    let plan: &Plan = &plan;
    let client = submission_client(params.cluster, params.config, session.cancel, quiet);
    let indices = std::mem::take(&mut session.indices);
    let writer = session.writer_mut();
    if !quiet {
        // Said before submitting, so the bundle can be found even if this process is killed.
        super::progress::say(format_args!(
            "submitting {} into {}",
            super::progress::runs(indices.len()),
            writer.dir().display()
        ));
    }
    let release = if params.detach {
        Release::Chained
    } else {
        Release::Governed
    };
    let fed = read_limits(&client, params.cluster.limits, params.config.account.as_deref())
        .map_err(SubmitError::Failed)
        .and_then(|limits| {
            let mut feeder = Feeder::new(&indices, limits, params.config, params.cpus_per_task);
            feeder
                .feed(plan, writer, &client, release, quiet, 0)
                .map(|arrays| (feeder, arrays))
        });
    let (feeder, arrays) = match fed {
        Ok(f) => f,
        Err(SubmitError::Interrupted) => {
            return session.finish(Ok(SessionEnd::Interrupted), Vec::new());
        }
        Err(e) => {
            let reason = format!("submitting to slurm: {e}");
            let _ = writer.fail(&reason, SystemTime::now());
            return Err(SessionError::Preflight(vec![format!(
                "{reason} (the bundle {} is marked failed with this reason)",
                writer.dir().display()
            )]));
        }
    };
    let jobs: Vec<u64> = arrays.iter().map(|a| a.job_id).collect();
    if params.detach {
        if plan.adaptive.is_some() && !quiet {
            super::progress::say(format_args!(
                "adaptive repetitions: the first rounds are submitted; `hwr-exp wait {}` judges them at each look and submits the further rounds (nothing does while no waiter runs)",
                writer.dir().display()
            ));
        }
        if feeder.remaining() > 0 && !quiet {
            super::progress::say(format_args!(
                "{} not submitted yet (no room under the cluster's limits): `hwr-exp wait {}` submits them as room frees",
                super::progress::runs(feeder.remaining()),
                writer.dir().display()
            ));
        }
        // Dropping the session's writer releases the lock; `hwr-exp wait` takes it later.
        return Ok(SessionReport {
            bundle: writer.dir().to_path_buf(),
            status: crate::bundle::BundleStatus::Running,
            counts: BTreeMap::new(),
            planned: plan.len(),
            drift: false,
            exit_code: crate::exit_codes::SUCCESS,
            failures: Default::default(),
            slurm_jobs: jobs,
            slurm_unsubmitted: feeder.remaining(),
            failed_fast: false,
        });
    }
    let arrays = writer
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.clone())
        .unwrap_or_default();
    session.indices = indices;
    let waiting = Waiting {
        // The waiter checks the cancel flag itself and must still be able to scancel then.
        client: client.without_cancel(),
        arrays,
        shared_fs: params.cluster.shared_fs,
        feeder: Some(feeder),
        detach_on_stop: false,
    };
    wait_and_finish(session, &waiting)
}

/// What waiting for submitted arrays needs besides the session.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// The cluster's client.
    pub client: SlurmClient,
    /// Every array of the bundle (bundle.json `slurm.arrays`).
    pub arrays: Vec<SubmittedArray>,
    /// Whether the bundle is on a file system the nodes share ([`SHARED_FS_LOST_GRACE`]).
    pub shared_fs: bool,
    /// Runs of the session not submitted yet, submitted as room frees; `None` when every run
    /// of the session has a task.
    pub feeder: Option<Feeder>,
    /// What a stop request (Ctrl-C, SIGTERM) does: `false` cancels the arrays and ends the
    /// session interrupted (`run`, `resume`); `true` stops waiting and leaves the tasks to Slurm
    /// and the bundle `running` ([`Detached`]: `hwr-exp wait`, which attached to them). `hwr-exp
    /// cancel`'s marker cancels either way.
    pub detach_on_stop: bool,
}

/// Why [`wait`] stopped waiting at a stop request when [`Waiting::detach_on_stop`]: the tasks go
/// on in Slurm and the bundle stays `running`, without a waiter.
#[derive(Debug, thiserror::Error)]
#[error(
    "stopped waiting ({signal}); the bundle's tasks go on in slurm and the bundle stays running: `hwr-exp wait {bundle}` attaches again, `hwr-exp cancel {bundle}` stops them"
)]
pub struct Detached {
    /// The stop request, as said (`Ctrl-C or another stop signal`).
    pub signal: &'static str,
    /// The bundle folder.
    pub bundle: String,
}

/// Waits for the session's runs ([`wait`]) with the progress display, then finishes the session
/// ([`Session::finish`]). Shared by `run`, `wait` and `resume`.
///
/// # Errors
/// As [`Session::finish`]; a recorded array spec that does not parse is a bundle error;
/// [`SessionError::Environment`] when squeue fails with an error that is not transient
/// ([`QueueRefused`]: the bundle is left `running` for a later `hwr-exp wait`).
pub fn wait_and_finish(mut session: Session<'_>, waiting: &Waiting) -> Result<SessionReport, SessionError> {
    let map = match TaskMap::new(&waiting.arrays) {
        Ok(map) => map,
        Err(e) => {
            let source = io::Error::new(io::ErrorKind::InvalidData, e);
            let writer = session
                .writer
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            return Err(super::session::failed_bundle(writer, source));
        }
    };
    if !session.finish.quiet {
        super::progress::say(format_args!(
            "waiting for {} of slurm job(s) {} in {}",
            super::progress::runs(session.indices.len()),
            map.job_ids()
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            session.dir().display()
        ));
    }
    session.progress.start(session.indices.len());
    let grace = if waiting.shared_fs {
        SHARED_FS_LOST_GRACE
    } else {
        Duration::ZERO
    };
    let started = Instant::now();
    let mut feeder = waiting.feeder.clone();
    let end = wait(
        &mut session,
        &waiting.client,
        map,
        grace,
        feeder.as_mut(),
        waiting.detach_on_stop,
    );
    // Adaptive repetitions: the rule judges the bundle at each look (as the local runner does,
    // `runner::adaptive`) and each further round is submitted as an array of its own once the
    // previous one has ended. The cluster's refusal to answer squeue ends the waiting first.
    let refused = |end: &io::Result<SessionEnd>| {
        end.as_ref()
            .err()
            .and_then(|e| e.get_ref())
            .is_some_and(|r| r.is::<QueueRefused>())
    };
    let end = match &waiting.feeder {
        Some(template) if session.plan.adaptive.is_some() && !refused(&end) => {
            super::adaptive::continue_rounds_with(&mut session, end, started, &mut |session, new| {
                next_round(session, waiting, template, grace, new)
            })
        }
        _ => end,
    };
    if let Err(e) = &end
        && let Some(stopped) = e.get_ref().and_then(|r| r.downcast_ref::<QueueRefused>())
    {
        // The tasks go on in Slurm: the bundle is left `running` without a waiter, as `run
        // --detach` leaves it (dropping the session releases the lock), for a later `wait`.
        return Err(SessionError::Environment(stopped.to_string()));
    }
    if let Err(e) = &end
        && let Some(detached) = e.get_ref().and_then(|r| r.downcast_ref::<Detached>())
    {
        // As above: left `running` for a later `wait` (the lock is released with the session).
        return Err(SessionError::Detached(detached.to_string()));
    }
    let jobs: Vec<u64> = session
        .writer_mut()
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.iter().map(|a| a.job_id).collect())
        .unwrap_or_default();
    session.finish(end, jobs)
}

/// One further round of adaptive repetitions (`new`: the round's plan indices, already in the
/// session's plan and in plan.json): submitted held as job arrays of their own (`array-<n>.sbatch`
/// numbered after the bundle's earlier arrays, recorded in bundle.json before release), with
/// `template`'s limits and keys ([`Feeder::for_round`]), then waited for ([`wait`]) over every
/// array of the bundle.
///
/// # Errors
/// The submission fails (sbatch refuses: recorded in `slurm.refusals`), or as [`wait`].
fn next_round(
    session: &mut Session<'_>,
    waiting: &Waiting,
    template: &Feeder,
    grace: Duration,
    new: &[usize],
) -> io::Result<SessionEnd> {
    let quiet = session.finish.quiet;
    let mut feeder = template.for_round(new);
    let plan = session.plan.clone();
    match feeder.feed(
        &plan,
        session.writer_mut(),
        &waiting.client,
        Release::Governed,
        quiet,
        0,
    ) {
        Ok(arrays) => {
            if !quiet && !arrays.is_empty() {
                super::progress::say(format_args!(
                    "submitted the round as slurm job(s) {}",
                    arrays
                        .iter()
                        .map(|a| a.job_id.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Err(SubmitError::Interrupted) => return Ok(SessionEnd::Interrupted),
        Err(e) => {
            return Err(io::Error::other(format!(
                "submitting the next round of adaptive repetitions: {e}"
            )));
        }
    }
    let arrays = session
        .writer_mut()
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.clone())
        .unwrap_or_default();
    let map = TaskMap::new(&arrays).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    session.indices = new.to_vec();
    wait(
        session,
        &waiting.client,
        map,
        grace,
        Some(&mut feeder),
        waiting.detach_on_stop,
    )
}

/// Why [`wait`] stopped waiting: `squeue` failed with an error that is not transient
/// ([`SlurmError::is_transient`]: no controller down or overloaded, so asking again would fail
/// again, e.g. `Invalid user for SlurmUser`). The tasks go on in Slurm; the bundle stays `running`.
#[derive(Debug, thiserror::Error)]
#[error(
    "squeue failed and asking again would not help: {error}\n  the bundle's tasks go on in slurm; once squeue works, `hwr-exp wait {bundle}` waits for them again (or `hwr-exp cancel {bundle}` stops them)"
)]
pub struct QueueRefused {
    /// The failed squeue call.
    pub error: SlurmError,
    /// The bundle folder.
    pub bundle: String,
}

/// The shortest pause between two polls of [`wait`].
pub const POLL_MIN: Duration = POLL;

/// The longest pause between two polls of [`wait`] while nothing changes.
pub const POLL_MAX: Duration = Duration::from_secs(5);

/// The longest pause between two polls of [`wait`] while runs start and end with much work still
/// ahead: the progress display and the next piece then lag the queue by at most this (plus one
/// `squeue`); the next array's release does not (the pause is bounded by the tasks ahead of it).
pub const POLL_FLOW_MAX: Duration = Duration::from_secs(10);

/// How many changes (a task started, a run finished or was lost, arrays submitted) one poll aims
/// to see while runs flow. A poll costs one `squeue` process (12-20 ms of CPU on the 2-core test
/// machine, most of it the client's start-up and its three RPCs, whatever the answer's size) and
/// a job-info RPC in slurmctld, so at a fixed 0.25 s a cluster starting 20 tasks a second cost
/// the waiter 2 ms of CPU per run and more job-info RPCs than a hand-written `squeue` loop. At
/// 64 changes a poll (up to 2 s) 20,000 runs still made 745 job-info RPCs against the hand
/// loop's 539 (324 in another round, its squeue slower under load); aiming at 256 (capped at
/// [`POLL_FLOW_MAX`]) polls a bundle ending 15-20 runs a second every 7-10 s.
pub const POLL_BATCH: u32 = 256;

/// The next pause of [`wait`], given the time `since` the previous poll, the `changes` this one
/// saw and the tasks `ahead` that can start or end before the waiter has something to do (the
/// front array's pending tasks while a held array waits behind it, else the bundle's tasks not
/// over: [`tasks_ahead`](super::slurm_pieces::tasks_ahead)):
/// - nothing changed: half as long again as `previous`, up to [`POLL_MAX`];
/// - else the pause in which `min(POLL_BATCH, ahead)` changes are expected at the rate just
///   seen (`since * aim / changes`), between [`POLL_MIN`] and [`POLL_FLOW_MAX`]. A task is one or
///   two changes (its start, if seen, and its end), so the next poll comes before about half of
///   the tasks ahead have gone: a busy bundle with much work left is polled every 10 s, an array
///   boundary or the bundle's end are approached with shorter pauses, and a burst of changes
///   (many tasks ending at once) is looked at again after [`POLL_MIN`].
pub fn next_pause(previous: Duration, since: Duration, changes: usize, ahead: usize) -> Duration {
    if changes == 0 {
        return (previous + previous / 2).clamp(POLL_MIN, POLL_MAX);
    }
    let aim = u32::try_from(ahead).unwrap_or(u32::MAX).clamp(1, POLL_BATCH);
    let changes = u32::try_from(changes).unwrap_or(u32::MAX);
    (since.saturating_mul(aim) / changes).clamp(POLL_MIN, POLL_FLOW_MAX)
}

/// What [`wait`] keeps per run still waited for: which runs have no counted run.json yet, since
/// when a run's task is gone without one, which tasks were seen running and on which node.
#[derive(Debug, Default)]
struct Waited {
    /// Runs without a counted run.json.
    pending: BTreeSet<usize>,
    /// When each run's task was first seen gone from the queue without a run.json.
    gone_since: BTreeMap<usize, Instant>,
    /// Runs whose task was seen running.
    started: BTreeSet<usize>,
    /// The node each started task runs on (for a lost run whose task Slurm no longer knows).
    seen_on: BTreeMap<usize, String>,
}

impl Waited {
    fn new(indices: &[usize]) -> Self {
        Waited {
            pending: indices.iter().copied().collect(),
            ..Waited::default()
        }
    }

    /// Forgets run `i`, which has its run.json now: nothing of it is kept.
    fn finished(&mut self, i: usize) {
        self.pending.remove(&i);
        self.gone_since.remove(&i);
        self.started.remove(&i);
        self.seen_on.remove(&i);
    }
}

/// Waits until every run of the session has a run.json. Each poll asks `squeue` once for the
/// active tasks of the bundle's arrays ([`SlurmClient::active`]: the states of tasks not over,
/// an array's pending rest as one line) and looks at a run's folder only once its task is no
/// longer active: no folder of a pending or running task is opened. An array a successful poll
/// no longer lists is over and not asked about again (so one array left in the queue is one
/// `REQUEST_JOB_INFO_SINGLE`, not a whole-table `REQUEST_JOB_INFO`). It releases held arrays in
/// order ([`govern`]), submits the next piece when `feeder` has runs left and room frees
/// ([`Feeder::feed`]), and pauses [`next_pause`]: up to [`POLL_FLOW_MAX`] while runs start and
/// end with much work ahead, shorter as the tasks ahead of the next array or of the bundle's end
/// run out (and after a burst of changes, down to [`POLL_MIN`]), growing to [`POLL_MAX`] while
/// nothing changes; [`POLL_MIN`] while an array boundary is near
/// ([`boundary_near`](super::slurm_pieces::boundary_near)). A run whose task ended, still without run.json
/// `lost_grace` later, is recorded as `lost` with Slurm's account of the task (`scontrol show
/// job`). Each run.json found is counted in bundle.json. When `squeue` fails with a transient
/// error (after the client's retries), only folders of runs seen running are looked at until it
/// answers again; any other squeue failure stops the waiting ([`QueueRefused`]).
///
/// The cancel flag (Ctrl-C) or the marker `slurm/cancel-requested` (`hwr-exp cancel`) cancels
/// every array (`scancel`), waits up to [`CANCEL_WAIT`] until none of their tasks is active and
/// ends [`SessionEnd::Interrupted`]; runs without run.json stay so (`resume` submits them again).
///
/// # Errors
/// I/O errors writing bundle.json or a lost run's run.json; an error holding [`QueueRefused`] when
/// squeue fails with an error that is not transient.
pub fn wait(
    session: &mut Session<'_>,
    client: &SlurmClient,
    mut map: TaskMap,
    lost_grace: Duration,
    mut feeder: Option<&mut Feeder>,
    detach_on_stop: bool,
) -> io::Result<SessionEnd> {
    let (plan, cancel, total, quiet) = (
        session.plan.clone(),
        session.cancel,
        session.indices.len(),
        session.finish.quiet,
    );
    let plan: &Plan = &plan;
    let (indices, progress) = (&session.indices, &session.progress);
    let writer = session
        .writer
        .get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut waited = Waited::new(indices);
    let mut done = 0usize;
    let marker = writer.dir().join(files::SLURM).join(files::CANCEL_REQUESTED);
    let mut warned = false;
    let mut pause = POLL_MIN;
    let mut last_poll = Instant::now();
    // The bundle's tasks pending at the last poll (none known before the first).
    let mut queued = 0usize;
    // Arrays a poll no longer listed: every task of theirs is over, they are not asked about.
    let mut over: BTreeSet<u64> = BTreeSet::new();
    let order = |writer: &BundleWriter| -> Vec<u64> {
        writer
            .info()
            .slurm
            .as_ref()
            .map(|s| s.arrays.iter().map(|a| a.job_id).collect())
            .unwrap_or_default()
    };
    // The last pending-reason summary shown (`2 pending (PartitionTimeLimit)`).
    let mut shown_pending: Option<String> = None;
    let detach = |writer: &BundleWriter| {
        io::Error::other(Detached {
            signal: "Ctrl-C or another stop signal",
            bundle: writer.dir().display().to_string(),
        })
    };
    loop {
        if cancel.load(Ordering::SeqCst) || marker.exists() {
            if detach_on_stop && !marker.exists() {
                return Err(detach(writer));
            }
            cancel_arrays(&client.without_cancel(), &map);
            return Ok(SessionEnd::Interrupted);
        }
        let mut changes = 0usize;
        if let Some(f) = feeder.as_deref_mut()
            && f.remaining() > 0
        {
            match f.feed(plan, writer, client, Release::Governed, quiet, queued) {
                Ok(arrays) if !arrays.is_empty() => {
                    changes += 1;
                    let all = writer
                        .info()
                        .slurm
                        .as_ref()
                        .map(|s| s.arrays.clone())
                        .unwrap_or_default();
                    map = TaskMap::new(&all).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                Ok(_) => {}
                Err(e) => super::progress::say(format_args!(
                    "warning: submitting the next piece failed, trying again later: {e}"
                )),
            }
        }
        let asked: Vec<u64> = map
            .job_ids()
            .into_iter()
            .filter(|id| !over.contains(id))
            .collect();
        let queue = match client.active(&asked) {
            Ok(q) => {
                warned = false;
                Some(q)
            }
            Err(e @ SlurmError::Failed { .. }) if !e.is_transient() => {
                return Err(io::Error::other(QueueRefused {
                    error: e,
                    bundle: writer.dir().display().to_string(),
                }));
            }
            Err(e) => {
                if !warned {
                    super::progress::say(format_args!("warning: squeue failed, retrying: {e}"));
                    warned = true;
                }
                None
            }
        };
        // `hwr-exp cancel` writes the marker before it runs scancel: a snapshot taken after that
        // scancel shows the cancelled tasks gone, and they must not be recorded as lost.
        if cancel.load(Ordering::SeqCst) || marker.exists() {
            if detach_on_stop && !marker.exists() {
                return Err(detach(writer));
            }
            cancel_arrays(&client.without_cancel(), &map);
            return Ok(SessionEnd::Interrupted);
        }
        let mut near = false;
        let mut ahead = waited.pending.len();
        if let Some(q) = &queue {
            over.extend(asked.iter().filter(|id| !q.arrays.contains_key(id)));
            queued = q.arrays.values().map(|a| a.pending.len()).sum();
            near = super::slurm_pieces::boundary_near(q, &order(writer), plan.jobs);
            ahead = super::slurm_pieces::tasks_ahead(q, &order(writer));
            let released = apply(client, &govern(q, &order(writer), plan.jobs));
            if !released.is_empty() {
                writer.set_slurm_array_state(&released, crate::slurm::ArrayState::Released)?;
            }
            let reasons = q.pending_reasons(|k| map.index(k).is_some_and(|i| waited.pending.contains(&i)));
            let text = crate::slurm::queue::pending_text(&reasons);
            if text != shown_pending {
                progress.waiting(text.as_deref());
                shown_pending = text;
            }
        }
        // Runs whose task Slurm no longer lists as active: their folders are looked at.
        let mut ended: Vec<usize> = Vec::new();
        for &i in &waited.pending {
            let Some(key) = map.task(i) else {
                continue;
            };
            match &queue {
                Some(q) => match q.activity(key) {
                    Some(crate::slurm::Activity::Started(state, nodes)) => {
                        if let Some(n) = nodes
                            && !waited.seen_on.contains_key(&i)
                        {
                            waited.seen_on.insert(i, n.to_string());
                        }
                        if *state == crate::slurm::TaskState::Running && waited.started.insert(i) {
                            changes += 1;
                            progress.run_started(&plan.run(i));
                        }
                    }
                    Some(crate::slurm::Activity::Pending) => {}
                    None => ended.push(i),
                },
                // No answer from squeue: only runs seen running may have ended.
                None if waited.started.contains(&i) => ended.push(i),
                None => {}
            }
        }
        for i in ended {
            let run = plan.run(i);
            let path = writer.run_dir(&run).join(files::RUN);
            let Some(key) = map.task(i) else {
                continue;
            };
            let read = crate::bundle::read::read_versioned::<RunRecord>(
                &path,
                "format",
                crate::bundle::BUNDLE_FORMAT,
            );
            let lost = match read {
                Ok(record) if !needs_slurms_word(&record) => {
                    writer.count_run(&record)?;
                    changes += 1;
                    done = finished(&mut waited, i, &run, &record, writer, progress, (done, total));
                    continue;
                }
                Ok(record) => {
                    // A run that failed may have died of Slurm's signal before its task learnt
                    // that Slurm sent it: trust the record once Slurm says the task ended on its
                    // own (its task is no longer active; without an answer from squeue, wait).
                    if queue.is_none() {
                        continue;
                    }
                    let account = SlurmAccount::of(client, key, None, writer.dir());
                    if !account.killed {
                        writer.count_run(&record)?;
                        changes += 1;
                        done = finished(&mut waited, i, &run, &record, writer, progress, (done, total));
                        continue;
                    }
                    let started = crate::slurm::log::parse_time(&record.start);
                    let ended = crate::slurm::log::parse_time(&record.end).unwrap_or_else(SystemTime::now);
                    account.lost(key, started, ended)
                }
                Err(_) => {
                    if queue.is_none() {
                        continue;
                    }
                    let since = *waited.gone_since.entry(i).or_insert_with(Instant::now);
                    if since.elapsed() < lost_grace {
                        continue;
                    }
                    let account = SlurmAccount::of(client, key, None, writer.dir());
                    // Read again: the task may have written run.json since the first look.
                    if path.exists() {
                        continue;
                    }
                    let (started, ended) = (account.started, account.ended.unwrap_or_else(SystemTime::now));
                    account.lost(key, started, ended)
                }
            };
            let mut lost = lost;
            // The node the task started on, as this waiter saw it, when Slurm forgot the task.
            if lost.node.is_none() {
                lost.node = waited.seen_on.get(&i).cloned();
            }
            // record_lost counts the run in bundle.json itself.
            let record = writer.record_lost(&run, plan.output_format, lost)?;
            changes += 1;
            done = finished(&mut waited, i, &run, &record, writer, progress, (done, total));
        }
        if waited.pending.is_empty() {
            return Ok(SessionEnd::Complete);
        }
        pause = if near {
            POLL_MIN
        } else {
            next_pause(pause, last_poll.elapsed(), changes, ahead)
        };
        last_poll = Instant::now();
        // Sleep in slices, so that Ctrl-C and `hwr-exp cancel` are seen within POLL_MIN.
        let until = Instant::now() + pause;
        while Instant::now() < until && !cancel.load(Ordering::SeqCst) && !marker.exists() {
            std::thread::sleep(POLL_MIN.min(until.saturating_duration_since(Instant::now())));
        }
    }
}

/// Run `i` of the bundle `writer` holds has its run.json `record`, counted in bundle.json: `waited`
/// forgets it, `progress` shows it (with its failure's tail). Returns the runs done now, given
/// `(done, total)` before.
fn finished(
    waited: &mut Waited,
    i: usize,
    run: &crate::plan::PlannedRun,
    record: &RunRecord,
    writer: &BundleWriter,
    progress: &super::progress::Collect,
    (done, total): (usize, usize),
) -> usize {
    waited.finished(i);
    let failure = RunFailure::read(record, &writer.run_dir(run), FAILURE_TAIL_LINES);
    progress.run_finished(run, record, failure.as_ref(), done + 1, total);
    done + 1
}

/// Whether a run.json a task wrote needs Slurm's word before it is trusted: a run that did not
/// end ok by itself (failed, invalid output) may have been ended by Slurm (its processes got
/// Slurm's SIGTERM before the task did, and exited 143 or died of it). Lost records, the run's
/// own timeouts and ok runs are taken as they are.
fn needs_slurms_word(record: &RunRecord) -> bool {
    record.outcome != crate::bundle::Outcome::Ok
        && matches!(record.termination, Termination::Exited | Termination::Signaled)
}

/// What Slurm says about one task that ended: from `scontrol show job` while Slurm knows it, else
/// the `squeue` entry, else the task's log file (`slurm/logs/A_T.err`, which outlives
/// `MinJobAge`).
#[derive(Debug, Clone)]
struct SlurmAccount {
    /// Slurm itself ended the task ([`crate::slurm::TaskState::killed_by_slurm`], or the log's
    /// `CANCELLED AT` line when Slurm no longer knows it).
    killed: bool,
    /// The account as one line (`PREEMPTED (exit code 0:15): *** JOB 7 ON n1 CANCELLED AT ...
    /// DUE TO PREEMPTION ***`).
    reason: String,
    node: Option<String>,
    job_id: Option<u64>,
    /// When the task's run started (its log's start line, else `StartTime`).
    started: Option<SystemTime>,
    /// When it ended (`EndTime`, else the log's `CANCELLED AT`).
    ended: Option<SystemTime>,
}

impl SlurmAccount {
    fn of(
        client: &SlurmClient,
        key: crate::slurm::TaskKey,
        entry: Option<&crate::slurm::QueueEntry>,
        bundle: &Path,
    ) -> SlurmAccount {
        use crate::slurm::log::{TaskLog, parse_time, task_log};
        let job = client.show_task(key).ok().flatten();
        let log = TaskLog::read(&task_log(bundle, key));
        let said = log.ended_by_slurm.as_ref().map(|e| {
            let line = e.line.find("*** JOB").map_or(e.line.as_str(), |at| &e.line[at..]);
            line.to_string()
        });
        let with_log = |head: String| match &said {
            Some(line) => format!("{head}: {line}"),
            None => head,
        };
        let (killed, reason) = match (&job, entry) {
            (Some(j), _) => (j.state.killed_by_slurm(), with_log(j.describe())),
            (None, Some(e)) => (
                e.state.killed_by_slurm(),
                with_log(format!(
                    "{}{}",
                    e.state,
                    e.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
                )),
            ),
            (None, None) => match &log.ended_by_slurm {
                Some(end) => (
                    true,
                    format!(
                        "{} (no longer known to Slurm; its log {}/logs/{key}.err says: {})",
                        end.state,
                        files::SLURM,
                        said.clone().unwrap_or_default()
                    ),
                ),
                None => (
                    false,
                    "no longer known to Slurm (cancelled while pending, or purged after MinJobAge), and its log says nothing".into(),
                ),
            },
        };
        let node = job
            .as_ref()
            .and_then(|j| j.nodes.clone())
            .or_else(|| entry.and_then(|e| e.nodes.clone()));
        // The reason names the node the task was on (run.json `node` too).
        let reason = match &node {
            Some(n) => format!("{reason} on node {n}"),
            None => reason,
        };
        let started = log
            .started
            .as_deref()
            .and_then(parse_time)
            .or_else(|| job.as_ref()?.start_time.as_deref().and_then(parse_time));
        // Slurm gives whole seconds: the end lies within the second it names, and not after now.
        let ended = job
            .as_ref()
            .and_then(|j| j.end_time.as_deref().and_then(parse_time))
            .or_else(|| log.ended_by_slurm.as_ref()?.at.as_deref().and_then(parse_time))
            .map(|t| (t + Duration::from_millis(999)).min(SystemTime::now()).max(t));
        SlurmAccount {
            killed,
            reason,
            node,
            job_id: job.as_ref().map(|j| j.job_id).or(entry.map(|e| e.job_id)),
            started,
            ended,
        }
    }

    /// The lost record's facts for task `key`, with the run's `started`/`ended` times.
    fn lost(self, key: crate::slurm::TaskKey, started: Option<SystemTime>, ended: SystemTime) -> LostTask {
        LostTask {
            reason: self.reason,
            node: self.node,
            task: Some(SlurmTaskIds {
                job_id: self.job_id,
                array_job_id: Some(key.array_job_id),
                array_task_id: Some(key.task_id),
            }),
            started,
            ended,
        }
    }
}

/// Cancels every array of `map` and waits up to [`CANCEL_WAIT`] until `squeue` shows none of their
/// tasks active (a cancelled task is gone once its processes are).
pub fn cancel_arrays(client: &SlurmClient, map: &TaskMap) {
    let targets: Vec<CancelTarget> = map.job_ids().into_iter().map(CancelTarget::Job).collect();
    if let Err(e) = client.cancel(&targets) {
        super::progress::say(format_args!("warning: {e}"));
    }
    let until = Instant::now() + CANCEL_WAIT;
    while Instant::now() < until {
        match client.active(&map.job_ids()) {
            Ok(q) if q.is_empty() => return,
            Err(_) => return,
            Ok(_) => std::thread::sleep(POLL),
        }
    }
}

/// The node's hostname (`uname` nodename).
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The node's name as Slurm knows it: `SLURMD_NODENAME` (set by slurmd in every task; it differs
/// from the hostname where `NodeName` is not the hostname, e.g. several slurmd on one machine),
/// else `hostname`.
pub fn node_name(hostname: &str) -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hostname.to_string())
}

/// The Slurm ids of the task this process runs in, from `SLURM_JOB_ID`, `SLURM_ARRAY_JOB_ID` and
/// `SLURM_ARRAY_TASK_ID` (each `None` when unset or not a number).
pub fn task_ids_from_env() -> SlurmTaskIds {
    fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
        std::env::var(name).ok()?.trim().parse().ok()
    }
    SlurmTaskIds {
        job_id: var("SLURM_JOB_ID"),
        array_job_id: var("SLURM_ARRAY_JOB_ID"),
        array_task_id: var("SLURM_ARRAY_TASK_ID"),
    }
}

/// How a task ended ([`run_task`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TaskEnd {
    /// The run executed and its run.json was written (whatever the run's own outcome).
    Recorded(Box<RunRecord>),
    /// run.json was already there (the task ran before): nothing was done.
    AlreadyFinished,
    /// The task was stopped (SIGTERM from `scancel` or Slurm's time limit) before the run finished:
    /// no run.json, so the waiter records the run as `lost`.
    Stopped,
    /// The pre-timeout signal of `[executor] requeue = true` stopped the run and the task put
    /// itself back into the queue (`scontrol requeue`): it runs again, keeping this attempt.
    Requeued,
}

/// One planned run of a bundle on the node, as `hwr-exp slurm-task BUNDLE INDEX` does: writes the
/// node's host facts once (`hosts/<node>.json`, [`node_name`]), pins the run to the CPUs of the task's
/// allocation (`sched_getaffinity` of this process: what Slurm gave the task), runs it with the
/// launcher of `runs` ([`super::Runs::launch`]: timeout, sampling as locally) and writes its
/// folder and run.json with `hostname`, `node` and the Slurm ids. Takes no lock: the submitting or
/// waiting hwr-exp holds it. A run stopped by Slurm (`stopped_by_slurm`) gets no run.json: the
/// waiter records it as `lost`.
///
/// # Errors
/// I/O errors writing the run's files, a CPU set that cannot be read, or a run the runner could
/// not start for want of its own resources.
pub fn run_task(
    runs: super::Runs<'_>,
    index: usize,
    bundle: &Path,
    requeue: Option<&AtomicBool>,
) -> io::Result<TaskEnd> {
    let host = hostname();
    let node = node_name(&host);
    let writer = TaskRunWriter::new(
        bundle,
        NodeIds {
            hostname: Some(host),
            node: Some(node.clone()),
            slurm: Some(task_ids_from_env()),
        },
    );
    let mut run = runs.plan.run(index);
    if writer.finished(&run) {
        return Ok(TaskEnd::AlreadyFinished);
    }
    writer.write_node_host(&node, crate::provenance::host::collect)?;
    run.cpus =
        crate::cpus::allowed_cpus().map_err(|e| io::Error::other(format!("sched_getaffinity: {e}")))?;
    let run_dir = writer.prepare_run_dir(&run)?;
    {
        // The task's log (`slurm/logs/A_T.err`) keeps when its run started, for a waiter that
        // finds the task lost after Slurm forgot it (MinJobAge).
        use std::io::Write as _;
        let line = crate::slurm::log::start_line(&run.run_id, &crate::timestamp::now(), &node);
        let _ = writeln!(io::stderr(), "{line}");
    }
    let own_job = task_ids_from_env().job_id;
    let grace = runs.plan.grace;
    let done = AtomicBool::new(false);
    let executed = std::thread::scope(|scope| {
        // A requeueing task's pre-timeout watcher; a task without requeue has none.
        let watcher = requeue.and_then(|heard| {
            std::thread::Builder::new()
                .name("pre-timeout watcher".into())
                .spawn_scoped(scope, || {
                    watch_pre_timeout(heard, runs.cancel, &done, script::requeue_lead(grace), || {
                        let id = own_job.ok_or("no SLURM_JOB_ID")?;
                        telling(SlurmClient::new(), false)
                            .time_left(id)
                            .map_err(|e| e.to_string())
                    })
                })
                .ok()
        });
        let executed = runs.launch(run, run_dir, &mut || {});
        done.store(true, Ordering::SeqCst);
        if let Some(w) = &watcher {
            w.thread().unpark();
        }
        executed
    })?;
    if stopped_by_slurm(&executed.outcome, runs.cancel, || {
        let id = own_job?;
        let job = telling(SlurmClient::new(), false).show_job(id).ok().flatten()?;
        Some(job.state)
    }) {
        if requeue.is_some_and(|r| r.load(Ordering::SeqCst))
            && let Some(id) = own_job
        {
            // The pre-timeout signal: the run is stopped; the task goes back into the queue and
            // its next start keeps this attempt under attempts/ (prepare_run_dir).
            telling(SlurmClient::new(), false)
                .requeue(id)
                .map_err(|e| io::Error::other(format!("requeueing job {id}: {e}")))?;
            return Ok(TaskEnd::Requeued);
        }
        return Ok(TaskEnd::Stopped);
    }
    let record = writer.record_run(&executed.run, &executed.outcome, runs.plan.output_format)?;
    Ok(TaskEnd::Recorded(Box::new(record)))
}

/// How the line a requeueing task writes to its log (`slurm/logs/A_T.err`) when it hears its
/// pre-timeout signal begins (the task's pre-timeout watcher writes it, then says what it decided).
pub const PRE_TIMEOUT_PREFIX: &str = "slurm: pre-timeout signal: ";

/// A requeueing task's answer to its pre-timeout signal (`[executor] requeue = true`), run
/// beside the run until `done`. Once `requeue` is set (SIGUSR2, [`crate::signal::install_pre_timeout`])
/// it asks Slurm how long the job has left (`time_left`: `squeue -h -j $SLURM_JOB_ID -o %L`) and
/// sets `cancel` (the run is stopped: SIGTERM, SIGKILL after grace) when only `lead` (the grace
/// period plus the requeue margin, [`script::requeue_lead`]) is left, or at once when that is
/// already past, the time left is unknown or cannot be read. Slurm checks its signal times about
/// once a minute, so the signal may come up to a minute earlier than `--signal=B:USR2@<lead>`
/// asked: stopping at once would interrupt runs that had time to finish and requeue a task
/// twice. A job without a time limit is never stopped by this watcher.
fn watch_pre_timeout(
    requeue: &AtomicBool,
    cancel: &CancelFlag,
    done: &AtomicBool,
    lead: Duration,
    time_left: impl FnOnce() -> Result<Option<Duration>, String>,
) {
    // The run's end unparks this thread; the signal is looked for once a second (the lead
    // leaves 30 s to spare).
    while !requeue.load(Ordering::SeqCst) {
        if done.load(Ordering::SeqCst) {
            return;
        }
        std::thread::park_timeout(Duration::from_secs(1));
    }
    let heard = Instant::now();
    let stop_at = match time_left() {
        Ok(Some(left)) => {
            let wait = left.saturating_sub(lead);
            super::progress::say(format_args!(
                "{PRE_TIMEOUT_PREFIX}{}s left: the run is stopped in {}s unless it ends first",
                left.as_secs(),
                wait.as_secs()
            ));
            heard + wait
        }
        // No time limit: Slurm will not end the job for time.
        Ok(None) => {
            super::progress::say(format_args!("{PRE_TIMEOUT_PREFIX}no time limit: the run goes on"));
            return;
        }
        Err(e) => {
            super::progress::say(format_args!(
                "{PRE_TIMEOUT_PREFIX}the job's time left is unknown ({e}): stopping the run now"
            ));
            heard
        }
    };
    loop {
        if done.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        if now >= stop_at {
            cancel.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::park_timeout((stop_at - now).min(Duration::from_millis(500)));
    }
}

/// How long a task whose run ended badly waits for its own SIGTERM to set the cancel flag
/// ([`stopped_by_slurm`]) before it asks Slurm.
const SIGTERM_SETTLE: Duration = Duration::from_millis(500);

/// Whether the task was stopped by Slurm (`scancel`, preemption, time limit, node failure) rather
/// than its run ending by itself: the run was stopped by the cancel flag, or the flag is set by
/// the time it ended. Slurm signals every process of the job, in no set order, so the run may die
/// of that SIGTERM (or catch it and exit 143, as many programs do) before this process's own
/// SIGTERM has set the flag. So a run that did not exit 0 gives the flag [`SIGTERM_SETTLE`] to
/// arrive, and then Slurm's own state of the task decides (`slurm_state`: `scontrol show job
/// $SLURM_JOB_ID`): any state but RUNNING means Slurm is ending it (CANCELLED, TIMEOUT,
/// PREEMPTED, NODE_FAIL, REQUEUED...). Slurm sets that state before it sends a signal. Only the
/// task path asks; a local run's SIGTERM is the run's own business. The waiter checks again
/// ([`wait`]: a failed run's record is trusted only once Slurm says the task ended by itself).
fn stopped_by_slurm(
    outcome: &crate::exec::RunOutcome,
    cancel: &CancelFlag,
    slurm_state: impl FnOnce() -> Option<crate::slurm::TaskState>,
) -> bool {
    let stopped = || outcome.termination == Termination::Interrupted || cancel.load(Ordering::SeqCst);
    if stopped() {
        return true;
    }
    let ended_badly = outcome.signal.is_some() || outcome.exit_code.is_some_and(|c| c != 0);
    if !ended_badly {
        return false;
    }
    let until = Instant::now() + SIGTERM_SETTLE;
    while Instant::now() < until {
        if stopped() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stopped() || slurm_state().is_some_and(|s| s != crate::slurm::TaskState::Running)
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
    let ctx = super::session::plan_context(&dir)?;
    let plan = super::session::expand(manifest, &ctx)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs [`watch_pre_timeout`] on a thread with the signal already heard (`heard`) or not,
    /// sets `done` after `run_for` (the run ending by itself), and gives whether it stopped the run.
    fn watched(heard: bool, run_for: Duration, left: Result<Option<Duration>, String>) -> bool {
        let requeue = AtomicBool::new(heard);
        let cancel: CancelFlag = std::sync::Arc::new(AtomicBool::new(false));
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let w = s.spawn(|| watch_pre_timeout(&requeue, &cancel, &done, Duration::from_secs(60), || left));
            // The run ends by itself after `run_for`, unless the watcher stopped it first.
            let until = Instant::now() + run_for;
            while Instant::now() < until && !cancel.load(Ordering::SeqCst) {
                std::thread::sleep(MS);
            }
            done.store(true, Ordering::SeqCst);
            w.thread().unpark();
            w.join().unwrap();
        });
        cancel.load(Ordering::SeqCst)
    }

    #[test]
    fn an_early_pre_timeout_signal_lets_a_run_that_ends_in_time_finish() {
        // 80 s left, 60 s of lead: the stop is 20 s away; the run ends after 200 ms.
        let short = Duration::from_millis(200);
        assert!(!watched(true, short, Ok(Some(Duration::from_secs(80)))));
        // No signal at all: nothing is stopped.
        assert!(!watched(false, short, Ok(Some(Duration::ZERO))));
        // No time limit: Slurm will not end the job for time.
        assert!(!watched(true, short, Ok(None)));
    }

    #[test]
    fn the_pre_timeout_signal_stops_the_run_when_only_the_lead_is_left() {
        // 60.1 s left, 60 s of lead: stopped about 100 ms after the signal, before the run's
        // own end 30 s later.
        let long = Duration::from_secs(30);
        assert!(watched(true, long, Ok(Some(Duration::from_millis(60_100)))));
        // Already past the lead (the signal was late, or the lead is longer than the limit).
        assert!(watched(true, long, Ok(Some(Duration::from_secs(5)))));
        // The time left cannot be read: stopped at once, as before.
        assert!(watched(true, long, Err("squeue failed".into())));
    }

    #[test]
    fn a_replaced_binary_is_submitted_by_its_path_without_the_deleted_suffix() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("hwr-exp");
        let deleted = PathBuf::from(format!("{} (deleted)", bin.display()));
        assert_eq!(script_binary(deleted), bin);
        assert_eq!(script_binary(bin.clone()), bin);
        // A file really named so is kept.
        let odd = dir.path().join("odd (deleted)");
        std::fs::write(&odd, "").unwrap();
        assert_eq!(script_binary(odd.clone()), odd);
    }

    #[test]
    fn the_pause_grows_by_half_while_nothing_changes_up_to_the_maximum() {
        assert_eq!(next_pause(POLL_MIN, POLL_MIN, 0, 1000), 375 * MS);
        assert_eq!(next_pause(4000 * MS, 4000 * MS, 0, 1000), POLL_MAX);
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 0, 0), POLL_MAX);
    }

    #[test]
    fn a_steady_flow_with_much_ahead_is_polled_so_that_a_poll_sees_about_a_batch_of_changes() {
        // 80 changes a second (40 tasks start and 40 end): a batch of 256 is 3.2 s of them.
        assert_eq!(next_pause(POLL_MIN, 250 * MS, 20, 10_000), 3200 * MS);
        // At the new pause the same rate keeps it.
        assert_eq!(next_pause(3200 * MS, 3200 * MS, 256, 10_000), 3200 * MS);
        // 20 tasks a second, each seen to start and to end: 6.4 s.
        assert_eq!(next_pause(1600 * MS, 1600 * MS, 64, 10_000), 6400 * MS);
        // A slow flow: every POLL_FLOW_MAX, the longest lag the progress and the next piece
        // may have.
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 8, 10_000), POLL_FLOW_MAX);
    }

    #[test]
    fn the_pause_shortens_as_the_tasks_ahead_run_out() {
        // 40 changes a second, 64 tasks before the next array is due (or the bundle's end):
        // the next look after 64 changes, 1.6 s, before the last of them can have gone.
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 200, 64), 1600 * MS);
        // 16 tasks left: 0.4 s.
        assert_eq!(next_pause(1600 * MS, 1600 * MS, 64, 16), 400 * MS);
        // Nothing ahead (a held array is due): POLL_MIN.
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 200, 0), POLL_MIN);
    }

    #[test]
    fn a_burst_of_changes_is_looked_at_again_soon() {
        // 2,000 tasks ended at once: look again soon (the next tasks start now).
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 2000, 10_000), 640 * MS);
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 10_000, 10_000), POLL_MIN);
        // One task of the last one ended after 5 s of nothing: 5 s again.
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 1, 1), POLL_MAX);
        // One of the last 4 ended after 2 s: 2 s x 4 = 8 s.
        assert_eq!(next_pause(2000 * MS, 2000 * MS, 1, 4), 8000 * MS);
        // One of the last 8 after 5 s: capped.
        assert_eq!(next_pause(POLL_MAX, POLL_MAX, 1, 8), POLL_FLOW_MAX);
    }

    #[test]
    fn a_finished_run_is_forgotten_entirely_whichever_way_it_finished() {
        // The failed-but-trusted path used to keep `gone_since`: a run whose task was gone
        // without run.json at one poll and whose failed run.json was trusted at the next.
        let mut waited = Waited::new(&[3, 4, 5]);
        waited.gone_since.insert(4, Instant::now());
        waited.started.insert(4);
        waited.seen_on.insert(4, "n1".into());
        waited.started.insert(5);
        waited.finished(4);
        assert_eq!(waited.pending.iter().copied().collect::<Vec<_>>(), vec![3, 5]);
        assert!(waited.gone_since.is_empty());
        assert!(waited.seen_on.is_empty());
        assert_eq!(waited.started.iter().copied().collect::<Vec<_>>(), vec![5]);
    }
}
