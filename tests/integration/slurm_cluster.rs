//! The Slurm client, array split and batch scripts against a real cluster (DESIGN 8).
//!
//! Needs a cluster the environment points at: `SLURM_CONF` naming its configuration (start the
//! throw-away one-node cluster with `../shared/slurm/start-slurm.sh`, then
//! `source $SLURM_TEST_DIR/slurm.env`). Without one every test prints a note and passes, unless
//! `HWR_REQUIRE_SLURM=1` (set by `.ci/run`): then they fail.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::support::cluster;
use hwr_exp::slurm::script::{self, ScriptSpec};
use hwr_exp::slurm::{
    self, CancelTarget, QueueSnapshot, SlurmClient, SlurmError, SubmittedArray, TaskKey, TaskMap, TaskState,
};

/// Cancels the jobs it holds when dropped, so a failing test leaves nothing in the queue.
struct Jobs<'c> {
    client: &'c SlurmClient,
    ids: Vec<u64>,
}

impl Drop for Jobs<'_> {
    fn drop(&mut self) {
        let targets: Vec<CancelTarget> = self.ids.iter().map(|&id| CancelTarget::Job(id)).collect();
        let _ = self.client.cancel(&targets);
    }
}

impl<'c> Jobs<'c> {
    fn new(client: &'c SlurmClient) -> Self {
        Jobs {
            client,
            ids: Vec::new(),
        }
    }

    fn sbatch(&mut self, args: &[&str]) -> u64 {
        let s = self.client.sbatch(args).unwrap_or_else(|e| panic!("{e}"));
        self.ids.push(s.job_id);
        s.job_id
    }
}

/// Polls `squeue` every 200 ms until `done` holds for the snapshot of `ids`, and returns it;
/// panics with the last snapshot after `limit` (generous: this is a liveness bound, not a timing
/// assertion). `each` sees every snapshot on the way.
fn wait_for(
    client: &SlurmClient,
    ids: &[u64],
    limit: Duration,
    mut each: impl FnMut(&QueueSnapshot),
    done: impl Fn(&QueueSnapshot) -> bool,
) -> QueueSnapshot {
    let mut last = None;
    let found = crate::support::poll(limit, Duration::from_millis(200), || {
        let snap = client.queue(ids).unwrap_or_else(|e| panic!("{e}"));
        each(&snap);
        if done(&snap) {
            return Some(snap);
        }
        last = Some(snap);
        None
    });
    found.unwrap_or_else(|| panic!("still waiting after {limit:?}: {last:#?}"))
}

const LIMIT: Duration = Duration::from_secs(180);

fn key(array_job_id: u64, task_id: u32) -> TaskKey {
    TaskKey {
        array_job_id,
        task_id,
    }
}

#[test]
fn max_array_size_bounds_the_task_ids() {
    let Some(client) = cluster() else { return };
    let limits = client.array_limits().unwrap();
    assert!(limits.max_array_size >= 1, "{limits:?}");
    let mut jobs = Jobs::new(&client);
    let last = (limits.max_array_size - 1).to_string();
    let held = jobs.sbatch(&[
        "--hold",
        &format!("--array={last}"),
        "--output=/dev/null",
        "--wrap=true",
    ]);
    let snap = client.queue(&[held]).unwrap();
    let entry = snap
        .get(key(held, limits.max_array_size - 1))
        .expect("the held task is listed");
    assert_eq!(entry.state, TaskState::Pending);
    assert_eq!(entry.reason.as_deref(), Some("JobHeldUser"));

    let err = client
        .sbatch([
            "--hold",
            &format!("--array={}", limits.max_array_size),
            "--output=/dev/null",
            "--wrap=true",
        ])
        .expect_err("a task id of MaxArraySize is refused");
    assert!(matches!(err, SlurmError::Failed { .. }), "{err}");
    assert!(err.stderr().contains("Invalid job array specification"), "{err}");
    assert!(err.to_string().contains("sbatch --parsable --hold"), "{err}");
}

