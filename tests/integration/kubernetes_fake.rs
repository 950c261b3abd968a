//! The kubernetes executor against a stand-in `kubectl` (tests/fixtures/k8s/fake-kubectl.py: no
//! cluster runs on the test machines). The stand-in logs its argv, keeps the applied Job, runs
//! the Job's container command for the indexes it is told to (as a kubelet would: the real task
//! entry point writes the real run folders) and answers `get pods` with a pod list in kubectl's
//! shape (tests/fixtures/k8s/pods-*.json). What is real: the Job document, the task command each
//! pod would run, the bundle, the lost records. What is not: the API server, the scheduler, the
//! kubelet, the pod states (the fixtures are hand-written in the form kubectl prints).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{ManifestBuilder, bin, code, hwr_command, json, repo, source_path, stderr};

/// `hwr-exp run` of the manifest [`manifest`] writes.
const RUN: &[&str] = &["run", "experiment.toml", "--results-dir", "results"];

/// A folder holding `kubectl` (the stand-in) for PATH, and the stand-in's state folder, under
/// `root` (outside the repository: the resumed bundle would see them as drift).
fn fake_kubectl(root: &Path) -> (PathBuf, PathBuf) {
    let bin_dir = root.join("fakebin");
    let state = root.join("kube-state");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::symlink(
        source_path("tests/fixtures/k8s/fake-kubectl.py"),
        bin_dir.join("kubectl"),
    )
    .unwrap();
    (bin_dir, state)
}

/// A manifest of three runs on the kubernetes executor.
fn manifest(dir: &Path) -> PathBuf {
    ManifestBuilder::argv("kube", &["true"])
        .text_output()
        .repetitions(3)
        .set("executor", "kind", "kubernetes")
        .set("executor", "image", "registry.example/hwr-exp:1")
        .set("executor", "namespace", "bench")
        .set("executor", "context", "kind-bench")
        .set("executor", "volume", "results-pvc")
        .write(dir)
}

