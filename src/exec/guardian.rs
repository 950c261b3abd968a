//! The guardian: stops every run in flight when the runner dies, however it dies (DESIGN 4).
//!
//! The parent-death signal (`PR_SET_PDEATHSIG`) set in each run reaches only the run's leader; a
//! shell's children, a Python subprocess or a `setsid` daemon would live on after a SIGKILL of the
//! runner. So the runner forks, once, a small guardian process in its own process group (terminal
//! signals do not reach it) that reads fixed-size records from a pipe: "run started" with the
//! run's containment, "run ended". When the pipe reaches end-of-file (the runner's end closed: it
//! exited, was killed, or crashed), the guardian stops every run still listed, as the runner
//! would have:
//!
//! - a run in a cgroup: `1` into its `cgroup.kill`; once the cgroup is empty it is removed;
//! - a run tracked as a process tree: rounds of scanning `/proc` and SIGKILL until nothing is
//!   found of it: processes in the leader's session, processes whose environment holds the run's
//!   `HWR_RUN_ID` and `HWR_BUNDLE` entries (compared by 64-bit FNV-1a hashes of the entries), and
//!   their descendants. Unlike the runner it cannot use parent links to the runner, which is gone.
//!
//! Each record is one write of [`RECORD`] bytes, less than `PIPE_BUF`, so writes from several job
//! threads never interleave. The guardian was forked from a process that may have threads: it
//! only makes raw system calls on memory allocated before the fork.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::fs::{Mode, OFlags};

/// Most runs the guardian tracks at once (one per job slot is in use at a time).
const SLOTS: usize = 256;

/// Longest cgroup path a record carries (bytes).
const PATH_CAP: usize = 1024;

/// Bytes of one record: op, key, leader, path length (4 bytes each), two marker hashes (8 bytes
/// each), the path.
const RECORD: usize = 32 + PATH_CAP;

/// Most processes one `/proc` scan of the guardian looks at.
const SCAN_CAP: usize = 16384;

const OP_STARTED: u32 = 1;
const OP_ENDED: u32 = 2;

/// Pid of the guardian process (0 before it is started).
static GUARDIAN_PID: AtomicI32 = AtomicI32::new(0);

/// The write end of the guardian's pipe, or `None` when the guardian could not be started (the
/// runs then rely on the parent-death signal alone).
fn channel() -> Option<&'static OwnedFd> {
    static CHANNEL: OnceLock<Option<OwnedFd>> = OnceLock::new();
    CHANNEL.get_or_init(start).as_ref()
}

/// Starts the guardian, if it is not running yet. Called by [`super::ProcessExecutor::new`].
pub fn ensure_started() {
    let _ = channel();
}

/// `true` when `pid` is this process's guardian.
pub(super) fn is_guardian(pid: i32) -> bool {
    pid != 0 && GUARDIAN_PID.load(Ordering::Relaxed) == pid
}

/// FNV-1a, 64 bits: how the guardian recognises a `NAME=value` environment entry.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Records that run `key` started: its leader pid (0 when not started yet), its cgroup folder,
/// and its environment `markers` (`HWR_RUN_ID=...` then `HWR_BUNDLE=...`; empty for none). A
/// cgroup path longer than 1024 bytes is not sent (the run is then tracked by its markers).
pub(super) fn run_started(key: u32, leader: i32, cgroup: Option<&Path>, markers: &[Vec<u8>]) {
    let mut record = [0u8; RECORD];
    record[0..4].copy_from_slice(&OP_STARTED.to_ne_bytes());
    record[4..8].copy_from_slice(&key.to_ne_bytes());
    record[8..12].copy_from_slice(&leader.to_ne_bytes());
    if let Some(path) = cgroup.map(|p| p.as_os_str().as_bytes())
        && path.len() < PATH_CAP
    {
        record[12..16].copy_from_slice(&(path.len() as u32).to_ne_bytes());
        record[32..32 + path.len()].copy_from_slice(path);
    }
    let hash = |i: usize| markers.get(i).map_or(0, |m| fnv1a(m));
    record[16..24].copy_from_slice(&hash(0).to_ne_bytes());
    record[24..32].copy_from_slice(&hash(1).to_ne_bytes());
    send(&record);
}

/// Records that run `key` has nothing left to stop.
pub(super) fn run_ended(key: u32) {
    let mut record = [0u8; RECORD];
    record[0..4].copy_from_slice(&OP_ENDED.to_ne_bytes());
    record[4..8].copy_from_slice(&key.to_ne_bytes());
    send(&record);
}

