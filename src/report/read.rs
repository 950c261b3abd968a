//! Reading one planned run of a bundle into a [`RunSummary`]: run.json, then its output (the
//! `[report] metrics` pointers and the retention fields, `samples` folded one at a time into a
//! [`crate::report::retention::Accumulator`], or read the quick way, [`crate::report::quick`]),
//! memory.jsonl, mappings.json and the stderr tail, through the run's folder opened once. The
//! first step of a report (read -> fold -> model -> render): `collection` folds the runs read
//! here.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde_json::Value as Json;

use super::model::{
    MAPPING_GROWTH_ROWS, MappingGrowth, MetricValue, RunSummary, STDERR_TAIL_LINES, Spill, cell_label,
};
use super::retention::{Accumulator, DocFields, Parsed, SampleField, SampleFields};
use crate::bundle::output::{
    Interest, ListEvent, OUTPUT_WHOLE_LIMIT, OutputError, Scalar, read_output, read_output_bytes,
};
use crate::bundle::read::{Bundle, ReadError, RunFolder};
use crate::bundle::reason::RunFailure;
use crate::bundle::{Outcome, OutputCheck, PlannedRunBrief, RunRecordBrief};
use crate::exec::MemorySample;

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

pub(super) fn not_run(p: PlannedRunBrief, keys: &[String]) -> RunSummary {
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
fn read_mappings_growth(folder: &RunFolder) -> Vec<MappingGrowth> {
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
        .take(MAPPING_GROWTH_ROWS)
        .map(|(row, private, rss)| MappingGrowth {
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
fn read_probe_mappings_growth(output: OutputSource) -> Vec<MappingGrowth> {
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
            .take(MAPPING_GROWTH_ROWS)
            .map(|(row, private, rss)| MappingGrowth {
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

/// What reading a bundle's runs needs: the bundle, its matrix keys and `[report] metrics`, what
/// of an output to keep, and what to keep of each run.
pub(super) struct RunContext<'a> {
    /// The bundle read.
    pub(super) bundle: &'a Bundle,
    /// Matrix keys, in manifest order.
    pub(super) keys: &'a [String],
    /// `[report] metrics`: (name, JSON Pointer).
    pub(super) pointers: &'a [(String, String)],
    /// What of an output to keep ([`OutputInterest::new`] of `pointers`).
    pub(super) interest: OutputInterest,
    /// Whether the outputs are JSON (else JSON Lines).
    pub(super) json_output: bool,
    /// Whether to keep plot series.
    pub(super) keep_series: bool,
    /// Each finished run's spill record is made by the thread that read it.
    pub(super) spill: Option<Spill>,
}

impl RunContext<'_> {
    /// `run` as [`RunContext::spill`] records it; `None` when it cannot be made (the report then
    /// reads the runs again instead).
    pub(super) fn spill_record(&self, kind: Spill, run: &RunSummary) -> Option<Vec<u8>> {
        match kind {
            Spill::Csv => super::records::csv_spill_record(run, self.keys, self.pointers),
            Spill::Json => super::records::json_spill_record(run),
        }
        .ok()
    }
}

/// What reading one planned run gave.
pub(super) enum Read {
    /// Its summary (run.json and what it names were read), and its spill record when the
    /// report spills ([`RunContext::spill`]; `Some(None)` when it could not be made).
    Finished(Box<RunSummary>, Option<Option<Vec<u8>>>),
    /// It has no run.json: it did not run (or not to its end).
    NotRun(Box<PlannedRunBrief>),
}

/// Reads one planned run: run.json, then its output and other files through its folder, opened
/// once; `detail` as [`run_summary`].
pub(super) fn read_planned(
    ctx: &RunContext<'_>,
    planned: PlannedRunBrief,
    detail: bool,
) -> Result<Read, ReadError> {
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
pub(super) struct OutputInterest {
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
    /// What to keep of an output for the `[report] metrics` `pointers` and the retention schema.
    pub(super) fn new(pointers: &[(String, String)]) -> OutputInterest {
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
mod tests;
