//! Per-run cgroup v2: where runs' cgroups are made, and one run's cgroup (DESIGN 4).
//!
//! # Where
//!
//! Once per process, [`base`] looks for a cgroup2 mount in `/proc/self/mountinfo` (preferring
//! `/sys/fs/cgroup`, the unified layout, then `/sys/fs/cgroup/unified`, the hybrid one) and makes
//! (or reuses) a parent cgroup `hwr-exp` in it: first at the mount's root, else inside the cgroup
//! the runner sits in (`0::<path>` of `/proc/self/cgroup`: a subtree delegated to the user). The
//! parent must offer `cgroup.kill` (Linux 5.14+) and a writable `cgroup.procs`. Where the mount
//! offers the memory controller it is enabled for the runs (`+memory` in the parent's
//! `cgroup.subtree_control`), so each run's cgroup has `memory.current` and `memory.peak`.
//!
//! # One run
//!
//! [`RunCgroup::create_at`] makes `hwr-exp/<runner pid>-<n>-<run id>` ([`RunCgroup::path_for`]); the child is started in it
//! (`clone3(CLONE_INTO_CGROUP)` with the folder fd [`RunCgroup::dir_fd`], else it writes `0` into
//! its `cgroup.procs` between fork and exec), so every process the run starts is in it, whatever
//! it does (`setsid`, double fork, `timeout`).
//! [`RunCgroup::kill`] writes `1` to `cgroup.kill` (SIGKILL to every member, forks racing with it
//! included); [`RunCgroup::remove`] removes the empty cgroup.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags};

/// Name of the parent cgroup every run's cgroup is made in.
const PARENT: &str = "hwr-exp";

/// Longest run-id part of a cgroup name (a cgroup name is a file name: at most 255 bytes).
const NAME_RUN_ID_MAX: usize = 180;

/// The parent cgroup runs are made in.
#[derive(Debug)]
pub(super) struct CgroupBase {
    /// Absolute path of the parent cgroup folder, e.g. `/sys/fs/cgroup/unified/hwr-exp`.
    pub(super) dir: PathBuf,
    /// The same folder as `/proc/<pid>/cgroup` names it (`0::<path>`), e.g. `/hwr-exp`.
    pub(super) hierarchy: PathBuf,
    /// Whether runs' cgroups get the memory controller (`memory.current`, `memory.peak`).
    pub(super) memory: bool,
}

impl CgroupBase {
    /// `true` when the process `pid` (a zombie too: the kernel keeps its cgroup until it is
    /// reaped) is in a run cgroup under this parent, from `/proc/<pid>/cgroup`.
    pub(super) fn holds(&self, pid: i32) -> bool {
        fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(PathBuf::from)))
            .is_some_and(|p| p.starts_with(&self.hierarchy) && p != self.hierarchy)
    }
}

/// The parent cgroup of this process's runs, found and made once; or why there is none (every
/// place tried and what failed there).
pub(super) fn base() -> Result<&'static CgroupBase, &'static str> {
    static BASE: OnceLock<Result<CgroupBase, String>> = OnceLock::new();
    BASE.get_or_init(discover).as_ref().map_err(String::as_str)
}

fn discover() -> Result<CgroupBase, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mut mounts = cgroup2_mounts(&mountinfo);
    if mounts.is_empty() {
        return Err("no cgroup2 file system is mounted".into());
    }
    let rank = |p: &Path| match p.to_str() {
        Some("/sys/fs/cgroup") => 0,
        Some("/sys/fs/cgroup/unified") => 1,
        _ => 2,
    };
    mounts.sort_by_key(|(point, _)| rank(point));
    let own = fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)));
    let mut tried = Vec::new();
    for (point, root) in &mounts {
        let mut candidates = vec![(point.join(PARENT), root.join(PARENT))];
        // The runner's own cgroup, relative to this mount's root (a delegated subtree).
        if let Some(own) = &own
            && let Some(rel) = Path::new(own).strip_prefix(root).ok()
            && !rel.as_os_str().is_empty()
        {
            candidates.push((point.join(rel).join(PARENT), Path::new(own).join(PARENT)));
        }
        for (dir, hierarchy) in candidates {
            match prepare_parent(&dir) {
                Ok(memory) => {
                    return Ok(CgroupBase {
                        dir,
                        hierarchy,
                        memory,
                    });
                }
                Err(e) => tried.push(format!("{}: {e}", dir.display())),
            }
        }
    }
    Err(format!("no usable cgroup2 parent ({})", tried.join("; ")))
}

