//! `hwr-exp compare A B`: the same cells of two bundles side by side, the difference of medians
//! (B minus A), a note where the repetitions' ranges overlap (noise), the differences in provenance
//! (revision.txt, provenance.json `dirty`, host.json hostname / cpu-model / kernel, hwr-exp version,
//! manifest-sha256), and the cells present in only one bundle.

use std::path::PathBuf;

use super::collection::collect;
use super::comparison::{Comparison, MetricRow, compare, host_of};
use super::metrics::Metric;
use super::model::{Stats, fmt_num};
use super::render::Format;
use super::section::{Section, TextStyle, render_sections};

/// What `hwr-exp compare` is asked for (the default: two empty paths, a table, one line per row).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompareOptions {
    /// The first (baseline) bundle folder.
    pub a: PathBuf,
    /// The second bundle folder; differences are B minus A.
    pub b: PathBuf,
    /// Output format (`csv`: one row per cell and metric).
    pub format: Format,
    /// Widest line of terminal tables, in columns; `None` for one line per row (`--wide`).
    pub width: Option<usize>,
}

/// A row's verdict with what it needs said: the repetitions a `too few runs` would need, and
/// what the runs gave instead of usable values.
fn verdict_text(r: &MetricRow) -> String {
    super::verdicts::with_needs(
        r.verdict.map_or("", |v| v.as_str()),
        r.repetitions_needed,
        r.unusable_values.as_deref(),
    )
}

fn stats_text(s: Option<Stats>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{} (n={})", s.text(), s.n))
}

fn difference_text(d: Option<f64>) -> String {
    match d {
        Some(d) if d > 0.0 => format!("+{}", fmt_num(d)),
        Some(d) => fmt_num(d),
        None => "-".into(),
    }
}

/// The comparison as text. Markdown and `--wide` terminal output have one line per row, A and B in
/// columns of their own. Terminal output that must fit a width puts B's value on a line of its own
/// under A's (labelled `A` and `B`), shows the side-by-side rows in one table per cell, and shortens
/// the notes to `noise` and `one side` with a legend.
fn text(c: &Comparison, style: TextStyle) -> String {
    let narrow = matches!(style, TextStyle::Terminal(Some(_)));
    let mut pre = vec![format!("A: {}", c.a), format!("B: {}", c.b)];
    if c.differences.is_empty() {
        pre.push("same experiment, revision, working tree, host, hwr-exp version and manifest".into());
    }
    if style == TextStyle::Markdown {
        pre.insert(0, "## hwr-exp compare".into());
    }
    let mut sections = Vec::new();
    sections.extend(differences_section(c, narrow));
    let v = verdicts_section(c);
    if v.rows.is_empty() {
    } else if narrow {
        sections.extend(per_cell(v));
    } else {
        sections.push(v);
    }
    let title =
        "Cells side by side (min / median / max over aggregated runs; difference = median B - median A)";
    let mut notes = Vec::new();
    if !c.only_in_a.is_empty() {
        notes.push(format!("cells only in A: {}", c.only_in_a.join(", ")));
    }
    if !c.only_in_b.is_empty() {
        notes.push(format!("cells only in B: {}", c.only_in_b.join(", ")));
    }
    if narrow {
        sections.extend(side_by_side_narrow(c, title, notes));
    } else {
        sections.push(side_by_side_wide(c, title, notes));
    }
    render_sections(&pre, sections, style)
}

/// "The bundles differ in": one row per provenance fact that differs (A and B on lines of their
/// own when `narrow`); `None` when none does.
fn differences_section(c: &Comparison, narrow: bool) -> Option<Section> {
    if c.differences.is_empty() {
        return None;
    }
    let title = "The bundles differ in";
    let mut s = if narrow {
        let mut s = Section::new(title, &[("fact", false), ("", false), ("value", false)]);
        s.key_columns = 2;
        s
    } else {
        Section::new(title, &[("fact", false), ("A", false), ("B", false)])
    };
    for d in &c.differences {
        if narrow {
            s.rows.push(vec![d.fact.clone(), "A".into(), d.a.clone()]);
            s.rows.push(vec![String::new(), "B".into(), d.b.clone()]);
        } else {
            s.rows.push(vec![d.fact.clone(), d.a.clone(), d.b.clone()]);
        }
    }
    Some(s)
}

