//! One JSON reader: what the output check calls valid, the report reads; what it refuses, the report
//! leaves out saying why. Checked with nesting around serde_json's recursion limit (127 levels) and
//! far beyond it: any valid document is valid output, whatever its depth.

use crate::support::*;

/// Prints `{"a": {"a": ... 1 ...}}` nested `$1` deep.
const NEST: &str = r#"d=$1; o=''; c=''; i=0
while [ $i -lt $d ]; do o="$o{\"a\": "; c="$c}"; i=$((i+1)); done
printf '%s1%s\n' "$o" "$c"
"#;

#[test]
fn the_check_and_the_report_agree_on_deep_documents() {
    let repo = repo();
    std::fs::write(repo.path().join("nest.sh"), NEST).unwrap();
    // As deep as a metric pointer may be (120 tokens).
    let deep = "/a".repeat(120);
    let m = write_manifest(
        repo.path(),
        &format!(
            "format = 1\n[experiment]\nname = \"deep\"\n[command]\nargv = [\"sh\", \"nest.sh\", \"{{depth}}\"]\n\
             [matrix]\ndepth = [64, 127, 128, 300, 120]\n[report]\nmetrics = {{ deep = \"{deep}\", top = \"/a\" }}\n"
        ),
    );
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let records = run_records(&bundle);
    let outcomes: Vec<&str> = records.iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["ok"; 5]);

    let out = hwr(
        repo.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 5);
    // Every run is read: no `excluded`, its metrics present.
    for run in runs {
        assert!(run["excluded"].is_null(), "{run}");
        assert_eq!(run["metrics"]["top"], "<object>", "{run}");
    }
    // The 120-token pointer: absent at 64 levels, an object deeper down, the number at 120.
    assert!(runs[0]["metrics"]["deep"].is_null(), "{}", runs[0]);
    for run in &runs[1..4] {
        assert_eq!(run["metrics"]["deep"], "<object>", "{run}");
    }
    assert_eq!(runs[4]["metrics"]["deep"], 1.0, "{}", runs[4]);
}
