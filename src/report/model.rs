//! What a report is: the types `collection` fills from a bundle and `aggregation` summarises, and
//! that `render`, `compare` and `plot` show. No I/O here.
//!
//! Units: bytes for memory, seconds for time; a figure a run lacks is `None`, never 0.

use std::collections::BTreeMap;

use serde::Serialize;

use super::retention::{PlotPoint, Retention};
use crate::bundle::lock::EffectiveStatus;
use crate::bundle::{Outcome, OutputCheck};
use crate::exec::Termination;
use crate::manifest::Value;

/// The mode that is the control at each size (docs/DESIGN.md 2): [`crate::manifest::DEFAULT_CONTROL_MODE`].
pub const CONTROL_MODE: &str = crate::manifest::DEFAULT_CONTROL_MODE;

/// A metric value read by JSON Pointer from a run's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MetricValue {
    /// A JSON number (aggregated per cell).
    Number(f64),
    /// Anything else, shown as text (`true`, a string, `<array of 3>`); not aggregated.
    Text(String),
}

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

/// Most rows of [`RunSummary::mappings_grown`] a report keeps per run.
pub const MAPPING_GROWTH_ROWS: usize = 3;

/// One mapping's change between a run's first and last per-mapping breakdown (mappings.json:
/// `/proc/<pid>/smaps` of every process of the run, summed by mapping). Bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct MappingGrowth {
    /// `heap`, `stack`, `anonymous`, `file`, `shmem` or `other`.
    pub kind: String,
    /// The file path, `[heap]`, `[anonymous]`, ...
    pub name: String,
    /// Private bytes (`Private_Clean + Private_Dirty`) last minus first.
    pub private_growth: i64,
    /// RSS last minus first.
    pub rss_growth: i64,
    /// Which two breakdowns: `probe baseline -> last loop` or `probe baseline -> closed` (the
    /// probe's own, from its output) or `first -> last` (the runner's mappings.json).
    pub between: String,
    /// Seconds since the run's start of the first and the last breakdown (for the probe's:
    /// since the probe started measuring).
    pub from_seconds: f64,
    /// See `from_seconds`.
    pub to_seconds: f64,
}

/// Most stderr lines a report keeps per run that is not ok (`report --stderr`, JSON `stderr-tail`).
pub const STDERR_TAIL_LINES: usize = 20;

impl Report {
    /// A report for tests: `runs` held, nothing estimated, no retention.
    #[cfg(test)]
    pub(crate) fn for_tests(runs: Vec<RunSummary>) -> Report {
        Report {
            bundle: "results/test".into(),
            experiment: "test".into(),
            status: crate::bundle::lock::EffectiveStatus::Complete,
            sbatch_refusals: Vec::new(),
            hwr_exp_version: "0.1.0".into(),
            revision: Some("test".into()),
            dirty: Some(true),
            provenance_recorded: true,
            drift: Some(false),
            manifest_sha256: "00".into(),
            planned_runs: runs.len(),
            counts: BTreeMap::new(),
            not_run: 0,
            matrix_keys: vec!["mode".into()],
            mode_key: Some("mode".into()),
            metric_pointers: Vec::new(),
            has_retention: false,
            measured: None,
            executor: None,
            nodes: Vec::new(),
            failures_by_reason: failures_by_reason(&runs),
            runs: runs.into(),
            cells: Vec::new(),
            estimates: Default::default(),
            contrasts: Vec::new(),
            overrides: None,
            adaptive: None,
            values: Default::default(),
            redone: (0, 0),
            not_run_ranges: Vec::new(),
        }
    }

    /// Whether the runs span more than one node (the reports then show a node column).
    pub fn multi_node(&self) -> bool {
        self.nodes.len() > 1
    }

    /// Finished runs (all of them, not only those held).
    pub fn finished(&self) -> usize {
        self.counts.values().sum()
    }

