//! Snapshot tests of `hwr-exp report` / `compare` output on the checked-in fixture bundles.

use std::path::PathBuf;

use hwr_exp::report::{CompareArgs, Format, ReportArgs, compare::compare_to_string, report_to_string};

const A: &str = "tests/fixtures/bundles/synthetic-a";
const B: &str = "tests/fixtures/bundles/synthetic-b";

fn report(bundle: &str, format: Format) -> String {
    report_to_string(&ReportArgs {
        bundle: PathBuf::from(bundle),
        format,
        plot: None,
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
    let out = compare_to_string(&CompareArgs {
        a: A.into(),
        b: B.into(),
        format: Format::Table,
    })
    .unwrap();
    insta::assert_snapshot!(out);
}

const REAL: &str = "tests/fixtures/bundles/python-retention";

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
