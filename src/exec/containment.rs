//! Containment: every process a run starts belongs to the run, is measured with it and is
//! stopped with it (DESIGN 4).
//!
//! A run is held by a per-run cgroup v2 where one can be made ([`super::cgroup`]), else by
//! tracking its process tree through `/proc` ([`super::tree`]). The environment variable
//! [`CONTAINMENT_VAR`] (`HWR_CONTAINMENT`) chooses: `auto` (the default: a cgroup where possible),
//! `cgroup` (a run that cannot get one fails to start, saying why) or `process-tree` (the
//! fallback, forced; so both ways are tested on every machine).
//!
//! Stopping is the same either way: SIGTERM to every live process of the run, SIGKILL to every
//! process after the grace period, repeated until nothing of the run is left; orphans reparented
//! to the runner are reaped. The guardian ([`super::guardian`]) is told about each run, so it can
//! do the same if the runner dies.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal};
use serde::{Deserialize, Serialize};

use super::cgroup::{self, RunCgroup};
use super::tree::{self, Tree};
use super::{RunSpec, StartError, children, guardian};

/// The environment variable that chooses the containment: `auto`, `cgroup` or `process-tree`.
pub const CONTAINMENT_VAR: &str = "HWR_CONTAINMENT";

/// Upper bound on waiting for SIGKILLed processes to disappear (a process in uninterruptible
/// sleep, `D` state, cannot die until its I/O finishes).
const KILL_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// How a run's processes were held together (`containment` in run.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Containment {
    /// A per-run cgroup v2: joined by the child before exec, stopped with `cgroup.kill`.
    Cgroup,
    /// The fallback: the run's processes found through `/proc` (session, parent links, the run's
    /// `HWR_RUN_ID` in the environment of orphans reparented to the runner).
    ProcessTree,
}

/// What [`CONTAINMENT_VAR`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Auto,
    Cgroup,
    ProcessTree,
}

/// [`CONTAINMENT_VAR`] read once per process.
fn choice() -> Result<Choice, &'static str> {
    static CHOICE: OnceLock<Result<Choice, String>> = OnceLock::new();
    CHOICE
        .get_or_init(|| match std::env::var(CONTAINMENT_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(Choice::Auto),
            Ok(v) if v.is_empty() || v == "auto" => Ok(Choice::Auto),
            Ok(v) if v == "cgroup" => Ok(Choice::Cgroup),
            Ok(v) if v == "process-tree" => Ok(Choice::ProcessTree),
            Ok(v) => Err(format!(
                "{CONTAINMENT_VAR}={v:?} is not one of auto (the default), cgroup, process-tree"
            )),
            Err(e) => Err(format!("{CONTAINMENT_VAR}: {e}")),
        })
        .as_ref()
        .map(|c| *c)
        .map_err(String::as_str)
}

/// Checks the containment setting before any run: [`CONTAINMENT_VAR`] must be one of its values,
/// and `cgroup` needs a cgroup2 this process can make cgroups in. Run once by the runner's
/// preflight, so a bad setting is one error before a bundle is made instead of one
/// `spawn-failed` run per planned run.
///
/// # Errors
/// What is wrong and what the values are.
pub fn check_setting() -> Result<(), String> {
    match choice()? {
        Choice::Cgroup => cgroup::base().map(|_| ()).map_err(|why| {
            format!(
                "{CONTAINMENT_VAR}=cgroup, but no cgroup can be made here: {why} (unset it, or use auto or process-tree)"
            )
        }),
        Choice::Auto | Choice::ProcessTree => Ok(()),
    }
}

/// Where this process's run cgroups go when that is not inside the runner's own cgroup, and why
/// (`None` when they nest in it, or no cgroup is used). Found once (`cgroup::base`); called
/// before the guardian is forked, since a runner nested in its caller's cgroup first moves
/// itself (and so everything it starts later) into a leaf of it.
pub fn placement_note() -> Option<&'static str> {
    if choice().ok()? == Choice::ProcessTree {
        return None;
    }
    cgroup::base().ok()?.note.as_deref()
}

