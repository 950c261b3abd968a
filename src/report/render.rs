//! Rendering a [`Report`] as terminal tables ([`crate::table`]), Markdown, CSV (one row per run) or
//! JSON.
//!
//! Terminal tables fit a width when one is given ([`TextStyle::Terminal`]): wide tables are split
//! into parts that repeat the row's key columns, headers break over lines, and titles and notes
//! wrap; with no width (`--wide`) every table is one line per row. Markdown, CSV and JSON always
//! keep every column on one line.

use super::metrics::{Metric, RunTable, Unit};
use super::model::{Report, RunSummary, fmt_num};
pub use super::records::{CsvLayout, report_csv, report_json, write_csv, write_json};
pub use super::section::{Section, TextStyle, render_section, render_sections};
use super::section::{md_escape, signed_f};
pub use super::verdicts::interval_text;
use super::verdicts::{contrasts_section, estimates_section, per_node_section, verdict_section};

/// Output format of `report` and `compare` (`html`: [`super::html`]); shared with `--format`.
pub use crate::choices::ReportFormat as Format;

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// The dirty tree or drift of `r` as shown: `not recorded` when the manifest was in no git
/// repository, else yes / no / unknown.
pub(super) fn provenance_yes_no(r: &Report, b: Option<bool>) -> &'static str {
    if r.provenance_recorded {
        yes_no(b)
    } else {
        "not recorded"
    }
}

/// The summary line: counts by outcome, not-run runs, drift and dirty tree.
pub fn summary_line(r: &Report) -> String {
    let finished: usize = r.counts.values().sum();
    let counts: Vec<String> = r
        .counts
        .iter()
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect();
    let (redone, earlier) = r.redone;
    let redone = if redone == 0 {
        String::new()
    } else {
        format!("; {redone} redone by resume ({earlier} earlier attempts kept, not reported)")
    };
    format!(
        "summary: {} planned, {finished} finished ({}), {} not run{redone}; drift: {}; dirty tree: {}",
        r.planned_runs,
        if counts.is_empty() {
            "none".to_string()
        } else {
            counts.join(", ")
        },
        r.not_run,
        provenance_yes_no(r, r.drift),
        provenance_yes_no(r, r.dirty),
    )
}

/// The preamble line naming what `run` was told to change, when anything: `overrides: run with
/// --where mode=reuse --repetitions 1 (bundle.json overrides; resume and rerun do the same)`.
pub(crate) fn overrides_line(r: &Report) -> Option<String> {
    r.overrides.as_ref().map(|o| {
        format!(
            "overrides: run with {} (bundle.json overrides; resume and rerun do the same)",
            o.to_args().join(" ")
        )
    })
}

fn preamble(r: &Report) -> Vec<String> {
    let mut lines = preamble_lines(r);
    if let Some(line) = overrides_line(r) {
        lines.insert(2, line);
    }
    lines
}

fn preamble_lines(r: &Report) -> Vec<String> {
    let refusals = r
        .sbatch_refusals
        .iter()
        .map(|refusal| format!("sbatch refused {refusal}"));
    vec![
        format!(
            "bundle: {} (experiment {}, status {}, hwr-exp {})",
            r.bundle,
            r.experiment,
            r.status.as_str(),
            r.hwr_exp_version
        ),
        format!("revision: {}", r.revision.as_deref().unwrap_or("unknown")),
        summary_line(r),
    ]
    .into_iter()
    .chain(no_verdicts_line(r))
    .chain(
        r.adaptive
            .as_ref()
            .filter(|_| design_section(r).is_none())
            .map(adaptive_line),
    )
    .chain(refusals)
    .collect()
}

/// Why a bundle whose matrix has a `mode` key (a control could be `mode = reuse`) shows no
/// verdicts: no finished run's output follows the retention schema (DESIGN 7), which is what the
/// verdicts compare. `None` when some run's does, or no run ended ok.
fn no_verdicts_line(r: &Report) -> Option<String> {
    let ok = r.counts.get(&crate::bundle::Outcome::Ok).copied().unwrap_or(0);
    (!r.has_retention && ok > 0 && r.mode_key.is_some()).then(|| {
        "no verdicts: no run's output follows the retention schema (DESIGN 7: `schema_version` 1 \
         with `samples`), which is what verdicts compare; `[report] metrics` aggregates other JSON values"
            .to_string()
    })
}

