//! `report --plot FILE.svg`: private bytes against loop iterations (the probe's own samples of
//! its own process), one line (an SVG `<polyline>`) per run, coloured by mode, one panel per
//! size; below, where memory.jsonl exists, the run's tree figure from the external samples: PSS
//! summed over every process of the run (smaps_rollup samples only; each shared page counted
//! once), against seconds since the run started, one line per run. Each panel's title and axis
//! name the figure it shows.
//!
//! Drawn with plotters' SVG backend without the `ttf` feature: text is emitted as `<text>` elements
//! and no font file is read.

use std::path::Path;

use plotters::prelude::*;

use super::model::{Report, RunSummary};

/// Width of one panel, pixels.
const PANEL_WIDTH: u32 = 520;
/// Height of one row of panels, pixels.
const PANEL_HEIGHT: u32 = 380;

/// Colours by mode, in order of the modes' first appearance.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Errors writing the plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Nothing to draw.
    #[error("nothing to plot: no run output has retention samples and no run has memory.jsonl samples")]
    Empty,
    /// plotters failed.
    #[error("drawing the plot: {0}")]
    Draw(String),
    /// The file could not be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The SVG file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Formats bytes for an axis whose visible span is `span` bytes: the unit is chosen so that
/// neighbouring tick labels differ (KiB without decimals below a 10 MiB span, and so on).
pub fn fmt_axis_bytes(b: f64, span: f64) -> String {
    const KIB: f64 = 1024.0;
    if span >= 10.0 * KIB * KIB * KIB {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    } else if span >= 10.0 * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if span >= 10.0 * KIB {
        format!("{:.0} KiB", b / KIB)
    } else {
        format!("{b:.0} B")
    }
}

fn draw_err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

type Series = Vec<(f64, f64)>;

/// One run's series in a panel.
struct Line {
    /// The run's mode (its colour).
    mode: String,
    /// The run's id (its legend entry).
    run_id: String,
    points: Series,
}

/// One panel: title, axis names, the runs drawn, and the runs of its size that have no sample
/// of its figure (named in the legend as `no samples`).
struct Panel {
    title: String,
    x_desc: &'static str,
    /// The figure on the y axis, with its scope.
    y_desc: &'static str,
    integer_x: bool,
    lines: Vec<Line>,
    no_samples: Vec<String>,
}

/// Most legend entries a panel lists one per run; with more runs the legend counts the runs of
/// each mode instead.
const LEGEND_RUNS: usize = 12;

/// The smallest span of an axis of bytes: tick labels are whole bytes, so a flat series (one
/// sample, or equal samples) gets a span over which the ticks differ.
const MIN_BYTES_SPAN: f64 = 16.0;

/// The smallest span of the loop-iterations axis (whole numbers).
const MIN_ITERATIONS_SPAN: f64 = 10.0;

/// The smallest span of the seconds axis.
const MIN_SECONDS_SPAN: f64 = 0.01;

/// The range of `pick` over the points of `lines`, at least `min_span` wide (centred on the
/// data when narrower), padded by 5% on each side.
fn range(lines: &[Line], pick: impl Fn(&(f64, f64)) -> f64, min_span: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for l in lines {
        for p in &l.points {
            lo = lo.min(pick(p));
            hi = hi.max(pick(p));
        }
    }
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, min_span);
    }
    if hi - lo < min_span {
        let mid = (lo + hi) / 2.0;
        lo = mid - min_span / 2.0;
        hi = mid + min_span / 2.0;
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad)
}

/// Decimals that keep the labels of `labels` ticks over `span` apart: the ticks are at least
/// `span / labels` apart, so one more decimal than that step's first significant digit needs
/// at most (`0.100`, `0.102`, `0.104` instead of three `0.10`).
pub fn axis_decimals(span: f64, labels: usize) -> usize {
    let step = span / labels.max(1) as f64;
    if !step.is_finite() || step <= 0.0 || step >= 1.0 {
        return 0;
    }
    (-step.log10()).ceil().clamp(0.0, 9.0) as usize
}

/// `1 run`, `3 runs`.
fn runs(n: usize) -> String {
    if n == 1 {
        "1 run".into()
    } else {
        format!("{n} runs")
    }
}

