//! Reading a Job's pods (`kubectl get pods -o json`): each pod's completion index, how an index
//! stands, and Kubernetes' account of a pod that ended without success (the `lost` reason).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use super::job::COMPLETION_INDEX_ANNOTATION;

/// How one completion index stands, from its pods.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexState {
    /// No pod (not created yet, or gone).
    NoPod,
    /// Its pod waits to be scheduled or started; the reason when Kubernetes gives one
    /// (`Unschedulable`, `ContainerCreating`, `ErrImagePull`).
    Pending(Option<String>),
    /// Its pod runs on this node.
    Running(Option<String>),
    /// Its pod ended by itself (exit 0): the run.json should be there.
    Succeeded(Option<String>),
    /// Its pod failed or was stopped: Kubernetes' account.
    Failed(PodAccount),
}

/// What Kubernetes says about a pod that ended without success.
#[derive(Debug, Clone, PartialEq)]
pub struct PodAccount {
    /// One line: the pod, its phase and reason, the container's end, the node.
    pub reason: String,
    /// The node it ran on (`spec.nodeName`).
    pub node: Option<String>,
    /// When it started (`status.startTime`).
    pub started: Option<SystemTime>,
    /// When its container ended (`finishedAt`), if known.
    pub ended: Option<SystemTime>,
}

fn time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<SystemTime> {
    t.and_then(|t| {
        let (secs, nanos) = (t.0.as_second(), t.0.subsec_nanosecond());
        let since = Duration::new(u64::try_from(secs).ok()?, u32::try_from(nanos).ok()?);
        SystemTime::UNIX_EPOCH.checked_add(since)
    })
}

/// The completion index of a pod (its [`COMPLETION_INDEX_ANNOTATION`]), if it has one.
pub fn completion_index(pod: &Pod) -> Option<usize> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX_ANNOTATION)?
        .trim()
        .parse()
        .ok()
}

/// The account of a pod that ended without success (see [`PodAccount`]).
pub fn account(pod: &Pod) -> PodAccount {
    let name = pod.metadata.name.clone().unwrap_or_else(|| "?".into());
    let status = pod.status.clone().unwrap_or_default();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let mut reason = format!("pod {name} {}", status.phase.as_deref().unwrap_or("Unknown"));
    match (&status.reason, &status.message) {
        (Some(r), Some(m)) => reason.push_str(&format!(" ({r}: {})", m.trim())),
        (Some(r), None) => reason.push_str(&format!(" ({r})")),
        (None, Some(m)) => reason.push_str(&format!(" ({})", m.trim())),
        (None, None) => {}
    }
    let mut ended = None;
    for c in status.container_statuses.iter().flatten() {
        let Some(t) = c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
        else {
            continue;
        };
        reason.push_str(&format!(
            "; container {}: {}exit code {}",
            c.name,
            t.reason.as_deref().map(|r| format!("{r}, ")).unwrap_or_default(),
            t.exit_code
        ));
        if let Some(m) = t.message.as_deref().filter(|m| !m.trim().is_empty()) {
            reason.push_str(&format!(" ({})", m.trim()));
        }
        ended = ended.or(time(t.finished_at.as_ref()));
    }
    if let Some(n) = &node {
        reason.push_str(&format!(" on node {n}"));
    }
    PodAccount {
        reason,
        node,
        started: time(status.start_time.as_ref()),
        ended,
    }
}

/// How a completion index stands given its `pods` (all pods of the Job with that index): a
/// running or pending pod wins over one that ended (a replacement); of ended pods a success wins.
pub fn index_state(pods: &[&Pod]) -> IndexState {
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    if let Some(p) = pods.iter().find(|p| phase(p) == "Running") {
        return IndexState::Running(node(p));
    }
    if let Some(p) = pods.iter().find(|p| phase(p) == "Pending" || phase(p).is_empty()) {
        return IndexState::Pending(pending_reason(p));
    }
    if let Some(p) = pods.iter().find(|p| phase(p) == "Succeeded") {
        return IndexState::Succeeded(node(p));
    }
    match pods.last() {
        Some(p) => IndexState::Failed(account(p)),
        None => IndexState::NoPod,
    }
}

/// Why a pending pod waits: a container's waiting reason (`ErrImagePull`), else the reason of a
/// false `PodScheduled` condition (`Unschedulable`).
fn pending_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
    waiting.or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.reason.clone())
    })
}

/// The pods of a Job by completion index.
pub fn by_index(pods: &[Pod]) -> BTreeMap<usize, Vec<&Pod>> {
    let mut map: BTreeMap<usize, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        if let Some(k) = completion_index(p) {
            map.entry(k).or_default().push(p);
        }
    }
    map
}

/// Why Job `job` ended, when a condition says it did: `Failed` or `Complete` with status `True`,
/// as `Failed: DeadlineExceeded: Job was active longer than specified deadline`; `None` while it
/// runs.
pub fn job_end(job: &k8s_openapi::api::batch::v1::Job) -> Option<String> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let c = conditions
        .iter()
        .find(|c| matches!(c.type_.as_str(), "Failed" | "Complete") && c.status == "True")?;
    let mut why = c.type_.clone();
    for part in [&c.reason, &c.message].into_iter().flatten() {
        why.push_str(": ");
        why.push_str(part.trim());
    }
    Some(why)
}
