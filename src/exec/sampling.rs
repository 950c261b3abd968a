//! External memory sampling of a run: smaps_rollup of every live process of the run (its cgroup's
//! `cgroup.procs`, or its tracked process tree), summed, with the cgroup's `memory.current` and
//! `memory.peak` where it has the memory controller, appended as one [`MemorySample`] JSON line
//! per interval to `memory.jsonl`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::MemorySample;
use super::containment::RunContainment;
use crate::memory::Rollup;

/// Appends [`MemorySample`] lines to a file, one per interval, while the run has processes.
pub(super) struct Sampler {
    out: BufWriter<File>,
    interval: Duration,
    /// When the next sample is due.
    next: Instant,
    /// Samples written so far.
    count: u32,
    /// `false` once the leader is gone or a write failed: no more samples.
    live: bool,
}

impl Sampler {
    /// Creates (truncates) `path` and schedules the first sample one `interval` after `start`
    /// (at least 1 ms): right after spawn the child is still exec'ing (a copy of the runner),
    /// and reading it costs more than a short run.
    ///
    /// # Errors
    /// The error of creating `path`.
    pub(super) fn create(path: &Path, interval: Duration, start: Instant) -> io::Result<Sampler> {
        let interval = interval.max(Duration::from_millis(1));
        Ok(Sampler {
            out: BufWriter::new(File::create(path)?),
            interval,
            next: start + interval,
            count: 0,
            live: true,
        })
    }

    /// When the next sample is due, or `None` once sampling has stopped.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.live.then_some(self.next)
    }

    /// Takes one sample of every live process of the run; turns itself off when none is left.
    /// `start` is the run's start (for `t-seconds`).
    pub(super) fn sample(&mut self, run: &mut RunContainment, start: Instant) {
        let now = Instant::now();
        self.next = now + self.interval;
        if !self.live {
            return;
        }
        let mut rollup = Rollup::default();
        let mut processes = 0;
        for pid in run.members() {
            // A process that exited meanwhile (or a zombie, whose smaps_rollup is empty) is left out.
            if let Ok(r) = Rollup::read_pid(pid as u32)
                && r.rss.is_some()
            {
                rollup.add(&r);
                processes += 1;
            }
        }
        if processes == 0 {
            self.live = false;
            return;
        }
        let (current, peak) = run.memory();
        let sample = MemorySample {
            t_seconds: now.duration_since(start).as_secs_f64(),
            processes,
            rollup,
            cgroup_memory_current: current,
            cgroup_memory_peak: peak,
        };
        if serde_json::to_writer(&mut self.out, &sample).is_ok() && self.out.write_all(b"\n").is_ok() {
            self.count += 1;
        } else {
            self.live = false;
        }
    }

    /// Flushes the file and returns the number of samples written.
    pub(super) fn finish(mut self) -> u32 {
        let _ = self.out.flush();
        self.count
    }
}