/// Sequence number of runs in this process: names their cgroups.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// What stopping the rest of a run found and did.
#[derive(Debug, Default)]
pub(super) struct Finished {
    /// Live processes of the run found after its leader was reaped, then stopped.
    pub(super) strays: u32,
    /// `memory.peak` of the run's cgroup, bytes, where it has the memory controller.
    pub(super) memory_peak: Option<u64>,
    /// What went wrong cleaning up (a process that would not die, a cgroup not removed).
    pub(super) error: Option<String>,
    /// Processes of the run found outside its cgroup ([`RunContainment::escaped`]).
    pub(super) escaped: Vec<EscapedProcess>,
}

/// Most empty cgroups [`Leftovers`] keeps waiting for removal.
pub(super) const LEFTOVERS_MAX: usize = 16;

/// Empty cgroups of ended runs whose removal was left for later, off the critical path between
/// one run and the next: making sure a cgroup is empty (`populated 0` in `cgroup.events`) is a
/// read, while `rmdir` of a cgroup takes the kernel several times longer. Each is kept as its path
/// (its folder descriptor is closed at once) and stays listed with the guardian until it is
/// removed, so it is removed even if the runner dies first.
#[derive(Debug, Default)]
pub(super) struct Leftovers(Mutex<Vec<(std::path::PathBuf, Option<guardian::Listing>)>>);

