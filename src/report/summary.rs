//! One pass over a bundle: per-run summary numbers, then aggregates per cell and per size.
//!
//! Runs are read one at a time ([`Bundle::runs`]); of each run's output only the summary numbers
//! ([`Retention`], metric values) are kept, so memory grows with the number of runs, not with the
//! size of their outputs. Plot series are kept only when a plot is asked for.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::Value as Json;

use super::retention::{self, Parsed, PlotPoint, Retention};
use crate::bundle::read::{Bundle, ReadError};
use crate::bundle::{BundleStatus, Outcome, OutputCheck, PlannedRunRecord, RunRecord};
use crate::exec::{MemorySample, Termination};
use crate::manifest::{OutputFormat, Value};

/// The mode that is the control at each size (DESIGN 2).
pub const CONTROL_MODE: &str = "reuse";

/// Errors building a report (beyond the bundle reader's).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The bundle could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// manifest.toml's `[report] metrics` is not a table of strings, or manifest.toml is not TOML.
    #[error("{path}: {message}")]
    Metrics {
        /// The bundle's manifest.toml.
        path: String,
        /// What is wrong.
        message: String,
    },
}

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
    /// Retention numbers, when the output follows the retention schema.
    pub retention: Option<Retention>,
    /// Why this run is left out of the aggregates; `None` = included.
    pub excluded: Option<String>,
    /// Metric values by metric name (`None` = pointer not found).
    pub metrics: BTreeMap<String, Option<MetricValue>>,
    /// Baseline and loop samples' private bytes (only with a plot).
    #[serde(skip)]
    pub points: Vec<PlotPoint>,
    /// memory.jsonl: (t-seconds, private bytes) (only with a plot).
    #[serde(skip)]
    pub memory: Vec<(f64, u64)>,
}

impl RunSummary {
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
        let name = match t {
            Termination::Exited => "exited",
            Termination::Signaled => "signaled",
            Termination::Timeout => "timeout",
            Termination::SpawnFailed => "spawn-failed",
            Termination::Interrupted => "interrupted",
        };
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

/// The retention metrics aggregated per cell, in this order in every table.
pub const RETENTION_METRICS: [&str; 10] = [
    "private-growth-bytes",
    "anonymous-growth-bytes",
    "rss-growth-bytes",
    "private-growth-per-1000",
    "anonymous-growth-per-1000",
    "rss-growth-per-1000",
    "private-after-close-bytes",
    "anonymous-after-close-bytes",
    "rss-after-close-bytes",
    "fd-delta",
];

/// The value of `RETENTION_METRICS[i]` for one run.
pub fn retention_metric(r: &Retention, i: usize) -> Option<f64> {
    let f = |x: Option<i64>| x.map(|v| v as f64);
    match i {
        0 => f(r.growth.private_bytes),
        1 => f(r.growth.anonymous_bytes),
        2 => f(r.growth.rss_bytes),
        3 => r.per_1000(r.growth.private_bytes),
        4 => r.per_1000(r.growth.anonymous_bytes),
        5 => r.per_1000(r.growth.rss_bytes),
        6 => f(r.after_close.private_bytes),
        7 => f(r.after_close.anonymous_bytes),
        8 => f(r.after_close.rss_bytes),
        9 => f(r.fd_delta),
        _ => None,
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
    /// Retention aggregates by name from [`RETENTION_METRICS`] (absent when no run has the figure).
    pub retention: BTreeMap<String, Stats>,
    /// Numeric metric aggregates by metric name.
    pub metrics: BTreeMap<String, Stats>,
    /// `wall-seconds` and `peak-rss-bytes` of the included runs.
    pub run_stats: BTreeMap<String, Stats>,
}

/// Per size: one mode's median growth minus the `reuse` control's median growth.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ControlDelta {
    /// The size group (cell without its mode).
    pub size: String,
    /// The mode compared with `reuse`.
    pub mode: String,
    /// Difference of medians by name from the first six [`RETENTION_METRICS`].
    pub minus_control: BTreeMap<String, f64>,
}

/// Everything a report shows about one bundle.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// The bundle folder as given.
    pub bundle: String,
    /// `experiment` from bundle.json.
    pub experiment: String,
    /// `status` from bundle.json.
    pub status: BundleStatus,
    /// hwr-exp version that wrote the bundle.
    pub hwr_exp_version: String,
    /// revision.txt (HEAD or why there is none); `None` when the file is missing.
    pub revision: Option<String>,
    /// provenance.json `dirty`.
    pub dirty: Option<bool>,
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
    /// Every planned run, in plan order.
    pub runs: Vec<RunSummary>,
    /// Aggregates per cell, in order of first appearance in the plan.
    pub cells: Vec<CellStats>,
    /// Growth minus the `reuse` control's, per size and mode.
    pub controls: Vec<ControlDelta>,
}