/// The legend entries of a panel: one per run (`mode: run-id`), or with more than
/// [`LEGEND_RUNS`] runs one per mode with its count; then the runs without samples.
fn legend(panel: &Panel, modes: &[String]) -> Vec<(String, Option<usize>)> {
    let colour_of = |mode: &str| modes.iter().position(|m| m == mode).unwrap_or(0);
    let mut entries: Vec<(String, Option<usize>)> = Vec::new();
    if panel.lines.len() + panel.no_samples.len() <= LEGEND_RUNS {
        for l in &panel.lines {
            let single = if l.points.len() == 1 { " (1 sample)" } else { "" };
            entries.push((
                format!("{}: {}{single}", l.mode, l.run_id),
                Some(colour_of(&l.mode)),
            ));
        }
        for id in &panel.no_samples {
            entries.push((format!("{id}: no samples"), None));
        }
    } else {
        let mut counted: Vec<(&str, usize)> = Vec::new();
        for l in &panel.lines {
            match counted.iter_mut().find(|(m, _)| *m == l.mode) {
                Some((_, n)) => *n += 1,
                None => counted.push((&l.mode, 1)),
            }
        }
        for (mode, n) in counted {
            entries.push((format!("{mode}: {}", runs(n)), Some(colour_of(mode))));
        }
        if !panel.no_samples.is_empty() {
            entries.push((format!("no samples: {}", runs(panel.no_samples.len())), None));
        }
    }
    entries
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    modes: &[String],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    if panel.lines.is_empty() {
        // No run of this size has a sample of this figure: say so, naming the runs.
        let area = area.titled(&panel.title, ("sans-serif", 16)).map_err(draw_err)?;
        let style = ("sans-serif", 13).into_font().color(&BLACK);
        area.draw_text("no samples of this figure:", &style, (20, 20))
            .map_err(draw_err)?;
        for (i, id) in panel.no_samples.iter().take(LEGEND_RUNS).enumerate() {
            area.draw_text(id, &style, (30, 40 + 18 * i as i32))
                .map_err(draw_err)?;
        }
        if panel.no_samples.len() > LEGEND_RUNS {
            let more = format!("and {} more", panel.no_samples.len() - LEGEND_RUNS);
            area.draw_text(&more, &style, (30, 40 + 18 * LEGEND_RUNS as i32))
                .map_err(draw_err)?;
        }
        return Ok(());
    }
    let x_min = if panel.integer_x {
        MIN_ITERATIONS_SPAN
    } else {
        MIN_SECONDS_SPAN
    };
    let (x0, x1) = range(&panel.lines, |p| p.0, x_min);
    let (y0, y1) = range(&panel.lines, |p| p.1, MIN_BYTES_SPAN);
    let entries = legend(panel, modes);
    // Headroom above the data for the legend box in the upper left corner.
    let headroom = (0.1 + 0.09 * entries.len() as f64).clamp(0.3, 1.2);
    let y1 = y1 + (y1 - y0) * headroom;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(draw_err)?;
    let x_decimals = if panel.integer_x {
        0
    } else {
        axis_decimals(x1 - x0, 6)
    };
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .y_label_formatter(&|y| fmt_axis_bytes(*y, y1 - y0))
        .x_label_formatter(&|x| format!("{x:.x_decimals$}"))
        .x_labels(6)
        .y_labels(6)
        .draw()
        .map_err(draw_err)?;
    let per_run = panel.lines.len() + panel.no_samples.len() <= LEGEND_RUNS;
    let mut labelled: Vec<&str> = Vec::new();
    let mut entry = entries.iter();
    for line in &panel.lines {
        let i = modes.iter().position(|m| *m == line.mode).unwrap_or(0);
        let colour = COLOURS[i % COLOURS.len()];
        // A run with one or two samples is drawn as points too: one point makes no line.
        if line.points.len() <= 2 {
            chart
                .draw_series(line.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                .map_err(draw_err)?;
        }
        let drawn = chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(draw_err)?;
        let label = if per_run {
            entry.next().map(|(text, _)| text.clone())
        } else if !labelled.contains(&line.mode.as_str()) {
            labelled.push(&line.mode);
            entries
                .iter()
                .find(|(text, c)| *c == Some(i) && text.starts_with(&format!("{}: ", line.mode)))
                .map(|(text, _)| text.clone())
        } else {
            None
        };
        if let Some(label) = label {
            drawn
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
        }
    }
    // Runs without samples: a legend entry each (or one counting them), with a hollow box.
    for (text, colour) in &entries {
        if colour.is_some() {
            continue;
        }
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(draw_err)?
            .label(text.clone())
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], BLACK.mix(0.5).stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

fn mode_of(report: &Report, run: &RunSummary) -> String {
    run.mode(report.mode_key.as_deref())
        .unwrap_or_else(|| "(no mode)".into())
}

/// The size group of a run (its cell without the mode), as in the report's cells.
fn size_of(report: &Report, run: &RunSummary) -> String {
    report
        .cells
        .iter()
        .find(|c| c.cell == run.cell_label)
        .map_or_else(|| "all".into(), |c| c.size.clone())
}

/// Draws the plot into an SVG string: every finished run of a size is in that size's panels,
/// drawn (a line, and points where it has one or two samples) or named as having no samples.
///
/// # Errors
/// [`PlotError::Empty`] when no run has anything to draw, [`PlotError::Draw`] from plotters.
pub fn render_svg(report: &Report) -> Result<String, PlotError> {
    let mut sizes: Vec<String> = Vec::new();
    for c in &report.cells {
        if !sizes.contains(&c.size) {
            sizes.push(c.size.clone());
        }
    }
    let mut modes: Vec<String> = Vec::new();
    let mut retention: Vec<Panel> = Vec::new();
    let mut memory: Vec<Panel> = Vec::new();
    for size in &sizes {
        retention.push(Panel {
            title: format!("{size}: probe's private bytes vs loop iterations"),
            x_desc: "loop iterations",
            y_desc: "private bytes (probe process)",
            integer_x: true,
            lines: Vec::new(),
            no_samples: Vec::new(),
        });
        memory.push(Panel {
            title: format!("{size}: PSS summed over the run's processes (memory.jsonl)"),
            x_desc: "seconds since run start (s)",
            y_desc: "PSS bytes (all processes)",
            integer_x: false,
            lines: Vec::new(),
            no_samples: Vec::new(),
        });
    }
    for run in report.runs.iter().filter(|r| r.finished) {
        let mode = mode_of(report, run);
        if !modes.contains(&mode) {
            modes.push(mode.clone());
        }
        let Some(p) = sizes.iter().position(|s| *s == size_of(report, run)) else {
            continue;
        };
        let line = |points: Series| Line {
            mode: mode.clone(),
            run_id: run.run_id.clone(),
            points,
        };
        if run.points.is_empty() {
            retention[p].no_samples.push(run.run_id.clone());
        } else {
            let series = run
                .points
                .iter()
                .map(|pt| (pt.iterations as f64, pt.private_bytes as f64))
                .collect();
            retention[p].lines.push(line(series));
        }
        if run.memory.is_empty() {
            memory[p].no_samples.push(run.run_id.clone());
        } else {
            let series = run.memory.iter().map(|(t, b)| (*t, *b as f64)).collect();
            memory[p].lines.push(line(series));
        }
    }
    // A row of panels is drawn when some run has samples of its figure; then each size has its
    // panel in it, those whose runs have none saying so.
    let mut rows: Vec<Vec<Panel>> = Vec::new();
    for panels in [retention, memory] {
        if panels.iter().any(|p| !p.lines.is_empty()) {
            rows.push(panels);
        }
    }
    if rows.is_empty() {
        return Err(PlotError::Empty);
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(1);
    let mut svg = String::new();
    {
        let width = PANEL_WIDTH * cols as u32;
        let height = PANEL_HEIGHT * rows.len() as u32 + 40;
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let root = root
            .titled(
                &format!(
                    "{}: probe private bytes (top), run tree PSS (bottom); colour = mode",
                    report.experiment
                ),
                ("sans-serif", 20),
            )
            .map_err(draw_err)?;
        let row_areas = root.split_evenly((rows.len(), 1));
        for (row, area) in rows.iter().zip(&row_areas) {
            let cells = area.split_evenly((1, cols));
            for (panel, cell) in row.iter().zip(&cells) {
                draw_panel(cell, panel, &modes)?;
            }
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// Draws the plot and writes it to `path`.
///
/// # Errors
/// As [`render_svg`], and [`PlotError::Write`] naming the file.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), PlotError> {
    let svg = render_svg(report)?;
    std::fs::write(path, svg).map_err(|source| PlotError::Write {
        path: path.display().to_string(),
        source,
    })
}
