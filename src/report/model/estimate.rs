//! What the estimates against the control are (DESIGN 9): the control cell, one [`Estimate`] per
//! compared cell and metric, one [`CellVerdict`] per compared cell; `estimates` computes them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::metrics::{ByteMeasure, Family, Metric};
use crate::stats::Verdict;

/// The control cell of a report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Control {
    /// Matrix keys and values of the control cell, sorted by key; cells match them by
    /// [`crate::manifest::Value::same_cell`]. JSON: an object of key to the value's text.
    #[serde(serialize_with = "values_as_text")]
    pub values: BTreeMap<String, crate::manifest::Value>,
    /// `manifest` (`[report] control`) or `default` (mode = reuse).
    pub source: &'static str,
}

/// The control's values as JSON `{ "KEY": "TEXT" }`.
fn values_as_text<S: serde::Serializer>(
    values: &BTreeMap<String, crate::manifest::Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(values.iter().map(|(k, v)| (k, v.to_string())))
}

impl Control {
    /// `key = value` pairs, comma separated.
    pub fn text(&self) -> String {
        self.values
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One metric of one compared cell against its control (JSON names of DESIGN 9).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Estimate {
    /// The compared cell (`key=value ...`).
    pub cell: String,
    /// Its control cell.
    pub control: String,
    /// Metric key ([`crate::report::metrics::Def::key`]).
    pub metric: String,
    /// Runs of the cell with the metric.
    pub n_cell: usize,
    /// Runs of the control with the metric.
    pub n_control: usize,
    /// Hodges-Lehmann shift, cell minus control (the metric's unit); `None` when a side is empty.
    pub shift: Option<f64>,
    /// Lower end of the interval.
    pub ci_low: Option<f64>,
    /// Upper end of the interval.
    pub ci_high: Option<f64>,
    /// The interval's confidence (0.95 where the sample sizes reach it).
    pub confidence: Option<f64>,
    /// Two-sided permutation p-value.
    pub p: Option<f64>,
    /// `p` after the estimates' correction ([`Estimates::correction`]): Holm within the cell
    /// over the measure's growth and rate, times the compared cells (Bonferroni), at most 1;
    /// compared with the cell's level ([`CellVerdict::level`] times the compared cells).
    pub p_adjusted: Option<f64>,
    /// `true`: exact distributions; `false`: normal approximation (more than
    /// [`crate::stats::shift::EXACT_MAX_RUNS`] runs in the two cells).
    pub exact: Option<bool>,
    /// The equivalence margin that applies (bytes, or bytes per 1000 iterations).
    pub margin: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
    /// With `too few runs`: repetitions per cell that could reach the level; `None` when a side
    /// has no usable value because its runs gave none (more runs of the same would not help:
    /// [`Estimate::unusable_values`] says what they gave).
    pub repetitions_needed: Option<usize>,
    /// The runs of each side that finished ok but gave no usable value of the metric, by what
    /// they gave: `cell: 2 runs gave null for private_bytes; control: 1 run gave a string for
    /// private_bytes`. Absent when every such run gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable_values: Option<String>,
    /// The nodes the cell's runs ran on (run.json `node`), sorted; empty for local runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cell_nodes: Vec<String>,
    /// The nodes the control's runs ran on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub control_nodes: Vec<String>,
    /// In [`Estimates::per_node`]: the one node whose runs (of both sides) this row uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Estimate {
    /// `ci-high - ci-low`.
    pub fn width(&self) -> Option<f64> {
        Some(self.ci_high? - self.ci_low?)
    }

    /// The metric.
    pub fn metric(&self) -> Option<Metric> {
        Metric::from_key(&self.metric)
    }
}

/// The estimates of a report.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Estimates {
    /// The control cell, `None` when there is none.
    pub control: Option<Control>,
    /// Why there is no control, or which control keys are unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_control: Option<String>,
    /// Cells compared with their control.
    pub compared_cells: usize,
    /// What the verdict judges (`[report] verdict-metric`): `anonymous` (the default),
    /// `private`, `rss`, `pss-anon`, `file-backed` or a `[report] metrics` name.
    pub verdict_metric: String,
    /// The multiplicity control: `bonferroni across cells, holm within` with several compared
    /// cells (each cell at level / k; within a cell Holm over a measure's growth and rate),
    /// `holm within` with one.
    pub correction: &'static str,
    /// Each cell's level under a fixed design: 0.05 divided by the compared cells (Bonferroni).
    /// Within a cell the smaller p of growth and rate is compared with half of it, the other
    /// with it (Holm). A sequential design's cells each have their own ([`CellVerdict::level`]).
    pub level: f64,
    /// Growth / after-close margin, bytes.
    pub growth_margin: Option<f64>,
    /// Rate margin, bytes per 1000 iterations.
    pub rate_margin: Option<f64>,
    /// One row per compared cell and metric, cells in plan order, metrics in table order.
    pub rows: Vec<Estimate>,
    /// Cells whose group has no control cell.
    pub without_control: Vec<String>,
    /// When the runs span more than one node: the same estimates computed within each node
    /// (both sides' runs on that node only; Holm across the cells compared on it), one row per
    /// node, compared cell and metric, for the nodes where a cell and its control both ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_node: Vec<Estimate>,
    /// One warning per compared cell whose runs ran on other nodes than its control's: its
    /// pooled estimate compares hosts as well as the cells.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_warnings: Vec<String>,
    /// One verdict per compared cell, in plan order: the verdict table's, the one adaptive
    /// repetitions and `bisect` decide by ([`CellVerdict`]).
    pub cells: Vec<CellVerdict>,
}

impl Estimates {
    /// The verdict of the compared cell `cell` ([`Estimates::cells`]); `None` for a cell not
    /// compared.
    pub fn cell_verdict(&self, cell: &str) -> Option<&CellVerdict> {
        self.cells.iter().find(|c| c.cell == cell)
    }

