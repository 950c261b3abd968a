//! What `check` and `plan` say before anything runs about the verdicts a plan can give: the
//! too-few-runs warning (no comparison against the control can reach its level) and the contrast
//! warning (no contrast, DESIGN 9, can reach its confidence).
//!
//! Every cell of a plan has the same number of runs (the repetitions, or an adaptive rule's
//! `max`), so both follow from the cells alone. A plan that is the whole cartesian product of its
//! axes ([`PlanCells::Product`]) is counted from the axes' lengths without listing a cell: a
//! 4,782,969-cell matrix costs what its 14 axes cost. Other plans (`exclude`, `include`) list
//! their cells once ([`PlanCells::Listed`]), never their runs.

use std::collections::{HashMap, HashSet};

use crate::manifest::{Cell, ReportConfig, Value};
use crate::stats::{self, ALPHA};

use super::model::{CONTROL_MODE, fmt_num};

/// The cells of a plan.
pub enum PlanCells<'a> {
    /// Every combination of these axes (keys and values, manifest order).
    Product(&'a [(String, Vec<Value>)]),
    /// The cells, one each (plan order).
    Listed(Box<dyn Iterator<Item = Cell> + 'a>),
}

/// The plan's shape as the warnings need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// Cells with the control's values.
    control_cells: u128,
    /// Cells compared with a control (a control cell in their comparison group).
    compared: u128,
    /// Contrasts the report would have.
    contrasts: u128,
    /// Whether there is any cell at all.
    any_cell: bool,
}

/// The control `check` assumes: `[report] control`, else mode = reuse.
fn control_of(report: &ReportConfig) -> Vec<(String, Value)> {
    if report.control.is_empty() {
        vec![("mode".to_string(), Value::Str(CONTROL_MODE.to_string()))]
    } else {
        report.control.clone()
    }
}

/// Counts of a full product, from the axes' lengths.
fn product_counts(axes: &[(String, Vec<Value>)], control: &[(String, Value)]) -> Counts {
    let total: u128 = axes.iter().map(|(_, v)| v.len() as u128).product();
    let mut matches: u128 = 1;
    for (k, cv) in control {
        matches *= axes
            .iter()
            .find(|(a, _)| a == k)
            .map_or(0, |(_, vs)| vs.iter().filter(|v| v.same_cell(cv)).count() as u128);
    }
    let free: Vec<u128> = axes
        .iter()
        .filter(|(k, _)| !control.iter().any(|(c, _)| c == k))
        .map(|(_, v)| v.len() as u128)
        .collect();
    let groups: u128 = free.iter().product();
    let control_cells = groups * matches;
    let compared = if matches == 0 { 0 } else { total - control_cells };
    // Compared cells spread evenly over the levels of each axis that is not the control's.
    let contrasts = free
        .iter()
        .filter(|&&l| l >= 2)
        .map(|&l| (l - 1) * compared / l)
        .sum();
    Counts {
        control_cells,
        compared,
        contrasts,
        any_cell: total > 0,
    }
}

/// Counts of listed cells (as [`super::contrasts`] and the estimates pair them).
fn listed_counts(cells: impl Iterator<Item = Cell>, control: &[(String, Value)]) -> Counts {
    let mut seen: HashSet<Vec<(String, String)>> = HashSet::new();
    let mut controls: HashSet<Vec<(String, String)>> = HashSet::new();
    let mut others: Vec<Vec<(String, String)>> = Vec::new();
    let mut control_cells = 0u128;
    for c in cells {
        let text: Vec<(String, String)> = c.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        if !seen.insert(text.clone()) {
            continue;
        }
        let is_control = control
            .iter()
            .all(|(k, cv)| c.iter().any(|(ck, v)| ck == k && v.same_cell(cv)));
        let group: Vec<(String, String)> = text
            .iter()
            .filter(|(k, _)| !control.iter().any(|(c, _)| c == k))
            .cloned()
            .collect();
        if is_control {
            control_cells += 1;
            controls.insert(group);
        } else {
            others.push(text);
        }
    }
    let compared: Vec<&Vec<(String, String)>> = others
        .iter()
        .filter(|t| {
            let g: Vec<(String, String)> = t
                .iter()
                .filter(|(k, _)| !control.iter().any(|(c, _)| c == k))
                .cloned()
                .collect();
            controls.contains(&g)
        })
        .collect();
    // Per axis that is not the control's: the compared cells at a level other than the first
    // (plan order) whose other values have a compared cell at the first.
    let mut contrasts = 0u128;
    let keys: Vec<&String> = compared
        .first()
        .map(|t| t.iter().map(|(k, _)| k).collect())
        .unwrap_or_default();
    for axis in keys.into_iter().filter(|k| !control.iter().any(|(c, _)| c == *k)) {
        let level = |t: &Vec<(String, String)>| t.iter().find(|(k, _)| k == axis).map(|(_, v)| v.clone());
        let Some(first) = compared.iter().find_map(|t| level(t)) else {
            continue;
        };
        let rest = |t: &Vec<(String, String)>| -> Vec<(String, String)> {
            t.iter().filter(|(k, _)| k != axis).cloned().collect()
        };
        let at_first: HashMap<Vec<(String, String)>, ()> = compared
            .iter()
            .filter(|t| level(t).as_ref() == Some(&first))
            .map(|t| (rest(t), ()))
            .collect();
        contrasts += compared
            .iter()
            .filter(|t| level(t).is_some_and(|l| l != first) && at_first.contains_key(&rest(t)))
            .count() as u128;
    }
    Counts {
        control_cells,
        compared: compared.len() as u128,
        contrasts,
        any_cell: !seen.is_empty(),
    }
}

