//! Adaptive repetitions on Slurm (issue 36 item 2): each round is a job array, the next one
//! submitted once the previous has ended, judged by the same group-sequential design as the
//! local runner (`runner::adaptive`). On a private two-node cluster (nodes n1 and n2, two CPUs
//! each) with the noise-only probe of `adaptive.rs` (seeded page-quantized noise, the same
//! distribution in every mode; `leak` adds 8 KiB per 1000 iterations):
//!
//! - noise alone (`flat`, seed 8: `below control` at 4 runs under the rule before issue 36) goes
//!   to `max` without a verdict, one array per look (4, then 9, 13, 20 and 30 runs per cell);
//! - a leak in the same noise, submitted with `run --detach`, is taken on by `hwr-exp wait`,
//!   which judges each round and submits the next, and is `above control` before `max`.
//!
//! Before issue 36 item 2 both were refused at check time (exit 2, no bundle).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::support::slurm::{
    Cleanup, PrivateCluster, PrivateClusterSpec, arrays, hwr_on, published_bundle, spawn, wait_until,
};
use crate::support::{code, json, repo, run_records, stderr, stdout};

/// The noise probe against `reuse` on Slurm under `{ min = 4, max = 30, until = "decided" }`.
fn manifest(dir: &Path, mode: &str, seed: u32) -> std::path::PathBuf {
    std::fs::write(dir.join("noise.sh"), crate::adaptive::NOISE).unwrap();
    let text = format!(
        r#"format = 1
[experiment]
name = "noise-{mode}"
[command]
argv = ["sh", "noise.sh", "{{mode}}"]
[matrix]
mode = ["{mode}", "reuse"]
[schedule]
repetitions = {{ min = 4, max = 30, until = "decided" }}
jobs = 4
[isolation]
timeout = "60s"
env = {{ SEED = "{seed}" }}
[executor]
kind = "slurm"
"#
    );
    crate::support::write_manifest(dir, &text)
}

/// bundle.json `adaptive` cell of `mode`.
fn cell<'a>(adaptive: &'a serde_json::Value, mode: &str) -> &'a serde_json::Value {
    adaptive["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"]["mode"] == mode)
        .unwrap_or_else(|| panic!("no cell {mode} in {adaptive:#}"))
}

/// The plan index each array starts at, in submission order, and its script's name.
fn array_starts(bundle: &Path) -> Vec<(usize, String)> {
    arrays(bundle)
        .iter()
        .map(|a| {
            // `--array=8-17%4`: task ids are plan indices minus the offset.
            let first: usize = a
                .array
                .split(|ch: char| !ch.is_ascii_digit())
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("array spec {}", a.array));
            (a.offset + first, a.script.clone())
        })
        .collect()
}

/// The checks every finished adaptive Slurm bundle passes: `runs` per cell for `mode` and the
/// control, one array per look (starting where each round's runs start in plan.json), every run
/// recorded ok on a node of the cluster, and `verify`, `report` and `list` read it.
fn check_bundle(dir: &Path, c: &PrivateCluster, bundle: &Path, mode: &str, runs: u64) -> String {
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info:#}");
    let a = &info["adaptive"];
    assert_eq!(a["design"]["looks"], serde_json::json!([9, 13, 20, 30]), "{a:#}");
    assert_eq!(cell(a, mode)["runs"], runs, "{a:#}");
    assert_eq!(cell(a, "reuse")["runs"], runs, "{a:#}");
    assert_eq!(info["planned-runs"], 2 * runs, "{info:#}");
    // Rounds: 4 runs per cell, then up to each look reached; each round is one array.
    let looks: Vec<u64> = [4, 9, 13, 20, 30].into_iter().filter(|&l| l <= runs).collect();
    // Two cells: the round after `prev` runs per cell starts at plan index 2 * prev.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            looks
                .iter()
                .skip(1)
                .zip(&looks)
                .map(|(_, &prev)| 2 * prev as usize),
        )
        .collect();
    let recorded = array_starts(bundle);
    assert_eq!(
        recorded.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        starts,
        "one array per round: {recorded:?}"
    );
    for (k, (_, script)) in recorded.iter().enumerate() {
        assert_eq!(script, &format!("slurm/array-{k}.sbatch"));
        assert!(bundle.join(script).is_file(), "{script}");
    }
    let records = run_records(bundle);
    assert_eq!(records.len() as u64, 2 * runs);
    let nodes: BTreeSet<&str> = records.iter().filter_map(|r| r["node"].as_str()).collect();
    assert!(
        !nodes.is_empty() && nodes.iter().all(|n| ["n1", "n2"].contains(n)),
        "{nodes:?}"
    );
    assert!(records.iter().all(|r| r["outcome"] == "ok"));
    assert_eq!(info["counts"], serde_json::json!({"ok": 2 * runs}), "{info:#}");
    let conf = c.conf();
    let b = bundle.to_str().unwrap();
    let verify = hwr_on(dir, Some(&conf), &["verify", b]);
    assert_eq!(code(&verify), 0, "{}{}", stdout(&verify), stderr(&verify));
    let list = hwr_on(dir, Some(&conf), &["list", dir.join("results").to_str().unwrap()]);
    assert_eq!(code(&list), 0, "{}", stderr(&list));
    assert!(stdout(&list).contains("complete"), "{}", stdout(&list));
    let report = hwr_on(dir, Some(&conf), &["report", b, "--wide"]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    stdout(&report)
}

