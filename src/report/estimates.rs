//! Every compared cell against its control (DESIGN 9): per metric estimated against the control
//! ([`super::metrics::Def::vs_control`]), the Hodges-Lehmann shift of the per-run values (cell
//! minus control) with its exact 95% interval, the permutation p-value, one multiplicity control
//! (Bonferroni across the compared cells, Holm within a cell over a measure's growth and rate)
//! and one verdict word ([`crate::stats`]); then one verdict per cell on the verdict metric
//! (`[report] verdict-metric`, anonymous bytes by default: [`CellVerdict`]). The run is the
//! unit: one value per run.
//!
//! The control is `[report] control = { KEY = "VALUE", ... }` of the bundle's manifest.toml, else
//! `mode = "reuse"` where the matrix has that cell. A cell's comparison group is its matrix values
//! other than the control's keys; its control cell is the group's cell with the control's values.

use std::collections::{BTreeMap, HashMap};

use super::correction::{figures, judge_cell};
use super::metrics::{ByteMeasure, Metric, VerdictMetric};
use super::model::{CONTROL_MODE, RunValues};
pub use super::model::{CellVerdict, Control, Disagreement, Estimate, Estimates};
use crate::stats::{self, ALPHA, Shift, Verdict};

/// `[report]` settings read from the bundle's manifest.toml that the estimates use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `control = { KEY = "VALUE" }`: matrix keys and values of the control cell, matched to
    /// the cells' values by [`crate::manifest::Value::same_cell`] (`32.0` names `32`).
    pub control: Option<Vec<(String, crate::manifest::Value)>>,
    /// `equivalence-margin`: for growth and after-close, bytes.
    pub growth_margin: Option<f64>,
    /// `equivalence-margin = { rate = ... }`: for rates, bytes per 1000 iterations.
    pub rate_margin: Option<f64>,
    /// The family's level: [`ALPHA`] (0.05) unless a sequential design spends less at this look
    /// (adaptive repetitions, DESIGN 9); `None` means [`ALPHA`]. Every interval is at confidence
    /// `1 - level / k` and every corrected p is compared with it.
    pub alpha: Option<f64>,
    /// The sequential design of an adaptive bundle (bundle.json `adaptive`): a cell is judged at
    /// the level of the look its planned runs reached ([`stats::sequential::Design::level_at`]).
    pub design: Option<stats::sequential::Design>,
    /// `verdict-metric`: what the verdict judges (a name of [`ByteMeasure`] or of a `[report]
    /// metrics` pointer); `None` = anonymous bytes ([`crate::manifest::DEFAULT_VERDICT_METRIC`]).
    pub verdict_metric: Option<String>,
}

impl Settings {
    /// The family's level: [`Settings::alpha`], else [`ALPHA`].
    pub fn alpha(&self) -> f64 {
        self.alpha.unwrap_or(ALPHA)
    }

    /// The level of a cell with `runs` planned runs: the design's level at that look, else
    /// [`Settings::alpha`].
    pub fn alpha_for(&self, runs: usize) -> f64 {
        self.design
            .as_ref()
            .map_or_else(|| self.alpha(), |d| d.level_at(runs))
    }

    /// The verdict metric given the `[report] metrics` names `pointers`: `verdict-metric`, else
    /// anonymous bytes (a name no longer among the pointers falls back to anonymous bytes;
    /// [`settings`] refuses one the manifest does not define).
    pub fn verdict_metric(&self, pointers: &[String]) -> VerdictMetric {
        self.verdict_metric
            .as_deref()
            .and_then(|n| VerdictMetric::parse(n, pointers))
            .unwrap_or(VerdictMetric::Bytes(ByteMeasure::Anonymous))
    }
}

pub use crate::manifest::parse_size;

fn size_value(v: &toml::Value, what: &str) -> Result<f64, String> {
    match v {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as f64),
        toml::Value::String(s) => parse_size(s).map_err(|e| format!("{what}: {e}")),
        other => Err(format!("{what}: expected a size like \"64KiB\", found {other}")),
    }
}

