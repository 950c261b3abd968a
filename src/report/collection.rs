//! Reading a bundle into a [`Report`]: one pass over the plan, one run at a time.
//!
//! Runs are read one at a time ([`Bundle::runs`]); each run's output is streamed through the one
//! output reader the output check uses ([`crate::bundle::output::read_output`], same limits), which
//! keeps only the values asked for: the `[report] metrics` pointers and the retention fields, with
//! the `samples` folded one at a time into a [`super::retention::Accumulator`]. Memory therefore grows
//! with the number of runs, not with the size of their outputs. Plot series are kept only when a
//! plot is asked for, thinned while read. Files are opened inside the bundle only, without
//! following links ([`Bundle::open_run_file`]). A run left out of the aggregates has the reason in
//! [`RunSummary::excluded`]. Of a run that is not ok, the reason and the last
//! [`STDERR_TAIL_LINES`] lines of its stderr.log are kept (read from the end of the file, at most
//! [`crate::bundle::reason::TAIL_BYTES`]). The aggregates come from [`super::aggregation`].

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde_json::Value as Json;

use super::aggregation;
use super::model::{
    FailureGroups, MetricValue, RUN_ROWS, Report, RunSource, RunSummary, RunValues, Runs, STDERR_TAIL_LINES,
    Spill, cell_label,
};
use super::retention::{Accumulator, DocFields, Parsed, SampleField, SampleFields};
use crate::bundle::lock::effective_status;
use crate::bundle::output::{
    Interest, ListEvent, OUTPUT_WHOLE_LIMIT, OutputError, Scalar, read_output, read_output_bytes,
};
use crate::bundle::read::{Bundle, ReadError, RunFolder};
use crate::bundle::reason::RunFailure;
use crate::bundle::{Outcome, OutputCheck, PlannedRunBrief, RunRecordBrief};
use crate::exec::MemorySample;
use crate::manifest::OutputFormat;

/// Errors building a report (beyond the bundle reader's).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The bundle could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// manifest.toml's `[report] metrics`, `control` or `equivalence-margin` has the wrong shape,
    /// or manifest.toml is not TOML.
    #[error("{path}: {message}")]
    Metrics {
        /// The bundle's manifest.toml.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// `report --control KEY=VALUE` names no matrix key or no value of it.
    #[error("--control {0}")]
    Control(String),
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

/// What a `[report]` metric value that is not aggregated is (`null`, `a string`, `a number beyond
/// 2^53 ...`); `None` for a number that is.
fn metric_kind(v: Option<&Scalar>) -> Option<&'static str> {
    use super::retention::SampleValue;
    match v {
        None => Some("no value there"),
        Some(Scalar::Number(n)) => match n.as_f64() {
            Some(x) if !super::metrics::usable(x) => Some(super::metrics::INEXACT),
            // An integer beyond 2^53 would round when read as a 64-bit float.
            _ if n
                .as_i64()
                .is_some_and(|i| i.unsigned_abs() > super::metrics::EXACT_INTEGERS)
                || n.as_u64().is_some_and(|u| u > super::metrics::EXACT_INTEGERS) =>
            {
                Some(super::metrics::INEXACT)
            }
            _ => None,
        },
        Some(other) => Some(other.kind()),
    }
}

fn metric_value(v: &Scalar) -> MetricValue {
    match v {
        Scalar::Number(n) if metric_kind(Some(v)).is_some() => MetricValue::Text(n.to_string()),
        Scalar::Number(n) => n
            .as_f64()
            .map_or_else(|| MetricValue::Text(n.to_string()), MetricValue::Number),
        Scalar::String(s) => MetricValue::Text(s.clone()),
        Scalar::LongString(n) => MetricValue::Text(format!("<string of {n} bytes>")),
        Scalar::Array(n) => MetricValue::Text(format!("<array of {n}>")),
        Scalar::Object => MetricValue::Text("<object>".into()),
        Scalar::Bool(b) => MetricValue::Text(b.to_string()),
        Scalar::Null => MetricValue::Text("null".into()),
    }
}

