//! Tests of the Slurm client: answers parsed, and commands run against fake client programs.

use super::*;
use crate::slurm::refusal_limit;
use std::os::unix::fs::PermissionsExt;

/// The head and the lines around the array limits of `scontrol show config` (22.05.8).
const CONFIG: &str = "\
Configuration data as of 2026-11-30T19:02:09
AccountingStorageBackupHost = (null)
KillWait                = 5 sec
MaxArraySize            = 11
MinJobAge               = 3600 sec
SchedulerParameters     = bf_continue,max_array_tasks=500
X11Parameters           = (null)

Slurmctld(primary) at vm is UP
";

#[test]
fn reads_array_limits_from_the_config() {
    let config = parse_config(CONFIG);
    assert!(config.contains(&("MinJobAge".into(), "3600 sec".into())));
    assert!(!config.iter().any(|(k, _)| k.contains("Slurmctld")));
    assert_eq!(
        array_limits(&config).unwrap(),
        ArrayLimits {
            max_array_size: 11,
            max_array_tasks: Some(500)
        }
    );
    let plain = parse_config("MaxArraySize            = 1001\nSchedulerParameters     = (null)\n");
    assert_eq!(array_limits(&plain).unwrap().max_array_tasks, None);
    assert!(array_limits(&parse_config("KillWait = 5 sec\n")).is_err());
}

#[test]
fn reads_parsable_submissions() {
    assert_eq!(parse_submission("14\n", String::new()).unwrap().job_id, 14);
    let s = parse_submission("15;ci\n", "sbatch: warning: x".into()).unwrap();
    assert_eq!((s.job_id, s.cluster.as_deref()), (15, Some("ci")));
    assert_eq!(s.warnings, "sbatch: warning: x");
    assert!(parse_submission("", String::new()).is_err());
    assert!(parse_submission("Submitted batch job 3\n", String::new()).is_err());
}

/// A folder of fake Slurm programs, each a shell script.
fn fakes(scripts: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in scripts {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

#[test]
fn errors_carry_the_command_line_status_and_stderr() {
    let dir = fakes(&[(
        "sbatch",
        "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2; exit 1",
    )]);
    let client = SlurmClient::new()
        .with_bin_dir(dir.path())
        .with_conf("/etc/my slurm.conf");
    let err = client.sbatch(["--array=0-3", "/b/x.sbatch"]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`SLURM_CONF='/etc/my slurm.conf' "), "{text}");
    assert!(
        text.contains("sbatch --parsable '--array=0-3' /b/x.sbatch` failed (exit status: 1)"),
        "{text}"
    );
    assert!(text.ends_with("Invalid partition name specified"), "{text}");

    let missing = SlurmClient::new().with_bin_dir(dir.path().join("nowhere"));
    let err = missing.ping().unwrap_err();
    assert!(matches!(err, SlurmError::Spawn { .. }));
    assert!(err.to_string().contains("is Slurm's client installed"), "{err}");
}

#[test]
fn passes_slurm_conf_and_reads_answers() {
    let dir = fakes(&[
        (
            "sbatch",
            "echo \"$SLURM_CONF\" > \"$(dirname \"$0\")/conf-seen\"; echo '21;ci'",
        ),
        (
            "squeue",
            "echo \"$@\" > \"$(dirname \"$0\")/squeue-args\"; echo '22|21|0|RUNNING|None|n1'",
        ),
        ("scancel", "echo \"$@\" > \"$(dirname \"$0\")/scancel-args\""),
        (
            "scontrol",
            "echo \"slurm_load_jobs error: Invalid job id specified\" >&2; exit 1",
        ),
    ]);
    let client = SlurmClient::new()
        .with_bin_dir(dir.path())
        .with_conf("/c/slurm.conf");
    assert_eq!(client.submit_script(Path::new("/b/a.sbatch")).unwrap().job_id, 21);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("conf-seen")).unwrap(),
        "/c/slurm.conf\n"
    );
    let snap = client.queue(&[21, 30]).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("squeue-args")).unwrap(),
        "-h -r -t all -j 21,30 -o %A|%F|%K|%T|%r|%N\n"
    );
    let key = TaskKey {
        array_job_id: 21,
        task_id: 0,
    };
    assert_eq!(snap.get(key).unwrap().nodes.as_deref(), Some("n1"));
    assert_eq!(client.show_task(key).unwrap(), None);
    client
        .cancel(&[CancelTarget::Job(21), CancelTarget::Task(key)])
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("scancel-args")).unwrap(),
        "21 21_0\n"
    );
    assert_eq!(client.queue(&[]).unwrap(), QueueSnapshot::default());
}

