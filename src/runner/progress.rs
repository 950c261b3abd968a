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

/// Most failed runs listed at the end of `run`; the others are counted.
pub const LISTED_FAILURES: usize = 10;

/// Lines of stderr shown per failed run at the end of `run`.
pub const FAILURE_TAIL_LINES: usize = 5;

/// The runs of a session that are not ok: the first [`LISTED_FAILURES`] in plan order, and how
/// many more there are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failures {
    /// Failed runs with their reason and stderr tail, in plan order.
    pub listed: Vec<RunFailure>,
    /// Failed runs not in `listed`.
    pub unlisted: usize,
}

impl Failures {
    /// Adds one failure, keeping the [`LISTED_FAILURES`] with the lowest plan index.
    pub fn add(&mut self, failure: RunFailure) {
        let at = self.listed.partition_point(|f| f.index < failure.index);
        self.listed.insert(at, failure);
        if self.listed.len() > LISTED_FAILURES {
            self.listed.pop();
            self.unlisted += 1;
        }
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
            reason: "exit 1".into(),
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
    fn failures_keep_the_first_in_plan_order_and_count_the_rest() {
        let mut f = Failures::default();
        for i in (0..25).rev() {
            f.add(failure(i));
        }
        let listed: Vec<usize> = f.listed.iter().map(|f| f.index).collect();
        assert_eq!(listed, (0..LISTED_FAILURES).collect::<Vec<_>>());
        assert_eq!(f.unlisted, 25 - LISTED_FAILURES);
    }
}