    /// The `metric` of the verdict metric's growth rows (`anonymous-growth-bytes`), or the
    /// pointer's name for a `[report] metrics` verdict metric: the rows a cell's verdict is
    /// shown with (interval plot, `bisect`'s evidence).
    pub fn verdict_growth_key(&self) -> String {
        ByteMeasure::from_name(&self.verdict_metric)
            .map_or_else(|| self.verdict_metric.clone(), |b| b.growth().key().to_string())
    }

    /// What the verdict's growth rows are, for a title: `anonymous growth`.
    pub fn verdict_growth_label(&self) -> String {
        ByteMeasure::from_name(&self.verdict_metric).map_or_else(
            || self.verdict_metric.clone(),
            |b| b.growth().def().label.to_string(),
        )
    }
}

/// The verdict of one compared cell (JSON `estimates.cells`) on the verdict metric: its growth
/// and rate, decided under one multiplicity control ([`Estimates::correction`]), give one word
/// ([`crate::report::estimates::combine`]): a decided figure's (`above control` / `below control`; the growth's when both
/// are decided), else `equivalent` when the growth is within the margin, else `no detectable
/// difference`, else `too few runs`. Where the two figures do not say the same, `reason` says
/// why (`rate within noise`, `growth above control, rate below control: ...`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CellVerdict {
    /// The compared cell (`key=value ...`).
    pub cell: String,
    /// Its control cell.
    pub control: String,
    /// The cell's verdict.
    pub verdict: Verdict,
    /// Which figure gave it: the verdict metric's growth (`anonymous-growth-bytes`), or its
    /// rate (`anonymous-rate-per-1000`) when only the rate was decided.
    pub decided_by: String,
    /// The cell's level: the design's level at its planned runs (0.05 for a fixed design)
    /// divided by the compared cells (Bonferroni); Holm within the cell over growth and rate.
    pub level: f64,
    /// The metric the verdict judges (`[report] verdict-metric`, DESIGN 9), e.g. `anonymous`.
    pub metric: String,
    /// Other metrics whose verdict on this cell differs from the cell's (said on the row).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<Disagreement>,
    /// Why the cell's figures (growth and rate) do not agree, or why a figure was unusable,
    /// when they do not give one word (said on the row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Another metric's verdict on a cell that differs from the cell's verdict (JSON
/// `estimates.cells[].disagreements`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Disagreement {
    /// The other metric (`private`, `rss`, `file-backed`, a `[report] metrics` name).
    pub metric: String,
    /// Its verdict on the cell.
    pub verdict: Verdict,
}

impl CellVerdict {
    /// `true` when the rate gave the verdict (see [`CellVerdict`]).
    pub fn by_rate(&self) -> bool {
        Metric::from_key(&self.decided_by).is_some_and(|m| m.def().family == Family::Rate)
    }
}
