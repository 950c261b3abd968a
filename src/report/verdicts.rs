//! The answer sections of a report: the verdict table (one word per compared cell against its
//! control, [`crate::report::estimates`]), the estimates and per-node tables, the contrasts
//! ([`crate::report::contrasts`]) and the words they are written with (intervals, verdicts,
//! human units).

use super::estimates::{CellVerdict, Estimate};
use super::metrics::{ByteMeasure, Metric, Unit, VerdictMetric};
use super::model::{Report, fmt_num};
use super::section::{Section, signed_f};
use crate::stats::Verdict;

/// `v` bytes in the unit that keeps three significant digits, signed: `+512 B`, `-4,096 B`,
/// `+252 KiB` ([`super::units::bytes`]).
pub fn human_bytes(v: f64) -> String {
    if !v.is_finite() {
        return fmt_num(v);
    }
    super::units::bytes(v)
}

/// A value of `metric` in human units (bytes, bytes per 1000 iterations, counts).
pub fn human(metric: Option<Metric>, v: f64) -> String {
    match metric.map(|m| m.def().unit) {
        Some(Unit::Bytes) => human_bytes(v),
        Some(Unit::BytesPer1000) => format!("{}/1k it", human_bytes(v)),
        Some(Unit::Count) | None => signed_f(Some(v)),
    }
}

/// `shift [low, high] unit` in one unit for the three that keeps three significant digits of
/// the smallest non-zero of them (`+252 [+240, +1,229] KiB`, [`super::units::bytes_interval`]),
/// `-` without a shift; the interval's confidence in parentheses when the runs cannot reach 95%.
pub fn interval_text(e: &Estimate) -> String {
    let (Some(s), Some(lo), Some(hi)) = (e.shift, e.ci_low, e.ci_high) else {
        return "-".into();
    };
    let conf = e.confidence.unwrap_or(0.95);
    let c = if (conf - 0.95).abs() < 1e-9 {
        String::new()
    } else {
        format!(" ({}%)", fmt_num(conf * 100.0))
    };
    let unit = e.metric().map(|m| m.def().unit);
    if !matches!(unit, Some(Unit::Bytes | Unit::BytesPer1000)) {
        return format!(
            "{} [{}, {}]{c}",
            signed_f(Some(s)),
            signed_f(Some(lo)),
            signed_f(Some(hi))
        );
    }
    let per = if unit == Some(Unit::BytesPer1000) {
        "/1k it"
    } else {
        ""
    };
    format!("{}{per}{c}", super::units::bytes_interval(s, lo, hi))
}

/// The verdict with what it needs said: the interval's width, the repetitions needed.
pub fn verdict_text(e: &Estimate) -> String {
    match e.verdict {
        Verdict::NoDetectableDifference => match e.width() {
            Some(w) => format!(
                "{} (width {})",
                e.verdict.as_str(),
                human(e.metric(), w).trim_start_matches('+')
            ),
            None => e.verdict.as_str().into(),
        },
        Verdict::TooFewRuns => match (e.repetitions_needed, &e.unusable_values) {
            (None, Some(u)) => with_needs(e.verdict.as_str(), None, Some(&format!("no usable values: {u}"))),
            (n, u) => with_needs(e.verdict.as_str(), n, u.as_deref()),
        },
        v => v.as_str().into(),
    }
}

/// `word`, then in parentheses the repetitions `needed` per cell and `note` when there are any:
/// `too few runs (need 5 per cell; cell: 2 runs gave null for private_bytes)`. `report`'s and
/// `compare`'s verdicts both read so.
pub(crate) fn with_needs(word: &str, needed: Option<usize>, note: Option<&str>) -> String {
    let said: Vec<String> = needed
        .map(|n| format!("need {n} per cell"))
        .into_iter()
        .chain(note.map(str::to_string))
        .collect();
    if said.is_empty() {
        word.to_string()
    } else {
        format!("{word} ({})", said.join("; "))
    }
}

fn p_text(p: Option<f64>) -> String {
    p.map_or_else(
        || "-".into(),
        |p| if p < 0.001 { format!("{p:.1e}") } else { fmt_num(p) },
    )
}

