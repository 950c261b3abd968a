//! Where the runner's own work runs while a run is in flight (DESIGN 4): the thread that
//! supervises and samples a run pins itself away from the CPUs of every run in flight when
//! another CPU of the runner's allowed set is free, so sampling does not disturb what it
//! measures.
//!
//! A thread stays pinned between its runs (re-pinning costs a forced migration per run) and
//! moves only when its CPUs meet those of a run in flight; [`restore_thread`] gives it back its
//! original CPUs (the executor does so when it is dropped).

use std::cell::Cell;
use std::sync::{Mutex, OnceLock};

use rustix::thread::CpuSet;

/// CPUs of the runs in flight (one entry per run and CPU).
static BUSY: Mutex<Vec<usize>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's affinity before it was first pinned, and the set it is pinned to now.
    static PINNED: Cell<Option<(CpuSet, CpuSet)>> = const { Cell::new(None) };
}

/// The runner's allowed CPUs, read once (before any thread was pinned).
fn runner_allowed() -> &'static [usize] {
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

/// The calling thread's placement for one run; takes the run's CPUs off the busy list when
/// dropped.
#[derive(Debug)]
pub(super) struct Placement {
    run_cpus: Vec<usize>,
    /// CPUs the calling thread may run on during the run.
    pub(super) runner_cpus: Option<Vec<usize>>,
}

/// Registers `run_cpus` as busy and, when the run is pinned itself (`run_cpus` not empty) and
/// some allowed CPU is used by no run in flight, makes sure the calling thread runs only on such
/// CPUs. [`Placement::runner_cpus`] says where the thread may run.
pub(super) fn place_runner(run_cpus: &[usize]) -> Placement {
    let allowed = runner_allowed();
    let (busy, free): (Vec<usize>, Vec<usize>) = {
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        busy.extend_from_slice(run_cpus);
        let free = allowed.iter().copied().filter(|c| !busy.contains(c)).collect();
        (busy.clone(), free)
    };
    let pinned = PINNED.with(Cell::get);
    let mut now = match pinned {
        Some((_, current)) => Some(current),
        None => rustix::thread::sched_getaffinity(None).ok(),
    };
    let clashes = now.is_none_or(|set| busy.iter().any(|&c| set.is_set(c)));
    if !run_cpus.is_empty() && !free.is_empty() && clashes {
        let mut set = CpuSet::new();
        free.iter().for_each(|&c| set.set(c));
        if rustix::thread::sched_setaffinity(None, &set).is_ok() {
            if let Some(original) = pinned.map(|(o, _)| o).or(now) {
                PINNED.with(|p| p.set(Some((original, set))));
            }
            now = Some(set);
        }
    }
    Placement {
        run_cpus: run_cpus.to_vec(),
        runner_cpus: now.as_ref().map(cpus_of),
    }
}

/// Gives the calling thread back the CPUs it had before [`place_runner`] first pinned it.
pub(super) fn restore_thread() {
    if let Some((original, _)) = PINNED.with(Cell::take) {
        let _ = rustix::thread::sched_setaffinity(None, &original);
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        for c in &self.run_cpus {
            if let Some(i) = busy.iter().position(|b| b == c) {
                busy.swap_remove(i);
            }
        }
    }
}