    /// The note a per-run table of a large bundle carries, `None` when every run is shown:
    /// `showing the first 1000 of 100000 finished runs (999000 not run: ...) ...`.
    pub fn collapsed_note(&self) -> Option<String> {
        if self.runs.complete() {
            return None;
        }
        let finished = self.finished();
        let shown = self.runs.iter().filter(|r| r.finished).count();
        let mut note = if shown < finished {
            format!("showing the first {shown} of {finished} finished runs")
        } else {
            format!("showing all {finished} finished runs")
        };
        if self.not_run > 0 {
            note.push_str(&format!(
                "; {} runs not run are counted, not listed ({})",
                self.not_run,
                self.not_run_text()
            ));
        }
        note.push_str(&format!(
            "; the bundle has more than {RUN_ROWS} planned runs, so per-run tables and notes cover the runs shown while counts, per-cell figures and estimates cover every run; every run: --format csv or --format json"
        ));
        Some(note)
    }

    /// The runs without run.json as plan index ranges: `plan index 984-999999` (first ranges
    /// named, the others counted).
    pub fn not_run_text(&self) -> String {
        const NAMED: usize = 5;
        let ranges: Vec<String> = self
            .not_run_ranges
            .iter()
            .take(NAMED)
            .map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
            .collect();
        let counted: usize = self.not_run_ranges.iter().map(|(a, b)| b - a + 1).sum();
        let mut text = format!(
            "plan ind{} {}",
            if counted == 1 { "ex" } else { "ices" },
            ranges.join(", ")
        );
        if self.not_run_ranges.len() > NAMED || counted < self.not_run {
            text.push_str(" and more");
        }
        text
    }
}

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
    /// Retention aggregates by [`super::metrics::Def::key`] (absent when no run has the figure).
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

/// Everything a report shows about one bundle.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// The bundle folder as given.
    pub bundle: String,
    /// `experiment` from bundle.json.
    pub experiment: String,
    /// `status` from bundle.json, `running` split by the bundle's lock into `running` (a live
    /// process holds it) and `abandoned`.
    pub status: EffectiveStatus,
    /// Slurm executor: each sbatch refusal bundle.json records (`slurm.refusals`), as Slurm's
    /// message with the limit it names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sbatch_refusals: Vec<String>,
    /// hwr-exp version that wrote the bundle.
    pub hwr_exp_version: String,
    /// revision.txt (HEAD or why there is none); `None` when the file is missing.
    pub revision: Option<String>,
    /// provenance.json `dirty`.
    pub dirty: Option<bool>,
    /// `false` when provenance.json says the manifest was in no git repository: no revision or
    /// working tree was recorded, and the dirty tree and drift are shown as `not recorded`.
    pub provenance_recorded: bool,
    /// provenance.json `drift`.
    pub drift: Option<bool>,
    /// `manifest-sha256` from bundle.json.
    pub manifest_sha256: String,
    /// Planned runs.
    pub planned_runs: usize,
    /// Finished runs by outcome, counted from the run.json files read.
    pub counts: BTreeMap<Outcome, usize>,
    /// Planned runs without run.json.
    pub not_run: usize,
    /// Matrix keys in manifest order.
    pub matrix_keys: Vec<String>,
    /// The matrix key that names the mode, when there is one.
    pub mode_key: Option<String>,
    /// `[report] metrics` of the bundle's manifest: (name, JSON Pointer), sorted by name.
    pub metric_pointers: Vec<(String, String)>,
    /// Whether any run's output follows the retention schema.
    pub has_retention: bool,
    /// What was measured, from the bundle's manifest.toml (the verdict table names it, DESIGN
    /// 9): `the built-in Rust port (hwr-exp probe safetensors-retention)`, or the command's
    /// `argv: ...` / `shell: ...` ([`super::units::measured`]); `None` without a manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    /// bundle.json `executor` (`slurm`; `None`: local).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// The nodes the finished runs ran on (run.json `node`), sorted; empty for a local bundle.
    /// With more than one, every format shows a node column and the estimates name the nodes
    /// of each side.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Every planned run, in plan order (JSON `runs`). A bundle of at most [`RUN_ROWS`] planned
    /// runs holds them all; a larger one holds the first [`RUN_ROWS`] finished runs (what the
    /// per-run tables show) and reads every run again, one at a time, where all are written
    /// (JSON, CSV): see [`Runs`].
    pub runs: Runs,
    /// Aggregates per cell, in order of first appearance in the plan.
    pub cells: Vec<CellStats>,
    /// Every compared cell against its control ([`super::estimates`]).
    pub estimates: super::estimates::Estimates,
    /// Every contrast: does a factor (a matrix axis other than the control's keys) change the
    /// retention ([`super::contrasts`]); empty without one.
    pub contrasts: Vec<super::contrasts::Contrast>,
    /// bundle.json `overrides`: what `run` was told to change (`--where`, `--repetitions`,
    /// `--fail-fast`); absent when nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides: Option<crate::bundle::Overrides>,
    /// The finished runs that are not ok, grouped by their reason (outcome and one-line reason
    /// alike), in plan order of each group's first run.
    pub failures_by_reason: Vec<FailureReason>,
    /// bundle.json `adaptive`: the adaptive `repetitions` rule, its rounds and why each cell
    /// stopped; absent for a fixed number of repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<crate::bundle::AdaptiveRecord>,
    /// The compact per-run numbers of every finished run (what the aggregates and `compare` use).
    #[serde(skip)]
    pub values: super::aggregation::RunValues,
    /// Runs redone by `resume` (attempts > 1) and their earlier attempts, over every run.
    #[serde(skip)]
    pub redone: (usize, u64),
    /// Plan indices of the runs without run.json, as inclusive ranges (at most
    /// [`RUN_ROWS`] ranges are kept; `not_run` counts them all).
    #[serde(skip)]
    pub not_run_ranges: Vec<(usize, usize)>,
}

