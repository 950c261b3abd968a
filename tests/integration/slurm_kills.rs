//! Runs ended by Slurm (DESIGN 8, issue 25 item 1, issue 23 item 5): a task killed by `scancel`,
//! preemption or a time limit is recorded as lost with Slurm's reason, never as the run's own
//! failure, whatever the run does with the SIGTERM Slurm sends it (a run that catches it and exits
//! 143 looks just like a failing program); `resume` runs it again, numbering its attempts from 1.
//!
//! Needs the test cluster (`SLURM_CONF`); the preemption and MinJobAge cases start clusters of
//! their own ([`PrivateCluster`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::slurm::{
    Cleanup, PrivateCluster, attempt_folders, blocking_until_release, find_submitted_bundle, hwr_on,
    older_than, only_run_dir, run_manifest, spawn_manifest, task_map, tasks_in, wait_until,
};
use crate::support::{cluster, code, json, run_records, stderr};
use hwr_exp::slurm::{self, SlurmClient, TaskState};

/// Runs that write `started-<n>` in the bundle folder when they start and then block until
/// `release` exists there. Odd `n` meet the race of issue 25 head on: after 2 s each cancels its
/// own task (`scancel A_T`: Slurm has decided, its
/// signals are on their way) and exits 143 at once, as a program that catches SIGTERM does, so
/// the run ends before its task hears from Slurm. Even `n` wait to be cancelled by the test; they
/// trap SIGTERM and exit 143 when `n` is divisible by 4, else die of it.
fn racing(name: &str, runs: usize, jobs: usize, extra: &str) -> String {
    let ns: Vec<String> = (1..=runs).map(|n| n.to_string()).collect();
    format!(
        r#"
format = 1
[experiment]
name = "{name}"
[command]
argv = ["bash", "-c", "touch ../../started-{{n}}; if [ $(({{n}} % 4)) = 0 ]; then trap 'exit 143' TERM; fi; i=0; while [ ! -e ../../release ] && [ $i -lt 3000 ]; do sleep 0.1 & wait $!; i=$((i+1)); if [ $(({{n}} % 2)) = 1 ] && [ $i = 20 ]; then scancel $SLURM_ARRAY_JOB_ID'_'$SLURM_ARRAY_TASK_ID; exit 143; fi; done"]
workdir = "{{run-dir}}"
output = "out-{{n}}.txt"
output-format = "text"
[matrix]
n = [{ns}]
[schedule]
jobs = {jobs}
[isolation]
timeout = "600s"
grace = "2s"
[executor]
kind = "slurm"
{extra}
"#,
        ns = ns.join(", ")
    )
}

/// A lost record's checks: Slurm's reason naming `word`, the start and elapsed time of the task
/// (it ran at least `ran` seconds before Slurm ended it), never the run's own failure.
#[track_caller]
fn assert_killed_by_slurm(record: &serde_json::Value, word: &str, ran: f64) {
    assert_eq!(
        record["outcome"], "lost",
        "a run Slurm ended is no failure of its own: {record}"
    );
    assert_eq!(record["termination"], "lost", "{record}");
    let reason = record["lost-reason"].as_str().unwrap();
    assert!(reason.contains(word), "{word} not in {reason}");
    let wall = record["wall-seconds"].as_f64().unwrap();
    assert!(
        wall >= ran,
        "elapsed {wall} s, but the task ran at least {ran} s: {record}"
    );
    assert_ne!(record["start"], record["end"], "{record}");
}

