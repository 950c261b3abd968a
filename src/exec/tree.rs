//! The process-tree fallback of containment (DESIGN 4), for where no cgroup can be made: the
//! run's processes are found through `/proc`.
//!
//! A process belongs to the run when
//! - it is the leader, or it is in the leader's session (every process that did not call
//!   `setsid`: the child starts a new session, so the session id is the leader's pid, and the
//!   kernel keeps that id reserved while the session has members);
//! - or it descends (by parent links) from a process of the run;
//! - or it is a child of the runner (the runner is a child subreaper, so every orphan of the run
//!   comes back to it) that the run was seen to own earlier (pid and start time), or whose
//!   environment (`/proc/<pid>/environ`, as it was at exec) holds the run's `HWR_RUN_ID` and
//!   `HWR_BUNDLE` entries, or, for a run without those variables, any such child when this is
//!   the only run in flight.
//!
//! A process that calls `setsid`, loses its parent, and also drops `HWR_RUN_ID` from its
//! environment before the runner ever saw it, while other runs are in flight, cannot be told
//! apart from theirs; a cgroup has no such gap.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;

use rustix::process::{Pid, PidfdFlags, Signal};

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcStat {
    /// Process id.
    pub(super) pid: i32,
    /// Parent process id.
    pub(super) ppid: i32,
    /// Session id.
    pub(super) sid: i32,
    /// Start time after boot, in clock ticks: with the pid, identifies a process over time.
    pub(super) start: u64,
    /// `true` for a zombie (exited, not yet reaped) or a dead process.
    pub(super) dead: bool,
}

/// Parses the text of `/proc/<pid>/stat`: `pid (comm) state ppid pgrp session ... starttime`
/// (field 22). `None` when malformed.
pub(super) fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    // The command name may hold spaces and parentheses: fields resume after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = *fields.first()?;
    Some(ProcStat {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        dead: matches!(state, "Z" | "X" | "x"),
    })
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub(super) fn read_stat(pid: i32) -> Option<ProcStat> {
    let mut text = String::with_capacity(512);
    fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|mut f| f.read_to_string(&mut text))
        .ok()?;
    parse_stat(pid, &text)
}

/// Every process of the system (`/proc/<pid>/stat` of each numeric entry of `/proc`).
pub(super) fn snapshot() -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// `true` when `/proc/<pid>/environ` holds every entry of `entries` (each `NAME=value`), exactly.
fn environ_has(pid: i32, entries: &[Vec<u8>]) -> bool {
    let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    entries
        .iter()
        .all(|want| environ.split(|&b| b == 0).any(|e| e == want.as_slice()))
}

