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
    // Panels per size, axis labels with units, a legend entry per run named by mode and run id.
    let t = texts(&svg);
    for needle in [
        "elements=16: probe's private bytes vs loop iterations",
        "elements=64: probe's private bytes vs loop iterations",
        "elements=16: PSS summed over the run's processes (memory.jsonl)",
        "loop iterations",
        "private bytes (probe process)",
        "PSS bytes (all processes)",
        "seconds since run start (s)",
    ] {
        assert!(t.iter().any(|x| x == needle), "no <text> {needle:?} in {t:?}");
    }
    assert!(t.iter().any(|x| x.ends_with(" KiB")), "byte axis labels: {t:?}");
    for mode in ["get_tensor: ", "reuse: "] {
        assert!(
            t.iter().any(|x| x.starts_with(mode)),
            "no legend entry {mode:?} in {t:?}"
        );
    }
}

/// The `<text>` labels of the panel titled `title`: the texts after its title, up to the next
/// panel's title.
fn panel_texts(texts: &[String], title: &str) -> Vec<String> {
    let at = texts
        .iter()
        .position(|t| t == title)
        .unwrap_or_else(|| panic!("no panel {title:?} in {texts:?}"));
    texts[at + 1..]
        .iter()
        .take_while(|t| !t.contains(": probe's private bytes") && !t.contains(": PSS summed"))
        .cloned()
        .collect()
}

/// Issue 22, item 14: runs shorter than the sample interval (one sample or none) stay in the
/// plot: a run with one sample is drawn as a point and named in the legend, a run with none is
/// listed as `no samples`; the seconds axis of a span of milliseconds has distinct tick labels
/// (not three `0.10`).
#[test]
fn runs_with_one_sample_or_none_are_drawn_or_named_and_ticks_differ() {
    let mut report = collect(&bundle_fixture("synthetic-a"), true).unwrap();
    let size = |run: &hwr_exp::report::model::RunSummary| run.cell_label.contains("elements=16");
    let mut small: Vec<usize> = (0..report.runs.len())
        .filter(|&i| size(&report.runs[i]))
        .collect();
    assert!(small.len() >= 4, "the fixture has 4 runs at elements=16");
    let none = small.pop().unwrap();
    // Every run of elements=16 ended before a second sample: one sample each, milliseconds apart.
    for (k, &i) in small.iter().enumerate() {
        report.runs[i].memory = vec![(0.100 + 0.0015 * k as f64, 5_000_000 + 4096 * k as u64)];
    }
    report.runs[none].memory.clear();
    let svg = plot::render_svg(&report).unwrap();
    let t = texts(&svg);
    let panel = panel_texts(
        &t,
        "elements=16: PSS summed over the run's processes (memory.jsonl)",
    );
    for &i in &small {
        let id = &report.runs[i].run_id;
        assert!(
            panel.iter().any(|x| x.ends_with(&format!("{id} (1 sample)"))),
            "{id} is not in the legend: {panel:?}"
        );
    }
    let id = &report.runs[none].run_id;
    assert!(
        panel.contains(&format!("{id}: no samples")),
        "{id} is not listed as without samples: {panel:?}"
    );
    // The seconds ticks are numbers that all differ.
    let ticks: Vec<&String> = panel
        .iter()
        .filter(|x| x.parse::<f64>().is_ok_and(|v| v > 0.05 && v < 0.2))
        .collect();
    assert!(ticks.len() >= 3, "{panel:?}");
    let mut distinct = ticks.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ticks.len(), "tick labels repeat: {ticks:?}");
    // Each one-sample run is a point (a filled circle), since one point makes no line.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let circles = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "circle")
        .count();
    assert!(
        circles >= small.len(),
        "{circles} circles for {} one-sample runs",
        small.len()
    );

    // A panel whose runs all have no samples says so and names them, in a row other sizes fill.
    for &i in &small {
        report.runs[i].memory.clear();
    }
    let svg = plot::render_svg(&report).unwrap();
    let t = texts(&svg);
    let panel = panel_texts(
        &t,
        "elements=16: PSS summed over the run's processes (memory.jsonl)",
    );
    assert!(
        panel.contains(&"no samples of this figure:".to_string()),
        "{panel:?}"
    );
    for &i in small.iter().chain([&none]) {
        assert!(panel.contains(&report.runs[i].run_id), "{panel:?}");
    }
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

/// `--plot` into the bundle it reports is refused before anything is written: over bundle.json it
/// made the bundle unreadable, and any new file in it fails `verify`.
#[test]
fn a_plot_inside_the_bundle_it_reports_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::copy_dir(&bundle_fixture("synthetic-a"), dir.path());
    let bundle_json = std::fs::read(dir.path().join("bundle.json")).unwrap();
    std::fs::create_dir(dir.path().join("runs/extra")).unwrap_or(());
    for inside in ["bundle.json", "p.svg", "runs/extra/p.svg", "runs/../p.svg"] {
        let e = report_to_string(&ReportOptions {
            bundle: dir.path().to_path_buf(),
            format: Format::Table,
            plot: Some(dir.path().join(inside)),
            ..Default::default()
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("inside the bundle"), "{inside}: {e:#}");
    }
    assert_eq!(
        std::fs::read(dir.path().join("bundle.json")).unwrap(),
        bundle_json
    );
    assert!(!dir.path().join("p.svg").exists());
    // Beside the bundle is fine.
    let outside = tempfile::tempdir().unwrap();
    report_to_string(&ReportOptions {
        bundle: dir.path().to_path_buf(),
        format: Format::Table,
        plot: Some(outside.path().join("p.svg")),
        ..Default::default()
    })
    .unwrap();
    assert!(outside.path().join("p.svg").is_file());
}