/// The text of a TOML value as a matrix value prints (strings without quotes).
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads `[report] control` and `[report] equivalence-margin` from manifest text.
///
/// # Errors
/// A message when the text is not TOML or a value has the wrong shape (the manifest's own
/// validation refuses these before a run; this is for bundles written by hand or older versions).
pub fn settings(manifest_text: &str) -> Result<Settings, String> {
    let table: toml::Table = toml::from_str(manifest_text).map_err(|e| e.to_string())?;
    let mut out = Settings::default();
    let Some(report) = table.get("report").and_then(|r| r.as_table()) else {
        return Ok(out);
    };
    if let Some(c) = report.get("control") {
        let c = c
            .as_table()
            .filter(|t| !t.is_empty())
            .ok_or("[report] control is not a table like { mode = \"reuse\" }")?;
        let mut control = Vec::new();
        for (k, v) in c {
            let value = crate::manifest::Value::from_toml(v)
                .ok_or_else(|| format!("[report] control.{k} is {v}, not a matrix value"))?;
            control.push((k.clone(), value));
        }
        // As `check` resolved it: the axis value the control names (`{ n = 1e3 }` names the
        // string "1e3" by its text; plan.json holds "1e3", not the float 1e3 read back).
        let resolved = crate::manifest::parse(
            manifest_text,
            std::path::Path::new("manifest.toml"),
            std::path::Path::new("."),
        )
        .ok()
        .map(|m| m.report.control)
        .filter(|c| c.len() == control.len());
        out.control = Some(resolved.unwrap_or(control));
    }
    match report.get("equivalence-margin") {
        None => {}
        Some(toml::Value::Table(t)) => {
            for (k, v) in t {
                let what = format!("[report] equivalence-margin.{k}");
                match k.as_str() {
                    "growth" => out.growth_margin = Some(size_value(v, &what)?),
                    "rate" => out.rate_margin = Some(size_value(v, &what)?),
                    _ => return Err(format!("{what}: unknown key (growth, rate)")),
                }
            }
        }
        Some(v) => out.growth_margin = Some(size_value(v, "[report] equivalence-margin")?),
    }
    if let Some(v) = report.get("verdict-metric") {
        let name = v
            .as_str()
            .ok_or_else(|| format!("[report] verdict-metric is {v}, not a metric name"))?;
        let pointers: Vec<String> = report
            .get("metrics")
            .and_then(toml::Value::as_table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        if VerdictMetric::parse(name, &pointers).is_none() {
            return Err(format!(
                "[report] verdict-metric: unknown metric \"{name}\" (valid: {})",
                crate::manifest::VERDICT_METRICS
                    .iter()
                    .map(|s| s.to_string())
                    .chain(pointers)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.verdict_metric = Some(name.to_string());
    }
    Ok(out)
}

impl CellVerdict {
    /// The verdict of `growth` (the verdict metric's growth row, or its only row for a
    /// `[report] metrics` pointer) given `rate`, the same cell's rate row when there is one, at
    /// the cell's `level`.
    pub fn of(growth: &Estimate, rate: Option<&Estimate>, metric: &str, level: f64) -> CellVerdict {
        let (verdict, by_rate, reason) = combine(growth, rate, level);
        CellVerdict {
            cell: growth.cell.clone(),
            control: growth.control.clone(),
            verdict,
            decided_by: match rate {
                Some(r) if by_rate => r.metric.clone(),
                _ => growth.metric.clone(),
            },
            level,
            metric: metric.to_string(),
            disagreements: Vec::new(),
            reason,
        }
    }
}

/// Whether `v` decides a direction.
fn decided(v: Verdict) -> bool {
    matches!(v, Verdict::AboveControl | Verdict::BelowControl)
}

/// What an undecided figure (`name`: growth or rate) says, for a cell's reason: `rate within
/// noise`, `rate's interval is above 0 but its corrected p (0.08) is not below 0.05`, `rate
/// unusable: 4 runs gave loop iterations that go down (no rate)`.
fn figure_note(name: &str, e: &Estimate, level: f64) -> String {
    match e.verdict {
        Verdict::NoDetectableDifference => {
            let side = match (e.ci_low, e.ci_high) {
                (Some(lo), _) if lo > 0.0 => Some("above"),
                (_, Some(hi)) if hi < 0.0 => Some("below"),
                _ => None,
            };
            match side {
                Some(side) => format!(
                    "{name}'s interval is {side} 0 but its corrected p ({}) is not below {}",
                    super::model::fmt_num(e.p_adjusted.unwrap_or(1.0)),
                    super::model::fmt_num(level)
                ),
                None => format!("{name} within noise"),
            }
        }
        Verdict::Equivalent => format!("{name} within the margin"),
        Verdict::TooFewRuns => match (&e.unusable_values, e.n_cell == 0 || e.n_control == 0) {
            (Some(u), true) => format!("{name} unusable: {u}"),
            _ => format!("{name}: too few runs"),
        },
        v @ (Verdict::AboveControl | Verdict::BelowControl) => format!("{name} {}", v.as_str()),
    }
}

/// One word for a cell from its `growth` and `rate` (the same measure, decided under one
/// multiplicity control at the cell's `level`): the verdict, whether the rate gave it, and why
/// the figures do not say the same when they do not.
///
/// - Both decided, the same direction: that word. Opposite directions: the growth's (what the
///   loop retained), with the reason naming both.
/// - One decided: its word; the reason says what the other said (`rate within noise`).
/// - Neither decided: `equivalent` when the growth is within the margin, else `no detectable
///   difference` (`too few runs` when the growth has too few runs); the reason names an
///   interval that excludes 0 without a decision and a rate that was unusable.
pub fn combine(growth: &Estimate, rate: Option<&Estimate>, level: f64) -> (Verdict, bool, Option<String>) {
    let g = growth.verdict;
    let Some(rate) = rate else {
        return (g, false, None);
    };
    let r = rate.verdict;
    match (decided(g), decided(r)) {
        (true, true) if g == r => (g, false, None),
        (true, true) => (
            g,
            false,
            Some(format!(
                "growth {}, rate {}: opposite directions (growth that stopped early in the loop, or loops of other lengths); the growth's word",
                g.as_str(),
                r.as_str()
            )),
        ),
        (true, false) => (g, false, Some(figure_note("rate", rate, level))),
        (false, true) => (
            r,
            true,
            Some(format!(
                "rate {}; {}",
                r.as_str(),
                figure_note("growth", growth, level)
            )),
        ),
        (false, false) => {
            let noteworthy = |e: &Estimate| match e.verdict {
                Verdict::NoDetectableDifference => {
                    matches!((e.ci_low, e.ci_high), (Some(lo), Some(hi)) if lo > 0.0 || hi < 0.0)
                }
                Verdict::TooFewRuns => g != Verdict::TooFewRuns,
                _ => false,
            };
            let notes: Vec<String> = [("growth", growth), ("rate", rate)]
                .into_iter()
                .filter(|(_, e)| noteworthy(e))
                .map(|(name, e)| figure_note(name, e, level))
                .collect();
            (g, false, (!notes.is_empty()).then(|| notes.join("; ")))
        }
    }
}

/// The cell verdicts of `rows` (sorted by cell, as [`Estimates::rows`]) on `metric`: one per
/// cell with a row of its growth (or of the pointer), at the cell's level in `levels`; with the
/// other byte metrics (private, file-backed, RSS, anonymous) whose verdict differs (file-backed
/// bytes beside an anonymous verdict only when decided: they exclude the anonymous pages).
fn cell_verdicts(
    rows: &[Estimate],
    metric: &VerdictMetric,
    levels: &HashMap<String, f64>,
) -> Vec<CellVerdict> {
    let (growth_key, rate_key) = match metric {
        VerdictMetric::Bytes(b) => (b.growth().key().to_string(), Some(b.rate().key())),
        VerdictMetric::Pointer(_, name) => (name.clone(), None),
    };
    let find = |cell: &str, key: &str| rows.iter().find(|r| r.cell == cell && r.metric == key);
    rows.iter()
        .filter(|e| e.metric == growth_key)
        .map(|g| {
            let level = levels.get(&g.cell).copied().unwrap_or(ALPHA);
            let rate = rate_key.and_then(|k| find(&g.cell, k));
            let mut c = CellVerdict::of(g, rate, metric.name(), level);
            for other in [
                ByteMeasure::Private,
                ByteMeasure::FileBacked,
                ByteMeasure::Rss,
                ByteMeasure::Anonymous,
            ] {
                if matches!(metric, VerdictMetric::Bytes(b) if *b == other) {
                    continue;
                }
                let Some(og) = find(&g.cell, other.growth().key()) else {
                    continue;
                };
                let (verdict, _, _) = combine(og, find(&g.cell, other.rate().key()), level);
                // File-backed pages exclude the anonymous ones: their undecided word beside an
                // anonymous verdict says only that the retention is anonymous, no disagreement.
                let beside_anonymous = other == ByteMeasure::FileBacked
                    && matches!(
                        metric,
                        VerdictMetric::Bytes(ByteMeasure::Anonymous | ByteMeasure::PssAnon)
                    )
                    && !decided(verdict);
                if verdict != c.verdict && !beside_anonymous {
                    c.disagreements.push(Disagreement {
                        metric: other.name().to_string(),
                        verdict,
                    });
                }
            }
            c
        })
        .collect()
}

/// The sorted distinct nodes of `runs` (finished runs of `values`; run.json `node`).
fn nodes_of(values: &RunValues, runs: &[usize]) -> Vec<String> {
    runs.iter()
        .filter_map(|&r| values.node(r).map(str::to_string))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// What the runs that finished ok gave instead of a usable value of `metric` (see
/// [`super::metrics::runs_gave`]): runs left out because their output's values are unusable, and
/// included runs whose value of this metric is missing or beyond 2^53. `runs` are finished runs
/// of `values`. `None` when there are none.
pub fn unusable_values(values: &RunValues, runs: &[usize], metric: Metric) -> Option<String> {
    values.unusable_values(runs.iter().copied(), metric)
}

/// `cell: ...; control: ...` (or `A: ...; B: ...`) of the sides that have unusable values.
pub fn sides_text(sides: [(&str, Option<String>); 2]) -> Option<String> {
    let parts: Vec<String> = sides
        .into_iter()
        .filter_map(|(name, text)| Some(format!("{name}: {}", text?)))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// One compared pair for [`estimate_rows`]: labels and the runs of each side (included ones, and
/// every run of the side for saying why some gave no value).
struct Pair<'a> {
    cell: &'a str,
    control: &'a str,
    cell_runs: Vec<usize>,
    control_runs: Vec<usize>,
    cell_all: Vec<usize>,
    control_all: Vec<usize>,
    /// Planned runs of the cell: the look whose level a sequential design gives it.
    planned: usize,
}

/// The estimates of every figure against the control for `pairs` under one multiplicity
/// control: each pair (cell) at its level (the design's level at its planned runs) divided by
/// the pairs (Bonferroni), Holm within the pair over a measure's growth and rate; each row
/// tagged with `node`.
fn estimate_rows(
    data: &RunValues,
    pairs: &[Pair<'_>],
    settings: &Settings,
    verdict_metric: &VerdictMetric,
    node: Option<&str>,
) -> Vec<Estimate> {
    let figures = figures(verdict_metric);
    // The shifts (exact intervals over all pairwise differences: the costly part with many runs
    // a cell) of each figure are independent: computed on the CPUs at hand.
    let all_shifts = super::parallel::map(&figures, |&figure| {
        let values =
            |runs: &[usize]| -> Vec<f64> { runs.iter().filter_map(|&r| figure.value(data, r)).collect() };
        pairs
            .iter()
            .map(|p| {
                let (x, y) = (values(&p.cell_runs), values(&p.control_runs));
                let alpha = settings.alpha_for(p.planned);
                (x.len(), y.len(), stats::shift::shift_at(&x, &y, alpha))
            })
            .collect::<Vec<(usize, usize, Option<Shift>)>>()
    });
    let k = pairs.len().max(1) as f64;
    let mut rows = Vec::new();
    for (pi, p) in pairs.iter().enumerate() {
        let alpha = settings.alpha_for(p.planned);
        let shift = |f: usize| all_shifts[f][pi];
        let judged = judge_cell(&figures, shift, alpha, k);
        for (f, &figure) in figures.iter().enumerate() {
            let (n_cell, n_control, s) = shift(f);
            let j = judged[f];
            let margin = figure.margin(settings.growth_margin, settings.rate_margin);
            let verdict = stats::verdict::decide(s.as_ref(), j.p_adjusted, j.check_level, alpha, margin);
            let (cell_unusable, control_unusable) = (
                figure.unusable(data, &p.cell_all),
                figure.unusable(data, &p.control_all),
            );
            // A side without a usable value whose runs gave unusable ones: more runs alike would
            // not help, so no number of repetitions is named.
            let blocked =
                (n_cell == 0 && cell_unusable.is_some()) || (n_control == 0 && control_unusable.is_some());
            rows.push(Estimate {
                cell: p.cell.to_string(),
                control: p.control.to_string(),
                metric: figure.key(data),
                n_cell,
                n_control,
                shift: s.map(|s| s.shift),
                ci_low: s.map(|s| s.ci_low),
                ci_high: s.map(|s| s.ci_high),
                confidence: s.map(|s| s.confidence),
                p: s.map(|s| s.p),
                p_adjusted: s.map(|_| j.p_adjusted),
                exact: s.map(|s| s.exact),
                margin,
                verdict,
                repetitions_needed: (verdict == Verdict::TooFewRuns && !blocked)
                    .then(|| stats::repetitions_needed(j.first_step)),
                unusable_values: sides_text([("cell", cell_unusable), ("control", control_unusable)]),
                cell_nodes: nodes_of(data, &p.cell_runs),
                control_nodes: nodes_of(data, &p.control_runs),
                node: node.map(str::to_string),
            });
        }
    }
    rows
}

/// The control: `settings.control`, else mode = reuse when `mode_key` names a matrix key with
/// a `reuse` cell; otherwise `None` with a message saying how to name one.
fn choose_control(
    values: &RunValues,
    keys: &[String],
    mode_key: Option<&str>,
    settings: &Settings,
) -> Result<Control, String> {
    if let Some(values) = &settings.control {
        let unknown: Vec<&str> = values
            .iter()
            .filter(|(k, _)| !keys.contains(k))
            .map(|(k, _)| k.as_str())
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "[report] control names {} which is not a matrix key (matrix keys: {})",
                unknown.join(", "),
                keys.join(", ")
            ));
        }
        return Ok(Control {
            values: values.iter().cloned().collect(),
            source: "manifest",
        });
    }
    let hint = format!(
        "name one with [report] control = {{ KEY = \"VALUE\" }} in the manifest (matrix keys: {})",
        if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(", ")
        }
    );
    let Some(k) = mode_key else {
        return Err(format!("no control: no matrix key `mode`; {hint}"));
    };
    if !values.any_control_mode(k) {
        return Err(format!("no control: no cell with {k} = {CONTROL_MODE}; {hint}"));
    }
    Ok(Control {
        values: BTreeMap::from([(
            k.to_string(),
            crate::manifest::Value::Str(CONTROL_MODE.to_string()),
        )]),
        source: "default",
    })
}

struct CellRuns<'a> {
    label: &'a str,
    cell: &'a BTreeMap<String, crate::manifest::Value>,
    runs: Vec<usize>,
    all: Vec<usize>,
    planned: usize,
}

/// Each compared cell with its control cell: the cell of its group (its values other than the
/// control's keys) with the control's values. Cells whose group has none are listed in
/// `out.without_control`; `out.no_control` says so when no cell has the control's values.
fn pair_with_controls<'c, 'a>(
    cells: &'c [CellRuns<'a>],
    control: &Control,
    out: &mut Estimates,
) -> Vec<(&'c CellRuns<'a>, &'c CellRuns<'a>)> {
    let is_control = |c: &CellRuns<'_>| {
        control
            .values
            .iter()
            .all(|(k, v)| c.cell.get(k).is_some_and(|x| x.same_cell(v)))
    };
    let group = |c: &CellRuns<'_>| -> Vec<(String, String)> {
        c.cell
            .iter()
            .filter(|(k, _)| !control.values.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    };
    let mut pairs: Vec<(&CellRuns<'_>, &CellRuns<'_>)> = Vec::new();
    for c in cells.iter().filter(|c| !is_control(c)) {
        let g = group(c);
        match cells.iter().find(|o| is_control(o) && group(o) == g) {
            Some(ctrl) => pairs.push((c, ctrl)),
            None => out.without_control.push(c.label.to_string()),
        }
    }
    if !cells.iter().any(is_control) {
        out.no_control = Some(format!(
            "no cell has the control's values ({}); name another with [report] control = {{ KEY = \"VALUE\" }}",
            control.text()
        ));
    }
    pairs
}

