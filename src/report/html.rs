//! `report --format html` and `compare --format html` (DESIGN 9): one self-contained page.
//!
//! The page is built with maud's `html!` macro, which escapes every spliced value (`&`, `<`, `>`,
//! `"`; attribute values are always double-quoted): matrix values, run ids, output-check reasons,
//! stderr lines, paths and host facts are user data and never reach the page unescaped. The only
//! text spliced as is is the stylesheet below (a constant) and the SVG plot from [`super::plot`],
//! whose text and attribute values plotters' SVG backend escapes itself.
//!
//! Self-contained: inline CSS, inline SVG, no scripts, no fonts, no images, no links to load. A
//! `Content-Security-Policy` meta element (`default-src 'none'`) makes the browser refuse any load
//! or script should one ever slip in.
//!
//! Contents of a report page: summary (bundle, experiment, status, counts), the run table with a
//! reason column for runs that are not ok, the analysis tables of [`super::render::analysis_sections`]
//! (retention per run / per cell / against the control, metrics), the plot, provenance
//! (revision.txt, branch, dirty files from working-tree.txt, drift from provenance.json) and host
//! facts (host.json). A compare page: both bundles' facts side by side, the provenance
//! differences, the cells side by side with the difference of medians, and both plots.

use std::path::Path;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::Value as Json;

use super::comparison::Comparison;
use super::model::{Report, Stats, fmt_num};
use super::plot::{self, PlotError};
use super::render::analysis_sections;
use super::section::Section;
use crate::bundle::read::{Bundle, ReadError};
use crate::bundle::{BundleInfo, Outcome, files};

/// The page's stylesheet (inline; no web fonts: system font stacks only).
const CSS: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  margin: 1.5rem auto; max-width: 1400px; padding: 0 1rem; color: #1b1f24; background: #fff;
  line-height: 1.4; }
h1 { font-size: 1.5rem; margin-bottom: .25rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; }
h3 { font-size: 1rem; margin-top: 1.2rem; }
code, .mono, td { font-family: ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, monospace;
  font-size: .85rem; }