/// The notes under the verdict table: the control, the correction, the margin, the cells without
/// a control.
pub fn estimate_notes(r: &Report) -> Vec<String> {
    let e = &r.estimates;
    let mut notes = Vec::new();
    if let Some(c) = &e.control {
        notes.push(format!(
            "control: {} ({}); shift: Hodges-Lehmann, cell minus control, over runs; CI: exact, distribution-free; p: permutation, exact with ties",
            c.text(),
            if c.source == "manifest" { "[report] control" } else { "default; [report] control names another" }
        ));
    }
    if let Some(why) = &e.no_control {
        notes.push(why.clone());
    }
    let too_few = e.rows.iter().any(|x| x.verdict == Verdict::TooFewRuns);
    let too_few_note = if too_few {
        "; too few runs = the smallest p the runs allow cannot pass the first Holm step"
    } else {
        ""
    };
    if e.compared_cells > 1 {
        notes.push(format!(
            "p: Bonferroni across {} cells (each cell at 0.05 / {} = {}), Holm within a cell over each measure's growth and rate (the smaller p below {}, the other below {}); p shown times {}, compared with 0.05{too_few_note}",
            e.compared_cells,
            e.compared_cells,
            fmt_num(e.level),
            fmt_num(e.level / 2.0),
            fmt_num(e.level),
            e.compared_cells,
        ));
    } else if e.compared_cells == 1 {
        notes.push(format!(
            "one cell compared: Holm over each measure's growth and rate (the smaller p below {}, the other below {}){too_few_note}",
            fmt_num(e.level / 2.0),
            fmt_num(e.level),
        ));
    }
    match (e.growth_margin, e.rate_margin) {
        (None, None) => notes.push(
            "no equivalence margin ([report] equivalence-margin = \"64KiB\" enables `equivalent`)".into(),
        ),
        (g, rate) => notes.push(format!(
            "equivalence margin: growth and after-close {}, rate {}",
            g.map_or_else(
                || "none".into(),
                |g| human_bytes(g).trim_start_matches('+').to_string()
            ),
            rate.map_or_else(
                || "none".into(),
                |g| format!("{}/1k it", human_bytes(g).trim_start_matches('+'))
            ),
        )),
    }
    if !e.without_control.is_empty() {
        notes.push(format!("no control cell for: {}", e.without_control.join(", ")));
    }
    // Values left out of a comparison that still has a verdict (a `too few runs` verdict names
    // them itself).
    for row in e.rows.iter().filter(|x| x.verdict != Verdict::TooFewRuns) {
        if let Some(u) = &row.unusable_values {
            notes.push(format!(
                "left out of {} {}: {u}",
                row.cell,
                row.metric().map_or(row.metric.as_str(), |m| m.def().label)
            ));
        }
    }
    notes.extend(e.node_warnings.iter().cloned());
    notes
}

/// The estimate rows of `cv`'s cell for its metric: (growth, rate): a byte measure's growth and
/// rate rows ([`ByteMeasure::growth`], [`ByteMeasure::rate`]), or a `[report] metrics` name's
/// own row as growth and no rate.
fn verdict_rows<'a>(r: &'a Report, cv: &CellVerdict) -> (Option<&'a Estimate>, Option<&'a Estimate>) {
    let of_cell = |key: &str| {
        r.estimates
            .rows
            .iter()
            .find(|x| x.cell == cv.cell && x.metric == key)
    };
    let measure = ByteMeasure::from_name(&cv.metric);
    let growth = measure.map_or_else(|| of_cell(&cv.metric), |b| of_cell(b.growth().key()));
    let rate = measure.and_then(|b| of_cell(b.rate().key()));
    (growth, rate)
}

