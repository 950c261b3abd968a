//! Adaptive `repetitions = { min, max, until = "decided", time-budget }` (DESIGN 3, 9): a
//! group-sequential rule ([`crate::stats::sequential::Design::for_rule`]: looks spaced
//! geometrically from `min` to `max` runs per cell, alpha spent across them so that the chance
//! of a false `above control` / `below control` over all looks stays at or under 5%). The runs go
//! in interleaved rounds: `min` runs per cell, then, from look to look, every cell that goes on
//! gets the runs up to the next look (one run per cell per round). At each look the bundle is read
//! back as `report` reads it ([`crate::report::collect`]: the estimates against the control of
//! `[report] control`, at the level the design spends at the cell's look, against the control's
//! runs of the same rounds), and each cell is judged:
//!
//! - a compared cell is **decided** when, at a look of the design, its verdict (the verdict
//!   table's, [`crate::report::estimates::CellVerdict`]) is `above control`, `below control` or
//!   `equivalent`;
//! - a control cell goes on while any cell compared with it does (it is decided with the last);
//! - a cell with no control to be compared with (and that is no control) stops at `min`
//!   (`no control`); when no run gave retention samples at all (every run failed, say), every
//!   cell stops at `min` (`no estimates`);
//! - a cell whose control gave no data (every finished run of the control failed) stops with its
//!   control (`control failed`): no further run of either could be compared;
//! - an undecided cell with `max` runs stops (`max reached`); once the rounds took the time
//!   budget, no further round starts (`time budget`; the round in flight finishes, so every
//!   undecided cell keeps the same number of runs).
//!
//! plan.json is rewritten with each round (an exact record of what ran), bundle.json `adaptive`
//! says where the rule is ([`AdaptiveRecord`]) and `resume` of an interrupted bundle continues it.
//! The rounds run on this host or on a batch engine (Slurm: job arrays a look; Ray: a driver a
//! look), through `rounds::continue_rounds_with`: the decisions are this module's either way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::bundle::{AdaptiveCell, AdaptiveRecord, StoppingReason};
use crate::manifest::Adaptive;
use crate::plan::Plan;
use crate::stats::Verdict;
use crate::stats::sequential::Design;

pub mod rounds;

/// The record of a plan whose first `min` rounds are planned and none judged yet; `elapsed`
/// seconds were spent before (a resume's earlier sessions).
pub fn initial_record(plan: &Plan, rule: Adaptive, elapsed: f64) -> AdaptiveRecord {
    AdaptiveRecord {
        rule,
        rounds: (0..plan.cell_count())
            .map(|c| plan.runs_of_cell(c))
            .max()
            .unwrap_or(0),
        elapsed_seconds: elapsed,
        stopping_reason: None,
        cells: (0..plan.cell_count())
            .map(|c| AdaptiveCell {
                cell: plan.cell(c).into_iter().collect(),
                runs: plan.runs_of_cell(c),
                verdict: None,
                stopping_reason: None,
            })
            .collect(),
        design: Some(design_of(rule)),
    }
}

/// The sequential design of `rule` (its looks and the level at each).
pub fn design_of(rule: Adaptive) -> Design {
    Design::for_rule(rule.min as usize, rule.max as usize)
}

/// The runs the cells `next` (whose runs are `runs`) get up to the next look of `design`, one
/// run per cell per round: the cells of each round, in order (a cell past its last look gets
/// one more run, up to `max`).
pub fn rounds_to_next_look(design: &Design, max: u32, next: &[(usize, u32)]) -> Vec<Vec<usize>> {
    let targets: Vec<(usize, u32, u32)> = next
        .iter()
        .map(|&(c, runs)| {
            let look = design.next_look(runs as usize).map_or(runs + 1, |l| l as u32);
            (c, runs, look.min(max).max(runs + 1))
        })
        .collect();
    let most = targets.iter().map(|(_, r, t)| t - r).max().unwrap_or(0);
    (0..most)
        .map(|i| {
            targets
                .iter()
                .filter(|(_, r, t)| r + i < *t)
                .map(|(c, _, _)| *c)
                .collect()
        })
        .collect()
}

/// What the rule makes of the bundle after a round: the new record and the cells of the next round
/// (empty: the rule stopped).
#[derive(Debug, Clone)]
pub struct Decision {
    /// bundle.json `adaptive`.
    pub record: AdaptiveRecord,
    /// Cells (plan order) that go on to the next look.
    pub next: Vec<usize>,
}

/// Whether a verdict decides a cell (`until = "decided"`).
pub fn decides(v: Verdict) -> bool {
    matches!(
        v,
        Verdict::AboveControl | Verdict::BelowControl | Verdict::Equivalent
    )
}

