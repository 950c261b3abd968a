//! The Slurm executor across nodes (issue 23 items 3, 4 and 6), each on a private two-node
//! cluster (`support::slurm::PrivateCluster`: nodes n1 and n2, each its own slurmd in its own
//! UTS namespace, one CPU each) so that killing or draining a node never touches the shared
//! cluster:
//!
//! - a node lost mid-array: its in-flight run is `lost` naming the node, `resume` completes it
//!   on the other node, both nodes are in hosts/ and in every report format;
//! - `[executor] nodes` / `exclude-nodes` pin the tasks (`--nodelist` / `--exclude` in the
//!   recorded script, run.json `node`);
//! - a forever-pending array says why (Slurm's pending reason) in `wait`'s progress and `list`;
//! - a request above the partition's `MaxTime` or `MaxMemPerNode` is refused at preflight with
//!   both numbers, before anything is written or submitted.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::slurm::{
    PrivateCluster, PrivateClusterSpec, arrays, find_submitted_bundle, hwr_on, printed_bundle, spawn,
    wait_until,
};
use crate::support::{code, json, run_records, stderr, write_manifest};
use hwr_exp::slurm::{self, SlurmClient, TaskState};

/// A two-node private cluster, one CPU per node (so two tasks at once run on different nodes).
fn two_nodes() -> Option<PrivateCluster> {
    PrivateCluster::start(PrivateClusterSpec {
        nodes: 2,
        cpus: 1,
        extra_conf: "MaxArraySize=11",
    })
}

fn client(c: &PrivateCluster) -> SlurmClient {
    SlurmClient::new().with_conf(c.conf())
}

