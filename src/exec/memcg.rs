//! A per-run memory cgroup v1, for the tree's true peak where the run's cgroup v2 has no memory
//! controller (hybrid hosts, where `memory` is bound to the v1 hierarchy at
//! `/sys/fs/cgroup/memory`).
//!
//! Once per process, [`base`] finds the v1 memory mount (`/proc/self/mountinfo`, file system
//! type `cgroup` with the `memory` option) and the runner's own memory cgroup in it
//! (`N:memory:<path>` of `/proc/self/cgroup`), and makes (or reuses) `hwr-exp` inside that
//! cgroup: runs are nested under the runner's own memory cgroup, so its limits and accounting
//! hold for them too. A run gets `hwr-exp/<runner pid>-<n>` ([`RunMemcg::create`]); its child
//! joins it between fork and exec (writes `0` to its [`JOIN_FILE`], `tasks`), and every process
//! it starts inherits it. `memory.usage_in_bytes` and `memory.max_usage_in_bytes` are then the run's
//! processes together (page cache they read or wrote and kernel memory charged to them
//! included; v1 batches charges per CPU, so small figures are approximate). After the run the
//! cgroup is removed (its remaining page-cache charges move to the parent), or serves a later
//! run (below).
//!
//! Making and removing a memory cgroup costs the kernel far more than a run of a small program
//! (`mkdir` populates its dozens of control files, `rmdir` takes them down): where runs are
//! prepared ahead ([`super::Launcher::prepare`]), a run's memory cgroup is found on the
//! preparing thread while the run before executes, and an ended run's is left in [`Ended`] for
//! the next `prepare` (or `tidy`), off the path between one run and the next. That `prepare`
//! gives it to the next run when it can serve as a new one would
//! ([`RunMemcg::reset_for_reuse`]: no process in it, at most [`REUSE_LEFTOVER_MAX`] left charged,
//! its settings untouched; its peak is then reset), and removes it otherwise (a run that left
//! page cache or kernel memory behind, changed a limit, met the OOM killer). The child tells the
//! runner whether it joined (its report pipe), so nothing is read to check.
//!
//! Leftovers of a runner killed mid-run (empty folders named after a pid that is gone) are
//! removed by the next runner's [`base`].

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

/// Name of the folder the runs' memory cgroups are made in.
const PARENT: &str = "hwr-exp";

/// The file the run's child writes `0` (itself) into to join its memory cgroup: v1's `tasks`,
/// which moves one thread, not `cgroup.procs`, which moves a whole thread group. The child is a
/// fresh fork, single-threaded (and its memory's owner), so both move the same process with
/// the same memory; but a `cgroup.procs` write takes the kernel's global thread-group lock for
/// writing (`cgroup_threadgroup_rwsem`), which waits for an RCU grace period: measured 6-10 ms
/// of the child's wall time per run at load 25-35, against 30-40 us for `tasks` (Linux 6.18,
/// 2 cores). A one-thread move of the writer itself takes no such lock.
pub(super) const JOIN_FILE: &str = "tasks";

/// The folder runs' v1 memory cgroups are made in, or why there is none.
pub(super) fn base() -> Result<&'static Path, &'static str> {
    static BASE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BASE.get_or_init(discover)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

fn discover() -> Result<PathBuf, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let (point, root) = memory_mount(&mountinfo).ok_or("no cgroup v1 memory controller is mounted")?;
    let own = fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| own_memcg(&t))
        .ok_or("/proc/self/cgroup names no v1 memory cgroup")?;
    let rel = Path::new(&own)
        .strip_prefix(&root)
        .map_err(|_| format!("the runner's memory cgroup {own} is outside the mount's root"))?;
    let dir = point.join(rel).join(PARENT);
    match fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
    }
    rustix::fs::access(dir.join(JOIN_FILE).as_path(), rustix::fs::Access::WRITE_OK)
        .map_err(|e| format!("{}: {JOIN_FILE} is not writable: {e}", dir.display()))?;
    remove_stale(&dir);
    Ok(dir)
}

/// Removes empty run memory cgroups left by runners that are gone (`<pid>-<n>`, no `/proc/<pid>`).
fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// `(mount point, root)` of the v1 memory controller's mount in mountinfo text.
fn memory_mount(mountinfo: &str) -> Option<(PathBuf, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split_whitespace();
        if r.next()? != "cgroup" {
            return None;
        }
        let _source = r.next()?;
        if !r.next()?.split(',').any(|o| o == "memory") {
            return None;
        }
        let mut fields = left.split_whitespace();
        let root = PathBuf::from(fields.nth(3)?);
        let point = PathBuf::from(fields.next()?);
        Some((point, root))
    })
}