.subtitle { color: #57606a; margin-top: 0; }
.wrap { overflow-x: auto; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #d0d7de; padding: .2rem .5rem; vertical-align: top; }
th { background: #f6f8fa; text-align: left; font-size: .85rem; }
td.num { text-align: right; white-space: nowrap; }
tbody td:first-child { white-space: nowrap; }
tr.not-ok td { background: #fff1f0; }
tr.not-run td { background: #f6f8fa; color: #57606a; }
tr.differs td { background: #fff8c5; }
td.nowrap { white-space: nowrap; }
td.reason { color: #a40e26; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .15rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .85rem;
  overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: .6rem; font-size: .8rem;
  font-weight: 600; border: 1px solid; }
.badge.ok { color: #1a7f37; border-color: #1a7f37; }
.badge.bad { color: #a40e26; border-color: #a40e26; }
.badge.warn { color: #9a6700; border-color: #9a6700; }
.note { color: #57606a; font-size: .9rem; margin: .2rem 0; }
figure { margin: .5rem 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: .9rem; }
footer { margin-top: 2rem; color: #57606a; font-size: .8rem; }
"#;

/// Content-Security-Policy of the page: nothing may be loaded or run; inline styles only.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

/// What a page shows of a bundle besides its [`Report`]: bundle.json, host.json, provenance.json
/// and working-tree.txt, each `None` when the file is missing.
#[derive(Debug, Clone, Default)]
pub struct BundleFacts {
    /// bundle.json (description, created / finished times, parent, notes).
    pub info: Option<BundleInfo>,
    /// host.json as untyped JSON (every top-level key but `format` is shown).
    pub host: Option<Json>,
    /// provenance.json as untyped JSON (repo, branch, head, dirty, drift, after.changed, ...).
    pub provenance: Option<Json>,
    /// working-tree.txt lines (`XY path`, one per status entry; empty for a clean tree).
    pub working_tree: Option<Vec<String>>,
}

impl BundleFacts {
    /// Reads the facts of the bundle folder `dir`. Missing files give `None`.
    ///
    /// # Errors
    /// bundle.json cannot be read (as [`Bundle::open`]), or host.json / provenance.json /
    /// working-tree.txt exist but cannot be read or parsed (the error names the file).
    pub fn read(dir: &Path) -> Result<BundleFacts, ReadError> {
        let bundle = Bundle::open(dir)?;
        let optional = |r: Result<Json, ReadError>| match r {
            Ok(v) => Ok(Some(v)),
            Err(ReadError::Missing { .. }) => Ok(None),
            Err(e) => Err(e),
        };
        let tree_path = bundle.path(files::WORKING_TREE);
        let working_tree = match std::fs::read(&tree_path) {
            Ok(bytes) => Some(
                String::from_utf8_lossy(&bytes)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::to_string)
                    .collect(),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(ReadError::Io {
                    path: tree_path,
                    source,
                });
            }
        };
        Ok(BundleFacts {
            info: Some(bundle.info().clone()),
            host: optional(bundle.host())?,
            provenance: optional(bundle.provenance())?,
            working_tree,
        })
    }
}

/// The report page of the bundle folder `dir`, whose report is `report` (collected with plot
/// series for the plot to have lines).
///
/// # Errors
/// The bundle's files cannot be read (see [`BundleFacts::read`]).
pub fn report_page(report: &Report, dir: &Path) -> anyhow::Result<String> {
    let facts = BundleFacts::read(dir)?;
    Ok(render_report(report, &facts).into_string())
}

/// The compare page of `c`, made from the reports `a` and `b` (collected with plot series); both
/// bundles' facts are read from the folders the reports name.
///
/// # Errors
/// Either bundle's files cannot be read (see [`BundleFacts::read`]).
pub fn compare_page(c: &Comparison, a: &Report, b: &Report) -> anyhow::Result<String> {
    let fa = BundleFacts::read(Path::new(&a.bundle))?;
    let fb = BundleFacts::read(Path::new(&b.bundle))?;
    Ok(render_compare(c, (a, &fa), (b, &fb)).into_string())
}

fn status_text(r: &Report) -> String {
    match r.sbatch_refusals.last() {
        Some(refusal) => format!("{} (sbatch refused {refusal})", r.status.as_str()),
        None => r.status.as_str().to_string(),
    }
}

fn outcome_text(o: Outcome) -> String {
    o.as_str().to_string()
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content={ "hwr-exp " (env!("CARGO_PKG_VERSION")) };
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                (body)
                footer { "Written by hwr-exp " (env!("CARGO_PKG_VERSION")) ". Self-contained: no scripts, no network." }
            }
        }
    }
}

/// The summary counts: planned, finished by outcome, not run.
fn counts_text(r: &Report) -> String {
    let finished: usize = r.counts.values().sum();
    let by_outcome: Vec<String> = r
        .counts
        .iter()
        .map(|(o, n)| format!("{n} {}", outcome_text(*o)))
        .collect();
    format!(
        "{} planned, {finished} finished ({}), {} not run",
        r.planned_runs,
        if by_outcome.is_empty() {
            "none".into()
        } else {
            by_outcome.join(", ")
        },
        r.not_run
    )
}

fn status_badge(r: &Report) -> Markup {
    let failed = r.counts.iter().any(|(o, n)| *o != Outcome::Ok && *n > 0);
    let class = if failed || r.not_run > 0 {
        "badge bad"
    } else if r.drift == Some(true) || r.dirty == Some(true) {
        "badge warn"
    } else {
        "badge ok"
    };
    html! { span class=(class) { (status_text(r)) } }
}

fn summary(r: &Report, f: &BundleFacts) -> Markup {
    html! {
        dl.facts {
            dt { "experiment" } dd { (r.experiment) }
            @if let Some(d) = f.info.as_ref().and_then(|i| i.description.as_deref()) {
                dt { "description" } dd { (d) }
            }
            dt { "bundle" } dd { (r.bundle) }
            dt { "status" } dd { (status_badge(r)) }
            @for refusal in &r.sbatch_refusals {
                dt { "sbatch refused" } dd { (refusal) }
            }
            dt { "runs" } dd { (counts_text(r)) }
            @if let Some(info) = &f.info {
                dt { "created" } dd { (info.created) }
                dt { "finished" } dd { (info.finished.as_deref().unwrap_or("-")) }
                @if let Some(p) = &info.parent {
                    dt { "parent" } dd { (p) }
                }
                @if let Some(o) = &info.overrides {
                    dt { "overrides" } dd { "run with " (o.to_args().join(" ")) " (resume and rerun do the same)" }
                }
                @for n in &info.notes {
                    dt { "note" } dd { (n) }
                }
            }
            dt { "revision" } dd { (r.revision.as_deref().unwrap_or("unknown")) }
            dt { "dirty tree" } dd { (super::render::provenance_yes_no(r, r.dirty)) }
            dt { "drift" } dd { (super::render::provenance_yes_no(r, r.drift)) }
            dt { "hwr-exp" } dd { (r.hwr_exp_version) }
            dt { "manifest sha256" } dd { (r.manifest_sha256) }
        }
    }
}

fn run_table(r: &Report) -> Markup {
    let nodes = r.multi_node();
    html! {
        div.wrap {
            table #runs {
                thead { tr {
                    th { "run-id" } th { "cell" } @if nodes { th { "node" } } th { "rep" } th { "outcome" } th { "termination" }
                    th { "exit" } th { "wall s" } th { "peak RSS 1 proc (B)" } th { "output" } th { "reason" }
                } }
                tbody {
                    @for run in &r.runs {
                        @let reason = run.reason.as_deref();
                        @let class = if !run.finished { Some("not-run") } else if reason.is_some() { Some("not-ok") } else { None };
                        tr data-run-id=(run.run_id) class=[class] {
                            td { (run.run_id) }
                            td { (run.cell_label) }
                            @if nodes { td { (run.node.as_deref().unwrap_or("-")) } }
                            td.num { (run.repetition) }
                            td { (run.outcome.map_or_else(|| "not run".into(), outcome_text)) }
                            td { (run.termination_text()) }
                            td.num { (run.exit_code.map_or_else(|| "-".into(), |c| c.to_string())) }
                            td.num { (run.wall_seconds.map_or_else(|| "-".into(), |w| format!("{w:.3}"))) }
                            td.num { (run.peak_rss_bytes.map_or_else(|| "-".into(), |b| b.to_string())) }
                            td { (run.output_text()) }
                            td.reason {
                                (reason.unwrap_or_default())
                                @if !run.stderr_tail().is_empty() {
                                    details { summary { "stderr" } pre { (run.stderr_tail().join("\n")) } }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(n) = r.collapsed_note() { p.note { (n) } }
            @if let Some(n) = super::render::left_out_note(r) { p.note { (n) } }
            @for n in super::render::memory_notes(r) { p.note { (n) } }
        }
    }
}

fn section(s: &Section) -> Markup {
    html! {
        h3 { (s.title) }
        @if !s.rows.is_empty() {
            div.wrap { table {
                thead { tr { @for h in &s.header { th { (h) } } } }
                tbody {
                    @for row in &s.rows {
                        tr {
                            @for (i, cell) in row.iter().enumerate() {
                                @if s.numeric.get(i).copied().unwrap_or(false) {
                                    td.num { (cell) }
                                } @else {
                                    td { (cell) }
                                }
                            }
                        }
                    }
                }
            } }
        }
        @for n in &s.notes { p.note { (n) } }
    }
}

/// The plot inline, or a note saying why there is none.
fn plot_figure(r: &Report, id: &str) -> Markup {
    match plot::render_svg(r) {
        Ok(svg) => html! {
            figure id=(id) {
                // plotters escapes the SVG's text and attribute values itself.
                (PreEscaped(svg))
                figcaption { "Private bytes per run, one line per run, colour = mode (top: the output's loop samples against iterations; below: memory.jsonl samples against seconds)." }
            }
        },
        Err(PlotError::Empty) => {
            html! { p.note { "No plot: no run output has retention samples and no run has memory.jsonl samples." } }
        }
        Err(e) => html! { p.note { "No plot: " (e.to_string()) } },
    }
}

/// A JSON value as one line of text: strings as they are, arrays joined by `, `, objects as
/// `key=value` pairs, `-` for null and empty arrays or objects.
fn json_line(v: &Json) -> String {
    match v {
        Json::Null => "-".into(),
        Json::Array(a) if a.is_empty() => "-".into(),
        Json::Object(o) if o.is_empty() => "-".into(),
        Json::String(s) => s.clone(),
        Json::Array(a) => a.iter().map(json_line).collect::<Vec<_>>().join(", "),
        Json::Object(o) => o
            .iter()
            .map(|(k, v)| format!("{k}={}", json_line(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn provenance(r: &Report, f: &BundleFacts) -> Markup {
    let p = f.provenance.as_ref();
    let s = |k: &str| p.and_then(|p| p.get(k)).map(json_line);
    let changed: Vec<String> = p
        .and_then(|p| p.pointer("/after/changed"))
        .and_then(Json::as_array)
        .map(|a| a.iter().map(json_line).collect())
        .unwrap_or_default();
    html! {
        dl.facts {
            dt { "revision" } dd { (r.revision.as_deref().unwrap_or("unknown (no revision.txt)")) }
            @if let Some(branch) = s("branch") { dt { "branch" } dd { (branch) } }
            @if let Some(repo) = s("repo") { dt { "repository" } dd { (repo) } }
            @if let Some(reason) = s("reason") { dt { "no revision because" } dd { (reason) } }
            dt { "dirty tree" } dd { (super::render::provenance_yes_no(r, r.dirty)) }
            @if let Some(sha) = s("patch-sha256") { dt { "working-tree.patch sha256" } dd { (sha) } }
            @if let Some(at) = s("captured-at") { dt { "captured at" } dd { (at) } }
            dt { "drift" } dd {
                (super::render::provenance_yes_no(r, r.drift))
                @if !changed.is_empty() { " (changed during the experiment: " (changed.join(", ")) ")" }
            }
        }
        h3 { "Dirty files (working-tree.txt)" }
        @match &f.working_tree {
            None => p.note { "No working-tree.txt in the bundle." },
            Some(lines) if lines.is_empty() => p.note { "None: the working tree was clean." },
            Some(lines) => ul.mono { @for l in lines { li { code { (l) } } } },
        }
    }
}

fn host(f: &BundleFacts) -> Markup {
    let Some(Json::Object(h)) = &f.host else {
        return html! { p.note { "No host.json in the bundle." } };
    };
    html! {
        dl.facts #host {
            @for (k, v) in h.iter().filter(|(k, _)| k.as_str() != "format") {
                dt { (k) }
                dd {
                    (json_line(v))
                    @if let Some(b) = v.as_u64().filter(|_| k.ends_with("-bytes")) {
                        " (" (fmt_num(b as f64 / (1024.0 * 1024.0 * 1024.0))) " GiB)"
                    }
                }
            }
        }
    }
}

/// The report page of `r` (collected with plot series) with the bundle's `facts`.
pub fn render_report(r: &Report, facts: &BundleFacts) -> Markup {
    let body = html! {
        h1 { "hwr-exp report: " (r.experiment) }
        p.subtitle { (r.bundle) }
        @if r.has_retention {
            h2 #verdicts-heading { "Verdicts against the control" }
            div #verdicts { (section(&super::verdicts::verdict_section(r))) }
            (interval_plot(r))
        }
        @for s in &super::render::answer_sections_after_verdicts(r) { (section(s)) }
        h2 #summary { "Summary" }
        (summary(r, facts))
        h2 #run-table { "Runs" }
        (run_table(r))
        @let sections = analysis_sections(r);
        @if !sections.is_empty() {
            h2 #analysis { "Retention and metrics" }
            @for s in &sections { (section(s)) }
        }
        h2 #plot-heading { "Plot" }
        (plot_figure(r, "plot"))
        h2 #provenance { "Provenance" }
        (provenance(r, facts))
        h2 #host-facts { "Host" }
        (host(facts))
    };
    page(&format!("hwr-exp report: {}", r.experiment), body)
}

/// An inline SVG of each compared cell's verdict-metric growth interval against its control: one bar per
/// cell from ci-low to ci-high, a dot at the shift, the zero line marked. Text is escaped by maud.
fn interval_plot(r: &Report) -> Markup {
    let growth_key = r.estimates.verdict_growth_key();
    let label = r.estimates.verdict_growth_label();
    let rows: Vec<&super::estimates::Estimate> = r
        .estimates
        .rows
        .iter()
        .filter(|e| e.metric == growth_key && e.shift.is_some())
        .collect();
    if rows.is_empty() {
        return html! { p.note { "No interval plot: no cell compared with a control." } };
    }
    let (label_w, plot_w, row_h, top) = (260.0, 520.0, 28.0, 30.0);
    let mut lo = 0.0f64;
    let mut hi = 0.0f64;
    for e in &rows {
        lo = lo.min(e.ci_low.unwrap_or(0.0));
        hi = hi.max(e.ci_high.unwrap_or(0.0));
    }
    if hi - lo <= 0.0 {
        // Every interval is [0, 0]: a page either side, not a byte (growth is page-quantized).
        lo -= 4096.0;
        hi += 4096.0;
    }
    let pad = (hi - lo) * 0.08;
    let (lo, hi) = (lo - pad, hi + pad);
    let x = |v: f64| label_w + (v - lo) / (hi - lo) * plot_w;
    let height = top + row_h * rows.len() as f64 + 30.0;
    let width = label_w + plot_w + 20.0;
    let zero = x(0.0);
    html! {
        figure #interval-plot {
            svg xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) viewBox={ "0 0 " (width) " " (height) } role="img" {
                title { (label) ", cell minus control: Hodges-Lehmann shift and 95% interval" }
                line x1=(zero) y1=(top - 10.0) x2=(zero) y2=(height - 25.0) stroke="#57606a" stroke-dasharray="4 3" {}
                text x=(zero) y=(top - 14.0) font-size="11" text-anchor="middle" fill="#57606a" { "0" }
                text x=(label_w) y=(height - 8.0) font-size="11" fill="#57606a" { (super::verdicts::human_bytes(lo)) }
                text x=(label_w + plot_w) y=(height - 8.0) font-size="11" text-anchor="end" fill="#57606a" { (super::verdicts::human_bytes(hi)) }
                @for (i, e) in rows.iter().enumerate() {
                    @let y = top + row_h * i as f64 + row_h / 2.0;
                    @let verdict = r.estimates.cell_verdict(&e.cell).map_or(e.verdict, |c| c.verdict);
                    @let colour = match verdict {
                        crate::stats::Verdict::AboveControl => "#a40e26",
                        crate::stats::Verdict::BelowControl => "#0969da",
                        crate::stats::Verdict::Equivalent => "#1a7f37",
                        _ => "#57606a",
                    };
                    text x="4" y=(y + 4.0) font-size="12" { (e.cell) }
                    line x1=(x(e.ci_low.unwrap_or(0.0))) y1=(y) x2=(x(e.ci_high.unwrap_or(0.0))) y2=(y) stroke=(colour) stroke-width="6" stroke-linecap="round" {}
                    circle cx=(x(e.shift.unwrap_or(0.0))) cy=(y) r="5" fill="#fff" stroke=(colour) stroke-width="2" {}
                }
            }
            figcaption { (label) " (the verdict metric's), cell minus control: Hodges-Lehmann shift (dot) and exact 95% interval (bar); the dashed line is 0. Colour: the cell's verdict (the verdict table's): red above control, blue below, green equivalent, grey no detectable difference or too few runs." }
        }
    }
}

fn stats_cell(s: Option<Stats>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{} (n={})", s.text(), s.n))
}

/// The compare page: `(report, facts)` of bundle A and of bundle B.
pub fn render_compare(c: &Comparison, a: (&Report, &BundleFacts), b: (&Report, &BundleFacts)) -> Markup {
    let (ra, fa) = a;
    let (rb, fb) = b;
    let side = |r: &Report| {
        [
            ("experiment", r.experiment.clone()),
            ("status", status_text(r)),
            ("runs", counts_text(r)),
            ("revision", r.revision.clone().unwrap_or_else(|| "unknown".into())),
            ("dirty tree", super::render::provenance_yes_no(r, r.dirty).into()),
            ("drift", super::render::provenance_yes_no(r, r.drift).into()),
            ("hwr-exp", r.hwr_exp_version.clone()),
        ]
    };
    let host_of = |f: &BundleFacts, k: &str| {
        f.host
            .as_ref()
            .and_then(|h| h.get(k))
            .map_or_else(|| "unknown".into(), json_line)
    };
    let body = html! {
        h1 { "hwr-exp compare" }
        p.subtitle { "A: " (c.a) br; "B: " (c.b) }
        h2 #bundles { "Bundles" }
        div.wrap { table #bundle-facts {
            thead { tr { th { "" } th { "A" } th { "B" } } }
            tbody {
                @for ((name, x), (_, y)) in side(ra).into_iter().zip(side(rb)) {
                    tr class=[(x != y).then_some("differs")] { th { (name) } td { (x) } td { (y) } }
                }
                @for k in ["hostname", "cpu-model", "kernel", "os"] {
                    @let (x, y) = (host_of(fa, k), host_of(fb, k));
                    tr class=[(x != y).then_some("differs")] { th { (k) } td { (x) } td { (y) } }
                }
            }
        } }
        h2 #differences { "Provenance differences" }
        @if c.differences.is_empty() {
            p { "Same experiment, revision, working tree, host, hwr-exp version and manifest." }
        } @else {
            div.wrap { table {
                thead { tr { th { "fact" } th { "A" } th { "B" } } }
                tbody { @for d in &c.differences { tr { td { (d.fact) } td { (d.a) } td { (d.b) } } } }
            } }
        }
        h2 #cells { "Cells side by side" }
        p.note { "min / median / max over the aggregated runs; B - A is the difference of medians. Rows whose ranges do not overlap are marked." }
        div.wrap { table #cells-table {
            thead { tr { th { "cell" } th { "metric" } th { "A" } th { "B" } th { "B - A" } th { "note" } } }
            tbody {
                @for row in &c.rows {
                    @let differs = row.ranges_overlap == Some(false);
                    tr class=[differs.then_some("differs")] {
                        td { (row.cell) }
                        td.nowrap { (row.metric) }
                        td.num { (stats_cell(row.a)) }
                        td.num { (stats_cell(row.b)) }
                        td.num {
                            @match row.median_difference {
                                Some(d) if d > 0.0 => { "+" (fmt_num(d)) }
                                Some(d) => (fmt_num(d)),
                                None => "-",
                            }
                        }
                        td.nowrap {
                            @match row.ranges_overlap {
                                Some(true) => "ranges overlap (noise)",
                                Some(false) => "ranges apart",
                                None => "only one side has it",
                            }
                        }
                    }
                }
            }
        } }
        @if !c.only_in_a.is_empty() { p { "Cells only in A: " (c.only_in_a.join(", ")) } }
        @if !c.only_in_b.is_empty() { p { "Cells only in B: " (c.only_in_b.join(", ")) } }
        h2 #runs-a { "Runs of A" }
        (run_table(ra))
        h2 #runs-b { "Runs of B" }
        (run_table(rb))
        h2 #plot-a-heading { "Plot of A" }
        (plot_figure(ra, "plot-a"))
        h2 #plot-b-heading { "Plot of B" }
        (plot_figure(rb, "plot-b"))
    };
    page("hwr-exp compare", body)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::report::model::RunSummary;

    const HOSTILE: &str = "<script>alert(1)</script>\"&'";

    fn run(id: &str, outcome: Option<Outcome>) -> RunSummary {
        RunSummary::for_tests(id, &[("mode", HOSTILE)], outcome)
    }

    fn report(runs: Vec<RunSummary>) -> Report {
        let mut r = Report::for_tests(runs);
        r.bundle = format!("results/{HOSTILE}");
        r.experiment = HOSTILE.into();
        r.revision = Some(HOSTILE.into());
        r
    }

    #[test]
    fn every_user_value_is_escaped() {
        let facts = BundleFacts {
            working_tree: Some(vec![format!(" M {HOSTILE}")]),
            host: Some(serde_json::json!({ "format": 1, "hostname": HOSTILE })),
            ..BundleFacts::default()
        };
        let mut failed = run("r1", Some(Outcome::Failed));
        failed.reason = Some(format!("exit 1: {HOSTILE}"));
        failed.stderr_tail = vec!["Traceback".into(), HOSTILE.into()];
        let r = report(vec![run("r0", Some(Outcome::Ok)), failed]);
        let page = render_report(&r, &facts).into_string();
        assert!(!page.to_ascii_lowercase().contains("<script"), "{page}");
        assert!(!page.contains(HOSTILE));
        let escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&amp;'";
        // Experiment (title and heading), bundle, revision (twice), cell labels, the stderr
        // line in the reason, the dirty file and the hostname.
        assert!(page.matches(escaped).count() >= 9, "{page}");
        assert!(page.contains(&format!("exit 1: {escaped}")));
        assert!(page.contains(&format!("Traceback\n{escaped}")));
        assert!(page.contains("data-run-id=\"r1\" class=\"not-ok\""));
        assert!(page.contains("No plot: no run output"));
    }
}
