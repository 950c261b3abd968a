//! Contrasts (DESIGN 9, issue 36 item 4): "does this factor change the retention?" for every
//! matrix axis other than the control's keys (an environment, an allocator, a size, any key) that
//! has two or more levels among the compared cells.
//!
//! For an axis `X` with levels `a` (its first level in manifest order) and `b`, and a compared
//! cell `c_b` whose other matrix values (the *fixed* values, the control's keys included) equal
//! those of a compared cell `c_a` at `X = a`, the contrast is the difference of the two shifts
//! against the control on the verdict metric ([`metric`]): `shift(c_b - control of c_b) -
//! shift(c_a - control of c_a)`, each the Hodges-Lehmann shift of the per-run values (the run is
//! the unit, the same values the estimates use).
//!
//! The interval is distribution-free and exact (Bonferroni): each shift gets its exact interval at
//! confidence `1 - a / 2` ([`crate::stats::shift::shift_at`], R's `wilcox.test(conf.int = TRUE)`
//! algorithm), and the difference of the shifts lies in `[low_b - high_a, high_b - low_a]` with
//! confidence at least `1 - a`, where `a` is the family's level (0.05) divided by the number of
//! contrasts in the report. Verdicts: `changes retention` (the interval excludes 0), `no
//! detectable change`, `too few runs` (a side's runs cannot reach confidence `1 - a / 2`: its
//! smallest attainable two-sided p, [`crate::stats::smallest_p`], is not below `a / 2`).

use std::collections::{BTreeMap, HashMap};

use super::estimates::{Estimates, Settings};
use super::metrics::VerdictMetric;
pub use super::model::{Contrast, ContrastVerdict};
use super::model::{Report, RunValues};
use crate::manifest::Value;
use crate::stats::{self, Shift};

/// The metric contrasts are computed on: the verdict metric (DESIGN 9: anonymous growth by
/// default, `[report] verdict-metric` otherwise); a byte measure is contrasted by its growth.
pub fn metric(settings: &Settings, pointers: &[String]) -> VerdictMetric {
    settings.verdict_metric(pointers)
}

/// One compared cell: its index in [`RunValues::cells`] and its control's.
#[derive(Debug, Clone, Copy)]
struct Compared {
    cell: usize,
    control: usize,
}

/// The contrasts of a report. `axes` are the matrix keys with their values in manifest order
/// (levels are ordered by it; a value not listed comes after, in plan order); `estimates` gives
/// the control and the compared cells; `values` the per-run numbers.
pub fn contrasts(
    values: &RunValues,
    estimates: &Estimates,
    axes: &[(String, Vec<Value>)],
    settings: &Settings,
) -> Vec<Contrast> {
    let Some(control) = &estimates.control else {
        return Vec::new();
    };
    let index: HashMap<&str, usize> = values
        .cells
        .iter()
        .enumerate()
        .map(|(i, c)| (c.label.as_str(), i))
        .collect();
    // Compared cells in plan order, each once (every metric has a row of each pair).
    let mut compared: Vec<Compared> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in &estimates.rows {
        if let (Some(&cell), Some(&ctrl)) = (index.get(row.cell.as_str()), index.get(row.control.as_str()))
            && seen.insert(cell)
        {
            compared.push(Compared { cell, control: ctrl });
        }
    }
    compared.sort_by_key(|c| c.cell);
    let mut planned: Vec<Planned> = Vec::new();
    for (axis, axis_values) in axes {
        if control.values.contains_key(axis) {
            continue;
        }
        planned.extend(axis_contrasts(values, &compared, axis, axis_values));
    }
    if planned.is_empty() {
        return Vec::new();
    }
    let family = settings.alpha() / planned.len() as f64;
    let side = family / 2.0;
    let metric = metric(settings, values.pointers());
    let metric_key = match &metric {
        VerdictMetric::Bytes(b) => b.growth().key().to_string(),
        VerdictMetric::Pointer(_, name) => name.clone(),
    };
    let value = |r: usize| match &metric {
        VerdictMetric::Bytes(b) => values.metric(r, b.growth()),
        VerdictMetric::Pointer(k, _) => values.pointer(r, *k),
    };
    let run_values = |cell: usize| -> Vec<f64> {
        values
            .estimate_runs(cell)
            .into_iter()
            .filter_map(value)
            .filter(|v| super::metrics::usable(*v))
            .collect()
    };
    // Each compared cell's shift against its control, once (a cell is in several contrasts).
    let mut shifts: HashMap<usize, (usize, usize, Option<Shift>)> = HashMap::new();
    let mut shift_of = |c: Compared| {
        *shifts.entry(c.cell).or_insert_with(|| {
            let (x, y) = (run_values(c.cell), run_values(c.control));
            (x.len(), y.len(), stats::shift::shift_at(&x, &y, side))
        })
    };
    let label = |i: usize| values.cells[i].label.clone();
    planned
        .into_iter()
        .map(|p| {
            let (na, ma, sa) = shift_of(p.a);
            let (nb, mb, sb) = shift_of(p.b);
            let reach = |n: usize, m: usize| stats::smallest_p(n, m) < side;
            let both = sa.zip(sb);
            let verdict = match both {
                Some((a, b)) if reach(na, ma) && reach(nb, mb) => {
                    let (_, lo, hi, _) = difference(&a, &b);
                    if lo > 0.0 || hi < 0.0 {
                        ContrastVerdict::ChangesRetention
                    } else {
                        ContrastVerdict::NoDetectableChange
                    }
                }
                _ => ContrastVerdict::TooFewRuns,
            };
            let figures = both.map(|(a, b)| difference(&a, &b));
            let decided = verdict != ContrastVerdict::TooFewRuns;
            Contrast {
                axis: p.axis.clone(),
                level_a: p.level_a,
                level_b: p.level_b,
                fixed: p.fixed,
                cell_a: label(p.a.cell),
                control_a: label(p.a.control),
                cell_b: label(p.b.cell),
                control_b: label(p.b.control),
                metric: metric_key.clone(),
                runs: [na, ma, nb, mb],
                // An interval is given only where it has the confidence the family needs.
                estimate: figures.map(|f| f.0),
                ci_low: figures.filter(|_| decided).map(|f| f.1),
                ci_high: figures.filter(|_| decided).map(|f| f.2),
                confidence: figures.filter(|_| decided).map(|f| f.3),
                verdict,
            }
        })
        .collect()
}

