//! `hwr-exp report BUNDLE` and `hwr-exp compare A B` (docs/DESIGN.md 2, 5, 7).
//!
//! A report reads a bundle with [`crate::bundle::read::Bundle`], one run at a time, and shows:
//! - a run table (run-id, cell, repetition, termination, exit code, wall seconds, peak RSS, output
//!   check, and the one-line reason of a run that is not ok, from [`crate::bundle::reason`]) and a
//!   summary line (counts by outcome, runs not run, drift, dirty tree);
//! - for outputs in the retention schema: growth (final `loop` sample minus `baseline`) and
//!   after-close (`closed` minus `baseline`) of private, anonymous and RSS bytes per run, then per cell
//!   min / median / max across repetitions, then per size each mode's median growth minus the
//!   `reuse` control's. Runs that did not end `ok` (timeout, failed, invalid output) or whose output
//!   is unusable are listed with the reason and left out of the aggregates. No pass/fail threshold.
//! - `[report] metrics = { name = "/json/pointer" }` of the bundle's manifest.toml, per run and
//!   aggregated per cell.
//!
//! Formats: terminal tables (default; fitted to [`ReportOptions::width`], see [`render`]), Markdown,
//! CSV (one row per run), JSON, one self-contained HTML page ([`html`]); `--stderr` appends the
//! stderr tails of the runs that are not ok; `--plot FILE.svg` draws private bytes against
//! iterations (see [`plot`]).
//!
//! The files are layered, each importing only the layers below it, so that a report reads one
//! way, read -> fold -> model -> render:
//! - vocabulary: [`metrics`] (the metric table; a run's output is summarized by
//!   [`crate::bundle::output_summary`] into run.json `summary`),
//!   [`units`], [`parallel`];
//! - [`model`]: the data types of a report (runs, cells, values, estimates, contrasts);
//! - computations: [`aggregation`], [`correction`], [`estimates`], [`contrasts`], [`comparison`],
//!   [`plan_check`], and [`records`] (a run's CSV and JSON record);
//! - [`read`] reads one run into a [`model::RunSummary`], [`collection`] reads a bundle's runs
//!   with it and folds them into a [`Report`];
//! - renderers: [`section`] (table layout), [`verdicts`] (the answer sections), [`render`],
//!   [`plot`], [`html`], [`compare`].

pub mod aggregation;
pub mod collection;
pub mod compare;
pub mod comparison;
pub mod contrasts;
pub mod correction;
pub mod estimates;
pub mod html;
pub mod metrics;
pub mod model;
pub mod parallel;
pub mod plan_check;
pub mod plot;
pub mod read;
pub mod records;
pub mod render;
pub mod section;
pub mod units;
pub mod verdicts;

use std::path::PathBuf;

pub use collection::{ReportError, collect};
pub use compare::{CompareOptions, compare_to_string};
pub use model::Report;
pub use render::{Format, TextStyle};

/// What `hwr-exp report` is asked for. The default is a table of no bundle (`""`), no plot, one
/// line per row, no stderr.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReportOptions {
    /// The bundle folder (`results/<experiment>/<timestamp>-<hex>`).
    pub bundle: PathBuf,
    /// Output format.
    pub format: Format,
    /// Where to also write an SVG plot (see [`plot`]); `None` for no plot.
    pub plot: Option<PathBuf>,
    /// Widest line of terminal tables, in columns; `None` for one line per row (`--wide`).
    /// Markdown, CSV and JSON ignore it.
    pub width: Option<usize>,
    /// Append the last lines of stderr.log of each run that is not ok (table and md; JSON always
    /// carries them as `stderr-tail`; CSV refuses it).
    pub stderr: bool,
    /// `--control KEY=VALUE`: the control cell instead of the manifest's `[report] control`
    /// (empty: the manifest's).
    pub control: Vec<(String, String)>,
}

