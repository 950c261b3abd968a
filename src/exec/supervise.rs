//! Supervising a started child: waiting on its pidfd with `poll`, sampling, the timeout, the
//! SIGTERM grace period and the cancel flag; reaping the leader with `wait4` (exit status and
//! rusage); then stopping whatever is left of the run through its containment.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use super::containment::{Leftovers, RunContainment};
use super::memcg::RunMemcg;
use super::sampling::Sampler;
use super::spawn::Child;
use super::{CancelFlag, RunOutcome, RunSpec, Termination};

/// How often the wait loop wakes up to look at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Why the runner is stopping the run.
#[derive(Clone, Copy)]
enum StopReason {
    Timeout,
    Interrupted,
}

/// What `wait4` reported for the leader.
struct Reaped {
    /// Raw wait status.
    status: libc::c_int,
    /// Resource usage of the leader and its waited-for descendants.
    usage: libc::rusage,
}

/// What the run's measurement brings besides the sampler: its v1 memory cgroup, if any (and
/// where to leave it once the run has ended, for removal off the critical path), and the shared
/// memory present before its spawn.
pub(super) struct Measure<'a> {
    pub(super) memcg: Option<RunMemcg>,
    pub(super) memcg_later: Option<&'a super::memcg::Ended>,
    pub(super) shm_before: super::shm::Snapshot,
}

impl Measure<'_> {
    /// Removes `m` now, or leaves it for later.
    fn drop_memcg(&self, m: RunMemcg) {
        match self.memcg_later {
            Some(later) => later.push(m),
            None => m.remove(),
        }
    }
}

