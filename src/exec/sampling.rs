//! External memory sampling of a run: smaps_rollup of every live process of the run's process
//! group, summed, appended as one [`MemorySample`] JSON line per interval to `memory.jsonl`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::MemorySample;
use super::group::group_members;
use crate::memory::Rollup;

/// Appends [`MemorySample`] lines to a file, one per interval, while the run's leader lives.
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

    /// Takes one sample of group `pid` (the leader's pid is the group id) if the leader is still
    /// there; turns itself off when it is gone. `start` is the run's start (for `t-seconds`).
    pub(super) fn sample(&mut self, pid: i32, start: Instant) {
        let now = Instant::now();
        self.next = now + self.interval;
        if !self.live {
            return;
        }
        match Rollup::read_pid(pid as u32) {
            // A zombie's smaps_rollup is empty: the process is gone.
            Ok(leader) if leader.rss.is_some() => {
                // The whole group, not only the leader: with `shell = "python3 ..."` the leader is
                // /bin/sh (dash does not exec the last command) and the program is its child.
                let mut rollup = leader;
                let mut processes = 1;
                for member in group_members(pid).into_iter().filter(|&m| m != pid) {
                    if let Ok(r) = Rollup::read_pid(member as u32)
                        && r.rss.is_some()
                    {
                        rollup.add(&r);
                        processes += 1;
                    }
                }
                let sample = MemorySample {
                    t_seconds: now.duration_since(start).as_secs_f64(),
                    processes,
                    rollup,
                };
                if serde_json::to_writer(&mut self.out, &sample).is_ok() && self.out.write_all(b"\n").is_ok()
                {
                    self.count += 1;
                } else {
                    self.live = false;
                }
            }
            _ => self.live = false,
        }
    }

    /// Flushes the file and returns the number of samples written.
    pub(super) fn finish(mut self) -> u32 {
        let _ = self.out.flush();
        self.count
    }
}
