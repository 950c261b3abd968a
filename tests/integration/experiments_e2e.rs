//! The checked-in experiments run end to end through `hwr-exp run` (iterations cut down).

use std::path::PathBuf;

use crate::support::probe::phases;
use crate::support::{Repo, code, hwr, json, repo, run, run_records, source_path, stderr};

/// Copies `experiments/<name>` into a temporary git repository with the iteration counts cut down.
fn small_copy(name: &str, replacements: &[(&str, &str)]) -> (Repo, PathBuf) {
    let repo = repo();
    let mut text = std::fs::read_to_string(source_path("experiments").join(name)).unwrap();
    for (from, to) in replacements {
        assert!(text.contains(from), "{name} no longer contains {from}");
        text = text.replace(from, to);
    }
    let rel = format!("experiments/{name}");
    repo.write(&rel, text);
    let path = repo.path().join(rel);
    (repo, path)
}

#[test]
fn size_compare_writes_twenty_probe_outputs_named_by_cell() {
    let (repo, m) = small_copy(
        "size-compare.toml",
        &[
            ("\"--iterations\", \"1000000\"", "\"--iterations\", \"2000\""),
            ("\"--sample-every\", \"100000\"", "\"--sample-every\", \"500\""),
        ],
    );
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    assert_eq!(json(&bundle.join("bundle.json"))["counts"]["ok"], 20);
    let mut names = Vec::new();
    for r in run_records(&bundle) {
        let output = r["output"].as_str().unwrap().to_string();
        let cell = &r["cell"];
        assert_eq!(
            output,
            format!(
                "{}-{}-{}.json",
                cell["mode"].as_str().unwrap(),
                cell["elements"],
                r["repetition"]
            )
        );
        let probe = json(
            &bundle
                .join("runs")
                .join(r["run-id"].as_str().unwrap())
                .join(&output),
        );
        assert_eq!(probe["completed"], true);
        assert_eq!(probe["arguments"]["tensor_elements"], cell["elements"]);
        assert_eq!(
            phases(&probe),
            [
                "before_file",
                "baseline",
                "loop",
                "loop",
                "loop",
                "loop",
                "closed"
            ]
        );
        assert_eq!(
            probe["cpu_affinity"], r["cpus-effective"],
            "the probe sees the pinning"
        );
        names.push(output);
    }
    names.sort();
    let mut expected: Vec<String> = ["get_tensor", "reuse"]
        .iter()
        .flat_map(|mode| [16, 64].map(move |el| (mode, el)))
        .flat_map(|(mode, el)| (1..=5).map(move |r| format!("{mode}-{el}-{r}.json")))
        .collect();
    expected.sort();
    assert_eq!(names, expected);
}

#[test]
fn feasibility_runs() {
    let (repo, m) = small_copy("feasibility.toml", &[]);
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let records = run_records(&bundle.unwrap());
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["outcome"], "ok");
}

#[test]
fn every_checked_in_experiment_passes_check() {
    let dir = source_path("experiments");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let out = hwr(&dir, &["check", path.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{}: {}", path.display(), stderr(&out));
    }
}