fn not_run(p: PlannedRunBrief, keys: &[String]) -> RunSummary {
    RunSummary {
        cell_label: cell_label(&p.cell, keys, None),
        run_id: p.run_id,
        index: p.index,
        cell: p.cell,
        repetition: p.repetition,
        node: None,
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
        reason: Some("not run".into()),
        stderr_tail: Vec::new(),
        retention: None,
        excluded: Some("not run".into()),
        allocator: None,
        memory_note: None,
        tree_peak_bytes: None,
        mappings_grown: Vec::new(),
        metrics: BTreeMap::new(),
        unusable_metrics: BTreeMap::new(),
        unusable_output: None,
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

/// Reads memory.jsonl line by line: (t-seconds, PSS summed over the run's processes) of the
/// samples that have it (smaps_rollup samples; status samples have no PSS).
fn read_memory(folder: &RunFolder) -> Vec<(f64, u64)> {
    let Ok(f) = folder.open(crate::bundle::files::MEMORY) else {
        return Vec::new();
    };
    let all = std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<MemorySample>(&l).ok())
        .filter_map(|s| Some((s.t_seconds, s.rollup.pss?)))
        .collect::<Vec<_>>();
    decimate(all, MAX_PLOT_POINTS)
}

/// The mappings that grew most between the first and the last breakdown of mappings.json.
fn read_mappings_growth(folder: &RunFolder) -> Vec<super::model::MappingGrowth> {
    #[derive(serde::Deserialize)]
    struct Breakdown {
        #[serde(rename = "t-seconds")]
        t_seconds: f64,
        rows: crate::memory::Mappings,
    }
    #[derive(serde::Deserialize)]
    struct File {
        first: Option<Breakdown>,
        last: Option<Breakdown>,
    }
    let Ok(f) = folder.open(crate::bundle::files::MAPPINGS) else {
        return Vec::new();
    };
    let Ok(File {
        first: Some(first),
        last: Some(last),
    }) = serde_json::from_reader::<_, File>(std::io::BufReader::new(f))
    else {
        return Vec::new();
    };
    last.rows
        .growth(&first.rows)
        .into_iter()
        .filter(|(_, private, rss)| *private != 0 || *rss != 0)
        .take(super::model::MAPPING_GROWTH_ROWS)
        .map(|(row, private, rss)| super::model::MappingGrowth {
            kind: row.kind.as_str().to_string(),
            name: row.name.clone(),
            private_growth: private,
            rss_growth: rss,
            between: "first -> last".to_string(),
            from_seconds: first.t_seconds,
            to_seconds: last.t_seconds,
        })
        .collect()
}

/// The mappings that changed most between the built-in probe's `baseline` breakdown and its
/// `last_loop` one (growth), then between `baseline` and `closed` (after close), from its
/// output's `mappings` (see `crate::probe::document::MappingBreakdowns`); only that object of
/// the document is kept while reading it.
fn read_probe_mappings_growth(output: OutputSource) -> Vec<super::model::MappingGrowth> {
    #[derive(serde::Deserialize)]
    struct Breakdown {
        t_seconds: f64,
        rows: crate::memory::Mappings,
    }
    #[derive(serde::Deserialize)]
    struct Breakdowns {
        baseline: Option<Breakdown>,
        last_loop: Option<Breakdown>,
        closed: Option<Breakdown>,
    }
    #[derive(serde::Deserialize)]
    struct Doc {
        mappings: Option<Breakdowns>,
    }
    let Ok(Doc {
        mappings:
            Some(Breakdowns {
                baseline: Some(first),
                last_loop,
                closed,
            }),
    }) = (match output {
        OutputSource::Whole(bytes) => serde_json::from_slice::<Doc>(&bytes),
        OutputSource::File(file) => serde_json::from_reader::<_, Doc>(std::io::BufReader::new(file)),
    })
    else {
        return Vec::new();
    };
    [
        ("probe baseline -> last loop", last_loop),
        ("probe baseline -> closed", closed),
    ]
    .into_iter()
    .filter_map(|(between, last)| Some((between, last?)))
    .flat_map(|(between, last)| {
        last.rows
            .growth(&first.rows)
            .into_iter()
            .filter(|(_, private, rss)| *private != 0 || *rss != 0)
            .take(super::model::MAPPING_GROWTH_ROWS)
            .map(|(row, private, rss)| super::model::MappingGrowth {
                kind: row.kind.as_str().to_string(),
                name: row.name.clone(),
                private_growth: private,
                rss_growth: rss,
                between: between.to_string(),
                from_seconds: first.t_seconds,
                to_seconds: last.t_seconds,
            })
            .collect::<Vec<_>>()
    })
    .collect()
}

struct RunContext<'a> {
    bundle: &'a Bundle,
    keys: &'a [String],
    pointers: &'a [(String, String)],
    interest: OutputInterest,
    json_output: bool,
    keep_series: bool,
    /// Each finished run's spill record is made by the thread that read it.
    spill: Option<Spill>,
}

impl RunContext<'_> {
    /// `run` as [`RunContext::spill`] records it; `None` when it cannot be made (the report then
    /// reads the runs again instead).
    fn spill_record(&self, kind: Spill, run: &RunSummary) -> Option<Vec<u8>> {
        match kind {
            Spill::Csv => super::records::csv_spill_record(run, self.keys, self.pointers),
            Spill::Json => super::records::json_spill_record(run),
        }
        .ok()
    }
}

/// How to read every run of a bundle again, one at a time, as [`collect`] read it (without plot
/// series): what a report of a bundle larger than [`RUN_ROWS`] writes its CSV rows and JSON
/// `runs` from, instead of holding every run.
#[derive(Debug)]
pub struct Restream {
    dir: std::path::PathBuf,
    keys: Vec<String>,
    pointers: Vec<(String, String)>,
    json_output: bool,
}

impl RunSource for Restream {
    fn try_for_each(&self, f: &mut dyn FnMut(RunSummary) -> anyhow::Result<()>) -> anyhow::Result<()> {
        let bundle = Bundle::open(&self.dir)?;
        let ctx = RunContext {
            bundle: &bundle,
            keys: &self.keys,
            pointers: &self.pointers,
            interest: OutputInterest::new(&self.pointers),
            json_output: self.json_output,
            keep_series: false,
            spill: None,
        };
        read_in_order(
            &ctx,
            bundle.planned_runs_as()?,
            || true,
            |read| {
                f(match read {
                    Read::Finished(run, _) => *run,
                    Read::NotRun(planned) => not_run(*planned, &self.keys),
                })
            },
        )
    }
}

/// What reading one planned run gave.
enum Read {
    /// Its summary (run.json and what it names were read), and its spill record when the
    /// report spills ([`RunContext::spill`]; `Some(None)` when it could not be made).
    Finished(Box<RunSummary>, Option<Option<Vec<u8>>>),
    /// It has no run.json: it did not run (or not to its end).
    NotRun(Box<PlannedRunBrief>),
}

/// Reads one planned run: run.json, then its output and other files through its folder, opened
/// once; `detail` as [`run_summary`].
fn read_planned(ctx: &RunContext<'_>, planned: PlannedRunBrief, detail: bool) -> Result<Read, ReadError> {
    match ctx.bundle.read_run_folder_as(&planned) {
        Ok((rec, folder)) => {
            let run = run_summary(ctx, rec, &folder, detail);
            let spilled = ctx.spill.map(|kind| ctx.spill_record(kind, &run));
            Ok(Read::Finished(Box::new(run), spilled))
        }
        Err(ReadError::RunMissing { .. }) => Ok(Read::NotRun(Box::new(planned))),
        Err(e) => Err(e),
    }
}

/// Planned runs read at a time by [`read_in_order`], split between its threads.
const BATCH: usize = 1024;