/// The path of the memory line (`N:...memory...:<path>`) of `/proc/self/cgroup` text.
fn own_memcg(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let _n = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The most an ended run may leave charged to its memory cgroup for the cgroup to serve another
/// run ([`RunMemcg::reset_for_reuse`]): 256 KiB, the per-CPU batch v1 charges in (64 pages of
/// 4 KiB), which a run that leaves nothing behind still shows (`/bin/true`: 262144). A reused
/// cgroup's peak may so count up to this much of earlier charges, as much as the batching
/// already blurs a new one's.
pub(super) const REUSE_LEFTOVER_MAX: u64 = 256 * 1024;

/// The settings a run could change in its own memory cgroup that would change what a later run
/// in the same cgroup sees (compared, for reuse, with a new cgroup's).
const SETTINGS: [&str; 7] = [
    "memory.limit_in_bytes",
    "memory.soft_limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.swappiness",
    "memory.oom_control",
    "memory.move_charge_at_immigrate",
    "notify_on_release",
];

/// The [`SETTINGS`] of the first memory cgroup this process made, read right after its `mkdir`.
static FRESH_SETTINGS: OnceLock<String> = OnceLock::new();

/// One run's v1 memory cgroup; [`RunMemcg::remove`] removes it.
#[derive(Debug)]
pub(super) struct RunMemcg {
    path: PathBuf,
    /// [`JOIN_FILE`], open for writing: the child writes `0` to it before exec.
    procs: OwnedFd,
}

impl RunMemcg {
    /// Makes a run's memory cgroup under [`base`]; `None` where there is no base or the mkdir
    /// fails (the run then has no tree peak from a memory cgroup, and run.json says so).
    pub(super) fn create() -> Option<RunMemcg> {
        let base = base().ok()?;
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!("{}-{seq}", std::process::id()));
        fs::create_dir(&path).ok()?;
        match rustix::fs::open(
            path.join(JOIN_FILE).as_path(),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(procs) => {
                let made = RunMemcg { path, procs };
                FRESH_SETTINGS.get_or_init(|| made.settings());
                Some(made)
            }
            Err(_) => {
                let _ = fs::remove_dir(&path);
                None
            }
        }
    }

    /// [`JOIN_FILE`] of the cgroup, open for writing (for the child to join).
    pub(super) fn procs_fd(&self) -> BorrowedFd<'_> {
        self.procs.as_fd()
    }

    fn value(&self, file: &str) -> Option<u64> {
        super::cgroup::read_text(&self.path.join(file), 32)?
            .trim()
            .parse()
            .ok()
    }

    /// `memory.usage_in_bytes` and `memory.max_usage_in_bytes`, bytes.
    pub(super) fn memory(&self) -> (Option<u64>, Option<u64>) {
        (
            self.value("memory.usage_in_bytes"),
            self.value("memory.max_usage_in_bytes"),
        )
    }

    /// Makes this cgroup of an ended run ready for another run, when that next run sees what a
    /// new one would show it: no process left in it (`cgroup.procs` empty), at most
    /// [`REUSE_LEFTOVER_MAX`] still charged to it (`memory.usage_in_bytes`: no page cache or
    /// kernel memory of the ended run worth counting stays behind, only the per-CPU charge batch)
    /// and its settings ([`SETTINGS`]: limits, swappiness, the OOM state and kill count,
    /// `notify_on_release`) as a new memory cgroup has them. Then its peak is reset
    /// (`memory.max_usage_in_bytes` set to the current usage by writing `0`). `false` (the
    /// cgroup is to be removed) when anything differs or cannot be read or written.
    pub(super) fn reset_for_reuse(&self) -> bool {
        let empty = self.text("cgroup.procs").is_some_and(|t| t.trim().is_empty());
        let small = self
            .value("memory.usage_in_bytes")
            .is_some_and(|u| u <= REUSE_LEFTOVER_MAX);
        if !(empty && small) {
            return false;
        }
        let Some(fresh) = FRESH_SETTINGS.get() else {
            return false;
        };
        if self.settings() != *fresh {
            return false;
        }
        fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("memory.max_usage_in_bytes"))
            .and_then(|mut f| io::Write::write_all(&mut f, b"0"))
            .is_ok()
    }

    /// The [`SETTINGS`] files' text, concatenated (a missing file counts as empty).
    fn settings(&self) -> String {
        let mut all = String::new();
        for name in SETTINGS {
            all.push_str(&self.text(name).unwrap_or_default());
            all.push('\0');
        }
        all
    }

    fn text(&self, file: &str) -> Option<String> {
        super::cgroup::read_text(&self.path.join(file), 64)
    }

    /// Removes the cgroup (every process of the run has ended).
    pub(super) fn remove(self) {
        drop(self.procs);
        let _ = fs::remove_dir(&self.path);
    }
}

/// Memory cgroups of ended runs, removed later, off the critical path (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Ended(std::sync::Mutex<Vec<RunMemcg>>);

impl Ended {
    /// Leaves `m` for later; when [`super::containment::LEFTOVERS_MAX`] wait (nobody removed
    /// them), removes them all at once.
    pub(super) fn push(&self, m: RunMemcg) {
        let waiting = {
            let mut left = self.0.lock().unwrap_or_else(|e| e.into_inner());
            left.push(m);
            left.len()
        };
        if waiting >= super::containment::LEFTOVERS_MAX {
            self.remove_all();
        }
    }

    /// A memory cgroup for the next run: one left here that passes
    /// [`RunMemcg::reset_for_reuse`] (the others are removed), else a new one
    /// ([`RunMemcg::create`]). Reusing saves the kernel's `mkdir` and `rmdir` of a memory cgroup,
    /// the largest part of a short run's cost after the exec itself.
    pub(super) fn reuse_or_create(&self) -> Option<RunMemcg> {
        let left = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        let mut found = None;
        for m in left {
            if found.is_none() && m.reset_for_reuse() {
                found = Some(m);
            } else {
                m.remove();
            }
        }
        found.or_else(RunMemcg::create)
    }

    /// Removes every memory cgroup left here.
    pub(super) fn remove_all(&self) {
        let left = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for m in left {
            m.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_memory_mount_and_own_cgroup() {
        let mi = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        assert_eq!(
            memory_mount(mi),
            Some((PathBuf::from("/sys/fs/cgroup/memory"), PathBuf::from("/")))
        );
        assert_eq!(memory_mount("41 31 0:38 / /x rw - cgroup2 cgroup2 rw\n"), None);
        assert_eq!(
            own_memcg("5:devices:/\n4:memory:/a/b\n0::/\n").as_deref(),
            Some("/a/b")
        );
        assert_eq!(own_memcg("0::/\n"), None);
    }
}
