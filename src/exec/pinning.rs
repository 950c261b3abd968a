//! Where the runner's own work runs while a run is in flight (DESIGN 4): the thread that
//! supervises and samples a run pins itself away from the CPUs of every run in flight when
//! another CPU of the runner's allowed set is free, so sampling does not disturb what it
//! measures.
//!
//! The thread is pinned from before the spawn until the run is over, then gets its CPUs back,
//! so that the work between runs (recording the run in the bundle: file creations that cost
//! CPU time in the file system) may use every allowed CPU. Measured on the loaded 2-core
//! development VM, keeping the thread pinned between runs too made a `/bin/true` run 1-3 ms
//! slower, while re-pinning costs at most one forced migration of an idle thread per run.

use std::sync::{Mutex, OnceLock};

use rustix::thread::CpuSet;

/// CPUs of the runs in flight (one entry per run and CPU).
static BUSY: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The runner's allowed CPUs, read once (before any thread was pinned).
pub(super) fn runner_allowed() -> &'static [usize] {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED.get_or_init(|| {
        rustix::thread::sched_getaffinity(None)
            .map(|set| cpus_of(&set))
            .unwrap_or_default()
    })
}

fn cpus_of(set: &CpuSet) -> Vec<usize> {
    (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
}

/// The calling thread's placement for one run: when dropped, the thread gets its CPUs back and
/// the run's CPUs are taken off the busy list.
#[derive(Debug)]
pub(super) struct Placement {
    run_cpus: Vec<usize>,
    previous: Option<CpuSet>,
    /// CPUs the calling thread may run on during the run (`sched_getaffinity` of the thread).
    pub(super) runner_cpus: Option<Vec<usize>>,
}

/// Registers `run_cpus` as busy and, when the run is pinned itself (`run_cpus` not empty) and
/// some allowed CPU is used by no run in flight, pins the calling thread to those free CPUs.
/// Otherwise the thread stays where it is. [`Placement::runner_cpus`] says where it may run.
pub(super) fn place_runner(run_cpus: &[usize]) -> Placement {
    let allowed = runner_allowed();
    let free: Vec<usize> = {
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        busy.extend_from_slice(run_cpus);
        allowed.iter().copied().filter(|c| !busy.contains(c)).collect()
    };
    let current = rustix::thread::sched_getaffinity(None).ok();
    let mut placement = Placement {
        run_cpus: run_cpus.to_vec(),
        previous: None,
        runner_cpus: current.as_ref().map(cpus_of),
    };
    if !run_cpus.is_empty() && !free.is_empty() {
        let mut set = CpuSet::new();
        free.iter().for_each(|&c| set.set(c));
        if current != Some(set) && rustix::thread::sched_setaffinity(None, &set).is_ok() {
            placement.previous = current;
        }
        if placement.previous.is_some() || current == Some(set) {
            placement.runner_cpus = Some(free);
        }
    }
    placement
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

/// Pins the calling thread to `cpus` for the rest of its life (best effort: where that fails the
/// thread stays where it is). For a runner thread that works while runs execute on other CPUs.
pub fn pin_current_thread(cpus: &[usize]) {
    let mut set = CpuSet::new();
    cpus.iter()
        .filter(|&&c| c < CpuSet::MAX_CPU)
        .for_each(|&c| set.set(c));
    let _ = rustix::thread::sched_setaffinity(None, &set);
}
