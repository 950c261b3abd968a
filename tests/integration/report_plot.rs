//! `report --plot`: the SVG parses as XML and has one `<polyline>` per plotted series.

use hwr_exp::report::{Format, ReportOptions, collect, plot, report_to_string};

use crate::support::bundle_fixture;

/// The data series: `<polyline>`s drawn 2 px wide (axes and ticks are 1 px polylines).
fn polylines(svg: &str) -> Vec<(String, usize)> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.tag_name().name() == "polyline" && n.attribute("stroke-width") == Some("2"))
        .map(|n| {
            let stroke = n.attribute("stroke").unwrap_or("").to_string();
            let points = n.attribute("points").unwrap_or("").split_whitespace().count();
            (stroke, points)
        })
        .collect()
}

fn texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.tag_name().name() == "text")
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect()
}

#[test]
fn one_polyline_per_run_and_per_memory_series() {
    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("plot.svg");
    report_to_string(&ReportOptions {
        bundle: bundle_fixture("synthetic-a"),
        format: Format::Table,
        plot: Some(svg_path.clone()),
        ..Default::default()
    })
    .unwrap();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let lines = polylines(&svg);
    // 8 runs with retention samples + 8 runs with memory.jsonl.
    assert_eq!(lines.len(), 16, "{lines:?}");
    // Retention series: baseline + 4 loop samples (the timed-out run: baseline + 2).
    let mut lengths: Vec<usize> = lines[..8].iter().map(|l| l.1).collect();
    lengths.sort();
    assert_eq!(lengths, vec![3, 5, 5, 5, 5, 5, 5, 5]);
    // Colour by mode: two modes, two stroke colours.
    let mut strokes: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
    strokes.sort();
    strokes.dedup();
    assert_eq!(strokes.len(), 2, "{strokes:?}");
    // Panels per size, axis labels with units, legend by mode.
    let t = texts(&svg);
    for needle in [
        "elements=16: probe's private bytes vs loop iterations",
        "elements=64: probe's private bytes vs loop iterations",
        "elements=16: PSS summed over the run's processes (memory.jsonl)",
        "loop iterations",
        "private bytes (probe process)",
        "PSS bytes (all processes)",
        "seconds since run start (s)",
        "get_tensor",
        "reuse",
    ] {
        assert!(t.iter().any(|x| x == needle), "no <text> {needle:?} in {t:?}");
    }
    assert!(t.iter().any(|x| x.ends_with(" KiB")), "byte axis labels: {t:?}");
}

#[test]
fn interrupted_bundle_plots_the_runs_it_has() {
    let report = collect(&bundle_fixture("interrupted"), true).unwrap();
    let svg = plot::render_svg(&report).unwrap();
    assert_eq!(polylines(&svg).len(), 5);
}

/// Rewrites docs/example-report.svg from the built-in probe's fixture bundle (with HWR_REGENERATE_FIXTURES=1).
#[test]
#[ignore = "writes docs/example-report.svg; run with HWR_REGENERATE_FIXTURES=1"]
fn regenerate_example_plot() {
    if std::env::var_os("HWR_REGENERATE_FIXTURES").is_none() {
        return;
    }
    let report = collect(&bundle_fixture("probe-size-compare"), true).unwrap();
    plot::write_svg(&report, std::path::Path::new("docs/example-report.svg")).unwrap();
}

#[test]
fn real_probe_bundle_one_line_per_run() {
    let dir = bundle_fixture("probe-size-compare");
    let report = collect(&dir, true).unwrap();
    let svg = plot::render_svg(&report).unwrap();
    // Every run with a retention output (8 ok runs; the 2 failed runs printed nothing) plus every
    // run whose memory.jsonl has at least one sample with the tree's PSS.
    let with_memory = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .filter(|e| {
            let p = e.as_ref().unwrap().path().join("memory.jsonl");
            std::fs::read_to_string(p).is_ok_and(|t| t.contains("\"pss\""))
        })
        .count();
    assert!(with_memory > 0);
    assert_eq!(polylines(&svg).len(), 8 + with_memory);
}
