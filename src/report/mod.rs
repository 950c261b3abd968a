//! `hwr-exp report BUNDLE` and `hwr-exp compare A B` (issue 4; DESIGN 2, 5, 7).
//!
//! A report reads a bundle with [`crate::bundle::read::Bundle`], one run at a time, and shows:
//! - a run table (run-id, cell, repetition, termination, exit code, wall seconds, peak RSS, output
//!   check) and a summary line (counts by outcome, runs not run, drift, dirty tree);
//! - for outputs in the retention schema: growth (final `loop` sample minus `baseline`) and
//!   after-close (`closed` minus `baseline`) of private, anonymous and RSS bytes per run, then per cell
//!   min / median / max across repetitions, then per size each mode's median growth minus the
//!   `reuse` control's. Runs that did not end `ok` (timeout, failed, invalid output) or whose output
//!   is unusable are listed with the reason and left out of the aggregates. No pass/fail threshold.
//! - `[report] metrics = { name = "/json/pointer" }` of the bundle's manifest.toml, per run and
//!   aggregated per cell.
//!
//! Formats: terminal tables (default), Markdown, CSV (one row per run), JSON, one self-contained
//! HTML page ([`html`]); `--plot FILE.svg` draws private bytes against iterations (see [`plot`]).

pub mod compare;
pub mod html;
pub mod plot;
pub mod render;
pub mod retention;
pub mod summary;

use std::io::Write;
use std::path::PathBuf;

pub use compare::{CompareArgs, compare_command};
pub use render::Format;
pub use summary::{Report, ReportError, collect};

/// `hwr-exp report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// The bundle folder (`results/<experiment>/<timestamp>-<hex>`).
    pub bundle: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write an SVG plot: private bytes against loop iterations per run, one panel per size,
    /// plus the external memory.jsonl samples over time where present.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// Renders the report of `args.bundle` in `args.format` to a string, writing the plot when asked.
///
/// # Errors
/// The bundle cannot be read (the message names the file), or the plot cannot be written.
pub fn report_to_string(args: &ReportArgs) -> anyhow::Result<String> {
    let report = collect(&args.bundle, args.plot.is_some() || args.format == Format::Html)?;
    if let Some(path) = &args.plot {
        plot::write_svg(&report, path)?;
    }
    Ok(match args.format {
        Format::Table => render::report_text(&report, false),
        Format::Md => render::report_text(&report, true),
        Format::Csv => render::report_csv(&report)?,
        Format::Json => render::report_json(&report)?,
        Format::Html => html::report_page(&report, &args.bundle)?,
    })
}

/// `hwr-exp report BUNDLE [--format F] [--plot FILE.svg]`: prints the report on stdout.
///
/// Returns [`crate::exit_codes::SUCCESS`] once the report is printed, whatever the runs' outcomes
/// (the report describes failures, it does not fail on them).
///
/// # Errors
/// An unreadable bundle (newer format, missing bundle.json or plan.json, truncated run.json: the
/// message names the file) or an unwritable plot; `main` prints the error and exits
/// [`crate::exit_codes::USAGE`].
pub fn report_command(args: &ReportArgs) -> anyhow::Result<i32> {
    print(&report_to_string(args)?)
}

/// Writes `text` to stdout and flushes it; returns [`crate::exit_codes::SUCCESS`].
///
/// # Errors
/// Write errors on stdout.
pub(crate) fn print(text: &str) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(crate::exit_codes::SUCCESS)
}