/// Reads the runs of `planned` ([`read_planned`]) on [`super::parallel::threads`] threads, [`BATCH`] at a
/// time, and hands each to `f` in plan order, as a loop over them one by one would; `f` takes the
/// runs of one batch while the threads read the next. `detail()` is asked before each batch is
/// read (it may only turn from true to false as `f` is called; a run read in detail that was not
/// needed is summarized as it would be without).
///
/// # Errors
/// The first error in plan order: the plan's, a run's ([`read_planned`]), or `f`'s; runs before
/// it were handed to `f`.
fn read_in_order<E: From<ReadError>>(
    ctx: &RunContext<'_>,
    planned: impl Iterator<Item = Result<PlannedRunBrief, ReadError>>,
    mut detail: impl FnMut() -> bool,
    mut f: impl FnMut(Read) -> Result<(), E>,
) -> Result<(), E> {
    type Part = Vec<Result<Read, ReadError>>;
    let threads = super::parallel::threads();
    let mut planned = planned.fuse();
    std::thread::scope(|scope| {
        // The batch being read: its parts' threads, in plan order, and the plan's error after it.
        let mut reading: Option<(Vec<std::thread::ScopedJoinHandle<'_, Part>>, Option<ReadError>)> = None;
        loop {
            let mut batch = Vec::with_capacity(BATCH);
            let mut plan_error = None;
            for p in planned.by_ref() {
                match p {
                    Ok(p) => batch.push(p),
                    Err(e) => {
                        plan_error = Some(e);
                        break;
                    }
                }
                if batch.len() == BATCH {
                    break;
                }
            }
            let last = batch.len() < BATCH;
            let detail = detail();
            let per_thread = batch.len().div_ceil(threads).max(1);
            let mut parts: Vec<Vec<PlannedRunBrief>> = Vec::new();
            while batch.len() > per_thread {
                parts.push(batch.split_off(batch.len() - per_thread));
            }
            parts.push(batch);
            parts.reverse();
            let handles = parts
                .into_iter()
                .map(|part| {
                    scope.spawn(move || part.into_iter().map(|p| read_planned(ctx, p, detail)).collect())
                })
                .collect();
            if let Some((previous, error)) = reading.replace((handles, plan_error)) {
                hand_over(previous, error, &mut f)?;
            }
            if last {
                break;
            }
        }
        match reading {
            Some((handles, error)) => hand_over(handles, error, &mut f),
            None => Ok(()),
        }
    })
}

/// Hands the runs the threads `handles` read to `f` in order, then the plan's `error` after them.
fn hand_over<E: From<ReadError>>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Vec<Result<Read, ReadError>>>>,
    error: Option<ReadError>,
    f: &mut impl FnMut(Read) -> Result<(), E>,
) -> Result<(), E> {
    for handle in handles {
        for read in handle.join().expect("a run reader thread panicked") {
            f(read?)?;
        }
    }
    error.map_or(Ok(()), |e| Err(e.into()))
}

/// The summary of one finished run; `detail` false leaves out what only the per-run tables and
/// formats show (the mappings that grew, the plot series): a run of a large bundle that is
/// aggregated but not held.
fn run_summary(
    ctx: &RunContext<'_>,
    mut rec: RunRecordBrief,
    folder: &RunFolder,
    detail: bool,
) -> RunSummary {
    // A run that is not ok: its run.json read whole for the reason (it was just read brief, with
    // the same checks).
    let failure = (rec.outcome != Outcome::Ok)
        .then(|| folder.record().ok())
        .flatten()
        .and_then(|whole| RunFailure::read(&whole, &ctx.bundle.run_dir(&rec.run_id), STDERR_TAIL_LINES));
    let (reason, stderr_tail) = failure.map_or((None, Vec::new()), |f| (Some(f.reason), f.stderr_tail));
    let mut s = RunSummary {
        cell_label: cell_label(&rec.cell, ctx.keys, None),
        run_id: rec.run_id.clone(),
        index: rec.index,
        cell: std::mem::take(&mut rec.cell),
        repetition: rec.repetition,
        node: rec.node.take().or_else(|| rec.hostname.take()),
        finished: true,
        attempts: rec.attempt,
        termination: Some(rec.termination),
        exit_code: rec.exit_code,
        signal: rec.signal,
        wall_seconds: Some(rec.wall_seconds),
        peak_rss_bytes: rec.peak_rss_bytes,
        output_check: Some(rec.output_check),
        output_check_reason: rec.output_check_reason.take(),
        outcome: Some(rec.outcome),
        reason,
        stderr_tail,
        retention: None,
        excluded: None,
        allocator: rec.allocator.take(),
        metrics: BTreeMap::new(),
        unusable_metrics: BTreeMap::new(),
        unusable_output: None,
        memory_note: rec.sampling.as_mut().and_then(|s| s.note.take()),
        tree_peak_bytes: rec.cgroup_memory_peak_bytes,
        mappings_grown: if detail && rec.sha256.contains_key(crate::bundle::files::MAPPINGS) {
            read_mappings_growth(folder)
        } else {
            Vec::new()
        },
        points: Vec::new(),
        memory: Vec::new(),
    };
    if rec.outcome != Outcome::Ok {
        s.excluded = Some(match rec.outcome {
            Outcome::Timeout => "timeout".into(),
            Outcome::InvalidOutput => format!("output {}", s.output_text()),
            Outcome::SpawnFailed => "spawn failed".into(),
            Outcome::Interrupted => "interrupted".into(),
            Outcome::Lost => match &rec.lost_reason {
                Some(r) => format!("lost ({r})"),
                None => "lost".into(),
            },
            Outcome::Failed => match (rec.exit_code, rec.signal) {
                (Some(c), _) => format!("failed (exit {c})"),
                (None, Some(sig)) => format!("failed (signal {sig})"),
                _ => "failed".into(),
            },
            Outcome::Ok => unreachable!(),
        });
    }
    if let Some(a) = &s.allocator
        && a.seen_loaded != Some(true)
    {
        s.excluded.get_or_insert_with(|| allocator_exclusion(a));
    }
    let keep_series = ctx.keep_series && detail;
    if keep_series {
        s.memory = read_memory(folder);
    }
    if !ctx.json_output || rec.output_check != OutputCheck::Valid {
        return s;
    }
    let output = match OutputSource::open(folder, &rec.output) {
        Ok(output) => output,
        Err(e) => {
            s.excluded.get_or_insert_with(|| {
                let path = ctx.bundle.run_dir(&rec.run_id).join(&rec.output);
                format!("cannot read output {}: {}", path.display(), e.reason())
            });
            return s;
        }
    };
    let (metrics, parsed, probe_mappings) =
        match read_values(output, ctx.pointers, &ctx.interest, keep_series) {
            Ok(found) => found,
            Err(e) => {
                s.excluded.get_or_insert_with(|| {
                    let path = ctx.bundle.run_dir(&rec.run_id).join(&rec.output);
                    format!("cannot read output {}: {e}", path.display())
                });
                return s;
            }
        };
    for (name, (value, kind)) in metrics {
        if let Some(kind) = kind {
            s.unusable_metrics.insert(name.clone(), kind.to_string());
        }
        s.metrics.insert(name, value);
    }
    if detail
        && probe_mappings
        && matches!(parsed, Parsed::Retention(..))
        && let Ok(output) = OutputSource::open(folder, &rec.output)
    {
        let grown = read_probe_mappings_growth(output);
        if !grown.is_empty() {
            s.mappings_grown = grown;
        }
    }
    match parsed {
        Parsed::NotRetention => {}
        Parsed::Unusable(u) => {
            if s.excluded.is_none() {
                s.excluded = Some(u.reason);
                s.unusable_output = Some(u.gave);
            }
        }
        Parsed::Retention(r, points) => {
            if r.completed == Some(false) {
                s.excluded.get_or_insert_with(|| "completed: false".into());
            }
            s.retention = Some(*r);
            s.points = decimate(points, MAX_PLOT_POINTS);
        }
    }
    s
}

