//! One JSON reader: what the output check calls valid, the report reads; what it refuses, the report
//! leaves out saying why. Checked with nesting at and beyond the limit (127 levels).

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
    let deep = "/a".repeat(127);
    let m = write_manifest(
        repo.path(),
        &format!(
            "format = 1\n[experiment]\nname = \"deep\"\n[command]\nargv = [\"sh\", \"nest.sh\", \"{{depth}}\"]\n\
             [matrix]\ndepth = [64, 127, 128, 300]\n[report]\nmetrics = {{ deep = \"{deep}\", top = \"/a\" }}\n"
        ),
    );
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let records = run_records(&bundle);
    let outcomes: Vec<&str> = records.iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["ok", "ok", "invalid-output", "invalid-output"]);
    let reason = records[2]["output-check-reason"].as_str().unwrap();
    assert!(reason.contains("nested deeper than 127"), "{reason}");

    let out = hwr(
        repo.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    // Every run the check passed is read: no `excluded`, its metrics present.
    for run in &runs[..2] {
        assert!(run["excluded"].is_null(), "{run}");
        assert_eq!(run["metrics"]["top"], "<object>", "{run}");
    }
    assert_eq!(runs[1]["metrics"]["deep"], 1.0, "{}", runs[1]);
    assert!(runs[0]["metrics"]["deep"].is_null(), "{}", runs[0]);
    // The others are left out, saying why.
    for run in &runs[2..] {
        let why = run["excluded"].as_str().unwrap_or_default();
        assert!(why.contains("invalid"), "{run}");
    }
}
