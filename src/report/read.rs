//! Reading one planned run of a bundle into a [`RunSummary`]: run.json (with its `summary` of
//! the output, [`crate::bundle::summary::Summary`]; for a run.json without one, or for plot
//! series, the output through the same function, [`summarize`]), memory.jsonl, mappings.json
//! and the stderr tail, through the run's folder opened once. The first step of a report (read
//! -> fold -> model -> render): `collection` folds the runs read here.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde_json::Value as Json;

use super::model::{MAPPING_GROWTH_ROWS, MappingGrowth, RunSummary, STDERR_TAIL_LINES, Spill, cell_label};
use crate::bundle::output::OUTPUT_WHOLE_LIMIT;
pub(super) use crate::bundle::output_summary::OutputInterest;
use crate::bundle::output_summary::{OutputSource, summarize};
use crate::bundle::read::{Bundle, ListedRunFolders, ReadError, RunFolder};
use crate::bundle::reason::RunFailure;
use crate::bundle::retention::Parsed;
use crate::bundle::{Outcome, OutputCheck, RunRecord};
use crate::exec::MemorySample;
use crate::plan::PlannedRun;

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

pub(super) fn not_run(p: PlannedRun, keys: &[String]) -> RunSummary {
    let cell: BTreeMap<String, crate::manifest::Value> = p.cell.into_iter().collect();
    RunSummary {
        cell_label: cell_label(&cell, keys, None),
        run_id: p.run_id,
        index: p.index,
        cell,
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
    /// `runs/` as listed before the runs are read ([`RunContext::list_runs`]): a run whose
    /// folder was not there is not run, without looking it up.
    pub(super) listed: Option<ListedRunFolders>,
}

/// Most entries of `runs/` listed for [`RunContext::listed`] (about 2 MB of hashes); a bundle
/// with more run folders has each run looked up.
const LISTED_RUN_FOLDERS_MOST: usize = 131_072;

impl RunContext<'_> {
    /// `runs/` of `bundle` listed for [`RunContext::listed`], when it holds at most half as many
    /// entries as runs are planned, and at most [`LISTED_RUN_FOLDERS_MOST`] (a bundle whose runs
    /// mostly ran gains nothing from the listing). A run recorded after the listing is reported
    /// as not run, as one recorded after the report read its place in the plan always was.
    pub(super) fn list_runs(bundle: &Bundle) -> Option<ListedRunFolders> {
        bundle.run_folders_listed((bundle.info().planned_runs / 2).min(LISTED_RUN_FOLDERS_MOST))
    }

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
    NotRun(Box<PlannedRun>),
}

/// Reads one planned run: run.json, then its output and other files through its folder, opened
/// once; `detail` as [`run_summary`].
pub(super) fn read_planned(
    ctx: &RunContext<'_>,
    planned: PlannedRun,
    detail: bool,
) -> Result<Read, ReadError> {
    if ctx.listed.as_ref().is_some_and(|l| !l.may_hold(&planned.run_id)) {
        return Ok(Read::NotRun(Box::new(planned)));
    }
    match ctx.bundle.read_run_folder(&planned) {
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
fn run_summary(ctx: &RunContext<'_>, mut rec: RunRecord, folder: &RunFolder, detail: bool) -> RunSummary {
    let failure = (rec.outcome != Outcome::Ok)
        .then(|| RunFailure::read(&rec, &ctx.bundle.run_dir(&rec.run_id), STDERR_TAIL_LINES))
        .flatten();
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
    // run.json's summary of the output, made when the run was recorded; the output read through
    // the same function when there is none (a bundle written before it), when it was made for
    // other `[report] metrics`, or for the plot series it does not keep.
    let recorded = rec
        .summary
        .take()
        .filter(|m| !keep_series && m.covers(ctx.pointers));
    let mut summary = match recorded {
        Some(summary) => summary,
        None => {
            let path = || ctx.bundle.run_dir(&rec.run_id).join(&rec.output);
            let output = match open_output(folder, &rec.output) {
                Ok(output) => output,
                Err(e) => {
                    s.excluded.get_or_insert_with(|| {
                        format!("cannot read output {}: {}", path().display(), e.reason())
                    });
                    return s;
                }
            };
            let max_points = if keep_series { MAX_PLOT_POINTS } else { 0 };
            match summarize(output, &ctx.interest, max_points, detail) {
                Ok((summary, points)) => {
                    s.points = decimate(points, MAX_PLOT_POINTS);
                    summary
                }
                Err(e) => {
                    s.excluded
                        .get_or_insert_with(|| format!("cannot read output {}: {e}", path().display()));
                    return s;
                }
            }
        }
    };
    for (name, pointer) in ctx.pointers {
        if let Some(kind) = summary.unusable_metrics.get(pointer) {
            s.unusable_metrics.insert(name.clone(), kind.clone());
        }
        let value = summary.metrics.get(pointer).cloned().flatten();
        s.metrics.insert(name.clone(), value);
    }
    let parsed = summary.take_parsed();
    if detail && matches!(parsed, Parsed::Retention(..)) && !summary.mappings_grown.is_empty() {
        s.mappings_grown = std::mem::take(&mut summary.mappings_grown);
    }
    match parsed {
        Parsed::NotRetention => {}
        Parsed::Unusable(u) => {
            if s.excluded.is_none() {
                s.excluded = Some(u.reason);
                s.unusable_output = Some(u.gave);
            }
        }
        Parsed::Retention(r, _) => {
            if r.completed == Some(false) {
                s.excluded.get_or_insert_with(|| "completed: false".into());
            }
            s.retention = Some(*r);
        }
    }
    s
}

/// A run's output `name` in `folder`: read whole when short ([`RunFolder::read_small`]), else
/// open to be streamed.
fn open_output(folder: &RunFolder<'_>, name: &str) -> Result<OutputSource, ReadError> {
    Ok(match folder.read_small(name, OUTPUT_WHOLE_LIMIT)? {
        Some(bytes) => OutputSource::Whole(bytes),
        None => OutputSource::File(folder.open(name)?),
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
mod tests;
