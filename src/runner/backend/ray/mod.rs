//! The Ray executor (DESIGN 8, docs/ray.md): the plan's runs on an existing Ray cluster, one
//! fresh Ray task process per run, each running the indexed-task entry point
//! (`hwr-exp task --index I BUNDLE`, [`crate::runner::task`]) on its node.
//!
//! hwr-exp talks to Ray through a small Python driver ([`DRIVER`], `driver.py` beside this file)
//! that it starts with `python3 -c` in a process group of its own: the driver connects with
//! `ray.init(address=...)`, submits a `@ray.remote(max_calls=1, max_retries=0)` task per run (a
//! worker is never reused; a lost task is not retried behind the bundle's back) and appends what
//! happens as JSON lines to `ray/driver-<k>.events` in the bundle ([`Event`]). This side only
//! submits (starts the driver, [`start_driver`]), watches (reads the events, [`wait`]), cancels
//! (SIGTERM to the driver, which cancels its tasks) and maps a task gone without run.json to
//! `lost`, naming its node (the task's `ray/started/<i>.json`) and Ray's reason.
//!
//! The driver outlives the submitting hwr-exp: `run --detach` returns once it has connected,
//! and `hwr-exp wait`, `cancel` and `resume` find it by `ray/driver-<k>.json` (its pid and start
//! time on the submitting host).