/// `scontrol ARGS` on cluster `c`, which must succeed.
fn scontrol(c: &PrivateCluster, args: &[&str]) {
    let out = c.command("scontrol").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "scontrol {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Plan index -> node of the tasks squeue shows RUNNING.
fn running_on(client: &SlurmClient, bundle: &Path) -> Vec<(usize, String)> {
    let map = slurm::TaskMap::new(&arrays(bundle)).unwrap();
    let Ok(snapshot) = client.queue(&map.job_ids()) else {
        return Vec::new();
    };
    snapshot
        .tasks
        .iter()
        .filter(|(_, e)| e.state == TaskState::Running)
        .filter_map(|(k, e)| Some((map.index(*k)?, e.nodes.clone()?)))
        .collect()
}

fn run_id(bundle: &Path, index: usize) -> String {
    json(&bundle.join("plan.json"))["runs"][index]["run-id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Kills node `node` of cluster `c` as a power failure would: its slurmd and every process in
/// its UTS namespace (slurmstepd, the task, the run), then tells the controller it is down (it
/// would notice by itself after SlurmdTimeout).
fn kill_node(c: &PrivateCluster, node: &str) {
    let pid: u32 = std::fs::read_to_string(c.dir().join(format!("run/slurmd-{node}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ns = std::fs::read_link(format!("/proc/{pid}/ns/uts")).unwrap();
    let own = std::fs::read_link("/proc/self/ns/uts").unwrap();
    assert_ne!(ns, own, "node {node} has no UTS namespace of its own");
    let in_node = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                name.parse::<u32>().ok()?;
                let zombie = std::fs::read_to_string(format!("/proc/{name}/stat"))
                    .ok()?
                    .rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
                (!zombie && std::fs::read_link(format!("/proc/{name}/ns/uts")).ok()? == ns).then_some(name)
            })
            .collect()
    };
    let victims = in_node();
    assert!(victims.contains(&pid.to_string()), "{victims:?}");
    // A process forked between the scan and the kill (a slurmstepd starting a task) escapes one
    // round: kill until the node's namespace holds no live process.
    let mut left = victims;
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        let _ = Command::new("kill").arg("-9").args(&left).status();
        std::thread::sleep(Duration::from_millis(50));
        left = in_node();
    }
    assert!(
        left.is_empty(),
        "processes of node {node} survive SIGKILL: {left:?}"
    );
    scontrol(
        c,
        &[
            "update",
            &format!("NodeName={node}"),
            "State=DOWN",
            "Reason=node-lost-test",
        ],
    );
}

const GATED: &str = r#"
format = 1
[experiment]
name = "node-loss"
[command]
shell = ": > ../../gate/{run-id}.started; i=0; while [ ! -e ../../gate/{run-id} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo done"
workdir = "{run-dir}"
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2, 3, 4]
[schedule]
jobs = 2
[isolation]
timeout = "300s"
[executor]
kind = "slurm"
"#;

/// Issue 23 item 6: kill one node's slurmd (and everything on that node) mid-array.
#[test]
fn a_node_lost_mid_array_is_recorded_lost_naming_it_and_resume_finishes_on_the_other_node() {
    let Some(c) = two_nodes() else { return };
    let client = client(&c);
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), GATED);
    let child = spawn(
        dir.path(),
        Some(&c.conf()),
        &["run", m.to_str().unwrap(), "--quiet"],
    );
    let bundle = find_submitted_bundle(dir.path(), "node-loss");
    let gate = bundle.join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let open = |i: usize| std::fs::write(gate.join(run_id(&bundle, i)), "").unwrap();

    // Two tasks at once, one CPU per node: one runs on n1, one on n2.
    let mut running = Vec::new();
    wait_until(Duration::from_secs(60), "a task on each node", || {
        running = running_on(&client, &bundle);
        running.iter().map(|(_, n)| n.as_str()).collect::<BTreeSet<_>>() == BTreeSet::from(["n1", "n2"])
    });
    let first_on_n2 = running.iter().find(|(_, n)| n == "n2").unwrap().0;
    // The run on n2 finishes there; the next task takes n2's CPU.
    open(first_on_n2);
    let mut second_on_n2 = None;
    wait_until(Duration::from_secs(60), "a second task on n2", || {
        second_on_n2 = running_on(&client, &bundle)
            .into_iter()
            .find(|(i, n)| n == "n2" && *i != first_on_n2)
            .map(|(i, _)| i);
        second_on_n2.is_some()
    });
    let lost_index = second_on_n2.unwrap();
    // squeue says RUNNING before the task's program starts: kill the node once the run is
    // really running there (it marks its start), or the kill can land before the run exists.
    let started = gate.join(format!("{}.started", run_id(&bundle, lost_index)));
    wait_until(Duration::from_secs(60), "the run on n2 to start", || {
        started.exists()
    });
    kill_node(&c, "n2");
    for i in 0..4 {
        open(i);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    let records = run_records(&bundle);
    assert_eq!(records.len(), 4);
    let lost = &records[lost_index];
    assert_eq!(lost["termination"], "lost", "{lost}");
    assert_eq!(lost["node"], "n2", "{lost}");
    let reason = lost["lost-reason"].as_str().unwrap();
    assert!(reason.contains("n2"), "{reason}");
    assert_eq!(records[first_on_n2]["node"], "n2");
    assert_eq!(records[first_on_n2]["outcome"], "ok");
    for (i, r) in records.iter().enumerate() {
        if i != lost_index && i != first_on_n2 {
            assert_eq!(r["node"], "n1", "{r}");
            assert_eq!(r["outcome"], "ok", "{r}");
        }
    }

    // n2 is down: the resumed task can only run on n1.
    let out = hwr_on(
        dir.path(),
        Some(&c.conf()),
        &["resume", bundle.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 4, "{info}");
    let redone = &run_records(&bundle)[lost_index];
    assert_eq!(redone["node"], "n1", "{redone}");
    assert_eq!(redone["outcome"], "ok");
    assert!(redone["attempt"].as_u64().unwrap() >= 2, "{redone}");

    let hosts: BTreeSet<String> = std::fs::read_dir(bundle.join("hosts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        hosts,
        BTreeSet::from(["n1.json".to_string(), "n2.json".to_string()])
    );
    let facts = json(&bundle.join("hosts/n2.json"));
    assert_eq!(facts["hostname"], "n2", "{facts}");

    // Both nodes in every report format.
    let b = bundle.to_str().unwrap();
    let report = |format: &str| {
        let out = hwr_on(dir.path(), Some(&c.conf()), &["report", b, "--format", format]);
        assert_eq!(code(&out), 0, "{format}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let csv = report("csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "node").expect("a node column");
    let nodes: Vec<String> = lines
        .map(|l| l.split(',').nth(col).unwrap().to_string())
        .collect();
    assert_eq!(
        nodes.iter().filter(|n| *n == "n2").count(),
        1,
        "the run that finished on n2: {csv}"
    );
    assert_eq!(nodes.iter().filter(|n| *n == "n1").count(), 3, "{csv}");
    let doc: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    assert_eq!(doc["nodes"], serde_json::json!(["n1", "n2"]));
    assert_eq!(doc["runs"][first_on_n2]["node"], "n2");
    for format in ["table", "md"] {
        let text = report(format);
        assert!(text.contains("node"), "{format}: {text}");
        assert!(text.contains("n1, n2"), "{format}: {text}");
    }
    let html = report("html");
    assert!(html.contains("<th>node</th>"), "{html}");
    assert!(html.contains("<td>n2</td>"));
}

const QUICK: &str = r#"
format = 1
[experiment]
name = "pinned"
[command]
shell = "echo ok"
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2]
[isolation]
timeout = "30s"
[executor]
kind = "slurm"
"#;

fn script(bundle: &Path) -> String {
    std::fs::read_to_string(bundle.join("slurm/array-0.sbatch")).unwrap()
}

/// Issue 23 items 3 and 4: `[executor] nodes` / `exclude-nodes`, a pending reason shown by
/// `wait` and `list`, and requests above the partition's limits refused at preflight.
#[test]
fn nodes_pin_the_tasks_a_pending_array_says_why_and_partition_limits_are_checked_first() {
    let Some(c) = two_nodes() else { return };
    let dir = tempfile::tempdir().unwrap();

    // nodes = ["n2"]: every task on n2, --nodelist in the recorded script.
    let m = write_manifest(dir.path(), &format!("{QUICK}nodes = [\"n2\"]\n"));
    let out = hwr_on(
        dir.path(),
        Some(&c.conf()),
        &["run", m.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let b = printed_bundle(dir.path(), &out);
    assert!(script(&b).contains("#SBATCH --nodelist=n2\n"), "{}", script(&b));
    for r in run_records(&b) {
        assert_eq!(r["node"], "n2", "{r}");
    }
    // exclude-nodes = "n2": every task on n1.
    let m = write_manifest(dir.path(), &format!("{QUICK}exclude-nodes = \"n2\"\n"));
    let out = hwr_on(
        dir.path(),
        Some(&c.conf()),
        &["run", m.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let b = printed_bundle(dir.path(), &out);
    assert!(script(&b).contains("#SBATCH --exclude=n2\n"), "{}", script(&b));
    for r in run_records(&b) {
        assert_eq!(r["node"], "n1", "{r}");
    }

    // n2 drained and the experiment pinned to it: the array pends forever, and says why.
    scontrol(
        &c,
        &["update", "NodeName=n2", "State=DRAIN", "Reason=maintenance"],
    );
    let m = write_manifest(dir.path(), &format!("{QUICK}nodes = [\"n2\"]\n"));
    let out = hwr_on(
        dir.path(),
        Some(&c.conf()),
        &["run", m.to_str().unwrap(), "--detach", "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let b = printed_bundle(dir.path(), &out);
    let client = client(&c);
    let ids: Vec<u64> = arrays(&b).iter().map(|a| a.job_id).collect();
    // Slurm's own words for why the tasks wait (squeue %r), once it has judged them.
    let mut reason = String::new();
    wait_until(Duration::from_secs(60), "a pending reason", || {
        let snapshot = client.queue(&ids).unwrap();
        reason = snapshot
            .tasks
            .values()
            .find(|e| e.state == TaskState::Pending)
            .and_then(|e| e.reason.clone())
            .unwrap_or_default();
        !reason.is_empty() && reason != "None"
    });
    let list = hwr_on(dir.path(), Some(&c.conf()), &["list", "results"]);
    assert_eq!(code(&list), 0, "{}", stderr(&list));
    let listed = String::from_utf8_lossy(&list.stdout);
    let expected = format!("2 pending ({reason})");
    assert!(listed.contains(&expected), "{expected} not in:\n{listed}");
    let list = hwr_on(
        dir.path(),
        Some(&c.conf()),
        &["list", "results", "--format", "json"],
    );
    assert!(String::from_utf8_lossy(&list.stdout).contains(&expected));

    // `wait` (no terminal: one line per change) says it too.
    let mut waiter = spawn(dir.path(), Some(&c.conf()), &["wait", b.to_str().unwrap()]);
    let mut lines = BufReader::new(waiter.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let found = lines.by_ref().map_while(Result::ok).find(|l| {
        seen.push(l.clone());
        l.starts_with("waiting: ")
    });
    assert_eq!(
        found.as_deref(),
        Some(format!("waiting: {expected}").as_str()),
        "{seen:?}"
    );
    let out = hwr_on(dir.path(), Some(&c.conf()), &["cancel", b.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = waiter.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    scontrol(&c, &["update", "NodeName=n2", "State=RESUME"]);

    // MaxTime below the request (timeout 5m + grace 5s + margin 60s): refused before anything
    // is written or submitted, with both numbers.
    scontrol(&c, &["update", "PartitionName=debug", "MaxTime=00:01:00"]);
    let fresh = tempfile::tempdir().unwrap();
    let m = write_manifest(
        fresh.path(),
        &QUICK.replace("timeout = \"30s\"", "timeout = \"5m\""),
    );
    let out = hwr_on(fresh.path(), Some(&c.conf()), &["run", m.to_str().unwrap()]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("00:06:05") && err.contains("MaxTime 00:01:00"),
        "{err}"
    );
    assert!(
        !fresh.path().join("results").exists(),
        "a refused preflight writes nothing"
    );
    // Within the limit (30s + 5s + 10s) it runs.
    let m = write_manifest(fresh.path(), &format!("{QUICK}time-margin = \"10s\"\n"));
    let out = hwr_on(
        fresh.path(),
        Some(&c.conf()),
        &["run", m.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // MaxMemPerNode below --mem.
    scontrol(
        &c,
        &[
            "update",
            "PartitionName=debug",
            "MaxTime=UNLIMITED",
            "MaxMemPerNode=100",
        ],
    );
    let fresh = tempfile::tempdir().unwrap();
    let m = write_manifest(fresh.path(), &format!("{QUICK}sbatch-args = [\"--mem=1G\"]\n"));
    let out = hwr_on(fresh.path(), Some(&c.conf()), &["run", m.to_str().unwrap()]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--mem=1024M") && err.contains("MaxMemPerNode 100M"),
        "{err}"
    );
    assert!(!fresh.path().join("results").exists());
}

/// Prints a retention-schema document; the `leak` mode grows 10 pages per 1000 iterations.
const RETENTION: &str = r#"#!/bin/sh
mode=$1
case "$mode" in leak) rate=40960 ;; *) rate=0 ;; esac
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

/// Issue 23 item 4: a cell whose runs ran on other nodes than its control's is warned about in
/// every format, and the estimates are also computed within each node. Where Slurm puts a task
/// is its own choice, so the node of each run is set in run.json (as a Slurm task writes it)
/// after real local runs: the estimates read nothing else of Slurm.
#[test]
fn a_cell_and_its_control_on_unlike_nodes_are_warned_about_and_estimated_per_node() {
    use crate::support::{ManifestBuilder, hwr, repo, run, stdout};
    let repo = repo();
    std::fs::write(repo.path().join("leak.sh"), RETENTION).unwrap();
    let m = ManifestBuilder::argv("unlike-nodes", &["sh", "leak.sh", "{mode}"])
        .matrix("mode", ["leak", "reuse"])
        .repetitions(6)
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let report = |format: &str| {
        let out = hwr(
            repo.path(),
            &["report", bundle.to_str().unwrap(), "--format", format],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out)
    };
    // A local bundle: no node anywhere.
    let doc: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    assert!(doc.get("nodes").is_none(), "{doc:#}");
    assert!(doc["estimates"].get("node-warnings").is_none());
    assert!(
        !report("csv")
            .lines()
            .next()
            .unwrap()
            .split(',')
            .any(|h| h == "node")
    );

    // leak on n1 only; its control on n1 (repetitions 1-3) and n2 (4-6).
    for r in run_records(&bundle) {
        let node = if r["cell"]["mode"] == "leak" || r["repetition"].as_u64().unwrap() <= 3 {
            "n1"
        } else {
            "n2"
        };
        let path = bundle
            .join("runs")
            .join(r["run-id"].as_str().unwrap())
            .join("run.json");
        let mut rec = r.clone();
        rec["node"] = node.into();
        rec["hostname"] = node.into();
        std::fs::write(&path, serde_json::to_string_pretty(&rec).unwrap()).unwrap();
    }
    let doc: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    assert_eq!(doc["nodes"], serde_json::json!(["n1", "n2"]));
    let warnings = doc["estimates"]["node-warnings"]
        .as_array()
        .expect("node warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("mode=leak ran on n1 and its control mode=reuse on n1, n2"),
        "{w}"
    );
    let pooled = doc["estimates"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "private-rate-per-1000")
        .unwrap();
    assert_eq!(pooled["cell-nodes"], serde_json::json!(["n1"]));
    assert_eq!(pooled["control-nodes"], serde_json::json!(["n1", "n2"]));
    // Per node: on n1 both sides ran (6 leak runs against 3 control runs); on n2 only the
    // control ran, so nothing is compared there.
    let per_node = doc["estimates"]["per-node"]
        .as_array()
        .expect("per-node estimates");
    assert!(!per_node.is_empty());
    for e in per_node {
        assert_eq!(e["node"], "n1", "{e}");
        assert_eq!(
            (e["n-cell"].as_u64(), e["n-control"].as_u64()),
            (Some(6), Some(3)),
            "{e}"
        );
    }
    for format in ["table", "md", "html"] {
        let text = report(format);
        assert!(
            text.contains("its control mode=reuse on n1, n2"),
            "{format}: {text}"
        );
        assert!(text.contains("Against the control on each node"), "{format}");
    }
    let csv = report("csv");
    assert!(
        csv.lines().next().unwrap().split(',').any(|h| h == "node"),
        "{csv}"
    );
}