/// `hwr-exp ARGS` with the stand-in first on PATH and the test's `hwr-exp` after it.
fn command(dir: &Path, fake: &(PathBuf, PathBuf), pods: &str, lost: &str, args: &[&str]) -> Command {
    let mut cmd = hwr_command(dir);
    let path = format!(
        "{}:{}:{}",
        fake.0.display(),
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.args(args)
        .env("PATH", path)
        .env("FAKE_KUBE_DIR", &fake.1)
        .env(
            "FAKE_KUBE_PODS",
            source_path(&format!("tests/fixtures/k8s/{pods}")),
        )
        .env("FAKE_KUBE_LOST", lost)
        .stdin(Stdio::null());
    cmd
}

fn argv_log(state: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(state.join("argv.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn the_bundle(dir: &Path) -> PathBuf {
    crate::support::the_bundle(&dir.join("results"), "kube")
}

/// Submit and watch: the Job is applied with the manifest's context and namespace and kept in
/// the bundle; the runs the pods ran are counted with their node; the index whose pod failed
/// (Evicted, OOMKilled on node-b) without a run.json is recorded `lost` with that account.
#[test]
fn submits_watches_and_records_the_lost_index() {
    let r = repo();
    let dir = r.path();
    manifest(dir);
    r.commit("manifest");
    let state = tempfile::tempdir().unwrap();
    let fake = fake_kubectl(state.path());
    let out = command(dir, &fake, "pods-one-failed.json", "2", RUN)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    let bundle = the_bundle(dir);
    let calls = argv_log(&fake.1);
    let joined: Vec<String> = calls.iter().map(|c| c.join(" ")).collect();
    assert!(
        joined
            .iter()
            .any(|c| c == "--context=kind-bench --namespace=bench --request-timeout=30s apply -f -"),
        "{joined:#?}"
    );
    let applied = std::fs::read_to_string(fake.1.join("applied.json")).unwrap();
    let job: serde_json::Value = serde_json::from_str(&applied).unwrap();
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("hwr-kube-"), "{name}");
    assert_eq!(job["spec"]["completions"], 3);
    assert!(
        joined
            .iter()
            .any(|c| c.ends_with(&format!("get pods -l job-name={name} -o json"))),
        "{joined:#?}"
    );
    // The document applied is the one the bundle keeps.
    let kept = std::fs::read_to_string(bundle.join("kubernetes").join(format!("{name}.json"))).unwrap();
    assert_eq!(kept, applied);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["executor"], "kubernetes");
    let mut records = crate::support::run_records(&bundle);
    records.sort_by_key(|r| r["index"].as_u64());
    assert_eq!(records.len(), 3, "{records:#?}");
    for r in &records[..2] {
        assert_eq!(r["outcome"], "ok", "{r:#}");
        assert_eq!(r["node"], "node-a", "{r:#}");
    }
    let lost = &records[2];
    assert_eq!(lost["termination"], "lost", "{lost:#}");
    let reason = lost["lost-reason"].as_str().unwrap();
    assert!(
        reason.contains("Failed (Evicted: The node was low on resource: memory."),
        "{reason}"
    );
    assert!(reason.contains("OOMKilled, exit code 137"), "{reason}");
    assert!(reason.ends_with("on node node-b"), "{reason}");
    assert_eq!(lost["hostname"], "node-b", "{lost:#}");
    // Nothing deleted: the Job ended by itself.
    assert!(!joined.iter().any(|c| c.contains("delete job")), "{joined:#?}");

    // `resume` submits the lost run alone, as a second Job whose one index maps to plan index 2
    // through /bin/sh; the pods of the stand-in now all run.
    let out = command(
        dir,
        &fake,
        "pods-one-failed.json",
        "",
        &["resume", bundle.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let again = json(&fake.1.join("applied.json"));
    assert_eq!(again["metadata"]["name"], format!("{name}-2"));
    assert_eq!(again["spec"]["completions"], 1);
    assert_eq!(
        again["spec"]["template"]["spec"]["containers"][0]["command"][0],
        "/bin/sh"
    );
    let mut records = crate::support::run_records(&bundle);
    records.sort_by_key(|r| r["index"].as_u64());
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r["outcome"] == "ok"), "{records:#?}");
    assert_eq!(records[2]["node"], "node-a");
}

/// The Job's deadline passes: the index whose pod was stopped is lost with the pod's account, and
/// the index whose pod never started with the Job's (`kubectl get job`: Failed, DeadlineExceeded).
#[test]
fn deadline_loses_the_indexes_left() {
    let r = repo();
    let dir = r.path();
    manifest(dir);
    r.commit("manifest");
    let state = tempfile::tempdir().unwrap();
    let fake = fake_kubectl(state.path());
    let out = command(dir, &fake, "pods-deadline.json", "1 2", RUN)
        .env(
            "FAKE_KUBE_JOB",
            source_path("tests/fixtures/k8s/job-deadline.json"),
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let name = json(&fake.1.join("applied.json"))["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let mut records = crate::support::run_records(&the_bundle(dir));
    records.sort_by_key(|r| r["index"].as_u64());
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["outcome"], "ok");
    let stopped = records[1]["lost-reason"].as_str().unwrap();
    assert!(
        stopped.contains(
            "Failed (DeadlineExceeded: Pod was active on the node longer than the specified deadline)"
        ),
        "{stopped}"
    );
    assert!(
        stopped.contains("container run: Error, exit code 143"),
        "{stopped}"
    );
    assert_eq!(
        records[2]["lost-reason"],
        format!(
            "kubernetes job {name} ended (Failed: DeadlineExceeded: Job was active longer than specified deadline), before the pod of completion index 2 started"
        )
    );
    assert!(argv_log(&fake.1).iter().any(|c| c.ends_with(&[
        "get".into(),
        "job".into(),
        name.clone(),
        "-o".into(),
        "json".into(),
        "--ignore-not-found".into()
    ])));
}

/// Ctrl-C while the pods wait to be scheduled deletes the Job; the bundle ends interrupted with
/// no run recorded.
#[test]
fn interrupt_deletes_the_job() {
    let r = repo();
    let dir = r.path();
    manifest(dir);
    r.commit("manifest");
    let state = tempfile::tempdir().unwrap();
    let fake = fake_kubectl(state.path());
    let child = command(dir, &fake, "pods-pending.json", "0 1 2", RUN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (without a time limit of the test's own) until the waiter has looked at the pods.
    while !argv_log(&fake.1).iter().any(|c| c.contains(&"pods".to_string())) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    crate::support::signal(child.id(), crate::support::Signal::INT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let name = json(&fake.1.join("applied.json"))["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let calls = argv_log(&fake.1);
    let last = calls.last().unwrap();
    assert_eq!(
        last[3..],
        [
            "delete",
            "job",
            name.as_str(),
            "--ignore-not-found",
            "--wait=false"
        ],
        "{calls:#?}"
    );
    let bundle = the_bundle(dir);
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");
    assert!(crate::support::run_records(&bundle).is_empty());
}

/// Without `image` the manifest is refused by `check` (exit 2); `run --executor kubernetes` of a
/// local manifest submits nothing and does not even ask kubectl (exit 3); `--fail-fast` is refused
/// (exit 2).
#[test]
fn image_and_volume_are_required() {
    let r = repo();
    let dir = r.path();
    ManifestBuilder::argv("kube", &["true"])
        .text_output()
        .set("executor", "kind", "kubernetes")
        .set("executor", "volume", "results-pvc")
        .write(dir);
    let out = hwr_command(dir)
        .args(["check", "experiment.toml"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the kubernetes executor needs `image` in [executor]"),
        "{}",
        stderr(&out)
    );
    ManifestBuilder::argv("kube", &["true"]).text_output().write(dir);
    r.commit("manifest");
    let state = tempfile::tempdir().unwrap();
    let fake = fake_kubectl(state.path());
    let mut run = RUN.to_vec();
    run.extend(["--executor", "kubernetes"]);
    let out = command(dir, &fake, "pods-pending.json", "", &run)
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("needs [executor] image and volume"),
        "{}",
        stderr(&out)
    );
    manifest(dir);
    r.commit("kubernetes manifest");
    let out = command(
        dir,
        &fake,
        "pods-pending.json",
        "",
        &["run", "experiment.toml", "--fail-fast"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "--fail-fast needs the local executor: the kubernetes executor submits every run at once"
        ),
        "{}",
        stderr(&out)
    );
    assert!(argv_log(&fake.1).is_empty());
}

/// `plan --format k8s` prints the Job without submitting anything; a local manifest without
/// the kubernetes keys is told what it lacks.
#[test]
fn plan_prints_the_job() {
    let r = repo();
    let dir = r.path();
    let m = manifest(dir);
    let out = hwr_command(dir)
        .args(["plan", "--format", "k8s", "--results-dir", "/srv/results"])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let job: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert_eq!(job["spec"]["completions"], 3);
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["args"][1]
            .as_str()
            .unwrap()
            .starts_with("/srv/results/kube/")
    );
    assert_eq!(container["volumeMounts"][0]["mountPath"], "/srv/results");
    ManifestBuilder::argv("kube", &["true"]).text_output().write(dir);
    let out = hwr_command(dir)
        .args(["plan", "--format", "k8s", "experiment.toml"])
        .output()
        .unwrap();
    assert_ne!(code(&out), 0);
    assert!(
        stderr(&out).contains("needs [executor] image and volume"),
        "{}",
        stderr(&out)
    );
}

/// The kubernetes keys belong to `kind = "kubernetes"` and the slurm keys are refused there.
#[test]
fn executor_keys_are_checked_by_kind() {
    let r = repo();
    let dir = r.path();
    ManifestBuilder::argv("kube", &["true"])
        .set("executor", "image", "i")
        .write(dir);
    let out = hwr_command(dir)
        .args(["check", "experiment.toml"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out)
            .contains("`image` applies only to the kubernetes executor, and this manifest's is local"),
        "{}",
        stderr(&out)
    );
    ManifestBuilder::argv("kube", &["true"])
        .set("executor", "kind", "kubernetes")
        .set("executor", "partition", "cpu")
        .set("executor", "mount-path", "results")
        .write(dir);
    let out = hwr_command(dir)
        .args(["check", "experiment.toml"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 2);
    assert!(
        err.contains("`partition` applies only to the slurm executor, and this manifest's is kubernetes"),
        "{err}"
    );
    assert!(
        err.contains("`mount-path` \"results\" is not an absolute path"),
        "{err}"
    );
}