/// The pairs of (cell, control) as estimated over every node: under a sequential design, the
/// control's runs of the cell's rounds only.
fn pooled_pairs<'a>(pairs: &[(&CellRuns<'a>, &CellRuns<'a>)], settings: &Settings) -> Vec<Pair<'a>> {
    pairs
        .iter()
        .map(|(c, ctrl)| {
            // A sequential design judges a cell at its look against the control's runs of the
            // same rounds: its first as many (the control may have gone on for other cells).
            let cut = settings
                .design
                .as_ref()
                .and_then(|_| ctrl.all.get(c.planned).copied())
                .unwrap_or(usize::MAX);
            let before = |rs: &[usize]| rs.iter().copied().filter(|&r| r < cut).collect::<Vec<_>>();
            Pair {
                cell: c.label,
                control: ctrl.label,
                cell_runs: c.runs.clone(),
                control_runs: before(&ctrl.runs),
                cell_all: c.all.clone(),
                control_all: before(&ctrl.all),
                planned: c.planned,
            }
        })
        .collect()
}

/// When the runs span more than one node: a warning per pair whose sides ran on other nodes,
/// and the estimates within each node (`out.per_node`).
fn per_node(
    values: &RunValues,
    pooled: &[Pair<'_>],
    settings: &Settings,
    verdict_metric: &VerdictMetric,
    out: &mut Estimates,
) {
    let all_nodes: Vec<String> = values.all_nodes();
    if all_nodes.len() > 1 {
        for p in pooled {
            let (a, b) = (nodes_of(values, &p.cell_runs), nodes_of(values, &p.control_runs));
            if a != b {
                out.node_warnings.push(format!(
                    "warning: {} ran on {} and its control {} on {}: its estimate compares hosts as well as cells (per node: the table against the control on each node)",
                    p.cell,
                    list_or_none(&a),
                    p.control,
                    list_or_none(&b)
                ));
            }
        }
        for node in &all_nodes {
            let on = |rs: &[usize], node: &str| -> Vec<usize> {
                rs.iter()
                    .copied()
                    .filter(|&r| values.node(r) == Some(node))
                    .collect()
            };
            let here: Vec<Pair<'_>> = pooled
                .iter()
                .map(|p| Pair {
                    cell: p.cell,
                    control: p.control,
                    cell_runs: on(&p.cell_runs, node),
                    control_runs: on(&p.control_runs, node),
                    cell_all: on(&p.cell_all, node),
                    control_all: on(&p.control_all, node),
                    planned: p.planned,
                })
                .filter(|p| !p.cell_runs.is_empty() && !p.control_runs.is_empty())
                .collect();
            if here.is_empty() {
                continue;
            }
            out.per_node
                .extend(estimate_rows(values, &here, settings, verdict_metric, Some(node)));
        }
    }
}

/// Estimates of every compared cell against its control.
pub fn estimates(
    values: &RunValues,
    keys: &[String],
    mode_key: Option<&str>,
    settings: &Settings,
) -> Estimates {
    let verdict_metric = settings.verdict_metric(values.pointers());
    let mut out = Estimates {
        verdict_metric: verdict_metric.name().to_string(),
        correction: "holm within",
        level: settings.alpha(),
        growth_margin: settings.growth_margin,
        rate_margin: settings.rate_margin,
        ..Estimates::default()
    };
    let control = match choose_control(values, keys, mode_key, settings) {
        Ok(c) => c,
        Err(why) => {
            out.no_control = Some(why);
            return out;
        }
    };
    let cells: Vec<CellRuns<'_>> = values
        .cells
        .iter()
        .enumerate()
        .map(|(i, c)| CellRuns {
            label: &c.label,
            cell: &c.cell,
            runs: values.estimate_runs(i),
            all: values.cell_runs(i),
            planned: c.planned,
        })
        .collect();
    let pairs = pair_with_controls(&cells, &control, &mut out);
    out.control = Some(control);
    let k = pairs.len();
    out.compared_cells = k;
    if k > 1 {
        out.correction = "bonferroni across cells, holm within";
        out.level = settings.alpha() / k as f64;
    }
    let pooled = pooled_pairs(&pairs, settings);
    out.rows = estimate_rows(values, &pooled, settings, &verdict_metric, None);
    let levels: HashMap<String, f64> = pooled
        .iter()
        .map(|p| {
            (
                p.cell.to_string(),
                settings.alpha_for(p.planned) / k.max(1) as f64,
            )
        })
        .collect();
    per_node(values, &pooled, settings, &verdict_metric, &mut out);
    // Rows by cell (plan order), then metric (table order).
    let order: HashMap<&str, usize> = cells.iter().enumerate().map(|(i, c)| (c.label, i)).collect();
    out.rows.sort_by_key(|e| {
        (
            order.get(e.cell.as_str()).copied().unwrap_or(usize::MAX),
            e.metric().map_or(usize::MAX, |m| m as usize),
        )
    });
    out.per_node.sort_by_key(|e| {
        (
            e.node.clone(),
            order.get(e.cell.as_str()).copied().unwrap_or(usize::MAX),
            e.metric().map_or(usize::MAX, |m| m as usize),
        )
    });
    out.cells = cell_verdicts(&out.rows, &verdict_metric, &levels);
    out
}

fn list_or_none(nodes: &[String]) -> String {
    if nodes.is_empty() {
        "no node (no run with the metric)".into()
    } else {
        nodes.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_manifest() {
        let s = settings("[report]\ncontrol = { allocator = \"glibc\" }\nequivalence-margin = \"64KiB\"\n")
            .unwrap();
        assert_eq!(
            s.control,
            Some(vec![(
                "allocator".into(),
                crate::manifest::Value::Str("glibc".into())
            )])
        );
        assert_eq!(s.growth_margin, Some(65536.0));
        let s = settings("[report]\nequivalence-margin = { growth = 4096, rate = \"1KiB\" }\n").unwrap();
        assert_eq!((s.growth_margin, s.rate_margin), (Some(4096.0), Some(1024.0)));
        assert!(settings("[report]\nequivalence-margin = \"64 furlongs\"\n").is_err());
        assert!(settings("[report]\ncontrol = 3\n").is_err());
        assert_eq!(settings("format = 1\n").unwrap(), Settings::default());
        assert_eq!(parse_size("1.5 MiB").unwrap(), 1.5 * 1024.0 * 1024.0);
        // verdict-metric: read back from the bundle's manifest.toml; anonymous by default.
        assert_eq!(
            Settings::default().verdict_metric(&[]),
            VerdictMetric::Bytes(ByteMeasure::Anonymous)
        );
        let s = settings("[report]\nverdict-metric = \"private\"\n").unwrap();
        assert_eq!(s.verdict_metric(&[]), VerdictMetric::Bytes(ByteMeasure::Private));
        let s = settings("[report]\nmetrics = { load = \"/load\" }\nverdict-metric = \"load\"\n").unwrap();
        assert_eq!(
            s.verdict_metric(&["load".into()]),
            VerdictMetric::Pointer(0, "load".into())
        );
        let e = settings("[report]\nverdict-metric = \"anon\"\n").unwrap_err();
        assert!(
            e.contains("valid: anonymous, private, rss, pss-anon, file-backed"),
            "{e}"
        );
    }

    fn row(cell: &str, metric: Metric, verdict: Verdict) -> Estimate {
        Estimate {
            cell: cell.into(),
            control: "mode=reuse".into(),
            metric: metric.def().key.into(),
            n_cell: 5,
            n_control: 5,
            shift: None,
            ci_low: None,
            ci_high: None,
            confidence: None,
            p: None,
            p_adjusted: None,
            exact: None,
            margin: None,
            verdict,
            repetitions_needed: None,
            unusable_values: None,
            cell_nodes: Vec::new(),
            control_nodes: Vec::new(),
            node: None,
        }
    }

    #[test]
    fn growth_and_rate_give_one_word_with_a_reason() {
        use Verdict::*;
        let cases = [
            // (growth, rate, the cell's, by the rate, a reason)
            (AboveControl, Some(AboveControl), AboveControl, false, false),
            (AboveControl, Some(BelowControl), AboveControl, false, true),
            (BelowControl, Some(AboveControl), BelowControl, false, true),
            (
                AboveControl,
                Some(NoDetectableDifference),
                AboveControl,
                false,
                true,
            ),
            (AboveControl, Some(TooFewRuns), AboveControl, false, true),
            (AboveControl, None, AboveControl, false, false),
            (Equivalent, Some(AboveControl), AboveControl, true, true),
            (Equivalent, Some(BelowControl), BelowControl, true, true),
            (Equivalent, Some(NoDetectableDifference), Equivalent, false, false),
            (Equivalent, Some(Equivalent), Equivalent, false, false),
            (Equivalent, None, Equivalent, false, false),
            (
                NoDetectableDifference,
                Some(AboveControl),
                AboveControl,
                true,
                true,
            ),
            (
                NoDetectableDifference,
                Some(NoDetectableDifference),
                NoDetectableDifference,
                false,
                false,
            ),
            (
                NoDetectableDifference,
                Some(TooFewRuns),
                NoDetectableDifference,
                false,
                true,
            ),
            (TooFewRuns, Some(TooFewRuns), TooFewRuns, false, false),
            (TooFewRuns, Some(AboveControl), AboveControl, true, true),
        ];
        for (g, r, want, by_rate, reason) in cases {
            let growth = row("mode=a", Metric::AnonymousGrowth, g);
            let rate = r.map(|r| row("mode=a", Metric::AnonymousRate, r));
            let c = CellVerdict::of(&growth, rate.as_ref(), "anonymous", 0.05);
            assert_eq!(
                (c.verdict, c.by_rate(), c.reason.is_some()),
                (want, by_rate, reason),
                "{g:?} {r:?} {:?}",
                c.reason
            );
        }
        // Opposite directions are named, never silent.
        let c = CellVerdict::of(
            &row("mode=a", Metric::AnonymousGrowth, AboveControl),
            Some(&row("mode=a", Metric::AnonymousRate, BelowControl)),
            "anonymous",
            0.05,
        );
        assert!(
            c.reason
                .unwrap()
                .starts_with("growth above control, rate below control")
        );
        // A rate interval wholly above 0 beside `no detectable difference`: the reason says so.
        let mut rate = row("mode=a", Metric::AnonymousRate, NoDetectableDifference);
        (rate.ci_low, rate.ci_high, rate.p_adjusted) = (Some(500.0), Some(1100.0), Some(0.06));
        let c = CellVerdict::of(
            &row("mode=a", Metric::AnonymousGrowth, NoDetectableDifference),
            Some(&rate),
            "anonymous",
            0.05,
        );
        assert_eq!(c.verdict, NoDetectableDifference);
        assert_eq!(
            c.reason.as_deref(),
            Some("rate's interval is above 0 but its corrected p (0.06) is not below 0.05")
        );
        // Other metrics that give another word are listed.
        let rows = [
            row("mode=a", Metric::PrivateGrowth, NoDetectableDifference),
            row("mode=a", Metric::AnonymousGrowth, AboveControl),
            row("mode=a", Metric::AnonymousRate, AboveControl),
            row("mode=a", Metric::RssGrowth, AboveControl),
            row("mode=a", Metric::FileBackedGrowth, NoDetectableDifference),
        ];
        let levels = HashMap::from([("mode=a".to_string(), 0.05)]);
        let cells = cell_verdicts(&rows, &VerdictMetric::Bytes(ByteMeasure::Anonymous), &levels);
        assert_eq!(cells[0].verdict, AboveControl);
        assert_eq!(
            cells[0]
                .disagreements
                .iter()
                .map(|d| d.metric.as_str())
                .collect::<Vec<_>>(),
            ["private"]
        );
        let cells = cell_verdicts(&rows, &VerdictMetric::Bytes(ByteMeasure::Private), &levels);
        assert_eq!(
            (cells[0].verdict, cells[0].metric.as_str()),
            (NoDetectableDifference, "private")
        );
    }
}
