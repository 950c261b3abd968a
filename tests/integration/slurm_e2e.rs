//! `hwr-exp run` with the Slurm executor end to end against a real cluster (DESIGN 8): submission,
//! array tasks running `hwr-exp slurm-task`, waiting, lost tasks, resume, Ctrl-C, detach/wait,
//! arrays split by MaxArraySize, timeouts inside a task.
//!
//! Needs a cluster the environment points at (`SLURM_CONF`; start the one-node test cluster with
//! `../shared/slurm/start-slurm.sh`, then `source $SLURM_TEST_DIR/slurm.env`). Without one every
//! test prints a note and passes, unless `HWR_REQUIRE_SLURM=1` (set by `.ci/run`): then they fail.
//! The tests take one lock each, so that the throttle test sees the cluster's CPUs free.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::support::slurm::{
    Cleanup, find_submitted_bundle, job_ids, printed_bundle, spawn, task_map, wait_until,
};
use crate::support::{Check, need};
use crate::support::{cluster, code, hwr, json, run_records, stderr, write_manifest};
use hwr_exp::slurm::{self, SlurmClient, TaskState};

/// One lock for every test on the shared cluster (also taken by `slurm_kills`), so that the
/// throttle test sees the cluster's CPUs free.
pub(crate) static CLUSTER: Mutex<()> = Mutex::new(());

const PROBE: &str = r#"
format = 1
[experiment]
name = "probe-slurm"
[command]
argv = ["{hwr-exp}", "probe", "safetensors-retention", "--mode", "{mode}", "--tensor-elements",
        "{elements}", "--iterations", "2000", "--sample-every", "500", "--warmup", "10"]
output = "{mode}-{elements}-{repetition}.json"
[matrix]
mode = ["get_tensor", "reuse"]
elements = [16, 64]
[schedule]
repetitions = 2
jobs = 2
[isolation]
timeout = "60s"
"#;