/// `(mount point, root within the hierarchy)` of every cgroup2 mount in mountinfo text.
fn cgroup2_mounts(mountinfo: &str) -> Vec<(PathBuf, PathBuf)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            if right.split_whitespace().next() != Some("cgroup2") {
                return None;
            }
            let mut fields = left.split_whitespace();
            let root = unescape(fields.nth(3)?);
            let point = unescape(fields.next()?);
            Some((point, root))
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(n) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(n);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

/// Makes (or reuses) the parent cgroup `dir` and checks it can hold runs; enables the memory
/// controller for its children where offered. Returns whether runs get the memory controller.
fn prepare_parent(dir: &Path) -> io::Result<bool> {
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if !dir.join("cgroup.kill").exists() {
        return Err(io::Error::other("no cgroup.kill (Linux 5.14+ needed)"));
    }
    rustix::fs::access(dir.join("cgroup.procs").as_path(), rustix::fs::Access::WRITE_OK)?;
    let has = |file: &str| {
        fs::read_to_string(dir.join(file))
            .map(|t| t.split_whitespace().any(|c| c == "memory"))
            .unwrap_or(false)
    };
    if has("cgroup.controllers") && !has("cgroup.subtree_control") {
        // Best effort: refused when another runner's cgroup already sits here with processes.
        let _ = fs::write(dir.join("cgroup.subtree_control"), "+memory");
    }
    let memory = has("cgroup.subtree_control");
    probe_join(dir)?;
    Ok(memory)
}

/// Checks that a child can join a cgroup made under `dir` (the kernel's delegation rules may
/// refuse the move even where `mkdir` works): a forked child writes `0` into a probe cgroup's
/// `cgroup.procs` and exits with 0 or the errno of that write.
fn probe_join(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!("{}-probe", std::process::id()));
    match fs::create_dir(&probe) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let result = (|| {
        let procs = rustix::fs::open(
            probe.join("cgroup.procs").as_path(),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let raw = procs.as_raw_fd();
        // SAFETY: the child only makes raw system calls (write, _exit) on a buffer that is a
        // static constant, as required after fork in a multi-threaded process.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                let code = if libc::write(raw, b"0".as_ptr().cast(), 1) == 1 {
                    0
                } else {
                    *libc::__errno_location()
                };
                libc::_exit(code);
            }
        }
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        let pid = rustix::process::Pid::from_raw(pid).ok_or_else(|| io::Error::other("fork gave pid 0"))?;
        let status = loop {
            match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
                Ok(Some((_, status))) => break status,
                Err(rustix::io::Errno::INTR) => continue,
                Ok(None) => return Err(io::Error::other("waitpid gave no status")),
                Err(e) => return Err(e.into()),
            }
        };
        match status.exit_status() {
            Some(0) => Ok(()),
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Err(io::Error::other("the probe child did not exit normally")),
        }
    })();
    let _ = fs::remove_dir(&probe);
    result.map_err(|e| io::Error::new(e.kind(), format!("a child cannot join a cgroup here: {e}")))
}

/// One run's cgroup. Dropping it does not remove it: call [`RunCgroup::remove`].
#[derive(Debug)]
pub(super) struct RunCgroup {
    path: PathBuf,
    dir: OwnedFd,
    memory: bool,
}

