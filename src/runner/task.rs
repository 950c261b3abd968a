//! The indexed-task contract (DESIGN 8): every batch engine runs "task i of a bundle", the same
//! hidden entry point `hwr-exp task --index I BUNDLE` on a node, with the index from the engine
//! (an argument, `HWR_TASK_INDEX`, Kubernetes' `JOB_COMPLETION_INDEX`; Slurm's batch script
//! computes it from `SLURM_ARRAY_TASK_ID` and passes it). The engine adapter only submits,
//! watches, cancels and maps a task gone without run.json to `lost`.
//!
//! This module holds the engine-neutral parts: where the index comes from ([`task_index`]), the
//! node's name ([`node_name`]), and one planned run on a node for engines that give a task no
//! CPU set of its own ([`run_task`]: Ray), which claims CPUs of the node with `flock`ed slot files
//! ([`claim_cpus`]) so that concurrent tasks on one node are pinned to different CPUs. Slurm's
//! task ([`super::backend::slurm::task::run_task`]) runs on the CPUs of its allocation instead.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::backend::slurm::task::TaskEnd;
use crate::bundle::write::{NodeIds, TaskRunWriter};

/// The variable an engine may set instead of `--index`: hwr-exp's own name.
pub const INDEX_ENV: &str = "HWR_TASK_INDEX";

/// Kubernetes' completion index of an Indexed Job's pod.
pub use crate::kubernetes::job::COMPLETION_INDEX_ENV;

/// The node's name for run.json `node` and `hosts/<node>.json`, set by the engine's wrapper
/// (Ray: `<hostname>-<first 8 hex digits of the Ray node id>`, as several Ray nodes may share a
/// host).
pub const NODE_ENV: &str = "HWR_TASK_NODE";

/// The folder of the CPU slot files ([`claim_cpus`]); default `<temp dir>/hwr-exp-cpus`.
pub const CPU_LOCK_DIR_ENV: &str = "HWR_CPU_LOCK_DIR";

/// Why no task index could be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Neither `--index` nor a variable gives it.
    #[error("no task index: give --index N, or set {INDEX_ENV} or {COMPLETION_INDEX_ENV}")]
    Missing,
    /// A variable holds something other than a number.
    #[error("{name}={value:?} is not a task index (a whole number from 0)")]
    NotANumber {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
}

/// The plan index a task runs: `given` (`--index`), else `HWR_TASK_INDEX`, else
/// `JOB_COMPLETION_INDEX`, read through `var`.
///
/// # Errors
/// [`IndexError`] when none is set or the one found is not a number.
pub fn task_index(given: Option<usize>, var: impl Fn(&str) -> Option<String>) -> Result<usize, IndexError> {
    if let Some(i) = given {
        return Ok(i);
    }
    for name in [INDEX_ENV, COMPLETION_INDEX_ENV] {
        if let Some(value) = var(name) {
            return value
                .trim()
                .parse()
                .map_err(|_| IndexError::NotANumber { name, value });
        }
    }
    Err(IndexError::Missing)
}

/// The node's name: [`NODE_ENV`] when the engine set it, else `hostname`.
pub fn node_name(hostname: &str) -> String {
    std::env::var(NODE_ENV)
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .unwrap_or_else(|| hostname.to_string())
}

/// CPUs a task holds for its run: each an exclusive `flock` on `cpu<N>.lock` in the slot folder,
/// released when this value (or the process) goes.
#[derive(Debug)]
pub struct ClaimedCpus {
    /// The CPUs, ascending.
    pub cpus: Vec<usize>,
    _locks: Vec<File>,
}

/// The slot folder: [`CPU_LOCK_DIR_ENV`], else `<temp dir>/hwr-exp-cpus`.
pub fn cpu_lock_dir() -> PathBuf {
    std::env::var_os(CPU_LOCK_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("hwr-exp-cpus"))
}

