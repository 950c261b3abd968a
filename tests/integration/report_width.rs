//! Terminal tables fit the terminal (docs/DESIGN.md 9): `report` and `compare` keep every line within
//! `COLUMNS` (100 when stdout is not a terminal and `COLUMNS` is unset), `--wide` prints one line per
//! row, and Markdown, CSV and JSON keep every column whatever the width.

use std::process::Output;

use crate::support::{code, hwr_columns, package_root, stderr};

/// The bundle checked into the repository.
const CHECKED_IN: &str = "results/size-compare/20261130T021245Z-18f8";
const A: &str = "tests/fixtures/bundles/synthetic-a";
const B: &str = "tests/fixtures/bundles/synthetic-b";

/// The 14 headers of the retention-per-run table, as one line of `--wide` output has them.
const RETENTION_HEADER: &str = "run-id               ┆ loop it ┆ private growth ┆ private /1k it ┆ anon growth ┆ anon /1k it ┆ RSS growth ┆ RSS /1k it ┆ file-backed growth ┆ PSS-anon growth ┆ private after-close ┆ anon after-close ┆ RSS after-close ┆ fd delta ┆ last tensor alive ┆ aggregated";

/// `hwr-exp ARGS` in the package root with `COLUMNS` as given ([`hwr_columns`]); asserts exit 0.
fn hwr(args: &[&str], columns: Option<&str>) -> Output {
    let out = hwr_columns(package_root(), args, columns);
    assert_eq!(code(&out), 0, "hwr-exp {args:?}: {}", stderr(&out));
    out
}

/// stdout, which must be UTF-8.
fn text(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// Lines wider than `width` characters.
fn too_wide(text: &str, width: usize) -> Vec<&str> {
    text.lines().filter(|l| l.chars().count() > width).collect()
}

#[test]
fn the_checked_in_report_fits_100_and_80_columns() {
    assert!(package_root().join(CHECKED_IN).is_dir());
    for width in ["100", "80"] {
        let out = text(&hwr(&["report", CHECKED_IN], Some(width)));
        let limit = width.parse().unwrap();
        assert_eq!(
            too_wide(&out, limit),
            Vec::<&str>::new(),
            "COLUMNS={width}:\n{out}"
        );
        // Nothing is lost: every run of the retention table is still there, in more than one part,
        // and every header word is still there.
        assert!(out.matches("007-reuse-64-r2").count() >= 4, "{out}");
        for word in ["after-close", "aggregated", "alive", "reason", "peak"] {
            assert!(out.contains(word), "{word} missing at COLUMNS={width}:\n{out}");
        }
    }
}

#[test]
fn without_columns_a_pipe_gets_100_columns() {
    let out = text(&hwr(&["report", CHECKED_IN], None));
    assert_eq!(too_wide(&out, 100), Vec::<&str>::new(), "{out}");
    assert_eq!(out, text(&hwr(&["report", CHECKED_IN], Some("100"))));
}

#[test]
fn wide_prints_every_column_of_a_row_on_one_line() {
    let out = text(&hwr(&["report", CHECKED_IN, "--wide"], Some("80")));
    assert!(out.lines().any(|l| l.contains(RETENTION_HEADER)), "{out}");
    let row = out
        .lines()
        .find(|l| l.contains("000-get_tensor-16-r1") && l.contains("1000000"))
        .expect("a retention row");
    assert_eq!(row.matches('┆').count(), 15, "{row}");
    assert!(too_wide(&out, 200).len() > 10, "--wide ignores COLUMNS");
}

#[test]
fn markdown_csv_and_json_keep_every_column_at_any_width() {
    let md = text(&hwr(&["report", CHECKED_IN, "--format", "md"], Some("40")));
    assert!(
        md.contains("| run-id | loop it | private growth | private /1k it | anon growth | anon /1k it | RSS growth | RSS /1k it | file-backed growth | PSS-anon growth | private after-close | anon after-close | RSS after-close | fd delta | last tensor alive | aggregated |"),
        "{md}"
    );
    assert!(md.contains("| output | reason |"), "{md}");
    let csv_text = text(&hwr(&["report", CHECKED_IN, "--format", "csv"], Some("40")));
    let header = csv_text.lines().next().unwrap();
    assert_eq!(header.split(',').count(), 44, "{header}");
    assert!(
        header.contains(",reason,") && header.contains(",fd_delta,"),
        "{header}"
    );
    assert!(csv_text.lines().skip(1).all(|l| l.split(',').count() == 44));
    let json = text(&hwr(&["report", CHECKED_IN, "--format", "json"], Some("40")));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.get("reason").is_some())
    );
}

#[test]
fn compare_fits_too_and_wide_keeps_a_and_b_side_by_side() {
    for width in [100, 80] {
        let out = text(&hwr(&["compare", A, B], Some(&width.to_string())));
        assert_eq!(
            too_wide(&out, width),
            Vec::<&str>::new(),
            "COLUMNS={width}:\n{out}"
        );
        assert!(
            out.contains("+40960") && out.contains("61440 / 63488 / 65536 (n=2)"),
            "{out}"
        );
    }
    let wide = text(&hwr(&["compare", A, B, "--wide"], Some("80")));
    assert!(
        wide.lines().any(
            |l| l.contains("mode=get_tensor elements=16 ┆ private-growth-bytes")
                && l.contains("20480 / 22528 / 24576 (n=2) ┆       61440 / 63488 / 65536 (n=2) ┆  +40960")
        ),
        "{wide}"
    );
}
