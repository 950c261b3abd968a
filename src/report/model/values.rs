//! The compact per-run numbers of every finished run of a bundle ([`RunValues`]): what the
//! aggregates, the estimates against the control and `compare` read, filled one run at a time as
//! the runs are read. Units: bytes, seconds; NaN for a figure a run lacks.

use std::collections::{BTreeMap, HashMap};

use super::run::{CONTROL_MODE, MetricValue, RunSummary};
use crate::manifest::Value;
use crate::report::metrics::{self, Metric};

/// One cell as the aggregates know it: its label, its matrix values, and what its runs said.
#[derive(Debug, Clone)]
pub struct CellEntry {
    /// `key=value` pairs in matrix key order ([`RunSummary::cell_label`]).
    pub label: String,
    /// Matrix values.
    pub cell: BTreeMap<String, Value>,
    /// Plan position (0-based among the finished runs) of the cell's first finished run, `None`
    /// when none of its runs finished.
    first_finished: Option<usize>,
    /// `arguments.mode` of the output of the cell's first finished run.
    first_retention_mode: Option<String>,
    /// Whether a run of the cell has `arguments.mode = reuse` in its output.
    retention_reuse: bool,
    /// Runs of the cell pushed, finished or not: its planned runs (the look a sequential
    /// design's level is taken at; finished runs only when pushed by
    /// [`RunValues::push_finished`]).
    pub planned: usize,
}

/// One finished run in [`RunValues`]: a few indices and flags; its numbers are a row of
/// [`RunValues`]' flat table.
#[derive(Debug, Clone, Copy)]
struct LeanRun {
    cell: u32,
    /// Index into [`RunValues::nodes`], `u32::MAX` for none.
    node: u32,
    included: bool,
    retention: bool,
}

/// The per-run numbers the aggregates (per-cell stats, estimates against the control, `compare`)
/// need, kept compactly for every finished run of a bundle: a cell index, a node index, two flags
/// and one `f64` per retention metric, per `[report]` metric and for wall seconds and peak RSS
/// (NaN for a figure the run lacks). About 200 bytes a run, against a few KB for a [`RunSummary`];
/// runs that did not run add only their cell (while the bundle is small, see
/// [`RunValues::forget_unfinished_cells`]).
#[derive(Debug, Clone, Default)]
pub struct RunValues {
    /// Cells in order of their first run in the plan.
    pub cells: Vec<CellEntry>,
    by_label: HashMap<String, u32>,
    runs: Vec<LeanRun>,
    values: Vec<f64>,
    width: usize,
    pointers: Vec<String>,
    /// What runs gave instead of a usable value, by run (aligned with `runs`): an index into
    /// `gave_rows`, [`NO_GAVE`] for a run that gave nothing unusable (see [`RunValues::gave`]).
    /// Rows repeat across runs (the same metrics unusable for the same reason), so each distinct
    /// row is kept once: 4 bytes a run.
    gave: Vec<u32>,
    /// Distinct rows of what runs gave: one interned text (index into `gave_texts`) per column.
    gave_rows: Vec<Box<[Option<u32>]>>,
    gave_row_index: HashMap<Box<[Option<u32>]>, u32>,
    gave_texts: Vec<String>,
    gave_index: HashMap<String, u32>,
    /// The finished runs of each cell (indices into `runs`), made by [`RunValues::finish`].
    members: Vec<Vec<u32>>,
    /// Distinct nodes, in order of first appearance.
    nodes: Vec<String>,
    node_index: HashMap<String, u32>,
    /// Matrix keys that equal `arguments.mode` of every retention output so far (mode key
    /// detection); `None` before the first output with a mode.
    mode_candidates: Option<Vec<String>>,
}

/// [`RunValues`]' `gave` of a run that gave nothing unusable.
const NO_GAVE: u32 = u32::MAX;

impl CellEntry {
    /// Plan position (0-based among the finished runs) of the cell's first finished run, `None`
    /// when none of its runs finished.
    pub fn first_finished(&self) -> Option<usize> {
        self.first_finished
    }
}

