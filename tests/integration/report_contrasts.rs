//! Issue 36 items 4 and 6: contrasts ("does this factor change the retention?"), `report
//! --control` re-pivoting a bundle without rerunning, and `report --fail-on` as the exit status,
//! end to end on real runs of a small script that prints the retention schema (DESIGN 7).
//!
//! Matrix: mode (get, reuse: the control) x version (old, new) x size (16, 64). Only `get` at
//! version `new` retains (200 KiB of anonymous memory over the loop, whatever the size); every
//! other cell moves by one page either way from run to run.

use std::path::{Path, PathBuf};

use crate::support::{ManifestBuilder, code, hwr, repo, run, stderr, stdout};

const SCRIPT: &str = r#"#!/bin/sh
mode=$1; version=$2
rate=0; [ "$mode" = get ] && [ "$version" = new ] && rate=40960
R=${HWR_REPETITION:-1}
printf '{"schema_version":1,"arguments":{"mode":"%s"},"samples":[' "$mode"
i=0
while [ $i -le 5 ]; do
  j=$(( (R + i) % 2 ))
  p=$(( 1048576 + rate * i + 4096 * j ))
  phase=loop; [ $i -eq 0 ] && phase=baseline
  printf '{"phase":"%s","iterations":%d,"private_bytes":%d,"anonymous_bytes":%d,"rss_bytes":%d,"fd_count":3},' $phase $((i * 1000)) $p $p $((p + 65536))
  i=$((i + 1))
done
printf '{"phase":"closed","iterations":5000,"private_bytes":1048576,"anonymous_bytes":1048576,"rss_bytes":1114112,"fd_count":3}],"completed":true}\n'
"#;

fn manifest(dir: &Path, reps: i64, control: Option<&str>) -> PathBuf {
    std::fs::write(dir.join("leak.sh"), SCRIPT).unwrap();
    let mut b = ManifestBuilder::argv("contrasts", &["sh", "leak.sh", "{mode}", "{version}"])
        .output("{mode}-{version}-{size}-{repetition}.json")
        .matrix("mode", ["get", "reuse"])
        .matrix("version", ["old", "new"])
        .matrix("size", [16, 64])
        .set("measure", "sample-interval", "off")
        .repetitions(reps);
    if let Some(c) = control {
        b = b.set(
            "report",
            "control",
            crate::support::manifest::table([("version", c)]),
        );
    }
    b.write(dir)
}

fn report(dir: &Path, args: &[&str]) -> std::process::Output {
    hwr(dir, &[&["report"], args].concat())
}

