//! Aggregates of a report's runs: per cell min / median / max across the repetitions left in
//! ([`cells`]), the matrix key that names the mode ([`mode_key`]), and per size each mode's median
//! growth against the control: see [`super::estimates`]. Pure functions of the run summaries.

use std::collections::{BTreeMap, HashMap};

use super::metrics::Metric;
use super::model::{CellStats, MetricValue, RunSummary, Stats, cell_label};

impl Stats {
    /// Stats of the values; `None` when there are none.
    pub fn of(values: &mut [f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Some(Stats {
            n,
            min: values[0],
            median,
            max: values[n - 1],
        })
    }
}

/// The mode key: `mode` when it is a matrix key, else a key whose value equals every retention
/// output's `arguments.mode`.
pub fn mode_key(keys: &[String], runs: &[RunSummary]) -> Option<String> {
    if keys.iter().any(|k| k == "mode") {
        return Some("mode".into());
    }
    let with_mode: Vec<(&RunSummary, &str)> = runs
        .iter()
        .filter_map(|r| Some((r, r.retention.as_ref()?.mode.as_deref()?)))
        .collect();
    if with_mode.is_empty() {
        return None;
    }
    keys.iter()
        .find(|k| {
            with_mode
                .iter()
                .all(|(r, m)| r.cell.get(*k).is_some_and(|v| v.to_string() == *m))
        })
        .cloned()
}

/// Aggregates per cell, in order of the cells' first appearance in `runs`: runs counted, runs
/// included (not excluded), and min / median / max of every retention metric, every numeric
/// `[report]` metric (`pointers`: name, JSON Pointer) and `wall-seconds` / `peak-rss-bytes` over
/// the included runs. `keys` are the matrix keys in manifest order, `mode_key` the key naming the mode.
pub fn cells(
    runs: &[RunSummary],
    keys: &[String],
    mode_key: Option<&str>,
    pointers: &[(String, String)],
) -> Vec<CellStats> {
    struct Accumulator {
        stats: CellStats,
        retention: Vec<Vec<f64>>,
        metrics: Vec<Vec<f64>>,
        unusable: Vec<Vec<String>>,
        wall: Vec<f64>,
        peak: Vec<f64>,
    }
    let mut order: Vec<Accumulator> = Vec::new();
    let mut by_label: HashMap<String, usize> = HashMap::new();
    for r in runs.iter().filter(|r| r.finished) {
        let i = *by_label.entry(r.cell_label.clone()).or_insert_with(|| {
            order.push(Accumulator {
                stats: CellStats {
                    cell: r.cell_label.clone(),
                    mode: r.mode(mode_key),
                    size: {
                        let s = cell_label(&r.cell, keys, mode_key);
                        if s.is_empty() { "all".into() } else { s }
                    },
                    runs: 0,
                    included: 0,
                    retention: BTreeMap::new(),
                    metrics: BTreeMap::new(),
                    run_stats: BTreeMap::new(),
                    unusable_metrics: BTreeMap::new(),
                },
                retention: vec![Vec::new(); Metric::ALL.len()],
                wall: Vec::new(),
                peak: Vec::new(),
                metrics: vec![Vec::new(); pointers.len()],
                unusable: vec![Vec::new(); pointers.len()],
            });
            order.len() - 1
        });
        let acc = &mut order[i];
        acc.stats.runs += 1;
        if r.excluded.is_some() {
            continue;
        }
        acc.stats.included += 1;
        acc.wall.extend(r.wall_seconds);
        acc.peak.extend(r.peak_rss_bytes.map(|b| b as f64));
        if let Some(ret) = &r.retention {
            for (m, values) in Metric::ALL.iter().zip(&mut acc.retention) {
                values.extend(m.of(ret));
            }
        }
        for (m, (name, _)) in pointers.iter().enumerate() {
            match (r.metrics.get(name), r.unusable_metrics.get(name)) {
                (_, Some(kind)) => acc.unusable[m].push(kind.clone()),
                (Some(Some(MetricValue::Number(x))), None) => acc.metrics[m].push(*x),
                _ => {}
            }
        }
    }
    order
        .into_iter()
        .map(|mut acc| {
            for (m, values) in Metric::ALL.iter().zip(&mut acc.retention) {
                if let Some(s) = Stats::of(values) {
                    acc.stats.retention.insert(m.key().into(), s);
                }
            }
            for (m, values) in acc.metrics.iter_mut().enumerate() {
                if let Some(s) = Stats::of(values) {
                    acc.stats.metrics.insert(pointers[m].0.clone(), s);
                }
            }
            for (m, kinds) in acc.unusable.iter().enumerate() {
                if let Some(text) = super::metrics::runs_gave(kinds.iter().map(String::as_str)) {
                    acc.stats.unusable_metrics.insert(pointers[m].0.clone(), text);
                }
            }
            if let Some(s) = Stats::of(&mut acc.wall) {
                acc.stats.run_stats.insert("wall-seconds".into(), s);
            }
            if let Some(s) = Stats::of(&mut acc.peak) {
                acc.stats.run_stats.insert("peak-rss-bytes".into(), s);
            }
            acc.stats
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_median_max() {
        let s = Stats::of(&mut [3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.min, s.median, s.max), (4, 1.0, 2.5, 10.0));
        assert!(s.overlaps(&Stats::of(&mut [10.0, 20.0]).unwrap()));
        assert!(!s.overlaps(&Stats::of(&mut [10.5]).unwrap()));
        assert!(Stats::of(&mut []).is_none());
    }
}