/// The verdicts table: one row per cell and metric with a verdict (side by side, then
/// control-relative), the shift B - A with its interval.
fn verdicts_section(c: &Comparison) -> Section {
    let mut v = Section::new(
        "Verdicts: each cell, B against A (Hodges-Lehmann shift B - A over runs, exact 95% interval)",
        &[
            ("cell", false),
            ("metric", false),
            ("n A/B", true),
            ("shift [95% CI]", true),
            ("p", true),
            ("verdict", false),
        ],
    );
    v.key_columns = 2;
    for r in c
        .rows
        .iter()
        .chain(&c.control_relative)
        .filter(|r| r.verdict.is_some())
    {
        v.rows.push(verdict_row(r));
    }
    v.notes.push(
        "p: permutation, exact with ties, Holm-corrected across cells per metric; `reproduced` needs [report] equivalence-margin in B's manifest; X - control: the change of the cell's shift against its own bundle's control, its interval the two bundles' exact intervals combined (Bonferroni: at least 1 - 0.05/k for k cells), no p".into(),
    );
    v
}

/// A row of [`verdicts_section`]: cell, metric label, runs, shift with interval, p, verdict.
fn verdict_row(r: &MetricRow) -> Vec<String> {
    let base = r.metric.trim_end_matches(" minus control");
    let metric = Metric::from_key(base);
    let label = match metric {
        Some(m) if base != r.metric => format!("{} - control", m.def().label),
        Some(m) => m.def().label.to_string(),
        None => r.metric.clone(),
    };
    let e = super::estimates::Estimate {
        cell: r.cell.clone(),
        control: String::new(),
        metric: base.to_string(),
        n_cell: 0,
        n_control: 0,
        shift: r.shift,
        ci_low: r.ci_low,
        ci_high: r.ci_high,
        confidence: r.confidence.or(Some(0.95)),
        p: r.p,
        p_adjusted: r.p,
        exact: None,
        margin: None,
        verdict: crate::stats::Verdict::NoDetectableDifference,
        repetitions_needed: None,
        unusable_values: None,
        cell_nodes: Vec::new(),
        control_nodes: Vec::new(),
        node: None,
    };
    vec![
        r.cell.clone(),
        label,
        format!(
            "{}/{}",
            r.a.map_or_else(|| "-".into(), |s| s.n.to_string()),
            r.b.map_or_else(|| "-".into(), |s| s.n.to_string())
        ),
        super::verdicts::interval_text(&e),
        r.p.map_or_else(|| "-".into(), fmt_num),
        verdict_text(r),
    ]
}

/// The verdicts table `v` cut into one table per cell, the metric as key column, so that it
/// fits a width; the notes under the last.
fn per_cell(v: Section) -> Vec<Section> {
    let mut sections = Vec::new();
    // One table per cell, the metric as key column, so that it fits the width.
    let mut cells: Vec<String> = Vec::new();
    for row in &v.rows {
        if !cells.contains(&row[0]) {
            cells.push(row[0].clone());
        }
    }
    let mut first = true;
    for cell in cells {
        let mut part = Section::new(
            if first {
                format!("{}\ncell {cell}", v.title)
            } else {
                format!("cell {cell}")
            },
            &[
                ("metric", false),
                ("n A/B", true),
                ("shift [95% CI]", true),
                ("p", true),
                ("verdict", false),
            ],
        );
        first = false;
        part.rows = v
            .rows
            .iter()
            .filter(|r| r[0] == cell)
            .map(|r| r[1..].to_vec())
            .collect();
        sections.push(part);
    }
    if let Some(last) = sections.last_mut() {
        last.notes = v.notes.clone();
    }
    sections
}

