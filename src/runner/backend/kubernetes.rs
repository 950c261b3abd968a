//! The kubernetes backend (DESIGN 8, docs/kubernetes.md): submits a session's runs as one
//! Indexed Job ([`crate::kubernetes::job`]) and watches its pods, the engine adapter's part of
//! "task i of a bundle". The pods run the task entry point, which writes each run's folder and
//! run.json on the shared volume; this waiter counts the run.json files, and records a run whose
//! pod ended (or vanished) without one as `lost`, with the pod's node and Kubernetes' reason.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use crate::bundle::reason::RunFailure;
use crate::bundle::write::LostTask;
use crate::bundle::{BundleWriter, RunRecord, files};
use crate::kubernetes::job::{self, JobParams};
use crate::kubernetes::kubectl::Kubectl;
use crate::kubernetes::pods::{IndexState, by_index, index_state};
use crate::manifest::{KubernetesConfig, Manifest};

use super::super::SessionEnd;
use super::super::progress::{self, FAILURE_TAIL_LINES, Progress as _};
use super::super::session::{Session, SessionError, SessionReport};

/// The bundle's folder of submitted Jobs: `kubernetes/<job name>.json`, each the document applied.
pub const JOBS_DIR: &str = "kubernetes";

/// The pause between two looks at the Job's pods.
pub const POLL: Duration = Duration::from_secs(2);

/// How long a run whose pod succeeded (or vanished) is given for its run.json to appear on the
/// shared volume (NFS clients cache directory entries for up to 30 s) before it is `lost`. A run
/// whose pod failed is lost at once: its task ended without finishing the run.
pub const LOST_GRACE: Duration = Duration::from_secs(30);

/// What the waiter needs besides the session.
#[derive(Debug, Clone)]
pub struct Submit<'a> {
    /// The kubectl to use (the manifest's context and namespace).
    pub kubectl: Kubectl,
    /// `[executor]` kubernetes keys.
    pub config: &'a KubernetesConfig,
    /// `[isolation] cpus-per-run`.
    pub cpus_per_run: usize,
}

/// The name of the session's Job: the first submission's, else one with the next attempt number
/// (`resume`), after the Jobs recorded under [`JOBS_DIR`].
fn next_job_name(writer: &BundleWriter, experiment: &str) -> String {
    let dir = writer.dir().join(JOBS_DIR);
    let submitted = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    let attempt = u32::try_from(submitted + 1).unwrap_or(u32::MAX);
    job::job_name(writer.dir(), experiment, attempt)
}

/// Submits the session's runs as one Indexed Job (`kubectl apply -f -`, the document kept as
/// `kubernetes/<job>.json` in the bundle), waits for them ([`wait`]) and finishes the session.
///
/// # Errors
/// [`SessionError::Preflight`] when the Job could not be submitted (the bundle is marked failed);
/// as [`Session::finish`] otherwise.
pub fn submit_and_wait(mut session: Session<'_>, submit: &Submit<'_>) -> Result<SessionReport, SessionError> {
    let (plan, quiet) = (session.plan.clone(), session.finish.quiet);
    let indices = session.indices.clone();
    let writer = session.writer_mut();
    let name = next_job_name(writer, &plan.experiment);
    let params = JobParams {
        config: submit.config,
        name: name.clone(),
        experiment: &plan.experiment,
        bundle: writer.dir(),
        indices: &indices,
        jobs: plan.jobs,
        cpus_per_run: submit.cpus_per_run,
        timeout: plan.timeout,
        grace: plan.grace,
    };
    let document = job::build(&params);
    let submitted = job::to_json(&document)
        .map_err(io::Error::other)
        .and_then(|json| {
            let dir = writer.dir().join(JOBS_DIR);
            std::fs::create_dir_all(&dir)?;
            crate::bundle::atomic::write_atomic(&dir.join(format!("{name}.json")), json.as_bytes())?;
            Ok(json)
        })
        .map_err(|e| e.to_string())
        .and_then(|json| submit.kubectl.apply(&json).map_err(|e| e.to_string()));
    match submitted {
        Ok(answer) if !quiet => progress::say(format_args!(
            "submitted {} as kubernetes job {name} ({answer}) into {}",
            progress::runs(indices.len()),
            writer.dir().display()
        )),
        Ok(_) => {}
        Err(e) => {
            let reason = format!("submitting to kubernetes: {e}");
            let _ = writer.fail(&reason, SystemTime::now());
            return Err(SessionError::Preflight(vec![format!(
                "{reason} (the bundle {} is marked failed with this reason)",
                writer.dir().display()
            )]));
        }
    }
    let end = wait(&mut session, &submit.kubectl, &name, LOST_GRACE);
    session.finish(end, Vec::new())
}

/// What [`wait`] keeps per run still waited for.
#[derive(Debug, Default)]
struct Waited {
    /// Runs without a counted run.json, by completion index.
    pending: BTreeMap<usize, usize>,
    /// Runs whose pod was seen running.
    started: BTreeSet<usize>,
    /// The node each run's pod was seen on.
    seen_on: BTreeMap<usize, String>,
    /// Since when a run's pod is known to have ended (or vanished) without a run.json.
    gone_since: BTreeMap<usize, Instant>,
}

