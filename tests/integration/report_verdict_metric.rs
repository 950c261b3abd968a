//! Issue 36 items 1 and 3: the verdict judges anonymous growth and rate by default (`[report]
//! verdict-metric` picks another), growth and rate give one word per cell under one
//! multiplicity control, and a loop whose iterations go down has no rate, by name. Real runs of
//! a small script printing the retention schema (DESIGN 7).

use std::path::{Path, PathBuf};

use crate::support::{ManifestBuilder, code, hwr, repo, run, stderr, stdout};

/// A retention document of 6 samples (baseline at 0, loop every 1000 iterations to 5000):
/// anonymous bytes grow 28 KiB a step in mode `leak` (140 KiB over the loop) and not at all in
/// `flat`, `reuse` and `down`... except `down` grows like `leak` while its loop iterations go
/// down (5000, 4000, ... 1000). A page of jitter on every other sample by repetition. Private
/// bytes are anonymous plus 30 MiB of file-backed pages that swing by -3..+3 MiB at the last
/// sample, run to run (another process mapping and unmapping the same libraries); in mode `libs`
/// the file-backed pages also grow 64 KiB a step (a library paged in) while anonymous bytes stay.
const SCRIPT: &str = r#"#!/bin/sh
mode=$1
case "$mode" in leak|down) rate=28672 ;; *) rate=0 ;; esac
case "$mode" in leak) salt=1 ;; flat) salt=2 ;; reuse) salt=3 ;; *) salt=4 ;; esac
case "$mode" in libs) file=65536 ;; *) file=0 ;; esac
R=${HWR_REPETITION:-1}
swing=$(( ((2 * R + salt) % 7 - 3) * 1048576 ))
printf '{"schema_version":1,"arguments":{"mode":"%s"},"samples":[' "$mode"
i=0
while [ $i -le 5 ]; do
  j=$(( (R + i) % 2 ))
  a=$(( 8388608 + rate * i + 4096 * j ))
  p=$(( a + 31457280 + file * i ))
  [ $i -eq 5 ] && p=$(( p + swing ))
  it=$(( i * 1000 ))
  [ "$mode" = down ] && [ $i -gt 0 ] && it=$(( (6 - i) * 1000 ))
  phase=loop; [ $i -eq 0 ] && phase=baseline
  printf '{"phase":"%s","iterations":%d,"private_bytes":%d,"anonymous_bytes":%d,"rss_bytes":%d,"fd_count":3}' $phase $it $p $a $((p + 65536))
  [ $i -lt 5 ] && printf ','
  i=$((i + 1))
done
printf '],"completed":true}\n'
"#;

fn manifest(dir: &Path, modes: &[&str], verdict_metric: Option<&str>) -> PathBuf {
    std::fs::write(dir.join("swing.sh"), SCRIPT).unwrap();
    let mut b = ManifestBuilder::argv("swing", &["sh", "swing.sh", "{mode}"])
        .matrix("mode", modes.iter().copied())
        .repetitions(6);
    if let Some(m) = verdict_metric {
        b = b.set("report", "verdict-metric", m);
    }
    b.write(dir)
}

fn report(dir: &Path, manifest: &Path) -> (serde_json::Value, String) {
    let (out, bundle) = run(dir, manifest);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let json = hwr(dir, &["report", bundle.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let table = hwr(dir, &["report", bundle.to_str().unwrap(), "--wide"]);
    assert_eq!(code(&table), 0, "{}", stderr(&table));
    (serde_json::from_str(&stdout(&json)).unwrap(), stdout(&table))
}

fn cell<'a>(doc: &'a serde_json::Value, cell: &str) -> &'a serde_json::Value {
    doc["estimates"]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"] == cell)
        .unwrap_or_else(|| panic!("no cell {cell} in {:#}", doc["estimates"]))
}

fn row<'a>(doc: &'a serde_json::Value, cell: &str, metric: &str) -> &'a serde_json::Value {
    doc["estimates"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cell"] == cell && r["metric"] == metric)
        .unwrap_or_else(|| panic!("no {cell} {metric} in {:#}", doc["estimates"]))
}