/// The difference of two shifts against their controls, `b - a`: (estimate, low, high,
/// confidence). The interval `[low_b - high_a, high_b - low_a]` holds the difference whenever
/// both shifts' intervals hold theirs, so its confidence is at least `1 - (1 - conf_a) - (1 -
/// conf_b)` (Bonferroni; rounded to 9 decimals).
pub fn difference(a: &Shift, b: &Shift) -> (f64, f64, f64, f64) {
    let confidence = 1.0 - (1.0 - a.confidence) - (1.0 - b.confidence);
    (
        b.shift - a.shift + 0.0,
        b.ci_low - a.ci_high + 0.0,
        b.ci_high - a.ci_low + 0.0,
        (confidence * 1e9).round() / 1e9,
    )
}

/// A contrast found before its figures: the two compared cells.
struct Planned {
    axis: String,
    level_a: String,
    level_b: String,
    fixed: BTreeMap<String, String>,
    a: Compared,
    b: Compared,
}

/// The contrasts along `axis`: each compared cell at a level other than the first, against the
/// compared cell at the first level with the same other values. `axis_values` is the manifest's
/// order of the levels.
fn axis_contrasts(
    values: &RunValues,
    compared: &[Compared],
    axis: &str,
    axis_values: &[Value],
) -> Vec<Planned> {
    let rank = |v: &Value| {
        axis_values
            .iter()
            .position(|x| x.same_cell(v))
            .unwrap_or(usize::MAX)
    };
    // Levels present among the compared cells, in manifest order (then plan order).
    let mut levels: Vec<&Value> = Vec::new();
    for c in compared {
        if let Some(v) = values.cells[c.cell].cell.get(axis)
            && !levels.iter().any(|l| l.same_cell(v))
        {
            levels.push(v);
        }
    }
    levels.sort_by_key(|v| rank(v));
    if levels.len() < 2 {
        return Vec::new();
    }
    let first = levels[0];
    let fixed_of = |c: &Compared| -> BTreeMap<String, String> {
        values.cells[c.cell]
            .cell
            .iter()
            .filter(|(k, _)| k.as_str() != axis)
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    };
    let at_first: HashMap<BTreeMap<String, String>, Compared> = compared
        .iter()
        .filter(|c| {
            values.cells[c.cell]
                .cell
                .get(axis)
                .is_some_and(|v| v.same_cell(first))
        })
        .map(|c| (fixed_of(c), *c))
        .collect();
    let mut out: Vec<(usize, Planned)> = Vec::new();
    for c in compared {
        let Some(level) = values.cells[c.cell].cell.get(axis) else {
            continue;
        };
        if level.same_cell(first) {
            continue;
        }
        let fixed = fixed_of(c);
        if let Some(a) = at_first.get(&fixed) {
            out.push((
                rank(level),
                Planned {
                    axis: axis.to_string(),
                    level_a: first.to_string(),
                    level_b: level.to_string(),
                    fixed,
                    a: *a,
                    b: *c,
                },
            ));
        }
    }
    // By level (manifest order), then the compared cells' plan order.
    out.sort_by_key(|(rank, p)| (*rank, p.a.cell));
    out.into_iter().map(|(_, p)| p).collect()
}

