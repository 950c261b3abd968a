//! Scheduling tests with a fake launcher: no processes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::*;
use crate::bundle::{BundleInfo, BundleStatus, Outcome};
use crate::exec::{RunOutcome, Termination};
use crate::manifest::*;
use crate::plan::{PlanContext, expand};

struct Fake {
    calls: Mutex<Vec<(String, Vec<usize>)>>,
    cancel_after: Option<usize>,
    count: AtomicUsize,
    /// `prepare <stdout path>`, `execute <stdout path>` and `tidy`, in the order they came.
    events: Mutex<Vec<String>>,
    /// How long each run takes.
    delay: std::time::Duration,
}

impl Fake {
    fn new(cancel_after: Option<usize>) -> Fake {
        Fake {
            calls: Mutex::new(vec![]),
            cancel_after,
            count: AtomicUsize::new(0),
            events: Mutex::new(vec![]),
            delay: std::time::Duration::ZERO,
        }
    }
}

impl Launcher for Fake {
    fn prepare(&self, spec: &RunSpec) {
        assert!(
            spec.stdout_path.parent().unwrap().is_dir(),
            "the run's folder is made first"
        );
        let event = format!("prepare {}", spec.stdout_path.display());
        self.events.lock().unwrap().push(event);
    }

    fn tidy(&self) {
        self.events.lock().unwrap().push("tidy".into());
    }

    fn execute(&self, spec: &RunSpec, cancel: &CancelFlag) -> RunOutcome {
        let event = format!("execute {}", spec.stdout_path.display());
        self.events.lock().unwrap().push(event);
        std::thread::sleep(self.delay);
        std::fs::write(&spec.stdout_path, "{\"ok\": true}").unwrap();
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        self.calls
            .lock()
            .unwrap()
            .push((spec.stdout_path.display().to_string(), spec.cpus.clone()));
        let interrupted = self.cancel_after == Some(n);
        if interrupted {
            cancel.store(true, Ordering::SeqCst);
        }
        RunOutcome {
            termination: if interrupted {
                Termination::Interrupted
            } else {
                Termination::Exited
            },
            exit_code: (!interrupted).then_some(0),
            signal: None,
            error: None,
            start_os_error: None,
            cpus_effective: Some(spec.cpus.clone()),
            pid: Some(1),
            started: SystemTime::now(),
            ended: SystemTime::now(),
            wall_seconds: 0.01,
            user_seconds: Some(0.0),
            sys_seconds: Some(0.0),
            peak_rss_bytes: Some(1),
            stray_processes_killed: 0,
            escaped_processes: Vec::new(),
            memory_samples: 0,
            containment: None,
            runner_cpus: None,
            cgroup_memory_peak_bytes: None,
            cgroup_memory_source: None,
            sampling: None,
            shared_memory_left: Vec::new(),
            allocator: None,
        }
    }
}

fn setup(jobs: u32) -> (Plan, tempfile::TempDir, Mutex<BundleWriter>) {
    let mut m = crate::plan::tests::manifest(vec![("k", (0..3).map(Value::Int).collect())]);
    m.base_dir = PathBuf::from("/");
    m.command.program = Program::Argv(vec!["true".into()]);
    m.command.output = "{run-id}.json".into();
    m.schedule.jobs = jobs;
    m.isolation.cpus = CpuSelection::List(vec![0, 1]);
    m.isolation.timeout = None;
    m.isolation.env.clear();
    m.isolation.env_unset.clear();
    m.measure.sample_interval = None;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b");
    let ctx = PlanContext {
        hwr_exp: "x".into(),
        bundle: bundle.clone(),
        allowed_cpus: vec![0, 1],
        fallback_seed: 1,
        layout: crate::bundle::plan_file::RUN_FOLDER_LAYOUT,
        allocators: Default::default(),
        environments: Default::default(),
        plans_cpus: true,
    };
    let plan = expand(&m, &ctx).unwrap();
    let info = BundleInfo {
        bundle_format: 1,
        hwr_exp_version: "0".into(),
        hwr_exp_path: None,
        hwr_exp_sha256: None,
        experiment: "t".into(),
        description: None,
        status: BundleStatus::Running,
        created: String::new(),
        finished: None,
        planned_runs: plan.len(),
        counts: BTreeMap::new(),
        manifest_sha256: String::new(),
        setup_sha256: BTreeMap::new(),
        manifest_path: String::new(),
        parent: None,
        runner_pid: 0,
        seed: None,
        notes: vec![],
        executor: None,
        environments: Default::default(),
        slurm: None,
        overrides: None,
        adaptive: None,
        bisect: None,
    };
    let writer = Mutex::new(BundleWriter::create(&bundle, info).unwrap());
    (plan, dir, writer)
}