/// Judges every cell of `plan` from the bundle `dir` (see the module docs); `elapsed` is the
/// rounds' time so far.
///
/// # Errors
/// The bundle cannot be read back (the message names the file).
pub fn decide(dir: &Path, plan: &Plan, rule: Adaptive, elapsed: Duration) -> Result<Decision, String> {
    let report = crate::report::collect(dir, false).map_err(|e| e.to_string())?;
    let design = design_of(rule);
    let n = plan.cell_count();
    let mut labels: Vec<Option<String>> = vec![None; n];
    for (i, r) in report.runs.iter().enumerate().take(plan.len()) {
        labels[plan.cell_of(i)].get_or_insert_with(|| r.cell_label.clone());
    }
    let mut runs_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (c, label) in labels.iter().enumerate() {
        runs_of.insert(label.as_deref().unwrap_or(""), plan.runs_of_cell(c) as usize);
    }
    // Compared cells: verdict, control and whether it is decided (only at a look), by label.
    let mut compared: BTreeMap<&str, (Verdict, &str, bool)> = BTreeMap::new();
    for c in &report.estimates.cells {
        let at_look = runs_of.get(c.cell.as_str()).is_some_and(|&r| design.is_look(r));
        compared.insert(
            c.cell.as_str(),
            (c.verdict, c.control.as_str(), at_look && decides(c.verdict)),
        );
    }
    let open_controls: BTreeSet<&str> = compared
        .values()
        .filter(|(_, _, decided)| !decided)
        .map(|(_, c, _)| *c)
        .collect();
    let controls: BTreeSet<&str> = compared.values().map(|(_, c, _)| *c).collect();
    // Controls with finished runs of which none is in the aggregates (every run failed): their
    // cells cannot be compared whatever more runs give, so they stop with the control.
    let failed_controls: BTreeSet<&str> = report
        .cells
        .iter()
        .filter(|s| s.runs > 0 && s.included == 0 && controls.contains(s.cell.as_str()))
        .map(|s| s.cell.as_str())
        .collect();
    let spent = rule.time_budget.is_some_and(|b| elapsed >= b);
    let mut next = Vec::new();
    let mut cells = Vec::with_capacity(n);
    for (c, label) in labels.iter().enumerate() {
        let runs = plan.runs_of_cell(c);
        let label = label.as_deref().unwrap_or("");
        let (verdict, open, control_failed) = match compared.get(label) {
            Some((v, control, decided)) => (
                Some(v.as_str().to_string()),
                !decided,
                failed_controls.contains(control),
            ),
            None if controls.contains(label) => (
                Some("control".to_string()),
                open_controls.contains(label),
                failed_controls.contains(label),
            ),
            None => (None, false, false),
        };
        let stopping_reason = if !report.has_retention {
            Some(StoppingReason::NoEstimates)
        } else if control_failed {
            Some(StoppingReason::ControlFailed)
        } else if verdict.is_none() {
            Some(StoppingReason::NoControl)
        } else if !open {
            Some(StoppingReason::Decided)
        } else if runs >= rule.max {
            Some(StoppingReason::MaxReached)
        } else if spent {
            Some(StoppingReason::TimeBudget)
        } else {
            next.push(c);
            None
        };
        cells.push(AdaptiveCell {
            cell: plan.cell(c).into_iter().collect(),
            runs,
            verdict,
            stopping_reason,
        });
    }
    let stopping_reason = next.is_empty().then(|| overall(&cells));
    Ok(Decision {
        record: AdaptiveRecord {
            rule,
            rounds: cells.iter().map(|c| c.runs).max().unwrap_or(0),
            elapsed_seconds: elapsed.as_secs_f64(),
            stopping_reason,
            cells,
            design: Some(design),
        },
        next,
    })
}

/// The reason the rule stopped: `time budget` when it stopped any cell, else `max reached`, else
/// `decided`, else `no estimates`, else `no control`.
fn overall(cells: &[AdaptiveCell]) -> StoppingReason {
    let any = |r: StoppingReason| cells.iter().any(|c| c.stopping_reason == Some(r));
    if any(StoppingReason::TimeBudget) {
        StoppingReason::TimeBudget
    } else if any(StoppingReason::MaxReached) {
        StoppingReason::MaxReached
    } else if any(StoppingReason::Decided) {
        StoppingReason::Decided
    } else if any(StoppingReason::ControlFailed) {
        StoppingReason::ControlFailed
    } else if any(StoppingReason::NoEstimates) {
        StoppingReason::NoEstimates
    } else {
        StoppingReason::NoControl
    }
}

/// `decided: 2 cells, max reached: 1 cell` of a record's cells.
pub fn reasons_text(record: &AdaptiveRecord) -> String {
    let mut by: BTreeMap<StoppingReason, usize> = BTreeMap::new();
    for c in &record.cells {
        if let Some(r) = c.stopping_reason {
            *by.entry(r).or_default() += 1;
        }
    }
    by.iter()
        .map(|(r, n)| format!("{}: {n} cell{}", r.as_str(), if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ")
}
