//! Submission to Slurm as a two-phase commit and one owner of a bundle's tasks (DESIGN 8, issue
//! 23 items 1, 2 and the sbatch refusals of 5; issue 25 items 3 and 5), on the real cluster.
//!
//! The runner is stopped at each step of a submission by wrappers of `sbatch` / `scontrol` put
//! first in its `PATH`: they pass through to the real programs and stall (until the test writes
//! a `go` file) before or after the real one ran, or fail with a transient message. Each run
//! appends a line to `starts.log` in the bundle when it starts, so a run executed twice shows.
//!
//! Needs the test cluster (`SLURM_CONF`); takes the shared cluster lock of `slurm_e2e`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use crate::slurm_e2e::CLUSTER;
use crate::support::slurm::{
    Cleanup, STALL, Wrappers, arrays, hwr_on, hwr_on_command, published_bundle, run_manifest, spawn,
    task_map, wait_no_active_task, wait_until,
};
use crate::support::{cluster, code, json, stderr, write_manifest};
use hwr_exp::slurm::{self, SlurmClient};

/// Two quick runs; each logs its start in the bundle's starts.log.
const QUICK: &str = r#"
format = 1
[experiment]
name = "submit-steps"
[command]
shell = "echo {n} >> ../../starts.log; echo {n}"
workdir = "{run-dir}"
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2]
[isolation]
timeout = "60s"
[executor]
kind = "slurm"
"#;

const EXPERIMENT: &str = "submit-steps";

/// Arrays squeue lists with this bundle's tag.
fn tagged(client: &SlurmClient, bundle: &Path) -> Vec<slurm::TaggedArray> {
    client
        .tagged(&slurm::script::job_name(EXPERIMENT), bundle)
        .unwrap()
}

fn kill(child: Child, signal: rustix::process::Signal) -> Output {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
    child.wait_with_output().unwrap()
}

/// Every run finished ok exactly once (starts.log has one line per run), verify ok.
#[track_caller]
fn complete_once(dir: &Path, bundle: &Path) {
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 2, "{info}");
    let starts = std::fs::read_to_string(bundle.join("starts.log")).unwrap_or_default();
    let mut lines: Vec<&str> = starts.lines().collect();
    lines.sort();
    assert_eq!(lines, ["1", "2"], "each run started once: {starts:?}");
    let verify = hwr_on(dir, None, &["verify", bundle.to_str().unwrap()]);
    assert_eq!(
        code(&verify),
        0,
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        stderr(&verify)
    );
}

/// A runner stopped while `sbatch` is in flight: the wrapper submitted (the real sbatch, so the
/// array exists, held) but stalls before printing the id. Returns the bundle, whose bundle.json
/// records no array, and the tagged array.
fn orphaned(
    dir: &Path,
    client: &SlurmClient,
    signal: rustix::process::Signal,
) -> (PathBuf, Output, Wrappers) {
    let wrappers = Wrappers::new(&[(
        "sbatch",
        &format!("out=$(\"$REAL\" \"$@\"); rc=$?\n{STALL}\necho \"$out\"; exit $rc"),
    )]);
    let m = write_manifest(dir, QUICK);
    let child = wrappers.spawn(dir, None, &["run", m.to_str().unwrap()]);
    wrappers.wait_stalled();
    let bundle = published_bundle(dir, EXPERIMENT);
    let found = tagged(client, &bundle);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].held, found[0].active, "submitted held: {found:?}");
    let output = kill(child, signal);
    (bundle, output, wrappers)
}

#[test]
fn a_runner_killed_while_sbatch_is_in_flight_leaves_a_held_array_that_wait_adopts() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (bundle, _, wrappers) = orphaned(dir.path(), &client, rustix::process::Signal::KILL);
    let _cleanup = Cleanup::new(&bundle, None);
    drop(wrappers);
    assert!(arrays(&bundle).is_empty(), "the id never reached bundle.json");
    let found = tagged(&client, &bundle);
    assert_eq!(found[0].held, found[0].active, "still held: nothing runs");
    assert!(!bundle.join("starts.log").exists());

    let waited = hwr_on(dir.path(), None, &["wait", bundle.to_str().unwrap()]);
    assert_eq!(code(&waited), 0, "{}", stderr(&waited));
    let err = stderr(&waited);
    assert!(err.contains("by its tag"), "{err}");
    assert!(err.contains("released held slurm array"), "{err}");
    let recorded = arrays(&bundle);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].job_id, found[0].job_id);
    assert_eq!(recorded[0].state, slurm::ArrayState::Released);
    complete_once(dir.path(), &bundle);
}