#[test]
fn every_run_once_in_order_and_recorded() {
    let (plan, _dir, writer) = setup(1);
    let fake = Fake::new(None);
    let cancel = Arc::new(AtomicBool::new(false));
    let all: Vec<usize> = (0..plan.len()).collect();
    let end = execute(runs(&plan, &fake, &cancel), &all, &writer).unwrap();
    assert_eq!(end, SessionEnd::Complete);
    let calls = fake.calls.lock().unwrap();
    assert_eq!(calls.len(), 6);
    assert!(
        calls[0].0.ends_with("runs/000-0-r1/000-0-r1.json"),
        "{}",
        calls[0].0
    );
    assert!(calls.iter().all(|(_, cpus)| cpus == &[0]));
    let w = writer.lock().unwrap();
    assert_eq!(w.info().counts.get(&Outcome::Ok), Some(&6));
    assert!(w.dir().join("runs/005-2-r2/run.json").exists());
}

#[test]
fn jobs_use_disjoint_cpu_slots() {
    let (plan, _dir, writer) = setup(2);
    let fake = Fake::new(None);
    let cancel = Arc::new(AtomicBool::new(false));
    let all: Vec<usize> = (0..plan.len()).collect();
    execute(runs(&plan, &fake, &cancel), &all, &writer).unwrap();
    let calls = fake.calls.lock().unwrap();
    assert_eq!(calls.len(), 6);
    for (path, cpus) in calls.iter() {
        let index: usize = path.rsplit('/').next().unwrap()[..3].parse().unwrap();
        assert_eq!(cpus, &[index % 2], "{path}");
    }
}

#[test]
fn cancel_stops_scheduling_and_reports_interrupted() {
    let (plan, _dir, writer) = setup(1);
    let fake = Fake::new(Some(2));
    let cancel = Arc::new(AtomicBool::new(false));
    let all: Vec<usize> = (0..plan.len()).collect();
    let end = execute(runs(&plan, &fake, &cancel), &all, &writer).unwrap();
    assert_eq!(end, SessionEnd::Interrupted);
    assert_eq!(fake.calls.lock().unwrap().len(), 2);
    let w = writer.lock().unwrap();
    assert_eq!(w.info().counts.get(&Outcome::Interrupted), Some(&1));
    assert!(
        !w.dir().join("runs/002-2-r1").exists(),
        "no run started after the interrupt"
    );
}

#[test]
fn subset_of_indices_only() {
    let (plan, _dir, writer) = setup(1);
    let fake = Fake::new(None);
    let cancel = Arc::new(AtomicBool::new(false));
    execute(runs(&plan, &fake, &cancel), &[1, 4], &writer).unwrap();
    assert_eq!(fake.calls.lock().unwrap().len(), 2);
}

