//! What a report is: the types `collection` fills from a bundle and `aggregation` summarises, and
//! that `render`, `compare` and `plot` show. The bottom layer of the report: it imports nothing
//! of the report but the vocabulary below it ([`crate::bundle::retention`]'s parsed figures,
//! [`crate::report::metrics`]' table). No I/O here.
//!
//! Units: bytes for memory, seconds for time; a figure a run lacks is `None`, never 0.

use std::collections::BTreeMap;

use serde::Serialize;

mod contrast;
mod estimate;
mod run;
mod values;

pub use contrast::{Contrast, ContrastVerdict};
pub use estimate::{CellVerdict, Control, Disagreement, Estimate, Estimates};
pub use run::{
    CONTROL_MODE, CellStats, MAPPING_GROWTH_ROWS, MappingGrowth, MetricValue, RunSummary, STDERR_TAIL_LINES,
    Stats, cell_label, fmt_num,
};
pub use values::{CellEntry, RunValues};

use crate::bundle::Outcome;
use crate::bundle::lock::EffectiveStatus;

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
    /// `argv: ...` / `shell: ...` ([`crate::report::units::measured`]); `None` without a manifest.
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
    /// Every compared cell against its control ([`crate::report::estimates`]).
    pub estimates: Estimates,
    /// Every contrast: does a factor (a matrix axis other than the control's keys) change the
    /// retention ([`crate::report::contrasts`]); empty without one.
    pub contrasts: Vec<Contrast>,
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
    pub values: RunValues,
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
/// ([`RunValues`]) and writes every run in CSV and JSON by reading the
/// bundle's runs again one at a time; the tables say so.
pub const RUN_ROWS: usize = 1000;

/// The runs of a report (see [`Report::runs`]): the runs held, and, for a bundle larger than
/// [`RUN_ROWS`], how to read them all again. Derefs to the runs held.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    held: Vec<RunSummary>,
    all: Option<std::sync::Arc<dyn RunSource>>,
    /// Every run as the report's format writes it, spilled to a temporary file (deleted when
    /// closed) while the runs were read, so that a large CSV or JSON report reads the bundle once.
    spilled: Option<std::sync::Arc<(Spill, std::fs::File)>>,
}

/// Every planned run of a bundle read again, one at a time, in plan order: where [`Runs`] of a
/// bundle larger than [`RUN_ROWS`] takes every run from (the reader is `collection`'s, above
/// this layer).
pub trait RunSource: std::fmt::Debug + Send + Sync {
    /// Calls `f` with every planned run's summary, in plan order.
    ///
    /// # Errors
    /// The bundle can no longer be read (the message names the file), or `f`'s error.
    fn try_for_each(&self, f: &mut dyn FnMut(RunSummary) -> anyhow::Result<()>) -> anyhow::Result<()>;
}

/// What a report of a large bundle spills of each run while it reads it: a CSV row of every
/// column ([`crate::report::records::csv_spill_record`]) or the run as compact JSON
/// ([`crate::report::records::json_spill_record`]), in plan order.
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
    pub fn new(held: Vec<RunSummary>, all: Option<impl RunSource + 'static>) -> Runs {
        Runs {
            held,
            all: all.map(|all| std::sync::Arc::new(all) as std::sync::Arc<dyn RunSource>),
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
            // records::write_json writes the spilled runs in place of this empty array.
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