fn send(record: &[u8; RECORD]) {
    if let Some(fd) = channel() {
        // A failed write (guardian gone) only loses the protection; the run itself is unaffected.
        let _ = rustix::io::write(fd, record);
    }
}

fn start() -> Option<OwnedFd> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
    // Everything the guardian will use is allocated before the fork.
    let mut table = vec![[0u8; RECORD]; SLOTS];
    let mut scan = Scan {
        pids: vec![0; SCAN_CAP],
        ppids: vec![0; SCAN_CAP],
        member: vec![false; SCAN_CAP],
    };
    let (rfd, wfd) = (read.as_raw_fd(), write.as_raw_fd());
    // SAFETY: after fork the child only makes raw system calls on memory allocated before the
    // fork (the table, the scan arrays, its stack), as required in a multi-threaded process.
    match unsafe { libc::fork() } {
        0 => unsafe { guardian_main(rfd, wfd, &mut table, &mut scan) },
        -1 => None,
        pid => {
            GUARDIAN_PID.store(pid, Ordering::Relaxed);
            drop(read);
            Some(write)
        }
    }
}

/// Scratch arrays of one `/proc` scan.
struct Scan {
    pids: Vec<i32>,
    ppids: Vec<i32>,
    member: Vec<bool>,
}

/// The guardian's whole life. Never returns.
///
/// # Safety
/// Only to be called in the child right after `fork`, with `rfd`/`wfd` the pipe's ends.
unsafe fn guardian_main(rfd: i32, wfd: i32, table: &mut [[u8; RECORD]], scan: &mut Scan) -> ! {
    // SAFETY: closing fds this process owns (its copies of the runner's), by number.
    unsafe {
        libc::close(wfd);
        // Keep only the pipe: holding the runner's stdout or other files open would delay the
        // end-of-file that the runner's own parent waits for.
        if rfd > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (rfd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (rfd + 1) as u32, u32::MAX, 0u32);
        libc::setpgid(0, 0);
    }
    // SAFETY: `rfd` is the pipe's read end, open in this process until it exits.
    let pipe = unsafe { BorrowedFd::borrow_raw(rfd) };
    let mut buf = [0u8; RECORD];
    loop {
        match read_record(pipe, &mut buf) {
            Ok(true) => {
                let op = u32::from_ne_bytes(buf[0..4].try_into().unwrap_or_default());
                let key = &buf[4..8];
                if op == OP_STARTED {
                    if let Some(slot) = table.iter_mut().find(|s| s[0..4] == [0; 4]) {
                        *slot = buf;
                    }
                } else if let Some(slot) = table.iter_mut().find(|s| s[0..4] != [0; 4] && &s[4..8] == key) {
                    slot[0..4].copy_from_slice(&[0; 4]);
                }
            }
            Ok(false) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    stop_all(table, scan);
    // SAFETY: ends this process without running any destructor or atexit handler.
    unsafe { libc::_exit(0) }
}

/// Reads one whole record; `Ok(false)` at end-of-file.
fn read_record(fd: BorrowedFd<'_>, buf: &mut [u8; RECORD]) -> rustix::io::Result<bool> {
    let mut got = 0;
    while got < RECORD {
        let n = rustix::io::read(fd, &mut buf[got..])?;
        if n == 0 {
            return Ok(false);
        }
        got += n;
    }
    Ok(true)
}

/// A listed run: its leader, cgroup path, marker hashes.
struct Listed<'a> {
    leader: i32,
    cgroup: &'a [u8],
    run_hash: u64,
    bundle_hash: u64,
}

fn listed(slot: &[u8; RECORD]) -> Option<Listed<'_>> {
    if slot[0..4] == [0; 4] {
        return None;
    }
    let len = (u32::from_ne_bytes(slot[12..16].try_into().ok()?) as usize).min(PATH_CAP);
    Some(Listed {
        leader: i32::from_ne_bytes(slot[8..12].try_into().ok()?),
        cgroup: &slot[32..32 + len],
        run_hash: u64::from_ne_bytes(slot[16..24].try_into().ok()?),
        bundle_hash: u64::from_ne_bytes(slot[24..32].try_into().ok()?),
    })
}

