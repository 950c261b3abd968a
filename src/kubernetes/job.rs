//! The Kubernetes Indexed Job of a bundle's runs (DESIGN 8, docs/kubernetes.md): one completion
//! index a run, typed with the k8s-openapi crate (API version 1.33, the oldest that crate covers:
//! the Job is accepted by 1.33 and every later API server) and written as JSON, which `kubectl
//! apply -f` reads as it reads YAML.
//!
//! The Job, for runs `indices` of a plan of bundle `B` under results folder `R`:
//!
//! - `completionMode: Indexed`, `completions` = the number of runs, `parallelism` = `min(jobs,
//!   runs)`;
//! - each pod runs the task entry point ([`task_invocation`]) for its completion index, the
//!   bundle on the PersistentVolumeClaim `volume` mounted at `mount-path` (default `R`'s own
//!   absolute path, so the bundle has the same path in the pods as on the submitting host);
//! - requests = limits: `cpus-per-run` CPUs and, when `memory` is set, that many bytes (both set
//!   make the pod Guaranteed, which a kubelet with the static CPU manager policy pins to whole
//!   CPUs of its own);
//! - `activeDeadlineSeconds` = `ceil(runs / parallelism) * (timeout + grace + time-margin)`
//!   (rounded up to whole seconds), the time the runs take when each pod slot runs its share one
//!   after the other and each takes its whole timeout: the Job's deadline counts from its start
//!   for every index together, not per pod. No deadline without `timeout`;
//! - `restartPolicy: Never` and `backoffLimitPerIndex: 0`: a pod that fails is not retried and
//!   the other indexes go on (its run is recorded `lost`; `resume` submits it again);
//! - `terminationGracePeriodSeconds` = grace + 5 s, so a deleted pod's task can stop its run as
//!   on timeout (SIGTERM, SIGKILL after grace).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ObjectFieldSelector, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::manifest::KubernetesConfig;
use crate::manifest::model::DEFAULT_TIME_MARGIN;

/// The annotation the Job controller sets on each pod of an Indexed Job: its completion index.
pub const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";

/// The label the Job controller sets on each pod: the Job's name (`kubectl get pods -l`).
pub const JOB_NAME_LABEL: &str = "job-name";

/// The variable the Job controller sets in every pod of an Indexed Job to its completion index
/// (Kubernetes 1.22 and later); the task entry point reads it (`hwr-exp task`).
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// The longest Job name written: the pods' hostnames are `<job>-<index>`, at most 63 characters.
pub const MAX_JOB_NAME: usize = 52;

/// The volume's name inside the pod spec.
const VOLUME_NAME: &str = "results";

/// What the Job needs to know (from the manifest, the plan and the bundle).
#[derive(Debug, Clone)]
pub struct JobParams<'a> {
    /// `[executor]` kubernetes keys; `image` and `volume` must be set ([`missing_keys`]).
    pub config: &'a KubernetesConfig,
    /// The Job's name ([`job_name`]).
    pub name: String,
    /// The experiment's name (a label).
    pub experiment: &'a str,
    /// The bundle folder on the submitting host (absolute).
    pub bundle: &'a Path,
    /// The plan indices of the runs, ascending; completion index `k` runs `indices[k]`.
    pub indices: &'a [usize],
    /// `[schedule] jobs`: runs at once.
    pub jobs: u32,
    /// `[isolation] cpus-per-run`.
    pub cpus_per_run: usize,
    /// `[isolation] timeout`.
    pub timeout: Option<Duration>,
    /// `[isolation] grace`.
    pub grace: Duration,
}

/// The `[executor]` keys a Job cannot go without that `config` leaves out (`image`, `volume`).
pub fn missing_keys(config: &KubernetesConfig) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if config.image.is_none() {
        missing.push("image");
    }
    if config.volume.is_none() {
        missing.push("volume");
    }
    missing
}

