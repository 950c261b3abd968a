//! Rendering a [`Report`] as terminal tables ([`crate::table`]), Markdown, CSV (one row per run) or
//! JSON.
//!
//! Terminal tables fit a width when one is given ([`TextStyle::Terminal`]): wide tables are split
//! into parts that repeat the row's key columns, headers break over lines, and titles and notes
//! wrap; with no width (`--wide`) every table is one line per row. Markdown, CSV and JSON always
//! keep every column on one line.

use super::metrics::{Metric, Unit};
use super::model::{Report, RunSummary, fmt_num};
use crate::bundle::Outcome;

/// Output format of `report` and `compare` (`html`: [`super::html`]); shared with `--format`.
pub use crate::choices::ReportFormat as Format;

/// How [`render_sections`] writes text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStyle {
    /// Terminal tables. `Some(width)`: every line within `width` columns where the words allow
    /// (tables split and headers broken, text wrapped); `None`: one line per row (`--wide`).
    Terminal(Option<usize>),
    /// Markdown tables, every column, one line per row.
    Markdown,
}

impl TextStyle {
    fn is_md(self) -> bool {
        self == TextStyle::Markdown
    }

    /// The line break after a preamble line or note.
    fn line_end(self) -> &'static str {
        if self.is_md() { "  \n" } else { "\n" }
    }

    /// `text` as lines within the terminal width (continuation lines indented by two spaces);
    /// words longer than the width are kept whole. Unchanged for Markdown and `--wide`.
    fn wrap(self, text: &str) -> String {
        match self {
            TextStyle::Terminal(Some(width)) => {
                let options = textwrap::Options::new(width.max(10))
                    .subsequent_indent("  ")
                    .break_words(false)
                    .word_splitter(textwrap::WordSplitter::NoHyphenation);
                textwrap::fill(text, options)
            }
            _ => text.to_owned(),
        }
    }
}

/// A titled table: header, rows, and which columns are numeric (right-aligned).
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// Title printed above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Right-align these columns.
    pub numeric: Vec<bool>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
    /// Leading columns that name a row (run-id, cell), repeated in each part of a terminal table
    /// split to fit the width. [`Section::new`] makes it 1.
    pub key_columns: usize,
}

impl Section {
    /// A section with columns given as (name, numeric).
    pub fn new(title: impl Into<String>, columns: &[(&str, bool)]) -> Section {
        Section {
            title: title.into(),
            header: columns.iter().map(|c| c.0.to_string()).collect(),
            numeric: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
            key_columns: 1,
        }
    }
}

/// Renders sections in `style` after `preamble` lines.
pub fn render_sections(preamble: &[String], sections: Vec<Section>, style: TextStyle) -> String {
    let mut out = String::new();
    for line in preamble {
        out.push_str(&style.wrap(line));
        out.push_str(style.line_end());
    }
    for s in sections {
        render_section(&mut out, s, style);
    }
    out
}

/// Appends one section to `out`; the section's rows are moved into the table, not copied.
pub fn render_section(out: &mut String, s: Section, style: TextStyle) {
    out.push('\n');
    let notes = s.notes.clone();
    match style {
        TextStyle::Markdown => {
            out.push_str(&format!("### {}\n\n", s.title));
            out.push_str(&markdown_table(&s));
        }
        TextStyle::Terminal(width) => {
            out.push_str(&format!("{}\n", style.wrap(&s.title)));
            if !s.rows.is_empty() {
                out.push_str(&terminal_table(s, width));
                out.push('\n');
            }
        }
    }
    for n in &notes {
        out.push_str(&style.wrap(n));
        out.push_str(style.line_end());
    }
}