/// Waits for the child, samples, enforces timeout and cancellation, reaps, then stops the rest
/// of the run. `started`/`start` are the run's wall-clock and monotonic start. When it returns,
/// no process of the run is alive (or `error` says which could not be stopped); its empty cgroup
/// is removed, or left in `later` ([`RunContainment::finish`]).
pub(super) fn supervise(
    spec: &RunSpec,
    cancel: &CancelFlag,
    child: Child,
    (mut containment, later): (RunContainment, Option<&Leftovers>),
    mut measure: Measure<'_>,
    started: SystemTime,
    start: Instant,
) -> RunOutcome {
    let pid = child.pid;
    let pidfd = child.pidfd;
    // Copies the run's output while the loop below (and the stopping of strays) waits.
    let mut drain = child.drain;
    containment.started(pid);
    let mut outcome = RunOutcome::empty(started, start);
    outcome.pid = Some(pid as u32);
    outcome.cpus_effective = read_cpus_allowed(pid);
    // A child that could not join its memory cgroup (the write is best effort) has no tree peak.
    let memcg = match measure.memcg.take() {
        Some(m) if child.memcg_joined => Some(m),
        Some(m) => {
            measure.drop_memcg(m);
            None
        }
        None => None,
    };

    let mut sampler = spec
        .memory_path
        .as_ref()
        .map(|path| Sampler::create(path, spec.sample_interval, start));
    let mut watch = spec
        .allocator
        .as_ref()
        .map(|choice| MapsWatch::new(choice, Instant::now()));
    let deadline = spec.timeout.map(|t| start + t);
    let mut stop: Option<(StopReason, Instant)> = None; // reason, SIGKILL time
    let mut killed = false;
    loop {
        let now = Instant::now();
        if stop.is_none() {
            let reason = if cancel.load(Ordering::Relaxed) {
                Some(StopReason::Interrupted)
            } else if deadline.is_some_and(|d| now >= d) {
                Some(StopReason::Timeout)
            } else {
                None
            };
            if let Some(reason) = reason {
                containment.signal(Signal::TERM);
                stop = Some((reason, now + spec.grace));
            }
        }
        if let Some((_, kill_at)) = stop
            && !killed
            && now >= kill_at
        {
            containment.kill();
            killed = true;
        }
        if let Some(s) = sampler.as_mut()
            && s.next_due().is_some_and(|next| now >= next)
        {
            let pids = containment.members();
            let from_cgroup = containment.has_memory();
            s.sample(&pids, pid, || match (&memcg, from_cgroup) {
                (_, true) => containment.memory(),
                (Some(m), false) => m.memory(),
                (None, false) => (None, None),
            });
        }
        containment.tick();
        // Sleep until the next thing to do, the child's exit, or the cancel check.
        let mut wake = now + CANCEL_POLL;
        if let Some(next) = watch
            .as_mut()
            .filter(|w| w.pending())
            .and_then(|w| w.look(pid, now))
        {
            wake = wake.min(next);
        }
        match stop {
            None => {
                if let Some(d) = deadline {
                    wake = wake.min(d);
                }
            }
            Some((_, kill_at)) if !killed => wake = wake.min(kill_at),
            Some(_) => {}
        }
        if let Some(next) = sampler.as_ref().and_then(Sampler::next_due) {
            wake = wake.min(next);
        }
        let timeout = wake.saturating_duration_since(now);
        let exited = match (pidfd.as_ref(), drain.as_mut()) {
            (Some(fd), Some(drain)) => drain.wait(Some(fd), timeout),
            (fd, _) => wait_exit(pid, fd, timeout, &mut |d| nap(&mut drain, d)),
        };
        if exited {
            break;
        }
    }

    record_exit(&mut outcome, pid, start, stop.map(|(reason, _)| reason));

    let kill_at = stop.map(|(_, k)| k);
    let finished = containment.finish(spec.grace, kill_at, later, &mut |d| nap(&mut drain, d));
    super::children::run_ended();
    outcome.stray_processes_killed = finished.strays;
    outcome.escaped_processes = finished.escaped;
    outcome.cgroup_memory_peak_bytes = finished.memory_peak;
    if outcome.cgroup_memory_peak_bytes.is_some() {
        outcome.cgroup_memory_source = Some("cgroup2 memory.peak".into());
    } else if let Some(m) = memcg {
        outcome.cgroup_memory_peak_bytes = m.memory().1;
        if outcome.cgroup_memory_peak_bytes.is_some() {
            outcome.cgroup_memory_source = Some("cgroup1 memory.max_usage_in_bytes".into());
        }
        measure.drop_memcg(m);
    }
    outcome.shared_memory_left = super::shm::left_since(&measure.shm_before);
    if let Some(e) = finished.error {
        outcome.error.get_or_insert(e);
    }
    // No process of the run is alive: what they wrote is in the pipes; copy the rest.
    if let Some(drain) = drain
        && let Err(e) = drain.finish()
    {
        outcome.error.get_or_insert(format!(
            "writing the run's output to {}: {e}",
            spec.stdout_path.parent().unwrap_or(&spec.stdout_path).display()
        ));
    }

    finish_measures(&mut outcome, sampler, watch);
    outcome
}

/// Reaps the run's leader `pid` and records in `outcome` when it ended (the run started at
/// `start`), how (exit code or signal, CPU times, peak RSS) and, with `stop`, why it was stopped.
fn record_exit(outcome: &mut RunOutcome, pid: i32, start: Instant, stop: Option<StopReason>) {
    let reaped = reap_leader(pid);
    super::children::leader_reaped(pid);
    outcome.ended = SystemTime::now();
    outcome.wall_seconds = start.elapsed().as_secs_f64();
    match reaped {
        Ok(Reaped { status, usage }) => {
            if libc::WIFEXITED(status) {
                outcome.exit_code = Some(libc::WEXITSTATUS(status));
            } else if libc::WIFSIGNALED(status) {
                outcome.signal = Some(libc::WTERMSIG(status));
            }
            let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
            outcome.user_seconds = Some(secs(usage.ru_utime));
            outcome.sys_seconds = Some(secs(usage.ru_stime));
            outcome.peak_rss_bytes = Some(usage.ru_maxrss.max(0) as u64 * 1024);
        }
        Err(e) => outcome.error = Some(format!("wait4({pid}) failed: {e}")),
    }
    outcome.termination = match stop {
        Some(StopReason::Timeout) => Termination::Timeout,
        Some(StopReason::Interrupted) => Termination::Interrupted,
        None if outcome.signal.is_some() => Termination::Signaled,
        None => Termination::Exited,
    };
}