/// Renders the report of `opts.bundle` in `opts.format` to a string, writing the plot when asked.
/// The text is the whole of the command's stdout; nothing is printed here.
///
/// # Errors
/// As [`report_to_writer`].
pub fn report_to_string(opts: &ReportOptions) -> anyhow::Result<String> {
    let mut out = Vec::new();
    prepare(opts)?.write(&mut out)?;
    Ok(String::from_utf8(out)?)
}

/// Renders the report of `opts.bundle` in `opts.format` to `out` (CSV and JSON row by row as the
/// runs are read), writing the plot when asked.
///
/// # Errors
/// As [`prepare`] and [`Prepared::write`].
pub fn report_to_writer(opts: &ReportOptions, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    prepare(opts)?.write(out)
}

/// A report read and ready to write ([`prepare`]).
#[derive(Debug)]
pub struct Prepared {
    report: Report,
    opts: ReportOptions,
}

/// Reads the report of `opts.bundle` (one pass over its runs, see [`collection`]) and writes the
/// plot when asked; [`Prepared::write`] then writes the text.
///
/// # Errors
/// The bundle cannot be read (newer format, missing bundle.json or plan.json, truncated run.json:
/// the message names the file), the plot cannot be written, or `stderr` is asked of CSV.
pub fn prepare(opts: &ReportOptions) -> anyhow::Result<Prepared> {
    if opts.stderr && opts.format == Format::Csv {
        anyhow::bail!(
            "--stderr applies to table and md output (csv has the reason column; json carries stderr-tail)"
        );
    }
    if let Some(plot) = &opts.plot {
        refuse_inside(plot, &opts.bundle)?;
    }
    let spill = match opts.format {
        Format::Csv => Some(model::Spill::Csv),
        Format::Json => Some(model::Spill::Json),
        _ => None,
    };
    let report = collection::collect_with(
        &opts.bundle,
        opts.plot.is_some() || opts.format == Format::Html,
        spill,
        &opts.control,
    )?;
    if let Some(path) = &opts.plot {
        plot::write_svg(&report, path)?;
    }
    Ok(Prepared {
        report,
        opts: opts.clone(),
    })
}

/// Refuses a `--plot` file inside the bundle folder `bundle` (it would change the bundle after its
/// runs, or overwrite bundle.json; `verify` checks every file), before anything is read.
///
/// # Errors
/// The plot's folder is the bundle folder or inside it (both resolved, links followed); a path
/// that cannot be resolved is left to the reading and the writing to report.
fn refuse_inside(plot: &std::path::Path, bundle: &std::path::Path) -> anyhow::Result<()> {
    let folder = match plot.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if let (Ok(folder), Ok(bundle)) = (folder.canonicalize(), bundle.canonicalize())
        && folder.starts_with(&bundle)
    {
        anyhow::bail!(
            "--plot {}: inside the bundle {} that it reports; a bundle does not change after its runs (verify checks every file): write the plot outside it",
            plot.display(),
            bundle.display()
        );
    }
    Ok(())
}

impl Prepared {
    /// The report read.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Writes the report in its format to `out`. CSV rows and JSON `runs` are written as they are
    /// made; a bundle larger than [`model::RUN_ROWS`] has its runs read again for them.
    ///
    /// # Errors
    /// Writing to `out` fails, or a run of a large bundle can no longer be read.
    pub fn write(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
        let (report, opts) = (&self.report, &self.opts);
        let text = |style| {
            let mut text = render::report_text(report, style);
            if opts.stderr {
                text.push_str(&render::stderr_text(report, style));
            }
            text
        };
        match opts.format {
            Format::Table => out.write_all(text(TextStyle::Terminal(opts.width)).as_bytes())?,
            Format::Md => out.write_all(text(TextStyle::Markdown).as_bytes())?,
            Format::Csv => render::write_csv(report, out)?,
            Format::Json => render::write_json(report, out)?,
            Format::Html => out.write_all(html::report_page(report, &opts.bundle)?.as_bytes())?,
        }
        Ok(())
    }
}