/// No cell says `no detectable difference` beside a growth or rate interval of its verdict
/// metric wholly above or below 0 without a reason (of another metric: without a reason or the
/// metric among its disagreements).
fn no_silent_contradiction(doc: &serde_json::Value, growth: &str, rate: &str) {
    let own = growth.starts_with(doc["estimates"]["verdict-metric"].as_str().unwrap());
    let said = |c: &serde_json::Value| c["reason"].is_string() || (!own && c["disagreements"].is_array());
    for c in doc["estimates"]["cells"].as_array().unwrap() {
        let name = c["cell"].as_str().unwrap();
        for key in [growth, rate] {
            let r = row(doc, name, key);
            let excludes_zero = r["ci-low"].as_f64().is_some_and(|lo| lo > 0.0)
                || r["ci-high"].as_f64().is_some_and(|hi| hi < 0.0);
            if c["verdict"] == "no detectable difference" && excludes_zero {
                assert!(said(c), "{c:#} beside {r:#}");
            }
            // Never two directions without a reason.
            let other = if r["verdict"] == "above control" {
                "below control"
            } else {
                "above control"
            };
            if r["verdict"].as_str().is_some_and(|v| v.ends_with("control")) && c["verdict"] == other {
                assert!(said(c), "{c:#} beside {r:#}");
            }
        }
    }
}

#[test]
fn anonymous_growth_decides_while_private_bytes_swing_by_megabytes() {
    let repo = repo();
    let m = manifest(repo.path(), &["leak", "flat", "libs", "reuse"], None);
    let check = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    assert!(
        stdout(&check).contains("verdict metric: anonymous (anonymous bytes, growth and rate; the default"),
        "{}",
        stdout(&check)
    );
    let (doc, table) = report(repo.path(), &m);
    let e = &doc["estimates"];
    assert_eq!(e["verdict-metric"], "anonymous");
    assert_eq!(e["correction"], "bonferroni across cells, holm within");
    assert_eq!(e["level"], 0.05 / 3.0);
    let leak = cell(&doc, "mode=leak");
    assert_eq!(leak["verdict"], "above control", "{leak:#}");
    assert_eq!(leak["metric"], "anonymous");
    assert_eq!(leak["level"], 0.05 / 3.0);
    // Private bytes said nothing for the same runs: the row says so.
    assert_eq!(
        row(&doc, "mode=leak", "private-growth-bytes")["verdict"],
        "no detectable difference"
    );
    // ... but its rate over the loop did not swing: the private word agrees.
    assert_eq!(leak.get("disagreements"), None, "{leak:#}");
    // File-backed pages that grow: private, file-backed and RSS say above; the verdict metric
    // does not, and the row names them.
    let libs = cell(&doc, "mode=libs");
    assert_eq!(libs["verdict"], "no detectable difference", "{libs:#}");
    assert_eq!(
        libs["disagreements"],
        serde_json::json!([
            {"metric": "private", "verdict": "above control"},
            {"metric": "file-backed", "verdict": "above control"},
            {"metric": "rss", "verdict": "above control"},
        ]),
        "{libs:#}"
    );
    let flat = cell(&doc, "mode=flat");
    assert!(
        !["above control", "below control"].contains(&flat["verdict"].as_str().unwrap()),
        "{flat:#}"
    );
    // File-backed private bytes have their own rows.
    row(&doc, "mode=leak", "file-backed-growth-bytes");
    row(&doc, "mode=leak", "file-backed-rate-per-1000");
    no_silent_contradiction(&doc, "anonymous-growth-bytes", "anonymous-rate-per-1000");
    no_silent_contradiction(&doc, "private-growth-bytes", "private-rate-per-1000");
    // The table names the metric and says on the row where the others disagree.
    assert!(table.contains("anonymous bytes, growth and rate"), "{table}");
    assert!(table.contains("private says above control"), "{table}");
}

