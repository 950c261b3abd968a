//! cgroup v2 for the containment tests: a writable cgroup2 mount ([`Cgroup`], found
//! independently of hwr-exp), and a caller's cgroup to start a runner in ([`CallerCgroup`]), as a
//! systemd unit or a Slurm step would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::need::Requirement;

/// A cgroup2 mount where a sub-cgroup can be made (tried with mkdir and rmdir); gives its mount
/// point. Mandatory with `HWR_REQUIRE_CGROUP=1` (set by `.ci/run`).
pub struct Cgroup;

impl Requirement for Cgroup {
    type Found = PathBuf;
    fn what(&self) -> String {
        "a writable cgroup2 mount".into()
    }
    fn hint(&self) -> String {
        "run as root on Linux 5.14+ with cgroup2 mounted".into()
    }
    fn require_var(&self) -> Option<&'static str> {
        Some("HWR_REQUIRE_CGROUP")
    }
    fn find(self) -> Result<PathBuf, String> {
        writable_cgroup2().ok_or_else(|| "none found in /proc/self/mountinfo".into())
    }
}

/// The first cgroup2 mount point where a sub-cgroup can be made, looked for once.
pub fn writable_cgroup2() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            mountinfo
                .lines()
                .filter_map(|line| {
                    let (left, right) = line.split_once(" - ")?;
                    let point = left.split_whitespace().nth(4)?;
                    (right.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(point))
                })
                .find(|mount| {
                    let probe = mount.join(format!("hwr-exp-test-probe-{}", std::process::id()));
                    let ok = std::fs::create_dir(&probe).is_ok() && mount.join("cgroup.procs").exists();
                    let _ = std::fs::remove_dir(&probe);
                    ok
                })
        })
        .clone()
}

/// The cgroup v2 path of process `pid` (`0::<path>` of `/proc/PID/cgroup`).
pub fn cgroup_of(pid: i32) -> Option<PathBuf> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(PathBuf::from))
}

/// Every cgroup folder under `dir`, `dir` excluded, deepest first.
pub fn cgroups_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(cgroups_under(&e.path()));
                out.push(e.path());
            }
        }
    }
    out
}

/// Run cgroups of runner `pid` still there (`.../hwr-exp/<pid>-*` anywhere on the writable
/// cgroup2 mount: at its root, or nested in a caller's cgroup or in an outer run's).
pub fn run_cgroups_of(pid: u64) -> Vec<PathBuf> {
    let Some(mount) = writable_cgroup2() else {
        return Vec::new();
    };
    let prefix = format!("{pid}-");
    cgroups_under(&mount)
        .into_iter()
        .filter(|p| {
            p.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "hwr-exp")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect()
}

/// A fresh cgroup `<mount>/hwr-exp-test-<pid>-<n>` standing for the cgroup a runner's caller
/// gives it (a systemd unit, a Slurm step). Dropping it kills what is left in it and removes it
/// with everything nested.
pub struct CallerCgroup {
    dir: PathBuf,
    name: PathBuf,
}

impl CallerCgroup {
    /// Makes the cgroup under the cgroup2 mount `mount` (from [`Cgroup`]).
    pub fn new(mount: &Path) -> CallerCgroup {
        static N: AtomicU32 = AtomicU32::new(0);
        let leaf = format!(
            "hwr-exp-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = mount.join(&leaf);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        // The mount's root as processes see it: this test's own cgroup names the mount's root
        // relative to its namespace, so the new cgroup is `<root of ours>/<leaf>`.
        let root = mountinfo_root(mount).unwrap_or_else(|| PathBuf::from("/"));
        CallerCgroup {
            name: root.join(leaf),
            dir,
        }
    }

    /// The cgroup's folder (`<mount>/hwr-exp-test-...`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cgroup as `/proc/PID/cgroup` names it (`/hwr-exp-test-...`).
    pub fn name(&self) -> &Path {
        &self.name
    }

    /// `cmd` run inside this cgroup: a shell joins it (`echo $$ > cgroup.procs`) and `exec`s
    /// the command, keeping `cmd`'s environment, working directory and pipes.
    pub fn wrap(&self, cmd: &Command) -> Command {
        let join = r#"echo $$ > "$0/cgroup.procs" && exec "$@""#;
        super::wrapped(
            &["sh".as_ref(), "-c".as_ref(), join.as_ref(), self.dir.as_os_str()],
            cmd,
        )
    }

    /// `true` while a live process is in the cgroup or below (`populated 1`).
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events")).is_ok_and(|t| t.contains("populated 1"))
    }

    /// Pids of every process in the cgroup and the cgroups nested in it.
    pub fn pids(&self) -> Vec<i32> {
        let mut dirs = cgroups_under(&self.dir);
        dirs.push(self.dir.clone());
        dirs.iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    }

    /// SIGKILL to everything in the cgroup and below (`1` into `cgroup.kill`).
    pub fn kill(&self) {
        std::fs::write(self.dir.join("cgroup.kill"), "1")
            .unwrap_or_else(|e| panic!("cgroup.kill of {}: {e}", self.dir.display()));
    }
}

impl Drop for CallerCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        super::eventually(Duration::from_secs(10), || !self.populated());
        for dir in cgroups_under(&self.dir) {
            let _ = std::fs::remove_dir(dir);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The root field (4th) of the mountinfo line of `mount`.
fn mountinfo_root(mount: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let root = f.nth(3)?;
        (Path::new(f.next()?) == mount).then(|| PathBuf::from(root))
    })
}
