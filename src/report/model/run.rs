//! One run and one cell as a report holds them: [`RunSummary`] (what a run's folder says),
//! [`Stats`] and [`CellStats`] (a cell over its repetitions), and the text helpers every layer
//! shares ([`fmt_num`], [`cell_label`]). No I/O here.
//!
//! Units: bytes for memory, seconds for time; a figure a run lacks is `None`, never 0.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::bundle::retention::{PlotPoint, Retention};
use crate::bundle::{Outcome, OutputCheck};
use crate::exec::Termination;
use crate::manifest::Value;

/// The mode that is the control at each size (docs/DESIGN.md 2): [`crate::manifest::DEFAULT_CONTROL_MODE`].
pub const CONTROL_MODE: &str = crate::manifest::DEFAULT_CONTROL_MODE;

pub use crate::bundle::summary::{MAPPING_GROWTH_ROWS, MappingGrowth, MetricValue};

impl std::fmt::Display for MetricValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetricValue::Number(x) => f.write_str(&fmt_num(*x)),
            MetricValue::Text(t) => f.write_str(t),
        }
    }
}

/// Formats a number: integers without decimals, others with 4 significant digits (at most 1
/// decimal from 1000 up).
pub fn fmt_num(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
        return format!("{}", x as i64);
    }
    if !x.is_finite() || x.abs() >= 1000.0 {
        return format!("{x:.1}");
    }
    let magnitude = if x == 0.0 {
        0
    } else {
        x.abs().log10().floor() as i32
    };
    let decimals = (3 - magnitude).clamp(1, 12) as usize;
    let s = format!("{x:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Summary of one planned run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunSummary {
    /// `run-id`.
    pub run_id: String,
    /// 0-based plan index.
    pub index: usize,
    /// Matrix values.
    pub cell: BTreeMap<String, Value>,
    /// `key=value` pairs in matrix key order, space separated.
    pub cell_label: String,
    /// 1-based repetition.
    pub repetition: u32,
    /// The node the run executed on (run.json `node`, else `hostname`: Slurm runs); `None` for
    /// a local run or a run without run.json.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `false` when run.json is missing (the runner stopped before this run finished).
    pub finished: bool,
    /// Attempts of the run, the final one included (run.json `attempt`; more than 1 when
    /// `resume` redid an interrupted or lost attempt, kept under `attempts/`); 0 when not run.
    /// Everything else here is read from the final attempt only.
    pub attempts: u32,
    /// How the run ended.
    pub termination: Option<Termination>,
    /// Exit code when it exited.
    pub exit_code: Option<i32>,
    /// Signal number when killed by a signal.
    pub signal: Option<i32>,
    /// Wall time, seconds.
    pub wall_seconds: Option<f64>,
    /// Peak RSS from wait4, bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Output check.
    pub output_check: Option<OutputCheck>,
    /// Why the output is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_check_reason: Option<String>,
    /// How the run counts.
    pub outcome: Option<Outcome>,
    /// Why the run is not ok, in one line ([`crate::bundle::reason`]): how it ended, the output
    /// check, the last line of its stderr.log; `not run` for a planned run without run.json; `None`
    /// (JSON `null`) for an ok run.
    pub reason: Option<String>,
    /// The last non-blank lines of stderr.log of a run that is not ok (at most
    /// [`STDERR_TAIL_LINES`], oldest first, made printable and cut to a width); empty for an ok run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
    /// Retention numbers, when the output follows the retention schema.
    pub retention: Option<Retention>,
    /// Why this run is left out of the aggregates; `None` = included. A run whose
    /// `[isolation] allocator` was not seen loaded is left out (`allocator ... not seen loaded`).
    pub excluded: Option<String>,
    /// run.json `allocator`: the allocator given and whether it was seen loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator: Option<crate::allocator::Record>,
    /// Metric values by metric name (`None` = pointer not found).
    pub metrics: BTreeMap<String, Option<MetricValue>>,
    /// The metrics whose value is not aggregated, by name: what the output held (`null`, `a
    /// string`, `no value there`, `a number beyond 2^53 (not exact as a 64-bit float)`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unusable_metrics: BTreeMap<String, String>,
    /// When the output follows the retention schema but its values are unusable (the run is then
    /// left out, [`RunSummary::excluded`] says why): what it gave, to count runs by (`a string for
    /// private_bytes`, `no loop sample`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable_output: Option<String>,
    /// run.json `sampling.note`: what of the run's memory sampling was not as requested (no
    /// sample at all, an interval not kept, page-table walks rarer than samples).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_note: Option<String>,
    /// run.json `cgroup-memory-peak-bytes`: the peak of all the run's processes together, from
    /// its memory cgroup (`cgroup-memory-source` in run.json names the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree_peak_bytes: Option<u64>,
    /// The mappings whose private bytes grew most, largest change first, at most
    /// [`MAPPING_GROWTH_ROWS`] per pair of breakdowns: between the probe's own `baseline` and
    /// `last_loop`, and `baseline` and `closed`, breakdowns where the output has them (the
    /// built-in probe's `mappings`), else between the run's first and last breakdown
    /// (mappings.json).

    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mappings_grown: Vec<MappingGrowth>,
    /// Baseline and loop samples' private bytes (only with a plot).
    #[serde(skip)]
    pub points: Vec<PlotPoint>,
    /// memory.jsonl: (t-seconds, PSS summed over the run's processes) of its smaps_rollup
    /// samples (only with a plot).
    #[serde(skip)]
    pub memory: Vec<(f64, u64)>,
}

/// Most stderr lines a report keeps per run that is not ok (`report --stderr`, JSON `stderr-tail`).
pub const STDERR_TAIL_LINES: usize = 20;