#[test]
fn probe_matrix_through_slurm_has_the_outputs_and_report_columns_of_a_local_run() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), PROBE);
    let m = m.to_str().unwrap();

    let local = hwr(dir.path(), &["run", m, "--quiet", "--executor", "local"]);
    assert_eq!(code(&local), 0, "{}", stderr(&local));
    let local = printed_bundle(dir.path(), &local);
    let remote = hwr(dir.path(), &["run", m, "--quiet", "--executor", "slurm"]);
    let remote_bundle = Cleanup::new(&printed_bundle(dir.path(), &remote), None);
    assert_eq!(code(&remote), 0, "{}", stderr(&remote));
    let remote = remote_bundle.bundle().to_path_buf();

    let info = json(&remote.join("bundle.json"));
    assert_eq!(info["status"], "complete");
    assert_eq!(info["executor"], "slurm");
    assert_eq!(info["counts"]["ok"], 8, "{info}");
    assert!(remote.join("slurm/array-0.sbatch").is_file());
    let (l, r) = (run_records(&local), run_records(&remote));
    assert_eq!(l.len(), 8);
    assert_eq!(r.len(), 8);
    // The cluster may have one node or several (CI: n1, n2): each run names its node, and
    // each node that ran a run has its host facts in hosts/<node>.json.
    let nodes: BTreeSet<String> = r
        .iter()
        .map(|b| {
            b["node"]
                .as_str()
                .unwrap_or_else(|| panic!("no node: {b}"))
                .to_string()
        })
        .collect();
    let hosts: BTreeSet<String> = std::fs::read_dir(remote.join("hosts"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    assert_eq!(nodes, hosts);
    for (a, b) in l.iter().zip(&r) {
        assert_eq!(a["run-id"], b["run-id"]);
        assert_eq!(b["outcome"], "ok");
        assert!(a.get("node").is_none(), "a local run names no node: {a}");
        assert!(b["hostname"].is_string(), "{b}");
        assert!(b["slurm"]["array-task-id"].is_u64(), "{b}");
        assert!(b["slurm"]["array-job-id"].is_u64(), "{b}");
        // Same probe output document shape as locally.
        let out = |bundle: &Path, rec: &serde_json::Value| {
            json(
                &bundle
                    .join("runs")
                    .join(rec["run-id"].as_str().unwrap())
                    .join(rec["output"].as_str().unwrap()),
            )
        };
        let (oa, ob) = (out(&local, a), out(&remote, b));
        let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>();
        assert_eq!(keys(&oa), keys(&ob));
        assert_eq!(oa["arguments"], ob["arguments"]);
        assert_eq!(ob["completed"], true);
    }
    let header = |bundle: &Path| {
        let out = hwr(
            dir.path(),
            &["report", bundle.to_str().unwrap(), "--format", "csv"],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    // compare names the executor and node differences of a Slurm bundle against a local one.
    let out = hwr(
        dir.path(),
        &[
            "compare",
            local.to_str().unwrap(),
            remote.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fact = |name: &str| {
        doc["differences"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["fact"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} difference: {doc:#}"))
    };
    assert_eq!(
        (fact("executor")["a"].clone(), fact("executor")["b"].clone()),
        ("local".into(), "slurm".into())
    );
    let listed = nodes.iter().cloned().collect::<Vec<_>>().join(", ");
    assert_eq!(fact("nodes")["b"], listed.as_str());
    assert!(fact("nodes")["a"].as_str().unwrap().contains("local runs"));
    let table = hwr(
        dir.path(),
        &["compare", local.to_str().unwrap(), remote.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("executor") && text.contains(&listed), "{text}");
    // Same columns as locally, plus `node` after the matrix keys when the runs span nodes.
    let remote_header = header(&remote);
    let expected = if nodes.len() > 1 {
        header(&local).replace(",elements,", ",elements,node,")
    } else {
        header(&local)
    };
    assert_eq!(expected, remote_header);
}

/// Start and end of each run as milliseconds, from run.json `start`/`end`.
fn intervals(bundle: &Path) -> Vec<(i64, i64)> {
    let ms = |s: &serde_json::Value| {
        s.as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_millisecond()
    };
    run_records(bundle)
        .iter()
        .map(|r| (ms(&r["start"]), ms(&r["end"])))
        .collect()
}

/// The most runs whose [start, end) intervals overlap at one instant.
fn max_overlap(runs: &[(i64, i64)]) -> usize {
    let mut events: Vec<(i64, i32)> = runs.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn jobs_two_never_runs_more_than_two_tasks_at_once() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        r#"
format = 1
[experiment]
name = "throttle"
[command]
shell = "sleep 1.5"
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2, 3, 4, 5, 6]
[schedule]
jobs = 2
[executor]
kind = "slurm"
"#,
    );
    let out = hwr(dir.path(), &["run", m.to_str().unwrap(), "--quiet"]);
    let bundle = Cleanup::new(&printed_bundle(dir.path(), &out), None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let runs = intervals(bundle.bundle());
    assert_eq!(runs.len(), 6);
    let most = max_overlap(&runs);
    // The cluster has room for 4 one-CPU tasks: without the throttle more would overlap.
    assert!(most <= 2, "{most} runs overlapped: {runs:?}");
    assert_eq!(most, 2, "the throttle should still let 2 run at once: {runs:?}");
}

/// A manifest whose run `n = 1` blocks until the file `release` exists in the bundle folder (or
/// 120 s pass); `n = 2` ends at once. Runs execute in their run folder, `<bundle>/runs/<run-id>`.
const BLOCKING: &str = r#"
format = 1
[experiment]
name = "blocking"
[command]
shell = "i=0; while [ {n} = 1 ] && [ ! -e ../../release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done"
workdir = "{run-dir}"
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2]
[isolation]
timeout = "300s"
[executor]
kind = "slurm"
"#;

/// Waits until the task of plan index `index` of `bundle` is RUNNING in squeue.
fn wait_running(client: &SlurmClient, bundle: &Path, index: usize) -> slurm::TaskKey {
    let map = task_map(bundle);
    let key = map.task(index).unwrap();
    wait_until(Duration::from_secs(60), "the task to run", || {
        client
            .queue(&map.job_ids())
            .ok()
            .and_then(|s| s.get(key).map(|e| e.state == TaskState::Running))
            .unwrap_or(false)
    });
    key
}

#[test]
fn a_task_cancelled_with_scancel_is_lost_with_the_reason_and_resume_completes_it() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), BLOCKING);
    let child = spawn(dir.path(), None, &["run", m.to_str().unwrap(), "--quiet"]);
    let bundle = find_submitted_bundle(dir.path(), "blocking");
    let _cleanup = Cleanup::new(&bundle, None);
    let key = wait_running(&client, &bundle, 0);
    client.cancel(&[slurm::CancelTarget::Task(key)]).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let records = run_records(&bundle);
    let lost = &records[0];
    assert_eq!(lost["termination"], "lost", "{lost}");
    assert_eq!(lost["outcome"], "lost");
    let reason = lost["lost-reason"].as_str().unwrap();
    assert!(reason.contains("CANCELLED"), "{reason}");
    assert_eq!(records[1]["outcome"], "ok");
    assert_eq!(json(&bundle.join("bundle.json"))["counts"]["lost"], 1);
    let report = hwr(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "csv"],
    );
    assert!(String::from_utf8_lossy(&report.stdout).contains("lost"));

    // Resume submits only run 0 (`--array=0`), and it now finishes at once.
    std::fs::write(bundle.join("release"), "").unwrap();
    let out = hwr(dir.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete");
    assert_eq!(info["counts"]["ok"], 2, "{info}");
    let arrays = info["slurm"]["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 2);
    assert_eq!(arrays[1]["array"], "0%1");
    assert!(bundle.join("slurm/array-1.sbatch").is_file());
    assert_eq!(run_records(&bundle)[0]["termination"], "exited");
}

#[test]
fn ctrl_c_while_waiting_cancels_the_arrays_and_marks_the_bundle_interrupted() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), BLOCKING);
    let child = spawn(dir.path(), None, &["run", m.to_str().unwrap(), "--quiet"]);
    let bundle = find_submitted_bundle(dir.path(), "blocking");
    let _cleanup = Cleanup::new(&bundle, None);
    wait_running(&client, &bundle, 0);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let snapshot = client.queue(&job_ids(&bundle)).unwrap();
    assert!(!snapshot.any_active(), "tasks left: {snapshot:?}");
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");
}

#[test]
fn detach_then_wait_gives_a_complete_bundle() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), PROBE);
    let out = hwr(
        dir.path(),
        &["run", m.to_str().unwrap(), "--executor", "slurm", "--detach"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = printed_bundle(dir.path(), &out);
    let _cleanup = Cleanup::new(&bundle, None);
    let ids = job_ids(&bundle);
    assert_eq!(ids.len(), 1);
    assert!(stderr(&out).contains(&ids[0].to_string()), "{}", stderr(&out));
    // Returned at once: a runner that waited for the runs would have finished the bundle (a
    // state, not a time bound a loaded machine could break).
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "running");
    // No process holds the lock, but the tasks are queued: `list` says running, with counts.
    let list = hwr(dir.path(), &["list", "--format", "json"]);
    assert_eq!(code(&list), 0, "{}", stderr(&list));
    let entries: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let slurm = &entries[0]["slurm"];
    assert_eq!(slurm["submitted"], 8, "{entries}");
    assert!(slurm["finished"].as_u64().unwrap() <= 8);
    if slurm["finished"].as_u64() != Some(8) {
        assert_eq!(entries[0]["status"], "running", "{entries}");
    }

    let out = hwr(dir.path(), &["wait", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete");
    assert_eq!(info["counts"]["ok"], 8, "{info}");
    assert!(info["finished"].is_string());
    let prov = json(&bundle.join("provenance.json"));
    assert!(prov.get("drift").is_some(), "provenance after the runs: {prov}");
    // A second wait has nothing to wait for.
    let again = hwr(dir.path(), &["wait", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&again), 2, "{}", stderr(&again));
}

#[test]
fn a_plan_larger_than_max_array_size_is_split_into_arrays_released_in_order() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let max = client.array_limits().unwrap().max_array_size as usize;
    let small = Check::new(
        "a Slurm cluster with MaxArraySize <= 64",
        "start the cluster with SLURM_EXTRA_CONF=MaxArraySize=11",
        || {
            if max > 64 {
                Err(format!("MaxArraySize is {max}"))
            } else {
                Ok(())
            }
        },
    )
    .required_by("HWR_REQUIRE_SLURM");
    if need(small).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runs = max + 3;
    let m = write_manifest(
        dir.path(),
        &format!(
            r#"
format = 1
[experiment]
name = "split"
[command]
argv = ["true"]
output = "out-{{n}}.txt"
output-format = "text"
[matrix]
n = [{}]
[schedule]
jobs = 4
[executor]
kind = "slurm"
"#,
            (0..runs).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
        ),
    );
    let plan = hwr(dir.path(), &["plan", m.to_str().unwrap(), "--format", "sbatch"]);
    assert_eq!(code(&plan), 0, "{}", stderr(&plan));
    let text = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(text.matches("#!/bin/bash").count(), 2, "{text}");
    assert!(
        text.contains(&format!("#SBATCH --array=0-{}%4", max - 1)),
        "{text}"
    );
    assert!(text.contains("#SBATCH --array=0-2%4"), "{text}");
    assert!(
        text.contains(&format!("index=$(({max} + SLURM_ARRAY_TASK_ID))")),
        "{text}"
    );
    assert!(!dir.path().join("results").exists(), "plan writes nothing");

    let out = hwr(dir.path(), &["run", m.to_str().unwrap(), "--quiet"]);
    let bundle = Cleanup::new(&printed_bundle(dir.path(), &out), None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.bundle().to_path_buf();
    let info = json(&bundle.join("bundle.json"));
    let arrays = info["slurm"]["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 2, "{info}");
    assert_eq!(arrays[1]["offset"], max);
    assert_eq!(info["counts"]["ok"], runs, "{info}");
    let script = std::fs::read_to_string(bundle.join("slurm/array-1.sbatch")).unwrap();
    // Submitted held and released by the waiter: no array waits for the previous one's end.
    assert!(!script.contains("--dependency"), "{script}");
    // Every run executed once, by the task its index maps to.
    for r in run_records(&bundle) {
        let i = r["index"].as_u64().unwrap() as usize;
        let a = if i < max { &arrays[0] } else { &arrays[1] };
        assert_eq!(r["slurm"]["array-job-id"], a["job-id"]);
        assert_eq!(
            r["slurm"]["array-task-id"].as_u64().unwrap() as usize,
            i - a["offset"].as_u64().unwrap() as usize
        );
    }
}

#[test]
fn a_timeout_inside_the_task_is_recorded_as_timeout_not_lost() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        r#"
format = 1
[experiment]
name = "timeout"
[command]
argv = ["sleep", "{s}"]
output = "out-{s}.txt"
output-format = "text"
[matrix]
s = [30]
[isolation]
timeout = "1s"
grace = "1s"
[executor]
kind = "slurm"
"#,
    );
    let out = hwr(dir.path(), &["run", m.to_str().unwrap(), "--quiet"]);
    let bundle = Cleanup::new(&printed_bundle(dir.path(), &out), None);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let records = run_records(bundle.bundle());
    assert_eq!(records[0]["termination"], "timeout", "{}", records[0]);
    assert_eq!(records[0]["outcome"], "timeout");
    assert!(records[0].get("lost-reason").is_none());
}

#[test]
fn cancel_of_a_detached_bundle_cancels_its_arrays_and_marks_it_interrupted() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), BLOCKING);
    let out = hwr(dir.path(), &["run", m.to_str().unwrap(), "--detach", "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = printed_bundle(dir.path(), &out);
    let _cleanup = Cleanup::new(&bundle, None);
    wait_running(&client, &bundle, 0);
    let out = hwr(dir.path(), &["cancel", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let snapshot = client.queue(&job_ids(&bundle)).unwrap();
    assert!(!snapshot.any_active(), "tasks left: {snapshot:?}");
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted", "{info}");
    // The cancelled run has no run.json: resume would submit it again.
    assert!(
        !bundle
            .join("runs")
            .join(run_id_of(&bundle, 0))
            .join("run.json")
            .exists()
    );
}

/// The run id of plan index `index` of `bundle`.
fn run_id_of(bundle: &Path, index: usize) -> String {
    json(&bundle.join("plan.json"))["runs"][index]["run-id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_slurm_executor_assigns_no_cpus_on_the_submitter_and_refuses_fixed_lists() {
    // No cluster needed: these are decided before anything is submitted.
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        r#"
format = 1
[experiment]
name = "wide"
[command]
argv = ["true"]
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2, 3]
[schedule]
jobs = 64
[isolation]
cpus-per-run = 4
[executor]
kind = "slurm"
"#,
    );
    // 64 x 4 CPUs is far more than this machine has: a throttle and an allocation on Slurm, no error.
    let out = hwr(dir.path(), &["plan", m.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for r in plan["runs"].as_array().unwrap() {
        assert_eq!(r["cpus"], serde_json::json!([]), "{r}");
    }
    let out = hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The same manifest run locally: the allowed-CPU check applies again.
    let out = hwr(
        dir.path(),
        &["run", m.to_str().unwrap(), "--executor", "local", "--quiet"],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("cpus-per-run"), "{}", stderr(&out));

    let local = write_manifest(
        dir.path(),
        r#"
format = 1
[experiment]
name = "fixed"
[command]
argv = ["true"]
output-format = "text"
[isolation]
cpus = [0]
"#,
    );
    let out = hwr(
        dir.path(),
        &["run", local.to_str().unwrap(), "--executor", "slurm", "--quiet"],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("experiment.toml:") && err.contains("slurm executor"),
        "{err}"
    );
    let out = hwr(
        dir.path(),
        &["run", local.to_str().unwrap(), "--detach", "--quiet"],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--detach needs the slurm executor"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("results").exists(), "nothing written");
}