#[test]
fn adaptive_rounds_on_slurm_are_arrays_noise_stops_without_a_verdict_and_a_leak_is_found_early() {
    let Some(c) = PrivateCluster::start(PrivateClusterSpec {
        nodes: 2,
        cpus: 2,
        extra_conf: "",
    }) else {
        return;
    };
    let conf = c.conf();

    // Noise alone: every look without a verdict, to max.
    let repo_flat = repo();
    let dir = repo_flat.path();
    let m = manifest(dir, "flat", 8);
    let check = hwr_on(dir, Some(&conf), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    let out = hwr_on(dir, Some(&conf), &["run", m.to_str().unwrap()]);
    let bundle = published_bundle(dir, "noise-flat");
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("adaptive repetitions: to the look at 9 runs")
            && stderr(&out).contains("submitted the round as slurm job(s)"),
        "{}",
        stderr(&out)
    );
    let report = check_bundle(dir, &c, &bundle, "flat", 30);
    let a = &json(&bundle.join("bundle.json"))["adaptive"];
    assert_eq!(cell(a, "flat")["verdict"], "no detectable difference", "{a:#}");
    assert_eq!(cell(a, "flat")["stopping-reason"], "max reached", "{a:#}");
    assert_eq!(a["stopping-reason"], "max reached", "{a:#}");
    assert!(
        !report.contains("above control") && !report.contains("below control"),
        "{report}"
    );
    assert!(report.contains("design: group-sequential"), "{report}");

    // A leak in the noise, detached: `wait` judges each round and submits the next.
    let repo_leak = repo();
    let dir = repo_leak.path();
    let m = manifest(dir, "leak", 8);
    let out = hwr_on(dir, Some(&conf), &["run", m.to_str().unwrap(), "--detach"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = published_bundle(dir, "noise-leak");
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    assert!(
        stderr(&out).contains("`hwr-exp wait") && stderr(&out).contains("submits the further rounds"),
        "{}",
        stderr(&out)
    );
    assert_eq!(arrays(&bundle).len(), 1, "only the first round is submitted");
    let out = hwr_on(dir, Some(&conf), &["wait", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let a = json(&bundle.join("bundle.json"))["adaptive"].clone();
    let leak = cell(&a, "leak");
    assert_eq!(leak["verdict"], "above control", "{a:#}");
    assert_eq!(leak["stopping-reason"], "decided", "{a:#}");
    let runs = leak["runs"].as_u64().unwrap();
    assert!(runs < 30, "decided before max: {a:#}");
    let report = check_bundle(dir, &c, &bundle, "leak", runs);
    assert!(
        report.contains(&format!(
            "mode=leak: {runs} runs, above control; stopped: decided"
        )),
        "{report}"
    );
    assert!(arrays(&bundle).len() >= 2, "{:?}", arrays(&bundle));
}

#[test]
fn resume_of_an_adaptive_slurm_bundle_cancelled_mid_rule_continues_it_to_the_end() {
    let Some(c) = PrivateCluster::start(PrivateClusterSpec {
        nodes: 2,
        cpus: 2,
        extra_conf: "",
    }) else {
        return;
    };
    let conf = c.conf();
    let repo = repo();
    let dir = repo.path();
    let m = manifest(dir, "flat", 1);
    let child = spawn(dir, Some(&conf), &["run", m.to_str().unwrap(), "--quiet"]);
    let bundle = published_bundle(dir, "noise-flat");
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    // The second look's round is submitted: the rule is under way, rounds remain.
    wait_until(Duration::from_secs(300), "the second round's array", || {
        arrays(&bundle).len() >= 2
    });
    let out = hwr_on(dir, Some(&conf), &["cancel", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted", "{info:#}");
    assert!(info["adaptive"]["stopping-reason"].is_null(), "{info:#}");
    let before = arrays(&bundle).len();

    let out = hwr_on(dir, Some(&conf), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info:#}");
    let a = &info["adaptive"];
    assert_eq!(a["stopping-reason"], "max reached", "{a:#}");
    assert_eq!(cell(a, "flat")["runs"], 30, "{a:#}");
    assert_eq!(cell(a, "flat")["verdict"], "no detectable difference", "{a:#}");
    assert_eq!(info["planned-runs"], 60, "{info:#}");
    assert_eq!(info["counts"], serde_json::json!({"ok": 60}), "{info:#}");
    assert!(arrays(&bundle).len() > before, "{:?}", arrays(&bundle));
    let records = run_records(&bundle);
    assert_eq!(records.len(), 60);
    assert!(records.iter().all(|r| r["outcome"] == "ok"));
    let verify = hwr_on(dir, Some(&conf), &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}{}", stdout(&verify), stderr(&verify));
}