/// Finds a boolean `key` in a JSON document: at the top level, else in nested objects (breadth first).
pub fn find_bool(doc: &Json, key: &str) -> Option<bool> {
    let mut queue = std::collections::VecDeque::from([doc]);
    while let Some(v) = queue.pop_front() {
        if let Some(obj) = v.as_object() {
            if let Some(b) = obj.get(key).and_then(Json::as_bool) {
                return Some(b);
            }
            queue.extend(obj.values().filter(|v| v.is_object()));
        }
    }
    None
}

/// Reads `[report] metrics` from manifest text: (name, JSON Pointer) pairs sorted by name.
///
/// # Errors
/// A message when the text is not TOML or a metric's value is not a string starting with `/`.
pub fn metric_pointers(manifest_text: &str) -> Result<Vec<(String, String)>, String> {
    let table: toml::Table = toml::from_str(manifest_text).map_err(|e| e.to_string())?;
    let Some(metrics) = table.get("report").and_then(|r| r.get("metrics")) else {
        return Ok(Vec::new());
    };
    let metrics = metrics
        .as_table()
        .ok_or("[report] metrics is not a table of name = \"/json/pointer\"")?;
    metrics
        .iter()
        .map(|(name, v)| match v.as_str() {
            Some(p) if p.is_empty() || p.starts_with('/') => Ok((name.clone(), p.to_string())),
            _ => Err(format!(
                "[report] metrics.{name}: expected an RFC 6901 JSON Pointer string like \"/a/b\", found {v}"
            )),
        })
        .collect()
}

fn metric_value(v: &Json) -> MetricValue {
    match v {
        Json::Number(n) => n
            .as_f64()
            .map_or_else(|| MetricValue::Text(n.to_string()), MetricValue::Number),
        Json::String(s) => MetricValue::Text(s.clone()),
        Json::Array(a) => MetricValue::Text(format!("<array of {}>", a.len())),
        Json::Object(_) => MetricValue::Text("<object>".into()),
        other => MetricValue::Text(other.to_string()),
    }
}

fn cell_label(cell: &BTreeMap<String, Value>, keys: &[String], skip: Option<&str>) -> String {
    let mut parts: Vec<String> = keys
        .iter()
        .filter(|k| Some(k.as_str()) != skip)
        .filter_map(|k| cell.get(k).map(|v| format!("{k}={v}")))
        .collect();
    parts.extend(
        cell.iter()
            .filter(|(k, _)| !keys.contains(k) && Some(k.as_str()) != skip)
            .map(|(k, v)| format!("{k}={v}")),
    );
    parts.join(" ")
}

fn not_run(p: PlannedRunRecord, keys: &[String]) -> RunSummary {
    RunSummary {
        cell_label: cell_label(&p.cell, keys, None),
        run_id: p.run_id,
        index: p.index,
        cell: p.cell,
        repetition: p.repetition,
        finished: false,
        attempts: 0,
        termination: None,
        exit_code: None,
        signal: None,
        wall_seconds: None,
        peak_rss_bytes: None,
        output_check: None,
        output_check_reason: None,
        outcome: None,
        retention: None,
        excluded: Some("not run".into()),
        metrics: BTreeMap::new(),
        points: Vec::new(),
        memory: Vec::new(),
    }
}

/// Most points kept per plotted series: a panel is about 400 pixels wide, so more points draw
/// nothing new, and capping keeps a report with `--plot` bounded per run.
pub const MAX_PLOT_POINTS: usize = 1000;

/// Keeps at most `max` points of a series: evenly spaced, the first and the last always kept.
pub fn decimate<T: Copy>(v: Vec<T>, max: usize) -> Vec<T> {
    if v.len() <= max || max < 2 {
        return v;
    }
    let last = v.len() - 1;
    (0..max).map(|i| v[i * last / (max - 1)]).collect()
}

/// Reads memory.jsonl line by line: (t-seconds, private bytes) of samples that have private bytes.
fn read_memory(path: &Path) -> Vec<(f64, u64)> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let all = std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<MemorySample>(&l).ok())
        .filter_map(|s| Some((s.t_seconds, s.rollup.private?)))
        .collect::<Vec<_>>();
    decimate(all, MAX_PLOT_POINTS)
}

struct RunContext<'a> {
    bundle: &'a Bundle,
    keys: &'a [String],
    pointers: &'a [(String, String)],
    json_output: bool,
    keep_series: bool,
}