/// The `[report] metrics` values of one output, by name, with what a value that is not
/// aggregated is.
type Metrics = BTreeMap<String, (Option<MetricValue>, Option<&'static str>)>;

/// Pointers of the retention schema's document-level values, in [`DocFields`] order.
const DOC_POINTERS: [&str; 6] = [
    "/arguments/mode",
    "/arguments/tensor_elements",
    "/last_tensor_alive",
    "/completed",
    "/mappings/source",
    // What `samples` is when it is not an array.
    "/samples",
];

/// Streams one output document: the metric values at `pointers` (by name), the retention
/// summary (keeping plot points when `keep_series`), and whether it holds the built-in probe's
/// `mappings` breakdowns.
///
/// # Errors
/// As [`read_output`] (the output check's reader and limits).
/// What [`read_values`] asks of every output: built once per report.
struct OutputInterest {
    interest: Interest,
    /// Slot of each `[report]` metric's pointer, in the order of the pointers.
    metric_slots: Vec<usize>,
    /// Slot of each of [`DOC_POINTERS`].
    doc_slots: Vec<usize>,
    /// The list of `/samples`.
    samples: usize,
    /// The pointers as the quick reader takes them; `None` when it does not take them all.
    quick: Option<super::quick::Pointers>,
}

impl OutputInterest {
    fn new(pointers: &[(String, String)]) -> OutputInterest {
        let mut interest = Interest::default();
        // Pointers were checked to start with `/` or be empty when the manifest was read.
        let metric_slots: Vec<usize> = pointers
            .iter()
            .map(|(_, p)| interest.value(p).unwrap_or(usize::MAX))
            .collect();
        let doc_slots: Vec<usize> = DOC_POINTERS
            .iter()
            .map(|p| interest.value(p).unwrap_or(usize::MAX))
            .collect();
        let names = SampleField::ALL.map(SampleField::name);
        let samples = interest.each("/samples", &names).unwrap_or(usize::MAX);
        OutputInterest {
            interest,
            metric_slots,
            doc_slots,
            samples,
            quick: super::quick::Pointers::new(pointers),
        }
    }
}

/// A run's output: read whole when short (the quick way, [`RunFolder::read_small`]), else open
/// to be streamed.
enum OutputSource {
    Whole(Vec<u8>),
    File(std::fs::File),
}

impl OutputSource {
    /// The output `name` of the run in `folder`.
    fn open(folder: &RunFolder<'_>, name: &str) -> Result<OutputSource, ReadError> {
        Ok(match folder.read_small(name, OUTPUT_WHOLE_LIMIT)? {
            Some(bytes) => OutputSource::Whole(bytes),
            None => OutputSource::File(folder.open(name)?),
        })
    }
}

fn read_values(
    output: OutputSource,
    pointers: &[(String, String)],
    asked: &OutputInterest,
    keep_series: bool,
) -> Result<(Metrics, Parsed, bool), OutputError> {
    let OutputInterest {
        interest,
        metric_slots,
        doc_slots,
        samples,
        quick,
    } = asked;
    let samples = *samples;
    let new_acc = || Accumulator::new(if keep_series { MAX_PLOT_POINTS } else { 0 });
    /// The metrics of `pointers` from the value at each (by its index).
    fn metrics<'v>(pointers: &[(String, String)], value: impl Fn(usize) -> Option<&'v Scalar>) -> Metrics {
        pointers
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let v = value(i);
                (name.clone(), (v.map(metric_value), metric_kind(v)))
            })
            .collect()
    }
    // An output read whole is read the quick way when it has the plain shape ([`super::quick`]);
    // else (or when the metric pointers are not all of the kind that way takes) by the general
    // reader.
    if let (Some(quick), OutputSource::Whole(bytes)) = (quick, &output) {
        let mut acc = new_acc();
        if let Some(found) = super::quick::read(bytes, &mut acc, quick) {
            let parsed = if found.samples {
                acc.finish(found.doc)
            } else {
                Parsed::NotRetention
            };
            let metrics = metrics(pointers, |i| found.metrics[i].as_ref());
            return Ok((metrics, parsed, found.probe_mappings));
        }
    }
    let mut acc = new_acc();
    let mut on_list = |event: ListEvent<'_>| match event {
        ListEvent::Start { .. } => acc = new_acc(),
        ListEvent::Element { index, fields, .. } => {
            // fields[0] is the element itself, then the fields in SampleField::ALL's order.
            let sample = matches!(fields.first(), Some(Some(Scalar::Object))).then(|| {
                let mut s = SampleFields::default();
                for (field, value) in SampleField::ALL.iter().zip(&fields[1..]) {
                    s.set(*field, value.as_ref());
                }
                s
            });
            acc.push(index, sample);
        }
    };
    let found = match output {
        OutputSource::Whole(bytes) => read_output_bytes(&bytes, interest, &mut on_list),
        OutputSource::File(file) => read_output(file, interest, &mut on_list),
    }?;
    let value = |slot: usize| found.values.get(slot).and_then(Option::as_ref);
    let metrics = metrics(pointers, |i| value(metric_slots[i]));
    let parsed = if found.lists.get(samples).copied().flatten() == Some(true) {
        acc.finish(DocFields {
            mode: value(doc_slots[0]).and_then(Scalar::as_str).map(str::to_string),
            tensor_elements: value(doc_slots[1]).and_then(Scalar::as_u64),
            last_tensor_alive: value(doc_slots[2]).and_then(Scalar::as_bool),
            completed: value(doc_slots[3]).and_then(Scalar::as_bool),
        })
    } else if let Some(other) = value(doc_slots[5]) {
        // `samples` there but not an array: the retention schema's key with nothing usable in
        // it, said as such (it was taken for an output of another schema and left out silently).
        use super::retention::SampleValue;
        let kind = other.kind();
        Parsed::Unusable(super::retention::Unusable {
            reason: format!("samples is {kind}, not an array of samples"),
            gave: format!("{kind} for samples"),
        })
    } else {
        Parsed::NotRetention
    };
    let probe_mappings = value(doc_slots[4]).and_then(Scalar::as_str).is_some();
    Ok((metrics, parsed, probe_mappings))
}

