//! External memory sampling of a run (DESIGN 4: measurement never slows the run by more than
//! about 1%), appended as one [`MemorySample`] JSON line per sample to `memory.jsonl`.
//!
//! # What is read, and how often
//!
//! Every `sample-interval`, for every live process of the run (its cgroup's `cgroup.procs`, or
//! its tracked process tree):
//!
//! - `/proc/<pid>/status` (`VmRSS`, `RssAnon`, `RssFile`, `RssShmem`, `VmSwap`): counters, no
//!   page-table walk, no lock the process waits for. A sample made of these alone has
//!   `"source": "status"`.
//! - The run's memory cgroup, where it has one: `memory.current` and `memory.peak` (cgroup v2),
//!   else `memory.usage_in_bytes` and `memory.max_usage_in_bytes` of its v1 memory cgroup
//!   (`memcg.rs`).
//!
//! `/proc/<pid>/smaps_rollup` (PSS, private, anonymous) makes the kernel walk every page table of
//! the process while it holds the process's memory-map lock: the process's `mmap`/`munmap` wait
//! for it (about 50 ms at 4 GB resident). It is read, for every process of the run in the same
//! sample (`"source": "smaps_rollup"`), only when its predicted cost fits the budget: the
//! page-table walks of a run may take at most [`WALK_BUDGET`] (1%) of the run's time so far. The
//! cost is predicted per process from its resident pages and the cost per page measured at its
//! last walk (before its first: the largest recent cost per page of this runner's walks, or
//! [`PRIOR_NS_PER_PAGE`]). A first walk that costs more than predicted can overrun the budget
//! once; the next waits until the run's time has caught up with it. So a small process gets a walk at every
//! sample, a 4 GB one a walk every ten seconds or so, and one that grows fast none until the
//! budget allows.
//!
//! A walk reads `/proc/<pid>/smaps` instead (the same walk, about [`SMAPS_FACTOR`] times the
//! cost: one text block per mapping) when that fits the budget: its mappings, folded into rows
//! (heap, stack, anonymous, each file, each shared memory object), give the per-mapping
//! breakdown of `mappings.json` (the first and the last such walk of the run), and their sums
//! the sample's figures.
//!
//! # Which process
//!
//! A process whose main thread has exited while others run (`pthread_exit` in `main`) shows no
//! memory in `/proc/<pid>/status` or `smaps_rollup`; it is read through a live thread's
//! `/proc/<pid>/task/<tid>/` instead (every thread shares the process's memory). A zombie is left
//! out.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{LeaderFigures, MemorySample, SampleSource, SamplingSummary};
use crate::memory::{Mappings, Rollup, StatusCounters};

/// Share of the run's wall time its page-table walks (smaps_rollup and smaps reads) may take.
pub const WALK_BUDGET: f64 = 0.01;

/// Predicted cost of walking one resident 4 KiB page, before any walk was measured in this
/// runner (measured: 50-80 ns on an idle machine, up to 700 ns on a loaded one, where the
/// reading thread is also preempted while it walks; predicting high delays a first walk a little,
/// predicting low lets one walk overrun the budget).
pub const PRIOR_NS_PER_PAGE: f64 = 250.0;

/// The largest cost per page measured by the latest walks of this runner (any run), in
/// nanoseconds as f64 bits; the prediction for a process not walked yet. Each new measurement
/// replaces it when larger, and moves it a quarter of the way down when smaller.
static LEARNED_NS_PER_PAGE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn learned_ns_per_page() -> f64 {
    let v = f64::from_bits(LEARNED_NS_PER_PAGE.load(std::sync::atomic::Ordering::Relaxed));
    if v > 0.0 { v } else { PRIOR_NS_PER_PAGE }
}

fn learn_ns_per_page(measured: f64) {
    let old = learned_ns_per_page();
    let new = if measured >= old {
        measured
    } else {
        (old - (old - measured) / 4.0).max(PRIOR_NS_PER_PAGE / 5.0)
    };
    LEARNED_NS_PER_PAGE.store(new.to_bits(), std::sync::atomic::Ordering::Relaxed);
}

/// Fixed part of the predicted cost of one walk (opening and formatting the file).
const WALK_FIXED: Duration = Duration::from_micros(30);