/// Claims `n` CPUs of `allowed` on this node for one run: takes a non-blocking exclusive `flock`
/// on the slot file of each CPU in turn until it holds `n`; when fewer are free it lets go of all
/// and tries again every 50 ms (the engine started more tasks on the node than it has free CPUs)
/// until `cancel` is set. Slot files are shared by every hwr-exp task of the node (any bundle,
/// any engine), made world-writable so that other users' tasks can claim them too.
///
/// # Errors
/// `n` above the number of allowed CPUs; the folder or a slot file cannot be made or opened;
/// [`io::ErrorKind::Interrupted`] when `cancel` was set while waiting.
pub fn claim_cpus(n: usize, allowed: &[usize], dir: &Path, cancel: &AtomicBool) -> io::Result<ClaimedCpus> {
    use rustix::fs::{FlockOperation, flock};
    use std::os::unix::fs::PermissionsExt as _;
    if n > allowed.len() {
        return Err(io::Error::other(format!(
            "the run needs {n} CPUs (cpus-per-run) and this task may use {} ({allowed:?})",
            allowed.len()
        )));
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
    loop {
        let mut held = Vec::with_capacity(n);
        let mut cpus = Vec::with_capacity(n);
        for &cpu in allowed {
            let path = dir.join(format!("cpu{cpu}.lock"));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
            if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
                held.push(file);
                cpus.push(cpu);
                if cpus.len() == n {
                    return Ok(ClaimedCpus { cpus, _locks: held });
                }
            }
        }
        drop(held);
        if cancel.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "stopped while waiting for free CPUs",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One planned run of a bundle on a node for an engine without CPU sets of its own (Ray), as
/// `hwr-exp task --index I BUNDLE` does: writes the node's host facts once (`hosts/<node>.json`,
/// [`node_name`]), claims `cpus_per_run` CPUs of the node ([`claim_cpus`]) and pins the run to
/// them, runs it with the launcher of `runs` (timeout, containment and sampling as locally) and
/// writes its folder and run.json with `hostname` and `node`. Takes no lock: the waiting hwr-exp
/// holds it. A run stopped by a signal to this process (the engine cancelled the task, the
/// node's agent died) gets no run.json: the waiter records it as `lost`.
///
/// # Errors
/// I/O errors writing the run's files, CPUs that cannot be claimed, or a run the runner could
/// not start for want of its own resources.
pub fn run_task(
    runs: super::Runs<'_>,
    index: usize,
    bundle: &Path,
    cpus_per_run: usize,
) -> io::Result<TaskEnd> {
    let host = super::backend::slurm::task::hostname();
    let node = node_name(&host);
    let writer = TaskRunWriter::new(
        bundle,
        NodeIds {
            hostname: Some(host),
            node: Some(node.clone()),
            slurm: None,
        },
    );
    let mut run = runs.plan.run(index);
    if writer.finished(&run) {
        return Ok(TaskEnd::AlreadyFinished);
    }
    writer.write_node_host(&node, crate::provenance::host::collect)?;
    let allowed =
        crate::cpus::allowed_cpus().map_err(|e| io::Error::other(format!("sched_getaffinity: {e}")))?;
    let claimed = match claim_cpus(cpus_per_run.max(1), &allowed, &cpu_lock_dir(), runs.cancel) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(TaskEnd::Stopped),
        Err(e) => return Err(e),
    };
    run.cpus = claimed.cpus.clone();
    let run_dir = writer.prepare_run_dir(&run)?;
    {
        use std::io::Write as _;
        let line = format!(
            "hwr-exp task: run {} started at {} on {node} (CPUs {:?})",
            run.run_id,
            crate::timestamp::now(),
            claimed.cpus
        );
        let _ = writeln!(io::stderr(), "{line}");
    }
    let executed = runs.launch(run, run_dir, &mut || {})?;
    drop(claimed);
    if runs.cancel.load(Ordering::SeqCst) {
        return Ok(TaskEnd::Stopped);
    }
    let record = writer.record_run(
        &executed.run,
        &executed.outcome,
        runs.plan.output_format,
        &runs.plan.metric_pointers,
    )?;
    Ok(TaskEnd::Recorded(Box::new(record)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_comes_from_the_argument_then_hwr_task_index_then_the_completion_index() {
        let none = |_: &str| None;
        assert_eq!(task_index(Some(4), none), Ok(4));
        assert_eq!(task_index(None, none), Err(IndexError::Missing));
        let both = |n: &str| match n {
            INDEX_ENV => Some("7".to_string()),
            COMPLETION_INDEX_ENV => Some("9".to_string()),
            _ => None,
        };
        assert_eq!(task_index(None, both), Ok(7));
        assert_eq!(task_index(Some(1), both), Ok(1));
        let k8s = |n: &str| (n == COMPLETION_INDEX_ENV).then(|| " 12\n".to_string());
        assert_eq!(task_index(None, k8s), Ok(12));
        let bad = |n: &str| (n == INDEX_ENV).then(|| "x".to_string());
        assert!(matches!(
            task_index(None, bad),
            Err(IndexError::NotANumber { name: INDEX_ENV, .. })
        ));
    }

    #[test]
    fn concurrent_claims_on_one_node_get_different_cpus_and_a_released_claim_frees_them() {
        let dir = tempfile::tempdir().unwrap();
        let cancel = AtomicBool::new(false);
        let allowed = [0, 1, 2];
        let a = claim_cpus(2, &allowed, dir.path(), &cancel).unwrap();
        assert_eq!(a.cpus, [0, 1]);
        let b = claim_cpus(1, &allowed, dir.path(), &cancel).unwrap();
        assert_eq!(b.cpus, [2]);
        // None free: a waiting claim gives up when cancelled.
        let stop = AtomicBool::new(true);
        let waited = claim_cpus(1, &allowed, dir.path(), &stop).unwrap_err();
        assert_eq!(waited.kind(), io::ErrorKind::Interrupted);
        drop(a);
        let c = claim_cpus(2, &allowed, dir.path(), &cancel).unwrap();
        assert_eq!(c.cpus, [0, 1]);
        assert!(
            claim_cpus(4, &allowed, dir.path(), &cancel).is_err(),
            "more than allowed"
        );
    }
}
