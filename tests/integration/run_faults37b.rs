//! More faults of issue 37, end to end with real processes: a run that leaves a folder deeper
//! than `PATH_MAX` allows to name in `{run-dir}` (item 6); `resume` of such a bundle.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};

use crate::support::{
    ManifestBuilder, Repo, bundles, code, hwr, hwr_command, json, stderr, the_bundle, wait_for,
};

/// How long the runner may take to reach a state the test waits for (a hang guard, not a timing
/// assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// Levels of the deep folder: 2,100 levels of `d/` are 4,200 bytes, more than `PATH_MAX` (4,096).
const DEPTH: usize = 2100;

/// A temporary git repository with one commit that ignores `results/`.
fn repo() -> Repo {
    let repo = Repo::new();
    repo.write(".gitignore", "results/\n").commit("init");
    repo
}

/// Shell text that makes `DEPTH` nested folders `d/d/...` in `{run-dir}` and a file `f` at the
/// bottom, each step relative to the last (no path longer than `PATH_MAX` is ever used).
fn make_deep() -> String {
    format!(
        "python3 -c 'import os\nos.chdir(\"{{run-dir}}\")\nfor _ in range({DEPTH}):\n    os.mkdir(\"d\"); os.chdir(\"d\")\nopen(\"f\", \"w\").write(\"bottom\\n\")'"
    )
}

