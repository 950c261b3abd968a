//! The runner's own children: run leaders (reaped by their supervisor with `wait4`) and the
//! orphans of runs that the kernel reparents to the runner (a child subreaper), which must be
//! reaped by someone else.
//!
//! With `jobs > 1` several supervisors share one process. An orphan reaper must never reap
//! another run's leader (its supervisor's `wait4` would then fail), so leaders are registered
//! under one lock, from before their fork until their `wait4`, and the reaper takes the same
//! lock.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use rustix::process::{Pid, WaitOptions};

/// Registered leaders and the number of runs in flight.
#[derive(Debug, Default)]
pub(super) struct Registry {
    leaders: HashSet<i32>,
    runs: usize,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The registry, locked (a panic while it was held does not disable it).
fn lock() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `spawn` (which forks and returns the child's pid) with the registry locked and registers
/// that pid as a leader, so no reaper can take it for an orphan. Also counts the run as in
/// flight until [`run_ended`] (or [`spawn_failed`]).
///
/// # Errors
/// The error of `spawn`; nothing is registered then.
pub(super) fn register_spawn<T, E>(spawn: impl FnOnce() -> Result<(i32, T), E>) -> Result<(i32, T), E> {
    let mut guard = lock();
    let registry = guard.get_or_insert_with(Registry::default);
    let (pid, value) = spawn()?;
    registry.leaders.insert(pid);
    registry.runs += 1;
    Ok((pid, value))
}

/// The child `pid` registered by [`register_spawn`] failed before exec and was reaped.
pub(super) fn spawn_failed(pid: i32) {
    leader_reaped(pid);
    run_ended();
}

/// The leader `pid` has been reaped by its supervisor.
pub(super) fn leader_reaped(pid: i32) {
    if let Some(r) = lock().as_mut() {
        r.leaders.remove(&pid);
    }
}

/// The run is over (after [`spawn_registered`] succeeded for it).
pub(super) fn run_ended() {
    if let Some(r) = lock().as_mut() {
        r.runs = r.runs.saturating_sub(1);
    }
}

/// Number of runs in flight in this process.
pub(super) fn runs_in_flight() -> usize {
    lock().as_ref().map_or(0, |r| r.runs)
}

/// `true` when `pid` is a registered, not yet reaped, leader of some run.
pub(super) fn is_leader(pid: i32) -> bool {
    lock().as_ref().is_some_and(|r| r.leaders.contains(&pid))
}

/// Reaps, without blocking, exited children of the runner that are not run leaders: first the
/// pids in `candidates` (processes seen in a run), then, while `waitid(P_ALL, WNOWAIT)` shows an
/// exited child for which `belongs` says yes, that child. It stops at the first exited child that
/// is a leader or does not belong (a child some other code of the process waits for).
pub(super) fn reap_orphans(candidates: &[i32], belongs: &dyn Fn(i32) -> bool) {
    let guard = lock();
    let leaders = guard.as_ref().map(|r| &r.leaders);
    let is_leader = |pid: i32| leaders.is_some_and(|l| l.contains(&pid));
    for &pid in candidates {
        if !is_leader(pid)
            && let Some(p) = Pid::from_raw(pid)
        {
            // ECHILD (not our child, or already reaped) is expected and ignored.
            let _ = rustix::process::waitpid(Some(p), WaitOptions::NOHANG);
        }
    }
    while let Some(pid) = exited_child() {
        if is_leader(pid) || !belongs(pid) {
            return;
        }
        let Some(p) = Pid::from_raw(pid) else { return };
        if !matches!(
            rustix::process::waitpid(Some(p), WaitOptions::NOHANG),
            Ok(Some(_))
        ) {
            return;
        }
    }
}

/// The pid of an exited child, not reaped (`waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`).
/// libc because rustix's `waitid` status does not give the pid.
fn exited_child() -> Option<i32> {
    // SAFETY: an all-zero siginfo_t is valid; waitid only writes into it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local siginfo_t.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled `info` (si_pid is 0 when no child has exited).
    let pid = unsafe { info.si_pid() };
    (r == 0 && pid > 0).then_some(pid)
}
