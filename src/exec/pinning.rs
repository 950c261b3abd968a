//! Where the runner's own work runs while a run is in flight (DESIGN 4): the thread that
//! supervises and samples a run pins itself away from the CPUs of every run in flight when
//! another CPU of the runner's allowed set is free, so sampling does not disturb what it
//! measures.

use std::sync::{Mutex, OnceLock};

use rustix::thread::CpuSet;

/// CPUs of the runs in flight (one entry per run and CPU).
static BUSY: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The runner's allowed CPUs, read once (before any thread was pinned).
fn runner_allowed() -> &'static [usize] {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED.get_or_init(|| crate::exec::affinity::allowed_cpus().unwrap_or_default())
}

/// The calling thread's placement for one run; restores the thread's CPU affinity when dropped.
#[derive(Debug)]
pub(super) struct Placement {
    run_cpus: Vec<usize>,
    previous: Option<CpuSet>,
    /// CPUs the calling thread may run on during the run.
    pub(super) runner_cpus: Option<Vec<usize>>,
}

/// Registers `run_cpus` as busy and pins the calling thread to the allowed CPUs no run in flight
/// uses, when there are any and the run is pinned itself (`run_cpus` not empty). Otherwise the
/// thread stays where it is. Either way [`Placement::runner_cpus`] says where it may run.
pub(super) fn place_runner(run_cpus: &[usize]) -> Placement {
    let allowed = runner_allowed();
    let free: Vec<usize> = {
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        busy.extend_from_slice(run_cpus);
        allowed.iter().copied().filter(|c| !busy.contains(c)).collect()
    };
    let current = rustix::thread::sched_getaffinity(None).ok();
    let mut previous = None;
    if !run_cpus.is_empty() && !free.is_empty() {
        let mut set = CpuSet::new();
        free.iter().for_each(|&c| set.set(c));
        if rustix::thread::sched_setaffinity(None, &set).is_ok() {
            previous = current;
        }
    }
    let runner_cpus = rustix::thread::sched_getaffinity(None)
        .ok()
        .map(|set| (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect());
    Placement {
        run_cpus: run_cpus.to_vec(),
        previous,
        runner_cpus,
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Some(set) = &self.previous {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        for c in &self.run_cpus {
            if let Some(i) = busy.iter().position(|b| b == c) {
                busy.swap_remove(i);
            }
        }
    }
}
