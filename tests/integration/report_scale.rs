//! `hwr-exp report` of a bundle larger than `RUN_ROWS` (1000) planned runs: runs that did not run
//! are counted, not listed; per-run tables show the first 1000 finished runs with a note naming
//! csv/json; CSV and JSON still carry every run (read again one at a time); the per-cell figures
//! and the estimates cover every run.

use std::collections::BTreeMap;
use std::path::Path;

use crate::report_fixtures::synth;
use crate::support::hwr;

/// 4 cells x 400 repetitions = 1600 planned runs; the runs from plan index 1100 on did not run.
fn large_bundle(dir: &Path) {
    let mut s = synth::Synth::small("large");
    s.repetitions = 400;
    s.stop_at = Some(1100);
    s.loop_samples = 4;
    s.memory_jsonl = false;
    s.timeout_run = Some(1050);
    synth::write_bundle(dir, &s).unwrap();
}

fn report(dir: &Path, format: &str) -> String {
    let out = hwr(dir, &["report", dir.to_str().unwrap(), "--format", format]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_large_bundle_counts_not_run_runs_and_shows_the_first_finished_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    large_bundle(&dir);
    let table = report(&dir, "table");
    // What is planned and what ran, over every run.
    assert!(
        table.contains("1600 planned, 1100 finished (1099 ok, 1 timeout), 500 not run"),
        "{table}"
    );
    // The runs that did not run are one count with their plan indices, not 500 rows or ids.
    assert!(
        table.contains("not run (no run.json; bundle status interrupted): 500 runs, plan indices 1100-1599"),
        "{table}"
    );
    assert!(!table.contains("1599-reuse-64-r400"), "{table}");
    // The first 1000 finished runs are shown; later ones are counted.
    assert!(table.contains("0999-reuse-64-r250"), "{table}");
    assert!(!table.contains("1000-get_tensor-16-r251"), "{table}");
    let flat = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "showing the first 1000 of 1100 finished runs; 500 runs not run are counted, not listed"
        ),
        "{table}"
    );
    assert!(
        flat.contains("every run: --format csv or --format json"),
        "{table}"
    );
    // The timeout at index 1050 is not in the run table, but the failures table counts it.
    assert!(table.contains("1050-reuse-16-r263"), "{table}");
    let md = report(&dir, "md");
    assert!(
        md.contains("showing the first 1000 of 1100 finished runs"),
        "{md}"
    );
    assert!(!md.contains("1000-get_tensor-16-r251"));
    let html = report(&dir, "html");
    assert!(html.contains("showing the first 1000 of 1100 finished runs"));
    assert!(!html.contains("1000-get_tensor-16-r251"));
}

#[test]
fn csv_and_json_of_a_large_bundle_carry_every_run_and_agree_with_the_aggregates() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    large_bundle(&dir);
    let csv = report(&dir, "csv");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 1600);
    let (id, term, agg) = (col("run_id"), col("termination"), col("aggregated"));
    assert_eq!(&rows[1599][id], "1599-reuse-64-r400");
    assert_eq!(&rows[1599][term], "not-run");
    assert_eq!(&rows[1050][id], "1050-reuse-16-r263");
    assert_eq!(&rows[1050][term], "timeout");
    assert_eq!(&rows[1099][term], "exited");
    assert_eq!(rows.iter().filter(|r| &r[term] == "not-run").count(), 500);
    // Median private growth per cell from the CSV rows (every run, read again) equals the
    // per-cell figure (compact numbers of the first pass).
    let (mode, el, growth) = (col("mode"), col("elements"), col("private_growth_bytes"));
    let mut per_cell: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| &r[agg] == "true") {
        per_cell
            .entry(format!("mode={} elements={}", &r[mode], &r[el]))
            .or_default()
            .push(r[growth].parse().unwrap());
    }
    let json: serde_json::Value = serde_json::from_str(&report(&dir, "json")).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1600);
    assert_eq!(runs[1599]["run-id"], "1599-reuse-64-r400");
    assert_eq!(runs[1599]["finished"], false);
    assert_eq!(runs[1050]["outcome"], "timeout");
    assert_eq!(json["not-run"], 500);
    assert_eq!(json["planned-runs"], 1600);
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    assert_eq!(
        cells.iter().map(|c| c["runs"].as_u64().unwrap()).sum::<u64>(),
        1100
    );
    for c in cells {
        let values = per_cell.get_mut(c["cell"].as_str().unwrap()).unwrap();
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = (values[(n - 1) / 2] + values[n / 2]) / 2.0;
        let stats = &c["retention"]["private-growth-bytes"];
        assert_eq!(stats["n"].as_u64().unwrap() as usize, n);
        assert_eq!(stats["median"].as_f64().unwrap(), median, "{c}");
        assert_eq!(c["included"].as_u64().unwrap() as usize, n);
    }
    // Every compared cell has its estimates, from all 275 runs per cell (one left out).
    let rows = json["estimates"]["rows"].as_array().unwrap();
    let growth = rows
        .iter()
        .find(|e| e["metric"] == "private-growth-bytes" && e["cell"] == "mode=get_tensor elements=16")
        .unwrap();
    assert_eq!(growth["n-cell"], 275);
    assert_eq!(growth["n-control"], 274);
    assert_eq!(json["failures-by-reason"][0]["count"], 1);
}

