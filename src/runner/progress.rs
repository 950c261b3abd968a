//! Progress output on stderr: a bar with ETA on a terminal (indicatif), one line per finished run
//! otherwise, nothing with `--quiet`. A run that is not ok is named with its one-line reason
//! ([`crate::bundle::reason`]); [`Collect`] keeps the first failures for the list `run` ends with.
//!
//! Progress never stops an experiment: a stderr that fails or was closed by its reader
//! (`hwr-exp run M 2>&1 | head -1`) is ignored ([`say`]), the runs go on and the bundle is written.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::bundle::reason::{RunFailure, shorten};
use crate::bundle::{Outcome, RunRecord};
use crate::plan::PlannedRun;

/// Writes one line to stderr, ignoring every write error (`EPIPE` from a closed pipe included).
pub fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Receives run events; implementations must be callable from several job threads.
pub trait Progress: Send + Sync {
    /// A run is about to start.
    fn run_started(&self, _run: &PlannedRun) {}
    /// A run finished and was recorded; `done` of `total` runs are finished. `failure` is the
    /// run's reason and stderr tail when it is not ok.
    fn run_finished(
        &self,
        run: &PlannedRun,
        record: &RunRecord,
        failure: Option<&RunFailure>,
        done: usize,
        total: usize,
    );
    /// Why the runs still to start wait (Slurm: pending tasks by reason, `2 pending
    /// (PartitionTimeLimit)`); `None` once nothing is pending. Called when the text changes.
    fn waiting(&self, _why: Option<&str>) {}
    /// The session ended.
    fn finish(&self) {}
}

/// No output (`--quiet`).
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn run_finished(&self, _: &PlannedRun, _: &RunRecord, _: Option<&RunFailure>, _: usize, _: usize) {}
}

/// `n` runs in words: `1 run`, `0 runs`, `8 runs`.
pub fn runs(n: usize) -> String {
    if n == 1 {
        "1 run".to_string()
    } else {
        format!("{n} runs")
    }
}

/// Most reasons listed at the end of `run` (each with its runs counted); the runs of other
/// reasons are counted.
pub const LISTED_FAILURES: usize = 10;

/// Lines of stderr shown per listed reason at the end of `run` (of its first run).
pub const FAILURE_TAIL_LINES: usize = 5;

/// Run ids named per reason at the end of `run`; the others are counted.
pub const NAMED_RUNS: usize = 3;

/// Most distinct reasons a session keeps apart; the runs of further reasons are only counted
/// ([`Failures::unlisted`]), so memory stays bounded whatever fails.
const KEPT_REASONS: usize = 1000;

/// The runs of one session that are not ok for the same reason (outcome and one-line reason
/// alike): the first of them (lowest plan index, with its stderr tail), how many there are, and
/// the ids of the first [`NAMED_RUNS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureGroup {
    /// The run with the lowest plan index of the group.
    pub first: RunFailure,
    /// Runs in the group.
    pub count: usize,
    /// (plan index, run id) of the group's runs with the lowest plan indices, ascending; at most
    /// [`NAMED_RUNS`].
    pub runs: Vec<(usize, String)>,
}

impl FailureGroup {
    /// The group's run ids as a phrase: `000-a-r1, 001-a-r2 and 10 more`.
    pub fn named_runs(&self) -> String {
        let ids: Vec<&str> = self.runs.iter().map(|(_, id)| id.as_str()).collect();
        let more = self.count.saturating_sub(ids.len());
        if more == 0 {
            ids.join(", ")
        } else {
            format!("{} and {more} more", ids.join(", "))
        }
    }
}

/// The runs of a session that are not ok, grouped by reason: twelve runs failing alike are one
/// reason with a count, not twelve stderr tails.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failures {
    groups: Vec<FailureGroup>,
    by_reason: std::collections::HashMap<(Outcome, String), usize>,
    /// Runs not ok whose reason came after `KEPT_REASONS` others: counted only.
    pub unlisted: usize,
}