#[test]
fn an_orphan_found_by_its_tag_is_cancelled_by_cancel_and_resume_runs_everything_once() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (bundle, _, wrappers) = orphaned(dir.path(), &client, rustix::process::Signal::KILL);
    let _cleanup = Cleanup::new(&bundle, None);
    drop(wrappers);
    let orphan = tagged(&client, &bundle)[0].job_id;

    let cancelled = hwr_on(dir.path(), None, &["cancel", bundle.to_str().unwrap()]);
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    wait_until(Duration::from_secs(30), "the orphan to be gone", || {
        tagged(&client, &bundle).iter().all(|a| a.active == 0)
    });
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted", "{info}");
    assert_eq!(arrays(&bundle)[0].job_id, orphan, "recorded by cancel");

    let resumed = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    complete_once(dir.path(), &bundle);
}

#[test]
fn resume_cancels_a_held_orphan_and_submits_its_runs_again() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (bundle, _, wrappers) = orphaned(dir.path(), &client, rustix::process::Signal::KILL);
    let _cleanup = Cleanup::new(&bundle, None);
    drop(wrappers);
    let orphan = tagged(&client, &bundle)[0].job_id;

    let resumed = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("cancelled held slurm array"),
        "{}",
        stderr(&resumed)
    );
    let recorded = arrays(&bundle);
    assert_eq!(recorded[0].job_id, orphan);
    assert_eq!(recorded[0].state, slurm::ArrayState::Cancelled);
    assert_eq!(recorded[1].state, slurm::ArrayState::Released);
    complete_once(dir.path(), &bundle);
}

#[test]
fn ctrl_c_while_sbatch_is_in_flight_cancels_the_tagged_array_and_marks_the_bundle_interrupted() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (bundle, output, wrappers) = orphaned(dir.path(), &client, rustix::process::Signal::INT);
    let _cleanup = Cleanup::new(&bundle, None);
    drop(wrappers);
    assert_eq!(code(&output), 130, "{}", stderr(&output));
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");
    let recorded = arrays(&bundle);
    assert_eq!(recorded.len(), 1, "the orphan is recorded: {recorded:?}");
    assert_eq!(recorded[0].state, slurm::ArrayState::Cancelled);
    wait_until(Duration::from_secs(30), "no active task", || {
        tagged(&client, &bundle).iter().all(|a| a.active == 0)
    });
    let resumed = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    complete_once(dir.path(), &bundle);
}

#[test]
fn a_runner_killed_before_sbatch_leaves_nothing_and_resume_submits_everything() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Stalls before the real sbatch, and then never submits: the runner died before sbatch ran.
    let wrappers = Wrappers::new(&[("sbatch", &format!("{STALL}\nexit 1"))]);
    let m = write_manifest(dir.path(), QUICK);
    let child = wrappers.spawn(dir.path(), None, &["run", m.to_str().unwrap()]);
    wrappers.wait_stalled();
    let bundle = published_bundle(dir.path(), EXPERIMENT);
    let _cleanup = Cleanup::new(&bundle, None);
    kill(child, rustix::process::Signal::KILL);
    drop(wrappers);
    assert!(arrays(&bundle).is_empty());
    assert!(tagged(&client, &bundle).is_empty(), "nothing submitted");
    let waited = hwr_on(dir.path(), None, &["wait", bundle.to_str().unwrap()]);
    assert_eq!(code(&waited), 2, "nothing to wait for: {}", stderr(&waited));
    assert!(
        stderr(&waited).contains("no slurm array to wait for"),
        "{}",
        stderr(&waited)
    );
    let resumed = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    complete_once(dir.path(), &bundle);
}

#[test]
fn a_runner_killed_after_recording_before_release_leaves_a_recorded_held_array_that_wait_releases() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let wrappers = Wrappers::new(&[(
        "scontrol",
        &format!("if [ \"$1\" = release ]; then {STALL}; exit 1; fi\nexec \"$REAL\" \"$@\""),
    )]);
    let m = write_manifest(dir.path(), QUICK);
    let child = wrappers.spawn(dir.path(), None, &["run", m.to_str().unwrap()]);
    wrappers.wait_stalled();
    let bundle = published_bundle(dir.path(), EXPERIMENT);
    let _cleanup = Cleanup::new(&bundle, None);
    kill(child, rustix::process::Signal::KILL);
    drop(wrappers);
    let recorded = arrays(&bundle);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].state, slurm::ArrayState::Held, "{recorded:?}");
    let found = tagged(&client, &bundle);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].job_id, recorded[0].job_id);
    assert_eq!(found[0].held, found[0].active, "held: nothing runs");
    assert!(!bundle.join("starts.log").exists());

    let waited = hwr_on(dir.path(), None, &["wait", bundle.to_str().unwrap()]);
    assert_eq!(code(&waited), 0, "{}", stderr(&waited));
    assert_eq!(arrays(&bundle)[0].state, slurm::ArrayState::Released);
    complete_once(dir.path(), &bundle);
}