/// Most runs a report keeps whole in memory and shows in its per-run tables (table, Markdown,
/// HTML). A bundle with more planned runs keeps its first `RUN_ROWS` finished runs for those tables,
/// counts the runs that did not run, aggregates every run from compact numbers
/// ([`super::aggregation::RunValues`]) and writes every run in CSV and JSON by reading the
/// bundle's runs again one at a time; the tables say so.
pub const RUN_ROWS: usize = 1000;

/// The runs of a report (see [`Report::runs`]): the runs held, and, for a bundle larger than
/// [`RUN_ROWS`], how to read them all again. Derefs to the runs held.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    held: Vec<RunSummary>,
    all: Option<std::sync::Arc<super::collection::Restream>>,
    /// Every run as the report's format writes it, spilled to a temporary file (deleted when
    /// closed) while the runs were read, so that a large CSV or JSON report reads the bundle once.
    spilled: Option<std::sync::Arc<(Spill, std::fs::File)>>,
}

/// What a report of a large bundle spills of each run while it reads it: a CSV row of every
/// column ([`super::render::csv_spill_record`]) or the run as compact JSON
/// ([`super::render::json_spill_record`]), in plan order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spill {
    /// For `--format csv`.
    Csv,
    /// For `--format json`.
    Json,
}

impl From<Vec<RunSummary>> for Runs {
    fn from(held: Vec<RunSummary>) -> Runs {
        Runs {
            held,
            all: None,
            spilled: None,
        }
    }
}

impl std::ops::Deref for Runs {
    type Target = Vec<RunSummary>;
    fn deref(&self) -> &Vec<RunSummary> {
        &self.held
    }
}

impl std::ops::DerefMut for Runs {
    fn deref_mut(&mut self) -> &mut Vec<RunSummary> {
        &mut self.held
    }
}

impl<'a> IntoIterator for &'a Runs {
    type Item = &'a RunSummary;
    type IntoIter = std::slice::Iter<'a, RunSummary>;
    fn into_iter(self) -> Self::IntoIter {
        self.held.iter()
    }
}

impl Runs {
    /// Runs held, and the way to read every run of a large bundle again.
    pub fn new(held: Vec<RunSummary>, all: Option<super::collection::Restream>) -> Runs {
        Runs {
            held,
            all: all.map(std::sync::Arc::new),
            spilled: None,
        }
    }

