//! `[executor] kind = "ray"` end to end against a real two-node Ray cluster on this machine
//! (DESIGN 8, docs/ray.md): runs spread over both nodes and name them, a node killed mid-plan
//! loses its runs (`lost`, naming the node) and `resume` finishes them, `run --detach` then
//! `wait`, and `cancel`. Each test starts its own cluster ([`RayCluster`]); without Ray they
//! print a note and pass, unless `HWR_REQUIRE_RAY=1` (set by `.ci/run`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::support::ray::{RayCluster, wait_for};
use crate::support::{code, json, run_records, stderr, write_manifest};

/// One cluster at a time: each has two nodes of 2 CPUs on a small machine.
static CLUSTERS: Mutex<()> = Mutex::new(());

/// A manifest of `runs` runs of `sleep SECONDS` writing a JSON output, on Ray.
fn manifest(name: &str, runs: u32, seconds: u32) -> String {
    format!(
        r#"
format = 1
[experiment]
name = "{name}"
[command]
shell = "sleep {seconds}; echo '{{{{\"r\": {{repetition}}}}}}' > {{run-dir}}/out-{{repetition}}.json"
output = "out-{{repetition}}.json"
[schedule]
repetitions = {runs}
jobs = {runs}
[executor]
kind = "ray"
"#
    )
}