impl RunSummary {
    /// A run for tests: `cell` its matrix values (strings), ok or not as `outcome` says (`None`:
    /// not run), no retention.
    #[cfg(test)]
    pub(crate) fn for_tests(id: &str, cell: &[(&str, &str)], outcome: Option<Outcome>) -> RunSummary {
        RunSummary {
            run_id: id.into(),
            index: 0,
            cell: cell
                .iter()
                .map(|(k, v)| (k.to_string(), Value::Str(v.to_string())))
                .collect(),
            cell_label: cell
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            repetition: 1,
            node: None,
            finished: outcome.is_some(),
            attempts: u32::from(outcome.is_some()),
            termination: outcome.map(|_| Termination::Exited),
            exit_code: outcome.map(|o| if o == Outcome::Ok { 0 } else { 1 }),
            signal: None,
            wall_seconds: outcome.map(|_| 0.5),
            peak_rss_bytes: None,
            output_check: outcome.map(|o| {
                if o == Outcome::Ok {
                    OutputCheck::Valid
                } else {
                    OutputCheck::Empty
                }
            }),
            output_check_reason: None,
            outcome,
            retention: None,
            excluded: None,
            allocator: None,
            memory_note: None,
            tree_peak_bytes: None,
            mappings_grown: Vec::new(),
            metrics: BTreeMap::new(),
            unusable_metrics: BTreeMap::new(),
            unusable_output: None,
            points: Vec::new(),
            memory: Vec::new(),
            reason: outcome
                .filter(|o| *o != Outcome::Ok)
                .map(|_| "exit 1".into())
                .or_else(|| outcome.is_none().then(|| "not run".into())),
            stderr_tail: Vec::new(),
        }
    }

    /// The last lines of the run's stderr.log when it is not ok (see [`RunSummary::stderr_tail`]).
    pub fn stderr_tail(&self) -> &[String] {
        &self.stderr_tail
    }

    /// The reason the run is not ok, `""` when it is ok (for table cells).
    pub fn reason_text(&self) -> &str {
        self.reason.as_deref().unwrap_or("")
    }

    /// Text of the output check: `valid`, `empty`, `invalid: reason`, `-` when not run.
    pub fn output_text(&self) -> String {
        match self.output_check {
            None => "-".into(),
            Some(OutputCheck::Valid) => "valid".into(),
            Some(OutputCheck::Empty) => "empty".into(),
            Some(OutputCheck::Invalid) => match &self.output_check_reason {
                Some(r) => format!("invalid: {r}"),
                None => "invalid".into(),
            },
        }
    }

    /// Text of the termination: `exited`, `timeout`, `signaled (9)`, `not run`.
    pub fn termination_text(&self) -> String {
        let Some(t) = self.termination else {
            return "not run".into();
        };
        let name = t.as_str();
        match self.signal {
            Some(s) if t != Termination::Exited => format!("{name} ({s})"),
            _ => name.into(),
        }
    }

    /// The matrix value that names this run's mode, for colouring and control comparison.
    pub fn mode(&self, mode_key: Option<&str>) -> Option<String> {
        mode_key
            .and_then(|k| self.cell.get(k))
            .map(|v| v.to_string())
            .or_else(|| self.retention.as_ref().and_then(|r| r.mode.clone()))
    }
}

/// Min, median and max over a cell's included repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// Number of values.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Largest value.
    pub max: f64,
}

impl Stats {
    /// `min / median / max`.
    pub fn text(&self) -> String {
        format!(
            "{} / {} / {}",
            fmt_num(self.min),
            fmt_num(self.median),
            fmt_num(self.max)
        )
    }

    /// Whether the ranges [min, max] of two stats overlap.
    pub fn overlaps(&self, other: &Stats) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

/// Aggregates of one cell over its included repetitions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CellStats {
    /// `key=value` pairs in matrix key order.
    pub cell: String,
    /// The cell's mode (matrix value of the mode key), when known.
    pub mode: Option<String>,
    /// The cell without its mode: the group whose control is the `reuse` cell.
    pub size: String,
    /// Runs of the cell with a run.json.
    pub runs: usize,
    /// Runs included in the aggregates.
    pub included: usize,
    /// Retention aggregates by [`crate::report::metrics::Def::key`] (absent when no run has the figure).
    pub retention: BTreeMap<String, Stats>,
    /// Numeric metric aggregates by metric name.
    pub metrics: BTreeMap<String, Stats>,
    /// `wall-seconds` and `peak-rss-bytes` of the included runs.
    pub run_stats: BTreeMap<String, Stats>,
    /// `[report]` metrics some included runs gave no number for, by name: `2 runs gave null, 1
    /// run gave a string` (those runs are not in the metric's aggregate).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unusable_metrics: BTreeMap<String, String>,
}

/// `key=value` pairs of a cell, space separated: matrix keys in `keys` order first, then any other
/// keys of the cell in name order; the key `skip` left out (the mode key, for a cell's size group).
pub fn cell_label(cell: &BTreeMap<String, Value>, keys: &[String], skip: Option<&str>) -> String {
    use std::fmt::Write;
    // One string written in place (a label per run of a large bundle).
    let mut label = String::new();
    let in_order = keys
        .iter()
        .filter(|k| Some(k.as_str()) != skip)
        .filter_map(|k| cell.get_key_value(k));
    let others = cell
        .iter()
        .filter(|(k, _)| !keys.contains(k) && Some(k.as_str()) != skip);
    for (k, v) in in_order.chain(others) {
        if !label.is_empty() {
            label.push(' ');
        }
        let _ = write!(label, "{k}={v}");
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(4096.0), "4096");
        assert_eq!(fmt_num(0.0135), "0.0135");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(12.3456), "12.35");
        assert_eq!(fmt_num(-2048.5), "-2048.5");
    }
}
