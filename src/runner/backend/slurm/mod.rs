//! The Slurm executor's session (DESIGN 8): preflight against the cluster, submission of the plan's
//! runs as chained job arrays, waiting for their run.json files while watching `squeue`, and the
//! one-run path an array task takes on its node.
//!
//! - [`preflight`]: `scontrol ping`, `MaxArraySize` from `scontrol show config`, and a warning when
//!   the results folder or the binary is on a node-local file system (`statfs`).
//! - [`wait::submit_and_wait`]: after the bundle was created on the submitting host (by
//!   [`crate::runner::experiment::run_manifest`], provenance included), [`arrays::submit`] writes one batch script per
//!   array into `slurm/` and submits it, recording each job id in bundle.json at once; then
//!   [`wait()`](wait::wait) and [`Session::finish`](crate::runner::session::Session::finish) as for the local backend.
//! - [`task::run_task`]: what `hwr-exp slurm-task BUNDLE INDEX` does on the node: one planned run with
//!   a launcher of its own ([`crate::runner::Runs::launch`]) inside the task's CPU allocation
//!   (`sched_getaffinity`), its folder and run.json written without the bundle's lock.
//!
//! Adaptive repetitions (issue 36 item 2): [`wait::wait_and_finish`] hands the bundle, once a round's
//! runs all have run.json, to `adaptive::continue_rounds_with` (the local runner's one
//! decision loop); each further round is submitted as arrays of its own and waited for
//! (`next_round`), so `run`, `wait` (after `run --detach`) and `resume` all continue the rule.
//!
//! The choice of this backend is made in [`crate::runner::backend`].

use std::path::Path;
use std::time::Duration;

use crate::manifest::{CpuSelection, Manifest, SlurmConfig};
use crate::plan::PlanError;
use crate::slurm::{ArrayLimits, RetryNote, SlurmClient, script};

pub mod arrays;
pub mod pieces;
pub mod task;
pub mod wait;

#[cfg(test)]
mod tests;

/// How often [`wait()`](wait::wait) looks for run.json files and asks `squeue`.
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
/// One message per problem (exit 3 through [`SessionError::Preflight`](crate::runner::session::SessionError::Preflight)).
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
                crate::runner::progress::say(format_args!(
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

/// `client` telling each retry of a transient error on stderr (`slurm: squeue failed (Socket
/// timed out on send/recv operation); retrying in 1 s (try 2 of 6)`), unless `quiet`.
pub fn telling(client: SlurmClient, quiet: bool) -> SlurmClient {
    if quiet {
        client
    } else {
        client.with_observer(std::sync::Arc::new(|note: &RetryNote| {
            crate::runner::progress::say(format_args!("slurm: {note}"));
        }))
    }
}
