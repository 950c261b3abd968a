//! The run's process group: signalling it, finding its members in `/proc`, and killing and
//! reaping what is left of it after the leader exited.

use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

/// Upper bound on waiting for SIGKILLed processes to disappear (a process in uninterruptible
/// sleep, `D` state, cannot die until its I/O finishes).
const KILL_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// The group id as a [`Pid`], or `None` for 0 and 1, which must never be signalled as a group
/// (`kill(-1, ...)` means every process).
fn group_id(pgid: i32) -> Option<Pid> {
    if pgid > 1 { Pid::from_raw(pgid) } else { None }
}

/// Sends `sig` to process group `pgid` (`kill(-pgid, sig)`); `true` when at least one process
/// got it.
pub(super) fn signal_group(pgid: i32, sig: Signal) -> bool {
    group_id(pgid).is_some_and(|g| rustix::process::kill_process_group(g, sig).is_ok())
}

/// `true` while process group `pgid` has at least one process, zombies included
/// (`kill(-pgid, 0)`).
fn group_exists(pgid: i32) -> bool {
    group_id(pgid).is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
}

/// Reaps zombies of group `pgid` that are our children (reparented orphans), without blocking
/// (`waitpid(-pgid, WNOHANG)` until none is left).
fn reap_group(pgid: i32) {
    let Some(g) = group_id(pgid) else { return };
    while let Ok(Some(_)) = rustix::process::waitpgid(g, WaitOptions::NOHANG) {}
}

/// After the leader is reaped: kills and reaps whatever is left of its process group.
///
/// SIGTERM, then SIGKILL at `kill_at` (when the run was already being stopped) or after
/// `grace`. Returns how many live (non-zombie) processes were found in the group.
pub(super) fn clean_group(pgid: i32, grace: Duration, kill_at: Option<Instant>) -> u32 {
    reap_group(pgid);
    if !group_exists(pgid) {
        return 0; // fast path: the group is empty
    }
    let strays = group_members(pgid).len() as u32;
    signal_group(pgid, Signal::TERM);
    let kill_at = kill_at.unwrap_or_else(|| Instant::now() + grace);
    if !wait_group_gone(pgid, kill_at) {
        signal_group(pgid, Signal::KILL);
        wait_group_gone(pgid, Instant::now() + KILL_WAIT_LIMIT);
    }
    strays
}

/// Polls until group `pgid` has no process left (reaping ours) or `until` passes; `true` when
/// the group is gone.
fn wait_group_gone(pgid: i32, until: Instant) -> bool {
    let mut nap = Duration::from_micros(200);
    loop {
        reap_group(pgid);
        if !group_exists(pgid) {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep(nap.min(until - now));
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

/// Pids of live (non-zombie) processes in process group `pgid`, from the state and `pgrp`
/// fields of every `/proc/<pid>/stat`. Empty when `/proc` cannot be read.
pub(super) fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the parenthesised command name: state ppid pgrp ...
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
            pgrp == Some(pgid) && state != Some("Z") && state != Some("X")
        })
        .collect()
}
