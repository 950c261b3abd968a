//! `hwr-exp compare A B`: the same cells of two bundles side by side, the difference of medians
//! (B minus A), a note where the repetitions' ranges overlap (noise), the differences in provenance
//! (revision.txt, provenance.json `dirty`, host.json hostname / cpu-model / kernel, hwr-exp version,
//! manifest-sha256), and the cells present in only one bundle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value as Json;

use super::collection::collect;
use super::metrics::Metric;
use super::model::{CellStats, Report, Stats, fmt_num};
use super::render::{Format, Section, TextStyle, render_sections};
use crate::bundle::read::{Bundle, ReadError};

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

/// One metric of one cell in both bundles.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetricRow {
    /// The cell (`key=value ...`).
    pub cell: String,
    /// Metric name (a retention metric, `wall-seconds`, `peak-rss-bytes` or a `[report]` metric).
    pub metric: String,
    /// Stats in A.
    pub a: Option<Stats>,
    /// Stats in B.
    pub b: Option<Stats>,
    /// median(B) - median(A).
    pub median_difference: Option<f64>,
    /// Whether [min, max] of A and B overlap: the difference is within the repetitions' noise.
    pub ranges_overlap: Option<bool>,
    /// Hodges-Lehmann shift B - A over runs (retention metrics only), with its exact interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shift: Option<f64>,
    /// Lower end of the 95% interval of the shift.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<f64>,
    /// Upper end of the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<f64>,
    /// The interval's confidence when it is not 0.95: a control-relative row's lower bound,
    /// `1 - 0.05 / k` for `k` cells (see the control-relative figures in docs/report.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// Permutation p-value, Holm-corrected across the cells (none for a control-relative row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p: Option<f64>,
    /// `no detectable change`, `higher in B`, `lower in B`, `reproduced`, `too few runs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<crate::stats::CompareVerdict>,
    /// With `too few runs` when both sides have values: the repetitions per cell (in each bundle)
    /// whose smallest attainable p would be below the level the row is tested at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetitions_needed: Option<usize>,
    /// The runs of the cell in A and in B that finished ok but gave no usable value, by what they
    /// gave (`A: 2 runs gave null for private_bytes; B: ...`); absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable_values: Option<String>,
}

/// A cell's per-run values of `metric` in a report (included runs with a usable figure).
fn run_values(r: &Report, cell: &str, metric: Metric) -> Vec<f64> {
    r.values.cell_values(cell, metric)
}

/// What the runs of `cell` in A and B gave instead of a usable value of `metric` (a retention
/// metric, or a `[report]` metric by name).
fn unusable_in(a: &Report, b: &Report, cell: &str, metric: &str) -> Option<String> {
    let side = |r: &Report| -> Option<String> {
        match Metric::from_key(metric) {
            Some(m) => r.values.cell_unusable_values(cell, m),
            None => r
                .cells
                .iter()
                .find(|c| c.cell == cell)
                .and_then(|c| c.unusable_metrics.get(metric).cloned()),
        }
    };
    super::estimates::sides_text([("A", side(a)), ("B", side(b))])
}

/// One row's result of [`shifts`].
struct ShiftResult {
    cell: String,
    metric: Metric,
    shift: Option<crate::stats::Shift>,
    /// Holm-adjusted p.
    p: f64,
    verdict: crate::stats::CompareVerdict,
    /// With `too few runs` and values on both sides: repetitions per cell that could decide.
    repetitions_needed: Option<usize>,
}