/// A smaps read costs about this many times a smaps_rollup read (one text block per mapping).
const SMAPS_FACTOR: f64 = 1.5;

/// What the sampler knows of one process of the run.
#[derive(Debug, Default)]
struct Proc {
    /// The folder its files are read from: `/proc/<pid>`, or `/proc/<pid>/task/<tid>` when
    /// the main thread has exited.
    dir: Option<String>,
    /// Cost per resident page measured at its last walk, nanoseconds.
    ns_per_page: Option<f64>,
}

/// One breakdown of the run's processes' mappings, with when it was taken.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
struct Breakdown {
    /// Seconds since the run started.
    t_seconds: f64,
    /// Processes read.
    processes: u32,
    /// What reading them cost, seconds.
    cost_seconds: f64,
    /// The rows, summed over the processes.
    rows: Mappings,
}

/// mappings.json: the first and the last per-mapping breakdown of a run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
struct MappingsFile<'a> {
    format: u32,
    /// Where the rows come from and what they cover.
    source: &'static str,
    first: Option<&'a Breakdown>,
    last: Option<&'a Breakdown>,
}

/// Appends [`MemorySample`] lines to a file, one per interval, while the run has processes.
pub(super) struct Sampler {
    /// memory.jsonl, made at the first sample (a run too short for one leaves no empty file).
    out: Option<BufWriter<File>>,
    path: PathBuf,
    /// Why memory.jsonl could not be made or written.
    failed: Option<String>,
    mappings_path: Option<PathBuf>,
    interval: Duration,
    start: Instant,
    /// When the next sample is due.
    next: Instant,
    /// `false` once the leader is gone or a write failed: no more samples.
    live: bool,
    procs: HashMap<i32, Proc>,
    /// Page-table walk time spent so far.
    walked: Duration,
    first_map: Option<Breakdown>,
    last_map: Option<Breakdown>,
    summary: SamplingSummary,
    /// Time of the previous sample and of the previous walk sample.
    prev: Option<Instant>,
    prev_walk: Option<Instant>,
    gap_sum: f64,
    walk_gap_sum: f64,
    /// Why a walk was last skipped (predicted cost and budget), for the note.
    skipped: Option<(Duration, Duration)>,
}

impl Sampler {
    /// Schedules the first sample one `interval` after `start` (at least 1 ms): right after
    /// spawn the child is still exec'ing (a copy of the runner). `path` is created (truncated)
    /// at the first sample, so a run that ends before one has none; each sample of a
    /// page-table walk is written through at once (the lines between are buffered). The mapping
    /// breakdowns go to `mappings.json` beside `path`.
    pub(super) fn create(path: &Path, interval: Duration, start: Instant) -> Sampler {
        let requested = interval;
        let interval = interval.max(Duration::from_millis(1));
        Sampler {
            out: None,
            path: path.to_path_buf(),
            failed: None,
            mappings_path: path.parent().map(|d| d.join(MAPPINGS_FILE)),
            interval,
            start,
            next: start + interval,
            live: true,
            procs: HashMap::new(),
            walked: Duration::ZERO,
            first_map: None,
            last_map: None,
            summary: SamplingSummary {
                requested_interval_seconds: requested.as_secs_f64(),
                walk_budget: WALK_BUDGET,
                honoured: true,
                ..SamplingSummary::default()
            },
            prev: None,
            prev_walk: None,
            gap_sum: 0.0,
            walk_gap_sum: 0.0,
            skipped: None,
        }
    }

    /// Why memory.jsonl could not be made or written, if it could not.
    pub(super) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Appends `sample` as one line (making the file first); written through when `flush`.
    fn write(&mut self, sample: &MemorySample, flush: bool) -> io::Result<()> {
        if self.out.is_none() {
            self.out = Some(BufWriter::new(File::create(&self.path)?));
        }
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        serde_json::to_writer(&mut *out, sample)?;
        out.write_all(b"\n")?;
        if flush {
            out.flush()?;
        }
        Ok(())
    }