/// `adaptive repetitions (4 to 30 per cell until decided, time budget 2h): 5 rounds in 12.3 s,
/// stopped: decided` (or `not finished` while rounds remain), then the sequential design: its
/// name and each look with its level.
pub fn adaptive_line(a: &crate::bundle::AdaptiveRecord) -> String {
    format!(
        "adaptive repetitions ({} to {} per cell until {}{}): {} round{} in {:.1} s, {}",
        a.rule.min,
        a.rule.max,
        a.rule.until.as_str(),
        a.rule.time_budget.map_or(String::new(), |b| format!(
            ", time budget {}",
            humantime::format_duration(b)
        )),
        a.rounds,
        if a.rounds == 1 { "" } else { "s" },
        a.elapsed_seconds,
        match a.stopping_reason {
            Some(r) => format!("stopped: {}", r.as_str()),
            None => "not finished (`hwr-exp resume` continues the rule)".into(),
        }
    ) + &a.design.as_ref().map_or(
        "; judged after every round at 0.05 (a bundle of an older version: false verdicts likelier than 5%)"
            .to_string(),
        |d| {
            format!(
                "; design: {}, looks at runs per cell (level): {}",
                d.name,
                d.looks_text()
            )
        },
    )
}

/// One line per cell of an adaptive bundle: `mode=leak: 4 runs, above control; stopped: decided`.
pub fn adaptive_cell_lines(a: &crate::bundle::AdaptiveRecord, keys: &[String]) -> Vec<String> {
    a.cells
        .iter()
        .map(|c| {
            format!(
                "{}: {} runs{}; stopped: {}",
                super::model::cell_label(&c.cell, keys, None),
                c.runs,
                c.verdict.as_deref().map_or(String::new(), |v| format!(", {v}")),
                c.stopping_reason.map_or("not yet", |r| r.as_str())
            )
        })
        .collect()
}

fn run_table(r: &Report) -> Section {
    let mut s = Section::new(
        "Runs",
        &[
            ("run-id", false),
            ("cell", false),
            ("rep", true),
            ("termination", false),
            ("exit", true),
            ("wall s", true),
            ("peak RSS 1 proc (B)", true),
            ("output", false),
            ("reason", false),
        ],
    );
    let nodes = r.multi_node();
    if nodes {
        s.header.insert(2, "node".into());
        s.numeric.insert(2, false);
    }
    for run in &r.runs {
        let mut row = vec![
            run.run_id.clone(),
            run.cell_label.clone(),
            run.repetition.to_string(),
            run.termination_text(),
            opt(run.exit_code),
            run.wall_seconds.map_or_else(|| "-".into(), |w| format!("{w:.3}")),
            opt(run.peak_rss_bytes),
            run.output_text(),
            run.reason_text().to_owned(),
        ];
        if nodes {
            row.insert(2, run.node.clone().unwrap_or_else(|| "-".into()));
        }
        s.rows.push(row);
    }
    if nodes {
        s.notes.push(format!(
            "the runs ran on {} nodes: {} (host facts in hosts/<node>.json)",
            r.nodes.len(),
            r.nodes.join(", ")
        ));
    }
    if let Some(note) = allocator_note(r) {
        s.notes.push(note);
    }
    s.notes.extend(memory_notes(r));
    s
}