fn summarize_run(ctx: &RunContext<'_>, rec: RunRecord) -> RunSummary {
    let mut s = RunSummary {
        cell_label: cell_label(&rec.cell, ctx.keys, None),
        run_id: rec.run_id.clone(),
        index: rec.index,
        cell: rec.cell.clone(),
        repetition: rec.repetition,
        finished: true,
        attempts: rec.attempt,
        termination: Some(rec.termination),
        exit_code: rec.exit_code,
        signal: rec.signal,
        wall_seconds: Some(rec.wall_seconds),
        peak_rss_bytes: rec.peak_rss_bytes,
        output_check: Some(rec.output_check),
        output_check_reason: rec.output_check_reason.clone(),
        outcome: Some(rec.outcome),
        retention: None,
        excluded: None,
        metrics: BTreeMap::new(),
        points: Vec::new(),
        memory: Vec::new(),
    };
    if rec.outcome != Outcome::Ok {
        s.excluded = Some(match rec.outcome {
            Outcome::Timeout => "timeout".into(),
            Outcome::InvalidOutput => format!("output {}", s.output_text()),
            Outcome::SpawnFailed => "spawn failed".into(),
            Outcome::Interrupted => "interrupted".into(),
            Outcome::Failed => match (rec.exit_code, rec.signal) {
                (Some(c), _) => format!("failed (exit {c})"),
                (None, Some(sig)) => format!("failed (signal {sig})"),
                _ => "failed".into(),
            },
            Outcome::Ok => unreachable!(),
        });
    }
    if ctx.keep_series {
        s.memory = read_memory(&ctx.bundle.run_memory_path(&rec));
    }
    if !ctx.json_output || rec.output_check != OutputCheck::Valid {
        return s;
    }
    let path = ctx.bundle.run_output_path(&rec);
    let doc: Json = match std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(doc) => doc,
        Err(e) => {
            s.excluded
                .get_or_insert_with(|| format!("cannot read output {}: {e}", path.display()));
            return s;
        }
    };
    for (name, ptr) in ctx.pointers {
        s.metrics.insert(name.clone(), doc.pointer(ptr).map(metric_value));
    }
    match retention::parse(&doc, ctx.keep_series) {
        Parsed::NotRetention => {}
        Parsed::Unusable(reason) => {
            s.excluded.get_or_insert(reason);
        }
        Parsed::Retention(r, points) => {
            if r.completed == Some(false) {
                s.excluded.get_or_insert_with(|| "completed: false".into());
            }
            s.retention = Some(r);
            s.points = decimate(points, MAX_PLOT_POINTS);
        }
    }
    s
}