/// Shift B - A with verdicts for `rows` (cell, metric, A values, B values), Holm-corrected per
/// metric across cells; `margin` by metric.
fn shifts(
    rows: Vec<(String, Metric, Vec<f64>, Vec<f64>)>,
    margin: impl Fn(Metric) -> Option<f64>,
) -> Vec<ShiftResult> {
    let mut out = Vec::new();
    for metric in Metric::ALL {
        let these: Vec<&(String, Metric, Vec<f64>, Vec<f64>)> =
            rows.iter().filter(|r| r.1 == *metric).collect();
        let s: Vec<Option<crate::stats::Shift>> =
            these.iter().map(|r| crate::stats::shift(&r.3, &r.2)).collect();
        let ps: Vec<f64> = s.iter().map(|s| s.map_or(1.0, |s| s.p)).collect();
        let adjusted = crate::stats::holm(&ps);
        let level = if these.len() > 1 {
            crate::stats::ALPHA / these.len() as f64
        } else {
            crate::stats::ALPHA
        };
        for ((r, s), p) in these.iter().zip(s).zip(adjusted) {
            let v = crate::stats::verdict::decide(s.as_ref(), p, level, crate::stats::ALPHA, margin(*metric))
                .as_compare();
            out.push(ShiftResult {
                cell: r.0.clone(),
                metric: *metric,
                shift: s,
                p,
                verdict: v,
                repetitions_needed: (v == crate::stats::CompareVerdict::TooFewRuns && s.is_some())
                    .then(|| crate::stats::repetitions_needed(level)),
            });
        }
    }
    out
}

fn margin_of(r: &Report) -> impl Fn(Metric) -> Option<f64> + '_ {
    move |m: Metric| match m.def().family {
        super::metrics::Family::Growth | super::metrics::Family::AfterClose => r.estimates.growth_margin,
        super::metrics::Family::Rate => r.estimates.rate_margin,
        super::metrics::Family::Other => None,
    }
}

/// Control-relative figures of both bundles: per cell compared against the control in both and
/// metric, the change from A to B of the cell's Hodges-Lehmann shift against its own bundle's
/// control, `(cell - control in B) - (cell - control in A)`.
///
/// Its interval combines the two bundles' exact intervals by Bonferroni's inequality: each at
/// `1 - 0.05 / (2k)` (`k` cells compared for the metric), `[low B - high A, high B - low A]`
/// covers the change with probability at least `1 - 0.05 / k`, and all `k` together at least 95%.
/// Both sides' uncertainty counts, the control's too: a difference of each run from a control
/// median taken as exact made a control whose median moved read as a change of the cell (a
/// `rerun` said `lower in B`). There is no p-value; the verdict is the interval's: `higher in B`
/// or `lower in B` when it excludes 0, `reproduced` when B sets a margin and it lies inside it,
/// `too few runs` when a side's runs cannot reach its level, else `no detectable change`.
fn control_relative(a: &Report, b: &Report) -> Vec<MetricRow> {
    let mut pairs = Vec::new();
    for e in &a.estimates.rows {
        let Some(metric) = e.metric() else { continue };
        let Some(eb) = b
            .estimates
            .rows
            .iter()
            .find(|x| x.cell == e.cell && x.metric == e.metric)
        else {
            continue;
        };
        pairs.push((
            e.cell.clone(),
            metric,
            (&e.cell, &e.control),
            (&eb.cell, &eb.control),
        ));
    }
    let margin = margin_of(b);
    let mut rows = Vec::new();
    for metric in Metric::ALL {
        let these: Vec<_> = pairs.iter().filter(|p| p.1 == *metric).collect();
        let side_alpha = crate::stats::ALPHA / (2.0 * these.len().max(1) as f64);
        for (cell, metric, (cell_a, control_a), (cell_b, control_b)) in these {
            let side = |r: &Report, cell: &str, control: &str| {
                crate::stats::shift::shift_at(
                    &run_values(r, cell, *metric),
                    &run_values(r, control, *metric),
                    side_alpha,
                )
            };
            let (sa, sb) = (side(a, cell_a, control_a), side(b, cell_b, control_b));
            let reachable = |s: &Option<crate::stats::Shift>| {
                s.is_some_and(|s| crate::stats::smallest_p(s.n_x, s.n_y) < side_alpha)
            };
            let decidable = reachable(&sa) && reachable(&sb);
            let combined = sa.zip(sb).map(|(sa, sb)| {
                (
                    sb.shift - sa.shift,
                    sb.ci_low - sa.ci_high,
                    sb.ci_high - sa.ci_low,
                    (1.0 - (1.0 - sa.confidence) - (1.0 - sb.confidence)).max(0.0),
                )
            });
            let verdict = match combined {
                Some((_, lo, hi, _)) if decidable => match margin(*metric) {
                    Some(m) if -m <= lo && hi <= m => crate::stats::CompareVerdict::Reproduced,
                    _ if lo > 0.0 => crate::stats::CompareVerdict::HigherInB,
                    _ if hi < 0.0 => crate::stats::CompareVerdict::LowerInB,
                    _ => crate::stats::CompareVerdict::NoDetectableChange,
                },
                _ => crate::stats::CompareVerdict::TooFewRuns,
            };
            rows.push(MetricRow {
                cell: cell.clone(),
                metric: format!("{} minus control", metric.key()),
                a: None,
                b: None,
                median_difference: None,
                ranges_overlap: None,
                shift: combined.map(|c| c.0),
                ci_low: combined.map(|c| c.1),
                ci_high: combined.map(|c| c.2),
                confidence: combined.map(|c| c.3),
                p: None,
                verdict: Some(verdict),
                repetitions_needed: (verdict == crate::stats::CompareVerdict::TooFewRuns
                    && combined.is_some())
                .then(|| crate::stats::repetitions_needed(side_alpha)),
                unusable_values: None,
            });
        }
    }
    rows
}

