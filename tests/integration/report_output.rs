//! Snapshot tests of `hwr-exp report` / `compare` output on the checked-in fixture bundles.

use hwr_exp::report::{CompareOptions, Format, ReportOptions, compare::compare_to_string, report_to_string};

use crate::support::bundle_fixture;

const A: &str = "synthetic-a";
const B: &str = "synthetic-b";
const REAL: &str = "python-retention";
const PROBE: &str = "probe-size-compare";

/// The table width `report` and `compare` use when stdout is not a terminal and COLUMNS is unset.
const PIPE_WIDTH: Option<usize> = Some(100);

/// `report` of the fixture bundle `NAME`; tables as a pipe gets them ([`PIPE_WIDTH`]).
fn report(name: &str, format: Format) -> String {
    report_to_string(&ReportOptions {
        bundle: bundle_fixture(name),
        width: PIPE_WIDTH.filter(|_| format == Format::Table),
        format,
        plot: None,
        ..Default::default()
    })
    .unwrap()
}

/// `compare` of the fixture bundles `A` and `B`; tables as a pipe gets them ([`PIPE_WIDTH`]).
fn compare(a: &str, b: &str, format: Format) -> String {
    compare_to_string(&CompareOptions {
        a: bundle_fixture(a),
        b: bundle_fixture(b),
        width: PIPE_WIDTH.filter(|_| format == Format::Table),
        format,
    })
    .unwrap()
}

#[test]
fn table() {
    insta::assert_snapshot!(report(A, Format::Table));
}

#[test]
fn markdown() {
    insta::assert_snapshot!(report(A, Format::Md));
}

#[test]
fn csv() {
    insta::assert_snapshot!(report(A, Format::Csv));
}

#[test]
fn compare_table() {
    insta::assert_snapshot!(compare(A, B, Format::Table));
}

#[test]
fn real_bundle_table() {
    insta::assert_snapshot!(report(REAL, Format::Table));
}

#[test]
fn real_bundle_markdown() {
    insta::assert_snapshot!(report(REAL, Format::Md));
}

#[test]
fn real_bundle_csv() {
    insta::assert_snapshot!(report(REAL, Format::Csv));
}

#[test]
fn compare_names_the_changed_revision_and_one_sided_cells() {
    let out = compare(A, B, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let diffs = v["differences"].as_array().unwrap();
    let facts: Vec<&str> = diffs.iter().map(|d| d["fact"].as_str().unwrap()).collect();
    assert_eq!(facts, ["revision", "dirty", "manifest-sha256"]);
    assert_eq!(diffs[0]["a"], "3f1c2a9e0d4b5c6a7e8f9012345678901234abcd");
    assert_eq!(diffs[0]["b"], "9a8b7c6d5e4f30211234567890abcdef12345678");
    assert_eq!(v["only-in-a"].as_array().unwrap().len(), 0);
    assert_eq!(
        v["only-in-b"],
        serde_json::json!(["mode=view elements=16", "mode=view elements=64"])
    );
    // B grows 40960 bytes more in every get_tensor cell; the ranges do not overlap.
    let row = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cell"] == "mode=get_tensor elements=64" && r["metric"] == "private-growth-bytes")
        .unwrap();
    assert_eq!(row["median-difference"], 40960.0);
    assert_eq!(row["ranges-overlap"], false);
    // Comparing a bundle with itself: no differences, every range overlaps.
    let same = compare(A, A, Format::Table);
    assert!(same.contains("same experiment, revision, working tree, host, hwr-exp version and manifest"));
    assert!(!same.contains("only in"));
}

#[test]
fn json_report_parses_and_counts() {
    let v: serde_json::Value = serde_json::from_str(&report(A, Format::Json)).unwrap();
    assert_eq!(v["counts"], serde_json::json!({"ok": 7, "timeout": 1}));
    assert_eq!(v["runs"].as_array().unwrap().len(), 8);
    assert_eq!(v["runs"][6]["excluded"], "timeout");
    assert_eq!(v["mode-key"], "mode");
    let e = &v["estimates"];
    assert_eq!(e["control"]["values"], serde_json::json!({"mode": "reuse"}));
    assert_eq!(e["correction"], "bonferroni across cells, holm within");
    let growth = e["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cell"] == "mode=get_tensor elements=64" && r["metric"] == "private-growth-bytes")
        .unwrap();
    assert_eq!(growth["control"], "mode=reuse elements=64");
    assert_eq!(growth["shift"], 49152.0);
    assert_eq!(
        (growth["n-cell"].as_u64(), growth["n-control"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(growth["verdict"], "too few runs");
    for key in ["ci-low", "ci-high", "confidence", "p"] {
        assert!(growth[key].is_number(), "{key}: {growth}");
    }
}

#[test]
fn csv_has_one_row_per_run_and_unique_columns() {
    for bundle in [A, REAL] {
        let text = report(bundle, Format::Csv);
        let mut rdr = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
        let mut unique = header.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), header.len(), "duplicate CSV columns: {header:?}");
        let rows = rdr.records().map(Result::unwrap).count();
        let planned = if bundle == A { 8 } else { 10 };
        assert_eq!(rows, planned);
    }
}

#[test]
fn probe_bundle_table() {
    insta::assert_snapshot!(report(PROBE, Format::Table));
}

#[test]
fn probe_bundle_markdown() {
    insta::assert_snapshot!(report(PROBE, Format::Md));
}

#[test]
fn probe_bundle_csv() {
    insta::assert_snapshot!(report(PROBE, Format::Csv));
}