/// `note` with each run of digits (and the decimal point inside one) as `#`: notes alike but
/// for their figures have one shape.
fn note_shape(note: &str) -> String {
    let mut out = String::with_capacity(note.len());
    let mut chars = note.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.' || *d == ',')
            {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

/// The notes under the runs table about memory: what `peak RSS` covers, and each run whose
/// sampling was not as requested (no sample at all, an interval not kept, walks rarer).
pub(crate) fn memory_notes(r: &Report) -> Vec<String> {
    let mut notes = Vec::new();
    if r.runs.iter().any(|run| run.peak_rss_bytes.is_some()) {
        notes.push(
            "peak RSS: the largest single process's peak (wait4 ru_maxrss of the leader and the \
             descendants it waited for), not the run's processes together"
                .to_string(),
        );
    }
    // Runs with the same note are one line (20 short runs each ended before the first sample
    // was due: one note, not 20), in order of each note's first run.
    // Notes alike but for their figures (`samples came every 137 ms ...` in one run, `141 ms`
    // in the next) are one line too, with the first run's figures.
    let mut by_note: Vec<(String, &str, Vec<&str>)> = Vec::new();
    for run in &r.runs {
        if let Some(note) = &run.memory_note {
            let shape = note_shape(note);
            match by_note.iter_mut().find(|(n, _, _)| *n == shape) {
                Some((_, _, runs)) => runs.push(&run.run_id),
                None => by_note.push((shape, note, vec![&run.run_id])),
            }
        }
    }
    for (shape, note, runs) in by_note {
        let note = if runs.len() > 1 && shape != note {
            format!(
                "{note} (figures of {}; each run's in its run.json sampling.note)",
                runs[0]
            )
        } else {
            note.to_string()
        };
        let named = match runs.as_slice() {
            [one] => (*one).to_string(),
            _ if runs.len() <= 3 => format!("{} runs ({})", runs.len(), runs.join(", ")),
            _ => format!(
                "{} runs ({}, {}, ... {})",
                runs.len(),
                runs[0],
                runs[1],
                runs[runs.len() - 1]
            ),
        };
        notes.push(format!("memory sampling of {named}: {note}"));
    }
    notes
}

/// Whether a mapping's change is over the loop (the probe's baseline to its last loop
/// breakdown), not over start-up or close.
pub fn loop_scoped(g: &super::model::MappingGrowth) -> bool {
    g.between == "probe baseline -> last loop"
}

/// What grew over the loop (`loop_part`), per run: the mappings whose private bytes changed
/// most between the probe's own baseline and last loop breakdowns (its output); else (`!loop_part`)
/// the changes outside the loop: the probe's baseline to closed, and the runner's first and last
/// breakdowns (mappings.json), which span start-up.
fn mappings_table(r: &Report, loop_part: bool) -> Section {
    let title = if loop_part {
        "What grew over the loop: mappings with the largest change from the baseline to the last loop sample \
         (/proc/self/smaps of the built-in probe's own process at those phases; bytes)"
    } else {
        "Mappings changed outside the loop (start-up or close included): `probe baseline -> closed`: the \
         built-in probe's own process; `first -> last`: the run's processes, summed, at the runner's first \
         and last walk (/proc/<pid>/smaps; bytes)"
    };
    let mut s = Section::new(
        title,
        &[
            ("run-id", false),
            ("between", false),
            ("kind", false),
            ("mapping", false),
            ("private growth", true),
            ("RSS growth", true),
            ("from s", true),
            ("to s", true),
        ],
    );
    for run in &r.runs {
        for g in run.mappings_grown.iter().filter(|g| loop_scoped(g) == loop_part) {
            s.rows.push(vec![
                run.run_id.clone(),
                g.between.clone(),
                g.kind.clone(),
                g.name.clone(),
                format!("{:+}", g.private_growth),
                format!("{:+}", g.rss_growth),
                format!("{:.2}", g.from_seconds),
                format!("{:.2}", g.to_seconds),
            ]);
        }
    }
    s.notes.extend(r.collapsed_note());
    s
}

/// The note under the runs table naming the runs whose `[isolation] allocator` was not seen
/// loaded (left out of the aggregates), or was not checked before the process ended.
pub(crate) fn allocator_note(r: &Report) -> Option<String> {
    let not_loaded: Vec<String> = r
        .runs
        .iter()
        .filter(|run| {
            run.allocator
                .as_ref()
                .is_some_and(|a| a.seen_loaded == Some(false))
        })
        .map(|run| format!("{} ({})", run.run_id, run.excluded.as_deref().unwrap_or("")))
        .collect();
    let unknown: Vec<String> = r
        .runs
        .iter()
        .filter(|run| run.finished && run.allocator.as_ref().is_some_and(|a| a.seen_loaded.is_none()))
        .map(|run| format!("{} ({})", run.run_id, run.excluded.as_deref().unwrap_or("")))
        .collect();
    let mut parts = Vec::new();
    if !not_loaded.is_empty() {
        parts.push(format!(
            "warning: allocator not seen loaded, left out of the aggregates: {}",
            not_loaded.join(", ")
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!(
            "allocator not shown loaded, left out of the aggregates: {}",
            unknown.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn retention_run_table(r: &Report) -> Section {
    let mut cols: Vec<(&str, bool)> = vec![("run-id", false), ("loop it", true)];
    let shown: Vec<Metric> = Metric::ALL
        .iter()
        .copied()
        .filter(|m| m.def().run_table == RunTable::Growth)
        .collect();
    cols.extend(shown.iter().map(|m| (m.def().label, true)));
    cols.extend([("last tensor alive", false), ("aggregated", false)]);
    let mut s = Section::new(
        "Retention per run (growth = final loop - baseline; after-close = closed - baseline; bytes)",
        &cols,
    );
    for run in &r.runs {
        let agg = match &run.excluded {
            None => "yes".to_string(),
            Some(reason) => format!("no: {reason}"),
        };
        let Some(ret) = &run.retention else {
            if run.excluded.is_some() {
                let mut row = vec![run.run_id.clone()];
                row.extend(std::iter::repeat_n("-".to_string(), cols.len() - 2));
                row.push(agg);
                s.rows.push(row);
            }
            continue;
        };
        let mut row = vec![run.run_id.clone(), ret.loop_iterations.to_string()];
        row.extend(shown.iter().map(|m| match m.def().unit {
            Unit::BytesPer1000 => signed_f(m.of(ret)),
            Unit::Bytes | Unit::Count => m.exact(ret).map_or_else(
                || "-".into(),
                |t| {
                    if t.starts_with('-') || t == "0" {
                        t
                    } else {
                        format!("+{t}")
                    }
                },
            ),
        }));
        row.extend([opt(ret.last_tensor_alive), agg]);
        s.rows.push(row);
    }
    s.notes.extend(r.collapsed_note());
    let excluded: Vec<&RunSummary> = r.runs.iter().filter(|r| r.excluded.is_some()).collect();
    if !excluded.is_empty() {
        s.notes.push(format!(
            "left out of the aggregates: {}",
            excluded
                .iter()
                .map(|r| format!("{} ({})", r.run_id, r.excluded.as_deref().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    s
}

fn stat(c: &super::model::CellStats, name: &str) -> String {
    c.retention.get(name).map_or_else(|| "-".into(), |s| s.text())
}

fn retention_cell_table(r: &Report) -> Section {
    let shown: Vec<Metric> = Metric::ALL.iter().copied().filter(|m| m.def().per_cell).collect();
    let mut cols: Vec<(&str, bool)> = vec![("cell", false), ("n", true)];
    cols.extend(shown.iter().map(|m| (m.def().label, true)));
    let mut s = Section::new(
        "Retention per cell across repetitions (min / median / max; bytes)",
        &cols,
    );
    for c in &r.cells {
        let mut row = vec![c.cell.clone(), format!("{}/{}", c.included, c.runs)];
        row.extend(shown.iter().map(|m| stat(c, m.key())));
        s.rows.push(row);
    }
    s.notes
        .push("n = runs aggregated / runs finished in the cell".into());
    s
}

fn rate_run_table(r: &Report) -> Section {
    let shown: Vec<Metric> = Metric::ALL
        .iter()
        .copied()
        .filter(|m| m.def().run_table == RunTable::Rate)
        .collect();
    let mut cols: Vec<(&str, bool)> = vec![("run-id", false)];
    cols.extend(shown.iter().map(|m| (m.def().label, true)));
    let mut s = Section::new(
        "Retention rate per run (Theil-Sen slope over baseline and loop samples; bytes per 1000 iterations)",
        &cols,
    );
    for run in &r.runs {
        let Some(ret) = &run.retention else { continue };
        let mut row = vec![run.run_id.clone()];
        row.extend(shown.iter().map(|m| signed_f(m.of(ret))));
        s.rows.push(row);
    }
    s.notes.push(
        "1st / 2nd half: the slope over the first / second half of the loop's iterations (growth that stops looks like a cache filling)".into(),
    );
    s.notes.extend(r.collapsed_note());
    s
}

fn metric_sections(r: &Report) -> Vec<Section> {
    let names: Vec<&str> = r.metric_pointers.iter().map(|(n, _)| n.as_str()).collect();
    let mut cols: Vec<(&str, bool)> = vec![("run-id", false)];
    cols.extend(names.iter().map(|n| (*n, true)));
    let mut per_run = Section::new("Metrics per run ([report] metrics)", &cols);
    for run in r.runs.iter().filter(|r| r.finished) {
        let mut row = vec![run.run_id.clone()];
        row.extend(
            names
                .iter()
                .map(|n| opt(run.metrics.get(*n).and_then(|v| v.as_ref()))),
        );
        per_run.rows.push(row);
    }
    per_run.notes.push(format!(
        "pointers: {}",
        r.metric_pointers
            .iter()
            .map(|(n, p)| format!("{n} = {p}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    per_run.notes.extend(r.collapsed_note());
    let mut cols: Vec<(&str, bool)> = vec![("cell", false), ("n", true)];
    cols.extend(names.iter().map(|n| (*n, true)));
    let mut per_cell = Section::new("Metrics per cell (min / median / max)", &cols);
    for c in &r.cells {
        let mut row = vec![c.cell.clone(), format!("{}/{}", c.included, c.runs)];
        row.extend(
            names
                .iter()
                .map(|n| c.metrics.get(*n).map_or_else(|| "-".into(), |s| s.text())),
        );
        per_cell.rows.push(row);
    }
    // Values that are not numbers are left out of the aggregates: say how many, per metric (per
    // cell in JSON `cells[].unusable-metrics`).
    for (name, _) in &r.metric_pointers {
        let gave = r
            .runs
            .iter()
            .filter(|x| x.finished && x.excluded.is_none())
            .filter_map(|x| x.unusable_metrics.get(name).map(String::as_str));
        if let Some(text) = super::metrics::runs_gave(gave) {
            per_cell.notes.push(format!("not aggregated: {name}: {text}"));
        }
    }
    vec![per_run, per_cell]
}

/// Most run ids named per reason in the table of reasons; the others are counted.
const NAMED_RUNS: usize = 3;

/// The finished runs that are not ok, one row per reason with its count: twelve runs failing
/// alike are one row, not twelve.
fn failures_section(r: &Report) -> Section {
    let mut s = Section::new(
        "Runs that are not ok, by reason",
        &[
            ("runs", true),
            ("outcome", false),
            ("reason", false),
            ("run-ids", false),
        ],
    );
    for g in &r.failures_by_reason {
        let mut ids = g
            .runs
            .iter()
            .take(NAMED_RUNS)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if g.count > NAMED_RUNS {
            ids.push_str(&format!(" and {} more", g.count - NAMED_RUNS));
        }
        s.rows.push(vec![
            g.count.to_string(),
            g.outcome.as_str().to_owned(),
            g.reason.clone(),
            ids,
        ]);
    }
    s
}

fn run_section(r: &Report) -> Section {
    let mut s = run_table(r);
    if let Some(note) = r.collapsed_note() {
        s.notes.insert(0, note);
        if r.not_run > 0 {
            s.notes.push(format!(
                "not run (no run.json; bundle status {}): {} runs, {}",
                r.status.as_str(),
                r.not_run,
                r.not_run_text()
            ));
        }
        return s;
    }
    let not_run: Vec<&str> = r
        .runs
        .iter()
        .filter(|r| !r.finished)
        .map(|r| r.run_id.as_str())
        .collect();
    if !not_run.is_empty() {
        s.notes.push(format!(
            "not run (no run.json; bundle status {}): {}",
            r.status.as_str(),
            not_run.join(", ")
        ));
    }
    s.notes.extend(left_out_note(r));
    s
}

/// When no run has retention figures (whose table lists the runs left out of the aggregates):
/// the runs that ended ok but were left out all the same, with why (`cannot read output ...`,
/// an allocator not seen loaded); `None` when there are none. Without it such a run showed
/// nothing but an empty `reason`.
pub(crate) fn left_out_note(r: &Report) -> Option<String> {
    if r.has_retention {
        return None;
    }
    let left_out: Vec<String> = r
        .runs
        .iter()
        .filter(|x| x.outcome == Some(crate::bundle::Outcome::Ok))
        .filter_map(|x| x.excluded.as_ref().map(|why| format!("{} ({why})", x.run_id)))
        .collect();
    (!left_out.is_empty()).then(|| format!("ok but left out of the aggregates: {}", left_out.join(", ")))
}

/// Builders of the report's sections, in order; each returns no section when it does not apply.
type SectionBuilder = fn(&Report) -> Vec<Section>;

/// The answers, the first screen of every format: the verdicts, then the contrasts, then the
/// design ([`ANSWERS`]); the bundle's summary lines and [`SECTIONS`] follow.
const ANSWERS: [SectionBuilder; 3] = [
    |r| r.has_retention.then(|| verdict_section(r)).into_iter().collect(),
    |r| contrasts_section(r).into_iter().collect(),
    |r| design_section(r).into_iter().collect(),
];

/// The design the verdicts were reached under: fixed or adaptive repetitions (the adaptive
/// rule's line and each cell's stop), and the level; `None` for a report without verdicts.
pub fn design_section(r: &Report) -> Option<Section> {
    if !r.has_retention || r.estimates.rows.is_empty() {
        return None;
    }
    let mut s = Section::new("Design", &[]);
    match &r.adaptive {
        Some(a) => {
            s.notes.push(adaptive_line(a));
            s.notes.extend(adaptive_cell_lines(a, &r.matrix_keys));
        }
        None => s.notes.push(format!(
            "fixed repetitions; {} compared cell{}, each judged at level {} (0.05 over the cells, Bonferroni; Holm over its growth and rate)",
            r.estimates.compared_cells,
            if r.estimates.compared_cells == 1 { "" } else { "s" },
            fmt_num(r.estimates.level)
        )),
    }
    Some(s)
}

/// The sections after the answers and the bundle's summary lines, in order: runs, failures, the
/// per-run and per-cell retention, every metric against the control, what grew (mappings), the
/// `[report]` metrics.
const SECTIONS: [SectionBuilder; 8] = [
    |r| vec![run_section(r)],
    |r| {
        (!r.failures_by_reason.is_empty())
            .then(|| failures_section(r))
            .into_iter()
            .collect()
    },
    |r| {
        r.has_retention
            .then(|| retention_run_table(r))
            .into_iter()
            .collect()
    },
    |r| r.has_retention.then(|| rate_run_table(r)).into_iter().collect(),
    |r| {
        r.has_retention
            .then(|| retention_cell_table(r))
            .into_iter()
            .collect()
    },
    |r| {
        let mut v: Vec<Section> = (r.has_retention && !r.estimates.rows.is_empty())
            .then(|| estimates_section(r))
            .into_iter()
            .collect();
        if r.has_retention && !r.estimates.per_node.is_empty() {
            v.push(per_node_section(r));
        }
        v
    },
    |r| {
        [true, false]
            .into_iter()
            .filter(|&loop_part| {
                r.runs
                    .iter()
                    .any(|run| run.mappings_grown.iter().any(|g| loop_scoped(g) == loop_part))
            })
            .map(|loop_part| mappings_table(r, loop_part))
            .collect()
    },
    |r| {
        if r.metric_pointers.is_empty() {
            Vec::new()
        } else {
            metric_sections(r)
        }
    },
];

/// All sections of a bundle report, in order (the answers first).
pub fn report_sections(r: &Report) -> Vec<Section> {
    ANSWERS
        .iter()
        .chain(SECTIONS.iter())
        .flat_map(|build| build(r))
        .collect()
}

/// The answers after the verdict table (contrasts, design); the HTML page draws its own verdict
/// table and plot first.
pub fn answer_sections_after_verdicts(r: &Report) -> Vec<Section> {
    ANSWERS[1..].iter().flat_map(|build| build(r)).collect()
}

/// The sections after the run table (failures, retention per run, rates, per cell, against the
/// control, what grew, metrics), in order; the HTML page draws its own verdict and run tables
/// and renders these as they are.
pub fn analysis_sections(r: &Report) -> Vec<Section> {
    SECTIONS[1..].iter().flat_map(|build| build(r)).collect()
}

/// The whole report as terminal tables or Markdown: the answers (verdicts, contrasts, design)
/// first, then the bundle's summary lines, then the runs and the rest. Sections are built and
/// rendered one at a time, so only one table's cells are held at once besides the output text.
pub fn report_text(r: &Report, style: TextStyle) -> String {
    let mut pre = preamble(r);
    let mut out = String::new();
    if style.is_md() {
        pre = pre.into_iter().map(|l| md_escape(&l)).collect();
        out.push_str(&format!("## hwr-exp report: {}\n", r.experiment));
    }
    for build in ANSWERS {
        for s in build(r) {
            render_section(&mut out, s, style);
        }
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&render_sections(&pre, Vec::new(), style));
    for build in SECTIONS {
        for s in build(r) {
            render_section(&mut out, s, style);
        }
    }
    // The first line is the first answer's, not a blank one.
    out.trim_start_matches('\n').to_string()
}

/// The `report --stderr` section: for each run that is not ok, its id and reason, then the last
/// lines of its stderr.log (the report keeps at most [`super::model::STDERR_TAIL_LINES`]). In
/// Markdown each tail is a fenced code block; on a terminal the lines are prefixed `| ` and wrapped
/// to the width.
pub fn stderr_text(r: &Report, style: TextStyle) -> String {
    let title = "stderr of the runs that are not ok (last lines of stderr.log)";
    let mut out = String::from("\n");
    if style.is_md() {
        out.push_str(&format!("### {title}\n\n"));
    } else {
        out.push_str(&style.wrap(title));
        out.push('\n');
    }
    if let Some(note) = r.collapsed_note() {
        out.push_str(&style.wrap(&note));
        out.push('\n');
    }
    let failed: Vec<&RunSummary> = r.runs.iter().filter(|run| run.reason.is_some()).collect();
    if failed.is_empty() {
        out.push_str("every run is ok\n");
        return out;
    }
    // Runs with the same reason and the same stderr tail are shown once, with their count.
    let mut groups: Vec<(&RunSummary, Vec<&str>)> = Vec::new();
    let mut at: std::collections::HashMap<(&str, &[String]), usize> = std::collections::HashMap::new();
    for run in failed {
        let key = (run.reason_text(), run.stderr_tail());
        match at.get(&key) {
            Some(&g) => groups[g].1.push(&run.run_id),
            None => {
                at.insert(key, groups.len());
                groups.push((run, vec![&run.run_id]));
            }
        }
    }
    for (run, ids) in groups {
        let tail = run.stderr_tail();
        let who = if ids.len() == 1 {
            run.run_id.clone()
        } else {
            let named: Vec<&str> = ids.iter().take(NAMED_RUNS).copied().collect();
            let more = ids.len() - named.len();
            format!(
                "{} runs ({}{})",
                ids.len(),
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        };
        if style.is_md() {
            out.push_str(&format!(
                "**{}**: {}\n\n",
                md_escape(&who),
                md_escape(run.reason_text())
            ));
            if tail.is_empty() {
                out.push_str("(stderr.log is empty)\n\n");
                continue;
            }
            // A fence longer than any run of backticks in the lines cannot be closed by them.
            let ticks = tail
                .iter()
                .flat_map(|l| l.split(|c| c != '`').map(str::len))
                .max()
                .unwrap_or(0);
            let fence = "`".repeat(ticks.max(2) + 1);
            out.push_str(&format!("{fence}text\n"));
            for line in tail {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str(&format!("{fence}\n\n"));
        } else {
            out.push_str(&style.wrap(&format!("{who}: {}", run.reason_text())));
            out.push('\n');
            if tail.is_empty() {
                out.push_str("  (stderr.log is empty)\n");
            }
            for line in tail {
                let text = match style {
                    TextStyle::Terminal(Some(width)) => {
                        let options = textwrap::Options::new(width.saturating_sub(4).max(10))
                            .initial_indent("  | ")
                            .subsequent_indent("  |   ")
                            .word_splitter(textwrap::WordSplitter::NoHyphenation);
                        textwrap::fill(line, options)
                    }
                    _ => format!("  | {line}"),
                };
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampling notes alike but for their figures, one per run, are one line with the count.
    #[test]
    fn a_note_repeated_with_other_figures_is_counted_once() {
        let runs: Vec<RunSummary> = (0..5)
            .map(|i| {
                let mut run = RunSummary::for_tests(&format!("00{i}-x"), &[("mode", "x")], Some(crate::bundle::Outcome::Ok));
                run.memory_note = Some(format!(
                    "samples came every {}.{i} ms on average, not every 100 ms as requested (one sample took 2.{i} ms on average)",
                    130 + i
                ));
                run
            })
            .collect();
        let r = Report::for_tests(runs);
        let notes: Vec<String> = memory_notes(&r)
            .into_iter()
            .filter(|n| n.starts_with("memory sampling"))
            .collect();
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert!(
            notes[0].starts_with(
                "memory sampling of 5 runs (000-x, 001-x, ... 004-x): samples came every 130.0 ms"
            ),
            "{}",
            notes[0]
        );
    }

    /// The verdict row says which other metrics disagree and why the figures do not give one
    /// word; the title names the metric and what was measured.
    #[test]
    fn the_verdict_row_names_disagreements_and_reasons() {
        use super::super::estimates::{CellVerdict, Control, Disagreement, Estimate};
        use crate::stats::Verdict;
        let mut r = Report::for_tests(Vec::new());
        r.has_retention = true;
        r.measured = Some("the built-in Rust port (hwr-exp probe safetensors-retention)".into());
        let estimate = |metric: &str, v: f64| Estimate {
            cell: "mode=get_tensor".into(),
            control: "mode=reuse".into(),
            metric: metric.into(),
            n_cell: 8,
            n_control: 8,
            shift: Some(252.0 * 1024.0 * v),
            ci_low: Some(240.0 * 1024.0 * v),
            ci_high: Some(1229.0 * 1024.0 * v),
            confidence: Some(0.95),
            p: Some(0.001),
            p_adjusted: Some(0.001),
            exact: Some(true),
            margin: None,
            verdict: Verdict::AboveControl,
            repetitions_needed: None,
            unusable_values: None,
            cell_nodes: Vec::new(),
            control_nodes: Vec::new(),
            node: None,
        };
        r.estimates.control = Some(Control {
            values: [("mode".to_string(), crate::manifest::Value::Str("reuse".into()))].into(),
            source: "default",
        });
        r.estimates.compared_cells = 1;
        r.estimates.rows = vec![
            estimate("anonymous-growth-bytes", 1.0),
            estimate("anonymous-rate-per-1000", 0.1),
        ];
        r.estimates.cells = vec![CellVerdict {
            cell: "mode=get_tensor".into(),
            control: "mode=reuse".into(),
            verdict: Verdict::AboveControl,
            decided_by: "anonymous-growth-bytes".into(),
            level: 0.05,
            metric: "anonymous".into(),
            disagreements: vec![Disagreement {
                metric: "private".into(),
                verdict: Verdict::NoDetectableDifference,
            }],
            reason: Some("file-backed pages moved by megabytes".into()),
        }];
        let s = verdict_section(&r);
        assert_eq!(
            s.title,
            "Verdicts: each cell against its control (mode = reuse), anonymous bytes, growth and rate; measured: the built-in Rust port (hwr-exp probe safetensors-retention)"
        );
        let row = &s.rows[0];
        assert_eq!(
            row[2],
            "+252 [+240, +1,229] KiB\n+25,805 [+24,576, +125,850] B/1k it"
        );
        assert_eq!(
            row[3],
            "above control\nwhy: file-backed pages moved by megabytes\nprivate says no detectable difference"
        );
        assert_eq!(row[4], "retains 240-1,229 KiB more than reuse over the loop, 95%");
        let md = report_text(&r, TextStyle::Markdown);
        assert!(md.contains("private says no detectable difference"), "{md}");
    }
}
