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
/// pids in `candidates` (processes seen in a run), then every exited child for which `belongs`
/// says yes. While `waitid(P_ALL, WNOWAIT)` shows such a child it is reaped; the first exited
/// child that is a leader or does not belong (a child some other code of the process waits for)
/// hides the exited children after it from `waitid`, so then the runner's children are listed
/// ([`own_children`]) and each that belongs is reaped by its pid.
pub(super) fn reap_orphans(candidates: &[i32], belongs: &dyn Fn(i32) -> bool) {
    let guard = lock();
    let leaders = guard.as_ref().map(|r| &r.leaders);
    let is_leader = |pid: i32| leaders.is_some_and(|l| l.contains(&pid));
    for &pid in candidates {
        if !is_leader(pid) {
            reap_nohang(pid);
        }
    }
    while let Some(pid) = exited_child(libc::P_ALL, 0) {
        if is_leader(pid) || !belongs(pid) {
            for child in own_children() {
                if !is_leader(child) && belongs(child) {
                    reap_nohang(child);
                }
            }
            return;
        }
        if !reap_nohang(pid) {
            return;
        }
    }
}

/// Reaps, without blocking, the exited children of the runner in process group `pgid` (a run
/// leader's group: the leader's pid names it, and the kernel does not hand out that pid again
/// while the group has a member, zombies included), leaders of runs excepted. Returns `true` when
/// nothing of the group is left (`kill(-pgid, 0)` fails), zombies included.
pub(super) fn reap_group(pgid: i32) -> bool {
    let guard = lock();
    let leaders = guard.as_ref().map(|r| &r.leaders);
    while let Some(pid) = exited_child(libc::P_PGID, pgid) {
        if leaders.is_some_and(|l| l.contains(&pid)) || !reap_nohang(pid) {
            break;
        }
    }
    Pid::from_raw(pgid).is_none_or(|p| rustix::process::test_kill_process_group(p).is_err())
}

/// `waitpid(pid, WNOHANG)`: `true` when it reaped `pid`. ECHILD (not a child, or already reaped)
/// is expected and is `false`, like a child that has not exited.
fn reap_nohang(pid: i32) -> bool {
    Pid::from_raw(pid).is_some_and(|p| {
        matches!(
            rustix::process::waitpid(Some(p), WaitOptions::NOHANG),
            Ok(Some(_))
        )
    })
}

/// The runner's children: the pids in `/proc/self/task/<tid>/children` of every thread (a child
/// belongs to the thread that forked it, an orphan to the thread the kernel reparented it to).
/// Empty where the kernel does not offer those files (`CONFIG_PROC_CHILDREN`).
fn own_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// The pid of an exited child, not reaped (`waitid(idtype, id, WEXITED | WNOHANG | WNOWAIT)`:
/// `P_ALL` for any child, `P_PGID` for one of process group `id`). libc because rustix's
/// `waitid` status does not give the pid.
fn exited_child(idtype: libc::idtype_t, id: i32) -> Option<i32> {
    // SAFETY: an all-zero siginfo_t is valid; waitid only writes into it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local siginfo_t.
    let r = unsafe {
        libc::waitid(
            idtype,
            id as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled `info` (si_pid is 0 when no child has exited).
    let pid = unsafe { info.si_pid() };
    (r == 0 && pid > 0).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until the child `pid` has exited (without reaping it).
    fn wait_exited(pid: i32) {
        // SAFETY: an all-zero siginfo_t is valid; waitid only writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a local siginfo_t.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0, "waitid({pid}): {}", std::io::Error::last_os_error());
    }

    fn is_zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }

    /// An exited child that is not the runs' (another part of the process waits for it) comes
    /// first in `waitid(P_ALL)`; a run's orphan that exited after it is still reaped, and the
    /// other child is left for its owner.
    #[test]
    #[expect(clippy::zombie_processes, reason = "the reaper under test reaps the child")]
    fn an_exited_child_of_someone_else_does_not_hide_a_runs_orphan() {
        let mut other = std::process::Command::new("true").spawn().unwrap();
        let other_pid = other.id() as i32;
        wait_exited(other_pid);
        let orphan = std::process::Command::new("true").spawn().unwrap();
        let orphan_pid = orphan.id() as i32;
        wait_exited(orphan_pid);
        reap_orphans(&[], &|pid| pid == orphan_pid);
        assert!(
            !is_zombie(orphan_pid),
            "the run's orphan {orphan_pid} is still a zombie"
        );
        assert!(
            is_zombie(other_pid),
            "the other child {other_pid} was reaped: its owner cannot wait for it"
        );
        assert!(other.wait().unwrap().success());
    }

    /// `reap_group` reaps an exited child of the group and then finds the group gone.
    #[test]
    #[expect(clippy::zombie_processes, reason = "the reaper under test reaps the child")]
    fn reap_group_reaps_the_groups_zombies() {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("true")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        wait_exited(pid);
        assert!(is_zombie(pid));
        assert!(reap_group(pid), "group {pid} is still there");
        assert!(!is_zombie(pid));
    }
}