#[test]
fn a_throttled_wrap_array_runs_to_completion() {
    let Some(client) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut jobs = Jobs::new(&client);
    let out = format!("--output={}/%A_%a.out", dir.path().display());
    let id = jobs.sbatch(&["--array=0-3%2", &out, "--wrap=echo task $SLURM_ARRAY_TASK_ID"]);
    let mut most_running = 0;
    let snap = wait_for(
        &client,
        &[id],
        LIMIT,
        |s| {
            let running = s.tasks.values().filter(|e| e.state == TaskState::Running).count();
            most_running = most_running.max(running);
        },
        |s| s.tasks.len() == 4 && !s.any_active(),
    );
    assert!(most_running <= 2, "throttle %2 exceeded: {most_running} running");
    let tasks: BTreeSet<u32> = snap.tasks.keys().map(|k| k.task_id).collect();
    assert_eq!(tasks, (0..4).collect());
    for (k, e) in &snap.tasks {
        assert_eq!(e.state, TaskState::Completed, "{k}: {e:?}");
        assert_eq!(e.array_job_id, id);
        assert!(e.nodes.is_some(), "{e:?}");
        let text = std::fs::read_to_string(dir.path().join(format!("{id}_{}.out", k.task_id))).unwrap();
        assert_eq!(text, format!("task {}\n", k.task_id));
    }
}

#[test]
fn cancelled_and_failed_tasks_keep_their_state_and_reason() {
    let Some(client) = cluster() else { return };
    let mut jobs = Jobs::new(&client);
    let id = jobs.sbatch(&[
        "--array=0-1",
        "--output=/dev/null",
        "--wrap=if [ $SLURM_ARRAY_TASK_ID = 1 ]; then exit 3; fi; sleep 300",
    ]);
    wait_for(
        &client,
        &[id],
        LIMIT,
        |_| {},
        |s| {
            s.get(key(id, 0)).is_some_and(|e| e.state == TaskState::Running)
                && s.get(key(id, 1)).is_some_and(|e| e.state.is_finished())
        },
    );
    client.cancel(&[CancelTarget::Task(key(id, 0))]).unwrap();
    let snap = wait_for(
        &client,
        &[id],
        LIMIT,
        |_| {},
        |s| s.get(key(id, 0)).is_some_and(|e| e.state.is_finished()),
    );
    assert_eq!(snap.get(key(id, 0)).unwrap().state, TaskState::Cancelled);
    let failed = snap.get(key(id, 1)).unwrap();
    assert_eq!(failed.state, TaskState::Failed);
    assert_eq!(failed.reason.as_deref(), Some("NonZeroExitCode"));

    let record = client
        .show_task(key(id, 1))
        .unwrap()
        .expect("a finished task is still known");
    assert_eq!(record.state, TaskState::Failed);
    assert_eq!(record.array_job_id, Some(id));
    assert_eq!(record.array_task_id.as_deref(), Some("1"));
    assert_eq!(record.exit_code.as_deref(), Some("3:0"));
    assert_eq!(record.describe(), "FAILED (NonZeroExitCode, exit code 3:0)");
    let cancelled = client.show_task(key(id, 0)).unwrap().unwrap();
    assert_eq!(cancelled.state, TaskState::Cancelled);
    assert!(cancelled.describe().starts_with("CANCELLED"), "{cancelled:?}");
    assert!(cancelled.end_time.is_some(), "{cancelled:?}");
    // A task id the array never had.
    assert_eq!(client.show_task(key(id, 7)).unwrap(), None);
}

#[test]
fn a_task_cancelled_while_pending_vanishes_from_the_queue() {
    let Some(client) = cluster() else { return };
    let mut jobs = Jobs::new(&client);
    let id = jobs.sbatch(&["--hold", "--array=0-2", "--output=/dev/null", "--wrap=true"]);
    client.cancel(&[CancelTarget::Task(key(id, 1))]).unwrap();
    let snap = client.queue(&[id]).unwrap();
    let listed: BTreeSet<u32> = snap.tasks.keys().map(|k| k.task_id).collect();
    assert_eq!(listed, BTreeSet::from([0, 2]), "{snap:#?}");
    assert_eq!(client.show_task(key(id, 1)).unwrap(), None);
    // Cancelling the whole array keeps the rest listed as CANCELLED (until MinJobAge).
    client.cancel(&[CancelTarget::Job(id)]).unwrap();
    let snap = wait_for(&client, &[id], LIMIT, |_| {}, |s| !s.any_active());
    assert!(
        snap.tasks.values().all(|e| e.state == TaskState::Cancelled),
        "{snap:#?}"
    );
    assert_eq!(snap.tasks.len(), 2);
}