/// Run 1 blocks until the bundle holds a `release` file; run 2 is quick.
const BLOCKING: &str = r#"
format = 1
[experiment]
name = "submit-steps"
[command]
shell = "echo {n} >> ../../starts.log; i=0; while [ {n} = 1 ] && [ ! -e ../../release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo {n}"
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

#[test]
fn resume_of_a_live_detached_bundle_is_refused_and_afterwards_submits_only_the_gone_runs() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = run_manifest(dir.path(), None, BLOCKING, &["--detach", "--quiet"]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let bundle = published_bundle(dir.path(), EXPERIMENT);
    let _cleanup = Cleanup::new(&bundle, None);
    let recorded = arrays(&bundle);
    assert_eq!(recorded[0].state, slurm::ArrayState::Released);
    let job = recorded[0].job_id;
    let key = slurm::TaskKey {
        array_job_id: job,
        task_id: 0,
    };
    // Run 1 has started (its line in starts.log; its task RUNNING in squeue is not enough: the
    // task may not have made the run's folder yet).
    wait_until(Duration::from_secs(60), "run 1 to start", || {
        std::fs::read_to_string(bundle.join("starts.log")).is_ok_and(|t| t.lines().any(|l| l == "1"))
    });

    let refused = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains("hwr-exp wait") && err.contains("hwr-exp cancel"),
        "{err}"
    );
    assert!(err.contains(&job.to_string()), "{err}");
    assert_eq!(arrays(&bundle).len(), 1, "nothing submitted");
    let run0 = json(&bundle.join("plan.json"))["runs"][0]["run-id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !bundle.join("runs").join(&run0).join("run.json").exists()
            && bundle.join("runs").join(&run0).is_dir(),
        "run 1 untouched"
    );

    // Run 1's task is killed (gone without run.json); run 2 finished. Resume submits run 1 alone.
    client.cancel(&[slurm::CancelTarget::Task(key)]).unwrap();
    wait_no_active_task(&client, &task_map(&bundle));
    std::fs::write(bundle.join("release"), "").unwrap();
    let resumed = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let recorded = arrays(&bundle);
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1].array, "0%1", "only the gone run: {recorded:?}");
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 2, "{info}");
    let starts = std::fs::read_to_string(bundle.join("starts.log")).unwrap();
    assert_eq!(
        starts.lines().filter(|l| *l == "2").count(),
        1,
        "run 2 ran once: {starts:?}"
    );
    let verify = hwr_on(dir.path(), None, &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}", String::from_utf8_lossy(&verify.stdout));
}

#[test]
fn an_sbatch_refusal_is_recorded_with_slurms_message_and_shown_by_list_and_report() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        &QUICK.replace(
            "kind = \"slurm\"",
            "kind = \"slurm\"\npartition = \"nosuchpartition\"",
        ),
    );
    let run = hwr_on(dir.path(), None, &["run", m.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&run), 3, "{}", stderr(&run));
    assert!(
        stderr(&run).contains("Invalid partition name specified"),
        "{}",
        stderr(&run)
    );
    let bundle = published_bundle(dir.path(), EXPERIMENT);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "failed");
    let refusal = &info["slurm"]["refusals"][0];
    assert_eq!(refusal["message"], "Invalid partition name specified", "{info}");
    assert_eq!(refusal["limit"], "partition");
    assert_eq!(refusal["script"], "slurm/array-0.sbatch");
    assert!(info["slurm"]["arrays"].as_array().unwrap().is_empty());

    let list = hwr_on(dir.path(), None, &["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("failed (sbatch refused: Invalid partition name specified (limit: partition))"),
        "{text}"
    );
    let list = hwr_on(dir.path(), None, &["list", "--format", "json"]);
    let entries: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(
        entries[0]["sbatch-refused"]
            .as_str()
            .unwrap()
            .contains("Invalid partition")
    );
    for format in ["table", "md", "json", "html"] {
        let report = hwr_on(
            dir.path(),
            None,
            &["report", bundle.to_str().unwrap(), "--format", format],
        );
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            text.contains("Invalid partition name specified"),
            "{format}: {text}"
        );
    }
}

