//! Commands on a bundle whose runs execute on Slurm (DESIGN 8): `hwr-exp wait BUNDLE` (attach to
//! a detached submission and finish the bundle), `hwr-exp cancel BUNDLE` (cancel its arrays, mark
//! it interrupted) and the hidden `hwr-exp slurm-task BUNDLE INDEX` an array task runs on its node.
//! The mechanics are in [`crate::runner::backend::slurm`]; this module opens the bundle and rebuilds its
//! plan from the archived manifest, as `resume` does.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use super::ArchiveError;
use super::engine::Cancelled;
use super::rerun::{archived_manifest, base_dir_now};
use crate::bundle::lock::{BundleLock, LockError};
use crate::bundle::read::Bundle;
use crate::bundle::{BundleStatus, BundleWriter};
use crate::exec::CancelFlag;
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::runner::Runs;
use crate::runner::backend::Backend;
use crate::runner::backend::slurm::{self as rslurm, task::TaskEnd};
use crate::runner::session::{self, Finish, Session, SessionReport};
use crate::slurm::{ArrayState, CancelTarget, SlurmClient, SubmittedArray, TaskMap, script};

/// The archived manifest of `bundle` with the executor the bundle records, expanded again with the
/// bundle's folder and seed: the same plan the submitting hwr-exp wrote to plan.json.
///
/// # Errors
/// As [`archived_manifest`] and [`crate::runner::planning::expand`].
pub fn bundle_plan(bundle: &Bundle) -> Result<(Manifest, Plan), ArchiveError> {
    let (base_dir, _) = base_dir_now(bundle, None);
    let mut manifest = archived_manifest(bundle, &base_dir)?;
    Backend::apply_recorded(bundle.info(), &mut manifest);
    super::apply_recorded(bundle.info(), &mut manifest)?;
    let mut ctx = session::plan_context(bundle.dir())?;
    if let Some(seed) = bundle.info().seed {
        ctx.fallback_seed = seed;
    }
    let mut plan = crate::runner::planning::expand(&manifest, &ctx)?;
    recorded_rounds(bundle, &mut plan)?;
    Ok((manifest, plan))
}

/// Adaptive repetitions: sets the runs of `plan` (expanded from the bundle's manifest, so with
/// the rule's first `min` rounds only) to the rounds plan.json records (the rule added them one
/// by one), so that a task (`slurm-task`), a waiter (`wait`) and `resume` see every run planned
/// so far. Nothing changes for a fixed number of repetitions, or when plan.json names a cell
/// the plan does not have (the caller's comparison of run ids then refuses the bundle).
///
/// # Errors
/// plan.json cannot be read.
pub fn recorded_rounds(bundle: &Bundle, plan: &mut Plan) -> Result<(), ArchiveError> {
    if plan.adaptive.is_none() {
        return Ok(());
    }
    let cells: std::collections::HashMap<String, usize> = (0..plan.cell_count())
        .map(|c| (cell_key(&plan.cell(c)), c))
        .collect();
    let mut runs = Some(Vec::new());
    for r in bundle.planned_runs()? {
        let r = r?;
        match (runs.as_mut(), cells.get(&cell_key(&r.cell))) {
            (Some(v), Some(&c)) => v.push((c, r.repetition)),
            _ => runs = None,
        }
    }
    if let Some(runs) = runs {
        plan.set_runs(runs);
    }
    Ok(())
}

/// A cell's values as one text, keys sorted, for matching plan.json's cells with the plan's.
fn cell_key(cell: &crate::manifest::Cell) -> String {
    let mut pairs: Vec<(&str, String)> = cell.iter().map(|(k, v)| (k.as_str(), format!("{v:?}"))).collect();
    pairs.sort();
    format!("{pairs:?}")
}

/// Refuses a bundle whose runs do not execute on Slurm.
fn slurm_bundle(bundle: &Bundle) -> Result<(), ArchiveError> {
    if Backend::recorded(bundle.info()).is_some_and(Backend::detaches) {
        Ok(())
    } else {
        Err(ArchiveError::Refused(format!(
            "{}: not a bundle submitted to slurm (bundle.json executor is {})",
            bundle.dir().display(),
            bundle.info().executor.as_deref().unwrap_or("local")
        )))
    }
}

/// The arrays bundle.json records (none for a bundle whose submitter died before recording one).
fn recorded(bundle: &Bundle) -> Vec<SubmittedArray> {
    bundle
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.clone())
        .unwrap_or_default()
}

