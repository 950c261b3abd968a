//! Unreadable bundles give a clear error naming the file; interrupted bundles still report.

use std::path::PathBuf;

use hwr_exp::report::{Format, ReportArgs, report_to_string};

fn report(bundle: &str, format: Format) -> anyhow::Result<String> {
    report_to_string(&ReportArgs {
        bundle: PathBuf::from(bundle),
        format,
        plot: None,
    })
}

fn error(bundle: &str) -> String {
    format!("{:#}", report(bundle, Format::Table).unwrap_err())
}

#[test]
fn newer_format_names_bundle_json() {
    let e = error("tests/fixtures/bundles/newer-format");
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
    let e = error("tests/fixtures/bundles/truncated-run");
    assert!(
        e.starts_with(
            "tests/fixtures/bundles/truncated-run/runs/0001-reuse-16-r1/run.json: truncated JSON: EOF while parsing"
        ),
        "{e}"
    );
}

#[test]
fn missing_bundle_json_names_the_file() {
    let e = error("tests/fixtures/bundles/missing-bundle-json");
    assert_eq!(
        e,
        "tests/fixtures/bundles/missing-bundle-json/bundle.json: missing (every bundle has this file; is this a bundle folder?)"
    );
}

#[test]
fn not_a_folder() {
    let e = error("tests/fixtures/bundles/no-such-bundle");
    assert!(
        e.starts_with("tests/fixtures/bundles/no-such-bundle: not a bundle folder"),
        "{e}"
    );
}

#[test]
fn interrupted_bundle_reports_what_it_has() {
    let out = report("tests/fixtures/bundles/interrupted", Format::Table).unwrap();
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
    let csv = report("tests/fixtures/bundles/interrupted", Format::Csv).unwrap();
    let mut rdr = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 8);
    assert_eq!(&rows[7][5], "not-run");
}

#[test]
fn corrupted_bundle_in_a_temp_dir_mid_report() {
    // A run output that is not JSON although run.json says valid: listed, left out, not fatal.
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::Path::new("tests/fixtures/bundles/synthetic-a");
    copy_dir(src, dir.path());
    let out = dir.path().join("runs/0000-get_tensor-16-r1/get_tensor-16-1.json");
    std::fs::write(&out, "{\"samples\": [").unwrap();
    let text = report(dir.path().to_str().unwrap(), Format::Table).unwrap();
    assert!(
        text.contains("0000-get_tensor-16-r1 (cannot read output"),
        "{text}"
    );
    assert!(text.contains("mode=get_tensor elements=16 ┆ 1/2"), "{text}");
}

fn copy_dir(src: &std::path::Path, dst: &std::path::Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}