/// The Job's name for bundle `bundle` (`<results>/<experiment>/<stamp>-<hex>`) and its
/// `attempt` (1 for the first submission, 2 for the first `resume`, ...): `hwr-<experiment>-
/// <stamp>-<hex>[-<attempt>]`, lower-cased, `_` and other characters a DNS label refuses as `-`,
/// the experiment's part shortened so that the whole is at most [`MAX_JOB_NAME`] characters.
pub fn job_name(bundle: &Path, experiment: &str, attempt: u32) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_alphanumeric() { c } else { '-' }
            })
            .collect()
    };
    let folder = clean(
        &bundle
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    let tail = if attempt > 1 {
        format!("-{folder}-{attempt}")
    } else {
        format!("-{folder}")
    };
    let room = MAX_JOB_NAME.saturating_sub("hwr-".len() + tail.len());
    let exp: String = clean(experiment).chars().take(room).collect();
    let name = format!("hwr-{}{tail}", exp.trim_end_matches('-'));
    name.replace("--", "-").trim_end_matches('-').to_string()
}

/// Where the bundle `bundle` (under `<results>/<experiment>/`) is inside the pods: under
/// `mount_path` when given (the volume's root holding the results folder), else the same path.
pub fn bundle_in_pod(bundle: &Path, mount_path: Option<&Path>) -> PathBuf {
    match mount_path {
        None => bundle.to_path_buf(),
        Some(m) => {
            let mut p = m.to_path_buf();
            let parts: Vec<_> = bundle.components().rev().take(2).collect();
            for part in parts.into_iter().rev() {
                p.push(part);
            }
            p
        }
    }
}

/// Where the pods mount the volume: `mount-path`, else the results folder of `bundle`.
fn mount_point(bundle: &Path, mount_path: Option<&Path>) -> PathBuf {
    match mount_path {
        Some(m) => m.to_path_buf(),
        None => bundle
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("/"))
            .to_path_buf(),
    }
}

/// How a pod starts its run: the container's command and arguments and the environment they
/// need. The one place that names the task entry point (`hwr-exp task BUNDLE`, which every
/// batch engine's task runs: the indexed-task contract, DESIGN 8), so that switching it is one
/// edit.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInvocation {
    /// `command` (the image's entry point is replaced).
    pub command: Vec<String>,
    /// `args`.
    pub args: Vec<String>,
    /// `env`.
    pub env: Vec<EnvVar>,
}

/// The task invocation of completion indexes `0..indices.len()` of bundle `bundle` (its path in
/// the pod). The index is the Job controller's `JOB_COMPLETION_INDEX`, which it sets in every
/// pod of an Indexed Job ([`COMPLETION_INDEX_ENV`]). When the runs are the
/// plan's first `indices.len()` in order, the completion index is the plan index and the pod
/// runs `hwr-exp task BUNDLE`, which reads it; otherwise (`resume`: a subset) `/bin/sh` picks
/// the plan index from the list `HWR_EXP_RUNS` and `exec`s `hwr-exp task --index I BUNDLE`. The
/// node's name reaches the task as `SLURMD_NODENAME` (where the task entry point reads it; the
/// pod's hostname is the pod's name), from the pod's `spec.nodeName`.
pub fn task_invocation(bundle: &Path, indices: &[usize]) -> TaskInvocation {
    let mut env = vec![EnvVar {
        name: "SLURMD_NODENAME".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "spec.nodeName".to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }];
    let bundle = bundle.to_string_lossy().into_owned();
    let identity = indices.iter().enumerate().all(|(k, &i)| k == i);
    if identity {
        return TaskInvocation {
            command: vec!["hwr-exp".into()],
            args: vec!["task".into(), bundle],
            env,
        };
    }
    let runs: Vec<String> = indices.iter().map(usize::to_string).collect();
    env.push(EnvVar {
        name: "HWR_EXP_RUNS".into(),
        value: Some(runs.join(" ")),
        ..EnvVar::default()
    });
    env.push(EnvVar {
        name: "HWR_EXP_BUNDLE".into(),
        value: Some(bundle),
        ..EnvVar::default()
    });
    TaskInvocation {
        command: vec!["/bin/sh".into(), "-c".into()],
        args: vec![format!(
            "set -- $HWR_EXP_RUNS; shift \"${}\"; exec hwr-exp task --index \"$1\" \"$HWR_EXP_BUNDLE\"",
            COMPLETION_INDEX_ENV
        )],
        env,
    }
}

