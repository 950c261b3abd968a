//! Slurm's own limits and failures, end to end on real clusters (issue 25 items 1, 4 and 5):
//!
//! - Slurm's real time limit (a partition's `DefaultTime` of one minute, Slurm's smallest, and no
//!   run timeout: Slurm enforces the limit, not hwr-exp): without requeue the run is `lost` with
//!   Slurm's reason (TIMEOUT, `DUE TO TIME LIMIT`), never the program's failure, and `resume`
//!   runs it again; with `[executor] requeue = true` Slurm's pre-timeout USR2 stops the run
//!   (SIGTERM, then grace), the task requeues itself, the interrupted attempt is kept under
//!   `attempts/1` and the bundle ends complete.
//! - Transient errors of `squeue`, `scontrol` and `scancel` (wrappers first in `PATH` that fail
//!   their first calls with Slurm's own messages, then run the real program) are retried with
//!   back-off, each retry shown; a permanent error is tried once.
//! - A refused `resume` (a task still queued, squeue failing, the preflight refusing) leaves the
//!   bundle exactly as it was: the file tree before equals the file tree after.
//!
//! The time-limit tests start clusters of their own ([`PrivateCluster`]: a partition `short`
//! with a one-minute limit, `cred_expire=10` so that a requeued task may start again after
//! 10 s instead of 120 s). Slurm checks time limits every 30 s, so each takes 1 to 2 minutes:
//! the shortest Slurm allows. The others use the shared test cluster (`SLURM_CONF`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::slurm_e2e::CLUSTER;
use crate::support::slurm::{
    Cleanup, PrivateCluster, Wrappers, attempt_folders, blocking_until_release, failing_first,
    find_submitted_bundle, hwr_on, only_run_dir, printed_bundle, run_manifest, spawn_manifest, task_map,
    wait_no_active_task, wait_until,
};
use crate::support::{cluster, code, json, run_records, sha256_hex, stderr, write_manifest};
use hwr_exp::slurm::{SlurmClient, TaskState};

/// A one-node cluster whose partition `short` has Slurm's smallest time limit (one minute) as
/// its default, and whose requeued jobs may start again 10 s after they ended (`cred_expire`).
fn short_limit_cluster() -> Option<PrivateCluster> {
    PrivateCluster::one_node(
        2,
        "AuthInfo=socket={dir}/munge/munge.socket.2,cred_expire=10\n\
         PartitionName=short Nodes=ALL DefaultTime=1 MaxTime=1 State=UP",
    )
}

/// One run in partition `short` without a timeout of its own (so Slurm's one-minute limit is
/// the only one). It writes `started` in the bundle folder when it starts; the first attempt
/// (no `started` yet, or `release` missing without `quick_second`) runs until stopped,
/// catching SIGTERM and exiting 143 as many programs do (which looks like a failure of its
/// own). With `quick_second` a later attempt ends ok at once; without, one ends once `release`
/// exists.
fn beyond_the_limit(name: &str, extra: &str, quick_second: bool) -> String {
    let finish = if quick_second {
        "[ -e ../../started ] && exit 0"
    } else {
        "[ -e ../../release ] && exit 0"
    };
    format!(
        r#"
format = 1
[experiment]
name = "{name}"
[command]
argv = ["bash", "-c", "{finish}; touch ../../started; trap 'exit 143' TERM; while true; do sleep 0.1 & wait $!; done"]
workdir = "{{run-dir}}"
output = "out.txt"
output-format = "text"
[isolation]
grace = "2s"
[executor]
kind = "slurm"
partition = "short"
{extra}
"#
    )
}

