//! The generated Job checked against Kubernetes' own schema (tests/fixtures/k8s/, the strict JSON
//! schemas of a 1.33 and a 1.37 batch/v1 Job) and against k8s-openapi's types; the pod-state reading.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::job::{self, JobParams};
use super::pods::{self, IndexState};
use crate::manifest::KubernetesConfig;

fn config() -> KubernetesConfig {
    KubernetesConfig {
        image: Some("registry.example/hwr-exp:1".into()),
        namespace: Some("bench".into()),
        volume: Some("results-pvc".into()),
        mount_path: Some("/results".into()),
        memory: Some(2 << 30),
        ..KubernetesConfig::default()
    }
}

fn params<'a>(config: &'a KubernetesConfig, indices: &'a [usize]) -> JobParams<'a> {
    JobParams {
        config,
        name: job::job_name(
            Path::new("/srv/r/size_compare/20261205T171553Z-ab12"),
            "size_compare",
            1,
        ),
        experiment: "size_compare",
        bundle: Path::new("/srv/r/size_compare/20261205T171553Z-ab12"),
        indices,
        jobs: 4,
        cpus_per_run: 2,
        timeout: Some(Duration::from_secs(120)),
        grace: Duration::from_secs(5),
    }
}

fn schema_validator(version: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/k8s/job-batch-v1-{version}.strict.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("the Kubernetes schema compiles")
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// The Job of a full plan and of a subset (resume) are valid batch/v1 Jobs by the strict schemas
/// of Kubernetes 1.33 and 1.37 (no unknown field anywhere, every type right), and the check
/// bites: an unknown field or a wrong type fails it.
#[test]
fn job_is_valid_by_the_kubernetes_schema() {
    for version in ["1.33", "1.37"] {
        valid_by(&schema_validator(version));
    }
}

fn valid_by(v: &jsonschema::Validator) {
    let c = config();
    for indices in [vec![0, 1, 2, 3, 4, 5], vec![2, 5]] {
        let doc = serde_json::to_value(job::build(&params(&c, &indices))).unwrap();
        assert_eq!(errors(v, &doc), Vec::<String>::new(), "{doc:#}");
    }
    let all: Vec<usize> = (0..6).collect();
    let good = serde_json::to_value(job::build(&params(&c, &all))).unwrap();
    let mut unknown = good.clone();
    unknown["spec"]["template"]["spec"]["containers"][0]["cpus"] = json!(2);
    assert!(!errors(v, &unknown).is_empty());
    let mut wrong = good.clone();
    wrong["spec"]["completions"] = json!("6");
    assert!(!errors(v, &wrong).is_empty());
}

/// The Job survives k8s-openapi's typed Job both ways unchanged: no field its types do not know
/// (which deserialising would drop) and nothing the types would add.
#[test]
fn job_round_trips_through_the_typed_job() {
    let c = config();
    let indices: Vec<usize> = (0..6).collect();
    let text = job::to_json(&job::build(&params(&c, &indices))).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    let typed: Job = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), value);
}

/// What the Job says: one completion index a run, parallelism from `jobs` (not above the runs),
/// requests = limits, the deadline per pod slot, no retries.
#[test]
fn job_fields() {
    let c = config();
    let indices: Vec<usize> = (0..6).collect();
    let doc = serde_json::to_value(job::build(&params(&c, &indices))).unwrap();
    let spec = &doc["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 6);
    assert_eq!(spec["parallelism"], 4);
    assert_eq!(spec["backoffLimitPerIndex"], 0);
    // ceil(6 / 4) = 2 rounds of 120 + 5 + 60 s.
    assert_eq!(spec["activeDeadlineSeconds"], 370);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let container = &pod["containers"][0];
    assert_eq!(
        container["resources"]["requests"],
        json!({"cpu": "2", "memory": "2147483648"})
    );
    assert_eq!(
        container["resources"]["limits"],
        container["resources"]["requests"]
    );
    assert_eq!(container["command"], json!(["hwr-exp"]));
    assert_eq!(
        container["args"],
        json!(["task", "/results/size_compare/20261205T171553Z-ab12"])
    );
    assert_eq!(container["volumeMounts"][0]["mountPath"], "/results");
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "results-pvc"
    );
    // Two runs, jobs = 4: parallelism 2.
    let two = serde_json::to_value(job::build(&params(&c, &[0, 1]))).unwrap();
    assert_eq!(two["spec"]["parallelism"], 2);
    assert_eq!(two["spec"]["activeDeadlineSeconds"], 185);
    // No timeout, no deadline; no memory, no memory request.
    let mut p = params(&c, &indices);
    p.timeout = None;
    let plain = KubernetesConfig {
        memory: None,
        mount_path: None,
        ..config()
    };
    p.config = &plain;
    let doc = serde_json::to_value(job::build(&p)).unwrap();
    assert!(doc["spec"].get("activeDeadlineSeconds").is_none());
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"],
        json!({"cpu": "2"})
    );
    // Without mount-path the volume is mounted at the results folder: the same bundle path.
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        "/srv/r"
    );
}

