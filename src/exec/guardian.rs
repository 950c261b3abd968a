//! The guardian: stops every run in flight when the runner dies, however it dies (DESIGN 4).
//!
//! The parent-death signal (`PR_SET_PDEATHSIG`) set in each run reaches only the run's leader; a
//! shell's children, a Python subprocess or a `setsid` daemon would live on after a SIGKILL of the
//! runner. So the runner forks, once, a small guardian process in its own process group (terminal
//! signals do not reach it). The runner lists each run in flight in a table in memory shared
//! with the guardian (an anonymous `MAP_SHARED` mapping made before the fork; listing a run costs
//! no system call and does not wake the guardian) and keeps the write end of a pipe whose read
//! end the guardian blocks on. When that read reaches end-of-file (the runner exited, was killed,
//! or crashed), the guardian stops every run still listed, as the runner would have:
//!
//! - a run in a cgroup: `1` into its `cgroup.kill`; once the cgroup is empty it is removed;
//! - a run tracked as a process tree: rounds of scanning `/proc` and SIGKILL until nothing is
//!   found of it: processes in the leader's session, processes whose environment holds the run's
//!   `HWR_RUN_ID` and `HWR_BUNDLE` entries (compared by 64-bit FNV-1a hashes of the entries), and
//!   their descendants. Unlike the runner it cannot use parent links to the runner, which is gone.
//!
//! A table slot is claimed with a compare-and-swap of its state (free -> filling), filled, then
//! published (listed) with a release store; the guardian reads only listed slots, after an
//! acquire load. The guardian was forked from a process that may have threads: it only makes raw
//! system calls on memory allocated before the fork.

use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

/// Most runs the table lists at once: each job slot's run in flight and, where runs are prepared
/// ahead, its next run, plus the empty cgroups of ended runs awaiting removal
/// (`containment::LEFTOVERS_MAX`). A run that finds no free slot is not guarded.
const SLOTS: usize = 1024;

/// Longest cgroup path a slot holds (bytes).
const PATH_CAP: usize = 1024;

/// Most processes one `/proc` scan of the guardian looks at.
const SCAN_CAP: usize = 16384;

const FREE: u32 = 0;
const FILLING: u32 = 1;
const LISTED: u32 = 2;

/// One run in the shared table.
#[repr(C)]
struct Slot {
    state: AtomicU32,
    /// Leader pid (its session id); 0 while not known.
    leader: AtomicI32,
    /// Bytes of `path` in use; 0 for a run without a cgroup.
    path_len: AtomicU32,
    /// FNV-1a of the run's `HWR_RUN_ID=...` entry, 0 for none.
    run_hash: AtomicU64,
    /// FNV-1a of the run's `HWR_BUNDLE=...` entry, 0 for none.
    bundle_hash: AtomicU64,
    /// The cgroup folder; written only by the thread that claimed the slot (state `FILLING`),
    /// read only when the state is `LISTED`.
    path: UnsafeCell<[u8; PATH_CAP]>,
}

/// The table: `SLOTS` slots in a shared mapping that lives as long as the process.
struct Table(&'static [Slot]);

// SAFETY: `path` is written only by the one thread that moved the slot's state from FREE to
// FILLING, and read (by the guardian) only after a LISTED state was published with Release.
unsafe impl Sync for Table {}
// SAFETY: the table is a reference to a mapping that lives as long as the process; moving the
// reference to another thread is covered by the same protocol as sharing it.
unsafe impl Send for Table {}

/// Pid of the guardian process (0 before it is started).
static GUARDIAN_PID: AtomicI32 = AtomicI32::new(0);

/// The guardian: the write end of its pipe (kept open, never written) and the shared table; `None`
/// when it could not be started (the runs then rely on the parent-death signal alone).
struct Guardian {
    _pipe: OwnedFd,
    table: Table,
}

fn guardian() -> Option<&'static Guardian> {
    static GUARDIAN: OnceLock<Option<Guardian>> = OnceLock::new();
    GUARDIAN.get_or_init(start).as_ref()
}