fn status(bundle: &Path) -> String {
    json(&bundle.join("bundle.json"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The deep tree as recorded: `DEPTH` folders and the file at the bottom, with its bytes.
fn assert_deep_listed(artifacts: &serde_json::Value) {
    let list = artifacts.as_array().unwrap();
    assert_eq!(list.len(), DEPTH + 1);
    let bottom = format!("{}f", "d/".repeat(DEPTH));
    let f = list
        .iter()
        .find(|a| a["name"] == bottom.as_str())
        .expect("the bottom file");
    assert_eq!(f["kind"], "file");
    assert_eq!(f["size"], 7);
}

/// A run that leaves a 2,100-deep folder: the bundle is complete, the run ok with every level
/// listed in run.json `artifacts`, and `verify` checks them. The old runner marked the bundle
/// `failed` with "File name too long" and no path.
#[test]
fn a_folder_deeper_than_path_max_is_listed_and_verified() {
    let repo = repo();
    let results = repo.path().join("results");
    ManifestBuilder::shell("deep", &format!("{} && echo ok", make_deep()))
        .text_output()
        .repetitions(1)
        .write(repo.path());
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = the_bundle(&results, "deep");
    assert_eq!(status(&bundle), "complete");
    let run = json(&bundle.join("runs/000-r1/run.json"));
    assert_eq!(run["outcome"], "ok", "{}", run["error"]);
    assert_deep_listed(&run["artifacts"]);
    let verify = hwr(repo.path(), &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}", stderr(&verify));
}

/// An interrupted run that had left a 2,100-deep folder: `resume` keeps it under `attempts/1/`,
/// lists it in `earlier-attempts` and finishes the bundle (the old `resume` failed with "File
/// name too long" every time).
#[test]
fn resume_keeps_an_attempt_with_a_folder_deeper_than_path_max() {
    let repo = repo();
    let results = repo.path().join("results");
    let marker = results.join("first-attempt-done");
    let script = format!(
        "if [ ! -e {m} ]; then {deep}; touch {m}; sleep 120; fi; echo ok",
        m = marker.display(),
        deep = make_deep()
    );
    ManifestBuilder::shell("deepresume", &script)
        .text_output()
        .repetitions(1)
        .isolation("grace", "1s")
        .write(repo.path());
    let child: Child = hwr_command(repo.path())
        .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the deep folder", PATIENCE, || marker.exists());
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", String::from_utf8_lossy(&out.stderr));
    let bundle = bundles(&results, "deepresume").pop().unwrap();
    assert_eq!(status(&bundle), "interrupted");

    let resumed = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert_eq!(status(&bundle), "complete");
    let run = json(&bundle.join("runs/000-r1/run.json"));
    assert_eq!(run["outcome"], "ok");
    assert_eq!(run["attempt"], 2);
    let earlier = &run["earlier-attempts"][0];
    assert_eq!(earlier["attempt"], 1);
    let deep: Vec<serde_json::Value> = earlier["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"].as_str().unwrap().starts_with('d'))
        .cloned()
        .collect();
    assert_deep_listed(&serde_json::Value::Array(deep));
    let verify = hwr(repo.path(), &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}", stderr(&verify));
}

/// `hwr-exp wait` on a detached Slurm bundle while `squeue` hangs (a wrapper first in `PATH`
/// that stalls from its third call): the first Ctrl-C (SIGINT) stops waiting at once, leaves the
/// bundle `running` and its task queued, says how to attach again or cancel, and exits 130.
/// The old waiter did nothing until the hung squeue ran into its deadline, then cancelled the
/// arrays and marked the bundle `interrupted`.
#[test]
fn the_first_ctrl_c_during_wait_detaches_even_while_squeue_hangs() {
    use crate::support::slurm::{Cleanup, STALL, Wrappers, job_ids};
    let Some(client) = crate::support::cluster() else {
        return;
    };
    let repo = repo();
    let results = repo.path().join("results");
    ManifestBuilder::shell("waitdetach", "sleep 300; echo ok")
        .text_output()
        .repetitions(1)
        .set("executor", "kind", "slurm")
        .write(repo.path());
    let out = hwr(
        repo.path(),
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "results",
            "--detach",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = the_bundle(&results, "waitdetach");
    let _cleanup = Cleanup::new(&bundle, None);
    let squeue = format!(
        "n=$(cat \"$STATE/calls\" 2>/dev/null || echo 0); echo $((n+1)) > \"$STATE/calls\"\nif [ \"$n\" -ge 2 ]; then {STALL}; exit 1; fi\nexec \"$REAL\" \"$@\""
    );
    let wrappers = Wrappers::new(&[("squeue", squeue.as_str())]);
    let child = wrappers
        .hwr(repo.path(), None)
        // Long enough that only an interrupted squeue ends the wait before the stall does.
        .env("HWR_SLURM_TIMEOUT", "100s")
        .args(["wait", bundle.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wrappers.wait_stalled();
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 130, "{err}");
    assert!(err.contains("stopped waiting"), "{err}");
    assert!(
        err.contains(&format!("hwr-exp wait {}", bundle.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("hwr-exp cancel {}", bundle.display())),
        "{err}"
    );
    assert!(!err.contains("did not answer within"), "not the deadline: {err}");
    assert_eq!(status(&bundle), "running");
    let ids = job_ids(&bundle);
    let queue = client.active(&ids).unwrap();
    assert!(
        ids.iter().any(|id| queue.arrays.contains_key(id)),
        "the task is still queued or running: {ids:?}"
    );
}

/// Retention-schema output for modes `leak` (grows) and `steady`; the control `reuse` fails every
/// run (exit 1, no output).
const FAILING_CONTROL: &str = r#"#!/bin/sh
mode=$1
[ "$mode" = reuse ] && { echo "control broken" >&2; exit 1; }
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

/// Adaptive repetitions whose control fails every run: no cell can ever be compared, so every
/// cell stops at `min` with the stopping reason `control failed` (the old rule ran the undecided
/// cells and their control to `max`).
#[test]
fn adaptive_cells_stop_when_their_control_fails_every_run() {
    let repo = repo();
    std::fs::write(repo.path().join("leak.sh"), FAILING_CONTROL).unwrap();
    let text = ManifestBuilder::argv("ctlfail", &["sh", "leak.sh", "{mode}"])
        .matrix("mode", ["leak", "steady", "reuse"])
        .text()
        + "[schedule]\nrepetitions = { min = 4, max = 12 }\n";
    crate::support::write_manifest(repo.path(), &text);
    repo.git(&["add", "leak.sh", "experiment.toml"]);
    repo.commit("manifest");
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results"],
    );
    let bundle = the_bundle(&repo.path().join("results"), "ctlfail");
    let a = json(&bundle.join("bundle.json"))["adaptive"].clone();
    assert_eq!(a["stopping-reason"], "control failed", "{a:#}\n{}", stderr(&out));
    for c in a["cells"].as_array().unwrap() {
        assert_eq!(c["runs"], 4, "{a:#}");
        assert_eq!(c["stopping-reason"], "control failed", "{a:#}");
    }
    assert!(stderr(&out).contains("control failed"), "said: {}", stderr(&out));
}

/// A run (the runner as root) whose background process moves itself into another cgroup and
/// outlives the run's leader: run.json `escaped-processes` names it with the cgroup it went to,
/// and it is killed (it is still in the run's session). The old runner recorded
/// `stray-processes-killed: 0` and left the process running.
#[test]
fn a_process_that_leaves_the_run_cgroup_is_named_and_killed() {
    use crate::support::{CallerCgroup, Cgroup, need};
    let Some(mount) = need(Cgroup) else { return };
    let elsewhere = CallerCgroup::new(&mount);
    let repo = repo();
    let script = format!(
        "sh -c 'echo $$ > {procs}; exec sleep 300' </dev/null >/dev/null 2>&1 &\nwhile ! grep -q {name} /proc/$!/cgroup; do sleep 0.05; done\necho $! > {{run-dir}}/escaped.pid; echo ok",
        procs = elsewhere.dir().join("cgroup.procs").display(),
        name = elsewhere.name().file_name().unwrap().to_str().unwrap(),
    );
    ManifestBuilder::shell("escape", &script)
        .text_output()
        .repetitions(1)
        .write(repo.path());
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = the_bundle(&repo.path().join("results"), "escape");
    let run = json(&bundle.join("runs/000-r1/run.json"));
    if run["containment"] != "cgroup" {
        eprintln!(
            "skipped: runs are not contained by a cgroup here ({})",
            run["containment"]
        );
        return;
    }
    let pid: i32 = std::fs::read_to_string(bundle.join("runs/000-r1/escaped.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let escaped = run["escaped-processes"]
        .as_array()
        .unwrap_or_else(|| panic!("{run:#}"));
    let entry = escaped
        .iter()
        .find(|e| e["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} named: {run:#}"));
    assert_eq!(entry["cgroup"], elsewhere.name().to_str().unwrap(), "{run:#}");
    assert_eq!(entry["killed"], true, "{run:#}");
    crate::support::wait_for("the escaped process to be gone", PATIENCE, || {
        !elsewhere.pids().contains(&pid)
    });
}