/// Reads a bundle and computes its report. `keep_series` keeps each run's plot series.
///
/// # Errors
/// [`ReportError::Read`] for an unreadable bundle.json / plan.json / run.json (a planned run without
/// run.json is reported as not run, not as an error), [`ReportError::Metrics`] for a bad
/// `[report] metrics` table.
pub fn collect(dir: &Path, keep_series: bool) -> Result<Report, ReportError> {
    collect_spilling(dir, keep_series, None)
}

/// Most planned runs a CSV or JSON report spills to a temporary file ([`collect_spilling`]); a
/// larger bundle has its runs read a second time instead (a spilled run takes about 1 KB of
/// `TMPDIR`).
pub const SPILL_MAX_RUNS: usize = 250_000;

/// [`collect`], and for a bundle of more than [`RUN_ROWS`] (and at most [`SPILL_MAX_RUNS`])
/// planned runs, every run written as `spill` (CSV row or JSON, see [`Spill`]) to a temporary
/// file as it is read, so that the CSV or JSON report is written without reading the bundle a
/// second time.
///
/// # Errors
/// As [`collect`]. A temporary file that cannot be made or written (`TMPDIR` full or read-only)
/// is no error: the report then reads the runs a second time, as for a larger bundle.
pub fn collect_spilling(dir: &Path, keep_series: bool, spill: Option<Spill>) -> Result<Report, ReportError> {
    collect_with(dir, keep_series, spill, &[])
}