impl RunValues {
    /// An empty table for a bundle with matrix `keys` and `[report] metrics` `pointers`.
    pub fn new(pointers: &[(String, String)]) -> RunValues {
        RunValues {
            width: Metric::ALL.len() + 2 + pointers.len(),
            pointers: pointers.iter().map(|(n, _)| n.clone()).collect(),
            ..RunValues::default()
        }
    }

    fn cell_of(&mut self, r: &RunSummary) -> u32 {
        if let Some(&i) = self.by_label.get(&r.cell_label) {
            return i;
        }
        let i = self.cells.len() as u32;
        self.cells.push(CellEntry {
            label: r.cell_label.clone(),
            cell: r.cell.clone(),
            first_finished: None,
            first_retention_mode: None,
            retention_reuse: false,
            planned: 0,
        });
        self.by_label.insert(r.cell_label.clone(), i);
        i
    }

    /// Adds one run (finished or not) in plan order; `keys` are the matrix keys.
    pub fn push(&mut self, r: &RunSummary, keys: &[String]) {
        let cell = self.cell_of(r);
        self.cells[cell as usize].planned += 1;
        if !r.finished {
            return;
        }
        let position = self.runs.len();
        let entry = &mut self.cells[cell as usize];
        let mode = r.retention.as_ref().and_then(|ret| ret.mode.as_deref());
        if entry.first_finished.is_none() {
            entry.first_finished = Some(position);
            entry.first_retention_mode = mode.map(str::to_string);
        }
        if let Some(m) = mode {
            entry.retention_reuse |= m == CONTROL_MODE;
            let candidates = self.mode_candidates.get_or_insert_with(|| keys.to_vec());
            candidates.retain(|k| {
                r.cell.get(k).is_some_and(|v| match v {
                    Value::Str(s) => s == m,
                    other => other.to_string() == m,
                })
            });
        }
        let node = match &r.node {
            None => u32::MAX,
            Some(n) => match self.node_index.get(n) {
                Some(&i) => i,
                None => {
                    let i = self.nodes.len() as u32;
                    self.nodes.push(n.clone());
                    self.node_index.insert(n.clone(), i);
                    i
                }
            },
        };
        self.runs.push(LeanRun {
            cell,
            node,
            included: r.excluded.is_none(),
            retention: r.retention.is_some(),
        });
        let none = f64::NAN;
        match &r.retention {
            Some(ret) => self
                .values
                .extend(Metric::ALL.iter().map(|m| m.of(ret).unwrap_or(none))),
            None => self.values.extend(std::iter::repeat_n(none, Metric::ALL.len())),
        }
        self.push_gave(r);
        self.values.push(r.wall_seconds.unwrap_or(none));
        self.values.push(r.peak_rss_bytes.map_or(none, |b| b as f64));
        for name in &self.pointers {
            self.values
                .push(match (r.metrics.get(name), r.unusable_metrics.get(name)) {
                    (Some(Some(MetricValue::Number(x))), None) => *x,
                    _ => none,
                });
        }
    }

