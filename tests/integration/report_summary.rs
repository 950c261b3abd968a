//! run.json `summary` (DESIGN 5): the figures a report takes from a run's output, made once when
//! the run is recorded by the one function a report applies to the output of a run.json without
//! it. A new bundle's summaries are what that function gives of the outputs; a report of the
//! bundle is the same with and without them; a run whose output is invalid has none, and the
//! report says why as before.

use std::path::Path;

use hwr_exp::bundle::output_summary::{OutputInterest, OutputSource, summarize};

use crate::support::{ManifestBuilder, code, hwr, repo, run, run_records, stderr, stdout, strip_summary};

/// Prints, for mode `leak` or `reuse`, a retention document (a `null` fd count in the closed
/// sample, `pss_anon_bytes`, a rate, metrics of several kinds), and for mode `bad` no JSON.
const SCRIPT: &str = r#"#!/bin/sh
mode=$1
if [ "$mode" = bad ]; then echo 'not json'; exit 0; fi
step=0
if [ "$mode" = leak ]; then step=$((4096 * HWR_REPETITION)); fi
printf '{"schema_version":1,"arguments":{"mode":"%s","tensor_elements":16},"load":%s,"label":"r%s","big":18446744073709551615,"samples":[' "$mode" "$HWR_REPETITION" "$HWR_REPETITION"
printf '{"phase":"baseline","iterations":0,"private_bytes":1000,"anonymous_bytes":500,"rss_bytes":9000,"pss_anon_bytes":400,"fd_count":3},'
for i in 1 2 3 4; do
  printf '{"phase":"loop","iterations":%d,"private_bytes":%d,"anonymous_bytes":%d,"rss_bytes":9000,"pss_anon_bytes":400,"fd_count":3},' $((i * 1000)) $((1000 + i * step)) $((500 + i * step / 2))
done
printf '{"phase":"closed","iterations":4000,"private_bytes":1000,"anonymous_bytes":500,"rss_bytes":9000,"fd_count":null}],"completed":true,"last_tensor_alive":false}\n'
"#;

/// Runs `mode` (leak, reuse, bad) x 2 repetitions with four `[report] metrics`; the bundle.
fn bundle(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("values.sh"), SCRIPT).unwrap();
    let m = ManifestBuilder::argv("summary", &["sh", "values.sh", "{mode}"])
        .matrix("mode", ["leak", "reuse", "bad"])
        .repetitions(2)
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([
                ("load", "/load"),
                ("label", "/label"),
                ("big", "/big"),
                ("absent", "/no/such/key"),
            ]),
        )
        .write(dir);
    let (out, bundle) = run(dir, &m);
    assert_eq!(code(&out), 1, "one cell's output is invalid: {}", stderr(&out));
    bundle.expect("a bundle")
}

/// The report of `bundle` in every text format.
fn reports(dir: &Path, bundle: &Path) -> Vec<String> {
    ["table", "md", "csv", "json"]
        .iter()
        .map(|format| {
            let out = hwr(dir, &["report", bundle.to_str().unwrap(), "--format", format]);
            assert_eq!(code(&out), 0, "{format}: {}", stderr(&out));
            stdout(&out)
        })
        .collect()
}