    /// When the next sample is due, or `None` once sampling has stopped.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.live.then_some(self.next)
    }

    /// Reads the status counters of `pid`, through a live thread when the main thread has
    /// exited; `None` for a zombie or a process that is gone.
    fn status(&mut self, pid: i32) -> Option<(StatusCounters, String)> {
        let p = self.procs.entry(pid).or_default();
        if let Some(dir) = &p.dir
            && let Ok(s) = StatusCounters::read(dir)
            && s.rss.is_some()
        {
            return Some((s, dir.clone()));
        }
        let main = format!("/proc/{pid}");
        let s = StatusCounters::read(&main).ok()?;
        if s.rss.is_some() {
            p.dir = Some(main.clone());
            return Some((s, main));
        }
        // The main thread has exited (or the process is a zombie): try its other threads.
        let tasks = std::fs::read_dir(format!("{main}/task")).ok()?;
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if tid == pid {
                continue;
            }
            let dir = format!("{main}/task/{tid}");
            if let Ok(s) = StatusCounters::read(&dir)
                && s.rss.is_some()
            {
                p.dir = Some(dir.clone());
                return Some((s, dir));
            }
        }
        None
    }

    /// Takes one sample of every live process of the run; turns itself off when none is left.
    /// `pids` are the run's live processes now, `leader` its leader's pid, `memory` reads the
    /// run's memory cgroup (current, peak).
    pub(super) fn sample(
        &mut self,
        pids: &[i32],
        leader: i32,
        memory: impl FnOnce() -> (Option<u64>, Option<u64>),
    ) {
        let now = Instant::now();
        self.next = now + self.interval;
        if !self.live {
            return;
        }
        // Cheap counters of every process.
        let mut read: Vec<(i32, StatusCounters, String)> = Vec::with_capacity(pids.len());
        for &pid in pids {
            if let Some((s, dir)) = self.status(pid) {
                read.push((pid, s, dir));
            }
        }
        self.procs.retain(|pid, _| pids.contains(pid));
        if read.is_empty() {
            self.live = false;
            return;
        }
        let t_seconds = now.duration_since(self.start).as_secs_f64();
        let mut tree = StatusCounters::default();
        for (_, s, _) in &read {
            tree.add(s);
        }

        let (rollups, took_breakdown) = self.walk(&read, now, t_seconds);
        let walked = rollups.is_some();

        let (current, peak) = memory();
        let leader_figures = leader_figures(&read, rollups.as_deref(), leader);
        if leader_figures.as_ref().is_some_and(|l| l.via_thread.is_some()) {
            self.summary.read_through_thread = true;
        }
        let (source, rollup) = match &rollups {
            Some(list) => {
                let mut sum = Rollup::default();
                for (_, r) in list {
                    sum.add(r);
                }
                (SampleSource::SmapsRollup, sum)
            }
            None => (
                SampleSource::Status,
                Rollup {
                    rss: tree.rss,
                    swap: tree.swap,
                    ..Rollup::default()
                },
            ),
        };
        let cost = now.elapsed();
        let sample = MemorySample {
            t_seconds,
            processes: read.len() as u32,
            source,
            rollup,
            rss_anon: tree.rss_anon,
            rss_file: tree.rss_file,
            rss_shmem: tree.rss_shmem,
            leader: leader_figures,
            breakdown: took_breakdown,
            cost_seconds: Some(cost.as_secs_f64()),
            cgroup_memory_current: current,
            cgroup_memory_peak: peak,
        };
        self.record(&sample, now, cost, walked);
    }

    /// The page-table walk of one sample over the processes `read`, when its predicted cost fits
    /// the budget: smaps (which also gives the per-mapping breakdown, kept as the first or last)
    /// where that fits, else smaps_rollup. Returns each walked process's figures (`None` when the
    /// walk was skipped or read nothing) and whether a breakdown was taken.
    fn walk(
        &mut self,
        read: &[(i32, StatusCounters, String)],
        now: Instant,
        t_seconds: f64,
    ) -> (Option<Vec<(i32, Rollup)>>, bool) {
        let allowed = self.budget_left(now);
        let predicted = self.predict(read);
        let smaps = self.mappings_path.is_some() && predicted.mul_f64(SMAPS_FACTOR) <= allowed;
        let mut rollups: Option<Vec<(i32, Rollup)>> = None;
        let mut took_breakdown = false;
        if smaps || predicted <= allowed {
            let mut got = Vec::with_capacity(read.len());
            let mut rows = Mappings::default();
            let mut walk_cost = Duration::ZERO;
            for (pid, s, dir) in read {
                let t0 = Instant::now();
                let r = if smaps {
                    Mappings::read_text(dir).map(|text| {
                        let cost = t0.elapsed();
                        let (m, r) = Mappings::parse_with_rollup(&text);
                        if r.rss.is_some() {
                            rows.add(&m);
                        }
                        (r, cost)
                    })
                } else {
                    Rollup::read(Path::new(&format!("{dir}/smaps_rollup")))
                        .map(|r| (r, t0.elapsed()))
                        .map_err(|e| io::Error::other(e.to_string()))
                };
                let Ok((r, cost)) = r else { continue };
                walk_cost += cost;
                self.summary.longest_walk_seconds = self.summary.longest_walk_seconds.max(cost.as_secs_f64());
                if r.rss.is_some() {
                    let mut pages = (s.rss.unwrap_or(0) / 4096).max(1) as f64;
                    if smaps {
                        pages *= SMAPS_FACTOR;
                    }
                    // Pages below 256 (1 MiB) say little about the cost per page.
                    let per_page = cost.as_nanos() as f64 / pages;
                    if pages >= 256.0 {
                        learn_ns_per_page(per_page);
                    }
                    if let Some(p) = self.procs.get_mut(pid) {
                        p.ns_per_page = Some(per_page);
                    }
                    got.push((*pid, r));
                }
            }
            self.walked += walk_cost;
            self.summary.walk_cost_seconds += walk_cost.as_secs_f64();
            if smaps && !got.is_empty() {
                let b = Breakdown {
                    t_seconds,
                    processes: got.len() as u32,
                    cost_seconds: walk_cost.as_secs_f64(),
                    rows,
                };
                if self.first_map.is_none() {
                    self.first_map = Some(b);
                } else {
                    self.last_map = Some(b);
                }
                self.summary.mapping_breakdowns += 1;
                took_breakdown = true;
            }
            if !got.is_empty() {
                rollups = Some(got);
            }
            self.skipped = None;
        } else {
            self.skipped = Some((predicted, allowed));
        }
        (rollups, took_breakdown)
    }

    /// Writes `sample` (taken at `now` at a cost of `cost`; `walked`: with a page-table walk) and
    /// counts it in the summary; a write that fails stops the sampling, naming the file.
    fn record(&mut self, sample: &MemorySample, now: Instant, cost: Duration, walked: bool) {
        if let Err(e) = self.write(sample, walked) {
            self.failed = Some(format!(
                "cannot write memory samples to {}: {e}",
                self.path.display()
            ));
            self.live = false;
            return;
        }
        let s = &mut self.summary;
        s.samples += 1;
        s.cost_seconds += cost.as_secs_f64();
        if let Some(prev) = self.prev {
            let gap = now.duration_since(prev).as_secs_f64();
            self.gap_sum += gap;
            s.longest_gap_seconds = Some(s.longest_gap_seconds.unwrap_or(0.0).max(gap));
        }
        self.prev = Some(now);
        if walked {
            s.walk_samples += 1;
            if let Some(prev) = self.prev_walk {
                self.walk_gap_sum += now.duration_since(prev).as_secs_f64();
            }
            self.prev_walk = Some(now);
        }
    }

    /// Walk time the budget allows now: [`WALK_BUDGET`] of the run's time so far, minus what was
    /// spent.
    fn budget_left(&self, now: Instant) -> Duration {
        now.duration_since(self.start)
            .mul_f64(WALK_BUDGET)
            .saturating_sub(self.walked)
    }

    /// Predicted cost of walking every process in `read`.
    fn predict(&self, read: &[(i32, StatusCounters, String)]) -> Duration {
        let known_max = self
            .procs
            .values()
            .filter_map(|p| p.ns_per_page)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        read.iter()
            .map(|(pid, s, _)| {
                let per_page = self
                    .procs
                    .get(pid)
                    .and_then(|p| p.ns_per_page)
                    .or(known_max)
                    .unwrap_or_else(learned_ns_per_page);
                let pages = (s.rss.unwrap_or(0) / 4096) as f64;
                WALK_FIXED + Duration::from_nanos((pages * per_page) as u64)
            })
            .sum()
    }

    /// Flushes the file, writes mappings.json (when a breakdown was taken) and returns the
    /// sampling summary for run.json. `wall` is the run's wall time.
    pub(super) fn finish(mut self, wall: f64) -> SamplingSummary {
        if let Some(out) = self.out.as_mut() {
            let _ = out.flush();
        }
        if let (Some(path), Some(first)) = (&self.mappings_path, &self.first_map) {
            let file = MappingsFile {
                format: 1,
                source: "/proc/<pid>/smaps of every live process of the run, summed by mapping",
                first: Some(first),
                last: self.last_map.as_ref().or(Some(first)),
            };
            // Never over a file of that name the run wrote itself (an artifact).
            if let Ok(f) = File::options().write(true).create_new(true).open(path) {
                let mut w = BufWriter::new(f);
                let _ = serde_json::to_writer(&mut w, &file).map(|_| w.write_all(b"\n"));
                let _ = w.flush();
            }
        }
        let s = &mut self.summary;
        if s.samples > 1 {
            s.achieved_interval_seconds = Some(self.gap_sum / f64::from(s.samples - 1));
        }
        if s.walk_samples > 1 {
            s.walk_interval_seconds = Some(self.walk_gap_sum / f64::from(s.walk_samples - 1));
        }
        if wall > 0.0 {
            s.walk_share = Some(s.walk_cost_seconds / wall);
        }
        let requested = s.requested_interval_seconds;
        let mut notes = Vec::new();
        if let Some(achieved) = s.achieved_interval_seconds
            && achieved > requested * 1.25 + 0.002
        {
            s.honoured = false;
            notes.push(format!(
                "samples came every {} on average, not every {} as requested (one sample took {} on average)",
                secs(achieved),
                secs(requested),
                secs(s.cost_seconds / f64::from(s.samples.max(1))),
            ));
        }
        if s.samples == 0 {
            s.honoured = false;
            notes.push(format!(
                "no memory sample: the run ended before the first sample was due ({} after the start), or no process of it could be read",
                secs(requested.max(0.001))
            ));
        } else if s.walk_samples == 0 {
            let why = match self.skipped {
                Some((p, a)) => format!(
                    ": a walk was predicted to take {}, {} of the run's time allowed {}",
                    secs(p.as_secs_f64()),
                    pct(WALK_BUDGET),
                    secs(a.as_secs_f64())
                ),
                None => String::new(),
            };
            notes.push(format!(
                "no smaps_rollup sample (PSS, private, anonymous){why}; every sample has the status counters only"
            ));
        } else if let Some(w) = s.walk_interval_seconds
            && w > requested * 1.5 + 0.002
        {
            notes.push(format!(
                "smaps_rollup (PSS, private, anonymous) was read every {} on average, not every {}: its cost is held to {} of the run's time; the other samples have the status counters only",
                secs(w),
                secs(requested),
                pct(WALK_BUDGET)
            ));
        }
        if !notes.is_empty() {
            s.note = Some(notes.join("; "));
        }
        self.summary
    }
}