/// 4 cells x 650 repetitions = 2600 runs, all finished: three batches of the report's parallel
/// reader (1024 runs each).
fn three_batch_bundle(dir: &Path) {
    let mut s = synth::Synth::small("batches");
    s.repetitions = 650;
    s.loop_samples = 4;
    s.memory_jsonl = false;
    s.timeout_run = None;
    synth::write_bundle(dir, &s).unwrap();
}

/// The output file in the run folder `folder` (the JSON file that is not run.json).
fn output_of(folder: &Path) -> std::path::PathBuf {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json") && !p.ends_with("run.json"))
        .unwrap()
}

/// The runs' folder names in plan order.
fn run_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    ids.sort();
    ids
}

#[test]
fn runs_read_in_parallel_batches_come_out_in_plan_order_and_a_bad_run_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    three_batch_bundle(&dir);
    let ids = run_ids(&dir);
    assert_eq!(ids.len(), 2600);
    // An output replaced by a link (to a file outside the bundle) in the second batch: that run
    // is left out with the reason, the others are read.
    let linked = &ids[1500];
    // Its run.json without `summary` (written before it): the report reads the output.
    assert!(crate::support::strip_summary(&dir.join("runs").join(linked)));
    let output = output_of(&dir.join("runs").join(linked));
    std::fs::remove_file(&output).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &output).unwrap();
    let csv = report(&dir, "csv");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let (id, index, excluded) = (col("run_id"), col("index"), col("excluded_reason"));
    assert_eq!(rows.len(), 2600);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(&row[id], ids[i].as_str());
        assert_eq!(row[index].parse::<usize>().unwrap(), i);
    }
    assert!(
        rows[1500][excluded].contains("cannot read output"),
        "{:?}",
        &rows[1500]
    );
    assert!(
        rows[1500][excluded].contains("symbolic link"),
        "{:?}",
        &rows[1500]
    );
    assert_eq!(rows.iter().filter(|r| !r[excluded].is_empty()).count(), 1);
    // A truncated run.json in the third batch stops the report, naming the file; the error of an
    // earlier run (a folder that is a link) is the one named when there are two.
    let run_json = dir.join("runs").join(&ids[2300]).join("run.json");
    let text = std::fs::read_to_string(&run_json).unwrap();
    std::fs::write(&run_json, &text[..text.len() / 2]).unwrap();
    let out = hwr(&dir, &["report", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}/run.json", ids[2300])), "{err}");
    assert!(err.contains("truncated"), "{err}");
    let folder = dir.join("runs").join(&ids[2200]);
    std::fs::rename(&folder, tmp.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &folder).unwrap();
    let out = hwr(&dir, &["report", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&ids[2200]), "{err}");
    assert!(err.contains("symbolic link, not a folder"), "{err}");
    assert!(!err.contains(&ids[2300]), "{err}");
}

/// A large JSON report spills every run in detail: the probe's mappings that grew of a run past
/// the first 2,048 (two batches, after which a table report reads no more detail) are in the
/// spill as in a report that reads the runs again (the breaking pass of 2026-12-04 found them
/// gone from every run after the 2,048th).
#[test]
fn a_spilled_json_report_keeps_every_runs_detail() {
    use hwr_exp::memory::Mappings;
    use hwr_exp::report::collection::collect_spilling;
    use hwr_exp::report::model::Spill;
    use hwr_exp::report::render::write_json;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    three_batch_bundle(&dir);
    let ids = run_ids(&dir);
    let heap = |kb: u64| {
        Mappings::parse(&format!(
            "00400000-00452000 rw-p 00000000 00:00 0 [heap]\nRss: {kb} kB\nPrivate_Dirty: {kb} kB\nAnonymous: {kb} kB\n"
        ))
    };
    for id in [&ids[10], &ids[2500]] {
        // Outputs changed after the runs: their run.json without `summary`, as written before
        // it, so that the report reads them.
        assert!(crate::support::strip_summary(&dir.join("runs").join(id)));
        let output = output_of(&dir.join("runs").join(id));
        let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
        doc["mappings"] = serde_json::json!({
            "source": "/proc/self/smaps",
            "baseline": {"t_seconds": 0.1, "rows": heap(100)},
            "last_loop": {"t_seconds": 0.2, "rows": heap(300)},
        });
        std::fs::write(&output, serde_json::to_vec(&doc).unwrap()).unwrap();
    }
    let spilled = collect_spilling(&dir, false, Some(Spill::Json)).unwrap();
    assert!(spilled.runs.spilled(Spill::Json).is_some(), "not spilled");
    let again = collect_spilling(&dir, false, None).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    write_json(&spilled, &mut a).unwrap();
    write_json(&again, &mut b).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&a).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2600);
    for at in [10, 2500] {
        let grown = &runs[at]["mappings-grown"];
        assert!(
            grown.as_array().is_some_and(|g| !g.is_empty()),
            "run {at}: {:#}",
            runs[at]
        );
    }
    assert_eq!(
        runs.iter().filter(|r| r.get("mappings-grown").is_some()).count(),
        2
    );
    assert!(a == b, "spilled and read again differ");
}