use std::collections::BTreeSet;
use std::io::{self, BufRead as _, Seek as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::bundle::reason::RunFailure;
use crate::bundle::write::LostTask;
use crate::bundle::{BundleWriter, files};
use crate::manifest::{CpuSelection, Manifest, RayConfig};
use crate::plan::{Plan, PlanError};
use crate::runner::progress::FAILURE_TAIL_LINES;
use crate::runner::session::{Session, SessionError, SessionReport};
use crate::runner::{Progress as _, SessionEnd};

/// The driver script, run as `python3 -c DRIVER SPEC`.
pub const DRIVER: &str = include_str!("driver.py");

/// The variable Ray's own tools read the cluster's address from; used when the manifest has no
/// `[executor] address`.
pub const ADDRESS_ENV: &str = "RAY_ADDRESS";

/// The Python interpreter that runs the driver (one that can `import ray`); default `python3`.
pub const PYTHON_ENV: &str = "HWR_RAY_PYTHON";

/// The bundle's Ray folder: driver records, events, the tasks' start files and logs.
pub const RAY_DIR: &str = "ray";

/// How often [`wait`] reads the driver's events.
pub const POLL: Duration = Duration::from_millis(200);

/// How long a waiter that cancels waits for the driver to cancel its tasks and exit, beyond the
/// plan's grace.
pub const CANCEL_WAIT: Duration = Duration::from_secs(40);

/// How long the driver may take to connect to the cluster (Ray's own retries go on for minutes).
pub const CONNECT_WAIT: Duration = Duration::from_secs(60);

/// The cluster as the preflight found it.
#[derive(Debug, Clone)]
pub struct RayCluster {
    /// The address given to `ray.init`.
    pub address: String,
    /// The interpreter that runs the driver.
    pub python: PathBuf,
    /// Ray's version as that interpreter imports it.
    pub version: String,
}

/// The fixed-CPU-list problem of a manifest run on Ray (`run --executor ray` over a local
/// manifest), located at `isolation.cpus`.
pub fn fixed_cpus_problem(manifest: &Manifest) -> Option<PlanError> {
    match manifest.isolation.cpus {
        CpuSelection::Auto => None,
        CpuSelection::List(_) => Some(PlanError {
            key: "isolation.cpus".into(),
            message: "a fixed CPU list cannot be used with the ray executor: each task claims free CPUs of its node".into(),
            help: Some("write cpus = \"auto\" and set cpus-per-run (each Ray task asks for that many CPUs)".into()),
        }),
    }
}

/// The cluster's address: `[executor] address`, else `RAY_ADDRESS` (read through `var`).
pub fn address(config: &RayConfig, var: impl Fn(&str) -> Option<String>) -> Option<String> {
    config
        .address
        .clone()
        .or_else(|| var(ADDRESS_ENV))
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
}

/// The Ray executor's checks before a bundle exists: an address, and a Python that imports
/// `ray` ([`PYTHON_ENV`], else `python3`). Whether the cluster answers is the driver's first
/// step (a driver that cannot connect fails the bundle with Ray's message).
///
/// # Errors
/// One message per problem.
pub fn preflight(config: &RayConfig) -> Result<RayCluster, Vec<String>> {
    let Some(address) = address(config, |v| std::env::var(v).ok()) else {
        return Err(vec![format!(
            "ray executor: no cluster address: set `address` in [executor] (the head node's GCS address, like \"10.0.0.5:6379\") or {ADDRESS_ENV}"
        )]);
    };
    let python = std::env::var_os(PYTHON_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let out = Command::new(&python)
        .args(["-c", "import ray; print(ray.__version__)"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(RayCluster {
            address,
            python,
            version: String::from_utf8_lossy(&o.stdout).trim().to_string(),
        }),
        Ok(o) => Err(vec![format!(
            "ray executor: {} cannot import ray ({}): install Ray there (`pip install ray`) or point {PYTHON_ENV} at a Python that has it",
            python.display(),
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("no message")
        )]),
        Err(e) => Err(vec![format!(
            "ray executor: cannot start {}: {e} (set {PYTHON_ENV} to a Python with Ray installed)",
            python.display()
        )]),
    }
}

/// What the driver reads: `ray/driver-<k>.spec.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriverSpec {
    /// `ray.init` address.
    pub address: String,
    /// The hwr-exp binary each task runs (on a file system the nodes share).
    pub exe: String,
    /// The bundle folder, absolute.
    pub bundle: String,
    /// The bundle's Ray folder, absolute.
    pub ray_dir: String,
    /// The events file, absolute.
    pub events: String,
    /// Plan indices to run, in order.
    pub indices: Vec<usize>,
    /// Ray's `num_cpus` of each task (`cpus-per-run`).
    pub cpus_per_run: usize,
    /// Most tasks submitted and not ended at once (`jobs`).
    pub max_in_flight: usize,
    /// Seconds between SIGTERM and SIGKILL of a cancelled task's hwr-exp.
    pub grace: f64,
}

/// `ray/driver-<k>.json`: one started driver, as `wait`, `cancel` and `resume` find it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DriverRecord {
    /// Its number `k` in the bundle (0 for `run`, one more per `resume`).
    pub number: usize,
    /// Its process id on `host`.
    pub pid: u32,
    /// Its start time in clock ticks after boot (`/proc/<pid>/stat` field 22), so that a reused
    /// pid is not taken for it.
    pub start_ticks: Option<u64>,
    /// The host it runs on (the submitting host).
    pub host: String,
    /// The cluster address.
    pub address: String,
    /// Ray's version on the submitting host.
    pub ray_version: String,
    /// How many runs it submits.
    pub runs: usize,
    /// When it was started (RFC 3339).
    pub started: String,
}

impl DriverRecord {
    fn path(dir: &Path, number: usize) -> PathBuf {
        dir.join(RAY_DIR).join(format!("driver-{number}.json"))
    }

    /// Its events file.
    pub fn events(dir: &Path, number: usize) -> PathBuf {
        dir.join(RAY_DIR).join(format!("driver-{number}.events"))
    }

    /// Its spec file.
    pub fn spec(dir: &Path, number: usize) -> PathBuf {
        dir.join(RAY_DIR).join(format!("driver-{number}.spec.json"))
    }

    /// Its own log (the driver's stdout and stderr).
    pub fn log(dir: &Path, number: usize) -> PathBuf {
        dir.join(RAY_DIR).join(format!("driver-{number}.log"))
    }

    /// The latest driver of the bundle `dir`, if any.
    ///
    /// # Errors
    /// A record that cannot be read or parsed.
    pub fn latest(dir: &Path) -> io::Result<Option<DriverRecord>> {
        let mut n = 0;
        while DriverRecord::path(dir, n).exists() {
            n += 1;
        }
        if n == 0 {
            return Ok(None);
        }
        let path = DriverRecord::path(dir, n - 1);
        let text = std::fs::read(&path)?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
    }

    /// The plan indices its spec names.
    ///
    /// # Errors
    /// A spec that cannot be read or parsed.
    pub fn indices(&self, dir: &Path) -> io::Result<Vec<usize>> {
        let path = DriverRecord::spec(dir, self.number);
        let spec: DriverSpec = serde_json::from_slice(&std::fs::read(&path)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
        Ok(spec.indices)
    }

    /// Whether this process can see the driver: it runs on this host.
    pub fn on_this_host(&self) -> bool {
        self.host == crate::runner::backend::slurm::task::hostname()
    }

    /// Whether the driver still runs (same pid and start time, not a zombie). Only meaningful
    /// [`DriverRecord::on_this_host`].
    pub fn alive(&self) -> bool {
        match proc_start(self.pid) {
            Some((ticks, state)) => state != 'Z' && self.start_ticks.is_none_or(|t| t == ticks),
            None => false,
        }
    }

    /// Sends SIGTERM to the driver (it cancels its tasks and exits); nothing when it is gone.
    pub fn terminate(&self) {
        if self.alive()
            && let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

/// Start time (clock ticks after boot) and state letter of process `pid`, from `/proc/<pid>/stat`.
fn proc_start(pid: u32) -> Option<(u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may contain spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ticks = fields.get(19)?.parse().ok()?;
    Some((ticks, state))
}

/// One line of the driver's events file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// `ray.init` succeeded.
    Connected {
        /// Ray's version.
        #[serde(default)]
        ray_version: Option<String>,
    },
    /// The driver could not import Ray or connect.
    Failed {
        /// Why.
        error: String,
    },
    /// The driver starts submitting.
    Submitting {
        /// How many runs.
        #[serde(default)]
        runs: usize,
    },
    /// A task ended: `ok` when the task function returned (hwr-exp's exit `code`), else Ray's
    /// `error`.
    End {
        /// Plan index.
        index: usize,
        /// The task function returned.
        ok: bool,
        /// hwr-exp task's exit code.
        #[serde(default)]
        code: Option<i32>,
        /// The task's node, when it returned.
        #[serde(default)]
        node: Option<String>,
        /// Ray's exception, one line.
        #[serde(default)]
        error: Option<String>,
        /// The driver cancelled it.
        #[serde(default)]
        cancelled: bool,
    },
    /// Every task ended.
    Done,
    /// The driver was told to stop and cancelled its tasks.
    Cancelled,
}

/// Reads the events appended to a file since the last call.
#[derive(Debug)]
pub struct EventReader {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl EventReader {
    /// A reader from the start of `path`.
    pub fn new(path: PathBuf) -> Self {
        EventReader {
            path,
            offset: 0,
            partial: String::new(),
        }
    }

    /// The complete lines appended since the last call, parsed (lines that do not parse are
    /// skipped); none when the file does not exist yet.
    pub fn read_new(&mut self) -> Vec<Event> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if file.seek(io::SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut reader = io::BufReader::new(file);
        let mut out = Vec::new();
        let mut line = String::new();
        while let Ok(n) = reader.read_line(&mut line) {
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            if !line.ends_with('\n') {
                self.partial.push_str(&line);
                line.clear();
                break;
            }
            let whole = std::mem::take(&mut self.partial) + &line;
            if let Ok(e) = serde_json::from_str(whole.trim()) {
                out.push(e);
            }
            line.clear();
        }
        out
    }
}

/// What starting a driver needs.
#[derive(Debug, Clone, Copy)]
pub struct Submit<'a> {
    /// The cluster.
    pub cluster: &'a RayCluster,
    /// `cpus-per-run`.
    pub cpus_per_run: usize,
    /// Return once the driver has connected (`run --detach`).
    pub detach: bool,
}

/// A started driver: its record and, in the process that started it, its child handle (reaped
/// by [`Driver::alive`]).
#[derive(Debug)]
pub struct Driver {
    /// The record in `ray/driver-<k>.json`.
    pub record: DriverRecord,
    /// The child, when this process started it.
    pub child: Option<Child>,
}

impl Driver {
    /// Whether the driver still runs.
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => self.record.alive(),
        }
    }
}

/// Writes the spec and starts the driver for `indices` of the bundle in `dir`, in a process group
/// of its own (Ctrl-C of the terminal reaches the waiter, which stops it), and records it in
/// `ray/driver-<k>.json`.
///
/// # Errors
/// I/O errors writing the files or starting the interpreter.
pub fn start_driver(dir: &Path, plan: &Plan, indices: &[usize], submit: &Submit<'_>) -> io::Result<Driver> {
    use std::os::unix::process::CommandExt as _;
    let ray_dir = dir.join(RAY_DIR);
    for sub in ["started", "logs"] {
        std::fs::create_dir_all(ray_dir.join(sub))?;
    }
    let mut number = 0;
    while DriverRecord::path(dir, number).exists() {
        number += 1;
    }
    let exe = crate::runner::binary::running().path.clone();
    let spec = DriverSpec {
        address: submit.cluster.address.clone(),
        exe: exe.display().to_string(),
        bundle: dir.display().to_string(),
        ray_dir: ray_dir.display().to_string(),
        events: DriverRecord::events(dir, number).display().to_string(),
        indices: indices.to_vec(),
        cpus_per_run: submit.cpus_per_run.max(1),
        max_in_flight: (plan.jobs as usize).max(1),
        grace: plan.grace.as_secs_f64(),
    };
    crate::bundle::atomic::write_json_atomic(&DriverRecord::spec(dir, number), &spec)?;
    let log = std::fs::File::create(DriverRecord::log(dir, number))?;
    let child = Command::new(&submit.cluster.python)
        .arg("-c")
        .arg(DRIVER)
        .arg(DriverRecord::spec(dir, number))
        .env("RAY_USAGE_STATS_ENABLED", "0")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "starting the ray driver with {}: {e}",
                    submit.cluster.python.display()
                ),
            )
        })?;
    let record = DriverRecord {
        number,
        pid: child.id(),
        start_ticks: proc_start(child.id()).map(|(t, _)| t),
        host: crate::runner::backend::slurm::task::hostname(),
        address: submit.cluster.address.clone(),
        ray_version: submit.cluster.version.clone(),
        runs: indices.len(),
        started: crate::timestamp::now(),
    };
    crate::bundle::atomic::write_json_atomic(&DriverRecord::path(dir, number), &record)?;
    Ok(Driver {
        record,
        child: Some(child),
    })
}