/// Reads a bundle and computes its report. `keep_series` keeps each run's plot series.
///
/// # Errors
/// [`ReportError::Read`] for an unreadable bundle.json / plan.json / run.json (a planned run without
/// run.json is reported as not run, not as an error), [`ReportError::Metrics`] for a bad
/// `[report] metrics` table.
pub fn collect(dir: &Path, keep_series: bool) -> Result<Report, ReportError> {
    let bundle = Bundle::open(dir)?;
    let plan = bundle.plan()?;
    let info = bundle.info().clone();
    let manifest_path = bundle.path(crate::bundle::files::MANIFEST);
    let pointers = match bundle.manifest_text() {
        Ok(text) => metric_pointers(&text).map_err(|message| ReportError::Metrics {
            path: manifest_path.display().to_string(),
            message,
        })?,
        Err(ReadError::Missing { .. }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let revision = match bundle.revision() {
        Ok(r) => Some(r),
        Err(ReadError::Missing { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let provenance = match bundle.provenance() {
        Ok(p) => Some(p),
        Err(ReadError::Missing { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let keys = plan.matrix_keys.clone();
    let ctx = RunContext {
        bundle: &bundle,
        keys: &keys,
        pointers: &pointers,
        json_output: plan.output_format == OutputFormat::Json,
        keep_series,
    };
    let mut runs = Vec::with_capacity(plan.runs.len());
    let mut counts = BTreeMap::new();
    let mut not_run_count = 0;
    for planned in plan.runs {
        match bundle.read_run(&planned) {
            Ok(rec) => {
                *counts.entry(rec.outcome).or_insert(0) += 1;
                runs.push(summarize_run(&ctx, rec));
            }
            Err(ReadError::RunMissing { .. }) => {
                not_run_count += 1;
                runs.push(not_run(planned, &keys));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mode_key = find_mode_key(&keys, &runs);
    let has_retention = runs.iter().any(|r| r.retention.is_some());
    let cells = aggregate(&runs, &keys, mode_key.as_deref(), &pointers);
    let controls = control_deltas(&cells);
    Ok(Report {
        bundle: dir.display().to_string(),
        experiment: info.experiment,
        status: info.status,
        hwr_exp_version: info.hwr_exp_version,
        revision,
        dirty: provenance.as_ref().and_then(|p| find_bool(p, "dirty")),
        drift: provenance.as_ref().and_then(|p| find_bool(p, "drift")),
        manifest_sha256: info.manifest_sha256,
        planned_runs: info.planned_runs.max(runs.len()),
        counts,
        not_run: not_run_count,
        matrix_keys: keys,
        mode_key,
        metric_pointers: pointers,
        has_retention,
        runs,
        cells,
        controls,
    })
}

/// The mode key: `mode` when it is a matrix key, else a key whose value equals every retention
/// output's `arguments.mode`.
fn find_mode_key(keys: &[String], runs: &[RunSummary]) -> Option<String> {
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

fn aggregate(
    runs: &[RunSummary],
    keys: &[String],
    mode_key: Option<&str>,
    pointers: &[(String, String)],
) -> Vec<CellStats> {
    struct Acc {
        stats: CellStats,
        retention: Vec<Vec<f64>>,
        metrics: Vec<Vec<f64>>,
        wall: Vec<f64>,
        peak: Vec<f64>,
    }
    let mut order: Vec<Acc> = Vec::new();
    let mut by_label: HashMap<String, usize> = HashMap::new();
    for r in runs.iter().filter(|r| r.finished) {
        let i = *by_label.entry(r.cell_label.clone()).or_insert_with(|| {
            order.push(Acc {
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
                },
                retention: vec![Vec::new(); RETENTION_METRICS.len()],
                wall: Vec::new(),
                peak: Vec::new(),
                metrics: vec![Vec::new(); pointers.len()],
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
            for (m, values) in acc.retention.iter_mut().enumerate() {
                values.extend(retention_metric(ret, m));
            }
        }
        for (m, (name, _)) in pointers.iter().enumerate() {
            if let Some(Some(MetricValue::Number(x))) = r.metrics.get(name) {
                acc.metrics[m].push(*x);
            }
        }
    }
    order
        .into_iter()
        .map(|mut acc| {
            for (m, values) in acc.retention.iter_mut().enumerate() {
                if let Some(s) = Stats::of(values) {
                    acc.stats.retention.insert(RETENTION_METRICS[m].into(), s);
                }
            }
            for (m, values) in acc.metrics.iter_mut().enumerate() {
                if let Some(s) = Stats::of(values) {
                    acc.stats.metrics.insert(pointers[m].0.clone(), s);
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

fn control_deltas(cells: &[CellStats]) -> Vec<ControlDelta> {
    let mut out = Vec::new();
    for cell in cells {
        let Some(mode) = &cell.mode else { continue };
        if mode == CONTROL_MODE {
            continue;
        }
        let Some(control) = cells
            .iter()
            .find(|c| c.size == cell.size && c.mode.as_deref() == Some(CONTROL_MODE))
        else {
            continue;
        };
        let minus_control: BTreeMap<String, f64> = RETENTION_METRICS[..6]
            .iter()
            .filter_map(|m| {
                let a = cell.retention.get(*m)?;
                let b = control.retention.get(*m)?;
                Some((m.to_string(), a.median - b.median))
            })
            .collect();
        if !minus_control.is_empty() {
            out.push(ControlDelta {
                size: cell.size.clone(),
                mode: mode.clone(),
                minus_control,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_ends_and_count() {
        let v: Vec<u32> = (0..10_001).collect();
        let d = decimate(v, 1000);
        assert_eq!(d.len(), 1000);
        assert_eq!((d[0], d[999]), (0, 10_000));
        assert!(d.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(decimate(vec![1, 2, 3], 1000), vec![1, 2, 3]);
    }

    #[test]
    fn numbers_and_stats() {
        assert_eq!(fmt_num(4096.0), "4096");
        assert_eq!(fmt_num(0.0135), "0.0135");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(12.3456), "12.35");
        assert_eq!(fmt_num(-2048.5), "-2048.5");
        let s = Stats::of(&mut [3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.min, s.median, s.max), (4, 1.0, 2.5, 10.0));
        assert!(s.overlaps(&Stats::of(&mut [10.0, 20.0]).unwrap()));
        assert!(!s.overlaps(&Stats::of(&mut [10.5]).unwrap()));
        assert!(Stats::of(&mut []).is_none());
    }

    #[test]
    fn metric_pointers_from_manifest() {
        let text = "format = 1\n[report]\nmetrics = { b = \"/x/0\", a = \"/y\" }\n";
        assert_eq!(
            metric_pointers(text).unwrap(),
            vec![("a".into(), "/y".into()), ("b".into(), "/x/0".into())]
        );
        assert!(metric_pointers("[report]\nmetrics = { a = 3 }\n").is_err());
        assert!(metric_pointers("format = 1\n").unwrap().is_empty());
    }
}
