//! Values a report cannot use: a run's samples with `private_bytes` null, a string, a fraction, a
//! number beyond 64 bits or beyond 2^53 (not exact as a 64-bit float), negative, and `[report] metrics`
//! values that are not numbers. The report (every format) and `compare` say which runs gave what
//! (`no usable values: cell: 2 runs gave null for private_bytes`) instead of only `too few runs
//! (need 5 per cell)`, which more runs would not change.

use std::path::{Path, PathBuf};

use crate::support::{ManifestBuilder, code, hwr, repo, run, stderr, stdout};

/// Prints a retention document whose loop samples' `private_bytes` is `$2` in mode `leak` (a
/// JSON token as written, `null`, `"x"`, ...) and 0 in the control; `$2 = partial` gives null in
/// repetition 1 only. `load` (a `[report]` metric) is the same token.
const SCRIPT: &str = r#"#!/bin/sh
mode=$1
v=0
if [ "$mode" = leak ]; then
  case "$2" in
    null) v=null ;; str) v='"4096"' ;; frac) v=1.5 ;; huge) v=184467440737095516150 ;;
    big53) v=18446744073709551615 ;; neg) v=-5000 ;; partial) if [ "$HWR_REPETITION" = 1 ]; then v=null; else v=4096; fi ;;
    fint) v=4096.0 ;;
    notarray) printf '{"schema_version":1,"arguments":{"mode":"%s"},"load":0,"samples":{"a":1},"completed":true}\n' "$mode"; exit 0 ;;
    *) v=4096 ;;
  esac
fi
printf '{"schema_version":1,"arguments":{"mode":"%s"},"load":%s,"samples":[' "$mode" "$v"
printf '{"phase":"baseline","iterations":0,"private_bytes":0,"anonymous_bytes":0,"rss_bytes":0,"fd_count":3},'
for i in 1 2 3; do
  printf '{"phase":"loop","iterations":%d,"private_bytes":%s,"anonymous_bytes":0,"rss_bytes":0,"fd_count":3},' $((i * 1000)) "$v"
done
printf '{"phase":"closed","iterations":3000,"private_bytes":0,"anonymous_bytes":0,"rss_bytes":0,"fd_count":3}],"completed":true}\n'
"#;

/// `mode` (leak, reuse) x `kind`, 2 repetitions, `[report] metrics = { load = "/load" }`.
fn manifest(dir: &Path, kinds: &[&str]) -> PathBuf {
    std::fs::write(dir.join("values.sh"), SCRIPT).unwrap();
    ManifestBuilder::argv("unusable", &["sh", "values.sh", "{mode}", "{kind}"])
        .matrix("kind", kinds.iter().copied())
        .matrix("mode", ["leak", "reuse"])
        .repetitions(2)
        .set("measure", "sample-interval", "off")
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([("load", "/load")]),
        )
        .write(dir)
}