#[test]
fn twelve_scancels_are_all_recorded_as_lost_by_slurm_and_resume_runs_them_again() {
    let _guard = super::slurm_e2e::CLUSTER
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_manifest(dir.path(), None, &racing("scancels", 12, 4, ""), &["--quiet"]);
    let bundle = find_submitted_bundle(dir.path(), "scancels");
    let _cleanup = Cleanup::new(&bundle, None);
    // The test cancels each even run's task once the run has run for 1.2 s (its `started-<n>`
    // is that old: a deliberate run length, so that the lost record's elapsed time can be
    // checked to be at least 1 s); odd runs cancel their own. The runner ends once every task
    // is accounted for.
    let ran_long_enough =
        |n: usize| older_than(&bundle.join(format!("started-{n}")), Duration::from_millis(1200));
    let mut cancelled = BTreeSet::new();
    let limit = Instant::now() + Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < limit, "the runner did not end");
        // 12 runs are two arrays (MaxArraySize=11), recorded one after the other.
        let map = task_map(&bundle);
        for key in tasks_in(&client, &map, TaskState::Running) {
            // Plan index i is n = i + 1.
            let Some(n) = map.index(key).map(|i| i + 1) else {
                continue;
            };
            if n % 2 == 0 && ran_long_enough(n) && cancelled.insert(key) {
                client.cancel(&[slurm::CancelTarget::Task(key)]).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let records = run_records(&bundle);
    assert_eq!(records.len(), 12);
    for r in &records {
        assert_killed_by_slurm(r, "CANCELLED", 1.0);
    }
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["counts"]["lost"], 12, "{info}");

    std::fs::write(bundle.join("release"), "").unwrap();
    let out = hwr_on(dir.path(), None, &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete");
    assert_eq!(info["counts"]["ok"], 12, "{info}");
    for r in run_records(&bundle) {
        assert_eq!(r["attempt"], 2, "the lost attempt is 1, this one 2: {r}");
    }
    // Each run kept its lost attempt as attempts/1, and nothing else.
    assert!(
        attempt_folders(&bundle).iter().all(|a| a == &["1"]),
        "{:?}",
        attempt_folders(&bundle)
    );
}

/// A cluster whose partition `high` preempts jobs of partition `low` (`PreemptMode=mode`) on one
/// 1-CPU node, and which forgets finished jobs after 2 s (`MinJobAge=2`).
fn preempting_cluster(mode: &str) -> Option<PrivateCluster> {
    PrivateCluster::one_node(
        1,
        &format!(
            "PreemptType=preempt/partition_prio\nPreemptMode={mode}\nMinJobAge=2\n\
             PartitionName=low Nodes=ALL PriorityTier=1 MaxTime=INFINITE State=UP\n\
             PartitionName=high Nodes=ALL PriorityTier=2 MaxTime=INFINITE State=UP"
        ),
    )
}

/// Submits a 2-second job to partition `high` of `cluster`, which preempts what runs in `low`.
fn preempt(cluster: &PrivateCluster) {
    let out = cluster
        .command("sbatch")
        .args(["-p", "high", "-o", "/dev/null", "--wrap", "sleep 2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_preempted_task_is_lost_with_slurms_reason_after_slurm_forgot_it_and_resume_runs_it_again() {
    let Some(cluster) = preempting_cluster("CANCEL") else {
        return;
    };
    let conf = cluster.conf();
    let client = SlurmClient::new().with_conf(&conf);
    let dir = tempfile::tempdir().unwrap();
    let out = run_manifest(
        dir.path(),
        Some(&conf),
        &blocking_until_release("preempted", "partition = \"low\""),
        &["--detach", "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = find_submitted_bundle(dir.path(), "preempted");
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    let key = task_map(&bundle).task(0).unwrap();
    // The run has run for 1.2 s (a deliberate length: the lost record's elapsed time is checked
    // to be at least 1 s) once its `started` is that old.
    wait_until(Duration::from_secs(60), "the run to have run 1.2 s", || {
        older_than(&bundle.join("started"), Duration::from_millis(1200))
    });
    preempt(&cluster);
    // MinJobAge=2: Slurm forgets the preempted task; only its log says what happened.
    wait_until(Duration::from_secs(60), "Slurm to forget the task", || {
        client.show_task(key).is_ok_and(|j| j.is_none())
    });
    let out = hwr_on(
        dir.path(),
        Some(&conf),
        &["wait", bundle.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let records = run_records(&bundle);
    assert_killed_by_slurm(&records[0], "DUE TO PREEMPTION", 1.0);
    assert!(
        records[0]["lost-reason"]
            .as_str()
            .unwrap()
            .starts_with("PREEMPTED"),
        "{}",
        records[0]
    );

    std::fs::write(bundle.join("release"), "").unwrap();
    let out = hwr_on(
        dir.path(),
        Some(&conf),
        &["resume", bundle.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(run_records(&bundle)[0]["attempt"], 2);
    assert_eq!(attempt_folders(&bundle), [["1"]]);
}

/// Waits for `child` (a foreground `hwr-exp run`) and checks the bundle ended complete with its one
/// run ok at attempt 2, the interrupted attempt kept as `attempts/1`.
#[track_caller]
fn assert_complete_after_one_requeue(child: Child, bundle: &Path) {
    assert_complete_with_one_ok_run(child, bundle, 2);
    assert_eq!(attempt_folders(bundle), [["1"]]);
    let script = std::fs::read_to_string(bundle.join("slurm/array-0.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --requeue\n"), "{script}");
    assert!(
        script.contains("#SBATCH --signal=B:USR2@32\n"),
        "grace 2 s + 30 s: {script}"
    );
    assert!(!script.contains("--no-requeue"), "{script}");
}

/// Waits for `child` (a foreground `hwr-exp run`, exit 0) and checks the bundle ended complete
/// with its one run ok at `attempt`.
#[track_caller]
fn assert_complete_with_one_ok_run(child: Child, bundle: &Path, attempt: u64) {
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"]["ok"], 1, "{info}");
    let record = &run_records(bundle)[0];
    assert_eq!(record["outcome"], "ok", "{record}");
    assert_eq!(record["attempt"], attempt, "{record}");
}

/// Whether task `key` went back into the queue: Slurm says it is requeued or pending again, or it
/// has started again already (its next start moved the first attempt to `attempts/1`).
fn requeued(client: &SlurmClient, key: slurm::TaskKey, run_dir: &Path) -> bool {
    run_dir.join("attempts/1").is_dir()
        || client
            .show_task(key)
            .ok()
            .flatten()
            .is_some_and(|j| matches!(j.state, TaskState::Pending | TaskState::Requeued))
}

/// Waits until the task `key` of `bundle` has started its run (the start line in its log:
/// `hwr-exp slurm-task` runs, its handlers are set up; before, the batch shell has not exec'd it
/// and a signal would end bash), and gives the run's folder.
fn started_run(bundle: &Path, key: slurm::TaskKey) -> PathBuf {
    let log = bundle.join(format!("slurm/logs/{key}.err"));
    wait_until(Duration::from_secs(120), "the task to start its run", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains(slurm::log::START_PREFIX))
    });
    only_run_dir(bundle)
}

#[test]
fn with_requeue_a_preempted_task_runs_again_and_the_bundle_ends_complete() {
    let Some(cluster) = preempting_cluster("REQUEUE") else {
        return;
    };
    let conf = cluster.conf();
    let client = SlurmClient::new().with_conf(&conf);
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_manifest(
        dir.path(),
        Some(&conf),
        &blocking_until_release("requeued", "partition = \"low\"\nrequeue = true"),
        &["--quiet"],
    );
    let bundle = find_submitted_bundle(dir.path(), "requeued");
    let _cleanup = Cleanup::new(&bundle, Some(&conf));
    let key = task_map(&bundle).task(0).unwrap();
    let run_dir = started_run(&bundle, key);
    preempt(&cluster);
    wait_until(Duration::from_secs(120), "Slurm to requeue the task", || {
        requeued(&client, key, &run_dir)
    });
    // The second attempt finishes at once.
    std::fs::write(bundle.join("release"), "").unwrap();
    assert_complete_after_one_requeue(child, &bundle);
}

/// A run with `requeue = true` that blocks until `release`, started on the shared cluster (held
/// for the test) and running: its `hwr-exp run` in the foreground, its task and run folder.
struct RequeueingRun {
    _cleanup: Cleanup,
    _guard: std::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    client: SlurmClient,
    child: Child,
    bundle: PathBuf,
    key: slurm::TaskKey,
    run_dir: PathBuf,
}

impl RequeueingRun {
    /// `None` (with the shared cluster's skip message) where there is no cluster.
    fn start(name: &str) -> Option<RequeueingRun> {
        let guard = super::slurm_e2e::CLUSTER
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let client = cluster()?;
        let dir = tempfile::tempdir().unwrap();
        let manifest = blocking_until_release(name, "requeue = true");
        let child = spawn_manifest(dir.path(), None, &manifest, &["--quiet"]);
        let bundle = find_submitted_bundle(dir.path(), name);
        let cleanup = Cleanup::new(&bundle, None);
        let key = task_map(&bundle).task(0).unwrap();
        let run_dir = started_run(&bundle, key);
        Some(RequeueingRun {
            _cleanup: cleanup,
            _guard: guard,
            _dir: dir,
            client,
            child,
            bundle,
            key,
            run_dir,
        })
    }

    /// Sends USR2 to the task's batch shell (`hwr-exp slurm-task`), as Slurm does for
    /// `--signal=B:USR2@...`, and waits for the line the task writes when it has heard it and
    /// asked how long is left; gives that line.
    fn pre_timeout_signal(&self) -> String {
        let out = std::process::Command::new("scancel")
            .args(["--batch", "--signal=USR2", &self.key.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let log = self.bundle.join(format!("slurm/logs/{}.err", self.key));
        let heard = || {
            std::fs::read_to_string(&log)
                .ok()?
                .lines()
                .find(|l| l.starts_with(hwr_exp::runner::backend::slurm::task::PRE_TIMEOUT_PREFIX))
                .map(str::to_string)
        };
        wait_until(Duration::from_secs(60), "the task to hear USR2", || {
            heard().is_some()
        });
        heard().unwrap()
    }

    /// `scontrol update JobId=<the task's own id> TimeLimit=<limit>` (Slurm's time syntax, `1` =
    /// one minute).
    fn set_time_limit(&self, limit: &str) {
        let job = self
            .client
            .show_task(self.key)
            .unwrap()
            .expect("Slurm knows the task");
        let out = std::process::Command::new("scontrol")
            .args([
                "update",
                &format!("JobId={}", job.job_id),
                &format!("TimeLimit={limit}"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Lets the run end (a requeued task's next attempt ends at once).
    fn release(&self) {
        std::fs::write(self.bundle.join("release"), "").unwrap();
    }
}

#[test]
fn with_requeue_the_pre_timeout_signal_stops_the_run_requeues_the_task_and_the_bundle_ends_complete() {
    let Some(task) = RequeueingRun::start("pre-timeout") else {
        return;
    };
    // The time limit brought down to one minute: less than `grace + 30 s` is left some 30 s
    // from now. Then what Slurm does `grace + 30 s` before the time limit
    // (`--signal=B:USR2@32`): USR2 to the batch shell. The task asks how long is left and stops
    // its run when 32 s are.
    task.set_time_limit("1");
    let heard = task.pre_timeout_signal();
    assert!(heard.contains("the run is stopped in"), "{heard}");
    wait_until(Duration::from_secs(120), "the task to requeue itself", || {
        requeued(&task.client, task.key, &task.run_dir)
    });
    task.release();
    let run_dir = task.run_dir.clone();
    assert_complete_after_one_requeue(task.child, &task.bundle);
    // The interrupted attempt ran its SIGTERM trap (exit 143) within grace, as on timeout locally,
    // and wrote no run.json of its own.
    assert!(run_dir.join("attempts/1/stderr.log").is_file());
    assert!(!run_dir.join("attempts/1/run.json").exists());
}

/// Slurm may send the pre-timeout signal up to a minute earlier than asked (it checks signal
/// times about once a minute): a run with ten minutes left that hears USR2 is not stopped; it
/// ends by itself, ok at attempt 1, and nothing is requeued.
#[test]
fn with_requeue_an_early_pre_timeout_signal_does_not_stop_a_run_that_has_time_left() {
    let Some(task) = RequeueingRun::start("early-signal") else {
        return;
    };
    let heard = task.pre_timeout_signal();
    assert!(heard.contains("the run is stopped in"), "{heard}");
    // The task has heard the signal and decided: still running, nothing requeued.
    let job = task
        .client
        .show_task(task.key)
        .unwrap()
        .expect("Slurm knows the task");
    assert_eq!(job.state, TaskState::Running, "{job:?}");
    assert!(!task.run_dir.join("attempts").exists(), "not requeued");
    task.release();
    assert_complete_with_one_ok_run(task.child, &task.bundle, 1);
    assert!(!task.run_dir.join("attempts").exists(), "no attempt kept");
}