/// The Slurm client of `wait`, `cancel` and `resume`: transient errors retried and, unless
/// `quiet`, each retry said.
pub fn client(quiet: bool) -> SlurmClient {
    rslurm::telling(SlurmClient::new(), quiet)
}

/// Arrays Slurm lists with this bundle's tag (job name `hwr-exp:<experiment>`, `--comment` naming
/// the bundle: [`crate::slurm::Tag`]) that bundle.json does not record: submitted by a runner
/// killed or interrupted before it recorded the id. Each is returned as the record it gets
/// ([`rslurm::arrays::adoptable`]); an active one whose script cannot be read back is cancelled at once
/// (it is this bundle's, but what it runs is unknown) and said so.
///
/// # Errors
/// [`ArchiveError::Environment`] when squeue cannot be asked (after retries).
pub fn orphans(client: &SlurmClient, bundle: &Bundle) -> Result<Vec<SubmittedArray>, ArchiveError> {
    let known: Vec<u64> = recorded(bundle).iter().map(|a| a.job_id).collect();
    let found = client
        .tagged(&script::job_name(&bundle.info().experiment), bundle.dir())
        .map_err(|e| {
            ArchiveError::Environment(format!(
                "{}: cannot ask slurm for arrays tagged with this bundle: {e}",
                bundle.dir().display()
            ))
        })?;
    let mut out = Vec::new();
    for orphan in found.iter().filter(|a| !known.contains(&a.job_id)) {
        match rslurm::arrays::adoptable(bundle.dir(), orphan) {
            Some(a) => out.push(a),
            None if orphan.active > 0 => {
                crate::runner::progress::say(format_args!(
                    "warning: slurm array {} is tagged with this bundle but its script {} cannot be read back: cancelling it",
                    orphan.job_id, orphan.tag.script
                ));
                let _ = client.cancel(&[CancelTarget::Job(orphan.job_id)]);
            }
            None => {}
        }
    }
    Ok(out)
}

fn say_adopted(arrays: &[SubmittedArray], quiet: bool) {
    for a in arrays {
        if !quiet {
            crate::runner::progress::say(format_args!(
                "found slurm array {} ({}, {}) by its tag: submitted for this bundle but not recorded (the submitting hwr-exp was stopped); recorded now",
                a.job_id,
                a.script,
                match a.state {
                    ArrayState::Held => "held",
                    _ => "released",
                }
            ));
        }
    }
}

/// How many tasks of each of `arrays` Slurm lists as active, and how many of those are held.
fn activity(
    client: &SlurmClient,
    arrays: &[SubmittedArray],
) -> Result<BTreeMap<u64, (usize, usize)>, String> {
    let ids: Vec<u64> = arrays
        .iter()
        .filter(|a| a.state != ArrayState::Cancelled)
        .map(|a| a.job_id)
        .collect();
    let snapshot = client.queue(&ids).map_err(|e| e.to_string())?;
    let mut out: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for (key, entry) in &snapshot.tasks {
        if !entry.state.is_finished() {
            let e = out.entry(key.array_job_id).or_default();
            e.0 += 1;
            if entry.reason.as_deref().is_some_and(|r| r.starts_with("JobHeld")) {
                e.1 += 1;
            }
        }
    }
    Ok(out)
}

/// What `resume` found it must do with a Slurm bundle's arrays before it submits again
/// ([`claim_for_resume`]), done by [`Claim::apply`] once every other check has passed.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    /// Arrays found by their tag that bundle.json does not record: recorded by [`Claim::apply`].
    adopted: Vec<SubmittedArray>,
    /// Arrays only held (never released: none of their tasks ran): cancelled by [`Claim::apply`].
    held: Vec<u64>,
}