/// The `HWR_RUN_ID` and `HWR_BUNDLE` entries (`NAME=value` bytes) of a run's environment; empty
/// when the run has no `HWR_RUN_ID`.
pub(super) fn run_markers(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Vec<Vec<u8>> {
    let entry = |name: &str| {
        env.iter().rev().find(|(k, _)| k == name).map(|(k, v)| {
            let mut e = k.as_bytes().to_vec();
            e.push(b'=');
            e.extend_from_slice(v.as_bytes());
            e
        })
    };
    match entry("HWR_RUN_ID") {
        Some(id) => std::iter::once(id).chain(entry("HWR_BUNDLE")).collect(),
        None => Vec::new(),
    }
}

/// The run's `HWR_RUN_ID` value, or `""`.
pub(super) fn run_id(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> String {
    env.iter()
        .rev()
        .find(|(k, _)| k == "HWR_RUN_ID")
        .map(|(_, v)| OsStr::to_string_lossy(v).into_owned())
        .unwrap_or_default()
}

/// The processes of one run, tracked through `/proc` (see the module docs).
#[derive(Debug)]
pub(super) struct Tree {
    leader: i32,
    runner: i32,
    markers: Vec<Vec<u8>>,
    /// Processes seen in the run: pid -> start time.
    known: HashMap<i32, u64>,
}

impl Tree {
    /// Tracks the run whose leader is `leader` (also its session id), with the environment
    /// entries `markers` ([`run_markers`]).
    pub(super) fn new(leader: i32, markers: Vec<Vec<u8>>) -> Tree {
        Tree {
            leader,
            runner: std::process::id() as i32,
            markers,
            known: HashMap::new(),
        }
    }

    /// The run's processes in `snap`, zombies included (the caller filters on
    /// [`ProcStat::dead`]); remembers them for later scans.
    pub(super) fn members(&mut self, snap: &[ProcStat]) -> Vec<ProcStat> {
        let sole_run = super::children::runs_in_flight() <= 1;
        let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
        for (i, p) in snap.iter().enumerate() {
            children.entry(p.ppid).or_default().push(i);
        }
        // Only the runner's descendants can be the run's: this rules out other sessions that
        // happen to reuse the leader's pid as their id, and other runners' runs.
        let mut queue: Vec<(usize, bool)> = children
            .get(&self.runner)
            .into_iter()
            .flatten()
            .map(|&i| (i, false))
            .collect();
        let mut member = Vec::new();
        while let Some((i, parent_in_run)) = queue.pop() {
            let p = &snap[i];
            let ours = parent_in_run || self.owns(p, sole_run);
            if ours {
                member.push(*p);
            }
            if let Some(kids) = children.get(&p.pid) {
                queue.extend(kids.iter().map(|&k| (k, ours)));
            }
        }
        for p in &member {
            self.known.insert(p.pid, p.start);
        }
        member
    }

    /// Whether `p`, a descendant of the runner whose parent is not in the run, is in the run.
    fn owns(&self, p: &ProcStat, sole_run: bool) -> bool {
        if p.pid == self.leader || p.sid == self.leader || self.known.get(&p.pid) == Some(&p.start) {
            return true;
        }
        // Orphans reparented to the runner, first seen now.
        p.ppid == self.runner
            && !p.dead
            && !super::children::is_leader(p.pid)
            && !super::guardian::is_guardian(p.pid)
            && if self.markers.is_empty() {
                sole_run
            } else {
                environ_has(p.pid, &self.markers)
            }
    }

    /// The live processes of the run now (a fresh `/proc` scan), and the zombies among them.
    pub(super) fn scan(&mut self) -> (Vec<ProcStat>, Vec<i32>) {
        let all = self.members(&snapshot());
        let zombies = all.iter().filter(|p| p.dead).map(|p| p.pid).collect();
        (all.into_iter().filter(|p| !p.dead).collect(), zombies)
    }
}

/// Sends `sig` to the process `p` if it is still the same process (pid and start time): the
/// pidfd pins the process, then its start time is checked, so a pid reused in between is never
/// signalled. Returns `true` when the signal was sent.
pub(super) fn signal_checked(p: &ProcStat, sig: Signal) -> bool {
    let Some(pid) = Pid::from_raw(p.pid) else {
        return false;
    };
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => {
            read_stat(p.pid).is_some_and(|now| now.start == p.start)
                && rustix::process::pidfd_send_signal(&fd, sig).is_ok()
        }
        // No pidfd_open (Linux < 5.3): check, then kill, with a window for pid reuse.
        Err(rustix::io::Errno::NOSYS) => {
            read_stat(p.pid).is_some_and(|now| now.start == p.start)
                && rustix::process::kill_process(pid, sig).is_ok()
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_a_tricky_command_name() {
        let text = "1234 (a) b (c) S 1 1234 1230 0 -1 4194560 97 0 0 0 0 0 0 0 20 0 1 0 5678 1 2 3\n";
        let p = parse_stat(1234, text).unwrap();
        assert_eq!((p.ppid, p.sid, p.start, p.dead), (1, 1230, 5678, false));
        let z = parse_stat(9, "9 (x) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0").unwrap();
        assert!(z.dead);
        assert_eq!(z.start, 77);
        assert!(parse_stat(1, "garbage").is_none());
    }

    #[test]
    fn reads_itself() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert!(!me.dead);
        assert!(snapshot().iter().any(|p| p == &me));
    }

    #[test]
    fn markers_come_from_the_run_environment() {
        let env = vec![
            ("PATH".into(), "/bin".into()),
            ("HWR_RUN_ID".into(), "000-a-r1".into()),
            ("HWR_BUNDLE".into(), "/r/b".into()),
        ];
        assert_eq!(
            run_markers(&env),
            vec![b"HWR_RUN_ID=000-a-r1".to_vec(), b"HWR_BUNDLE=/r/b".to_vec()]
        );
        assert!(run_markers(&env[..1]).is_empty());
        assert_eq!(run_id(&env), "000-a-r1");
    }
}