/// [`collect_spilling`] with the control cell named by `control` (`report --control KEY=VALUE`,
/// each value as the matrix spells it or the same number) instead of the manifest's `[report]
/// control`: the estimates and contrasts are pivoted on it without running anything again.
///
/// # Errors
/// As [`collect`]; [`ReportError::Control`] when a key of `control` is not a matrix key or no
/// cell has its value.
pub fn collect_with(
    dir: &Path,
    keep_series: bool,
    spill: Option<Spill>,
    control: &[(String, String)],
) -> Result<Report, ReportError> {
    let bundle = Bundle::open(dir)?;
    let plan = bundle.plan_header()?;
    let info = bundle.info().clone();
    let manifest_path = bundle.path(crate::bundle::files::MANIFEST);
    let mut axes: Vec<(String, Vec<crate::manifest::Value>)> = Vec::new();
    let mut measured = None;
    let (pointers, mut settings) = match bundle.manifest_text() {
        Ok(text) => {
            axes = super::contrasts::manifest_axes(&text);
            let bad = |message| ReportError::Metrics {
                path: manifest_path.display().to_string(),
                message,
            };
            measured = super::units::measured(&text);
            (
                metric_pointers(&text).map_err(bad)?,
                super::estimates::settings(&text).map_err(bad)?,
            )
        }
        Err(ReadError::Missing { .. }) => Default::default(),
        Err(e) => return Err(e.into()),
    };
    // An adaptive bundle is judged with the design its rule stopped on (DESIGN 9).
    settings.design = info.adaptive.as_ref().and_then(|a| a.design.clone());
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
    let json_output = plan.output_format == OutputFormat::Json;
    let ctx = RunContext {
        bundle: &bundle,
        keys: &keys,
        pointers: &pointers,
        interest: OutputInterest::new(&pointers),
        json_output,
        keep_series,
        spill: spill.filter(|_| (RUN_ROWS + 1..=SPILL_MAX_RUNS).contains(&bundle.info().planned_runs)),
    };
    let mut spill_file = ctx
        .spill
        .and_then(|_| tempfile::tempfile().ok())
        .map(|f| std::io::BufWriter::with_capacity(1 << 20, f));
    // One pass over the plan. Every run is aggregated as it is read (counts, nodes, failures,
    // compact per-run numbers); at most RUN_ROWS runs are held whole: all of them while the plan
    // has no more, else the first RUN_ROWS finished ones (runs that did not run are counted).
    let mut values = RunValues::new(&pointers);
    let mut held: Vec<RunSummary> = Vec::with_capacity(bundle.info().planned_runs.min(RUN_ROWS));
    let mut held_finished = 0;
    let mut large = false;
    let mut planned_seen = 0;
    let mut counts = BTreeMap::new();
    let mut not_run_count = 0;
    let mut not_run_ranges: Vec<(usize, usize)> = Vec::new();
    let mut nodes = std::collections::BTreeSet::new();
    let mut failures = FailureGroups::default();
    let mut redone = (0, 0u64);
    let mut has_retention = false;
    // The planned count that makes a bundle large is known only from the plan; a batch may
    // be read in detail just before (detail is cheap beside the batch's reading).
    let held_finished_now = std::cell::Cell::new(0);
    let json_spill = ctx.spill == Some(Spill::Json);
    let large_now = std::cell::Cell::new(false);
    read_in_order(
        &ctx,
        bundle.planned_runs_as()?,
        // A JSON spill holds every run as the report's JSON writes it, in detail (the mappings
        // that grew): every run is read so, as a report without a spill reads them again.
        || json_spill || !large_now.get() || held_finished_now.get() < RUN_ROWS,
        |read| -> Result<(), ReportError> {
            planned_seen += 1;
            if !large && planned_seen > RUN_ROWS {
                large = true;
                large_now.set(true);
                held.retain(|r| r.finished);
                values.forget_unfinished_cells();
            }
            // A record that cannot be made or written ends the spill (the runs are read again).
            let mut spill_write = |record: Option<Vec<u8>>| {
                let written = match (spill_file.as_mut(), record) {
                    (Some(w), Some(r)) => std::io::Write::write_all(w, &r).is_ok(),
                    _ => false,
                };
                if !written {
                    spill_file = None;
                }
            };
            let run = match read {
                Read::Finished(run, spilled) => {
                    if let Some(outcome) = run.outcome {
                        *counts.entry(outcome).or_insert(0) += 1;
                    }
                    if let Some(record) = spilled {
                        spill_write(record);
                    }
                    *run
                }
                Read::NotRun(planned) => {
                    not_run_count += 1;
                    let ranges = not_run_ranges.len();
                    match not_run_ranges.last_mut() {
                        Some((_, end)) if *end + 1 == planned.index => *end = planned.index,
                        _ if ranges < RUN_ROWS => not_run_ranges.push((planned.index, planned.index)),
                        _ => {}
                    }
                    let run = not_run(*planned, &keys);
                    if let Some(kind) = ctx.spill {
                        spill_write(ctx.spill_record(kind, &run));
                    }
                    if large {
                        return Ok(());
                    }
                    run
                }
            };
            if run.finished {
                if let Some(n) = &run.node
                    && !nodes.contains(n)
                {
                    nodes.insert(n.clone());
                }
                if run.attempts > 1 {
                    redone.0 += 1;
                    redone.1 += u64::from(run.attempts - 1);
                }
                has_retention |= run.retention.is_some();
                failures.push(&run);
            }
            values.push(&run, &keys);
            if !large || (run.finished && held_finished < RUN_ROWS) {
                held_finished += usize::from(run.finished);
                held_finished_now.set(held_finished);
                held.push(run);
            }
            Ok(())
        },
    )?;
    values.finish();
    let nodes: Vec<String> = nodes.into_iter().collect();
    let mode_key = aggregation::mode_key(&keys, &values);
    let cells = aggregation::cells(&values, &keys, mode_key.as_deref(), &pointers);
    if !control.is_empty() {
        settings.control =
            Some(super::contrasts::resolve_control(control, &keys, &values).map_err(ReportError::Control)?);
    }
    let mut estimates = if has_retention {
        super::estimates::estimates(&values, &keys, mode_key.as_deref(), &settings)
    } else {
        Default::default()
    };
    if !control.is_empty()
        && let Some(c) = estimates.control.as_ref()
    {
        let mut c = c.clone();
        c.source = "--control";
        estimates.control = Some(c);
    }
    let contrasts = if has_retention {
        super::contrasts::contrasts(
            &values,
            &estimates,
            &super::contrasts::axes_of(&keys, axes, &values),
            &settings,
        )
    } else {
        Vec::new()
    };
    let spill_kind = ctx.spill;
    drop(ctx);
    let restream = large.then(|| Restream {
        dir: dir.to_path_buf(),
        keys: keys.clone(),
        pointers: pointers.clone(),
        json_output,
    });
    Ok(Report {
        bundle: dir.display().to_string(),
        experiment: info.experiment,
        status: effective_status(bundle.dir(), bundle.info()),
        sbatch_refusals: info
            .slurm
            .as_ref()
            .map(|s| {
                s.refusals
                    .iter()
                    .map(|r| format!("{}: {}", r.script, r.describe()))
                    .collect()
            })
            .unwrap_or_default(),
        hwr_exp_version: info.hwr_exp_version,
        revision,
        dirty: provenance.as_ref().and_then(|p| find_bool(p, "dirty")),
        provenance_recorded: provenance.as_ref().is_none_or(|p| {
            p.get("repo").is_some_and(|r| !r.is_null())
                || p.get("dirty").and_then(Json::as_str) == Some("unknown")
        }),
        drift: provenance.as_ref().and_then(|p| find_bool(p, "drift")),
        manifest_sha256: info.manifest_sha256,
        planned_runs: info.planned_runs.max(planned_seen),
        counts,
        not_run: not_run_count,
        matrix_keys: keys,
        mode_key,
        metric_pointers: pointers,
        has_retention,
        measured,
        executor: info.executor.clone(),
        nodes,
        failures_by_reason: failures.finish(),
        runs: match (
            spill_file.and_then(|w| w.into_inner().ok()),
            spill_kind,
            restream.is_some(),
        ) {
            (Some(file), Some(kind), true) => Runs::new(held, restream).with_spill(kind, file),
            _ => Runs::new(held, restream),
        },
        cells,
        estimates,
        contrasts,
        overrides: info.overrides,
        adaptive: info.adaptive,
        values,
        redone,
        not_run_ranges,
    })
}