/// A large CSV or JSON report spills every run while it reads them and writes from the spill:
/// byte for byte what reading the runs a second time gives (the way of a bundle too large to
/// spill), for a bundle with runs that did not run, a timeout and a failed run whose reason CSV
/// must quote, on one node and on two (the CSV's optional `node` column left out or kept).
#[test]
fn a_spilled_csv_or_json_report_is_what_reading_the_runs_again_gives() {
    use hwr_exp::report::collection::collect_spilling;
    use hwr_exp::report::model::Spill;
    use hwr_exp::report::render::{write_csv, write_json};
    let tmp = tempfile::tempdir().unwrap();
    for two_nodes in [false, true] {
        let dir = tmp.path().join(format!("bundle-{two_nodes}"));
        large_bundle(&dir);
        let edit = |id: &str, f: &dyn Fn(&mut serde_json::Value)| {
            let path = dir.join("runs").join(id).join("run.json");
            let mut run: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            f(&mut run);
            std::fs::write(&path, serde_json::to_vec_pretty(&run).unwrap()).unwrap();
        };
        let ids = run_ids(&dir);
        // A failed run whose reason (its stderr's last line) has a comma, quotes and a newline.
        let failed = &ids[700];
        edit(failed, &|run| {
            run["outcome"] = "failed".into();
            run["exit-code"] = 3.into();
        });
        std::fs::write(
            dir.join("runs").join(failed).join("stderr.log"),
            "boom, \"quoted\"\r\n",
        )
        .unwrap();
        if two_nodes {
            // The runs before index 600 ran on n1, those from 600 on on n2 (those that ran).
            for id in ids
                .iter()
                .filter(|id| dir.join("runs").join(id).join("run.json").exists())
            {
                let node = if id[..4].parse::<usize>().unwrap() < 600 {
                    "n1"
                } else {
                    "n2"
                };
                edit(id, &|run| run["node"] = node.into());
            }
        }
        type Writer = fn(&hwr_exp::report::Report, &mut dyn std::io::Write) -> anyhow::Result<()>;
        for (kind, write) in [
            (Spill::Csv, write_csv as Writer),
            (Spill::Json, write_json as Writer),
        ] {
            let spilled = collect_spilling(&dir, false, Some(kind)).unwrap();
            assert!(spilled.runs.spilled(kind).is_some(), "{kind:?} not spilled");
            let again = collect_spilling(&dir, false, None).unwrap();
            assert!(again.runs.spilled(kind).is_none());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            write(&spilled, &mut a).unwrap();
            write(&again, &mut b).unwrap();
            assert!(
                a == b,
                "{kind:?}, two nodes {two_nodes}: spilled and read again differ"
            );
            let text = String::from_utf8(a.clone()).unwrap();
            assert!(
                text.contains("boom, "),
                "{kind:?}: the failed run's reason is there"
            );
            if kind == Spill::Csv {
                let header = text.lines().next().unwrap();
                assert_eq!(header.split(',').any(|c| c == "node"), two_nodes, "{header}");
                let row = text.lines().find(|l| l.contains("boom")).unwrap();
                assert!(row.contains("boom, \"\"quoted\"\""), "the reason quoted: {row}");
            }
            // Written twice from the same spill: the same.
            let mut c = Vec::new();
            write(&spilled, &mut c).unwrap();
            assert!(a == c, "{kind:?}: the spill read twice differs");
        }
    }
    let dir = tmp.path().join("bundle-true");
    // Without a usable TMPDIR the report reads the runs again: the same CSV.
    let csv = report(&dir, "csv");
    let out = crate::support::hwr_command(tmp.path())
        .env("TMPDIR", tmp.path().join("no-such-folder"))
        .args(["report", dir.to_str().unwrap(), "--format", "csv"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8(out.stdout).unwrap() == csv,
        "without a spill the CSV differs"
    );
}