impl Leftovers {
    /// Removes every cgroup left here and takes it off the guardian's table. One that cannot be
    /// removed (a process joined it after all) is stopped first: SIGKILL through `cgroup.kill`,
    /// then up to [`KILL_WAIT_LIMIT`] for it to empty.
    pub(super) fn remove_all(&self) {
        let left = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for (path, listing) in left {
            if cgroup::remove_tree(&path).is_err() {
                let limit = Instant::now() + KILL_WAIT_LIMIT;
                while cgroup::remove_tree(&path).is_err() && path.exists() && Instant::now() < limit {
                    let _ = std::fs::write(path.join("cgroup.kill"), b"1");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            if let Some(listing) = listing {
                guardian::unlist(listing);
            }
        }
    }

    /// Adds an empty cgroup; when [`LEFTOVERS_MAX`] are waiting (nobody has removed them: the
    /// recorder that would is behind), removes them all at once.
    fn push(&self, cgroup: RunCgroup, listing: Option<guardian::Listing>) {
        let waiting = {
            let mut left = self.0.lock().unwrap_or_else(|e| e.into_inner());
            left.push((cgroup.path().to_path_buf(), listing));
            left.len()
        };
        if waiting >= LEFTOVERS_MAX {
            self.remove_all();
        }
    }
}

/// One run's containment, from before its spawn until nothing of it is left.
#[derive(Debug)]
pub(super) struct RunContainment {
    listing: Option<guardian::Listing>,
    cgroup: Option<RunCgroup>,
    tree: Option<Tree>,
    markers: Vec<Vec<u8>>,
    /// Pids seen in the run's cgroup (to reap those that come back to the runner).
    seen: Vec<i32>,
    /// For the process-tree fallback: `ns_last_pid` before the spawn.
    cursor: Option<i32>,
    /// The run's leader once started: its pid names the run's session and process group.
    leader: Option<i32>,
    /// When the process tree was last scanned.
    scanned: Instant,
}

impl RunContainment {
    /// Prepares the containment of `spec`'s run before its spawn: makes its cgroup (and tells
    /// the guardian), or chooses the process-tree fallback.
    ///
    /// # Errors
    /// A message when [`CONTAINMENT_VAR`] is invalid, or asks for `cgroup` and none can be made
    /// (with the OS error of the `mkdir`, if that failed).
    pub(super) fn prepare(spec: &RunSpec) -> Result<RunContainment, StartError> {
        let key = SEQ.fetch_add(1, Ordering::Relaxed);
        let markers = tree::run_markers(&spec.env);
        let choice = choice().map_err(StartError::new)?;
        // The run is listed with the guardian before its spawn, so that the guardian stops it
        // (and removes its cgroup) even if the runner dies during the spawn; the leader pid follows
        // once known. A cgroup is listed before it is made: a runner killed right after the mkdir
        // leaves no cgroup behind (the guardian passes over one that does not exist).
        let mut listing = None;
        let cgroup = match choice {
            Choice::ProcessTree => None,
            Choice::Auto | Choice::Cgroup => {
                let made = cgroup::base().map_err(StartError::new).and_then(|base| {
                    let path = RunCgroup::path_for(base, u64::from(key), &tree::run_id(&spec.env));
                    listing = guardian::list(0, Some(&path), &markers);
                    RunCgroup::create_at(base, path).map_err(|e| {
                        StartError::os(
                            format!("cannot make the run's cgroup in {}: {e}", base.dir.display()),
                            &e,
                        )
                    })
                });
                match made {
                    Ok(cg) => Some(cg),
                    Err(why) => {
                        if let Some(l) = listing.take() {
                            guardian::unlist(l);
                        }
                        if choice == Choice::Cgroup {
                            let message = format!(
                                "{CONTAINMENT_VAR}=cgroup, but no cgroup can be made for the run: {why}"
                            );
                            return Err(why.context(message));
                        }
                        None
                    }
                }
            }
        };
        if cgroup.is_none() {
            listing = guardian::list(0, None, &markers);
        }
        let cursor = if cgroup.is_none() { tree::last_pid() } else { None };
        Ok(RunContainment {
            listing,
            cgroup,
            tree: None,
            markers,
            seen: Vec::new(),
            cursor,
            leader: None,
            scanned: Instant::now(),
        })
    }

    /// [`RunContainment::prepare`] ahead of time, from another thread than the one that will spawn
    /// the run: only where the run gets a cgroup (making it is the part worth doing ahead), else
    /// `None`. A containment made ahead and never used must be [`RunContainment::abandon`]ed.
    pub(super) fn prepare_ahead(spec: &RunSpec) -> Option<RunContainment> {
        if choice().ok()? == Choice::ProcessTree || cgroup::base().is_err() {
            return None;
        }
        let made = RunContainment::prepare(spec).ok()?;
        if made.cgroup.is_none() {
            made.abandon();
            return None;
        }
        Some(made)
    }

    /// Which containment the run has.
    pub(super) fn kind(&self) -> Containment {
        if self.cgroup.is_some() {
            Containment::Cgroup
        } else {
            Containment::ProcessTree
        }
    }

    /// The run cgroup's folder, open, for the spawn to start the child in; `None` for the
    /// process-tree fallback.
    pub(super) fn cgroup_dir(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.cgroup.as_ref().map(RunCgroup::dir_fd)
    }

    /// The run's leader `leader` has been started (its pid is also its session id).
    pub(super) fn started(&mut self, leader: i32) {
        self.leader = Some(leader);
        if let Some(listing) = &self.listing {
            guardian::set_leader(listing, leader);
        }
        if self.cgroup.is_none() {
            self.tree = Some(Tree::new(leader, self.markers.clone(), self.cursor));
        }
    }

    /// The spawn failed: removes the cgroup and ends the guardian's record.
    pub(super) fn abandon(mut self) {
        if let Some(cg) = &self.cgroup {
            let _ = cg.remove();
        }
        self.unlist();
    }

    /// Takes the run off the guardian's table.
    fn unlist(&mut self) {
        if let Some(listing) = self.listing.take() {
            guardian::unlist(listing);
        }
    }

    /// Called by the supervisor at each wake-up: the process-tree fallback scans at least once a
    /// second, so it sees processes while their parents still link them to the run, and so its
    /// pid window ([`Tree::scan`]) stays short.
    pub(super) fn tick(&mut self) {
        if self.tree.is_some() && self.scanned.elapsed() >= Duration::from_secs(1) {
            self.members();
        }
    }

    /// The run's processes that left its cgroup (a root process can move itself into another):
    /// every pid seen in the cgroup and every live process of the run's session (its leader's
    /// pid), whose `/proc/<pid>/cgroup` is no longer the run's cgroup or one below it. Those
    /// still in the run's session are killed (SIGKILL); the others are only named. Empty without
    /// a cgroup (the process-tree fallback follows the processes themselves).
    fn escaped(&self) -> Vec<EscapedProcess> {
        let (Some(cg), Ok(base)) = (&self.cgroup, cgroup::base()) else {
            return Vec::new();
        };
        let Ok(inside) = cg.path().strip_prefix(&base.dir) else {
            return Vec::new();
        };
        let run = base.hierarchy.join(inside);
        let session = self.leader;
        let mut pids = self.seen.clone();
        if let Some(sid) = session {
            let of_session = super::tree::snapshot_where(|p| p != sid);
            pids.extend(
                of_session
                    .iter()
                    .filter(|p| p.sid == sid && !p.dead)
                    .map(|p| p.pid),
            );
        }
        pids.sort_unstable();
        pids.dedup();
        let mut out = Vec::new();
        for pid in pids {
            if Some(pid) == self.leader {
                continue;
            }
            let Some(stat) = super::tree::read_stat(pid) else {
                continue;
            };
            if stat.dead {
                continue;
            }
            let Some(now_in) = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .ok()
                .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(str::to_owned)))
            else {
                continue;
            };
            if std::path::Path::new(&now_in).starts_with(&run) {
                continue;
            }
            let in_session = session.is_some_and(|sid| stat.sid == sid);
            let killed = in_session
                && rustix::process::Pid::from_raw(pid)
                    .is_some_and(|p| rustix::process::kill_process(p, Signal::KILL).is_ok());
            out.push(EscapedProcess {
                pid,
                cgroup: now_in,
                killed,
            });
        }
        out
    }