/// Records in `outcome` what the memory sampler and the allocator's watch found (a sampler's
/// write error is the run's error unless it has one).
fn finish_measures(outcome: &mut RunOutcome, sampler: Option<Sampler>, watch: Option<MapsWatch>) {
    if let Some(s) = sampler {
        if let Some(e) = s.failed() {
            outcome.error.get_or_insert_with(|| e.to_string());
        }
        let summary = s.finish(outcome.wall_seconds);
        outcome.memory_samples = summary.samples;
        outcome.sampling = Some(summary);
    }
    outcome.allocator = watch.map(MapsWatch::finish);
}

/// Waits `d`, copying the run's output meanwhile when there is a drain.
fn nap(drain: &mut Option<super::drain::Drain>, d: Duration) {
    match drain.as_mut() {
        Some(drain) => {
            drain.wait(None, d);
        }
        None => std::thread::sleep(d),
    }
}

/// The first gap between two looks at a run's maps; it doubles up to [`MAPS_GAP_MAX`].
const MAPS_POLL: Duration = Duration::from_millis(1);
/// The longest gap between two looks at a run's maps while its allocator is not seen yet.
const MAPS_GAP_MAX: Duration = Duration::from_millis(200);

/// The allocator check of one run ([`RunSpec::allocator`]): looks at `/proc/<pid>/maps` until
/// the allocator is seen in effect or the run ends, never judging from one early look (the
/// process may not have mapped its libraries yet, or a program it execs later may).
pub(crate) struct MapsWatch {
    record: crate::allocator::Record,
    expected: Option<(std::path::PathBuf, u64)>,
    /// When to look next.
    next: Instant,
    gap: Duration,
    /// Looks that read maps.
    looks: u32,
    /// Whether any look saw the C library mapped (the dynamic loader had done its work).
    libc_seen: bool,
    done: bool,
}

impl MapsWatch {
    pub(crate) fn new(choice: &crate::allocator::Choice, now: Instant) -> MapsWatch {
        MapsWatch {
            record: crate::allocator::Record::unseen(choice),
            expected: crate::allocator::expectation(choice),
            next: now,
            gap: MAPS_POLL,
            looks: 0,
            libc_seen: false,
            done: false,
        }
    }

    fn pending(&self) -> bool {
        !self.done
    }

    /// Looks at `/proc/<pid>/maps` when a look is due; returns when to look next (`None`: the
    /// answer is in).
    fn look(&mut self, pid: i32, now: Instant) -> Option<Instant> {
        if !self.done && now >= self.next {
            let view = crate::allocator::look(pid, self.expected.as_ref()).ok();
            self.observe(view, now);
        }
        (!self.done).then_some(self.next)
    }

    /// Takes one look's view (`None`: maps could not be read). A preloaded allocator is done once
    /// seen; `glibc` once the C library is mapped (then no other allocator must be).
    pub(crate) fn observe(&mut self, view: Option<crate::allocator::MapsView>, now: Instant) {
        self.next = now + self.gap;
        self.gap = (self.gap * 2).min(MAPS_GAP_MAX);
        let Some(view) = view else { return };
        self.looks += 1;
        self.libc_seen |= view.libc;
        let preloaded = self.expected.is_some();
        if let Some(seen) = crate::allocator::judge(&view, preloaded) {
            self.record.seen_loaded = Some(seen);
            self.record.mapped = view.allocators;
            self.done = seen || !preloaded;
        }
    }

    /// The record once the run has ended: why the allocator was not shown in effect, if it was not.
    pub(crate) fn finish(mut self) -> crate::allocator::Record {
        if self.record.seen_loaded != Some(true) {
            let looks = self.looks;
            self.record.reason = Some(if looks == 0 {
                "the process ended before its maps could be read".to_string()
            } else if !self.libc_seen {
                format!(
                    "the process never mapped the C library in {looks} looks until it ended \
                     (a statically linked program, or one that ended before its loader finished): \
                     a preloaded allocator cannot take effect there"
                )
            } else if self.expected.is_some() {
                format!("the library was not in the process's maps in {looks} looks until it ended")
            } else {
                "another allocator library was mapped".to_string()
            });
        }
        self.record
    }
}

