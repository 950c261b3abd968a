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

/// One panel: title, axis names and (mode, series) per run.
struct Panel {
    title: String,
    x_desc: &'static str,
    /// The figure on the y axis, with its scope.
    y_desc: &'static str,
    integer_x: bool,
    lines: Vec<(String, Series)>,
}

fn range(lines: &[(String, Series)], pick: impl Fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (_, s) in lines {
        for p in s {
            lo = lo.min(pick(p));
            hi = hi.max(pick(p));
        }
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi <= lo {
        return (lo - 1.0, hi + 1.0);
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    modes: &[String],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (x0, x1) = range(&panel.lines, |p| p.0);
    let (y0, y1) = range(&panel.lines, |p| p.1);
    // Headroom above the data for the legend box in the upper left corner.
    let y1 = y1 + (y1 - y0) * 0.3;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .y_label_formatter(&|y| fmt_axis_bytes(*y, y1 - y0))
        .x_label_formatter(&|x| {
            if panel.integer_x {
                format!("{x:.0}")
            } else {
                format!("{x:.2}")
            }
        })
        .x_labels(6)
        .y_labels(6)
        .draw()
        .map_err(draw_err)?;
    let mut labelled = Vec::new();
    for (mode, series) in &panel.lines {
        let i = modes.iter().position(|m| m == mode).unwrap_or(0);
        let colour = COLOURS[i % COLOURS.len()];
        let drawn = chart
            .draw_series(LineSeries::new(series.iter().copied(), colour.stroke_width(2)))
            .map_err(draw_err)?;
        if !labelled.contains(mode) {
            labelled.push(mode.clone());
            drawn
                .label(mode.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
        }
    }
    chart
        .configure_series_labels()
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

/// Draws the plot into an SVG string.
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
        });
        memory.push(Panel {
            title: format!("{size}: PSS summed over the run's processes (memory.jsonl)"),
            x_desc: "seconds since run start (s)",
            y_desc: "PSS bytes (all processes)",
            integer_x: false,
            lines: Vec::new(),
        });
    }
    for run in &report.runs {
        if run.points.is_empty() && run.memory.is_empty() {
            continue;
        }
        let mode = mode_of(report, run);
        if !modes.contains(&mode) {
            modes.push(mode.clone());
        }
        let Some(p) = sizes.iter().position(|s| *s == size_of(report, run)) else {
            continue;
        };
        if !run.points.is_empty() {
            let series = run
                .points
                .iter()
                .map(|pt| (pt.iterations as f64, pt.private_bytes as f64))
                .collect();
            retention[p].lines.push((mode.clone(), series));
        }
        if !run.memory.is_empty() {
            let series = run.memory.iter().map(|(t, b)| (*t, *b as f64)).collect();
            memory[p].lines.push((mode.clone(), series));
        }
    }
    let mut rows: Vec<Vec<Panel>> = Vec::new();
    for panels in [retention, memory] {
        let panels: Vec<Panel> = panels.into_iter().filter(|p| !p.lines.is_empty()).collect();
        if !panels.is_empty() {
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