    /// Pids of the run's live processes now (`cgroup.procs`, or a `/proc` scan).
    pub(super) fn members(&mut self) -> Vec<i32> {
        if let Some(cg) = &self.cgroup {
            let pids = cg.pids();
            remember(&mut self.seen, &pids);
            return pids;
        }
        self.scanned = Instant::now();
        match self.tree.as_mut() {
            Some(t) => t.scan().0.iter().map(|p| p.pid).collect(),
            None => Vec::new(),
        }
    }

    /// Whether the run's cgroup has the memory controller (`memory.current`, `memory.peak`).
    pub(super) fn has_memory(&self) -> bool {
        self.cgroup.is_some() && cgroup::base().is_ok_and(|b| b.memory)
    }

    /// `memory.current` and `memory.peak` of the run's cgroup, bytes, where it has the memory
    /// controller.
    pub(super) fn memory(&self) -> (Option<u64>, Option<u64>) {
        self.cgroup.as_ref().map_or((None, None), RunCgroup::memory)
    }

    /// Sends `sig` to every live process of the run; returns how many got it.
    pub(super) fn signal(&mut self, sig: Signal) -> u32 {
        if let Some(cg) = &self.cgroup {
            let pids = cg.pids();
            remember(&mut self.seen, &pids);
            // Each pid is pinned by a pidfd, then must still be listed in the cgroup: a pid
            // reused by a process outside the run in between is never signalled.
            let pinned: Vec<(i32, std::os::fd::OwnedFd)> = pids
                .iter()
                .filter_map(|&p| {
                    Some((
                        p,
                        rustix::process::pidfd_open(Pid::from_raw(p)?, PidfdFlags::empty()).ok()?,
                    ))
                })
                .collect();
            let still = cg.pids();
            return pinned
                .iter()
                .filter(|(p, _)| still.contains(p))
                .filter(|(_, fd)| rustix::process::pidfd_send_signal(fd, sig).is_ok())
                .count() as u32;
        }
        match self.tree.as_mut() {
            Some(t) => t.scan().0.iter().filter(|p| tree::signal_checked(p, sig)).count() as u32,
            None => 0,
        }
    }