/// Reaps the exited leader `pid` with `wait4`, retrying on EINTR.
///
/// libc because rustix's `waitpid` does not return the rusage.
///
/// # Errors
/// The OS error of `wait4`.
fn reap_leader(pid: i32) -> io::Result<Reaped> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to local variables.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            return Ok(Reaped { status, usage });
        }
        let e = io::Error::last_os_error();
        if r < 0 && e.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return Err(e);
    }
}

/// Blocks until the child has exited (`true`) or `timeout` has passed (`false`); `idle` naps
/// (copying the run's output meanwhile) where there is no pidfd.
fn wait_exit(pid: i32, pidfd: Option<&OwnedFd>, timeout: Duration, idle: &mut dyn FnMut(Duration)) -> bool {
    match pidfd {
        Some(fd) => {
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(n) => n > 0,
                Err(rustix::io::Errno::INTR) => false, // the caller's loop re-evaluates
                // Should not happen; never spin on a broken pidfd.
                Err(_) => wait_exit(pid, None, timeout, idle),
            }
        }
        None => {
            // No pidfd (kernel < 5.3): check with waitid(WNOWAIT) and nap briefly.
            let until = Instant::now() + timeout;
            let mut nap = Duration::from_micros(100);
            loop {
                if exited_nowait(pid) {
                    return true;
                }
                let now = Instant::now();
                if now >= until {
                    return false;
                }
                idle(nap.min(until - now));
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    }
}

/// `true` when `pid` has exited and is waiting to be reaped (it is not reaped here:
/// `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`).
fn exited_nowait(pid: i32) -> bool {
    let Some(pid) = Pid::from_raw(pid) else {
        return false;
    };
    matches!(
        rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        ),
        Ok(Some(_))
    )
}

/// The CPUs the child may run on (`sched_getaffinity(pid)`, what `Cpus_allowed_list` of
/// `/proc/<pid>/status` shows), or `None` when it cannot be read.
fn read_cpus_allowed(pid: i32) -> Option<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(Some(Pid::from_raw(pid)?)).ok()?;
    Some(
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{Choice, MapsView};

    fn mimalloc() -> Choice {
        Choice {
            name: "mimalloc".into(),
            path: Some("/nonexistent/libmimalloc.so.2".into()),
            sha256: None,
        }
    }

    fn view(libc: bool, expected: bool) -> Option<MapsView> {
        Some(MapsView {
            libc,
            expected,
            allocators: if expected {
                vec!["/nonexistent/libmimalloc.so.2".into()]
            } else {
                Vec::new()
            },
        })
    }

    /// Issue 37 item 2: an early look that sees the C library but not yet the allocator does not
    /// decide; a later look in the same run that sees it does.
    #[test]
    fn an_early_look_without_the_allocator_does_not_decide() {
        let t = Instant::now();
        let mut w = MapsWatch::new(&mimalloc(), t);
        w.observe(view(true, false), t);
        assert!(w.pending(), "one look without it is not the answer");
        w.observe(None, t);
        w.observe(view(true, true), t);
        assert!(!w.pending());
        let rec = w.finish();
        assert_eq!(rec.seen_loaded, Some(true));
        assert_eq!(rec.reason, None);
    }

    /// A process that never maps the C library (statically linked) is not shown loaded, and the
    /// record says why; one that maps it but never the library says that instead.
    #[test]
    fn a_run_never_shown_loaded_says_why() {
        let t = Instant::now();
        let mut w = MapsWatch::new(&mimalloc(), t);
        w.observe(view(false, false), t);
        w.observe(view(false, false), t);
        let rec = w.finish();
        assert_eq!(rec.seen_loaded, None);
        assert!(rec.reason.unwrap().contains("statically linked"));
        let mut w = MapsWatch::new(&mimalloc(), t);
        w.observe(view(true, false), t);
        let rec = w.finish();
        assert_eq!(rec.seen_loaded, Some(false));
        assert!(
            rec.reason
                .unwrap()
                .contains("not in the process's maps in 1 looks")
        );
        let rec = MapsWatch::new(&mimalloc(), t).finish();
        assert!(
            rec.reason
                .unwrap()
                .contains("ended before its maps could be read")
        );
    }
}