/// A row's verdict with what it needs said: the repetitions a `too few runs` would need, and
/// what the runs gave instead of usable values.
fn verdict_text(r: &MetricRow) -> String {
    super::render::with_needs(
        r.verdict.map_or("", |v| v.as_str()),
        r.repetitions_needed,
        r.unusable_values.as_deref(),
    )
}

/// One provenance fact that differs between the bundles.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct FactDifference {
    /// What differs (`revision`, `dirty`, `executor` (`local` or `slurm`), `nodes` (the nodes
    /// the runs ran on; a local bundle's host), `hostname`, `cpu-model`, `kernel`, `hwr-exp-version`, `hwr-exp-sha256`,
    /// `manifest-sha256`, `overrides` (`run --where/--repetitions/--fail-fast`, bundle.json
    /// `overrides`)).
    pub fact: String,
    /// Value in A (`unknown` when absent).
    pub a: String,
    /// Value in B.
    pub b: String,
}

/// The comparison of two bundles.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Comparison {
    /// Bundle A as given.
    pub a: String,
    /// Bundle B as given.
    pub b: String,
    /// Provenance facts that differ.
    pub differences: Vec<FactDifference>,
    /// Cells in both bundles, metric by metric.
    pub rows: Vec<MetricRow>,
    /// Per compared cell, the control-relative figures (run minus its bundle's control median),
    /// shift B - A with interval and verdict.
    pub control_relative: Vec<MetricRow>,
    /// Cells only in A.
    pub only_in_a: Vec<String>,
    /// Cells only in B.
    pub only_in_b: Vec<String>,
}

fn json_text(v: Option<&Json>) -> String {
    match v {
        None | Some(Json::Null) => "unknown".into(),
        Some(Json::String(s)) => s.clone(),
        Some(Json::Object(o)) => match o.get("release").and_then(Json::as_str) {
            Some(r) => r.to_string(),
            None => Json::Object(o.clone()).to_string(),
        },
        Some(other) => other.to_string(),
    }
}