#[test]
fn slurms_own_time_limit_ends_the_run_as_lost_by_slurm_and_resume_runs_it_again() {
    let Some(cluster) = short_limit_cluster() else {
        return;
    };
    let conf = cluster.conf();
    let dir = tempfile::tempdir().unwrap();
    // Slurm's limit (one minute, checked every 30 s) ends the run: the runner ends by itself.
    let out = run_manifest(
        dir.path(),
        Some(&conf),
        &beyond_the_limit("time-limit", "", false),
        &["--quiet"],
    );
    let bundle = printed_bundle(dir.path(), &out);
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(bundle.join("started").is_file(), "the run ran");
    let script = std::fs::read_to_string(bundle.join("slurm/array-0.sbatch")).unwrap();
    assert!(
        !script.contains("--time"),
        "the partition's limit applies: {script}"
    );
    let record = &run_records(&bundle)[0];
    assert_eq!(
        record["outcome"], "lost",
        "Slurm ended the run (it exited 143 on Slurm's SIGTERM): not a failure of its own: {record}"
    );
    assert_eq!(record["termination"], "lost", "{record}");
    let reason = record["lost-reason"].as_str().unwrap();
    assert!(reason.starts_with("TIMEOUT"), "{reason}");
    assert!(reason.contains("DUE TO TIME LIMIT"), "{reason}");
    assert!(
        record["wall-seconds"].as_f64().unwrap() >= 50.0,
        "it ran until the one-minute limit: {record}"
    );
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["counts"]["lost"], 1, "{info}");

    std::fs::write(bundle.join("release"), "").unwrap();
    let out = hwr_on(
        dir.path(),
        Some(&conf),
        &["resume", bundle.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    let record = &run_records(&bundle)[0];
    assert_eq!(record["outcome"], "ok", "{record}");
    assert_eq!(record["attempt"], 2, "{record}");
    assert_eq!(attempt_folders(&bundle), [["1"]]);
}

#[test]
fn with_requeue_slurms_pre_timeout_signal_requeues_the_task_and_the_bundle_ends_complete() {
    let Some(cluster) = short_limit_cluster() else {
        return;
    };
    let conf = cluster.conf();
    let client = SlurmClient::new().with_conf(&conf);
    let dir = tempfile::tempdir().unwrap();
    // USR2 comes from Slurm `grace + 30 s` = 32 s before the one-minute limit; the second
    // attempt ends at once.
    let child = spawn_manifest(
        dir.path(),
        Some(&conf),
        &beyond_the_limit("limit-requeue", "requeue = true", true),
        &["--quiet"],
    );
    let bundle = find_submitted_bundle(dir.path(), "limit-requeue");
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    let key = task_map(&bundle).task(0).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    let record = &run_records(&bundle)[0];
    assert_eq!(record["outcome"], "ok", "{record}");
    assert_eq!(record["attempt"], 2, "{record}");
    assert_eq!(attempt_folders(&bundle), [["1"]]);
    let run_dir = only_run_dir(&bundle);
    // The interrupted attempt ran its SIGTERM trap within grace and wrote no run.json.
    assert!(run_dir.join("attempts/1/stderr.log").is_file());
    assert!(!run_dir.join("attempts/1/run.json").exists());
    // Slurm requeued the task once and it then completed: it never reached its time limit.
    let job = client
        .show_task(key)
        .unwrap()
        .expect("Slurm still knows the task");
    assert_eq!(job.state, TaskState::Completed, "{job:?}");
    let shown = cluster
        .command("scontrol")
        .args(["show", "job", &key.to_string()])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("Restarts=1"), "{shown}");
}

/// Two quick runs on the shared cluster.
const QUICK: &str = r#"
format = 1
[experiment]
name = "transient"
[command]
shell = "echo {n}"
output = "out-{n}.txt"
output-format = "text"
[matrix]
n = [1, 2]
[isolation]
timeout = "60s"
[executor]
kind = "slurm"
"#;

#[test]
fn transient_squeue_and_scontrol_errors_are_retried_and_shown_and_the_bundle_completes() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if cluster().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let wrappers = Wrappers::new(&[
        (
            "squeue",
            &failing_first(
                "squeue",
                "",
                2,
                "slurm_load_jobs error: Socket timed out on send/recv operation",
            ),
        ),
        (
            "scontrol",
            &failing_first(
                "scontrol",
                "",
                2,
                "scontrol: error: Unable to contact slurm controller (connect failure)",
            ),
        ),
    ]);
    let m = write_manifest(dir.path(), QUICK);
    let out = wrappers.run(dir.path(), None, &["run", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let bundle = printed_bundle(dir.path(), &out);
    let _cleanup = Cleanup::new(&bundle, None);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 2, "{info}");
    for (program, message) in [
        ("scontrol", "Unable to contact slurm controller (connect failure)"),
        ("squeue", "Socket timed out on send/recv operation"),
    ] {
        for (delay, attempt) in [(1, 2), (2, 3)] {
            let line =
                format!("slurm: {program} failed ({message}); retrying in {delay} s (try {attempt} of 6)");
            assert!(err.contains(&line), "{line} not in:\n{err}");
        }
        assert_eq!(
            std::fs::read_to_string(wrappers.file(&format!("{program}.failed")))
                .unwrap()
                .trim(),
            "2"
        );
    }
}