    /// Records what run `r` (the last pushed) gave instead of a usable value: per retention
    /// metric as the estimates count it (a run that finished ok: its output's unusable values, else,
    /// when included, the metric's own reason), per `[report]` metric its unusable kind.
    fn push_gave(&mut self, r: &RunSummary) {
        let mut row: smallvec::SmallVec<[Option<&str>; 16]> = smallvec::smallvec![None; self.width];
        if r.outcome == Some(crate::bundle::Outcome::Ok) {
            for (k, m) in Metric::ALL.iter().enumerate() {
                row[k] = match (&r.unusable_output, &r.excluded, &r.retention) {
                    (Some(u), _, _) => Some(u.as_str()),
                    (None, Some(_), _) | (None, None, None) => None,
                    (None, None, Some(ret)) => m.unusable(ret),
                };
            }
        }
        let base = Metric::ALL.len() + 2;
        for (k, name) in self.pointers.iter().enumerate() {
            row[base + k] = r.unusable_metrics.get(name).map(String::as_str);
        }
        if row.iter().all(Option::is_none) {
            self.gave.push(NO_GAVE);
            return;
        }
        let ids: Box<[Option<u32>]> = row
            .into_iter()
            .map(|text| {
                text.map(|t| match self.gave_index.get(t) {
                    Some(&i) => i,
                    None => {
                        let i = self.gave_texts.len() as u32;
                        self.gave_texts.push(t.to_string());
                        self.gave_index.insert(t.to_string(), i);
                        i
                    }
                })
            })
            .collect();
        let row = match self.gave_row_index.get(&ids) {
            Some(&row) => row,
            None => {
                let row = self.gave_rows.len() as u32;
                self.gave_rows.push(ids.clone());
                self.gave_row_index.insert(ids, row);
                row
            }
        };
        self.gave.push(row);
    }

    /// What finished run `run` gave instead of a usable value in `column` (a [`Metric`] as
    /// `metric as usize`, or `Metric::ALL.len() + 2 + k` for the k-th `[report]` metric).
    pub fn gave(&self, run: usize, column: usize) -> Option<&str> {
        let row = *self.gave.get(run)?;
        let id = (*self.gave_rows.get(row as usize)?.get(column)?)?;
        Some(&self.gave_texts[id as usize])
    }

    /// The text of what the finished runs `runs` gave instead of a usable value of `metric`
    /// ([`metrics::runs_gave`]); `None` when none did.
    pub fn unusable_values(&self, runs: impl IntoIterator<Item = usize>, metric: Metric) -> Option<String> {
        if self.gave_rows.is_empty() {
            // No run gave anything unusable: nothing to look up run by run.
            return None;
        }
        metrics::runs_gave(runs.into_iter().filter_map(|r| self.gave(r, metric as usize)))
    }

    /// [`RunValues::unusable_values`] of every finished run of the cell labelled `label`.
    pub fn cell_unusable_values(&self, label: &str, metric: Metric) -> Option<String> {
        let &cell = self.by_label.get(label)?;
        self.unusable_values(self.members_of(cell as usize), metric)
    }

    /// Every finished run of cell `cell` (0-based indices).
    pub fn cell_runs(&self, cell: usize) -> Vec<usize> {
        self.members_of(cell).collect()
    }

    /// Drops the cells none of whose runs finished (a huge bundle whose runs mostly did not run
    /// keeps only the cells that have something to aggregate); later unfinished runs add no cell
    /// either once this was called.
    pub fn forget_unfinished_cells(&mut self) {
        let mut remap = vec![u32::MAX; self.cells.len()];
        let mut kept = Vec::new();
        for (i, c) in std::mem::take(&mut self.cells).into_iter().enumerate() {
            if c.first_finished.is_some() {
                remap[i] = kept.len() as u32;
                kept.push(c);
            }
        }
        self.cells = kept;
        for r in &mut self.runs {
            r.cell = remap[r.cell as usize];
        }
        self.by_label = self
            .cells
            .iter()
            .enumerate()
            .map(|(i, c)| (c.label.clone(), i as u32))
            .collect();
    }

    /// Adds one finished run only (the cells of unfinished runs are not kept: see
    /// [`RunValues::forget_unfinished_cells`]).
    pub fn push_finished(&mut self, r: &RunSummary, keys: &[String]) {
        if r.finished {
            self.push(r, keys);
        }
    }

    /// Indexes the runs by cell; call once every run is pushed.
    pub fn finish(&mut self) {
        self.members = vec![Vec::new(); self.cells.len()];
        for (i, r) in self.runs.iter().enumerate() {
            self.members[r.cell as usize].push(i as u32);
        }
    }