/// host.json of a bundle, with provenance.json's `patch-sha256` and bundle.json's `experiment`
/// and `hwr-exp-sha256` (the binary that was `{hwr-exp}`) added, so that two bundles at the same revision and dirty state but with different uncommitted
/// changes, or of different experiments, are told apart.
fn host_of(dir: &Path) -> Result<Option<Json>, ReadError> {
    let bundle = Bundle::open(dir)?;
    let mut host = match bundle.host() {
        Ok(h) => h,
        Err(ReadError::Missing { .. }) => Json::Object(Default::default()),
        Err(e) => return Err(e),
    };
    if let Json::Object(map) = &mut host {
        if let Ok(patch) = bundle.recorded_patch_sha256() {
            map.insert("patch-sha256".into(), Json::String(patch));
        }
        map.insert(
            "experiment".into(),
            Json::String(bundle.info().experiment.clone()),
        );
        if let Some(sum) = &bundle.info().hwr_exp_sha256 {
            map.insert("hwr-exp-sha256".into(), Json::String(sum.clone()));
        }
        // [environments]: each environment's lock, so that other resolved versions show.
        let envs: Vec<String> = bundle
            .info()
            .environments
            .iter()
            .map(|(name, e)| format!("{name}={}", e.lock_sha256.chars().take(12).collect::<String>()))
            .collect();
        if !envs.is_empty() {
            map.insert("environments".into(), Json::String(envs.join(" ")));
        }
    }
    Ok(Some(host))
}

fn facts(r: &Report, host: Option<&Json>) -> Vec<(&'static str, String)> {
    let h = |k: &str| json_text(host.and_then(|h| h.get(k)));
    vec![
        ("experiment", h("experiment")),
        ("revision", r.revision.clone().unwrap_or_else(|| "unknown".into())),
        (
            "dirty",
            if r.provenance_recorded {
                r.dirty.map_or_else(|| "unknown".into(), |d| d.to_string())
            } else {
                "not recorded".into()
            },
        ),
        ("working-tree-patch-sha256", h("patch-sha256")),
        ("executor", r.executor.clone().unwrap_or_else(|| "local".into())),
        (
            "nodes",
            if r.nodes.is_empty() {
                format!("{} (the submitting host: local runs)", h("hostname"))
            } else {
                r.nodes.join(", ")
            },
        ),
        ("hostname", h("hostname")),
        ("cpu-model", h("cpu-model")),
        ("kernel", h("kernel")),
        ("hwr-exp-version", r.hwr_exp_version.clone()),
        ("hwr-exp-sha256", h("hwr-exp-sha256")),
        ("environments", h("environments")),
        ("manifest-sha256", r.manifest_sha256.clone()),
        ("overrides", overrides_text(r.overrides.as_ref())),
    ]
}

/// bundle.json `overrides` as the options that made them (`--where mode=reuse --repetitions 3
/// --fail-fast`), or `none`.
fn overrides_text(o: Option<&crate::bundle::Overrides>) -> String {
    let Some(o) = o else {
        return "none".into();
    };
    let mut parts: Vec<String> = o.where_.iter().map(|w| format!("--where {w}")).collect();
    if let Some(n) = o.repetitions {
        parts.push(format!("--repetitions {n}"));
    }
    if o.fail_fast {
        parts.push("--fail-fast".into());
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" ")
    }
}

fn cell_metrics(c: &CellStats) -> Vec<(String, Stats)> {
    let mut out: Vec<(String, Stats)> = Metric::ALL
        .iter()
        .filter(|m| m.def().compared)
        .filter_map(|m| Some((m.key().to_string(), *c.retention.get(m.key())?)))
        .collect();
    out.extend(c.metrics.iter().map(|(k, s)| (k.clone(), *s)));
    out.extend(c.run_stats.iter().map(|(k, s)| (k.clone(), *s)));
    out
}