#[test]
fn verdict_metric_private_switches_back_and_says_why_growth_and_rate_differ() {
    let repo = repo();
    let m = manifest(repo.path(), &["leak", "flat", "reuse"], Some("private"));
    let check = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert!(
        stdout(&check)
            .contains("verdict metric: private (private bytes, growth and rate; [report] verdict-metric)"),
        "{}",
        stdout(&check)
    );
    let (doc, table) = report(repo.path(), &m);
    assert_eq!(doc["estimates"]["verdict-metric"], "private");
    let leak = cell(&doc, "mode=leak");
    assert_eq!(leak["metric"], "private");
    // The private growth swings by megabytes; its rate over the loop does not: one word, the
    // rate's, and the reason says the growth was within noise.
    assert_eq!(
        row(&doc, "mode=leak", "private-rate-per-1000")["verdict"],
        "above control"
    );
    assert_eq!(leak["verdict"], "above control", "{leak:#}");
    assert_eq!(leak["decided-by"], "private-rate-per-1000");
    assert!(
        leak["reason"].as_str().is_some_and(|r| r.contains("growth")),
        "{leak:#}"
    );
    no_silent_contradiction(&doc, "private-growth-bytes", "private-rate-per-1000");
    assert!(table.contains("private bytes, growth and rate"), "{table}");
}

#[test]
fn loop_iterations_that_go_down_make_the_rate_unusable_by_name() {
    let repo = repo();
    let m = manifest(repo.path(), &["down", "reuse"], None);
    let (doc, table) = report(repo.path(), &m);
    let rate = row(&doc, "mode=down", "anonymous-rate-per-1000");
    assert_eq!(rate["verdict"], "too few runs", "{rate:#}");
    assert_eq!(rate["n-cell"], 0);
    assert!(
        rate["unusable-values"]
            .as_str()
            .is_some_and(|u| u.contains("6 runs gave loop iterations that go down (no rate)")),
        "{rate:#}"
    );
    let down = cell(&doc, "mode=down");
    assert_eq!(down["verdict"], "above control", "{down:#}");
    assert!(
        down["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("rate unusable: cell: 6 runs gave loop iterations that go down")),
        "{down:#}"
    );
    // No other metric's rate says `below control` either.
    for r in doc["estimates"]["rows"].as_array().unwrap() {
        if r["cell"] == "mode=down" && r["metric"].as_str().unwrap().contains("rate") {
            assert_ne!(r["verdict"], "below control", "{r:#}");
        }
    }
    assert!(table.contains("loop iterations that go down"), "{table}");
}

#[test]
fn an_unknown_verdict_metric_is_located_and_the_valid_ones_listed() {
    let repo = repo();
    std::fs::write(repo.path().join("swing.sh"), SCRIPT).unwrap();
    let m = ManifestBuilder::argv("swing", &["sh", "swing.sh", "{mode}"])
        .matrix("mode", ["leak", "reuse"])
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([("load", "/load_ms")]),
        )
        .set("report", "verdict-metric", "anon")
        .write(repo.path());
    let check = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&check), 2, "{}", stdout(&check));
    let err = stderr(&check);
    let line = std::fs::read_to_string(&m)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("verdict-metric"))
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!("{}:{line}:18", m.file_name().unwrap().to_str().unwrap())),
        "{err}"
    );
    assert!(
        err.contains("unknown metric \"anon\"")
            && err.contains("valid: anonymous, private, rss, pss-anon, file-backed, load"),
        "{err}"
    );
    // A [report] metrics name is valid.
    let ok = ManifestBuilder::argv("swing", &["sh", "swing.sh", "{mode}"])
        .matrix("mode", ["leak", "reuse"])
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([("load", "/load_ms")]),
        )
        .set("report", "verdict-metric", "load")
        .write(repo.path());
    let check = hwr(repo.path(), &["check", ok.to_str().unwrap()]);
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    assert!(
        stdout(&check).contains("verdict metric: load (load ([report] metrics); [report] verdict-metric)"),
        "{}",
        stdout(&check)
    );
}