impl RunCgroup {
    /// The path of a run's cgroup: `<base>/<runner pid>-<seq>-<run id>` (the run id cut to a
    /// file name's length; left out when empty).
    pub(super) fn path_for(base: &CgroupBase, seq: u64, run_id: &str) -> PathBuf {
        let mut name = format!("{}-{seq}", std::process::id());
        if !run_id.is_empty() {
            let mut cut = run_id.len().min(NAME_RUN_ID_MAX);
            while !run_id.is_char_boundary(cut) {
                cut -= 1;
            }
            name.push('-');
            name.push_str(&run_id[..cut].replace(['/', '\n'], "_"));
        }
        base.dir.join(name)
    }

    /// Makes the cgroup `path` (from [`RunCgroup::path_for`]) and opens it. A leftover cgroup of
    /// that name (a runner with the same pid that died before removing it) is removed first when
    /// empty.
    ///
    /// # Errors
    /// The error of `mkdir` or of opening the cgroup's folder.
    pub(super) fn create_at(base: &CgroupBase, path: PathBuf) -> io::Result<RunCgroup> {
        if let Err(e) = fs::create_dir(&path) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
            fs::remove_dir(&path)?;
            fs::create_dir(&path)?;
        }
        let dir = rustix::fs::open(
            path.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        match dir {
            Ok(dir) => Ok(RunCgroup {
                path,
                dir,
                memory: base.memory,
            }),
            Err(e) => {
                let _ = fs::remove_dir(&path);
                Err(e.into())
            }
        }
    }

    /// The cgroup's folder.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The cgroup's folder, open (close-on-exec): `clone3(CLONE_INTO_CGROUP)` starts the child
    /// in it, or the child opens `cgroup.procs` in it and writes `0` there to join.
    pub(super) fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Reads a file of the cgroup (`cgroup.procs`, `memory.peak`, ...); `None` when it cannot be
    /// read.
    fn read(&self, file: &str) -> Option<String> {
        let mut text = String::with_capacity(256);
        fs::File::open(self.path.join(file))
            .and_then(|mut f| f.read_to_string(&mut text))
            .ok()?;
        Some(text)
    }

    /// Pids of the processes in the cgroup now (`cgroup.procs`; zombies are not listed).
    pub(super) fn pids(&self) -> Vec<i32> {
        self.read("cgroup.procs")
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// `true` while a live process is in the cgroup (`populated 1` in `cgroup.events`).
    pub(super) fn populated(&self) -> bool {
        match self.read("cgroup.events") {
            Some(t) => t.lines().any(|l| l.trim() == "populated 1"),
            None => !self.pids().is_empty(),
        }
    }

    /// SIGKILL to every process in the cgroup (`1` into `cgroup.kill`).
    ///
    /// # Errors
    /// The error of opening or writing `cgroup.kill`.
    pub(super) fn kill(&self) -> io::Result<()> {
        fs::write(self.path.join("cgroup.kill"), b"1")
    }

    /// `memory.current` and `memory.peak` in bytes, where the cgroup has the memory controller
    /// (`memory.peak` needs Linux 5.19).
    pub(super) fn memory(&self) -> (Option<u64>, Option<u64>) {
        if !self.memory {
            return (None, None);
        }
        let value = |f: &str| self.read(f).and_then(|t| t.trim().parse().ok());
        (value("memory.current"), value("memory.peak"))
    }

    /// Removes the (empty) cgroup.
    ///
    /// # Errors
    /// The error of `rmdir`: `EBUSY` while a process is still in it.
    pub(super) fn remove(&self) -> io::Result<()> {
        fs::remove_dir(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cgroup2_mounts_in_mountinfo() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
50 31 0:40 /user.slice /mnt/with\\040space rw shared:1 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mounts(text),
            vec![
                (PathBuf::from("/sys/fs/cgroup/unified"), PathBuf::from("/")),
                (PathBuf::from("/mnt/with space"), PathBuf::from("/user.slice")),
            ]
        );
    }
}