/// The cells side by side for a width: one table per cell, B's value on a line of its own under
/// A's, the notes shortened with a legend (then `notes`).
fn side_by_side_narrow(c: &Comparison, title: &str, notes: Vec<String>) -> Vec<Section> {
    let mut sections = Vec::new();
    let mut cells: Vec<&str> = Vec::new();
    for r in &c.rows {
        if !cells.contains(&r.cell.as_str()) {
            cells.push(&r.cell);
        }
    }
    sections.push(Section::new(title, &[]));
    for cell in cells {
        let mut s = Section::new(
            format!("cell {cell}"),
            &[
                ("metric", false),
                ("", false),
                ("min / median / max", true),
                ("B - A", true),
                ("note", false),
            ],
        );
        s.key_columns = 2;
        for r in c.rows.iter().filter(|r| r.cell == cell) {
            s.rows.push(vec![
                r.metric.clone(),
                "A".into(),
                stats_text(r.a),
                difference_text(r.median_difference),
                match (r.ranges_overlap, &r.unusable_values) {
                    (_, Some(_)) => "not usable".into(),
                    (Some(true), None) => "noise".into(),
                    (Some(false), None) => String::new(),
                    (None, None) => "one side".into(),
                },
            ]);
            s.rows.push(vec![
                String::new(),
                "B".into(),
                stats_text(r.b),
                String::new(),
                String::new(),
            ]);
        }
        sections.push(s);
    }
    if let Some(last) = sections.last_mut() {
        last.notes.push(
            "noise: the ranges of A and B overlap; one side: only one bundle has the metric; not usable: values left out (below)".into(),
        );
        last.notes.extend(c.rows.iter().filter_map(|r| {
            Some(format!(
                "not usable in {} {}: {}",
                r.cell,
                r.metric,
                r.unusable_values.as_ref()?
            ))
        }));
        last.notes.extend(notes);
    }
    sections
}

/// The cells side by side, one line per cell and metric, A and B in columns of their own.
fn side_by_side_wide(c: &Comparison, title: &str, notes: Vec<String>) -> Section {
    let mut s = Section::new(
        title,
        &[
            ("cell", false),
            ("metric", false),
            ("A", true),
            ("B", true),
            ("B - A", true),
            ("note", false),
        ],
    );
    s.key_columns = 2;
    for r in &c.rows {
        s.rows.push(vec![
            r.cell.clone(),
            r.metric.clone(),
            stats_text(r.a),
            stats_text(r.b),
            difference_text(r.median_difference),
            match (r.ranges_overlap, &r.unusable_values) {
                (_, Some(u)) => format!("not usable: {u}"),
                (Some(true), None) => "ranges overlap (noise)".into(),
                (Some(false), None) => String::new(),
                (None, None) => "only one side has it".into(),
            },
        ]);
    }
    s.notes = notes;
    s
}

fn csv(c: &Comparison) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "cell",
        "metric",
        "a_n",
        "a_min",
        "a_median",
        "a_max",
        "b_n",
        "b_min",
        "b_median",
        "b_max",
        "median_difference",
        "ranges_overlap",
        "shift",
        "ci_low",
        "ci_high",
        "p",
        "verdict",
        "repetitions_needed",
        "unusable_values",
    ])?;
    let o = |v: Option<String>| v.unwrap_or_default();
    for r in c.rows.iter().chain(&c.control_relative) {
        let side = |s: Option<Stats>| {
            [
                o(s.map(|s| s.n.to_string())),
                o(s.map(|s| s.min.to_string())),
                o(s.map(|s| s.median.to_string())),
                o(s.map(|s| s.max.to_string())),
            ]
        };
        let mut row = vec![r.cell.clone(), r.metric.clone()];
        row.extend(side(r.a));
        row.extend(side(r.b));
        row.push(o(r.median_difference.map(|d| d.to_string())));
        row.push(o(r.ranges_overlap.map(|b| b.to_string())));
        for x in [r.shift, r.ci_low, r.ci_high, r.p] {
            row.push(o(x.map(|v| v.to_string())));
        }
        row.push(o(r.verdict.map(|v| v.as_str().to_string())));
        row.push(o(r.repetitions_needed.map(|n| n.to_string())));
        row.push(o(r.unusable_values.clone()));
        w.write_record(&row)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// Reads both bundles and renders the comparison in `opts.format`; the text is the whole of the
/// command's stdout.
///
/// # Errors
/// Either bundle cannot be read (the message names the file).
pub fn compare_to_string(opts: &CompareOptions) -> anyhow::Result<String> {
    let html = opts.format == Format::Html;
    let a = collect(&opts.a, html)?;
    let b = collect(&opts.b, html)?;
    let host_a = host_of(&opts.a)?;
    let host_b = host_of(&opts.b)?;
    let c = compare(&a, host_a.as_ref(), &b, host_b.as_ref());
    Ok(match opts.format {
        Format::Table => text(&c, TextStyle::Terminal(opts.width)),
        Format::Md => text(&c, TextStyle::Markdown),
        Format::Csv => csv(&c)?,
        Format::Json => serde_json::to_string_pretty(&c)? + "\n",
        Format::Html => super::html::compare_page(&c, &a, &b)?,
    })
}