/// The control as people name it: its values (`reuse`; `reuse, 64` for several keys).
pub fn control_name(r: &Report) -> String {
    r.estimates.control.as_ref().map_or_else(
        || "the control".into(),
        |c| {
            c.values
                .values()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
    )
}

/// The loop iterations every run of `cell` with retention figures ran, when they all ran the
/// same number.
fn cell_iterations(r: &Report, cell: &str) -> Option<u64> {
    let mut its = r
        .runs
        .iter()
        .filter(|x| x.cell_label == cell && x.excluded.is_none())
        .filter_map(|x| x.retention.as_ref().map(|ret| ret.loop_iterations));
    let first = its.next()?;
    its.all(|n| n == first).then_some(first)
}

/// The sentence of the cell verdict `cv` ([`super::units::sentence`]), `None` without a figure.
pub fn verdict_sentence(r: &Report, cv: &CellVerdict) -> Option<String> {
    let (growth, rate) = verdict_rows(r, cv);
    let decided = r
        .estimates
        .rows
        .iter()
        .find(|x| x.cell == cv.cell && x.metric == cv.decided_by);
    let e = decided.or(growth).or(rate)?;
    Some(super::units::sentence(super::units::Said {
        verdict: cv.verdict,
        control: &control_name(r),
        interval: e.ci_low.zip(e.ci_high),
        confidence: e.confidence,
        rate: e.metric().is_some_and(|m| m.def().unit == Unit::BytesPer1000),
        iterations: cell_iterations(r, &cv.cell),
        needed: e.repetitions_needed,
    }))
}

/// What the row says besides the verdict word: the other metrics that disagree (`private: no
/// detectable difference`) and the reason growth and rate do not give one word.
pub fn verdict_remarks(cv: &CellVerdict) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(cv.reason.iter().map(|why| format!("why: {why}")));
    // One line per other metric that gives another word (short lines keep the verdict column
    // beside the intervals).
    out.extend(
        cv.disagreements
            .iter()
            .map(|d| format!("{} says {}", d.metric, d.verdict.as_str())),
    );
    out
}

/// The verdict table's title: the control, the metric judged and what was measured.
pub fn verdict_title(r: &Report) -> String {
    let e = &r.estimates;
    let pointers: Vec<String> = r.metric_pointers.iter().map(|(n, _)| n.clone()).collect();
    let metric = VerdictMetric::parse(&e.verdict_metric, &pointers)
        .unwrap_or(VerdictMetric::Bytes(ByteMeasure::Anonymous));
    match &e.control {
        Some(c) => format!(
            "Verdicts: each cell against its control ({}), {}; measured: {}",
            c.text(),
            metric.text(),
            r.measured.as_deref().unwrap_or("the manifest's command")
        ),
        None => "Verdicts: no control".into(),
    }
}

/// `estimate [low, high] unit` in the unit that keeps three significant digits
/// ([`super::units`]), `-` for none.
fn figure_text(metric: Option<Metric>, estimate: Option<f64>, low: Option<f64>, high: Option<f64>) -> String {
    let Some(e) = estimate else {
        return "-".into();
    };
    if metric.map(|m| m.def().unit) != Some(super::metrics::Unit::Bytes) {
        return match (low, high) {
            (Some(lo), Some(hi)) => format!(
                "{} [{}, {}]",
                human(metric, e),
                human(metric, lo),
                human(metric, hi)
            ),
            _ => human(metric, e),
        };
    }
    match (low, high) {
        (Some(lo), Some(hi)) => super::units::bytes_interval(e, lo, hi),
        _ => format!("{} (no interval)", super::units::bytes(e)),
    }
}