/// The one bundle under `dir/results/<name>/`.
fn bundle_of(dir: &Path, name: &str) -> PathBuf {
    let parent = dir.join("results").join(name);
    let mut found: Vec<PathBuf> = std::fs::read_dir(&parent)
        .unwrap_or_else(|e| panic!("{}: {e}", parent.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// The nodes of the tasks that started (`ray/started/<i>.json`).
fn started_nodes(bundle: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(bundle.join("ray/started")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let p = e.ok()?.path();
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
            Some(v["node"].as_str()?.to_string())
        })
        .collect()
}

fn nodes_of(records: &[serde_json::Value]) -> BTreeSet<String> {
    records
        .iter()
        .map(|r| {
            r["node"]
                .as_str()
                .unwrap_or_else(|| panic!("no node: {r}"))
                .to_string()
        })
        .collect()
}

#[test]
fn runs_spread_over_both_nodes_each_naming_its_node_with_host_facts_per_node() {
    let _one = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = RayCluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), &manifest("ray-spread", 8, 2));
    let out = cluster
        .hwr(dir.path())
        .args(["run", m.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle_of(dir.path(), "ray-spread");
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["executor"], "ray");
    assert_eq!(info["counts"]["ok"], 8, "{info}");
    let records = run_records(&bundle);
    assert_eq!(records.len(), 8);
    let expected: BTreeSet<String> = [&cluster.head, &cluster.second]
        .iter()
        .map(|id| RayCluster::node_name(id))
        .collect();
    // 8 runs of 2 s with 4 CPUs in the cluster: both nodes take some.
    assert_eq!(nodes_of(&records), expected, "{records:?}");
    for node in &expected {
        assert!(
            bundle.join("hosts").join(format!("{node}.json")).is_file(),
            "host facts of {node}"
        );
    }
    for r in &records {
        assert!(r["slurm"].is_null(), "no Slurm ids on Ray: {r}");
        assert_eq!(
            r["cpus-effective"].as_array().map(Vec::len),
            Some(1),
            "pinned to one CPU: {r}"
        );
    }
    assert!(bundle.join("ray/driver-0.json").is_file());
}

#[test]
fn a_killed_node_loses_its_runs_naming_it_and_resume_finishes_them_on_the_other() {
    let _one = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut cluster) = RayCluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), &manifest("ray-kill", 4, 20));
    let mut run = cluster
        .hwr(dir.path())
        .args(["run", m.to_str().unwrap(), "--quiet"])
        .spawn()
        .unwrap();
    let second = RayCluster::node_name(&cluster.second);
    let mut bundle = None;
    wait_for(
        Duration::from_secs(60),
        "a run started on the second node",
        || {
            let Ok(b) = std::fs::read_dir(dir.path().join("results/ray-kill")) else {
                return false;
            };
            let Some(b) = b
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.join("ray").is_dir())
            else {
                return false;
            };
            let found = started_nodes(&b).contains(&second);
            bundle = Some(b);
            found
        },
    );
    let bundle = bundle.unwrap();
    let answer = cluster.kill_second();
    assert!(answer.contains("killed"), "{answer}");
    let status = run.wait().unwrap();
    // Lost runs are runs that did not end ok: exit 1.
    assert_eq!(status.code(), Some(1));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    let records = run_records(&bundle);
    let lost: Vec<&serde_json::Value> = records.iter().filter(|r| r["outcome"] == "lost").collect();
    assert!(!lost.is_empty(), "{records:?}");
    for r in &lost {
        assert_eq!(r["node"], second.as_str(), "{r}");
        let reason = r["lost-reason"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(reason.starts_with("ray: "), "{reason}");
        assert!(reason.contains(&second), "names the node: {reason}");
    }
    for r in records.iter().filter(|r| r["outcome"] != "lost") {
        assert_eq!(r["outcome"], "ok", "{r}");
        assert_eq!(r["node"], RayCluster::node_name(&cluster.head).as_str(), "{r}");
    }

    let out = cluster
        .hwr(dir.path())
        .args(["resume", bundle.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 4, "{info}");
    assert!(info["counts"].get("lost").is_none(), "{info}");
    let head = RayCluster::node_name(&cluster.head);
    assert!(run_records(&bundle).iter().all(|r| r["node"] == head.as_str()));
    assert!(
        bundle.join("ray/driver-1.json").is_file(),
        "resume started a second driver"
    );
}

#[test]
fn a_detached_bundle_is_waited_for_and_another_is_cancelled_leaving_no_task_behind() {
    let _one = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = RayCluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), &manifest("ray-detach", 3, 1));
    let out = cluster
        .hwr(dir.path())
        .args(["run", m.to_str().unwrap(), "--detach"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle_of(dir.path(), "ray-detach");
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "running");
    let out = cluster
        .hwr(dir.path())
        .args(["wait", bundle.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 3, "{info}");

    let m = write_manifest(dir.path(), &manifest("ray-cancel", 3, 120));
    let out = cluster
        .hwr(dir.path())
        .args(["run", m.to_str().unwrap(), "--detach"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle_of(dir.path(), "ray-cancel");
    wait_for(Duration::from_secs(60), "three tasks started", || {
        started_nodes(&bundle).len() == 3
    });
    // Detached, no waiter holds the lock, but the driver runs: `list` says running.
    let list = cluster
        .hwr(dir.path())
        .args(["list", "results", "--format", "json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["experiment"] == "ray-cancel")
        .unwrap_or_else(|| panic!("{rows}"));
    assert_eq!(row["status"], "running", "{row}");
    // The resume rule: no second driver while the first runs.
    let refused = cluster
        .hwr(dir.path())
        .args(["resume", bundle.to_str().unwrap()])
        .output()
        .unwrap();
    assert_ne!(code(&refused), 0);
    assert!(stderr(&refused).contains("still runs"), "{}", stderr(&refused));
    let out = cluster
        .hwr(dir.path())
        .args(["cancel", bundle.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted", "{info}");
    assert!(run_records(&bundle).is_empty(), "no run finished");
    // Every task's hwr-exp and its run are gone: no process names the bundle any more.
    let needle = bundle.to_string_lossy().into_owned();
    wait_for(Duration::from_secs(30), "no process of the bundle left", || {
        !std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
            })
    });
}

#[test]
fn the_task_entry_point_without_an_index_says_where_one_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::support::hwr_command(dir.path())
        .args(["task", "/nowhere/bundle"])
        .env_remove("HWR_TASK_INDEX")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no task index: give --index N, or set HWR_TASK_INDEX or JOB_COMPLETION_INDEX"),
        "{}",
        stderr(&out)
    );
    let out = crate::support::hwr_command(dir.path())
        .args(["task", "/nowhere/bundle"])
        .env("JOB_COMPLETION_INDEX", "x")
        .env_remove("HWR_TASK_INDEX")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("JOB_COMPLETION_INDEX=\"x\" is not a task index"),
        "{}",
        stderr(&out)
    );
}

/// Adaptive repetitions on Ray (issue 39 item 2): a round, then the next, each one driver of its
/// own, judged by the same group-sequential design as the local runner and Slurm. The noise
/// probe of `adaptive.rs` with a leak (8 KiB per 1000 iterations), submitted with `run
/// --detach`: `hwr-exp wait` judges each round and submits the next, and the leak is `above
/// control` before `max`. Before, `check` refused adaptive repetitions on Ray (exit 2).
#[test]
fn adaptive_rounds_on_ray_are_drivers_and_wait_carries_the_rule_to_a_verdict() {
    let _one = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = RayCluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("noise.sh"), crate::adaptive::NOISE).unwrap();
    let m = write_manifest(
        dir.path(),
        r#"format = 1
[experiment]
name = "ray-adaptive"
[command]
argv = ["sh", "noise.sh", "{mode}"]
[matrix]
mode = ["leak", "reuse"]
[schedule]
repetitions = { min = 4, max = 30, until = "decided" }
jobs = 4
[isolation]
timeout = "60s"
env = { SEED = "8" }
[executor]
kind = "ray"
"#,
    );
    let check = cluster
        .hwr(dir.path())
        .args(["check", m.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    let out = cluster
        .hwr(dir.path())
        .args(["run", m.to_str().unwrap(), "--detach"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("submits the further rounds"),
        "{}",
        stderr(&out)
    );
    let bundle = bundle_of(dir.path(), "ray-adaptive");
    let out = cluster
        .hwr(dir.path())
        .args(["wait", bundle.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("as ray driver"), "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info:#}");
    let a = &info["adaptive"];
    let leak = a["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"]["mode"] == "leak")
        .unwrap_or_else(|| panic!("{a:#}"));
    assert_eq!(leak["verdict"], "above control", "{a:#}");
    assert_eq!(leak["stopping-reason"], "decided", "{a:#}");
    let runs = leak["runs"].as_u64().unwrap();
    assert!(
        (9..30).contains(&runs),
        "more than one round, decided before max: {a:#}"
    );
    assert_eq!(info["planned-runs"], 2 * runs, "{info:#}");
    // One driver per round: the first round (4 runs per cell), then one per look reached.
    let drivers = std::fs::read_dir(bundle.join("ray"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().to_string_lossy().into_owned();
            name.starts_with("driver-") && name.ends_with(".json") && !name.ends_with(".spec.json")
        })
        .count();
    assert!(drivers >= 2, "{drivers} drivers");
    let records = run_records(&bundle);
    assert_eq!(records.len() as u64, 2 * runs);
    assert!(records.iter().all(|r| r["outcome"] == "ok"), "{records:?}");
    assert!(!nodes_of(&records).is_empty());
    let verify = cluster
        .hwr(dir.path())
        .args(["verify", bundle.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&verify), 0, "{}", stderr(&verify));
}