/// Stops every listed run (see the module docs).
fn stop_all(table: &[[u8; RECORD]], scan: &mut Scan) {
    let runs = || table.iter().filter_map(listed);
    for run in runs().filter(|r| !r.cgroup.is_empty()) {
        write_cgroup_file(run.cgroup, b"/cgroup.kill\0", b"1");
    }
    // Process trees (and any run whose cgroup could not be listed), in rounds: a process may
    // fork while it is being found.
    if runs().any(|r| r.cgroup.is_empty()) {
        for _ in 0..250 {
            if kill_tree_round(table, scan) == 0 {
                break;
            }
            nap_ms(20);
        }
    }
    for run in runs().filter(|r| !r.cgroup.is_empty()) {
        for _ in 0..250 {
            if !cgroup_populated(run.cgroup) {
                break;
            }
            nap_ms(20);
        }
        let mut path = [0u8; PATH_CAP + 1];
        path[..run.cgroup.len()].copy_from_slice(run.cgroup);
        if let Ok(c) = CStr::from_bytes_until_nul(&path) {
            let _ = rustix::fs::rmdir(c);
        }
    }
}

fn nap_ms(ms: u64) {
    let ts = rustix::thread::Timespec {
        tv_sec: 0,
        tv_nsec: (ms * 1_000_000) as _,
    };
    let _ = rustix::thread::nanosleep(&ts);
}

/// Opens `<cgroup><file>` (`file` starts with `/` and ends with NUL) for writing and writes
/// `value`; errors are ignored.
fn write_cgroup_file(cgroup: &[u8], file: &[u8], value: &[u8]) {
    let mut path = [0u8; PATH_CAP + 32];
    if cgroup.len() + file.len() > path.len() {
        return;
    }
    path[..cgroup.len()].copy_from_slice(cgroup);
    path[cgroup.len()..cgroup.len() + file.len()].copy_from_slice(file);
    if let Ok(c) = CStr::from_bytes_until_nul(&path)
        && let Ok(fd) = rustix::fs::open(c, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
    {
        let _ = rustix::io::write(&fd, value);
    }
}

/// `true` while `cgroup.events` of the cgroup says `populated 1` (or cannot be read yet).
fn cgroup_populated(cgroup: &[u8]) -> bool {
    let mut path = [0u8; PATH_CAP + 32];
    let file = b"/cgroup.events\0";
    path[..cgroup.len()].copy_from_slice(cgroup);
    path[cgroup.len()..cgroup.len() + file.len()].copy_from_slice(file);
    let Ok(c) = CStr::from_bytes_until_nul(&path) else {
        return false;
    };
    let Ok(fd) = rustix::fs::open(c, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
        return false;
    };
    let mut buf = [0u8; 256];
    let n = rustix::io::read(&fd, &mut buf).unwrap_or(0);
    buf[..n].windows(11).any(|w| w == b"populated 1")
}

/// `/proc/<pid>/<file>` as a NUL-terminated path in `buf`.
fn proc_path<'b>(buf: &'b mut [u8; 64], pid: i32, file: &[u8]) -> Option<&'b CStr> {
    let mut digits = [0u8; 12];
    let mut n = pid as u32;
    let mut d = digits.len();
    loop {
        d -= 1;
        digits[d] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let parts: [&[u8]; 4] = [b"/proc/", &digits[d..], b"/", file];
    let mut at = 0;
    for part in parts {
        buf.get_mut(at..at + part.len())?.copy_from_slice(part);
        at += part.len();
    }
    *buf.get_mut(at)? = 0;
    CStr::from_bytes_with_nul(&buf[..=at]).ok()
}

