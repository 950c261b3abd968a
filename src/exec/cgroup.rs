//! Per-run cgroup v2: where runs' cgroups are made, and one run's cgroup (DESIGN 4).
//!
//! # Where
//!
//! Once per process, [`base`] looks for a cgroup2 mount in `/proc/self/mountinfo` (preferring
//! `/sys/fs/cgroup`, the unified layout, then `/sys/fs/cgroup/unified`, the hybrid one) and the
//! cgroup the runner sits in (`0::<path>` of `/proc/self/cgroup`). Run cgroups nest inside the
//! runner's own cgroup, so that whatever stops that cgroup (`systemctl stop` of a unit, Slurm's
//! `proctrack/cgroup` on `scancel`, an outer hwr-exp run's `cgroup.kill`) stops the runs too, and
//! whatever measures it (`memory.current` of the caller, an outer run's samples) counts them:
//!
//! ```text
//! <own cgroup>/                          the caller's cgroup (a unit, a Slurm step, an outer run)
//! <own cgroup>/hwr-exp-runner-<pid>/     the runner itself (and its guardian), moved here
//! <own cgroup>/hwr-exp/                  the parent of the runs' cgroups
//! <own cgroup>/hwr-exp/<pid>-<n>-<run>/  one run
//! ```
//!
//! The runner moves itself into a leaf of its own first (cgroup v2's no-internal-process rule:
//! a cgroup that hands controllers to its children holds no processes itself; BenchExec and
//! systemd scopes do the same), then enables the memory controller in its old cgroup where that
//! cgroup offers it and holds no other process. A runner at the root of the hierarchy (the root
//! cgroup, or the root of a cgroup namespace: a container) makes `<root>/hwr-exp` as before and
//! does not move. Where the own cgroup cannot be used (not writable, no `cgroup.kill`, a child
//! cannot join), run cgroups go to `<mount root>/hwr-exp`, outside it, and [`CgroupBase::note`]
//! says where and why (the runner prints it as a warning and records it in bundle.json `notes`).
//!
//! On a hybrid layout (cgroup2 at `/sys/fs/cgroup/unified`, the controllers on cgroup v1) the
//! v2 hierarchy has no controllers: run cgroups there hold and stop runs, without
//! `memory.current`; the v1 cgroups (memory limits included) are inherited from the runner.
//!
//! The parent must offer `cgroup.kill` (Linux 5.14+) and a writable `cgroup.procs`. Where the
//! mount offers the memory controller it is enabled for the runs (`+memory` in the parent's
//! `cgroup.subtree_control`), so each run's cgroup has `memory.current` and `memory.peak`.
//!
//! # One run
//!
//! [`RunCgroup::create_at`] makes `hwr-exp/<runner pid>-<n>-<run id>` ([`RunCgroup::path_for`]); the child is started in it
//! (`clone3(CLONE_INTO_CGROUP)` with the folder fd [`RunCgroup::dir_fd`], else it writes `0` into
//! its `cgroup.procs` between fork and exec), so every process the run starts is in it, whatever
//! it does (`setsid`, double fork, `timeout`). A run that is itself a runner (hwr-exp inside
//! hwr-exp) nests its runs' cgroups inside the run's: [`RunCgroup::pids`] lists the processes of
//! the whole subtree, [`RunCgroup::remove`] removes the empty subtree.
//! [`RunCgroup::kill`] writes `1` to `cgroup.kill` (SIGKILL to every member, forks racing with it
//! and nested cgroups included); [`RunCgroup::remove`] removes the empty cgroup.

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

/// Name prefix of the leaf cgroup a nested runner moves itself into (`hwr-exp-runner-<pid>`).
const RUNNER_LEAF: &str = "hwr-exp-runner-";

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
    /// Where run cgroups went when not inside the runner's own cgroup, and why; `None` when
    /// they nest in it (or the runner sits at the hierarchy's root).
    pub(super) note: Option<String>,
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
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(PathBuf::from)));
    let mut tried = Vec::new();
    // Inside the runner's own cgroup, on the mount that shows it.
    let mut own_dir = None;
    if let Some(own) = &own {
        for (point, root) in &mounts {
            let Ok(rel) = own.strip_prefix(root) else {
                continue;
            };
            let dir = point.join(rel);
            if rel.as_os_str().is_empty() {
                // At the hierarchy's root: nothing above to nest in, no rule against processes
                // here; `<root>/hwr-exp` as always.
                match prepare_parent(&point.join(PARENT)) {
                    Ok(memory) => {
                        return Ok(CgroupBase {
                            dir: point.join(PARENT),
                            hierarchy: root.join(PARENT),
                            memory,
                            note: None,
                        });
                    }
                    Err(e) => tried.push(format!("{}: {e}", point.join(PARENT).display())),
                }
            } else {
                match nest(&dir, own) {
                    Ok(base) => return Ok(base),
                    Err(e) => tried.push(format!("{}: {e}", dir.display())),
                }
            }
            own_dir = Some(dir);
            break;
        }
    }
    // Outside it: `hwr-exp` at a mount's root.
    for (point, root) in &mounts {
        let dir = point.join(PARENT);
        if own_dir.as_deref() == Some(point.as_path()) {
            continue; // tried above
        }
        match prepare_parent(&dir) {
            Ok(memory) => {
                let note = match &own_dir {
                    Some(own) => format!(
                        "run cgroups are made in {}, outside this runner's cgroup {} ({}): stopping that cgroup does not stop the runs",
                        dir.display(),
                        own.display(),
                        tried.join("; ")
                    ),
                    None => format!(
                        "run cgroups are made in {}: this runner's cgroup ({}) is on no cgroup2 mount",
                        dir.display(),
                        own.as_ref().map_or("unknown".into(), |o| o.display().to_string())
                    ),
                };
                return Ok(CgroupBase {
                    dir,
                    hierarchy: root.join(PARENT),
                    memory,
                    note: Some(note),
                });
            }
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!("no usable cgroup2 parent ({})", tried.join("; ")))
}