/// Slurm's `TimeLimit=` of a job (`scontrol show job`).
fn time_limit(job: u64) -> String {
    let out = Command::new("scontrol")
        .args(["-o", "show", "job", &job.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("TimeLimit="))
        .unwrap_or_else(|| panic!("no TimeLimit in {text}"))
        .to_string()
}

#[test]
fn sbatch_timelimit_in_the_environment_does_not_change_the_recorded_time_unless_kept() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    // timeout 60 s + grace + 60 s margin: the script says --time=00:02:05, Slurm 00:03:00.
    for keep in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let manifest = if keep {
            QUICK.replace("kind = \"slurm\"", "kind = \"slurm\"\nkeep-sbatch-env = true")
        } else {
            QUICK.to_string()
        };
        let m = write_manifest(dir.path(), &manifest);
        let plan = hwr_on_command(dir.path(), None)
            .args(["plan", m.to_str().unwrap(), "--format", "sbatch"])
            .env("SBATCH_TIMELIMIT", "00:42:00")
            .output()
            .unwrap();
        assert_eq!(code(&plan), 0, "{}", stderr(&plan));
        let plan = String::from_utf8_lossy(&plan.stdout).into_owned();
        let run = hwr_on_command(dir.path(), None)
            .args(["run", m.to_str().unwrap(), "--quiet"])
            .env("SBATCH_TIMELIMIT", "00:42:00")
            .output()
            .unwrap();
        assert_eq!(code(&run), 0, "{}", stderr(&run));
        let bundle = published_bundle(dir.path(), EXPERIMENT);
        let script = std::fs::read_to_string(bundle.join("slurm/array-0.sbatch")).unwrap();
        let recorded = script
            .lines()
            .find_map(|l| l.strip_prefix("#SBATCH --time="))
            .unwrap()
            .to_string();
        let job = arrays(&bundle)[0].job_id;
        let slurm = json(&bundle.join("bundle.json"))["slurm"].clone();
        if keep {
            assert_eq!(time_limit(job), "00:42:00", "kept: the variable overrides");
            assert_eq!(slurm["kept-env"]["SBATCH_TIMELIMIT"], "00:42:00", "{slurm}");
            assert!(plan.contains("#   SBATCH_TIMELIMIT=00:42:00"), "{plan}");
        } else {
            assert_eq!(recorded, "00:02:05");
            assert_eq!(
                time_limit(job),
                "00:03:00",
                "the recorded --time, rounded up to minutes"
            );
            assert!(
                slurm["cleared-env"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == "SBATCH_TIMELIMIT"),
                "{slurm}"
            );
            assert!(slurm.get("kept-env").is_none(), "{slurm}");
            assert!(plan.contains("removed from sbatch's environment"), "{plan}");
            assert!(plan.contains("SBATCH_TIMELIMIT"), "{plan}");
        }
    }
}

#[test]
fn a_transient_sbatch_failure_is_retried_and_each_retry_shown() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let wrappers = Wrappers::new(&[(
        "sbatch",
        "n=$(cat \"$STATE/n\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$STATE/n\"\n\
         if [ $n -le 2 ]; then echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' >&2; exit 1; fi\n\
         exec \"$REAL\" \"$@\"",
    )]);
    let m = write_manifest(dir.path(), QUICK);
    let run = wrappers.run(dir.path(), None, &["run", m.to_str().unwrap()]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let err = stderr(&run);
    assert!(
        err.contains(
            "slurm: sbatch failed (Socket timed out on send/recv operation); retrying in 1 s (try 2 of 6)"
        ),
        "{err}"
    );
    assert!(err.contains("retrying in 2 s (try 3 of 6)"), "{err}");
    assert_eq!(std::fs::read_to_string(wrappers.file("n")).unwrap().trim(), "3");
    let bundle = published_bundle(dir.path(), EXPERIMENT);
    assert_eq!(arrays(&bundle).len(), 1, "one array, not one per try");
    complete_once(dir.path(), &bundle);
}

#[test]
fn a_runner_killed_after_release_leaves_released_arrays_that_resume_refuses_and_wait_finishes() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(dir.path(), BLOCKING);
    let child = spawn(dir.path(), None, &["run", m.to_str().unwrap()]);
    let bundle = published_bundle(dir.path(), EXPERIMENT);
    let _cleanup = Cleanup::new(&bundle, None);
    wait_until(Duration::from_secs(60), "the release to be recorded", || {
        arrays(&bundle)
            .first()
            .is_some_and(|a| a.state == slurm::ArrayState::Released)
    });
    let job = arrays(&bundle)[0].job_id;
    kill(child, rustix::process::Signal::KILL);
    assert!(
        client.queue(&[job]).unwrap().any_active(),
        "the tasks outlive the runner"
    );

    let refused = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("hwr-exp wait"), "{}", stderr(&refused));
    assert_eq!(arrays(&bundle).len(), 1, "nothing submitted again");

    std::fs::write(bundle.join("release"), "").unwrap();
    let waited = hwr_on(dir.path(), None, &["wait", bundle.to_str().unwrap()]);
    assert_eq!(code(&waited), 0, "{}", stderr(&waited));
    complete_once(dir.path(), &bundle);
}