/// Whole seconds of `d`, rounded up, at least 1.
fn ceil_secs(d: Duration) -> i64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(s.max(1)).unwrap_or(i64::MAX)
}

/// `activeDeadlineSeconds` for `runs` runs, `parallelism` at once, each limited to `timeout` +
/// `grace` + `margin` (see the module's notes); `None` without a timeout.
pub fn active_deadline(
    runs: usize,
    parallelism: usize,
    timeout: Option<Duration>,
    grace: Duration,
    margin: Duration,
) -> Option<i64> {
    let per_run = timeout? + grace + margin;
    let rounds = runs.div_ceil(parallelism.max(1)).max(1);
    Some(ceil_secs(per_run).saturating_mul(i64::try_from(rounds).unwrap_or(i64::MAX)))
}

/// The Indexed Job of `params` (see the module's notes).
pub fn build(params: &JobParams<'_>) -> Job {
    let config = params.config;
    let runs = params.indices.len();
    let parallelism = (params.jobs as usize).clamp(1, runs.max(1));
    let in_pod = bundle_in_pod(params.bundle, config.mount_path.as_deref());
    let task = task_invocation(&in_pod, params.indices);
    let mut resources = BTreeMap::new();
    resources.insert("cpu".to_string(), Quantity(params.cpus_per_run.to_string()));
    if let Some(bytes) = config.memory {
        resources.insert("memory".to_string(), Quantity(bytes.to_string()));
    }
    let labels: BTreeMap<String, String> = [
        ("app.kubernetes.io/managed-by".to_string(), "hwr-exp".to_string()),
        ("hwr-exp/experiment".to_string(), label_value(params.experiment)),
    ]
    .into();
    let annotations: BTreeMap<String, String> = [(
        "hwr-exp/bundle".to_string(),
        params.bundle.to_string_lossy().into_owned(),
    )]
    .into();
    let container = Container {
        name: "run".into(),
        image: config.image.clone(),
        command: Some(task.command),
        args: Some(task.args),
        env: Some(task.env),
        working_dir: Some(in_pod.to_string_lossy().into_owned()),
        resources: Some(ResourceRequirements {
            limits: Some(resources.clone()),
            requests: Some(resources),
            ..ResourceRequirements::default()
        }),
        volume_mounts: config.volume.as_ref().map(|_| {
            vec![VolumeMount {
                name: VOLUME_NAME.into(),
                mount_path: mount_point(params.bundle, config.mount_path.as_deref())
                    .to_string_lossy()
                    .into_owned(),
                ..VolumeMount::default()
            }]
        }),
        ..Container::default()
    };
    let grace = i64::try_from(params.grace.as_secs() + 5).unwrap_or(i64::MAX);
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".into()),
        termination_grace_period_seconds: Some(grace),
        volumes: config.volume.as_ref().map(|claim| {
            vec![Volume {
                name: VOLUME_NAME.into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    ..PersistentVolumeClaimVolumeSource::default()
                }),
                ..Volume::default()
            }]
        }),
        ..PodSpec::default()
    };
    let to_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    Job {
        metadata: ObjectMeta {
            name: Some(params.name.clone()),
            namespace: config.namespace.clone(),
            labels: Some(labels.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            completion_mode: Some("Indexed".into()),
            completions: Some(to_i32(runs)),
            parallelism: Some(to_i32(parallelism)),
            backoff_limit_per_index: Some(0),
            active_deadline_seconds: active_deadline(
                runs,
                parallelism,
                params.timeout,
                params.grace,
                config.time_margin.unwrap_or(DEFAULT_TIME_MARGIN),
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// `s` as a label value: at most 63 characters of `[A-Za-z0-9._-]`, others as `-`, starting and
/// ending alphanumeric.
fn label_value(s: &str) -> String {
    let v: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}

/// The Job as the JSON document `kubectl apply -f -` reads (pretty, a trailing newline).
///
/// # Errors
/// None in practice (the types serialise to JSON); serde_json's error otherwise.
pub fn to_json(job: &Job) -> serde_json::Result<String> {
    let mut text = serde_json::to_string_pretty(job)?;
    text.push('\n');
    Ok(text)
}
