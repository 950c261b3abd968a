//! Reading a bundle into a [`Report`]: one pass over the plan, one run at a time, each run read
//! by [`super::read`] and folded here into the counts, [`super::model::RunValues`] and the runs held.
//!
//! Runs are read one at a time ([`Bundle::runs`]); each run's figures come from its run.json
//! `summary` ([`crate::bundle::summary::Summary`]), or, for a run.json without one, from its output
//! streamed through the function that made it ([`crate::bundle::output_summary::summarize`]: the
//! output check's reader, same limits, keeping only the `[report] metrics` pointers and the
//! retention fields, the `samples` folded one at a time). Memory therefore grows with the number
//! of runs, not with the size of their outputs. Plot series are kept only when a
//! plot is asked for, thinned while read. Files are opened inside the bundle only, without
//! following links ([`Bundle::open_run_file`]). A run left out of the aggregates has the reason in
//! [`RunSummary::excluded`]. Of a run that is not ok, the reason and the last
//! [`super::model::STDERR_TAIL_LINES`] lines of its stderr.log are kept (read from the end of the file, at most
//! [`crate::bundle::reason::TAIL_BYTES`]). The aggregates come from [`super::aggregation`].

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value as Json;

use super::aggregation;
use super::model::{FailureGroups, RUN_ROWS, Report, RunSource, RunSummary, RunValues, Runs, Spill};
use super::read::{OutputInterest, Read, RunContext, find_bool, metric_pointers, not_run, read_planned};
use crate::bundle::lock::effective_status;
use crate::bundle::read::{Bundle, ReadError};
use crate::manifest::OutputFormat;
use crate::plan::PlannedRun;

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
            listed: RunContext::list_runs(&bundle),
        };
        read_in_order(
            &ctx,
            bundle.planned_runs()?,
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

/// Planned runs read at a time by [`read_in_order`], split between its threads.
const BATCH: usize = 512;

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
    planned: impl Iterator<Item = Result<PlannedRun, ReadError>>,
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
            let mut parts: Vec<Vec<PlannedRun>> = Vec::new();
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
    let ManifestParts {
        axes,
        measured,
        pointers,
        mut settings,
    } = manifest_parts(&bundle)?;
    // An adaptive bundle is judged with the design its rule stopped on (DESIGN 9).
    settings.design = info.adaptive.as_ref().and_then(|a| a.design.clone());
    let revision = optional(bundle.revision())?;
    let provenance = optional(bundle.provenance())?;
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
        listed: RunContext::list_runs(&bundle),
    };
    let fold = fold_runs(&ctx, &bundle)?;
    let Fold {
        mut values,
        held,
        large,
        planned_seen,
        counts,
        not_run_count,
        not_run_ranges,
        nodes,
        failures,
        redone,
        has_retention,
        spill_file,
        ..
    } = fold;
    values.finish();
    let nodes: Vec<String> = nodes.into_iter().collect();
    let Analysis {
        mode_key,
        cells,
        estimates,
        contrasts,
    } = analyse(
        &values,
        &keys,
        &pointers,
        &mut settings,
        axes,
        control,
        has_retention,
    )?;
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

/// What a report reads from the bundle's manifest.toml (all empty without one).
#[derive(Default)]
struct ManifestParts {
    /// The matrix axes, values in manifest order ([`super::contrasts::manifest_axes`]).
    axes: Vec<(String, Vec<crate::manifest::Value>)>,
    /// What was measured ([`super::units::measured`]).
    measured: Option<String>,
    /// `[report] metrics`: (name, JSON Pointer).
    pointers: Vec<(String, String)>,
    /// The `[report]` settings of the estimates.
    settings: super::estimates::Settings,
}