/// `(ppid, sid, alive)` from `/proc/<pid>/stat`.
fn stat_of(pid: i32) -> Option<(i32, i32, bool)> {
    let mut path = [0u8; 64];
    let fd = rustix::fs::open(
        proc_path(&mut path, pid, b"stat")?,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    let text = &buf[..n];
    let close = text.iter().rposition(|&b| b == b')')?;
    // state ppid pgrp session
    let mut fields = text[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty());
    let state = fields.next()?;
    let num = |f: &[u8]| -> Option<i32> {
        let mut v: i32 = 0;
        for &b in f {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
        }
        Some(v)
    };
    let ppid = num(fields.next()?)?;
    let _pgrp = fields.next()?;
    let sid = num(fields.next()?)?;
    Some((ppid, sid, !matches!(state, b"Z" | b"X" | b"x")))
}

/// Whether `/proc/<pid>/environ` holds an entry hashing to `run_hash` and (unless 0) one hashing
/// to `bundle_hash`. Streams the file; no allocation.
fn environ_matches(pid: i32, runs: &[(u64, u64)]) -> bool {
    if runs.is_empty() {
        return false;
    }
    let mut path = [0u8; 64];
    let Some(p) = proc_path(&mut path, pid, b"environ") else {
        return false;
    };
    let Ok(fd) = rustix::fs::open(p, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
        return false;
    };
    // Hashes of the entries that equal one of the runs' (at most 64 are remembered).
    let mut hashes_seen = [0u64; 64];
    let mut seen = 0;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = [0u8; 4096];
    loop {
        let n = match rustix::io::read(&fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == 0 {
                if runs.iter().any(|&(r, bnd)| r == h || bnd == h) && seen < hashes_seen.len() {
                    hashes_seen[seen] = h;
                    seen += 1;
                }
                h = 0xcbf2_9ce4_8422_2325;
            } else {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    let has = |x: u64| hashes_seen[..seen].contains(&x);
    runs.iter().any(|&(r, bnd)| has(r) && (bnd == 0 || has(bnd)))
}

/// One round for the process-tree runs: finds their live processes, SIGKILLs them, returns how
/// many were found.
fn kill_tree_round(table: &[[u8; RECORD]], scan: &mut Scan) -> usize {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut leaders = [0i32; SLOTS];
    let mut markers = [(0u64, 0u64); SLOTS];
    let (mut nl, mut nm) = (0, 0);
    for run in table.iter().filter_map(listed).filter(|r| r.cgroup.is_empty()) {
        if run.leader > 1 {
            leaders[nl] = run.leader;
            nl += 1;
        }
        if run.run_hash != 0 {
            markers[nm] = (run.run_hash, run.bundle_hash);
            nm += 1;
        }
    }
    let Ok(proc_dir) = rustix::fs::open(
        c"/proc",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let mut dirbuf = [MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(proc_dir.as_fd(), &mut dirbuf);
    let mut count = 0;
    while let Some(Ok(entry)) = entries.next() {
        if count == SCAN_CAP {
            break;
        }
        let name = entry.file_name().to_bytes();
        let Some(pid) = parse_pid(name) else { continue };
        if pid == me {
            continue;
        }
        let Some((ppid, sid, alive)) = stat_of(pid) else {
            continue;
        };
        if !alive {
            continue;
        }
        scan.pids[count] = pid;
        scan.ppids[count] = ppid;
        scan.member[count] = leaders[..nl].contains(&pid)
            || leaders[..nl].contains(&sid)
            || environ_matches(pid, &markers[..nm]);
        count += 1;
    }
    // Descendants of members, until nothing is added.
    loop {
        let mut added = false;
        for i in 0..count {
            if !scan.member[i] {
                let parent = scan.ppids[i];
                if (0..count).any(|j| scan.member[j] && scan.pids[j] == parent) {
                    scan.member[i] = true;
                    added = true;
                }
            }
        }
        if !added {
            break;
        }
    }
    let mut found = 0;
    for i in (0..count).filter(|&i| scan.member[i]) {
        if let Some(pid) = rustix::process::Pid::from_raw(scan.pids[i]) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            found += 1;
        }
    }
    found
}

fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i32 = 0;
    for &b in name {
        v = v.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_paths_and_pids() {
        let mut buf = [0u8; 64];
        assert_eq!(proc_path(&mut buf, 4321, b"stat").unwrap(), c"/proc/4321/stat");
        assert_eq!(parse_pid(b"123"), Some(123));
        assert_eq!(parse_pid(b"self"), None);
        let me = std::process::id() as i32;
        let (ppid, _, alive) = stat_of(me).unwrap();
        assert!(alive);
        assert_eq!(ppid, rustix::process::getppid().unwrap().as_raw_nonzero().get());
    }

    #[test]
    fn environ_hashes_match_whole_entries() {
        // The first entry of this test process's own environment as it was at exec.
        let environ = std::fs::read("/proc/self/environ").unwrap();
        let entry = environ.split(|&b| b == 0).next().unwrap().to_vec();
        assert!(entry.contains(&b'='));
        let me = std::process::id() as i32;
        assert!(environ_matches(me, &[(fnv1a(&entry), 0)]));
        assert!(!environ_matches(me, &[(fnv1a(&entry[..entry.len() - 1]), 0)]));
        assert!(!environ_matches(
            me,
            &[(fnv1a(&entry), fnv1a(b"HWR_BUNDLE=/nowhere"))]
        ));
    }
}
