//! The first screen of a report (issue 36 item 5): every format opens with the verdicts (the
//! metric judged and what was measured named, each verdict in words), then the design, before
//! the bundle's lines and the per-run tables; figures keep three significant digits; a field the
//! original Python diagnostic writes in its loop samples (`last_tensor_alive`) is shown.

use std::path::{Path, PathBuf};

use crate::support::{ManifestBuilder, code, hwr, repo, run, stderr, stdout};

/// Prints a retention document as the original Python diagnostic does: `last_tensor_alive` in
/// each loop sample, none at the top. Mode `leak` grows 244 KiB + 4 KiB x repetition over
/// 10,000 iterations; `reuse` stays flat.
const SCRIPT: &str = r#"#!/bin/sh
mode=$1
g=0
if [ "$mode" = leak ]; then g=$((245760 + HWR_REPETITION * 4096)); fi
printf '{"schema_version":1,"arguments":{"mode":"%s"},"samples":[' "$mode"
printf '{"phase":"baseline","iterations":0,"private_bytes":1000000,"anonymous_bytes":500000,"rss_bytes":2000000,"fd_count":3},'
for i in 1 2; do
  v=$((g * i / 2))
  printf '{"phase":"loop","iterations":%d,"private_bytes":%d,"anonymous_bytes":%d,"rss_bytes":%d,"fd_count":3,"last_tensor_alive":false},' $((i * 5000)) $((1000000 + v)) $((500000 + v)) $((2000000 + v))
done
printf '{"phase":"closed","iterations":10000,"private_bytes":1000000,"anonymous_bytes":500000,"rss_bytes":2000000,"fd_count":3}],"completed":true}\n'
"#;

/// A bundle of `mode` leak and reuse, 4 repetitions each, run in `dir`.
fn bundle(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("seed.sh"), SCRIPT).unwrap();
    let m = ManifestBuilder::argv("answers", &["sh", "seed.sh", "{mode}"])
        .matrix("mode", ["reuse", "leak"])
        .repetitions(5)
        .set("measure", "sample-interval", "off")
        .write(dir);
    let (out, bundle) = run(dir, &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    bundle.expect("a bundle")
}

fn report(dir: &Path, bundle: &Path, format: &str) -> String {
    let out = hwr(
        dir,
        &["report", bundle.to_str().unwrap(), "--format", format, "--wide"],
    );
    assert_eq!(code(&out), 0, "{format}: {}", stderr(&out));
    stdout(&out)
}

/// Where `needle` first is in `text` (panics naming it when absent).
fn at(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"))
}

#[test]
fn every_format_opens_with_the_verdicts_then_the_design() {
    let repo = repo();
    let dir = repo.path();
    let bundle = bundle(dir);

    let table = report(dir, &bundle, "table");
    let first = table.lines().next().unwrap();
    assert!(
        first.starts_with("Verdicts: each cell against its control (mode = reuse), anonymous bytes, growth and rate; measured: argv: sh seed.sh {mode}"),
        "{table}"
    );
    assert!(at(&table, "Verdicts:") < at(&table, "\nDesign\n"), "{table}");
    assert!(at(&table, "\nDesign\n") < at(&table, "bundle: "), "{table}");
    assert!(at(&table, "bundle: ") < at(&table, "\nRuns\n"), "{table}");
    // The shift keeps its figure in KiB with thousands separators, and the verdict in words.
    assert!(table.contains("+252 [+244, +260] KiB"), "{table}");
    assert!(
        table.contains("retains 244-260 KiB more than reuse per 10k iterations, 9"),
        "{table}"
    );

    let md = report(dir, &bundle, "md");
    let mut lines = md.lines().filter(|l| !l.trim().is_empty());
    assert_eq!(lines.next(), Some("## hwr-exp report: answers"), "{md}");
    assert!(lines.next().unwrap().starts_with("### Verdicts: "), "{md}");
    assert!(at(&md, "### Design") < at(&md, "### Runs"), "{md}");
    assert!(md.contains("retains 244-260 KiB more than reuse"), "{md}");

    let html = report(dir, &bundle, "html");
    assert!(at(&html, "verdicts-heading") < at(&html, "Design"), "html");
    assert!(at(&html, "Design") < at(&html, "id=\"summary\""), "html");
    assert!(html.contains("measured: argv: sh seed.sh {mode}"), "html");

    let json: serde_json::Value = serde_json::from_str(&report(dir, &bundle, "json")).unwrap();
    assert_eq!(json["measured"], "argv: sh seed.sh {mode}");
    assert_eq!(json["estimates"]["cells"][0]["metric"], "anonymous");
}

/// The original diagnostic writes `last_tensor_alive` in its loop samples: the report showed
/// `-` (table) and an empty field (CSV) for every run.
#[test]
fn last_tensor_alive_of_the_loop_samples_is_shown() {
    let repo = repo();
    let dir = repo.path();
    let bundle = bundle(dir);
    let csv = report(dir, &bundle, "csv");
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header = rows.headers().unwrap().clone();
    let col = header.iter().position(|h| h == "last_tensor_alive").unwrap();
    let values: Vec<String> = rows.records().map(|r| r.unwrap()[col].to_string()).collect();
    assert_eq!(values, vec!["false"; 10], "{csv}");
    let table = report(dir, &bundle, "table");
    let row = table
        .lines()
        .find(|l| l.contains("000-reuse-r1") && l.contains("yes"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("false"), "{row}");
}