/// Reads the bundle's manifest.toml into [`ManifestParts`].
///
/// # Errors
/// [`ReportError::Metrics`] for a `[report]` table of the wrong shape, [`ReportError::Read`] for a
/// manifest.toml that cannot be read (a missing one gives empty parts).
fn manifest_parts(bundle: &Bundle) -> Result<ManifestParts, ReportError> {
    let manifest_path = bundle.path(crate::bundle::files::MANIFEST);
    match bundle.manifest_text() {
        Ok(text) => {
            let axes = super::contrasts::manifest_axes(&text);
            let bad = |message| ReportError::Metrics {
                path: manifest_path.display().to_string(),
                message,
            };
            let measured = super::units::measured(&text);
            Ok(ManifestParts {
                axes,
                measured,
                pointers: metric_pointers(&text).map_err(bad)?,
                settings: super::estimates::settings(&text).map_err(bad)?,
            })
        }
        Err(ReadError::Missing { .. }) => Ok(ManifestParts::default()),
        Err(e) => Err(e.into()),
    }
}

/// `read`'s value, `None` for a missing file.
///
/// # Errors
/// Any other error of `read`.
fn optional<T>(read: Result<T, ReadError>) -> Result<Option<T>, ReportError> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(ReadError::Missing { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What the one pass over a bundle's plan folds its runs into ([`fold_runs`]).
struct Fold {
    /// The compact per-run numbers of every finished run.
    values: RunValues,
    /// The runs held whole: all of them while the plan has at most [`RUN_ROWS`], else the first
    /// [`RUN_ROWS`] finished ones.
    held: Vec<RunSummary>,
    /// Finished runs among `held`.
    held_finished: usize,
    /// Whether the plan has more than [`RUN_ROWS`] runs (known once that many were read).
    large: bool,
    /// Planned runs read.
    planned_seen: usize,
    /// Finished runs by outcome.
    counts: BTreeMap<crate::bundle::Outcome, usize>,
    /// Planned runs without run.json.
    not_run_count: usize,
    /// Their plan indices as inclusive ranges (at most [`RUN_ROWS`] ranges).
    not_run_ranges: Vec<(usize, usize)>,
    /// The nodes the finished runs ran on.
    nodes: std::collections::BTreeSet<String>,
    /// The finished runs that are not ok, by reason.
    failures: FailureGroups,
    /// Runs redone by `resume` and their earlier attempts.
    redone: (usize, u64),
    /// Whether any run's output follows the retention schema.
    has_retention: bool,
    /// Where every run's record is spilled; `None` when not spilling (or the spill ended).
    spill_file: Option<std::io::BufWriter<std::fs::File>>,
}

/// One pass over the plan of `ctx.bundle`. Every run is aggregated as it is read (counts, nodes,
/// failures, compact per-run numbers); at most [`RUN_ROWS`] runs are held whole: all of them
/// while the plan has no more, else the first [`RUN_ROWS`] finished ones (runs that did not run
/// are counted).
///
/// # Errors
/// The bundle's plan or a run.json cannot be read.
fn fold_runs(ctx: &RunContext<'_>, bundle: &Bundle) -> Result<Fold, ReportError> {
    let mut fold = Fold {
        values: RunValues::new(ctx.pointers),
        held: Vec::with_capacity(bundle.info().planned_runs.min(RUN_ROWS)),
        held_finished: 0,
        large: false,
        planned_seen: 0,
        counts: BTreeMap::new(),
        not_run_count: 0,
        not_run_ranges: Vec::new(),
        nodes: std::collections::BTreeSet::new(),
        failures: FailureGroups::default(),
        redone: (0, 0),
        has_retention: false,
        spill_file: ctx
            .spill
            .and_then(|_| tempfile::tempfile().ok())
            .map(|f| std::io::BufWriter::with_capacity(1 << 20, f)),
    };
    // The planned count that makes a bundle large is known only from the plan; a batch may
    // be read in detail just before (detail is cheap beside the batch's reading).
    let held_finished_now = std::cell::Cell::new(0);
    let json_spill = ctx.spill == Some(Spill::Json);
    let large_now = std::cell::Cell::new(false);
    read_in_order(
        ctx,
        bundle.planned_runs()?,
        // A JSON spill holds every run as the report's JSON writes it, in detail (the mappings
        // that grew): every run is read so, as a report without a spill reads them again.
        || json_spill || !large_now.get() || held_finished_now.get() < RUN_ROWS,
        |read| -> Result<(), ReportError> {
            fold.push(ctx, read);
            large_now.set(fold.large);
            held_finished_now.set(fold.held_finished);
            Ok(())
        },
    )?;
    Ok(fold)
}

impl Fold {
    /// Folds in one planned run as [`fold_runs`] reads it.
    fn push(&mut self, ctx: &RunContext<'_>, read: Read) {
        self.planned_seen += 1;
        if !self.large && self.planned_seen > RUN_ROWS {
            self.large = true;
            self.held.retain(|r| r.finished);
            self.values.forget_unfinished_cells();
        }
        let run = match read {
            Read::Finished(run, spilled) => {
                if let Some(outcome) = run.outcome {
                    *self.counts.entry(outcome).or_insert(0) += 1;
                }
                if let Some(record) = spilled {
                    self.spill_write(record);
                }
                *run
            }
            Read::NotRun(planned) => {
                self.not_run_count += 1;
                let ranges = self.not_run_ranges.len();
                match self.not_run_ranges.last_mut() {
                    Some((_, end)) if *end + 1 == planned.index => *end = planned.index,
                    _ if ranges < RUN_ROWS => self.not_run_ranges.push((planned.index, planned.index)),
                    _ => {}
                }
                let run = not_run(*planned, ctx.keys);
                if let Some(kind) = ctx.spill {
                    self.spill_write(ctx.spill_record(kind, &run));
                }
                if self.large {
                    return;
                }
                run
            }
        };
        if run.finished {
            if let Some(n) = &run.node
                && !self.nodes.contains(n)
            {
                self.nodes.insert(n.clone());
            }
            if run.attempts > 1 {
                self.redone.0 += 1;
                self.redone.1 += u64::from(run.attempts - 1);
            }
            self.has_retention |= run.retention.is_some();
            self.failures.push(&run);
        }
        self.values.push(&run, ctx.keys);
        if !self.large || (run.finished && self.held_finished < RUN_ROWS) {
            self.held_finished += usize::from(run.finished);
            self.held.push(run);
        }
    }

    /// Writes a run's spill record; a record that cannot be made or written ends the spill (the
    /// runs are read again).
    fn spill_write(&mut self, record: Option<Vec<u8>>) {
        let written = match (self.spill_file.as_mut(), record) {
            (Some(w), Some(r)) => std::io::Write::write_all(w, &r).is_ok(),
            _ => false,
        };
        if !written {
            self.spill_file = None;
        }
    }
}

/// What a report computes from the folded runs ([`analyse`]).
struct Analysis {
    /// The matrix key that names the mode.
    mode_key: Option<String>,
    /// Aggregates per cell.
    cells: Vec<super::model::CellStats>,
    /// Every compared cell against its control.
    estimates: super::model::Estimates,
    /// Every contrast.
    contrasts: Vec<super::model::Contrast>,
}

/// The aggregates, estimates and contrasts of the folded `values`, with the control named by
/// `control` (`--control`) in place of `settings`' when given.
///
/// # Errors
/// [`ReportError::Control`] when `control` names no matrix key or no value of it.
fn analyse(
    values: &RunValues,
    keys: &[String],
    pointers: &[(String, String)],
    settings: &mut super::estimates::Settings,
    axes: Vec<(String, Vec<crate::manifest::Value>)>,
    control: &[(String, String)],
    has_retention: bool,
) -> Result<Analysis, ReportError> {
    let mode_key = aggregation::mode_key(keys, values);
    let cells = aggregation::cells(values, keys, mode_key.as_deref(), pointers);
    if !control.is_empty() {
        settings.control =
            Some(super::contrasts::resolve_control(control, keys, values).map_err(ReportError::Control)?);
    }
    let mut estimates = if has_retention {
        super::estimates::estimates(values, keys, mode_key.as_deref(), settings)
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
            values,
            &estimates,
            &super::contrasts::axes_of(keys, axes, values),
            settings,
        )
    } else {
        Vec::new()
    };
    Ok(Analysis {
        mode_key,
        cells,
        estimates,
        contrasts,
    })
}