#[test]
fn a_new_bundle_carries_the_summary_its_outputs_give_and_reports_the_same_without_it() {
    let repo = repo();
    let bundle = bundle(repo.path());
    let manifest = std::fs::read_to_string(bundle.join("manifest.toml")).unwrap();
    let pointers = hwr_exp::report::read::metric_pointers(&manifest).unwrap();
    let asked = OutputInterest::new(&pointers);
    let records = run_records(&bundle);
    assert_eq!(records.len(), 6);
    for r in &records {
        let run_dir = bundle.join("runs").join(r["run-id"].as_str().unwrap());
        if r["output-check"] == "valid" {
            let file = std::fs::File::open(run_dir.join(r["output"].as_str().unwrap())).unwrap();
            let (made, _) = summarize(OutputSource::File(file), &asked, 0, true).unwrap();
            assert_eq!(r["summary"], serde_json::to_value(&made).unwrap(), "{r:#}");
            let summary = &r["summary"];
            assert_eq!(summary["samples"], 6, "{summary:#}");
            assert_eq!(summary["metrics"]["/big"], "18446744073709551615", "{summary:#}");
            assert!(summary["metrics"]["/no/such/key"].is_null(), "{summary:#}");
            assert!(
                summary["retention"]["rate"]["private-bytes"]["all"].is_number(),
                "{summary:#}"
            );
            assert_eq!(
                summary["gaps"]["closed-null"],
                serde_json::json!(["fd_count"]),
                "{summary:#}"
            );
        } else {
            assert_eq!(r["output-check"], "invalid", "{r:#}");
            assert!(
                r.get("summary").is_none(),
                "no summary of an invalid output: {r:#}"
            );
        }
    }
    let out = hwr(repo.path(), &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));

    let with = reports(repo.path(), &bundle);
    // The invalid output's run is left out saying why, as the output check said.
    assert!(with[2].contains("output invalid"), "{}", with[2]);
    assert!(with[0].contains("r2"), "the label metric is shown: {}", with[0]);
    let mut stripped = 0;
    for r in &records {
        stripped += usize::from(strip_summary(
            &bundle.join("runs").join(r["run-id"].as_str().unwrap()),
        ));
    }
    assert_eq!(stripped, 4);
    let without = reports(repo.path(), &bundle);
    for (a, b) in with.iter().zip(&without) {
        assert_eq!(a, b);
    }
}

#[test]
fn a_summary_made_for_other_report_metrics_is_not_used() {
    let repo = repo();
    let bundle = bundle(repo.path());
    let before = reports(repo.path(), &bundle);
    // The same bundle whose summaries were made for another `[report] metrics`: the report
    // reads the outputs for the pointers it has, and says the same.
    for r in run_records(&bundle) {
        let path = bundle
            .join("runs")
            .join(r["run-id"].as_str().unwrap())
            .join("run.json");
        let mut doc = r.clone();
        if let Some(metrics) = doc
            .pointer_mut("/summary/metrics")
            .and_then(|m| m.as_object_mut())
        {
            metrics.remove("/load");
        }
        std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    }
    assert_eq!(before, reports(repo.path(), &bundle));
}

#[test]
fn a_run_of_the_built_in_probe_has_its_summary_and_the_same_report_without_it() {
    let repo = repo();
    let m = ManifestBuilder::argv(
        "builtin-summary",
        &[
            "{hwr-exp}",
            "probe",
            "safetensors-retention",
            "--mode",
            "{mode}",
            "--iterations",
            "100",
            "--sample-every",
            "50",
        ],
    )
    .matrix("mode", ["get_tensor", "reuse"])
    .set(
        "report",
        "metrics",
        crate::support::manifest::table([("prep", "/preparation_seconds")]),
    )
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let asked = OutputInterest::new(&[("prep".to_string(), "/preparation_seconds".to_string())]);
    for r in run_records(&bundle) {
        let run_dir = bundle.join("runs").join(r["run-id"].as_str().unwrap());
        let output = run_dir.join(r["output"].as_str().unwrap());
        let (made, _) = summarize(
            OutputSource::File(std::fs::File::open(&output).unwrap()),
            &asked,
            0,
            true,
        )
        .unwrap();
        assert_eq!(r["summary"], serde_json::to_value(&made).unwrap(), "{r:#}");
        assert!(r["summary"]["retention"]["growth"].is_object(), "{r:#}");
        assert!(
            r["summary"]["metrics"]["/preparation_seconds"].is_number(),
            "{r:#}"
        );
    }
    // The JSON report holds the mappings that grew between the probe's own breakdowns
    // (`mappings-grown`), from `summary` here and from the outputs below.
    let with = reports(repo.path(), &bundle);
    for r in run_records(&bundle) {
        assert!(strip_summary(
            &bundle.join("runs").join(r["run-id"].as_str().unwrap())
        ));
    }
    assert_eq!(with, reports(repo.path(), &bundle));
}