    /// SIGKILL to every process of the run (`cgroup.kill`, or one round over the tree).
    pub(super) fn kill(&mut self) {
        if let Some(cg) = &self.cgroup {
            remember(&mut self.seen, &cg.pids());
            if cg.kill().is_err() {
                // Not expected (cgroup.kill was checked); fall back to signalling each process.
                self.signal(Signal::KILL);
            }
            return;
        }
        self.signal(Signal::KILL);
    }

    /// Whether any live process of the run is left, reaping those of its processes that exited
    /// and came back to the runner.
    fn alive(&mut self) -> bool {
        if let Some(cg) = &self.cgroup {
            let populated = cg.populated();
            if !populated {
                self.reap();
            }
            return populated;
        }
        self.live_now() > 0
    }

    /// Reaps the run's processes that exited as children of the runner.
    fn reap(&self) {
        match cgroup::base() {
            Ok(base) if self.cgroup.is_some() => children::reap_orphans(&self.seen, &|pid| base.holds(pid)),
            _ => children::reap_orphans(&self.seen, &|_| false),
        }
    }

    /// After the leader was reaped: stops what is left of the run (SIGTERM, then SIGKILL at
    /// `kill_at`, or after `grace` when the run was not being stopped already), reaps, removes
    /// the cgroup, and ends the guardian's record. With `later`, a cgroup found empty at once is
    /// not removed here but left there, still listed with the guardian. Its waits go through
    /// `idle` (which copies the run's output meanwhile, so a stray never blocks on a full pipe).
    pub(super) fn finish(
        mut self,
        grace: Duration,
        kill_at: Option<Instant>,
        later: Option<&Leftovers>,
        idle: &mut dyn FnMut(Duration),
    ) -> Finished {
        let mut done = Finished::default();
        if let Some(t) = self.tree.as_mut() {
            t.leader_reaped();
        }
        done.escaped = self.escaped();
        if let Some(cg) = &self.cgroup {
            done.memory_peak = cg.memory().1;
            // Fast path: an empty cgroup (zombies do not count) is removed, or left for later.
            let empty = match later {
                Some(_) => !cg.populated(),
                None => cg.remove().is_ok(),
            };
            if empty {
                self.reap();
                self.settle_group(idle);
                if let (Some(later), Some(cg)) = (later, self.cgroup.take()) {
                    later.push(cg, self.listing.take());
                }
                self.unlist();
                return done;
            }
        }
        done.strays = self.live_now();
        if done.strays > 0 {
            self.signal(Signal::TERM);
            let kill_at = kill_at.unwrap_or_else(|| Instant::now() + grace);
            if !self.wait_gone(kill_at, idle) {
                let limit = Instant::now() + KILL_WAIT_LIMIT;
                loop {
                    self.kill();
                    if self.wait_gone((Instant::now() + Duration::from_millis(50)).min(limit), idle) {
                        break;
                    }
                    if Instant::now() >= limit {
                        done.error = Some(format!(
                            "processes of the run were still alive {} s after SIGKILL",
                            KILL_WAIT_LIMIT.as_secs()
                        ));
                        break;
                    }
                }
            }
        }
        if let Some(cg) = &self.cgroup {
            if let Some(peak) = cg.memory().1 {
                done.memory_peak = Some(peak);
            }
            if let Err(e) = cg.remove() {
                done.error.get_or_insert(format!(
                    "cannot remove the run's cgroup {}: {e}",
                    cg.path().display()
                ));
            }
        }
        self.reap();
        self.settle_group(idle);
        self.unlist();
        done
    }