    /// These runs with every run spilled as `kind` in `file` (written, in plan order).
    pub fn with_spill(mut self, kind: Spill, file: std::fs::File) -> Runs {
        self.spilled = Some(std::sync::Arc::new((kind, file)));
        self
    }

    /// The spill of every run as `kind`, rewound to its start, when there is one.
    ///
    /// # Errors
    /// The spill cannot be rewound.
    pub fn spilled(&self, kind: Spill) -> Option<std::io::Result<&std::fs::File>> {
        use std::io::Seek;
        let spill = self.spilled.as_deref().filter(|(k, _)| *k == kind)?;
        let mut file = &spill.1;
        Some(file.rewind().map(|()| file))
    }

    /// Whether every planned run is held (else only the first [`RUN_ROWS`] finished ones).
    pub fn complete(&self) -> bool {
        self.all.is_none()
    }

    /// Calls `f` with every planned run in plan order: the runs held, or, for a large bundle,
    /// each run read again from the bundle (one at a time).
    ///
    /// # Errors
    /// The first error of `f`, or the bundle's when a run can no longer be read.
    pub fn try_for_each(&self, mut f: impl FnMut(&RunSummary) -> anyhow::Result<()>) -> anyhow::Result<()> {
        match &self.all {
            None => self.held.iter().try_for_each(f),
            Some(all) => all.try_for_each(&mut |run| f(&run)),
        }
    }
}

impl Serialize for Runs {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let Some(all) = &self.all else {
            return self.held.serialize(serializer);
        };
        if self.spilled.as_deref().is_some_and(|(k, _)| *k == Spill::Json) {
            // super::render::write_json writes the spilled runs in place of this empty array.
            return serializer.serialize_seq(Some(0))?.end();
        }
        let mut seq = serializer.serialize_seq(None)?;
        let mut failed = None;
        let read = all.try_for_each(&mut |run| {
            seq.serialize_element(&run).map_err(|e| {
                let text = e.to_string();
                failed = Some(e);
                anyhow::anyhow!(text)
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        read.map_err(|e| S::Error::custom(format!("{e:#}")))?;
        seq.end()
    }
}

/// Finished runs that are not ok for the same reason ([`Report::failures_by_reason`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct FailureReason {
    /// How the runs count.
    pub outcome: Outcome,
    /// Their one-line reason ([`RunSummary::reason`]).
    pub reason: String,
    /// How many runs.
    pub count: usize,
    /// Their run ids, in plan order.
    pub runs: Vec<String>,
}

/// The finished runs of `runs` that are not ok, grouped by (outcome, reason), groups in plan order
/// of their first run.
pub fn failures_by_reason(runs: &[RunSummary]) -> Vec<FailureReason> {
    let mut groups = FailureGroups::default();
    for run in runs {
        groups.push(run);
    }
    groups.finish()
}

/// [`failures_by_reason`] fed one run at a time.
#[derive(Debug, Default)]
pub struct FailureGroups {
    groups: Vec<FailureReason>,
    at: std::collections::HashMap<(Outcome, String), usize>,
}

impl FailureGroups {
    /// Adds a run (ignored unless finished and not ok).
    pub fn push(&mut self, run: &RunSummary) {
        if !run.finished {
            return;
        }
        let (Some(outcome), Some(reason)) = (run.outcome, run.reason.as_deref()) else {
            return;
        };
        if outcome == Outcome::Ok {
            return;
        }
        let g = match self.at.get(&(outcome, reason.to_owned())) {
            Some(&g) => g,
            None => {
                self.groups.push(FailureReason {
                    outcome,
                    reason: reason.to_owned(),
                    count: 0,
                    runs: Vec::new(),
                });
                self.at
                    .insert((outcome, reason.to_owned()), self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        self.groups[g].count += 1;
        self.groups[g].runs.push(run.run_id.clone());
    }

    /// The groups, in plan order of their first run.
    pub fn finish(self) -> Vec<FailureReason> {
        self.groups
    }
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