/// `resume`'s ownership rule on Slurm (DESIGN 8, issue 23): under the bundle's lock, looks for
/// arrays by their tag, then asks squeue about every array. When any task still runs or waits to
/// run (not held) the resume is refused, naming `wait` and `cancel`: resubmitting would run those
/// runs twice at once. Arrays that are only held (their submitter died before releasing them: no
/// task of them ever ran) are to be cancelled and their runs resubmitted with the other runs whose
/// tasks are gone. Writes nothing: a refused resume leaves the bundle as it was; what was found is
/// done by [`Claim::apply`] after the rest of the resume's checks (the backend's preflight too).
///
/// # Errors
/// [`ArchiveError::Refused`] for live arrays; [`ArchiveError::Environment`] when Slurm cannot be
/// asked.
pub fn claim_for_resume(bundle: &Bundle, quiet: bool) -> Result<Claim, ArchiveError> {
    let client = client(quiet);
    let adopted = orphans(&client, bundle)?;
    let mut arrays = recorded(bundle);
    arrays.extend(adopted.iter().cloned());
    if arrays.is_empty() {
        return Ok(Claim::default());
    }
    let active = activity(&client, &arrays).map_err(|e| {
        ArchiveError::Environment(format!(
            "{}: cannot tell whether this bundle's slurm arrays still run (squeue: {e}); resume refuses rather than run a run twice",
            bundle.dir().display()
        ))
    })?;
    let live: Vec<String> = active
        .iter()
        .filter(|(_, (n, held))| n > held)
        .map(|(id, (n, held))| {
            format!(
                "{id} ({} active task{}{})",
                n,
                if *n == 1 { "" } else { "s" },
                if *held > 0 {
                    format!(", {held} held")
                } else {
                    String::new()
                }
            )
        })
        .collect();
    if !live.is_empty() {
        let dir = bundle.dir().display();
        return Err(ArchiveError::Refused(format!(
            "{dir}: slurm still runs this bundle's tasks in array(s) {}; resuming now would run them twice. Wait for them with `hwr-exp wait {dir}` or stop them with `hwr-exp cancel {dir}`, then resume the runs that did not finish",
            live.join(", ")
        )));
    }
    Ok(Claim {
        adopted,
        held: active.keys().copied().collect(),
    })
}