impl Failures {
    /// Adds one failure to the group of its reason.
    pub fn add(&mut self, failure: RunFailure) {
        let key = (failure.outcome, failure.reason.clone());
        let group = match self.by_reason.get(&key) {
            Some(&g) => &mut self.groups[g],
            None if self.groups.len() >= KEPT_REASONS => {
                self.unlisted += 1;
                return;
            }
            None => {
                self.by_reason.insert(key, self.groups.len());
                self.groups.push(FailureGroup {
                    runs: vec![(failure.index, failure.run_id.clone())],
                    first: failure,
                    count: 1,
                });
                return;
            }
        };
        group.count += 1;
        let at = group.runs.partition_point(|(i, _)| *i < failure.index);
        if at < NAMED_RUNS {
            group.runs.insert(at, (failure.index, failure.run_id.clone()));
            group.runs.truncate(NAMED_RUNS);
        }
        if failure.index < group.first.index {
            group.first = failure;
        }
    }

    /// Whether no run failed.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.unlisted == 0
    }

    /// Runs not ok in all.
    pub fn total(&self) -> usize {
        self.groups.iter().map(|g| g.count).sum::<usize>() + self.unlisted
    }

    /// The groups in plan order of their first run.
    pub fn groups(&self) -> Vec<&FailureGroup> {
        let mut groups: Vec<&FailureGroup> = self.groups.iter().collect();
        groups.sort_by_key(|g| g.first.index);
        groups
    }
}

/// Forwards every event to `inner` and keeps the session's [`Failures`].
pub struct Collect {
    /// No terminal output: [`Collect::start`] then makes [`Quiet`].
    quiet: bool,
    /// Set by [`Collect::new`] or [`Collect::start`]; events before go nowhere.
    inner: std::sync::OnceLock<Box<dyn Progress>>,
    failures: Mutex<Failures>,
}

impl Collect {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Progress>) -> Collect {
        let collect = Collect::deferred(false);
        let _ = collect.inner.set(inner);
        collect
    }

    /// A display made by [`Collect::start`], once the number of runs is known and the lines
    /// before it (`writing N runs into ...`) are out: a progress bar draws at once.
    pub fn deferred(quiet: bool) -> Collect {
        Collect {
            quiet,
            inner: std::sync::OnceLock::new(),
            failures: Mutex::new(Failures::default()),
        }
    }

    /// Starts the display for `total` runs ([`for_terminal`]), unless it was started already.
    pub fn start(&self, total: usize) {
        self.inner.get_or_init(|| for_terminal(self.quiet, total));
    }

    /// The failures seen so far.
    pub fn into_failures(self) -> Failures {
        self.failures.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Progress for Collect {
    fn run_started(&self, run: &PlannedRun) {
        if let Some(inner) = self.inner.get() {
            inner.run_started(run);
        }
    }
    fn run_finished(
        &self,
        run: &PlannedRun,
        record: &RunRecord,
        failure: Option<&RunFailure>,
        done: usize,
        total: usize,
    ) {
        if let Some(f) = failure
            && let Ok(mut failures) = self.failures.lock()
        {
            failures.add(f.clone());
        }
        if let Some(inner) = self.inner.get() {
            inner.run_finished(run, record, failure, done, total);
        }
    }
    fn waiting(&self, why: Option<&str>) {
        if let Some(inner) = self.inner.get() {
            inner.waiting(why);
        }
    }
    fn finish(&self) {
        if let Some(inner) = self.inner.get() {
            inner.finish();
        }
    }
}

/// One line per finished run on stderr, for logs and pipes.
#[derive(Debug, Default)]
pub struct Lines {
    lock: Mutex<()>,
}

/// One line describing a finished run: `[ 3/8] 002-reuse-16-r1  ok  exit 0  0.52s`; a run that is
/// not ok ends with its reason instead of the exit code:
/// `[ 4/8] 003-reuse-64-r1  failed  0.05s  exit 1: ModuleNotFoundError: No module named 'numpy'`.
/// With `width`, a long reason is [`shorten`]ed so the line fits that many columns (its first
/// clause and its end kept).
pub fn describe(
    record: &RunRecord,
    failure: Option<&RunFailure>,
    done: usize,
    total: usize,
    width: Option<usize>,
) -> String {
    let digits = total.to_string().len();
    let outcome = record.outcome.as_str();
    let head = format!("[{done:>digits$}/{total}] {}  {outcome}", record.run_id);
    if let Some(f) = failure {
        let line = format!("{head}  {:.2}s  ", record.wall_seconds);
        let reason = match width {
            Some(w) => shorten(&f.reason, w.saturating_sub(line.chars().count()).max(40)),
            None => f.reason.clone(),
        };
        return format!("{line}{reason}");
    }
    let how = match (record.exit_code, record.signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => record.termination.as_str().to_string(),
    };
    format!("{head}  {how}  {:.2}s", record.wall_seconds)
}

impl Progress for Lines {
    fn run_finished(
        &self,
        _: &PlannedRun,
        record: &RunRecord,
        failure: Option<&RunFailure>,
        done: usize,
        total: usize,
    ) {
        let _guard = self.lock.lock();
        say(format_args!(
            "{}",
            describe(record, failure, done, total, columns())
        ));
    }
    fn waiting(&self, why: Option<&str>) {
        if let Some(why) = why {
            let _guard = self.lock.lock();
            say(format_args!("waiting: {why}"));
        }
    }
}

/// `COLUMNS` when it is a positive number (as clap and most tools read it).
fn columns() -> Option<usize> {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
}

/// The width of the terminal on stderr (TIOCGWINSZ).
fn stderr_width() -> Option<usize> {
    terminal_size::terminal_size_of(std::io::stderr()).map(|(terminal_size::Width(w), _)| usize::from(w))
}

/// An indicatif bar with ETA; runs that do not count as `ok` are printed above the bar.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar for `total` runs.
    pub fn new(total: usize) -> Bar {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        crate::signal::terminal_line(true);
        Bar { bar }
    }
}