/// The "Contrasts" section ([`super::contrasts`]): one row per contrast; `None` when the report
/// has none.
pub fn contrasts_section(r: &Report) -> Option<Section> {
    if r.contrasts.is_empty() {
        return None;
    }
    let name = &r.contrasts[0].metric;
    let metric = Metric::from_key(name);
    let n = r.contrasts.len();
    // The family's level over the contrasts: from a decided one, else 0.05 over them.
    let family = r
        .contrasts
        .iter()
        .filter_map(|c| c.confidence)
        .map(|c| 1.0 - c)
        .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))))
        .unwrap_or(crate::stats::ALPHA / n as f64);
    let mut s = Section::new(
        format!(
            "Contrasts: does a factor change the retention? ({}, difference of shifts against the control)",
            name
        ),
        &[
            ("contrast", false),
            ("at", false),
            ("n", true),
            ("difference [CI]", true),
            ("verdict", false),
        ],
    );
    s.key_columns = 2;
    for c in &r.contrasts {
        s.rows.push(vec![
            c.title(),
            c.fixed_text(),
            format!("{}/{} vs {}/{}", c.runs[2], c.runs[3], c.runs[0], c.runs[1]),
            figure_text(metric, c.estimate, c.ci_low, c.ci_high),
            c.verdict.as_str().to_string(),
        ]);
    }
    s.notes.push(format!(
        "each row: (cell minus its control) at the second level minus the same at the first level, Hodges-Lehmann \
         shifts over runs; interval: the two shifts' exact intervals at {}% each, combined (Bonferroni): \
         confidence at least {}% over the {n} contrast(s); `too few runs`: a side cannot reach {}% (no interval); \
         n = runs of the cell/control at the second level vs the first",
        super::model::fmt_num(100.0 * (1.0 - family / 2.0)),
        super::model::fmt_num(100.0 * (1.0 - family)),
        super::model::fmt_num(100.0 * (1.0 - family / 2.0)),
    ));
    Some(s)
}
/// The verdict table: one row per compared cell ([`super::estimates::Estimates::cells`]): the
/// verdict metric's growth and rate against the control, the verdict with the metrics that
/// disagree and why, and the verdict in words.
pub fn verdict_section(r: &Report) -> Section {
    let e = &r.estimates;
    let mut s = Section::new(
        verdict_title(r),
        &[
            ("cell", false),
            ("n", true),
            ("shift [95% CI]: growth, rate", true),
            ("verdict", false),
            ("in words", false),
        ],
    );
    for cv in &e.cells {
        let (growth, rate) = verdict_rows(r, cv);
        let Some(g) = growth.or(rate) else { continue };
        let mut verdict = match rate {
            Some(rt) if cv.by_rate() => verdict_text(rt).replacen(" (", "\n(", 1),
            _ => verdict_text(g).replacen(" (", "\n(", 1),
        };
        for remark in verdict_remarks(cv) {
            verdict.push('\n');
            verdict.push_str(&remark);
        }
        s.rows.push(vec![
            cv.cell.clone(),
            format!("{}/{}", g.n_cell, g.n_control),
            format!(
                "{}\n{}",
                growth.map_or_else(|| "-".into(), interval_text),
                rate.map_or_else(|| "-".into(), interval_text)
            ),
            verdict,
            verdict_sentence(r, cv).unwrap_or_else(|| "-".into()),
        ]);
    }
    // The table's key, where there is a table.
    s.notes = if s.rows.is_empty() {
        Vec::new()
    } else {
        vec![
            "n = runs of the cell / of its control; one verdict per cell from its growth and rate under one multiplicity control: a decided figure's word (the growth's when both are), else `equivalent` when the growth is within the margin; the row says why when growth and rate differ, and which other metrics (private, file-backed, RSS) give another word; p-values in the table of every metric below".into(),
        ]
    };
    s.notes.extend(estimate_notes(r));
    s
}

/// Every metric estimated against the control, one row per cell and metric.
pub fn estimates_section(r: &Report) -> Section {
    let mut s = Section::new(
        "Against the control, every metric (Hodges-Lehmann shift over runs, exact 95% interval)",
        &[
            ("cell", false),
            ("metric", false),
            ("n", true),
            ("shift [95% interval]", true),
            ("p (corrected)", true),
            ("verdict", false),
        ],
    );
    s.key_columns = 2;
    for e in &r.estimates.rows {
        s.rows.push(vec![
            e.cell.clone(),
            e.metric()
                .map_or(e.metric.as_str(), |m| m.def().label)
                .to_string(),
            format!("{}/{}", e.n_cell, e.n_control),
            interval_text(e),
            p_text(e.p_adjusted),
            verdict_text(e),
        ]);
    }
    s
}

/// The estimates within each node (runs spanning several nodes): one row per node, cell and
/// metric, both sides' runs on that node only.
pub fn per_node_section(r: &Report) -> Section {
    let mut s = Section::new(
        "Against the control on each node (both sides' runs on that node only; Holm across the cells compared on it)",
        &[
            ("node", false),
            ("cell", false),
            ("metric", false),
            ("n", true),
            ("shift [95% interval]", true),
            ("p", true),
            ("verdict", false),
        ],
    );
    s.key_columns = 3;
    for e in &r.estimates.per_node {
        s.rows.push(vec![
            e.node.clone().unwrap_or_default(),
            e.cell.clone(),
            e.metric()
                .map_or(e.metric.as_str(), |m| m.def().label)
                .to_string(),
            format!("{}/{}", e.n_cell, e.n_control),
            interval_text(e),
            p_text(e.p_adjusted),
            verdict_text(e),
        ]);
    }
    s
}
