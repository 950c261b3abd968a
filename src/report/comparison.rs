//! What `hwr-exp compare A B` finds: the same cells of two bundles side by side ([`Comparison`]):
//! per cell and metric both sides' stats, the difference of medians and the shift B - A over runs
//! with its interval, the control-relative figures, the provenance facts that differ and the cells
//! in one bundle only. `compare` renders it; `html` draws its page.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value as Json;

use super::metrics::Metric;
use super::model::{CellStats, Report, Stats};
use crate::bundle::read::{Bundle, ReadError};

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

/// host.json of a bundle (`None` without one), with provenance.json's `patch-sha256` and bundle.json's `experiment`
/// and `hwr-exp-sha256` (the binary that was `{hwr-exp}`) added, so that two bundles at the same revision and dirty state but with different uncommitted
/// changes, or of different experiments, are told apart.
pub fn host_of(dir: &Path) -> Result<Option<Json>, ReadError> {
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