/// Name of the per-mapping breakdown file in a run's folder.
pub const MAPPINGS_FILE: &str = "mappings.json";

fn secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.2} ms", s * 1000.0)
    }
}

fn pct(f: f64) -> String {
    format!("{}%", f * 100.0)
}

/// The leader's figures of one sample: its status counters from `read` (through a live thread
/// when its main thread has exited) and, where it was walked, its rollup from `rollups`.
fn leader_figures(
    read: &[(i32, StatusCounters, String)],
    rollups: Option<&[(i32, Rollup)]>,
    leader: i32,
) -> Option<LeaderFigures> {
    let leader_status = read.iter().find(|(p, _, _)| *p == leader);
    let leader_rollup = rollups.and_then(|r| r.iter().find(|(p, _)| *p == leader).map(|(_, r)| r));
    leader_status.map(|(_, s, dir)| LeaderFigures {
        pid: leader,
        via_thread: dir
            .contains("/task/")
            .then(|| dir.rsplit('/').next().and_then(|t| t.parse().ok()).unwrap_or(0)),
        status: s.clone(),
        pss: leader_rollup.and_then(|r| r.pss),
        pss_anon: leader_rollup.and_then(|r| r.pss_anon),
        private: leader_rollup.and_then(|r| r.private),
        anonymous: leader_rollup.and_then(|r| r.anonymous),
    })
}