/// Writes an executable fake hwr-exp that records the subcommand's arguments, its working
/// folder and Slurm's ids into `<bundle>/ran/<index>`.
fn fake_binary(path: &Path) {
    std::fs::write(
        path,
        "#!/bin/sh\n\
         [ \"$1\" = slurm-task ] || exit 9\n\
         mkdir -p \"$2/ran\"\n\
         printf '%s %s %s %s\\n' \"$SLURM_ARRAY_JOB_ID\" \"$SLURM_ARRAY_TASK_ID\" \"$SLURM_CPUS_PER_TASK\" \"$PWD\" > \"$2/ran/$3\"\n",
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn rendered_scripts_run_every_planned_index_across_split_arrays() {
    let Some(client) = cluster() else { return };
    let limits = client.array_limits().unwrap();
    let root = tempfile::tempdir().unwrap();
    // sbatch's #SBATCH tokenizer and Slurm's %-patterns meet spaces, quotes, `$` and `%` here.
    let bundle = root.path().join("bundle's $dir 100%");
    let bin_dir = root.path().join("bin dir");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let binary = bin_dir.join("hwr-exp");
    fake_binary(&binary);

    // Index MaxArraySize + 1 cannot be a task id: the plan needs two arrays.
    let size = limits.max_array_size as usize;
    let indices = [0, 1, size + 1];
    let chunks = slurm::split(&indices, limits).unwrap();
    assert_eq!(chunks.len(), 2, "{chunks:?}");

    let mut jobs = Jobs::new(&client);
    let mut submitted: Vec<SubmittedArray> = Vec::new();
    for (n, chunk) in chunks.iter().enumerate() {
        let spec = ScriptSpec {
            job_name: script::job_name("slurm-test"),
            comment: Some("hwr-exp test".into()),
            partition: None,
            account: None,
            qos: None,
            time_limit: script::time_limit(
                Some(Duration::from_secs(30)),
                Duration::from_secs(5),
                Duration::from_secs(60),
            ),
            cpus_per_task: 1,
            nodelist: None,
            exclude: None,
            requeue: None,
            array: chunk.spec(Some(2)),
            offset: chunk.offset,
            after: submitted.last().map(|a| a.job_id),
            extra_args: vec![],
            binary: binary.clone(),
            bundle: bundle.clone(),
        };
        std::fs::create_dir_all(spec.log_dir()).unwrap();
        let relative = format!("{}/array-{n}.sbatch", script::SLURM_DIR);
        let path = bundle.join(&relative);
        std::fs::write(&path, spec.render().unwrap()).unwrap();
        let s = client.submit_script(&path).unwrap_or_else(|e| panic!("{e}"));
        jobs.ids.push(s.job_id);
        submitted.push(SubmittedArray {
            job_id: s.job_id,
            offset: chunk.offset,
            array: spec.array.to_string(),
            script: relative,
            state: slurm::ArrayState::Released,
        });
    }
    let ids: Vec<u64> = submitted.iter().map(|a| a.job_id).collect();
    let snap = wait_for(
        &client,
        &ids,
        LIMIT,
        |_| {},
        |s| s.tasks.len() == indices.len() && !s.any_active(),
    );
    let map = TaskMap::new(&submitted).unwrap();
    for index in indices {
        let task = map.task(index).unwrap();
        let entry = snap
            .get(task)
            .unwrap_or_else(|| panic!("{task} not listed: {snap:#?}"));
        let log = bundle.join(format!("slurm/logs/{}_{}.err", task.array_job_id, task.task_id));
        let stderr = std::fs::read_to_string(&log).unwrap_or_else(|e| format!("{}: {e}", log.display()));
        assert_eq!(
            entry.state,
            TaskState::Completed,
            "{task}: {entry:?}; stderr: {stderr}"
        );
        assert!(log.is_file(), "{}", log.display());
        let ran = std::fs::read_to_string(bundle.join("ran").join(index.to_string())).unwrap();
        assert_eq!(
            ran,
            format!("{} {} 1 {}\n", task.array_job_id, task.task_id, bundle.display()),
            "plan index {index}"
        );
    }
    // The second array waited for the first (afterany): none of its tasks started before the
    // first array's last task had ended, so its record's start is at or after that end.
    let first_end = map_records(&client, &submitted[0], &map)
        .into_iter()
        .filter_map(|r| r.end_time)
        .max()
        .unwrap();
    for r in map_records(&client, &submitted[1], &map) {
        let start = r.start_time.unwrap();
        assert!(
            start >= first_end,
            "second array started {start} before the first ended {first_end}"
        );
    }
}

/// `scontrol show job` records of every current task of one array.
fn map_records(client: &SlurmClient, array: &SubmittedArray, map: &TaskMap) -> Vec<slurm::JobRecord> {
    slurm::ArraySpec::parse(&array.array)
        .unwrap()
        .task_ids()
        .iter()
        .map(|&t| key(array.job_id, t))
        .filter(|k| map.index(*k).is_some())
        .map(|k| {
            client
                .show_task(k)
                .unwrap()
                .unwrap_or_else(|| panic!("{k} forgotten"))
        })
        .collect()
}

/// A private cluster starts with its own nodes and settings, runs a job on each node, and is
/// gone (its slurmctld stopped) once dropped: the support other Slurm tests build on.
#[test]
fn private_cluster_has_its_own_nodes_and_settings_and_stops_when_dropped() {
    use crate::support::slurm::{PrivateCluster, PrivateClusterSpec};
    let Some(c) = PrivateCluster::start(PrivateClusterSpec {
        nodes: 2,
        cpus: 2,
        extra_conf: "MaxJobCount=77",
    }) else {
        return;
    };
    let out = c
        .command("sinfo")
        .args(["-h", "-N", "-o", "%N"])
        .output()
        .unwrap();
    let nodes: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(nodes, BTreeSet::from(["n1".to_owned(), "n2".to_owned()]));
    let out = c.command("scontrol").args(["show", "config"]).output().unwrap();
    let config = String::from_utf8_lossy(&out.stdout);
    assert!(
        config
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["MaxJobCount", "=", "77"]),
        "{config}"
    );
    // One 2-node job: each node says its own hostname.
    let out = c
        .command("srun")
        .args(["-N2", "-n2", "--time=1", "hostname"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hosts: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(hosts, BTreeSet::from(["n1".to_owned(), "n2".to_owned()]));
    let pid: i32 = std::fs::read_to_string(c.dir().join("run/slurmctld.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    drop(c);
    // stop-slurm.sh waits for slurmctld's SIGTERM shutdown (then SIGKILLs it); under load the
    // process may be reaped a moment later: gone or a zombie is stopped.
    let stopped = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        let gone = stat.map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        gone.then_some(())
    };
    assert!(
        crate::support::poll(Duration::from_secs(60), Duration::from_millis(100), stopped).is_some(),
        "slurmctld {pid} still runs after the cluster was dropped"
    );
}

/// The zombies whose parent is this test process, by command name (from `/proc/*/stat`).
fn zombie_children() -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            let (head, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            (fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str()))
                .then(|| head.split_once('(').map_or("", |(_, c)| c).to_owned())
        })
        .collect()
}

/// The tasks of a private cluster leave no zombie in the test binary, even when it is a child
/// subreaper (as the in-process launcher tests make it): the cluster's daemons run under a
/// reaper of their own. Before, every `slurmstepd` of a finished task was adopted by the test
/// binary and never reaped, and `slurmstepd`'s scans of `/proc` slowed with the zombies.
#[test]
fn a_private_clusters_tasks_leave_no_zombie_in_a_subreaper_test_binary() {
    use crate::support::slurm::PrivateCluster;
    // What the launcher tests do to this process, once for all tests.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    let Some(c) = PrivateCluster::one_node(2, "") else {
        return;
    };
    for _ in 0..3 {
        let out = c
            .command("srun")
            .args(["-n1", "--time=1", "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // A job step's slurmstepd ends after srun returns: give the reaper its moment, then look.
    let steps = |z: &Vec<String>| z.iter().filter(|c| c.starts_with("slurmstepd")).count();
    let settled = crate::support::poll(Duration::from_secs(5), Duration::from_millis(100), || {
        let z = zombie_children();
        (steps(&z) > 0).then_some(z)
    });
    assert_eq!(settled, None, "zombie slurmstepd children of the test binary");
    assert_eq!(steps(&zombie_children()), 0);
}
