//! Progress output on stderr: a bar with ETA on a terminal (indicatif), one line per finished run
//! otherwise, nothing with `--quiet`.
//!
//! Progress never stops an experiment: a stderr that fails or was closed by its reader
//! (`hwr-exp run M 2>&1 | head -1`) is ignored ([`say`]), the runs go on and the bundle is written.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::bundle::{Outcome, RunRecord};
use crate::plan::PlannedRun;

/// Writes one line to stderr, ignoring every write error (`EPIPE` from a closed pipe included).
pub fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Receives run events; implementations must be callable from several job threads.
pub trait Progress: Sync {
    /// A run is about to start.
    fn run_started(&self, _run: &PlannedRun) {}
    /// A run finished and was recorded; `done` of `total` runs are finished.
    fn run_finished(&self, run: &PlannedRun, record: &RunRecord, done: usize, total: usize);
    /// The session ended.
    fn finish(&self) {}
}

/// No output (`--quiet`).
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn run_finished(&self, _: &PlannedRun, _: &RunRecord, _: usize, _: usize) {}
}

/// One line per finished run on stderr, for logs and pipes.
#[derive(Debug, Default)]
pub struct Lines {
    lock: Mutex<()>,
}

/// One line describing a finished run: `[ 3/8] 002-reuse-16-r1  ok  exit 0  0.52s`.
pub fn describe(record: &RunRecord, done: usize, total: usize) -> String {
    let width = total.to_string().len();
    let how = match (record.exit_code, record.signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => serde_json::to_value(record.termination)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    };
    let outcome = serde_json::to_value(record.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut line = format!(
        "[{done:>width$}/{total}] {}  {outcome}  {how}  {:.2}s",
        record.run_id, record.wall_seconds
    );
    if let Some(reason) = record.output_check_reason.as_ref().or(record.error.as_ref()) {
        line.push_str(&format!("  ({reason})"));
    }
    line
}

impl Progress for Lines {
    fn run_finished(&self, _: &PlannedRun, record: &RunRecord, done: usize, total: usize) {
        let _guard = self.lock.lock();
        say(format_args!("{}", describe(record, done, total)));
    }
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
    fn run_finished(&self, _: &PlannedRun, record: &RunRecord, done: usize, total: usize) {
        if record.outcome != Outcome::Ok {
            self.bar.println(describe(record, done, total));
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