fn bundle(dir: &Path, kinds: &[&str]) -> PathBuf {
    let m = manifest(dir, kinds);
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

/// The growth row of the estimates for `cell` in the JSON report.
fn growth_row(doc: &serde_json::Value, cell: &str) -> serde_json::Value {
    doc["estimates"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cell"] == cell && r["metric"] == "private-growth-bytes")
        .cloned()
        .unwrap_or_else(|| panic!("no row for {cell}: {:#}", doc["estimates"]))
}

#[test]
fn every_kind_of_unusable_value_is_named_instead_of_too_few_runs() {
    let repo = repo();
    let dir = repo.path();
    let kinds = [
        "null", "str", "frac", "huge", "big53", "neg", "fint", "notarray", "ok",
    ];
    let b = bundle(dir, &kinds);
    let doc: serde_json::Value = serde_json::from_str(&report(dir, &b, "json")).unwrap();
    let expected = [
        ("null", "cell: 2 runs gave null for private_bytes"),
        ("str", "cell: 2 runs gave a string for private_bytes"),
        ("frac", "cell: 2 runs gave a fraction for private_bytes"),
        (
            "huge",
            "cell: 2 runs gave a number beyond 64 bits for private_bytes",
        ),
        (
            "big53",
            "cell: 2 runs gave a value beyond 2^53 (not exact as a 64-bit float)",
        ),
        ("neg", "cell: 2 runs gave a negative number for private_bytes"),
        // 4096.0: an integer's value written as a float, not "beyond 64 bits".
        (
            "fint",
            "cell: 2 runs gave a number written as a float for private_bytes",
        ),
        // `samples` that is not an array: named, not taken for another schema's output.
        ("notarray", "cell: 2 runs gave an object for samples"),
    ];
    for (kind, text) in expected {
        let row = growth_row(&doc, &format!("kind={kind} mode=leak"));
        assert_eq!(row["verdict"], "too few runs", "{row:#}");
        assert_eq!(row["n-cell"], 0, "{row:#}");
        let unusable = row["unusable-values"]
            .as_str()
            .unwrap_or_else(|| panic!("{row:#}"));
        assert!(unusable.contains(text), "{kind}: {unusable}");
        assert!(
            row["repetitions-needed"].is_null(),
            "more runs would not help: {row:#}"
        );
    }
    let ok = growth_row(&doc, "kind=ok mode=leak");
    assert!(ok.get("unusable-values").is_none(), "{ok:#}");
    assert_eq!(ok["repetitions-needed"], 6, "{ok:#}");
    // The `load` metric: the cells' values that are not numbers are counted, not dropped silently.
    let cell = doc["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"] == "kind=null mode=leak")
        .unwrap();
    assert_eq!(cell["unusable-metrics"]["load"], "2 runs gave null", "{cell:#}");
    let str_cell = doc["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"] == "kind=big53 mode=leak")
        .unwrap();
    assert_eq!(
        str_cell["unusable-metrics"]["load"], "2 runs gave a value beyond 2^53 (not exact as a 64-bit float)",
        "{str_cell:#}"
    );

    // The table, Markdown and HTML say it in the verdict, not `need 5 per cell`.
    for format in ["table", "md", "html"] {
        let text = report(dir, &b, format);
        let flat = text.replace('\n', " ");
        assert!(
            flat.contains("no usable values: cell: 2 runs gave null for private_bytes"),
            "{format}: {text}"
        );
        assert!(
            flat.contains("load: 2 runs gave null"),
            "{format}: the metric's unusable values: {text}"
        );
    }
    // CSV, one row per run: what each run gave.
    let csv = report(dir, &b, "csv");
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(header.last(), Some(&"unusable_values"), "{csv}");
    let row = csv
        .lines()
        .find(|l| l.starts_with("000-null-leak-r1,"))
        .unwrap_or_else(|| panic!("{csv}"));
    assert!(row.ends_with(",null for private_bytes; load: null"), "{row}");
    let row = csv.lines().find(|l| l.starts_with("002-str-leak-r1,")).unwrap();
    assert!(
        row.ends_with(",a string for private_bytes; load: a string"),
        "{row}"
    );
    // compare: the same words for the cells whose values are not usable in A or B.
    for format in ["table", "json", "csv", "md"] {
        let out = hwr(
            dir,
            &[
                "compare",
                b.to_str().unwrap(),
                b.to_str().unwrap(),
                "--format",
                format,
                "--wide",
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains("A: 2 runs gave null for private_bytes; B: 2 runs gave null for private_bytes"),
            "{format}: {text}"
        );
    }
}

#[test]
fn some_unusable_runs_are_named_beside_the_runs_needed() {
    let repo = repo();
    let dir = repo.path();
    let b = bundle(dir, &["partial"]);
    let doc: serde_json::Value = serde_json::from_str(&report(dir, &b, "json")).unwrap();
    let row = growth_row(&doc, "kind=partial mode=leak");
    assert_eq!(row["n-cell"], 1, "{row:#}");
    assert_eq!(
        row["unusable-values"], "cell: 1 run gave null for private_bytes",
        "{row:#}"
    );
    let text = report(dir, &b, "table").replace('\n', " ");
    assert!(
        text.contains("need 5 per cell; cell: 1 run gave null for private_bytes"),
        "{text}"
    );
}

/// A string the report keeps with the escape of a lone UTF-16 surrogate (JSON's grammar allows
/// it; Python's `json.dumps` writes one for a surrogate-escaped file name): the output check
/// passes it, and so does the report, which reads it as U+FFFD, small (read whole) and past the
/// 1 MiB buffer (streamed). Before, the check said `valid` and the report left the run out
/// (`unexpected end of hex escape`) without saying so anywhere in its table.
#[test]
fn a_lone_surrogate_in_a_kept_string_is_read_as_a_replacement_character() {
    let repo = repo();
    let doc = |pad: usize| {
        format!(
            r#"{{"schema_version":1,"pad":"{}","arguments":{{"mode":"x\ud800y"}},"samples":[{{"phase":"baseline","iterations":0,"private_bytes":0,"anonymous_bytes":0,"rss_bytes":0,"fd_count":3}},{{"phase":"loop","iterations":1000,"private_bytes":4096,"anonymous_bytes":0,"rss_bytes":0,"fd_count":3}}],"completed":true}}"#,
            "p".repeat(pad)
        )
    };
    std::fs::write(repo.path().join("small.json"), doc(0)).unwrap();
    std::fs::write(repo.path().join("large.json"), doc(1_100_000)).unwrap();
    let m = ManifestBuilder::argv("surrogate", &["cat", "{size}.json"])
        .matrix("size", ["small", "large"])
        .repetitions(1)
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let out = hwr(
        repo.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for run in doc["runs"].as_array().unwrap() {
        assert_eq!(run["output-check"], "valid", "{run:#}");
        assert!(run["excluded"].is_null(), "{run:#}");
        assert_eq!(run["retention"]["growth"]["private-bytes"], 4096, "{run:#}");
        assert_eq!(run["retention"]["mode"], "x\u{fffd}y", "{run:#}");
    }
    let table = stdout(&hwr(repo.path(), &["report", bundle.to_str().unwrap()]));
    assert!(!table.contains("left out"), "{table}");
}

/// A run that ended ok but whose output the report cannot read (here: removed after the run) is
/// named with why under the run table, also when no run has retention figures (whose table lists
/// them otherwise); before, its row showed an empty `reason` and nothing said it was left out.
#[test]
fn an_ok_run_left_out_is_named_under_the_run_table_without_retention_figures() {
    let repo = repo();
    let m = ManifestBuilder::shell("left-out", "echo '{{\"load\": 1}}'")
        .output("{run-id}.json")
        .repetitions(2)
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([("load", "/load")]),
        )
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let first = crate::support::run_records(&bundle)[0]["run-id"]
        .as_str()
        .unwrap()
        .to_string();
    // A run.json without `summary` (a bundle written before it): the report reads the output.
    assert!(crate::support::strip_summary(&bundle.join("runs").join(&first)));
    std::fs::remove_file(bundle.join("runs").join(&first).join(format!("{first}.json"))).unwrap();
    for format in ["table", "md", "html"] {
        let out = hwr(
            repo.path(),
            &["report", bundle.to_str().unwrap(), "--format", format],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains(&format!(
                "ok but left out of the aggregates: {first} (cannot read output"
            )),
            "{format}: {text}"
        );
    }
}

/// A bundle with a `mode` key whose outputs are JSON but not in the retention schema: `check`'s
/// too-few-runs warning says verdicts need that schema, and the report says why it shows no
/// verdicts (before: no verdict table and no word of why).
#[test]
fn a_mode_matrix_without_retention_outputs_says_why_there_are_no_verdicts() {
    let repo = repo();
    let m = ManifestBuilder::shell("plain-json", "echo '{{\"n\": 1}}'")
        .output("{run-id}.json")
        .matrix("mode", ["a", "reuse"])
        .repetitions(1)
        .write(repo.path());
    let check = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert!(
        stderr(&check).contains("verdicts compare outputs in the retention schema"),
        "{}",
        stderr(&check)
    );
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = stdout(&hwr(repo.path(), &["report", bundle.unwrap().to_str().unwrap()]));
    let head: String = table.lines().take(6).collect::<Vec<_>>().join("\n");
    assert!(
        head.contains("no verdicts: no run's output follows the retention schema"),
        "{table}"
    );
}