    fn members_of(&self, cell: usize) -> impl Iterator<Item = usize> + '_ {
        self.members.get(cell).into_iter().flatten().map(|&i| i as usize)
    }

    /// Finished runs in the table.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Each finished run's cell (index into [`RunValues::cells`]) and whether it is included
    /// in the aggregates, in plan order.
    pub fn run_cells(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.runs.iter().map(|r| (r.cell as usize, r.included))
    }

    /// The first matrix key that equals `arguments.mode` of every retention output (mode key
    /// detection); `None` when none does or no output has a mode.
    pub fn mode_candidate(&self) -> Option<String> {
        self.mode_candidates.as_ref()?.first().cloned()
    }

    /// Whether no run finished.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The value in `column` of finished run `run`: the retention metrics in [`Metric::ALL`]
    /// order, then wall seconds and peak RSS, then the `[report]` metrics; `None` when the run
    /// lacks it.
    pub fn value(&self, run: usize, column: usize) -> Option<f64> {
        let v = self.values[run * self.width + column];
        (!v.is_nan()).then_some(v)
    }

    /// The value of `metric` of finished run `run` (0-based among the finished runs).
    pub fn metric(&self, run: usize, metric: Metric) -> Option<f64> {
        self.value(run, metric as usize)
    }

    /// The `[report] metrics` names, in manifest order.
    pub fn pointers(&self) -> &[String] {
        &self.pointers
    }

    /// The value of the `k`-th `[report] metrics` pointer of finished run `run`, when a number.
    pub fn pointer(&self, run: usize, k: usize) -> Option<f64> {
        self.value(run, Metric::ALL.len() + 2 + k)
    }

    /// [`RunValues::unusable_values`] of the `k`-th `[report] metrics` pointer.
    pub fn pointer_unusable_values(&self, runs: impl IntoIterator<Item = usize>, k: usize) -> Option<String> {
        if self.gave_rows.is_empty() {
            return None;
        }
        let column = Metric::ALL.len() + 2 + k;
        metrics::runs_gave(runs.into_iter().filter_map(|r| self.gave(r, column)))
    }

    /// The node of finished run `run`.
    pub fn node(&self, run: usize) -> Option<&str> {
        self.nodes.get(self.runs[run].node as usize).map(String::as_str)
    }

    /// The sorted distinct nodes of every run.
    pub fn all_nodes(&self) -> Vec<String> {
        let mut v = self.nodes.clone();
        v.sort();
        v
    }

    /// The finished runs (0-based indices) of cell `cell` that are included and have retention
    /// numbers: the runs the estimates use.
    pub fn estimate_runs(&self, cell: usize) -> Vec<usize> {
        self.members_of(cell)
            .filter(|&i| self.runs[i].included && self.runs[i].retention)
            .collect()
    }

    /// The finite values of `metric` of the included runs of the cell labelled `label` (for
    /// `compare`).
    pub fn cell_values(&self, label: &str, metric: Metric) -> Vec<f64> {
        let Some(&cell) = self.by_label.get(label) else {
            return Vec::new();
        };
        self.members_of(cell as usize)
            .filter(|&i| self.runs[i].included)
            .filter_map(|i| self.metric(i, metric))
            .filter(|v| metrics::usable(*v))
            .collect()
    }

    /// The mode of a cell as a run of it names it ([`RunSummary::mode`]): its value of the mode
    /// key, else `arguments.mode` of its first finished run.
    pub fn cell_mode(&self, cell: &CellEntry, mode_key: Option<&str>) -> Option<String> {
        mode_key
            .and_then(|k| cell.cell.get(k))
            .map(|v| v.to_string())
            .or_else(|| cell.first_retention_mode.clone())
    }

    /// Whether some run is in the control mode `CONTROL_MODE` by key `k` (its cell's value, or
    /// its output's `arguments.mode` when the cell lacks the key).
    pub fn any_control_mode(&self, k: &str) -> bool {
        self.cells.iter().any(|c| match c.cell.get(k) {
            Some(v) => v.to_string() == CONTROL_MODE,
            None => c.retention_reuse,
        })
    }
}