fn json(dir: &Path, bundle: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![bundle.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(extra);
    let out = report(dir, &args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn contrast<'a>(doc: &'a serde_json::Value, axis: &str, fixed: &[(&str, &str)]) -> &'a serde_json::Value {
    doc["contrasts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["axis"] == axis && fixed.iter().all(|(k, v)| c["fixed"][*k] == *v))
        .unwrap_or_else(|| panic!("no {axis} {fixed:?} contrast in {:#}", doc["contrasts"]))
}

#[test]
fn a_version_that_leaks_changes_retention_and_an_inert_size_does_not() {
    let repo = repo();
    let m = manifest(repo.path(), 6, None);
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle");
    let doc = json(repo.path(), &bundle, &[]);
    // version and size, two fixed values each: 4 contrasts, each at confidence 1 - 0.05 / 4.
    assert_eq!(
        doc["contrasts"].as_array().unwrap().len(),
        4,
        "{:#}",
        doc["contrasts"]
    );
    let v = contrast(&doc, "version", &[("size", "16"), ("mode", "get")]);
    assert_eq!(v["verdict"], "changes retention", "{v:#}");
    assert_eq!(
        (v["level-a"].as_str(), v["level-b"].as_str()),
        (Some("old"), Some("new"))
    );
    assert_eq!(v["metric"], "anonymous-growth-bytes");
    assert_eq!(v["confidence"], 0.9875);
    let (lo, hi) = (v["ci-low"].as_f64().unwrap(), v["ci-high"].as_f64().unwrap());
    assert!(lo > 0.0 && lo <= 204800.0 && 204800.0 <= hi, "{v:#}");
    for version in ["old", "new"] {
        let s = contrast(&doc, "size", &[("version", version)]);
        assert_eq!(s["verdict"], "no detectable change", "{s:#}");
        assert_eq!(
            (s["level-a"].as_str(), s["level-b"].as_str()),
            (Some("16"), Some("64"))
        );
    }
    // Every text format carries the section right after the verdict table.
    for format in ["table", "md", "html"] {
        let out = report(repo.path(), &[bundle.to_str().unwrap(), "--format", format]);
        let text = stdout(&out);
        let (verdicts, contrasts, runs) = (
            text.find("Verdicts").expect("verdicts"),
            text.find("Contrasts")
                .unwrap_or_else(|| panic!("{format}: no contrasts")),
            text.find("Runs")
                .or_else(|| text.find("runs"))
                .unwrap_or(usize::MAX),
        );
        assert!(verdicts < contrasts, "{format}");
        assert!(text.contains("changes retention"), "{format}");
        assert!(text.contains("no detectable change"), "{format}");
        let _ = runs;
    }

    // --fail-on: the answer as the exit status, the matches named on stderr.
    let b = bundle.to_str().unwrap();
    let out = report(repo.path(), &[b, "--fail-on", "changes"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Contrasts"),
        "the report is printed as usual"
    );
    let err = stderr(&out);
    assert!(err.contains("--fail-on changes: version: new vs old"), "{err}");
    assert!(!err.contains("size: 64 vs 16"), "{err}");
    let out = report(repo.path(), &[b, "--fail-on", "above-control"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("mode=get version=new size=16 is above control"),
        "{err}"
    );
    assert!(!err.contains("version=old"), "{err}");
    let out = report(
        repo.path(),
        &[b, "--fail-on", "above-control,changes", "--format", "json"],
    );
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("--fail-on above-control") && stderr(&out).contains("--fail-on changes"));
    // Pivoted on version=new as the control: the leaking cell is the control of `old`, which is
    // then below it, never above; no contrast of `size` changes.
    let out = report(
        repo.path(),
        &[b, "--control", "version=new", "--fail-on", "above-control"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let out = report(repo.path(), &[b, "--fail-on", "bogus"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));

    // --control re-pivots the bundle: the same as a manifest with that control.
    let pivoted = json(repo.path(), &bundle, &["--control", "version=old"]);
    assert_eq!(pivoted["estimates"]["control"]["source"], "--control");
    let other = repo.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let m2 = manifest(&other, 6, Some("old"));
    let (out, bundle2) = run(&other, &m2);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let by_manifest = json(&other, &bundle2.expect("bundle"), &[]);
    let cells = |d: &serde_json::Value| {
        d["estimates"]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["cell"].as_str().unwrap().to_string(),
                    c["control"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(cells(&pivoted), cells(&by_manifest));
    let verdicts = |d: &serde_json::Value| {
        d["estimates"]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["verdict"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(verdicts(&pivoted), verdicts(&by_manifest));
    assert!(
        verdicts(&pivoted).contains(&"above control".to_string()),
        "{:#}",
        pivoted["estimates"]["cells"]
    );
    let axes = |d: &serde_json::Value| {
        d["contrasts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["axis"].clone(), c["fixed"].clone(), c["verdict"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(axes(&pivoted), axes(&by_manifest));
    // A key or value the bundle does not have: a usage error naming it.
    let out = report(repo.path(), &[b, "--control", "colour=red"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("`colour` is not a matrix key"),
        "{}",
        stderr(&out)
    );
    let out = report(repo.path(), &[b, "--control", "version=ancient"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("its values: old, new"), "{}", stderr(&out));
}

#[test]
fn too_few_runs_for_a_contrast_is_said_by_check_and_the_report() {
    let repo = repo();
    // 5 runs a cell decide each cell (Holm over 4 cells), but not a contrast at 1 - 0.05 / 8.
    let m = manifest(repo.path(), 5, None);
    let check = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    assert!(stderr(&check).contains("no contrast"), "{}", stderr(&check));
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc = json(repo.path(), &bundle.unwrap(), &[]);
    for c in doc["contrasts"].as_array().unwrap() {
        assert_eq!(c["verdict"], "too few runs", "{c:#}");
        // No interval that lacks the confidence the family needs.
        assert!(c["ci-low"].is_null() && c["confidence"].is_null(), "{c:#}");
        assert!(c["estimate"].is_number(), "{c:#}");
    }
    let m = manifest(repo.path(), 6, None);
    let check = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert!(!stderr(&check).contains("no contrast"), "{}", stderr(&check));
}