/// Makes the runs' parent inside the runner's own cgroup `own_dir` (`own` as
/// `/proc/self/cgroup` names it): moves this process into the leaf `hwr-exp-runner-<pid>` under
/// it, enables the memory controller in `own_dir` where offered, and prepares `own_dir/hwr-exp`.
/// On failure the process is moved back (best effort) and the leaf removed.
fn nest(own_dir: &Path, own: &Path) -> io::Result<CgroupBase> {
    rustix::fs::access(
        own_dir.join("cgroup.procs").as_path(),
        rustix::fs::Access::WRITE_OK,
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("cgroup.procs is not writable: {e}"),
        )
    })?;
    if !own_dir.join("cgroup.kill").exists() {
        return Err(io::Error::other("no cgroup.kill (Linux 5.14+ needed)"));
    }
    remove_stale_leaves(own_dir);
    let pid = std::process::id();
    let leaf = own_dir.join(format!("{RUNNER_LEAF}{pid}"));
    match fs::create_dir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    if let Err(e) = fs::write(leaf.join("cgroup.procs"), pid.to_string()) {
        let _ = fs::remove_dir(&leaf);
        return Err(io::Error::new(
            e.kind(),
            format!("cannot move the runner into {}: {e}", leaf.display()),
        ));
    }
    let has = |dir: &Path, file: &str| {
        fs::read_to_string(dir.join(file))
            .map(|t| t.split_whitespace().any(|c| c == "memory"))
            .unwrap_or(false)
    };
    if has(own_dir, "cgroup.controllers") && !has(own_dir, "cgroup.subtree_control") {
        // Refused (EBUSY) while another process shares the runner's old cgroup: the runs then
        // go without the memory controller, still nested.
        let _ = fs::write(own_dir.join("cgroup.subtree_control"), "+memory");
    }
    let dir = own_dir.join(PARENT);
    match prepare_parent(&dir) {
        Ok(memory) => Ok(CgroupBase {
            dir,
            hierarchy: own.join(PARENT),
            memory,
            note: None,
        }),
        Err(e) => {
            let _ = fs::write(own_dir.join("cgroup.procs"), pid.to_string());
            let _ = fs::remove_dir(&leaf);
            Err(e)
        }
    }
}

/// Removes the empty runner leaves of runners gone from `own_dir` (a live one is not empty:
/// `rmdir` refuses it).
fn remove_stale_leaves(own_dir: &Path) {
    let Ok(entries) = fs::read_dir(own_dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().as_bytes().starts_with(RUNNER_LEAF.as_bytes()) {
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// Removes the cgroup `dir` with the cgroups nested in it, deepest first, once no process is
/// left in the subtree (`populated 0`: a subtree still in use is not touched).
///
/// # Errors
/// The first error of `rmdir` (`EBUSY` while a process is still in the subtree).
pub(super) fn remove_tree(dir: &Path) -> io::Result<()> {
    let busy = match fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => e,
        Err(e) => return Err(e),
    };
    let empty = fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|t| t.lines().any(|l| l.trim() == "populated 0"));
    if !empty {
        return Err(busy);
    }
    for sub in child_cgroups(dir) {
        remove_tree(&sub)?;
    }
    fs::remove_dir(dir)
}

/// The cgroups directly nested in the cgroup `dir`.
fn child_cgroups(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
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
        read_text(&self.path.join(file), 256)
    }

    /// Pids of the processes in the cgroup and the cgroups nested in it now (`cgroup.procs` of
    /// each; zombies are not listed).
    pub(super) fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        let parse = |text: Option<String>, pids: &mut Vec<i32>| {
            pids.extend(
                text.iter()
                    .flat_map(|t| t.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
            );
        };
        parse(self.read("cgroup.procs"), &mut pids);
        // A run that is a runner itself nests cgroups here (hwr-exp inside hwr-exp).
        let mut nested = child_cgroups(&self.path);
        while let Some(dir) = nested.pop() {
            let mut text = String::new();
            let read = fs::File::open(dir.join("cgroup.procs")).and_then(|mut f| f.read_to_string(&mut text));
            parse(read.ok().map(|_| text), &mut pids);
            nested.extend(child_cgroups(&dir));
        }
        pids
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

    /// Removes the (empty) cgroup, and the empty cgroups nested in it ([`remove_tree`]).
    ///
    /// # Errors
    /// The error of `rmdir`: `EBUSY` while a process is still in it.
    pub(super) fn remove(&self) -> io::Result<()> {
        remove_tree(&self.path)
    }
}

/// Reads a small file of a cgroup folder (`memory.peak`, `memory.limit_in_bytes`, ...) whole, into
/// a buffer of `capacity` bytes to start with (one open and one read: cgroup files report no size
/// to size a buffer by); `None` when it cannot be opened or read.
pub(super) fn read_text(path: &Path, capacity: usize) -> Option<String> {
    let mut text = String::with_capacity(capacity);
    fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .ok()?;
    Some(text)
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
