//! Unreadable bundles give a clear error naming the file; interrupted bundles still report.

use hwr_exp::report::Format;

use crate::support::{bundle_fixture, copy_dir, report_text};

/// The error of `report` on the fixture bundle `NAME`, with its causes.
fn error(name: &str) -> String {
    format!(
        "{:#}",
        report_text(bundle_fixture(name), Format::Table).unwrap_err()
    )
}

#[test]
fn newer_format_names_bundle_json() {
    let e = error("newer-format");
    assert_eq!(
        e,
        format!(
            "tests/fixtures/bundles/newer-format/bundle.json: written in format 2, newer than the \
             format 1 this hwr-exp {} reads; use a newer hwr-exp",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn truncated_run_json_names_the_file() {
    let e = error("truncated-run");
    assert!(
        e.starts_with(
            "tests/fixtures/bundles/truncated-run/runs/0001-reuse-16-r1/run.json: truncated JSON: EOF while parsing"
        ),
        "{e}"
    );
}

#[test]
fn missing_bundle_json_names_the_file() {
    let e = error("missing-bundle-json");
    assert_eq!(
        e,
        "tests/fixtures/bundles/missing-bundle-json/bundle.json: missing (every bundle has this file; is this a bundle folder?)"
    );
}

#[test]
fn not_a_folder() {
    let e = error("no-such-bundle");
    assert!(
        e.starts_with("tests/fixtures/bundles/no-such-bundle: not a bundle folder"),
        "{e}"
    );
}

#[test]
fn interrupted_bundle_reports_what_it_has() {
    let out = report_text(bundle_fixture("interrupted"), Format::Table).unwrap();
    assert!(
        out.contains("summary: 8 planned, 5 finished (5 ok), 3 not run;"),
        "{out}"
    );
    assert!(out.contains(
        "not run (no run.json; bundle status interrupted): 0005-get_tensor-64-r2, 0006-reuse-16-r2, 0007-reuse-64-r2"
    ));
    // The cells still aggregate the repetitions that finished.
    assert!(out.contains("mode=get_tensor elements=16 ┆ 2/2"), "{out}");
    assert!(out.contains("mode=get_tensor elements=64 ┆ 1/1"), "{out}");
    let csv = report_text(bundle_fixture("interrupted"), Format::Csv).unwrap();
    let mut rdr = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 8);
    assert_eq!(&rows[7][5], "not-run");
}

#[test]
fn corrupted_bundle_in_a_temp_dir_mid_report() {
    // A run output that is not JSON although run.json says valid: listed, left out, not fatal.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&bundle_fixture("synthetic-a"), dir.path());
    let out = dir.path().join("runs/0000-get_tensor-16-r1/get_tensor-16-1.json");
    std::fs::write(&out, "{\"samples\": [").unwrap();
    let text = report_text(dir.path(), Format::Table).unwrap();
    assert!(
        text.contains("0000-get_tensor-16-r1 (cannot read output"),
        "{text}"
    );
    assert!(text.contains("mode=get_tensor elements=16 ┆ 1/2"), "{text}");
}

/// A run.json that is not the run plan.json plans in its folder (copied from another run's
/// folder, its cell edited) or a plan.json whose runs are repeated: the report names the file
/// and what disagrees instead of reporting another run twice or a cell the plan has not.
#[test]
fn run_json_and_plan_json_must_agree_on_which_run_it_is() {
    let report_error = |dir: &std::path::Path| format!("{:#}", report_text(dir, Format::Csv).unwrap_err());
    // Another run's run.json.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&bundle_fixture("synthetic-a"), dir.path());
    let runs = dir.path().join("runs");
    std::fs::copy(
        runs.join("0005-get_tensor-64-r2/run.json"),
        runs.join("0004-get_tensor-16-r2/run.json"),
    )
    .unwrap();
    let e = report_error(dir.path());
    assert!(e.contains("0004-get_tensor-16-r2/run.json: run-id is \"0005-get_tensor-64-r2\", plan.json plans \"0004-get_tensor-16-r2\" here"), "{e}");
    // Its cell edited.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&bundle_fixture("synthetic-a"), dir.path());
    let path = dir.path().join("runs/0002-reuse-16-r1/run.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"mode\": \"reuse\""));
    std::fs::write(&path, text.replace("\"mode\": \"reuse\"", "\"mode\": \"zzz\"")).unwrap();
    let e = report_error(dir.path());
    assert!(e.contains("0002-reuse-16-r1/run.json: cell is {\"elements\":16,\"mode\":\"zzz\"}, plan.json's {\"elements\":16,\"mode\":\"reuse\"}"), "{e}");
    // A plan.json with one run's line twice.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&bundle_fixture("synthetic-a"), dir.path());
    let path = dir.path().join("plan.json");
    let mut plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let runs = plan["runs"].as_array_mut().unwrap();
    let again = runs[2].clone();
    runs.insert(3, again);
    std::fs::write(&path, serde_json::to_vec_pretty(&plan).unwrap()).unwrap();
    let e = report_error(dir.path());
    assert!(
        e.contains("plan.json: runs[3] (0002-reuse-16-r1) has index 2: a run's index is its place in runs"),
        "{e}"
    );
}