/// Where a CPU is left free by the job slots, each run after the first is prepared
/// ([`Launcher::prepare`], with its folder made) while the run before it executes, and the
/// launcher is tidied once at the end; elsewhere nothing is prepared.
#[test]
fn the_next_run_is_prepared_while_one_executes_where_a_cpu_is_free() {
    let (plan, _dir, writer) = setup(1);
    // Runs long enough for the recorder to make the next run before the runner gets there.
    let fake = Fake {
        delay: std::time::Duration::from_millis(50),
        ..Fake::new(None)
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let all: Vec<usize> = (0..plan.len()).collect();
    execute(runs(&plan, &fake, &cancel), &all, &writer).unwrap();
    let events = fake.events.lock().unwrap();
    assert_eq!(events.last().map(String::as_str), Some("tidy"), "{events:?}");
    let executed: Vec<&String> = events.iter().filter(|e| e.starts_with("execute ")).collect();
    assert_eq!(executed.len(), 6, "{events:?}");
    if recording_cpus(&plan).is_none() {
        eprintln!("skipped: CPU 1 is not allowed here, so no run is prepared ahead");
        assert!(!events.iter().any(|e| e.starts_with("prepare ")), "{events:?}");
        return;
    }
    // Each run after the first is prepared once, before it executes, and not before the run two
    // places ahead of it has executed (the recorder works one run ahead).
    for (k, run) in executed.iter().enumerate().skip(1) {
        let path = run.strip_prefix("execute ").unwrap();
        let at = |what: &str| events.iter().position(|e| e == &format!("{what} {path}"));
        let prepared: Vec<_> = events
            .iter()
            .filter(|e| **e == format!("prepare {path}"))
            .collect();
        assert!(prepared.len() <= 1, "{events:?}");
        if let Some(p) = at("prepare") {
            assert!(p < at("execute").unwrap(), "{events:?}");
            if k >= 2 {
                let earlier = events.iter().position(|e| e == executed[k - 2]).unwrap();
                assert!(earlier < p, "{events:?}");
            }
        }
    }
    let prepared = events.iter().filter(|e| e.starts_with("prepare ")).count();
    assert_eq!(
        prepared, 5,
        "each run after the first is prepared ahead: {events:?}"
    );
}

/// A folder made ahead for a run that then is not executed (the session was interrupted) is
/// removed: the bundle holds no folder of a run that never started.
#[test]
fn a_run_prepared_but_not_executed_leaves_no_folder() {
    let (plan, _dir, writer) = setup(1);
    let fake = Fake::new(Some(3));
    let cancel = Arc::new(AtomicBool::new(false));
    let all: Vec<usize> = (0..plan.len()).collect();
    let end = execute(runs(&plan, &fake, &cancel), &all, &writer).unwrap();
    assert_eq!(end, SessionEnd::Interrupted);
    let runs = writer.lock().unwrap().dir().join("runs");
    let folders: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(folders.len(), 3, "{folders:?}");
    assert!(!runs.join("003-0-r2").exists(), "{folders:?}");
}

/// The folder made ahead for a later run survives the runner's claim of an earlier one (the
/// recorder may make run 2 before the runner has reached run 1), and is never made again once the
/// runner has reached its run; one made for a run the runner passed is removed.
#[test]
fn a_folder_made_ahead_is_kept_for_its_run_only() {
    let (plan, dir, _writer) = setup(1);
    let slot = Mutex::new(NextDir::default());
    let made = std::cell::Cell::new(0);
    let folder = |i: usize| dir.path().join(format!("ahead-{i}"));
    let make = |run: &PlannedRun| {
        made.set(made.get() + 1);
        let i = run.index;
        std::fs::create_dir(folder(i))?;
        Ok(folder(i))
    };
    NextDir::make(&slot, 1, &plan, make);
    assert_eq!(NextDir::claim(&slot, 0), None, "run 0 was not made ahead");
    assert_eq!(
        NextDir::claim(&slot, 1),
        Some(folder(1)),
        "run 1's folder survived run 0's claim"
    );
    NextDir::make(&slot, 1, &plan, make);
    assert_eq!(made.get(), 1, "a claimed run is not made again");
    NextDir::make(&slot, 2, &plan, make);
    assert_eq!(NextDir::claim(&slot, 3), None);
    assert!(!folder(2).exists(), "the folder of a run passed over is removed");
    NextDir::make(&slot, 4, &plan, make);
    NextDir::discard(slot);
    assert!(
        !folder(4).exists(),
        "a folder made for a run never reached is removed"
    );
}

/// The [`Runs`] of `plan` with `launcher`, quiet.
fn runs<'a>(plan: &'a Plan, launcher: &'a dyn Launcher, cancel: &'a CancelFlag) -> Runs<'a> {
    Runs {
        plan,
        launcher,
        cancel,
        progress: &progress::Quiet,
        fail_fast: false,
    }
}

/// A spawn that failed for the runner's own lack of a resource (the launcher's typed OS error,
/// not a message) ends the session; any other spawn failure is the run's.
#[test]
fn runner_resource_errors_come_from_the_typed_os_error() {
    use rustix::io::Errno;
    let failed = |os: Option<Errno>, text: &str| RunOutcome {
        error: Some(text.into()),
        start_os_error: os,
        ..RunOutcome::lost(SystemTime::now())
    };
    let mut emfile = failed(
        Some(Errno::MFILE),
        "cannot create stdout file /x: Too many open files",
    );
    emfile.termination = Termination::SpawnFailed;
    let e = runner_resource_error(&emfile).expect("EMFILE is the runner's");
    assert_eq!(e.raw_os_error(), None);
    assert_eq!(e.kind(), io::Error::from_raw_os_error(libc::EMFILE).kind());
    assert_eq!(
        e.to_string(),
        "cannot start the run: cannot create stdout file /x: Too many open files"
    );
    let mut enospc = failed(Some(Errno::NOSPC), "no space");
    enospc.termination = Termination::SpawnFailed;
    assert_eq!(
        runner_resource_error(&enospc).map(|e| e.kind()),
        Some(io::ErrorKind::StorageFull)
    );
    // The run's own failures: not found, or a message that merely quotes an OS error.
    let mut enoent = failed(Some(Errno::NOENT), "working directory /nope cannot be used");
    enoent.termination = Termination::SpawnFailed;
    assert!(runner_resource_error(&enoent).is_none());
    let mut quoted = failed(None, "`prog` printed (os error 24)");
    quoted.termination = Termination::SpawnFailed;
    assert!(runner_resource_error(&quoted).is_none());
    // Only spawn failures count.
    let mut exited = failed(Some(Errno::MFILE), "");
    exited.termination = Termination::Exited;
    assert!(runner_resource_error(&exited).is_none());
}