/// The matrix axes of a bundle's manifest text (keys with their values in manifest order);
/// empty when the text does not parse as a manifest.
pub fn manifest_axes(manifest_text: &str) -> Vec<(String, Vec<Value>)> {
    crate::manifest::parse(
        manifest_text,
        std::path::Path::new("manifest.toml"),
        std::path::Path::new("."),
    )
    .map(|m| m.matrix.axes)
    .unwrap_or_default()
}

/// Every matrix key of `keys` with its values: the manifest's order (`axes`), then any value
/// the cells have that the manifest does not list (an `include` cell, a manifest that did not
/// parse), in plan order.
pub fn axes_of(
    keys: &[String],
    axes: Vec<(String, Vec<Value>)>,
    values: &RunValues,
) -> Vec<(String, Vec<Value>)> {
    let mut by_key: HashMap<String, Vec<Value>> = axes.into_iter().collect();
    keys.iter()
        .map(|k| {
            let mut levels = by_key.remove(k).unwrap_or_default();
            for c in &values.cells {
                if let Some(v) = c.cell.get(k)
                    && !levels.iter().any(|l| l.same_cell(v))
                {
                    levels.push(v.clone());
                }
            }
            (k.clone(), levels)
        })
        .collect()
}

/// The control of `report --control KEY=VALUE` pairs: each key a matrix key of `keys`, given
/// once, each value the one a cell has (as the matrix spells it, or the same number).
///
/// # Errors
/// A message naming the pair and the matrix keys or the key's values.
pub fn resolve_control(
    control: &[(String, String)],
    keys: &[String],
    values: &RunValues,
) -> Result<Vec<(String, Value)>, String> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for (k, text) in control {
        if !keys.contains(k) {
            return Err(format!(
                "{k}={text}: `{k}` is not a matrix key of the bundle (matrix keys: {})",
                if keys.is_empty() {
                    "none".into()
                } else {
                    keys.join(", ")
                }
            ));
        }
        if out.iter().any(|(o, _)| o == k) {
            return Err(format!("{k}={text}: `{k}` is given twice"));
        }
        let named = Value::Str(text.clone());
        let mut seen: Vec<&Value> = Vec::new();
        let mut found = None;
        for c in &values.cells {
            if let Some(v) = c.cell.get(k) {
                if v.same_cell(&named) {
                    found = Some(v.clone());
                    break;
                }
                if !seen.iter().any(|s| s.same_cell(v)) {
                    seen.push(v);
                }
            }
        }
        match found {
            Some(v) => out.push((k.clone(), v)),
            None => {
                return Err(format!(
                    "{k}={text}: no run of the bundle has {k} = {text} (its values: {})",
                    seen.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    Ok(out)
}

/// What `report --fail-on` finds in `report` (DESIGN 6): one line per matching compared cell
/// (`above-control`: its verdict is `above control`) or contrast (`changes`: `changes
/// retention`), each saying which `--fail-on` it matches; empty when none matches.
pub fn fail_on(report: &Report, on: &[crate::choices::FailOn]) -> Vec<String> {
    use crate::choices::FailOn;
    let mut out = Vec::new();
    if on.contains(&FailOn::AboveControl) {
        out.extend(
            report
                .estimates
                .cells
                .iter()
                .filter(|c| c.verdict == stats::Verdict::AboveControl)
                .map(|c| {
                    format!(
                        "--fail-on above-control: {} is above control ({}, {})",
                        c.cell, c.control, c.metric
                    )
                }),
        );
    }
    if on.contains(&FailOn::Changes) {
        out.extend(
            report
                .contrasts
                .iter()
                .filter(|c| c.verdict == ContrastVerdict::ChangesRetention)
                .map(|c| {
                    format!(
                        "--fail-on changes: {} at {} changes retention ({})",
                        c.title(),
                        c.fixed_text(),
                        c.metric
                    )
                }),
        );
    }
    out
}