/// Compares two reports (with the two bundles' host.json values, when present).
pub fn compare(a: &Report, host_a: Option<&Json>, b: &Report, host_b: Option<&Json>) -> Comparison {
    let differences = facts(a, host_a)
        .into_iter()
        .zip(facts(b, host_b))
        .filter(|((_, x), (_, y))| x != y)
        .map(|((fact, x), (_, y))| FactDifference {
            fact: fact.into(),
            a: x,
            b: y,
        })
        .collect();
    let mut rows = Vec::new();
    let mut only_in_a = Vec::new();
    for ca in &a.cells {
        let Some(cb) = b.cells.iter().find(|c| c.cell == ca.cell) else {
            only_in_a.push(ca.cell.clone());
            continue;
        };
        let ma = cell_metrics(ca);
        let mb: BTreeMap<String, Stats> = cell_metrics(cb).into_iter().collect();
        let mut names: Vec<String> = ma.iter().map(|(k, _)| k.clone()).collect();
        for (k, _) in cell_metrics(cb) {
            if !names.contains(&k) {
                names.push(k);
            }
        }
        // Metrics without an aggregate on either side because their values are unusable: a row
        // that says so, not none.
        let unaggregated = Metric::ALL
            .iter()
            .filter(|m| m.def().compared)
            .map(|m| m.key().to_string())
            .chain(ca.unusable_metrics.keys().cloned())
            .chain(cb.unusable_metrics.keys().cloned())
            .collect::<Vec<_>>();
        for k in unaggregated {
            if !names.contains(&k) && unusable_in(a, b, &ca.cell, &k).is_some() {
                names.push(k);
            }
        }
        for name in names {
            let sa = ma.iter().find(|(k, _)| *k == name).map(|(_, s)| *s);
            let sb = mb.get(&name).copied();
            let unusable_values = unusable_in(a, b, &ca.cell, &name);
            rows.push(MetricRow {
                cell: ca.cell.clone(),
                metric: name,
                a: sa,
                b: sb,
                median_difference: sa.zip(sb).map(|(x, y)| y.median - x.median),
                ranges_overlap: sa.zip(sb).map(|(x, y)| x.overlaps(&y)),
                shift: None,
                ci_low: None,
                ci_high: None,
                confidence: None,
                p: None,
                verdict: None,
                repetitions_needed: None,
                unusable_values,
            });
        }
    }
    let raw: Vec<(String, Metric, Vec<f64>, Vec<f64>)> = rows
        .iter()
        .filter_map(|r: &MetricRow| {
            let m = Metric::from_key(&r.metric)?;
            Some((
                r.cell.clone(),
                m,
                run_values(a, &r.cell, m),
                run_values(b, &r.cell, m),
            ))
        })
        .collect();
    for r in shifts(raw, margin_of(b)) {
        if let Some(row) = rows
            .iter_mut()
            .find(|x| x.cell == r.cell && x.metric == r.metric.key())
        {
            row.shift = r.shift.map(|s| s.shift);
            row.ci_low = r.shift.map(|s| s.ci_low);
            row.ci_high = r.shift.map(|s| s.ci_high);
            row.p = r.shift.map(|_| r.p);
            row.verdict = Some(r.verdict);
            row.repetitions_needed = r.repetitions_needed;
        }
    }
    let control_relative = control_relative(a, b);
    let only_in_b = b
        .cells
        .iter()
        .filter(|cb| !a.cells.iter().any(|ca| ca.cell == cb.cell))
        .map(|c| c.cell.clone())
        .collect();
    Comparison {
        a: a.bundle.clone(),
        b: b.bundle.clone(),
        differences,
        rows,
        control_relative,
        only_in_a,
        only_in_b,
    }
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
    if !c.differences.is_empty() {
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
        sections.push(s);
    }
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
        v.rows.push(vec![
            r.cell.clone(),
            label,
            format!(
                "{}/{}",
                r.a.map_or_else(|| "-".into(), |s| s.n.to_string()),
                r.b.map_or_else(|| "-".into(), |s| s.n.to_string())
            ),
            super::render::interval_text(&e),
            r.p.map_or_else(|| "-".into(), fmt_num),
            verdict_text(r),
        ]);
    }
    v.notes.push(
        "p: permutation, exact with ties, Holm-corrected across cells per metric; `reproduced` needs [report] equivalence-margin in B's manifest; X - control: the change of the cell's shift against its own bundle's control, its interval the two bundles' exact intervals combined (Bonferroni: at least 1 - 0.05/k for k cells), no p".into(),
    );
    if v.rows.is_empty() {
    } else if narrow {
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
    } else {
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
        sections.push(s);
    }
    render_sections(&pre, sections, style)
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