fn terminal_table(s: Section, width: Option<usize>) -> String {
    let fit = width.map(|max_width| crate::table::Fit {
        max_width,
        key_columns: s.key_columns,
    });
    crate::table::render_fit(crate::table::Style::Boxed, s.header, s.rows, &s.numeric, fit)
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

fn markdown_table(s: &Section) -> String {
    if s.rows.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let head: Vec<String> = s.header.iter().map(|h| md_escape(h)).collect();
    out.push_str(&format!("| {} |\n", head.join(" | ")));
    let align: Vec<&str> = s
        .numeric
        .iter()
        .map(|n| if *n { "---:" } else { "---" })
        .collect();
    out.push_str(&format!("|{}|\n", align.join("|")));
    for row in &s.rows {
        let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out.push('\n');
    out
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn signed_f(v: Option<f64>) -> String {
    match v {
        Some(x) if x > 0.0 => format!("+{}", fmt_num(x)),
        Some(x) => fmt_num(x),
        None => "-".into(),
    }
}

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// The dirty tree or drift of `r` as shown: `not recorded` when the manifest was in no git
/// repository, else yes / no / unknown.
pub(super) fn provenance_yes_no(r: &Report, b: Option<bool>) -> &'static str {
    if r.provenance_recorded {
        yes_no(b)
    } else {
        "not recorded"
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok",
        Outcome::Failed => "failed",
        Outcome::Timeout => "timeout",
        Outcome::InvalidOutput => "invalid-output",
        Outcome::SpawnFailed => "spawn-failed",
        Outcome::Interrupted => "interrupted",
        Outcome::Lost => "lost",
    }
}

/// The summary line: counts by outcome, not-run runs, drift and dirty tree.
pub fn summary_line(r: &Report) -> String {
    let finished: usize = r.counts.values().sum();
    let counts: Vec<String> = r
        .counts
        .iter()
        .map(|(o, n)| format!("{n} {}", outcome_name(*o)))
        .collect();
    let redone = r.runs.iter().filter(|run| run.attempts > 1).count();
    let redone = if redone == 0 {
        String::new()
    } else {
        let earlier: u32 = r.runs.iter().map(|run| run.attempts.saturating_sub(1)).sum();
        format!("; {redone} redone by resume ({earlier} earlier attempts kept, not reported)")
    };
    format!(
        "summary: {} planned, {finished} finished ({}), {} not run{redone}; drift: {}; dirty tree: {}",
        r.planned_runs,
        if counts.is_empty() {
            "none".to_string()
        } else {
            counts.join(", ")
        },
        r.not_run,
        provenance_yes_no(r, r.drift),
        provenance_yes_no(r, r.dirty),
    )
}

fn preamble(r: &Report) -> Vec<String> {
    vec![
        format!(
            "bundle: {} (experiment {}, status {}, hwr-exp {})",
            r.bundle,
            r.experiment,
            r.status.as_str(),
            r.hwr_exp_version
        ),
        format!("revision: {}", r.revision.as_deref().unwrap_or("unknown")),
        summary_line(r),
    ]
}

fn run_table(r: &Report) -> Section {
    let mut s = Section::new(
        "Runs",
        &[
            ("run-id", false),
            ("cell", false),
            ("rep", true),
            ("termination", false),
            ("exit", true),
            ("wall s", true),
            ("peak RSS (B)", true),
            ("output", false),
            ("reason", false),
        ],
    );
    for run in &r.runs {
        s.rows.push(vec![
            run.run_id.clone(),
            run.cell_label.clone(),
            run.repetition.to_string(),
            run.termination_text(),
            opt(run.exit_code),
            run.wall_seconds.map_or_else(|| "-".into(), |w| format!("{w:.3}")),
            opt(run.peak_rss_bytes),
            run.output_text(),
            run.reason_text().to_owned(),
        ]);
    }
    if let Some(note) = allocator_note(r) {
        s.notes.push(note);
    }
    s
}

/// The note under the runs table naming the runs whose `[isolation] allocator` was not seen
/// loaded (left out of the aggregates), or was not checked before the process ended.
pub(crate) fn allocator_note(r: &Report) -> Option<String> {
    let not_loaded: Vec<String> = r
        .runs
        .iter()
        .filter(|run| {
            run.allocator
                .as_ref()
                .is_some_and(|a| a.seen_loaded == Some(false))
        })
        .map(|run| format!("{} ({})", run.run_id, run.excluded.as_deref().unwrap_or("")))
        .collect();
    let unknown: Vec<&str> = r
        .runs
        .iter()
        .filter(|run| run.finished && run.allocator.as_ref().is_some_and(|a| a.seen_loaded.is_none()))
        .map(|run| run.run_id.as_str())
        .collect();
    let mut parts = Vec::new();
    if !not_loaded.is_empty() {
        parts.push(format!(
            "warning: allocator not seen loaded, left out of the aggregates: {}",
            not_loaded.join(", ")
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!(
            "allocator not checked (the process ended before its libraries were mapped): {}",
            unknown.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn retention_run_table(r: &Report) -> Section {
    let mut cols: Vec<(&str, bool)> = vec![("run-id", false), ("loop it", true)];
    cols.extend(Metric::ALL.iter().map(|m| (m.def().label, true)));
    cols.extend([("last tensor alive", false), ("aggregated", false)]);
    let mut s = Section::new(
        "Retention per run (growth = final loop - baseline; after-close = closed - baseline; bytes)",
        &cols,
    );
    for run in &r.runs {
        let agg = match &run.excluded {
            None => "yes".to_string(),
            Some(reason) => format!("no: {reason}"),
        };
        let Some(ret) = &run.retention else {
            if run.excluded.is_some() {
                let mut row = vec![run.run_id.clone()];
                row.extend(std::iter::repeat_n("-".to_string(), cols.len() - 2));
                row.push(agg);
                s.rows.push(row);
            }
            continue;
        };
        let mut row = vec![run.run_id.clone(), ret.loop_iterations.to_string()];
        row.extend(Metric::ALL.iter().map(|m| match m.def().unit {
            Unit::BytesPer1000 => signed_f(m.of(ret)),
            Unit::Bytes | Unit::Count => m.exact(ret).map_or_else(
                || "-".into(),
                |t| {
                    if t.starts_with('-') || t == "0" {
                        t
                    } else {
                        format!("+{t}")
                    }
                },
            ),
        }));
        row.extend([opt(ret.last_tensor_alive), agg]);
        s.rows.push(row);
    }
    let excluded: Vec<&RunSummary> = r.runs.iter().filter(|r| r.excluded.is_some()).collect();
    if !excluded.is_empty() {
        s.notes.push(format!(
            "left out of the aggregates: {}",
            excluded
                .iter()
                .map(|r| format!("{} ({})", r.run_id, r.excluded.as_deref().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    s
}

fn stat(c: &super::model::CellStats, name: &str) -> String {
    c.retention.get(name).map_or_else(|| "-".into(), |s| s.text())
}

fn retention_cell_table(r: &Report) -> Section {
    let shown: Vec<Metric> = Metric::ALL.iter().copied().filter(|m| m.def().per_cell).collect();
    let mut cols: Vec<(&str, bool)> = vec![("cell", false), ("n", true)];
    cols.extend(shown.iter().map(|m| (m.def().label, true)));
    let mut s = Section::new(
        "Retention per cell across repetitions (min / median / max; bytes)",
        &cols,
    );
    for c in &r.cells {
        let mut row = vec![c.cell.clone(), format!("{}/{}", c.included, c.runs)];
        row.extend(shown.iter().map(|m| stat(c, m.key())));
        s.rows.push(row);
    }
    s.notes
        .push("n = runs aggregated / runs finished in the cell".into());
    s
}

fn control_table(r: &Report) -> Section {
    let shown: Vec<Metric> = Metric::ALL
        .iter()
        .copied()
        .filter(|m| m.def().vs_control)
        .collect();
    let mut cols: Vec<(&str, bool)> = vec![("size", false), ("mode", false)];
    cols.extend(shown.iter().map(|m| (m.def().label, true)));
    let mut s = Section::new(
        "Growth minus the reuse control (difference of medians; bytes)",
        &cols,
    );
    s.key_columns = 2;
    for d in &r.controls {
        let mut row = vec![d.size.clone(), d.mode.clone()];
        row.extend(
            shown
                .iter()
                .map(|m| signed_f(d.minus_control.get(m.key()).copied())),
        );
        s.rows.push(row);
    }
    if r.controls.is_empty() {
        s.notes.push(format!(
            "no control comparison: no cell with mode = {} beside another mode at the same size",
            super::model::CONTROL_MODE
        ));
    }
    s
}

fn metric_sections(r: &Report) -> Vec<Section> {
    let names: Vec<&str> = r.metric_pointers.iter().map(|(n, _)| n.as_str()).collect();
    let mut cols: Vec<(&str, bool)> = vec![("run-id", false)];
    cols.extend(names.iter().map(|n| (*n, true)));
    let mut per_run = Section::new("Metrics per run ([report] metrics)", &cols);
    for run in r.runs.iter().filter(|r| r.finished) {
        let mut row = vec![run.run_id.clone()];
        row.extend(
            names
                .iter()
                .map(|n| opt(run.metrics.get(*n).and_then(|v| v.as_ref()))),
        );
        per_run.rows.push(row);
    }
    per_run.notes.push(format!(
        "pointers: {}",
        r.metric_pointers
            .iter()
            .map(|(n, p)| format!("{n} = {p}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut cols: Vec<(&str, bool)> = vec![("cell", false), ("n", true)];
    cols.extend(names.iter().map(|n| (*n, true)));
    let mut per_cell = Section::new("Metrics per cell (min / median / max)", &cols);
    for c in &r.cells {
        let mut row = vec![c.cell.clone(), format!("{}/{}", c.included, c.runs)];
        row.extend(
            names
                .iter()
                .map(|n| c.metrics.get(*n).map_or_else(|| "-".into(), |s| s.text())),
        );
        per_cell.rows.push(row);
    }
    vec![per_run, per_cell]
}

fn run_section(r: &Report) -> Section {
    let mut s = run_table(r);
    let not_run: Vec<&str> = r
        .runs
        .iter()
        .filter(|r| !r.finished)
        .map(|r| r.run_id.as_str())
        .collect();
    if !not_run.is_empty() {
        s.notes.push(format!(
            "not run (no run.json; bundle status {}): {}",
            r.status.as_str(),
            not_run.join(", ")
        ));
    }
    s
}

/// Builders of the report's sections, in order; each returns no section when it does not apply.
type SectionBuilder = fn(&Report) -> Vec<Section>;

const SECTIONS: [SectionBuilder; 5] = [
    |r| vec![run_section(r)],
    |r| {
        r.has_retention
            .then(|| retention_run_table(r))
            .into_iter()
            .collect()
    },
    |r| {
        r.has_retention
            .then(|| retention_cell_table(r))
            .into_iter()
            .collect()
    },
    |r| r.has_retention.then(|| control_table(r)).into_iter().collect(),
    |r| {
        if r.metric_pointers.is_empty() {
            Vec::new()
        } else {
            metric_sections(r)
        }
    },
];

/// All sections of a bundle report, in order.
pub fn report_sections(r: &Report) -> Vec<Section> {
    SECTIONS.iter().flat_map(|build| build(r)).collect()
}

/// The sections after the run table (retention per run, per cell, against the control, metrics),
/// in order; the HTML page draws its own run table and renders these as they are.
pub fn analysis_sections(r: &Report) -> Vec<Section> {
    SECTIONS[1..].iter().flat_map(|build| build(r)).collect()
}

/// The whole report as terminal tables or Markdown. Sections are built and rendered one at a
/// time, so only one table's cells are held at once besides the output text.
pub fn report_text(r: &Report, style: TextStyle) -> String {
    let mut pre = preamble(r);
    if style.is_md() {
        pre = pre.into_iter().map(|l| md_escape(&l)).collect();
        pre.insert(0, format!("## hwr-exp report: {}", r.experiment));
    }
    let mut out = render_sections(&pre, Vec::new(), style);
    for build in SECTIONS {
        for s in build(r) {
            render_section(&mut out, s, style);
        }
    }
    out
}

/// The `report --stderr` section: for each run that is not ok, its id and reason, then the last
/// lines of its stderr.log (the report keeps at most [`super::model::STDERR_TAIL_LINES`]). In
/// Markdown each tail is a fenced code block; on a terminal the lines are prefixed `| ` and wrapped
/// to the width.
pub fn stderr_text(r: &Report, style: TextStyle) -> String {
    let title = "stderr of the runs that are not ok (last lines of stderr.log)";
    let mut out = String::from("\n");
    if style.is_md() {
        out.push_str(&format!("### {title}\n\n"));
    } else {
        out.push_str(&style.wrap(title));
        out.push('\n');
    }
    let failed: Vec<&RunSummary> = r.runs.iter().filter(|run| run.reason.is_some()).collect();
    if failed.is_empty() {
        out.push_str("every run is ok\n");
        return out;
    }
    for run in failed {
        let tail = run.stderr_tail();
        if style.is_md() {
            out.push_str(&format!(
                "**{}**: {}\n\n",
                md_escape(&run.run_id),
                md_escape(run.reason_text())
            ));
            if tail.is_empty() {
                out.push_str("(stderr.log is empty)\n\n");
                continue;
            }
            // A fence longer than any run of backticks in the lines cannot be closed by them.
            let ticks = tail
                .iter()
                .flat_map(|l| l.split(|c| c != '`').map(str::len))
                .max()
                .unwrap_or(0);
            let fence = "`".repeat(ticks.max(2) + 1);
            out.push_str(&format!("{fence}text\n"));
            for line in tail {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str(&format!("{fence}\n\n"));
        } else {
            out.push_str(&style.wrap(&format!("{}: {}", run.run_id, run.reason_text())));
            out.push('\n');
            if tail.is_empty() {
                out.push_str("  (stderr.log is empty)\n");
            }
            for line in tail {
                let text = match style {
                    TextStyle::Terminal(Some(width)) => {
                        let options = textwrap::Options::new(width.saturating_sub(4).max(10))
                            .initial_indent("  | ")
                            .subsequent_indent("  |   ")
                            .word_splitter(textwrap::WordSplitter::NoHyphenation);
                        textwrap::fill(line, options)
                    }
                    _ => format!("  | {line}"),
                };
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out
}

/// One CSV row per run: identity, matrix values (one column per key), run facts, retention numbers,
/// the aggregation flag and metric values. Missing values are empty fields.
///
/// # Errors
/// Only from the CSV writer.
pub fn report_csv(r: &Report) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = ["run_id", "index"].map(String::from).to_vec();
    header.extend(r.matrix_keys.iter().cloned());
    header.extend(
        [
            "repetition",
            "termination",
            "exit_code",
            "signal",
            "wall_seconds",
            "peak_rss_bytes",
            "output_check",
            "outcome",
            "aggregated",
            "excluded_reason",
            "reason",
        ]
        .map(String::from),
    );
    if r.has_retention {
        header.extend(["output_mode", "output_tensor_elements", "loop_iterations"].map(String::from));
        header.extend(Metric::ALL.iter().map(|m| m.csv_name()));
        header.extend(["last_tensor_alive", "output_completed"].map(String::from));
    }
    header.extend(r.metric_pointers.iter().map(|(n, _)| format!("metric_{n}")));
    w.write_record(&header)?;
    let e = String::new;
    let o = |v: Option<String>| v.unwrap_or_default();
    for run in &r.runs {
        let mut row = vec![run.run_id.clone(), run.index.to_string()];
        row.extend(
            r.matrix_keys
                .iter()
                .map(|k| o(run.cell.get(k).map(|v| v.to_string()))),
        );
        row.extend([
            run.repetition.to_string(),
            if run.finished {
                run.termination_text().split(' ').next().unwrap_or("").to_string()
            } else {
                "not-run".into()
            },
            o(run.exit_code.map(|v| v.to_string())),
            o(run.signal.map(|v| v.to_string())),
            o(run.wall_seconds.map(|v| v.to_string())),
            o(run.peak_rss_bytes.map(|v| v.to_string())),
            o(run.output_check.map(|_| run.output_text())),
            o(run.outcome.map(|v| outcome_name(v).to_string())),
            run.excluded.is_none().to_string(),
            o(run.excluded.clone()),
            o(run.reason.clone()),
        ]);
        if r.has_retention {
            match &run.retention {
                Some(ret) => {
                    row.extend([
                        o(ret.mode.clone()),
                        o(ret.tensor_elements.map(|v| v.to_string())),
                        ret.loop_iterations.to_string(),
                    ]);
                    row.extend(Metric::ALL.iter().map(|m| o(m.exact(ret))));
                    row.extend([
                        o(ret.last_tensor_alive.map(|b| b.to_string())),
                        o(ret.completed.map(|b| b.to_string())),
                    ]);
                }
                None => row.extend(std::iter::repeat_n(e(), Metric::ALL.len() + 5)),
            }
        }
        for (name, _) in &r.metric_pointers {
            // Full precision in CSV: it is read by programs, not people.
            row.push(o(run.metrics.get(name).and_then(|v| v.as_ref()).map(
                |v| match v {
                    super::model::MetricValue::Number(x) => x.to_string(),
                    other => other.to_string(),
                },
            )));
        }
        w.write_record(&row)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// The report as one pretty-printed JSON document (kebab-case keys).
///
/// # Errors
/// Only from serde_json.
pub fn report_json(r: &Report) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(r)? + "\n")
}