impl Progress for Bar {
    fn run_started(&self, run: &PlannedRun) {
        self.bar.set_message(run.run_id.clone());
    }
    fn waiting(&self, why: Option<&str>) {
        match why {
            Some(why) => {
                self.bar.println(format!("waiting: {why}"));
                self.bar.set_message(format!("waiting: {why}"));
            }
            None => self.bar.set_message(""),
        }
    }
    fn run_finished(
        &self,
        _: &PlannedRun,
        record: &RunRecord,
        failure: Option<&RunFailure>,
        done: usize,
        total: usize,
    ) {
        if record.outcome != Outcome::Ok {
            let width = columns().or_else(stderr_width);
            self.bar.println(describe(record, failure, done, total, width));
        }
        self.bar.set_position(done as u64);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
        crate::signal::terminal_line(false);
    }
}

/// The progress output for this terminal: [`Quiet`], [`Bar`] when stderr is a terminal, else [`Lines`].
pub fn for_terminal(quiet: bool, total: usize) -> Box<dyn Progress> {
    if quiet {
        Box::new(Quiet)
    } else if std::io::stderr().is_terminal() {
        Box::new(Bar::new(total))
    } else {
        Box::new(Lines::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(index: usize) -> RunFailure {
        RunFailure {
            run_id: format!("{index:03}-x-r1"),
            index,
            outcome: Outcome::Failed,
            reason: if index.is_multiple_of(5) {
                "exit 2".into()
            } else {
                "exit 1".into()
            },
            stderr_tail: Vec::new(),
        }
    }

    #[test]
    fn one_run_is_singular() {
        assert_eq!(runs(1), "1 run");
        assert_eq!(runs(0), "0 runs");
        assert_eq!(runs(8), "8 runs");
    }

    #[test]
    fn failures_are_grouped_by_reason_in_plan_order() {
        let mut f = Failures::default();
        for i in (0..25).rev() {
            f.add(failure(i));
        }
        let groups = f.groups();
        assert_eq!(groups.len(), 2);
        assert_eq!((groups[0].first.index, groups[0].count), (0, 5));
        assert_eq!(groups[0].first.reason, "exit 2");
        assert_eq!(groups[0].named_runs(), "000-x-r1, 005-x-r1, 010-x-r1 and 2 more");
        assert_eq!((groups[1].first.index, groups[1].count), (1, 20));
        assert_eq!(f.total(), 25);
    }

    #[test]
    fn distinct_reasons_beyond_the_kept_ones_are_counted() {
        let mut f = Failures::default();
        for i in 0..KEPT_REASONS + 7 {
            f.add(RunFailure {
                reason: format!("exit {i}"),
                ..failure(i)
            });
        }
        assert_eq!(f.groups().len(), KEPT_REASONS);
        assert_eq!(f.unlisted, 7);
        assert_eq!(f.total(), KEPT_REASONS + 7);
    }
}