#[test]
fn a_permanent_squeue_error_stops_the_waiter_once_and_a_later_wait_completes_the_bundle() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if cluster().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Only the waiter's `squeue -j <arrays>` fails (the submission's own squeue calls pass).
    let wrappers = Wrappers::new(&[(
        "squeue",
        &failing_first("squeue", " -j ", 100, "squeue: error: Invalid user for SlurmUser"),
    )]);
    let m = write_manifest(dir.path(), QUICK);
    let out = wrappers.run(dir.path(), None, &["run", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(code(&out), 3, "{err}");
    assert!(err.contains("Invalid user for SlurmUser"), "{err}");
    assert!(err.contains("hwr-exp wait"), "{err}");
    assert!(!err.contains("retrying"), "{err}");
    assert_eq!(
        std::fs::read_to_string(wrappers.file("squeue.failed"))
            .unwrap()
            .trim(),
        "1",
        "not asked again"
    );
    let bundle = find_submitted_bundle(dir.path(), "transient");
    let _cleanup = Cleanup::new(&bundle, None);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "running", "left for a later wait: {info}");
    let out = hwr_on(dir.path(), None, &["wait", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 2, "{info}");
}

/// `run --detach` of [`blocking_until_release`] on the shared cluster, once its run has started.
fn detached_blocking(dir: &Path) -> std::path::PathBuf {
    let out = run_manifest(
        dir,
        None,
        &blocking_until_release("blocking", ""),
        &["--detach", "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = printed_bundle(dir, &out);
    wait_until(Duration::from_secs(60), "the run to start", || {
        bundle.join("started").exists()
    });
    bundle
}

#[test]
fn a_transient_scancel_error_is_retried_and_shown_and_a_permanent_one_is_tried_once() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bundle = detached_blocking(dir.path());
    let _cleanup = Cleanup::new(&bundle, None);

    // A permanent error: scancel is called once (no retry), and cancel says so.
    let refusing = Wrappers::new(&[(
        "scancel",
        &failing_first(
            "scancel",
            "",
            100,
            "scancel: error: Kill job error on job id 1: Access/permission denied",
        ),
    )]);
    let out = refusing.run(dir.path(), None, &["cancel", bundle.to_str().unwrap()]);
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Access/permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("retrying"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(refusing.file("scancel.failed"))
            .unwrap()
            .trim(),
        "1",
        "tried once"
    );

    // A transient one: retried with back-off, each retry shown, and the task is cancelled.
    let flaky = Wrappers::new(&[(
        "scancel",
        &failing_first(
            "scancel",
            "",
            2,
            "scancel: error: Kill job error on job id 1: Unable to contact slurm controller (connect failure)",
        ),
    )]);
    let out = flaky.run(dir.path(), None, &["cancel", bundle.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    for (delay, attempt) in [(1, 2), (2, 3)] {
        let line = format!(
            "slurm: scancel failed (Kill job error on job id 1: Unable to contact slurm controller (connect failure)); retrying in {delay} s (try {attempt} of 6)"
        );
        assert!(err.contains(&line), "{line} not in:\n{err}");
    }
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted", "{info}");
    wait_no_active_task(&client, &task_map(&bundle));
}

/// Every file and folder under `dir` (relative path) with its content's SHA-256 (folders: "dir").
fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.insert(rel, "dir".into());
                todo.push(p);
            } else {
                out.insert(rel, sha256_hex(&std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

#[test]
fn a_refused_resume_leaves_the_bundle_exactly_as_it_was() {
    let _guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let resume = |dir: &Path, bundle: &Path, wrappers: Option<&Wrappers>| {
        let args = ["resume", bundle.to_str().unwrap()];
        match wrappers {
            Some(w) => w.run(dir, None, &args),
            None => hwr_on(dir, None, &args),
        }
    };

    // 1. Its task is still queued (to begin in 10 minutes): refused, nothing changed.
    let queued = tempfile::tempdir().unwrap();
    let out = run_manifest(
        queued.path(),
        None,
        &blocking_until_release("blocking", "sbatch-args = [\"--begin=now+600\"]"),
        &["--detach", "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = printed_bundle(queued.path(), &out);
    let _cleanup_queued = Cleanup::new(&bundle, None);
    let before = tree(&bundle);
    let out = resume(queued.path(), &bundle, None);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("slurm still runs"), "{}", stderr(&out));
    assert_eq!(tree(&bundle), before, "a refused resume changed the bundle");

    // A bundle whose one run was stopped mid-way (its files are to move to attempts/1).
    let dir = tempfile::tempdir().unwrap();
    let bundle = detached_blocking(dir.path());
    let _cleanup = Cleanup::new(&bundle, None);
    let resume = |wrappers: Option<&Wrappers>| resume(dir.path(), &bundle, wrappers);

    let out = hwr_on(dir.path(), None, &["cancel", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    wait_no_active_task(&client, &task_map(&bundle));
    let before = tree(&bundle);

    // 2. squeue fails (a permanent error, tried once): refused rather than risk a double run.
    let wrappers = Wrappers::new(&[(
        "squeue",
        &failing_first("squeue", "", 100, "squeue: error: Invalid user for SlurmUser"),
    )]);
    let out = resume(Some(&wrappers));
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Invalid user for SlurmUser"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(wrappers.file("squeue.failed"))
            .unwrap()
            .trim(),
        "1",
        "a permanent error is tried once"
    );
    assert_eq!(tree(&bundle), before, "a refused resume changed the bundle");

    // 3. The preflight refuses (the controller does not answer `scontrol ping`).
    let wrappers = Wrappers::new(&[(
        "scontrol",
        &failing_first(
            "scontrol",
            "ping",
            100,
            "scontrol: error: Invalid user for SlurmUser",
        ),
    )]);
    let out = resume(Some(&wrappers));
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("does not answer"), "{}", stderr(&out));
    assert_eq!(tree(&bundle), before, "a refused resume changed the bundle");

    // Then a resume that may run completes the bundle, the interrupted attempt kept.
    std::fs::write(bundle.join("release"), "").unwrap();
    let out = resume(None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    let record = &run_records(&bundle)[0];
    assert_eq!(record["attempt"], 2, "{record}");
    assert_eq!(attempt_folders(&bundle), [["1"]]);
}