/// Job names are DNS labels of at most 52 characters, distinct per attempt.
#[test]
fn job_names() {
    let b = Path::new("/r/x/20261205T171553Z-ab12");
    assert_eq!(
        job::job_name(b, "size_compare", 1),
        "hwr-size-compare-20261205t171553z-ab12"
    );
    assert_eq!(
        job::job_name(b, "size_compare", 2),
        "hwr-size-compare-20261205t171553z-ab12-2"
    );
    let long = job::job_name(b, &"a".repeat(80), 3);
    assert!(long.len() <= job::MAX_JOB_NAME, "{long}");
    assert!(long.ends_with("-20261205t171553z-ab12-3"), "{long}");
    assert!(
        long.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    );
}

/// A subset's pods map their completion index to the plan index through /bin/sh: run the
/// generated command with a stand-in `hwr-exp` that prints its arguments.
#[test]
fn subset_invocation_picks_the_plan_index() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("hwr-exp");
    std::fs::write(&fake, "#!/bin/sh\necho \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let task = job::task_invocation(Path::new("/results/e/b"), &[3, 7, 9]);
    assert_eq!(task.command, ["/bin/sh", "-c"]);
    let runs = task
        .env
        .iter()
        .find(|e| e.name == "HWR_EXP_RUNS")
        .and_then(|e| e.value.clone())
        .unwrap();
    for (k, want) in [(0, "3"), (1, "7"), (2, "9")] {
        let out = std::process::Command::new(&task.command[0])
            .arg(&task.command[1])
            .args(&task.args)
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .env("HWR_EXP_RUNS", &runs)
            .env("HWR_EXP_BUNDLE", "/results/e/b")
            .env("JOB_COMPLETION_INDEX", k.to_string())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("task --index {want} /results/e/b")
        );
    }
}

fn pod(index: usize, phase: &str, status: Value) -> Pod {
    let mut s = json!({"phase": phase});
    if let (Some(s), Some(extra)) = (s.as_object_mut(), status.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("hwr-x-{index}-abcde"),
            "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string()}
        },
        "spec": {"containers": [{"name": "run"}], "nodeName": "node-b"},
        "status": s
    }))
    .unwrap()
}

/// A failed pod's account names the pod, its reason, the container's end and the node.
#[test]
fn failed_pod_account() {
    let p = pod(
        3,
        "Failed",
        json!({
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "startTime": "2026-12-05T17:00:00Z",
            "containerStatuses": [{
                "name": "run", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                          "finishedAt": "2026-12-05T17:00:09Z"}}
            }]
        }),
    );
    assert_eq!(pods::completion_index(&p), Some(3));
    let IndexState::Failed(a) = pods::index_state(&[&p]) else {
        panic!("not failed")
    };
    assert_eq!(
        a.reason,
        "pod hwr-x-3-abcde Failed (Evicted: The node was low on resource: memory.); container run: OOMKilled, exit code 137 on node node-b"
    );
    assert_eq!(a.node.as_deref(), Some("node-b"));
    assert!(a.started.is_some() && a.ended > a.started);
    // A replacement that runs wins over the failed pod.
    let r = pod(3, "Running", json!({}));
    assert_eq!(
        pods::index_state(&[&p, &r]),
        IndexState::Running(Some("node-b".into()))
    );
    let pending = pod(
        4,
        "Pending",
        json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
    );
    assert_eq!(
        pods::index_state(&[&pending]),
        IndexState::Pending(Some("Unschedulable".into()))
    );
    assert_eq!(pods::index_state(&[]), IndexState::NoPod);
}