/// Why a run whose `[isolation] allocator` was not shown in effect is left out of the estimates:
/// the run's own reason where run.json has one, else what `seen-loaded` says.
pub(crate) fn allocator_exclusion(a: &crate::allocator::Record) -> String {
    let what = match &a.path {
        Some(path) => format!("allocator {} ({path})", a.name),
        None => format!("allocator {}", a.name),
    };
    match (a.seen_loaded, &a.reason) {
        (Some(false), _) if a.path.is_none() => format!(
            "allocator glibc, but {} mapped",
            if a.mapped.is_empty() {
                "another allocator".to_string()
            } else {
                a.mapped.join(", ")
            }
        ),
        (Some(false), Some(r)) => format!("{what} not seen loaded: {r}"),
        (Some(false), None) => format!("{what} not seen loaded"),
        (_, Some(r)) => format!("{what} not shown loaded: {r}"),
        (_, None) => format!(
            "{what} not shown loaded: the C library was never seen mapped (a statically linked \
             program, or one that ended before its loader finished)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    fn metric_pointers_from_manifest() {
        let text = "format = 1\n[report]\nmetrics = { b = \"/x/0\", a = \"/y\" }\n";
        assert_eq!(
            metric_pointers(text).unwrap(),
            vec![("a".into(), "/y".into()), ("b".into(), "/x/0".into())]
        );
        assert!(metric_pointers("[report]\nmetrics = { a = 3 }\n").is_err());
        assert!(metric_pointers("format = 1\n").unwrap().is_empty());
    }

    /// The metric pointers the quick reader is tested with: top-level ones, one into a key a
    /// document may have, none.
    fn pointer_sets() -> Vec<Vec<(String, String)>> {
        let p = |n: &str, v: &str| (n.to_string(), v.to_string());
        vec![
            vec![],
            vec![
                p("preparation", "/preparation_seconds"),
                p("completed", "/completed"),
                p("absent", "/no/such/key"),
            ],
            vec![p("x", "/x"), p("y", "/x"), p("t", "/last_tensor_alive")],
        ]
    }

    /// `read_values` of `doc` the quick way when it takes it, and by the general reader alone,
    /// as text; and whether the quick way took it.
    fn both_ways(doc: &str, pointers: &[(String, String)], keep: bool) -> (String, String, bool) {
        let quick = OutputInterest::new(pointers);
        assert!(
            quick.quick.is_some(),
            "{pointers:?} are all of a kind the quick reader takes"
        );
        let general = OutputInterest {
            quick: None,
            ..OutputInterest::new(pointers)
        };
        let whole = || OutputSource::Whole(doc.as_bytes().to_vec());
        let took = super::super::quick::read(
            doc.as_bytes(),
            &mut Accumulator::new(0),
            quick.quick.as_ref().unwrap(),
        )
        .is_some();
        (
            format!("{:?}", read_values(whole(), pointers, &quick, keep)),
            format!("{:?}", read_values(whole(), pointers, &general, keep)),
            took,
        )
    }

    const PLAIN: &str = r#"{"schema_version":1,"arguments":{"mode":"get_tensor","tensor_elements":16,"iterations":2000},
        "preparation_seconds":0.0135,"samples":[
        {"phase":"before_file","iterations":0,"rss_bytes":5900000,"private_bytes":1900064,"anonymous_bytes":1400000,"fd_count":3},
        {"phase":"baseline","iterations":0,"loop_seconds":0.0,"rss_bytes":6000000,"private_bytes":2000064,"anonymous_bytes":1500000,"fd_count":4},
        {"phase":"loop","iterations":500,"rss_bytes":6004096,"private_bytes":2004160,"anonymous_bytes":1504096,"fd_count":4},
        {"phase":"loop","iterations":1000,"rss_bytes":6012288,"private_bytes":2012352,"anonymous_bytes":1512288,"fd_count":4},
        {"phase":"closed","iterations":1000,"rss_bytes":6000000,"private_bytes":2000064,"anonymous_bytes":1500000,"fd_count":3}],
        "mappings":{"source":"smaps"},"completed":true,"last_tensor_alive":false}"#;

    #[test]
    fn the_quick_reader_takes_a_plain_output_and_reads_it_as_the_general_one() {
        for pointers in pointer_sets() {
            for keep in [false, true] {
                let (quick, general, took) = both_ways(PLAIN, &pointers, keep);
                assert!(took, "a plain output is taken the quick way");
                assert_eq!(quick, general);
                assert!(quick.contains("Retention"), "{quick}");
            }
        }
    }

    /// `doc` with the keys the readers look for written with an escape (`"\u0073amples":`): the
    /// same document to a JSON reader.
    fn keys_escaped(doc: &str) -> String {
        let mut doc = doc.to_string();
        for key in SampleField::ALL.map(SampleField::name).into_iter().chain([
            "samples",
            "arguments",
            "mode",
            "completed",
            "mappings",
            "source",
            "x",
        ]) {
            let escaped = format!("\"\\u{:04x}{}\":", key.as_bytes()[0], &key[1..]);
            doc = doc.replace(&format!("\"{key}\":"), &escaped);
        }
        doc
    }

    #[test]
    fn keys_written_with_escapes_are_read_as_the_keys_they_are() {
        let doc = keys_escaped(PLAIN);
        assert!(doc.contains(r#""\u0073amples":"#), "{doc}");
        for pointers in pointer_sets() {
            let (quick, general, took) = both_ways(&doc, &pointers, false);
            assert!(took, "taken the quick way");
            assert_eq!(quick, general);
            assert_eq!(
                quick,
                both_ways(PLAIN, &pointers, false).0,
                "as if written plainly"
            );
        }
    }

    #[test]
    fn the_quick_reader_leaves_to_the_general_one_what_it_does_not_take() {
        let pointers = &pointer_sets()[1];
        for doc in [
            // A key twice, at the top and in a sample.
            PLAIN.replace(r#""completed":true"#, r#""completed":true,"completed":false"#),
            PLAIN.replace(
                r#""phase":"loop","iterations":500"#,
                r#""phase":"loop","phase":"closed","iterations":500"#,
            ),
            // A key a longer pointer goes into; samples not an array; a sample not an object.
            PLAIN.replace(r#""schema_version":1"#, r#""no":{"such":{"key":7}}"#),
            PLAIN.replace(r#""samples":["#, r#""samples":7,"s":["#),
            PLAIN.replace(r#""samples":["#, r#""samples":[3,"#),
            // Not a document at all.
            PLAIN[..200].to_string(),
            "[1,2]".to_string(),
        ] {
            let (quick, general, took) = both_ways(&doc, pointers, false);
            assert!(!took, "{doc}");
            assert_eq!(quick, general);
        }
        // Pointers it does not take at all: the whole document, into the schema's keys.
        for pointer in ["", "/samples/0/phase", "/arguments/mode", "/completed/x"] {
            let pointers = vec![("p".to_string(), pointer.to_string())];
            assert!(
                super::super::quick::Pointers::new(&pointers).is_none(),
                "{pointer}"
            );
        }
    }

    /// JSON text of a value: scalars of every kind (strings with escapes and lone surrogates,
    /// integers at the 64-bit edges, fractions, floats that are whole), arrays and objects,
    /// `depth` deep.
    fn any_value(depth: u32) -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            any::<i64>().prop_map(|i| i.to_string()),
            any::<u64>().prop_map(|i| i.to_string()),
            (0u64..10_000).prop_map(|i| i.to_string()),
            Just("18446744073709551616".to_string()),
            Just("1.5".to_string()),
            Just("4096.0".to_string()),
            Just("1e3".to_string()),
            Just(r#""loop""#.to_string()),
            Just(r#""baseline""#.to_string()),
            Just(r#""closed""#.to_string()),
            Just(r#""get_tensor""#.to_string()),
            Just(r#""caf\u00e9""#.to_string()),
            Just(r#""\ud800x""#.to_string()),
            Just(r#""\ud83d\ude00""#.to_string()),
        ];
        scalar.prop_recursive(depth, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((key(), inner), 0..4).prop_map(|kv| object(&kv)),
            ]
        })
    }

    /// An object key: a sample field, or another key a document may have.
    fn key() -> impl Strategy<Value = String> {
        let others = [
            "loop_seconds",
            "mode",
            "tensor_elements",
            "source",
            "such",
            "key",
            "x",
            "other",
        ];
        let keys: Vec<&str> = SampleField::ALL
            .map(SampleField::name)
            .into_iter()
            .chain(others)
            .collect();
        prop::sample::select(keys).prop_map(str::to_string)
    }

    fn object(kv: &[(String, String)]) -> String {
        let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", fields.join(","))
    }

    /// A sample: mostly an object of the sample fields (each at most once, in any order, now and
    /// then one twice) with likely values, sometimes anything.
    fn any_sample() -> impl Strategy<Value = String> {
        let phase = prop::sample::select(vec![
            r#""baseline""#,
            r#""loop""#,
            r#""closed""#,
            r#""before_file""#,
            "null",
            "3",
        ])
        .prop_map(str::to_string);
        sample_in(phase.boxed())
    }

    /// [`any_sample`] with its phase from `phase`.
    fn sample_in(phase: BoxedStrategy<String>) -> impl Strategy<Value = String> {
        let count = || {
            prop_oneof![
                20 => (0u64..100_000_000).prop_map(|i| i.to_string()),
                1 => Just("null".to_string()),
                1 => any_value(1),
            ]
        };
        let iterations = prop_oneof![
            6 => (0u64..5000).prop_map(|i| (i * 100).to_string()),
            1 => any_value(0),
        ];
        let fields = (
            (phase, iterations, count(), count(), count(), count()),
            prop::collection::vec(prop::bool::weighted(0.95), 6),
            prop::option::weighted(0.2, (key(), any_value(1))),
        )
            .prop_map(|((p, i, a, b, c, d), present, extra)| {
                let names = SampleField::ALL.map(SampleField::name);
                let mut kv: Vec<(String, String)> = names
                    .iter()
                    .zip([p, i, a, b, c, d])
                    .zip(present)
                    .filter(|(_, here)| *here)
                    .map(|((n, v), _)| (n.to_string(), v))
                    .collect();
                kv.extend(extra);
                kv
            })
            .prop_shuffle();
        prop_oneof![
            9 => fields.prop_map(|kv| object(&kv)),
            1 => any_value(1),
        ]
    }

    /// A document: mostly an object with the retention schema's keys, sometimes anything.
    fn any_doc() -> impl Strategy<Value = String> {
        let arguments = prop_oneof![
            3 => (any_value(0), any_value(0)).prop_map(|(m, t)| format!(r#"{{"mode":{m},"tensor_elements":{t},"iterations":9}}"#)),
            1 => any_value(2),
        ];
        // The phases in the schema's order (before_file, baseline, loops, closed), each sample
        // likely but not sure to be plain: most such documents give a retention summary.
        let in_order = (any::<bool>(), 1usize..6, any::<bool>())
            .prop_flat_map(|(before, loops, closed)| {
                let mut phases = Vec::new();
                if before {
                    phases.push("before_file");
                }
                phases.push("baseline");
                phases.extend(std::iter::repeat_n("loop", loops));
                if closed {
                    phases.push("closed");
                }
                phases
                    .into_iter()
                    .map(|p| sample_in(Just(format!("\"{p}\"")).boxed()))
                    .collect::<Vec<_>>()
            })
            .prop_map(|v| format!("[{}]", v.join(",")));
        let samples = prop_oneof![
            6 => in_order,
            3 => prop::collection::vec(any_sample(), 0..8).prop_map(|v| format!("[{}]", v.join(","))),
            1 => any_value(2),
        ];
        let mappings = prop_oneof![
            3 => any_value(0).prop_map(|s| format!(r#"{{"source":{s}}}"#)),
            1 => any_value(1),
        ];
        let flag = || prop_oneof![3 => Just("true".to_string()), 1 => any_value(1)];
        let scalar = || any_value(0);
        // Each key at most once, in any order (now and then one twice).
        let entries = (
            (
                prop::option::weighted(0.9, arguments),
                prop::option::weighted(0.9, samples),
            ),
            (
                prop::option::weighted(0.5, flag()),
                prop::option::weighted(0.5, flag()),
            ),
            (
                prop::option::weighted(0.5, scalar()),
                prop::option::weighted(0.3, any_value(2)),
            ),
            (
                prop::option::weighted(0.2, any_value(2)),
                prop::option::weighted(0.3, mappings),
            ),
            prop::option::weighted(0.1, (key(), any_value(1))),
        )
            .prop_map(|((a, s), (c, l), (p, x), (n, m), extra)| {
                let keys = [
                    "arguments",
                    "samples",
                    "completed",
                    "last_tensor_alive",
                    "preparation_seconds",
                    "x",
                    "no",
                    "mappings",
                ];
                let mut kv: Vec<(String, String)> = keys
                    .iter()
                    .zip([a, s, c, l, p, x, n, m])
                    .filter_map(|(k, v)| Some((k.to_string(), v?)))
                    .collect();
                kv.extend(extra);
                kv
            })
            .prop_shuffle();
        prop_oneof![
            19 => entries.prop_map(|kv| object(&kv)),
            1 => any_value(2),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn the_quick_reader_agrees_with_the_general_one(doc in any_doc(), keep in any::<bool>(), set in 0usize..3, escaped in any::<bool>()) {
            let doc = if escaped { keys_escaped(&doc) } else { doc };
            let (quick, general, _) = both_ways(&doc, &pointer_sets()[set], keep);
            prop_assert_eq!(quick, general);
        }
    }
}