impl Claim {
    /// Records the adopted arrays in `info` (bundle.json as read), cancels the held ones
    /// (`scancel`, then waits until squeue shows none of their tasks) and marks them `cancelled`
    /// with a note, writing bundle.json under `lock` after each step. Returns the notes added.
    ///
    /// # Errors
    /// [`ArchiveError::Environment`] when scancel fails; [`ArchiveError::Write`] when bundle.json
    /// cannot be written.
    pub fn apply(
        self,
        dir: &Path,
        lock: &BundleLock,
        info: &mut crate::bundle::BundleInfo,
        quiet: bool,
    ) -> Result<Vec<String>, ArchiveError> {
        let Claim { adopted, held } = self;
        if adopted.is_empty() && held.is_empty() {
            return Ok(Vec::new());
        }
        let client = client(quiet);
        let write_err = |source| ArchiveError::Write {
            bundle: dir.to_path_buf(),
            source,
        };
        if !adopted.is_empty() {
            say_adopted(&adopted, quiet);
            info.slurm
                .get_or_insert_with(Default::default)
                .arrays
                .extend(adopted);
            crate::bundle::write::rewrite_info(dir, lock, info).map_err(write_err)?;
        }
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let arrays = info.slurm.as_ref().map(|s| s.arrays.clone()).unwrap_or_default();
        let targets: Vec<CancelTarget> = held.iter().copied().map(CancelTarget::Job).collect();
        client
            .cancel(&targets)
            .map_err(|e| ArchiveError::Environment(e.to_string()))?;
        let map = TaskMap::new(
            &arrays
                .iter()
                .filter(|a| held.contains(&a.job_id))
                .cloned()
                .collect::<Vec<_>>(),
        )
        .map_err(|e| ArchiveError::Refused(e.to_string()))?;
        rslurm::wait::cancel_arrays(&client, &map);
        for a in info.slurm.iter_mut().flat_map(|s| s.arrays.iter_mut()) {
            if held.contains(&a.job_id) {
                a.state = ArrayState::Cancelled;
            }
        }
        let note = format!(
            "resume cancelled held slurm array(s) {} (submitted, never released: none of their tasks ran); their runs are submitted again",
            held.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        );
        info.notes.push(note.clone());
        if !quiet {
            crate::runner::progress::say(format_args!(
                "cancelled held slurm array(s) {} (never released); their runs are submitted again",
                held.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        crate::bundle::write::rewrite_info(dir, lock, info).map_err(write_err)?;
        Ok(vec![note])
    }
}

/// The Slurm engine's verbs ([`super::engine::Engine`]); a Kubernetes pod's task is Slurm's too.
pub struct Slurm;

impl super::engine::Engine for Slurm {
    /// A Slurm array task ([`rslurm::task::run_task`]): the run gets the CPUs Slurm allowed the
    /// task; with `[executor] requeue = true` the pre-timeout signal (SIGUSR2) stops it in time
    /// and requeues the task.
    fn run_task(
        &self,
        runs: Runs<'_>,
        index: usize,
        bundle: &Path,
        manifest: &Manifest,
    ) -> std::io::Result<TaskEnd> {
        // Only a requeueing task was asked for the pre-timeout signal (`--signal=B:USR2@...`).
        let requeue = match manifest.executor.slurm.requeue {
            true => Some(crate::signal::install_pre_timeout().map_err(std::io::Error::other)?),
            false => None,
        };
        rslurm::task::run_task(runs, index, bundle, requeue.as_deref())
    }

    fn wait(&self, dir: &Path, quiet: bool, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError> {
        wait(dir, quiet, cancel)
    }

    fn cancel(&self, dir: &Path) -> Result<Cancelled, ArchiveError> {
        cancel(dir)
    }
}

/// Takes the bundle's lock for a waiter, refusing when another process (a waiter) holds it.
pub(super) fn lock_for_waiting(bundle: &Bundle) -> Result<BundleLock, ArchiveError> {
    BundleLock::acquire(bundle.dir()).map_err(|e| match e {
        LockError::Held { .. } => {
            ArchiveError::Environment(format!("{e}; another hwr-exp already waits for this bundle"))
        }
        LockError::Io { .. } => ArchiveError::Environment(e.to_string()),
    })
}

/// `hwr-exp wait BUNDLE`: attaches to a submitted (detached) Slurm bundle: takes its lock, waits
/// for every run's run.json with the progress display (recording lost tasks), then finishes it as
/// `run` does (provenance after, counts, status, exit code).
///
/// # Errors
/// [`ArchiveError::Refused`] for a bundle that is not a Slurm one or not `running`;
/// [`ArchiveError::Environment`] when a waiter holds it; session errors.
fn wait(dir: &Path, quiet: bool, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError> {
    let bundle = super::open(dir)?;
    slurm_bundle(&bundle)?;
    let lock = lock_for_waiting(&bundle)?;
    let prepared = (|| {
        let bundle = super::open(bundle.dir())?;
        if bundle.info().status != BundleStatus::Running {
            return Err(ArchiveError::Refused(format!(
                "{}: status is {}; nothing to wait for (resume an interrupted bundle)",
                bundle.dir().display(),
                bundle.info().status.as_str()
            )));
        }
        let adopted = orphans(&client(quiet), &bundle)?;
        if recorded(&bundle).is_empty() && adopted.is_empty() {
            return Err(ArchiveError::Refused(format!(
                "{}: no slurm array to wait for: bundle.json records none and squeue lists none tagged with this bundle (resume it to submit its runs)",
                bundle.dir().display()
            )));
        }
        let (manifest, plan) = bundle_plan(&bundle)?;
        let before = bundle.provenance_doc()?.before;
        // Runs of a detached submission that did not fit under the cluster's limits have no
        // task yet: this waiter submits them as room frees.
        let mut arrays = recorded(&bundle);
        arrays.extend(adopted.iter().cloned());
        let map = TaskMap::new(&arrays).map_err(|e| ArchiveError::Refused(e.to_string()))?;
        let unsubmitted: Vec<usize> = (0..plan.len()).filter(|&i| map.task(i).is_none()).collect();
        // Adaptive repetitions: this waiter also submits the further rounds (with the feeder's
        // limits and keys), so it needs one even when every run planned so far has a task.
        let feeder = if unsubmitted.is_empty() && plan.adaptive.is_none() {
            None
        } else {
            let client = client(quiet);
            let env = |e: String| ArchiveError::Environment(format!("slurm executor: {e}"));
            let array_limits = client.array_limits().map_err(|e| env(e.to_string()))?;
            let slurm = &manifest.executor.slurm;
            let limits = crate::runner::backend::slurm::pieces::read_limits(
                &client,
                array_limits,
                slurm.account.as_deref(),
            )
            .map_err(env)?;
            Some(crate::runner::backend::slurm::pieces::Feeder::new(
                &unsubmitted,
                limits,
                slurm,
                manifest.isolation.cpus_per_run,
            ))
        };
        Ok((bundle, adopted, plan, before, feeder))
    })();
    let (bundle, adopted, plan, before, feeder) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = lock.release();
            return Err(e);
        }
    };
    let mut info = bundle.info().clone();
    // Every run.json is counted again as the wait finds it.
    info.counts.clear();
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    let mut writer = BundleWriter::reopen_while_tasks_run(bundle.dir(), info, lock).map_err(write_err)?;
    say_adopted(&adopted, quiet);
    for a in adopted {
        writer.add_slurm_array(a).map_err(write_err)?;
    }
    let arrays = writer
        .info()
        .slurm
        .as_ref()
        .map(|s| s.arrays.clone())
        .unwrap_or_default();
    // Arrays recorded (or found) held: their submitter died before releasing them. This waiter
    // is their owner now (it holds the lock): release them. Releasing twice is no error.
    let held: Vec<u64> = arrays
        .iter()
        .filter(|a| a.state == ArrayState::Held)
        .map(|a| a.job_id)
        .collect();
    if !held.is_empty() {
        let client = client(quiet);
        client
            .release(&held)
            .map_err(|e| ArchiveError::Environment(format!("releasing held slurm array(s): {e}")))?;
        writer
            .set_slurm_array_state(&held, ArrayState::Released)
            .map_err(write_err)?;
        if !quiet {
            crate::runner::progress::say(format_args!(
                "released held slurm array(s) {}",
                held.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    // Every run: those with a task are counted again as their run.json is found, the others
    // are submitted first (`feeder`).
    let indices: Vec<usize> = (0..plan.len()).collect();
    let results_dir = bundle.results_dir();
    let session = Session {
        plan: std::borrow::Cow::Borrowed(&plan),
        indices,
        writer: std::sync::Mutex::new(writer),
        // No run executes in this process.
        launcher: &crate::exec::ProcessLauncher::default(),
        cancel,
        progress: crate::runner::progress::Collect::deferred(quiet),
        // The Slurm executor submits every run at once: `--fail-fast` is refused for it.
        fail_fast: false,
        finish: Finish {
            results_dir: &results_dir,
            before: &before,
            quiet,
        },
        plan_json: None,
    };
    let waiting = rslurm::wait::Waiting {
        // squeue stops at a Ctrl-C (a hung one too): the first Ctrl-C stops waiting at once.
        client: client(quiet).with_cancel(cancel.clone()),
        arrays,
        shared_fs: rslurm::on_shared_fs(bundle.dir()).unwrap_or(false),
        feeder,
        // `wait` attached to tasks that go on without it: a Ctrl-C detaches again.
        detach_on_stop: true,
    };
    Ok(rslurm::wait::wait_and_finish(session, &waiting)?)
}

/// `hwr-exp cancel BUNDLE`: writes the cancel marker (`slurm/cancel-requested`), `scancel`s every
/// array of the bundle, and, when no waiter holds the bundle, waits until none of the tasks is
/// active and marks the bundle `interrupted` itself.
///
/// # Errors
/// [`ArchiveError::Refused`] for a bundle that is not a Slurm one; Slurm and write errors.
fn cancel(dir: &Path) -> Result<Cancelled, ArchiveError> {
    let bundle = super::open(dir)?;
    slurm_bundle(&bundle)?;
    let write_err = |source| ArchiveError::Write {
        bundle: bundle.dir().to_path_buf(),
        source,
    };
    let client = client(false);
    let adopted = orphans(&client, &bundle)?;
    say_adopted(&adopted, false);
    let mut arrays = recorded(&bundle);
    arrays.extend(adopted.iter().cloned());
    if arrays.is_empty() && bundle.info().status != BundleStatus::Running {
        return Ok(Cancelled::AlreadyFinished(
            bundle.info().status.as_str().to_string(),
        ));
    }
    let map = TaskMap::new(&arrays).map_err(|e| ArchiveError::Refused(e.to_string()))?;
    if bundle.info().status != BundleStatus::Running {
        let targets: Vec<CancelTarget> = map.job_ids().into_iter().map(CancelTarget::Job).collect();
        client
            .cancel(&targets)
            .map_err(|e| ArchiveError::Environment(e.to_string()))?;
        return Ok(Cancelled::AlreadyFinished(
            bundle.info().status.as_str().to_string(),
        ));
    }
    crate::bundle::write::write_cancel_marker(bundle.dir(), SystemTime::now()).map_err(write_err)?;
    let targets: Vec<CancelTarget> = map.job_ids().into_iter().map(CancelTarget::Job).collect();
    client
        .cancel(&targets)
        .map_err(|e| ArchiveError::Environment(e.to_string()))?;
    match BundleLock::acquire(bundle.dir()) {
        Err(LockError::Held { .. }) => Ok(Cancelled::ByWaiter),
        Err(e) => Err(ArchiveError::Environment(e.to_string())),
        Ok(lock) => {
            rslurm::wait::cancel_arrays(&client, &map);
            super::engine::mark_interrupted(bundle.dir(), lock, |bundle, writer| {
                let known: Vec<u64> = recorded(bundle).iter().map(|a| a.job_id).collect();
                for a in adopted.into_iter().filter(|a| !known.contains(&a.job_id)) {
                    writer.add_slurm_array(a)?;
                }
                Ok(())
            })
        }
    }
}