/// Waits until the driver has connected and started submitting (`Ok`), or reports why it could
/// not (`Err`: Ray's message, or the end of its log when it died without saying).
fn connected(dir: &Path, driver: &mut Driver) -> Result<(), String> {
    let mut reader = EventReader::new(DriverRecord::events(dir, driver.record.number));
    let since = Instant::now();
    loop {
        if since.elapsed() > CONNECT_WAIT {
            driver.record.terminate();
            if let Some(c) = &mut driver.child {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err(format!(
                "the ray driver did not connect to {} within {} s (its log: {})",
                driver.record.address,
                CONNECT_WAIT.as_secs(),
                DriverRecord::log(dir, driver.record.number).display()
            ));
        }
        for e in reader.read_new() {
            match e {
                Event::Failed { error } => return Err(error),
                Event::Submitting { .. } | Event::End { .. } | Event::Done | Event::Cancelled => {
                    return Ok(());
                }
                Event::Connected { .. } => {}
            }
        }
        if !driver.alive() {
            // Read once more: it may have written its last line just before exiting.
            if reader
                .read_new()
                .iter()
                .any(|e| !matches!(e, Event::Failed { .. }))
            {
                return Ok(());
            }
            let log =
                std::fs::read_to_string(DriverRecord::log(dir, driver.record.number)).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(format!(
                "the ray driver exited before it connected: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts the driver for the session's runs, then, unless `submit.detach`, waits for them
/// ([`wait_and_finish`]). Detached, the bundle stays `running` without a lock holder once the
/// driver has connected (exit 0).
///
/// # Errors
/// [`SessionError::Preflight`] when the driver could not start or connect (the bundle is marked
/// `failed` with Ray's message); [`SessionError::Bundle`] when writing the bundle fails.
pub fn submit_and_wait(mut session: Session<'_>, submit: &Submit<'_>) -> Result<SessionReport, SessionError> {
    let quiet = session.finish.quiet;
    let plan = session.plan.clone();
    let indices = session.indices.clone();
    let dir = session.dir();
    if !quiet {
        crate::runner::progress::say(format_args!(
            "submitting {} to the ray cluster at {} into {}",
            crate::runner::progress::runs(indices.len()),
            submit.cluster.address,
            dir.display()
        ));
    }
    let fail = |session: &mut Session<'_>, reason: String| {
        let reason = format!("submitting to ray: {reason}");
        let _ = session.writer_mut().fail(&reason, SystemTime::now());
        SessionError::Preflight(vec![format!(
            "{reason} (the bundle {} is marked failed with this reason)",
            dir.display()
        )])
    };
    let mut driver = match start_driver(&dir, &plan, &indices, submit) {
        Ok(d) => d,
        Err(e) => return Err(fail(&mut session, e.to_string())),
    };
    if let Err(reason) = connected(&dir, &mut driver) {
        return Err(fail(&mut session, reason));
    }
    if submit.detach {
        if !quiet && plan.adaptive.is_some() {
            crate::runner::progress::say(format_args!(
                "adaptive repetitions: the first round is submitted; `hwr-exp wait {}` judges it at each look and submits the further rounds (nothing does while no waiter runs)",
                dir.display()
            ));
        }
        // The driver goes on without this process; dropping the writer releases the lock.
        return Ok(SessionReport {
            bundle: dir,
            status: crate::bundle::BundleStatus::Running,
            counts: Default::default(),
            planned: plan.len(),
            drift: false,
            exit_code: crate::exit_codes::SUCCESS,
            failures: Default::default(),
            slurm_jobs: Vec::new(),
            slurm_unsubmitted: 0,
            failed_fast: false,
        });
    }
    wait_and_finish(session, driver, Some(submit))
}

/// Waits for the session's runs ([`wait`]) with the progress display, then finishes the session.
/// Shared by `run`, `wait` and `resume`. With adaptive repetitions and `rounds` (how to start a
/// driver), the rule judges the bundle after each round ([`crate::runner::adaptive`], the same
/// decision as the local runner's and Slurm's) and each further round is one more driver for
/// its runs; without `rounds` (a waiter that could not reach Ray) the rule is left to `resume`.
///
/// # Errors
/// As [`Session::finish`].
pub fn wait_and_finish(
    mut session: Session<'_>,
    mut driver: Driver,
    rounds: Option<&Submit<'_>>,
) -> Result<SessionReport, SessionError> {
    if !session.finish.quiet {
        crate::runner::progress::say(format_args!(
            "waiting for {} of ray driver {} (pid {}) in {}",
            crate::runner::progress::runs(session.indices.len()),
            driver.record.number,
            driver.record.pid,
            session.dir().display()
        ));
    }
    let started = Instant::now();
    session.progress.start(session.indices.len());
    let end = wait(&mut session, &mut driver);
    let_driver_end(&mut driver);
    let end = match rounds {
        Some(submit) if session.plan.adaptive.is_some() => {
            crate::runner::adaptive::rounds::continue_rounds_with(
                &mut session,
                end,
                started,
                &mut |session, new| next_round(session, submit, new),
            )
        }
        _ => end,
    };
    session.finish(end, Vec::new())
}

/// Every run of the driver is settled: it is shutting down (or was stopped). Lets it end, so
/// that a `resume` right after finds no live driver; stops it after [`CANCEL_WAIT`].
fn let_driver_end(driver: &mut Driver) {
    let until = Instant::now() + CANCEL_WAIT;
    while driver.alive() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    if driver.alive() {
        driver.record.terminate();
    }
}

/// One further round of adaptive repetitions: the runs `new` (already in the session's plan and
/// plan.json) through a driver of their own, waited for as the first round was.
///
/// # Errors
/// The driver could not start or connect (the rule stops there; `resume` continues it); I/O
/// errors writing the bundle.
fn next_round(session: &mut Session<'_>, submit: &Submit<'_>, new: &[usize]) -> io::Result<SessionEnd> {
    let dir = session.dir();
    let plan = session.plan.clone();
    let submit = Submit {
        detach: false,
        ..*submit
    };
    let mut driver = start_driver(&dir, &plan, new, &submit)?;
    if let Err(reason) = connected(&dir, &mut driver) {
        driver.record.terminate();
        return Err(io::Error::other(format!(
            "submitting the next round of adaptive repetitions to ray: {reason}"
        )));
    }
    if !session.finish.quiet {
        crate::runner::progress::say(format_args!(
            "submitted the round ({}) as ray driver {} (pid {})",
            crate::runner::progress::runs(new.len()),
            driver.record.number,
            driver.record.pid
        ));
    }
    session.indices = new.to_vec();
    let end = wait(session, &mut driver);
    let_driver_end(&mut driver);
    end
}

/// Where a run's task said it started: `ray/started/<index>.json`.
#[derive(Debug, Clone, Default, Deserialize)]
struct Started {
    node: Option<String>,
    at: Option<f64>,
}

fn started(dir: &Path, index: usize) -> Started {
    std::fs::read(dir.join(RAY_DIR).join("started").join(format!("{index}.json")))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Waits until every run of the session has a run.json or is recorded `lost`: reads the driver's
/// events every [`POLL`]; a task that ended is looked up in its run folder; one without run.json
/// is `lost` with Ray's reason and the node its task started on. When the driver is gone with
/// runs not reported, those are `lost` too ("the driver ended"). Ctrl-C or `hwr-exp cancel`
/// (the cancel marker) stop the driver, which cancels its tasks: the session ends
/// `Interrupted`, runs without run.json left for `resume`.
///
/// # Errors
/// I/O errors writing bundle.json or a lost run's record.
pub fn wait(session: &mut Session<'_>, driver: &mut Driver) -> io::Result<SessionEnd> {
    let dir = session.dir();
    let plan = session.plan.clone();
    let mut pending: BTreeSet<usize> = session.indices.iter().copied().collect();
    let total = pending.len();
    let mut done = 0;
    let marker = dir.join(files::SLURM).join(files::CANCEL_REQUESTED);
    let mut reader = EventReader::new(DriverRecord::events(&dir, driver.record.number));
    let cancel = session.cancel;
    let mut stopping: Option<Instant> = None;
    let mut over = false;
    loop {
        // Looked at before the events are read, so that a gone driver's last lines are read.
        let driver_gone = !driver.alive();
        for event in reader.read_new() {
            match event {
                Event::End {
                    index,
                    ok,
                    code,
                    node,
                    error,
                    cancelled,
                } if pending.contains(&index) => {
                    let reason = if ok {
                        format!(
                            "ray: the task's hwr-exp exited with {} without writing run.json",
                            code.map_or("no code".to_string(), |c| c.to_string())
                        )
                    } else {
                        let error = error.unwrap_or_else(|| "no error given".into());
                        if cancelled {
                            format!("ray: cancelled ({error})")
                        } else {
                            format!("ray: {error}")
                        }
                    };
                    if stopping.is_some() && !record_exists(session, index) {
                        // Stopped on this waiter's request: left unfinished for `resume`.
                        pending.remove(&index);
                        continue;
                    }
                    settle(session, index, node, &reason, &mut done, total)?;
                    pending.remove(&index);
                }
                Event::Done | Event::Cancelled => over = true,
                Event::Failed { error } => {
                    crate::runner::progress::say(format_args!("warning: ray driver: {error}"));
                    over = true;
                }
                _ => {}
            }
        }
        if pending.is_empty() {
            return Ok(if stopping.is_some() {
                SessionEnd::Interrupted
            } else {
                SessionEnd::Complete
            });
        }
        if let Some(since) = stopping {
            if driver_gone || over || since.elapsed() > plan.grace + CANCEL_WAIT {
                return Ok(SessionEnd::Interrupted);
            }
        } else if cancel.load(Ordering::SeqCst) || marker.exists() {
            driver.record.terminate();
            stopping = Some(Instant::now());
            continue;
        } else if driver_gone || over {
            // The driver was found gone before its events were read: every line it wrote has
            // been handled, and the runs still pending were never reported.
            let log = DriverRecord::log(&dir, driver.record.number);
            let reason = format!(
                "ray: the driver (pid {} on {}) ended without reporting this run's task (its log: {})",
                driver.record.pid,
                driver.record.host,
                log.display()
            );
            for index in std::mem::take(&mut pending) {
                settle(session, index, None, &reason, &mut done, total)?;
            }
            return Ok(SessionEnd::Complete);
        }
        std::thread::sleep(POLL);
    }
}

fn record_exists(session: &mut Session<'_>, index: usize) -> bool {
    let run = session.plan.run(index);
    session.writer_mut().run_dir(&run).join(files::RUN).exists()
}

/// Run `index` whose task ended: counts its run.json, or records it `lost` with `reason` and
/// its node (`node`, else its start file's), and shows it.
fn settle(
    session: &mut Session<'_>,
    index: usize,
    node: Option<String>,
    reason: &str,
    done: &mut usize,
    total: usize,
) -> io::Result<()> {
    let run = session.plan.run(index);
    let format = session.plan.output_format;
    let writer: &mut BundleWriter = session
        .writer
        .get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = writer.dir().to_path_buf();
    let path = writer.run_dir(&run).join(files::RUN);
    let read = crate::bundle::read::read_versioned::<crate::bundle::RunRecord>(
        &path,
        "format",
        crate::bundle::BUNDLE_FORMAT,
    );
    let record = match read {
        Ok(record) => {
            writer.count_run(&record)?;
            record
        }
        Err(_) => {
            let start = started(&dir, index);
            let node = node.or(start.node);
            let reason = match &node {
                Some(n) => format!("{reason} on node {n}"),
                None => reason.to_string(),
            };
            let started_at = start
                .at
                .filter(|t| t.is_finite() && *t > 0.0)
                .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(t));
            writer.record_lost(
                &run,
                format,
                LostTask {
                    reason,
                    node,
                    task: None,
                    started: started_at,
                    ended: SystemTime::now(),
                },
            )?
        }
    };
    *done += 1;
    let failure = RunFailure::read(&record, &writer.run_dir(&run), FAILURE_TAIL_LINES);
    session
        .progress
        .run_finished(&run, &record, failure.as_ref(), *done, total);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_the_manifests_else_ray_address() {
        let env = |v: &str| (v == ADDRESS_ENV).then(|| "10.0.0.5:6379".to_string());
        let none = |_: &str| None;
        let given = RayConfig {
            address: Some("head:6379".into()),
        };
        assert_eq!(address(&given, env).as_deref(), Some("head:6379"));
        assert_eq!(
            address(&RayConfig::default(), env).as_deref(),
            Some("10.0.0.5:6379")
        );
        assert_eq!(address(&RayConfig::default(), none), None);
        let blank = |_: &str| Some("  ".to_string());
        assert_eq!(address(&RayConfig::default(), blank), None);
    }

    #[test]
    fn events_are_read_line_by_line_as_they_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e");
        let mut r = EventReader::new(path.clone());
        assert!(r.read_new().is_empty(), "no file yet");
        std::fs::write(&path, "{\"event\":\"connected\",\"ray_version\":\"2.60.0\",\"at\":1}\n{\"event\":\"end\",\"index\":3,\"ok\":false,\"error\":\"NodeDiedError: x\"").unwrap();
        assert_eq!(
            r.read_new(),
            [Event::Connected {
                ray_version: Some("2.60.0".into())
            }]
        );
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b",\"at\":2}\n{\"event\":\"done\"}\n").unwrap();
        assert_eq!(
            r.read_new(),
            [
                Event::End {
                    index: 3,
                    ok: false,
                    code: None,
                    node: None,
                    error: Some("NodeDiedError: x".into()),
                    cancelled: false
                },
                Event::Done
            ]
        );
    }

    #[test]
    fn a_dead_or_reused_pid_is_no_driver() {
        let me = std::process::id();
        let (ticks, _) = proc_start(me).unwrap();
        let mut record = DriverRecord {
            number: 0,
            pid: me,
            start_ticks: Some(ticks),
            host: crate::runner::backend::slurm::task::hostname(),
            address: "x".into(),
            ray_version: "2".into(),
            runs: 1,
            started: "now".into(),
        };
        assert!(record.alive() && record.on_this_host());
        record.start_ticks = Some(ticks + 1);
        assert!(!record.alive(), "another process got the pid");
    }
}