/// Waits until every run of the session (completion index `k` = `session.indices[k]`) of Job
/// `name` has a run.json: every [`POLL`] it lists the Job's pods (`kubectl get pods -l
/// job-name=NAME -o json`); a run whose pod failed without a run.json is recorded `lost` at once
/// with the pod's account ([`crate::kubernetes::pods::account`]: phase, reason, container end, node); one whose pod
/// succeeded, or whose pod was seen and is gone, after `lost_grace`. When kubectl fails the
/// waiter warns once and asks again. The cancel flag (Ctrl-C) deletes the Job (`kubectl delete
/// job`) and ends [`SessionEnd::Interrupted`]: runs without run.json stay so (`resume` submits
/// them again).
///
/// # Errors
/// I/O errors writing bundle.json or a lost run's run.json.
pub fn wait(
    session: &mut Session<'_>,
    kubectl: &Kubectl,
    name: &str,
    lost_grace: Duration,
) -> io::Result<SessionEnd> {
    let (plan, cancel, total) = (session.plan.clone(), session.cancel, session.indices.len());
    let mut waited = Waited {
        pending: session.indices.iter().copied().enumerate().collect(),
        ..Waited::default()
    };
    let progress = &session.progress;
    progress.start(total);
    let writer = session
        .writer
        .get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut done = 0usize;
    let mut warned = false;
    let mut shown: Option<String> = None;
    loop {
        if cancel.load(Ordering::SeqCst) {
            if let Err(e) = kubectl.delete_job(name) {
                progress::say(format_args!(
                    "warning: deleting kubernetes job {name} failed: {e}"
                ));
            }
            return Ok(SessionEnd::Interrupted);
        }
        let pods = match kubectl.pods(name) {
            Ok(p) => {
                warned = false;
                Some(p)
            }
            Err(e) => {
                if !warned {
                    progress::say(format_args!(
                        "warning: listing the pods of job {name} failed, retrying: {e}"
                    ));
                    warned = true;
                }
                None
            }
        };
        let Some(pods) = pods else {
            pause(cancel);
            continue;
        };
        let by_index = by_index(&pods);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let entries: Vec<(usize, usize)> = waited.pending.iter().map(|(&k, &i)| (k, i)).collect();
        let job_end = job_ended(kubectl, name, &pods, &waited);
        for (k, i) in entries {
            let state = index_state(by_index.get(&k).map(Vec::as_slice).unwrap_or_default());
            let run = plan.run(i);
            let path = writer.run_dir(&run).join(files::RUN);
            let lost = match state {
                IndexState::Pending(why) => {
                    *reasons
                        .entry(why.unwrap_or_else(|| "Pending".into()))
                        .or_default() += 1;
                    continue;
                }
                IndexState::Running(node) => {
                    if let Some(n) = node {
                        waited.seen_on.insert(k, n);
                    }
                    if waited.started.insert(k) {
                        progress.run_started(&run);
                    }
                    continue;
                }
                IndexState::NoPod if !waited.started.contains(&k) && !waited.seen_on.contains_key(&k) => {
                    // Never started: lost only once the Job has ended without it.
                    let Some(end) = &job_end else { continue };
                    LostTask {
                        reason: format!("{end}, before the pod of completion index {k} started"),
                        node: None,
                        task: None,
                        started: None,
                        ended: SystemTime::now(),
                    }
                }
                IndexState::NoPod | IndexState::Succeeded(_) | IndexState::Failed(_) => {
                    if let Some(record) = read_record(&path) {
                        writer.count_run(&record)?;
                        done = finished(&mut waited, k, &run, &record, writer, progress, (done, total));
                        continue;
                    }
                    let node = match &state {
                        IndexState::Succeeded(n) => n.clone(),
                        _ => None,
                    }
                    .or_else(|| waited.seen_on.get(&k).cloned());
                    match state {
                        IndexState::Failed(a) => LostTask {
                            reason: a.reason,
                            node: a.node.or(node),
                            task: None,
                            started: a.started,
                            ended: a.ended.unwrap_or_else(SystemTime::now),
                        },
                        other => {
                            let since = *waited.gone_since.entry(k).or_insert_with(Instant::now);
                            if since.elapsed() < lost_grace {
                                continue;
                            }
                            gone_lost(&other, name, k, node)
                        }
                    }
                }
            };
            // Read again: the task may have written run.json since the first look.
            if path.exists() {
                continue;
            }
            let record = writer.record_lost(&run, plan.output_format, lost)?;
            done = finished(&mut waited, k, &run, &record, writer, progress, (done, total));
        }
        let text = (!reasons.is_empty()).then(|| {
            reasons
                .iter()
                .map(|(r, n)| format!("{n} pending ({r})"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        if text != shown {
            progress.waiting(text.as_deref());
            shown = text;
        }
        if waited.pending.is_empty() {
            return Ok(SessionEnd::Complete);
        }
        pause(cancel);
    }
}

/// The lost record of completion index `k` of Job `name` whose pod succeeded (`state`) or
/// vanished without a run.json, last seen on `node`.
fn gone_lost(state: &IndexState, name: &str, k: usize, node: Option<String>) -> LostTask {
    let what = if matches!(state, IndexState::Succeeded(_)) {
        format!(
            "the pod of completion index {k} of job {name} succeeded but its run.json is not on the volume (is `volume` the folder this bundle is in?)"
        )
    } else {
        format!(
            "the pod of completion index {k} of job {name} is gone (deleted, or its node left) without a run.json"
        )
    };
    LostTask {
        reason: match &node {
            Some(n) => format!("{what} on node {n}"),
            None => what,
        },
        node,
        task: None,
        started: None,
        ended: SystemTime::now(),
    }
}

/// Why the Job `name` will start no more pods, asked (`kubectl get job`) only when some run
/// waited for has had no pod yet and none of the Job's `pods` is running or pending: the Job is
/// gone (deleted), or it ended (a `Failed` or `Complete` condition: `DeadlineExceeded` when
/// `activeDeadlineSeconds` passed). `None` while the Job may start pods, or when kubectl fails.
fn job_ended(
    kubectl: &Kubectl,
    name: &str,
    pods: &[k8s_openapi::api::core::v1::Pod],
    waited: &Waited,
) -> Option<String> {
    let phase = |p: &k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    if pods
        .iter()
        .any(|p| matches!(phase(p).as_str(), "Running" | "Pending" | ""))
    {
        return None;
    }
    let indexed = by_index(pods);
    let unstarted = waited
        .pending
        .keys()
        .any(|k| !indexed.contains_key(k) && !waited.started.contains(k) && !waited.seen_on.contains_key(k));
    if !unstarted {
        return None;
    }
    match kubectl.job(name) {
        Ok(None) => Some(format!("kubernetes job {name} is gone (deleted)")),
        Ok(Some(job)) => {
            crate::kubernetes::pods::job_end(&job).map(|why| format!("kubernetes job {name} ended ({why})"))
        }
        Err(_) => None,
    }
}

/// Sleeps [`POLL`] in slices, so that Ctrl-C is seen within 100 ms.
fn pause(cancel: &crate::signal::CancelFlag) {
    let until = Instant::now() + POLL;
    while Instant::now() < until && !cancel.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100).min(until.saturating_duration_since(Instant::now())));
    }
}

/// The run.json at `path`, when there is a readable one.
fn read_record(path: &std::path::Path) -> Option<RunRecord> {
    crate::bundle::read::read_versioned::<RunRecord>(path, "format", crate::bundle::BUNDLE_FORMAT).ok()
}

/// Run `run` (completion index `k`) has its run.json `record`, counted: `waited` forgets it,
/// `progress` shows it. Returns the runs done now, given `(done, total)` before.
fn finished(
    waited: &mut Waited,
    k: usize,
    run: &crate::plan::PlannedRun,
    record: &RunRecord,
    writer: &BundleWriter,
    progress: &progress::Collect,
    (done, total): (usize, usize),
) -> usize {
    waited.pending.remove(&k);
    waited.started.remove(&k);
    waited.seen_on.remove(&k);
    waited.gone_since.remove(&k);
    let failure = RunFailure::read(record, &writer.run_dir(run), FAILURE_TAIL_LINES);
    progress.run_finished(run, record, failure.as_ref(), done + 1, total);
    done + 1
}

/// `hwr-exp plan --format k8s`: the Indexed Job `run` would submit for `manifest` into a new
/// bundle under `results_dir`, as JSON (which `kubectl apply -f` reads). Nothing is submitted
/// or written.
///
/// # Errors
/// [`SessionError::Plan`] for manifest problems; [`SessionError::Preflight`] when `image` or
/// `volume` is missing.
pub fn plan_job(manifest: &Manifest, results_dir: &Path) -> Result<String, SessionError> {
    let config = &manifest.executor.kubernetes;
    let missing = job::missing_keys(config);
    if !missing.is_empty() {
        return Err(SessionError::Preflight(vec![format!(
            "plan --format k8s needs [executor] {} (with kind = \"kubernetes\"): the pods' container image and the PersistentVolumeClaim holding the results folder (docs/kubernetes.md)",
            missing.join(" and ")
        )]));
    }
    let results_dir = std::path::absolute(results_dir).unwrap_or_else(|_| results_dir.to_path_buf());
    let dir = crate::bundle::write::bundle_path(&results_dir, &manifest.experiment.name, SystemTime::now());
    let ctx = super::super::session::plan_context(&dir)?;
    let plan = crate::runner::planning::expand(manifest, &ctx)?;
    let indices: Vec<usize> = (0..plan.len()).collect();
    let params = job::JobParams {
        config,
        name: job::job_name(&dir, &plan.experiment, 1),
        experiment: &plan.experiment,
        bundle: &dir,
        indices: &indices,
        jobs: plan.jobs,
        cpus_per_run: manifest.isolation.cpus_per_run,
        timeout: plan.timeout,
        grace: plan.grace,
    };
    job::to_json(&job::build(&params)).map_err(|e| SessionError::Environment(e.to_string()))
}