#[test]
fn reads_job_limits_and_association_submit_limits() {
    let config = parse_config(
        "MaxJobCount             = 30\nMinJobAge               = 300 sec\nAccountingStorageType   = accounting_storage/none\n",
    );
    assert_eq!(
        job_limits(&config),
        JobLimits {
            max_job_count: Some(30),
            min_job_age: Some(300),
            accounting: false
        }
    );
    assert!(
        job_limits(&parse_config(
            "AccountingStorageType = accounting_storage/slurmdbd\n"
        ))
        .accounting
    );
    assert_eq!(job_limits(&[]).max_job_count, None);
    let rows = "physics|500|\nphysics||200\nchem|50|\n";
    assert_eq!(parse_submit_limit(rows, None).unwrap(), Some(50));
    assert_eq!(parse_submit_limit(rows, Some("physics")).unwrap(), Some(200));
    assert_eq!(parse_submit_limit("physics||\n", None).unwrap(), None);
    assert_eq!(parse_submit_limit("", None).unwrap(), None);
    assert!(parse_submit_limit("physics|x|\n", None).is_err());
    assert!(parse_submit_limit("physics\n", None).is_err());
}

#[test]
fn no_accounting_or_no_sacctmgr_is_no_submit_limit() {
    let dir = fakes(&[(
        "sacctmgr",
        "echo 'You are not running a supported accounting_storage plugin' >&2; echo \"Only 'accounting_storage/slurmdbd' is supported.\" >&2; exit 1",
    )]);
    let client = SlurmClient::new().with_bin_dir(dir.path());
    assert_eq!(client.user_submit_limit("root", None).unwrap(), None);
    let empty = tempfile::tempdir().unwrap();
    let client = SlurmClient::new().with_bin_dir(empty.path());
    assert_eq!(client.user_submit_limit("root", None).unwrap(), None);
    let dir = fakes(&[(
        "sacctmgr",
        "echo \"$@\" > \"$(dirname \"$0\")/args\"; echo 'physics|40|'",
    )]);
    let client = SlurmClient::new().with_bin_dir(dir.path());
    assert_eq!(
        client.user_submit_limit("ann", Some("physics")).unwrap(),
        Some(40)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("args")).unwrap(),
        "-nP show assoc where user=ann format=Account,MaxSubmit,GrpSubmit\n"
    );
    let dir = fakes(&[(
        "sacctmgr",
        "echo 'sacctmgr: error: Problem talking to the database: Connection refused' >&2; exit 1",
    )]);
    let client = SlurmClient::new().with_bin_dir(dir.path());
    assert!(client.user_submit_limit("ann", None).is_err());
}

#[test]
fn transient_errors_are_retried_with_back_off_and_permanent_ones_fail_at_once() {
    let dir = fakes(&[(
        "sbatch",
        "n=$(cat \"$(dirname \"$0\")/n\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$(dirname \"$0\")/n\"\n\
             if [ $n -le 2 ]; then echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' >&2; exit 1; fi\n\
             echo 31",
    )]);
    let notes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = notes.clone();
    let client = SlurmClient::new()
        .with_bin_dir(dir.path())
        .with_retry(RetryPolicy {
            attempts: 4,
            first_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(15),
        })
        .with_observer(Arc::new(move |n: &RetryNote| {
            seen.lock().unwrap().push(n.to_string())
        }));
    assert_eq!(client.sbatch(["x"]).unwrap().job_id, 31);
    let notes = notes.lock().unwrap().clone();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "sbatch failed (Socket timed out on send/recv operation); retrying in 0 s (try 2 of 4)"
        ),
        "{notes:?}"
    );
    assert!(notes[1].contains("try 3 of 4"), "{notes:?}");

    let dir = fakes(&[(
        "sbatch",
        "echo x >> \"$(dirname \"$0\")/tries\"; echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2; exit 1",
    )]);
    let client = SlurmClient::new().with_bin_dir(dir.path());
    let err = client.sbatch(["x"]).unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(err.slurm_message(), "Invalid partition name specified");
    assert_eq!(refusal_limit(&err.slurm_message()), Some("partition"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tries")).unwrap(),
        "x\n",
        "a permanent error is not retried"
    );
    assert_eq!(
        refusal_limit("Resource temporarily unavailable"),
        Some("MaxJobCount")
    );
}

#[test]
fn sbatch_input_variables_are_those_that_override_a_script() {
    assert!(sbatch_input("SBATCH_TIMELIMIT"));
    assert!(sbatch_input("SLURM_MEM_PER_CPU"));
    assert!(!sbatch_input("SLURM_CONF"));
    assert!(!sbatch_input("PATH"));
    assert!(query_input("SQUEUE_FORMAT") && query_input("SLURM_TIME_FORMAT"));
}

#[test]
fn a_purged_array_is_an_empty_queue_not_an_error() {
    let dir = fakes(&[(
        "squeue",
        "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
    )]);
    let client = SlurmClient::new().with_bin_dir(dir.path());
    assert_eq!(client.queue(&[999]).unwrap(), QueueSnapshot::default());
    let dir = fakes(&[(
        "squeue",
        "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1",
    )]);
    let client = SlurmClient::new().with_bin_dir(dir.path());
    let err = client.queue(&[999]).unwrap_err();
    assert!(
        err.to_string().contains("Unable to contact slurm controller"),
        "{err}"
    );
}
