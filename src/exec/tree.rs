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
    /// `true` for a zombie (exited, not yet reaped) or a dead process. A thread-group leader
    /// whose main thread has exited (`pthread_exit` in `main`) also shows state `Z` while its
    /// other threads run: it counts as alive while `num_threads` is above 1.
    pub(super) dead: bool,
}

/// Parses the text of `/proc/<pid>/stat`: `pid (comm) state ppid pgrp session ... starttime`
/// (field 22). `None` when malformed.
pub(super) fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    // The command name may hold spaces and parentheses: fields resume after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = *fields.first()?;
    let threads: u32 = fields.get(17)?.parse().ok()?;
    Some(ProcStat {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        dead: matches!(state, "X" | "x") || (state == "Z" && threads <= 1),
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

/// The processes of the system whose pid `keep` accepts (`/proc/<pid>/stat` of those numeric
/// entries of `/proc`).
pub(super) fn snapshot_where(keep: impl Fn(i32) -> bool) -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| keep(pid))
        .filter_map(read_stat)
        .collect()
}

/// The last pid handed out in this pid namespace (`/proc/sys/kernel/ns_last_pid`); `None` where
/// the kernel does not offer it.
pub(super) fn last_pid() -> Option<i32> {
    fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` was handed out after `from` and up to `to`: pids count up and wrap around at
/// `pid_max`.
fn handed_out_between(pid: i32, from: i32, to: i32) -> bool {
    if from <= to {
        pid > from && pid <= to
    } else {
        pid > from || pid <= to
    }
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
    /// Processes of the run seen at the last scan: pid -> start time.
    known: HashMap<i32, u64>,
    /// `ns_last_pid` when the last scan began (or before the spawn): every process started since
    /// has a pid handed out after it, so a scan reads only those and the known ones.
    cursor: Option<i32>,
    /// Whether processes are still recognised by the leader's pid and session id. Once the
    /// leader is reaped its pid may be handed out again when its session is empty, so only the
    /// first scan after that (microseconds later) uses them; what it finds is known by pid and
    /// start time from then on.
    by_session: bool,
    leader_reaped: bool,
}

impl Tree {
    /// Tracks the run whose leader is `leader` (also its session id), with the environment
    /// entries `markers` ([`run_markers`]); `cursor` is [`last_pid`] read before the spawn.
    pub(super) fn new(leader: i32, markers: Vec<Vec<u8>>, cursor: Option<i32>) -> Tree {
        Tree {
            leader,
            runner: std::process::id() as i32,
            markers,
            known: HashMap::new(),
            cursor,
            by_session: true,
            leader_reaped: false,
        }
    }

    /// The leader has been reaped (see `by_session`).
    pub(super) fn leader_reaped(&mut self) {
        self.leader_reaped = true;
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
        self.known = member.iter().map(|p| (p.pid, p.start)).collect();
        member
    }

    /// Whether `p`, a descendant of the runner whose parent is not in the run, is in the run.
    fn owns(&self, p: &ProcStat, sole_run: bool) -> bool {
        if self.known.get(&p.pid) == Some(&p.start) {
            return true;
        }
        if self.by_session && (p.pid == self.leader || p.sid == self.leader) {
            return true;
        }
        // Orphans reparented to the runner, first seen now.
        p.ppid == self.runner
            && !p.dead
            && !super::children::is_leader(p.pid)
            && !super::guardian::is_guardian(p.pid)
            && !super::spawner::is_spawner(p.pid)
            && if self.markers.is_empty() {
                sole_run
            } else {
                environ_has(p.pid, &self.markers)
            }
    }

    /// The live processes of the run now (a fresh `/proc` scan), and the zombies among them.
    ///
    /// Only processes known from the last scan and those started since are read: their pids
    /// were handed out after the cursor (a scan every second, as the supervisor does, keeps the
    /// pid counter from wrapping all the way round in between). Without `ns_last_pid` every
    /// process is read.
    pub(super) fn scan(&mut self) -> (Vec<ProcStat>, Vec<i32>) {
        let now = last_pid();
        let range = self.cursor.zip(now);
        let snap = snapshot_where(|pid| {
            (self.by_session && pid == self.leader)
                || self.known.contains_key(&pid)
                || range.is_none_or(|(from, to)| handed_out_between(pid, from, to))
        });
        self.cursor = now;
        let all = self.members(&snap);
        if self.leader_reaped {
            self.by_session = false;
        }
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
        // A leader whose main thread exited, with another thread alive: not dead.
        let t = parse_stat(9, "9 (x) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 2 0 77 0 0").unwrap();
        assert!(!t.dead);
        assert!(parse_stat(1, "garbage").is_none());
    }

    #[test]
    fn reads_itself() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert!(!me.dead);
        assert!(snapshot_where(|_| true).iter().any(|p| p == &me));
        assert!(last_pid().is_some_and(|p| p >= me.pid || p < 1000));
        assert!(handed_out_between(5, 3, 7) && !handed_out_between(3, 3, 7));
        assert!(handed_out_between(2, 30000, 10) && handed_out_between(30001, 30000, 10));
        assert!(!handed_out_between(20, 30000, 10));
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
