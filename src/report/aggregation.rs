//! Aggregates of a report's runs: per cell min / median / max across the repetitions left in
//! ([`cells`]), the matrix key that names the mode ([`mode_key`]), and per size each mode's median
//! growth against the control: see [`super::estimates`]. Pure functions of the run summaries.

use std::collections::BTreeMap;

use super::metrics::Metric;
use super::model::{CellStats, RunValues, Stats, cell_label};

/// Columns of [`RunValues`] after the retention metrics ([`RunValues::value`]).
const WALL: usize = 0;
const PEAK: usize = 1;

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
pub fn mode_key(keys: &[String], values: &RunValues) -> Option<String> {
    if keys.iter().any(|k| k == "mode") {
        return Some("mode".into());
    }
    values.mode_candidate()
}

/// Aggregates per cell, in order of the cells' first finished run: runs counted, runs included
/// (not excluded), and min / median / max of every retention metric, every numeric `[report]`
/// metric (`pointers`: name, JSON Pointer) and `wall-seconds` / `peak-rss-bytes` over the included
/// runs. `keys` are the matrix keys in manifest order, `mode_key` the key naming the mode.
pub fn cells(
    values: &RunValues,
    keys: &[String],
    mode_key: Option<&str>,
    pointers: &[(String, String)],
) -> Vec<CellStats> {
    let mut order: Vec<usize> = (0..values.cells.len())
        .filter(|&c| values.cells[c].first_finished().is_some())
        .collect();
    order.sort_by_key(|&c| values.cells[c].first_finished());
    let mut slot = vec![usize::MAX; values.cells.len()];
    for (i, &c) in order.iter().enumerate() {
        slot[c] = i;
    }
    let mut runs = vec![0usize; order.len()];
    let mut included = vec![0usize; order.len()];
    // Included runs of each shown cell, by slot.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    for (i, (cell, is_included)) in values.run_cells().enumerate() {
        let s = slot[cell];
        runs[s] += 1;
        if is_included {
            included[s] += 1;
            members[s].push(i);
        }
    }
    let mut column = Vec::new();
    let mut stats_of = |members: &[usize], c: usize| {
        column.clear();
        column.extend(members.iter().filter_map(|&i| values.value(i, c)));
        Stats::of(&mut column)
    };
    order
        .iter()
        .enumerate()
        .map(|(s, &c)| {
            let entry = &values.cells[c];
            let mut stats = CellStats {
                cell: entry.label.clone(),
                mode: values.cell_mode(entry, mode_key),
                size: {
                    let s = cell_label(&entry.cell, keys, mode_key);
                    if s.is_empty() { "all".into() } else { s }
                },
                runs: runs[s],
                included: included[s],
                retention: BTreeMap::new(),
                metrics: BTreeMap::new(),
                run_stats: BTreeMap::new(),
                unusable_metrics: BTreeMap::new(),
            };
            let m = &members[s];
            for (k, metric) in Metric::ALL.iter().enumerate() {
                // A run without retention numbers has none of these (NaN), as before.
                if let Some(st) = stats_of(m, k) {
                    stats.retention.insert(metric.key().into(), st);
                }
            }
            let base = Metric::ALL.len() + 2;
            for (k, (name, _)) in pointers.iter().enumerate() {
                if let Some(st) = stats_of(m, base + k) {
                    stats.metrics.insert(name.clone(), st);
                }
            }
            for (k, (name, _)) in pointers.iter().enumerate() {
                let gave = m.iter().filter_map(|&i| values.gave(i, base + k));
                if let Some(text) = super::metrics::runs_gave(gave) {
                    stats.unusable_metrics.insert(name.clone(), text);
                }
            }
            if let Some(st) = stats_of(m, Metric::ALL.len() + WALL) {
                stats.run_stats.insert("wall-seconds".into(), st);
            }
            if let Some(st) = stats_of(m, Metric::ALL.len() + PEAK) {
                stats.run_stats.insert("peak-rss-bytes".into(), st);
            }
            stats
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