/// Starts the guardian, if it is not running yet. Called by [`super::ProcessLauncher::new`].
pub fn ensure_started() {
    let _ = guardian();
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

/// A run listed in the guardian's table; [`unlist`] it when nothing of it is left.
#[derive(Debug)]
pub(super) struct Listing(usize);

/// Lists a run: its leader pid (0 when not started yet), its cgroup folder, and its environment
/// `markers` (`HWR_RUN_ID=...` then `HWR_BUNDLE=...`; empty for none). `None` when there is no
/// guardian or no free slot. A cgroup path of 1024 bytes or more is left out (the run is then
/// stopped by its leader's session and its markers).
pub(super) fn list(leader: i32, cgroup: Option<&Path>, markers: &[Vec<u8>]) -> Option<Listing> {
    let table = &guardian()?.table.0;
    let index = table.iter().position(|s| {
        s.state
            .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })?;
    let slot = &table[index];
    slot.leader.store(leader, Ordering::Relaxed);
    let path = cgroup.map_or(&[][..], |p| p.as_os_str().as_bytes());
    let len = if path.len() < PATH_CAP { path.len() } else { 0 };
    // SAFETY: this thread claimed the slot (FILLING), so no one else reads or writes `path`.
    let dest: &mut [u8; PATH_CAP] = unsafe { &mut *slot.path.get() };
    dest[..len].copy_from_slice(&path[..len]);
    slot.path_len.store(len as u32, Ordering::Relaxed);
    let hash = |i: usize| markers.get(i).map_or(0, |m| fnv1a(m));
    slot.run_hash.store(hash(0), Ordering::Relaxed);
    slot.bundle_hash.store(hash(1), Ordering::Relaxed);
    slot.state.store(LISTED, Ordering::Release);
    Some(Listing(index))
}

/// Records the leader pid of a run listed before its spawn.
pub(super) fn set_leader(listing: &Listing, leader: i32) {
    if let Some(g) = guardian() {
        g.table.0[listing.0].leader.store(leader, Ordering::Release);
    }
}

/// Takes the run off the guardian's table.
pub(super) fn unlist(listing: Listing) {
    if let Some(g) = guardian() {
        g.table.0[listing.0].state.store(FREE, Ordering::Release);
    }
}

fn start() -> Option<Guardian> {
    let bytes = SLOTS * std::mem::size_of::<Slot>();
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses; it is zero-filled (every
    // slot FREE, a valid `Slot`), never unmapped, and shared with the guardian after the fork.
    let table: &'static [Slot] = unsafe {
        let ptr = rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            bytes,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
        )
        .ok()?;
        std::slice::from_raw_parts(ptr.cast::<Slot>(), SLOTS)
    };
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
    // Everything the guardian will use is allocated before the fork.
    let mut scan = Scan {
        pids: vec![0; SCAN_CAP],
        ppids: vec![0; SCAN_CAP],
        member: vec![false; SCAN_CAP],
    };
    let (rfd, wfd) = (read.as_raw_fd(), write.as_raw_fd());
    // SAFETY: after fork the child only makes raw system calls on memory allocated before the
    // fork (the shared table, the scan arrays, its stack), as required in a multi-threaded
    // process.
    match unsafe { libc::fork() } {
        0 => unsafe { guardian_main(rfd, wfd, table, &mut scan) },
        -1 => None,
        pid => {
            GUARDIAN_PID.store(pid, Ordering::Relaxed);
            drop(read);
            Some(Guardian {
                _pipe: write,
                table: Table(table),
            })
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
unsafe fn guardian_main(rfd: i32, wfd: i32, table: &[Slot], scan: &mut Scan) -> ! {
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
    let mut buf = [0u8; 64];
    // Nothing is ever written: the read returns at end-of-file, when the runner is gone.
    loop {
        match rustix::io::read(pipe, &mut buf) {
            Ok(0) => break,
            Ok(_) | Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    stop_all(table, scan);
    // SAFETY: ends this process without running any destructor or atexit handler.
    unsafe { libc::_exit(0) }
}

/// A listed run: its leader, cgroup path, marker hashes.
struct Listed<'a> {
    leader: i32,
    cgroup: &'a [u8],
    run_hash: u64,
    bundle_hash: u64,
}

fn listed(slot: &Slot) -> Option<Listed<'_>> {
    if slot.state.load(Ordering::Acquire) != LISTED {
        return None;
    }
    let len = (slot.path_len.load(Ordering::Relaxed) as usize).min(PATH_CAP);
    // SAFETY: the slot is LISTED (acquired above): its filler is done with `path`.
    let path: &[u8; PATH_CAP] = unsafe { &*slot.path.get() };
    Some(Listed {
        leader: slot.leader.load(Ordering::Acquire),
        cgroup: &path[..len],
        run_hash: slot.run_hash.load(Ordering::Relaxed),
        bundle_hash: slot.bundle_hash.load(Ordering::Relaxed),
    })
}

/// Stops every listed run (see the module docs).
fn stop_all(table: &[Slot], scan: &mut Scan) {
    let runs = || table.iter().filter_map(listed);
    for run in runs().filter(|r| !r.cgroup.is_empty()) {
        write_cgroup_file(run.cgroup, b"/cgroup.kill\0", b"1");
    }
    // Process trees, in rounds: a process may fork while it is being found.
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
fn kill_tree_round(table: &[Slot], scan: &mut Scan) -> usize {
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