    /// Once nothing of the run is alive: reaps what is left of the leader's process group and
    /// waits (through `idle`, up to [`KILL_WAIT_LIMIT`]) until the group is gone, zombies
    /// included. A process killed with the run leaves its cgroup (`populated 0`) before it
    /// becomes a zombie and is reparented to the runner, so right after the run looked empty
    /// some of its processes may not be reapable yet; without this wait they were left as
    /// zombies for no one to reap until the next run's reaping.
    fn settle_group(&self, idle: &mut dyn FnMut(Duration)) {
        let Some(pgid) = self.leader else {
            return;
        };
        let limit = Instant::now() + KILL_WAIT_LIMIT;
        let mut nap = Duration::from_micros(100);
        while !children::reap_group(pgid) {
            let now = Instant::now();
            if now >= limit {
                return;
            }
            idle(nap.min(limit - now));
            nap = (nap * 2).min(Duration::from_millis(10));
        }
    }

    /// Number of live processes of the run now; in the process-tree fallback, also reaps those
    /// of its processes that exited as children of the runner.
    fn live_now(&mut self) -> u32 {
        if self.cgroup.is_some() {
            return self.members().len() as u32;
        }
        let Some(t) = self.tree.as_mut() else {
            return 0;
        };
        let (live, zombies) = t.scan();
        children::reap_orphans(&zombies, &|_| false);
        live.len() as u32
    }

    /// Polls until nothing of the run is alive (`true`) or `until` passes (`false`).
    fn wait_gone(&mut self, until: Instant, idle: &mut dyn FnMut(Duration)) -> bool {
        let mut nap = Duration::from_micros(200);
        loop {
            if !self.alive() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            idle(nap.min(until - now));
            nap = (nap * 2).min(Duration::from_millis(10));
        }
    }
}

/// Adds the pids of `new` not yet in `seen`.
fn remember(seen: &mut Vec<i32>, new: &[i32]) {
    for &p in new {
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
}

/// A process of a run found outside the run's cgroup when the run ended (run.json
/// `escaped-processes`): it left the cgroup (moved itself, being root), so stopping the cgroup
/// did not stop it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EscapedProcess {
    /// Its pid.
    pub pid: i32,
    /// The cgroup it was in (`/proc/<pid>/cgroup`, `0::` line), as the kernel names it.
    pub cgroup: String,
    /// Whether the runner killed it (SIGKILL): it was still in the run's session.
    pub killed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty cgroups left for later never pile up: once [`LEFTOVERS_MAX`] wait, they are all
    /// removed (and taken off the guardian's table), even when no `prepare` or `tidy` comes.
    #[test]
    fn leftover_cgroups_are_bounded() {
        let Ok(base) = cgroup::base() else {
            let strict =
                |var: &str, yes: &[&str]| std::env::var(var).is_ok_and(|v| yes.contains(&v.as_str()));
            assert!(
                !strict("HWR_REQUIRE_CGROUP", &["1"]) && !strict("CI", &["true", "1"]),
                "no cgroup can be made here, and skips are failures (CI or HWR_REQUIRE_CGROUP=1)"
            );
            eprintln!("skipped: no cgroup can be made here");
            return;
        };
        let later = Leftovers::default();
        let mut made = Vec::new();
        for i in 0..(LEFTOVERS_MAX * 2 + 3) {
            let seq = 1_000_000 + u64::from(SEQ.fetch_add(1, Ordering::Relaxed));
            let path = RunCgroup::path_for(base, seq, &format!("leftover-test-{i}"));
            let cg = RunCgroup::create_at(base, path).unwrap();
            made.push(cg.path().to_path_buf());
            later.push(cg, None);
            let waiting = later.0.lock().unwrap().len();
            assert!(
                waiting < LEFTOVERS_MAX,
                "{waiting} cgroups wait after {} pushes",
                i + 1
            );
        }
        let gone = made.iter().filter(|p| !p.exists()).count();
        assert_eq!(gone, 2 * LEFTOVERS_MAX, "removed as they piled up");
        later.remove_all();
        assert!(made.iter().all(|p| !p.exists()), "{made:?}");
    }
}