fn counts(cells: PlanCells<'_>, control: &[(String, Value)]) -> Counts {
    match cells {
        PlanCells::Product(axes) => product_counts(axes, control),
        PlanCells::Listed(cells) => listed_counts(cells, control),
    }
}

fn control_text(control: &[(String, Value)]) -> String {
    control
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The warnings `check` and `plan` print for a plan whose cells are `cells`, each with
/// `runs_per_cell` runs, judged against `report`'s control (or mode = reuse): that every verdict
/// will be `too few runs` (or that no planned cell is the control), and that every contrast will
/// be `too few runs`. Empty when the plan can decide them.
pub fn plan_warnings(report: &ReportConfig, cells: PlanCells<'_>, runs_per_cell: usize) -> Vec<String> {
    let control = control_of(report);
    let c = counts(cells, &control);
    let mut out = Vec::new();
    if !report.control.is_empty() && c.any_cell && c.control_cells == 0 {
        // Named by [report] control, but excluded (or left out by --where): nothing to compare with.
        out.push(format!(
            "no planned run is in the control cell ({}): it is excluded or left out, so the report \
             can give no verdicts; keep that cell or name another with [report] control",
            control_text(&control)
        ));
        return out;
    }
    if c.compared == 0 {
        return out;
    }
    let r = runs_per_cell;
    let smallest = stats::smallest_p(r, r);
    // Bonferroni across the cells; Holm within a cell over the verdict metric's growth and rate
    // (its first step at half the cell's level; a `[report] metrics` pointer is one figure).
    let figures: u32 = if crate::manifest::VERDICT_METRICS.contains(&report.verdict_metric()) {
        2
    } else {
        1
    };
    let level = ALPHA / c.compared as f64 / f64::from(figures);
    if smallest >= level {
        out.push(format!(
            "with {r} run(s) per cell no comparison against the control ({}) can reach p < {}{}: \
             the smallest attainable p is {}, so every verdict will be `too few runs`; \
             use repetitions = {} or more (verdicts compare outputs in the retention schema, DESIGN 7)",
            control_text(&control),
            fmt_num(level),
            match (c.compared, figures) {
                (1, 1) => String::new(),
                (1, _) => " (0.05 Holm-corrected over the cell's growth and rate)".to_string(),
                (n, 1) => format!(" (0.05 Bonferroni-corrected over {n} cells)"),
                (n, _) => format!(" (0.05 over {n} cells, Holm over each cell's growth and rate)"),
            },
            fmt_num(smallest),
            stats::repetitions_needed(level)
        ));
    }
    if c.contrasts > 0 {
        let side = ALPHA / c.contrasts as f64 / 2.0;
        if smallest >= side {
            out.push(format!(
                "with {r} run(s) per cell no contrast (does a factor change the retention?) can be decided: \
                 each of the {} contrast(s) needs two shifts against the control at confidence 1 - {} \
                 (0.05 over the contrasts, halved: Bonferroni), but the smallest attainable p is {}, so \
                 every contrast will be `too few runs`; use repetitions = {} or more",
                c.contrasts,
                fmt_num(side),
                fmt_num(smallest),
                stats::repetitions_needed(side)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axes(spec: &[(&str, &[&str])]) -> Vec<(String, Vec<Value>)> {
        spec.iter()
            .map(|(k, vs)| {
                (
                    k.to_string(),
                    vs.iter().map(|v| Value::Str(v.to_string())).collect(),
                )
            })
            .collect()
    }

    fn cells_of(axes: &[(String, Vec<Value>)]) -> Vec<Cell> {
        let mut out: Vec<Cell> = vec![Vec::new()];
        for (k, vs) in axes {
            out = out
                .into_iter()
                .flat_map(|c| {
                    vs.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((k.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        out
    }

    /// The product's arithmetic equals counting the listed cells, whatever the axes.
    #[test]
    fn product_counts_equal_listed_counts() {
        let control = control_of(&ReportConfig::default());
        for spec in [
            axes(&[
                ("mode", &["get", "reuse"]),
                ("version", &["a", "b"]),
                ("size", &["1", "2", "3"]),
            ]),
            axes(&[("mode", &["get", "view", "reuse"])]),
            axes(&[
                ("mode", &["get", "reuse"]),
                ("allocator", &["glibc", "jemalloc", "mimalloc"]),
            ]),
            axes(&[("mode", &["get"]), ("size", &["1", "2"])]),
            axes(&[("size", &["1", "2"])]),
        ] {
            let p = product_counts(&spec, &control);
            let l = listed_counts(cells_of(&spec).into_iter(), &control);
            assert_eq!(p, l, "{spec:?}");
        }
        let c = product_counts(
            &axes(&[
                ("mode", &["get", "reuse"]),
                ("version", &["a", "b"]),
                ("size", &["1", "2"]),
            ]),
            &control,
        );
        assert_eq!((c.control_cells, c.compared, c.contrasts), (4, 4, 4));
    }

    #[test]
    fn warnings_at_the_edges() {
        let report = ReportConfig::default();
        let spec = axes(&[
            ("mode", &["get", "reuse"]),
            ("version", &["a", "b"]),
            ("size", &["1", "2"]),
        ]);
        // 4 compared cells, each judged on growth and rate (Holm): 0.05 / 4 / 2 = 0.00625 is below
        // 5 runs' smallest p (2/252), so 5 runs decide neither them nor the 4 contrasts.
        let w = plan_warnings(&report, PlanCells::Product(&spec), 5);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("with 5 run(s) per cell no comparison against the control (mode = reuse) can reach p < 0.00625 (0.05 over 4 cells, Holm over each cell's growth and rate)"), "{w:?}");
        assert!(
            w[1].contains("no contrast") && w[1].contains("repetitions = 6"),
            "{w:?}"
        );
        assert!(plan_warnings(&report, PlanCells::Product(&spec), 6).is_empty());
        let w = plan_warnings(&report, PlanCells::Product(&spec), 3);
        assert_eq!(w.len(), 2, "{w:?}");
        // One more axis: 8 compared cells (0.05 / 16 = 0.003125, decided by 6 runs' 2/924) but 12
        // contrasts, each side at 0.05 / 12 / 2 = 0.00208: only the contrasts need 7.
        let wide = axes(&[
            ("mode", &["get", "reuse"]),
            ("version", &["a", "b"]),
            ("size", &["1", "2"]),
            ("allocator", &["glibc", "jemalloc"]),
        ]);
        let w = plan_warnings(&report, PlanCells::Product(&wide), 6);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("no contrast") && w[0].contains("repetitions = 7"),
            "{w:?}"
        );
        // A million-cell product is counted, not listed.
        let big: Vec<(String, Vec<Value>)> = (0..14)
            .map(|i| {
                let name = if i == 0 {
                    "mode".to_string()
                } else {
                    format!("k{i}")
                };
                let vs = if i == 0 {
                    vec![
                        Value::Str("a".into()),
                        Value::Str("b".into()),
                        Value::Str("reuse".into()),
                    ]
                } else {
                    (0..3).map(Value::Int).collect()
                };
                (name, vs)
            })
            .collect();
        let c = product_counts(&big, &control_of(&report));
        assert_eq!(c.compared, 2 * 3u128.pow(13));
        assert_eq!(plan_warnings(&report, PlanCells::Product(&big), 1).len(), 2);
    }
}
