//! The Slurm test cluster, when one answers, clusters of a test's own ([`PrivateCluster`]), and
//! what the Slurm test files share: `hwr-exp` against a cluster ([`hwr_on`], [`spawn`],
//! [`run_manifest`], [`spawn_manifest`]), the bundle a submission made ([`printed_bundle`],
//! [`published_bundle`], [`find_submitted_bundle`]), its arrays ([`arrays`], [`job_ids`],
//! [`task_map`]) and tasks ([`tasks_in`], [`wait_no_active_task`]), its run folders
//! ([`only_run_dir`], [`attempt_folders`], [`recorded_indices`], [`older_than`]), [`Cleanup`]
//! of what a test left in the queue, and [`Wrappers`] of Slurm's programs put first in `PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use hwr_exp::slurm::{self, SlurmClient};

use super::need::{Requirement, need};

/// A Slurm cluster that answers `scontrol ping`; gives its client. Mandatory with
/// `HWR_REQUIRE_SLURM=1` (set by `.ci/run`).
pub struct Slurm;

impl Requirement for Slurm {
    type Found = SlurmClient;
    fn what(&self) -> String {
        "a Slurm cluster".into()
    }
    fn hint(&self) -> String {
        "start one with ../shared/slurm/start-slurm.sh and `source $SLURM_TEST_DIR/slurm.env`".into()
    }
    fn require_var(&self) -> Option<&'static str> {
        Some("HWR_REQUIRE_SLURM")
    }
    fn find(self) -> Result<SlurmClient, String> {
        if !slurm::cluster_configured() {
            return Err("SLURM_CONF is not set or names no file".into());
        }
        let client = SlurmClient::new();
        client.ping().map_err(|e| e.to_string())?;
        Ok(client)
    }
}

/// The cluster's client, or `None` after saying why the test is skipped ([`need`]`(Slurm)`).
pub fn cluster() -> Option<SlurmClient> {
    need(Slurm)
}

/// A Slurm cluster of the test's own, started by `../shared/slurm/start-slurm.sh` with its own
/// folder, ports and `slurm.conf` (for a setting the shared cluster lacks: `MaxJobCount=50`, a
/// preemption partition, two nodes), stopped by `stop-slurm.sh` when dropped.
///
/// Commands reach it through [`PrivateCluster::conf`] as `SLURM_CONF` (set it on every `hwr-exp`
/// and Slurm command of the test). Mandatory where `HWR_REQUIRE_SLURM=1` or `CI` is set.
pub struct PrivateCluster {
    /// The cluster's folder (`SLURM_TEST_DIR`): etc/, log/, run/, spool/.
    dir: tempfile::TempDir,
    stop: std::path::PathBuf,
    /// The reaper the daemons were started under ([`REAPER`]), killed after `stop-slurm.sh`.
    reaper: std::process::Child,
}

/// A child subreaper that starts the cluster (its arguments after the status file) and then
/// reaps whatever is reparented to it until killed: the daemons and every `slurmstepd` they
/// leave behind. Without it they would be adopted by this test binary, which the in-process
/// launcher tests make a child subreaper and which never reaps them: each task of a cluster
/// left a zombie, and `slurmstepd`'s scans of `/proc` slowed with thousands of them (the
/// 20,000-run test went from ~15 to ~4.6 tasks a second inside the suite). The start's exit
/// code goes to the status file (written whole, then renamed) once the start script ends.
const REAPER: &str = r#"
import ctypes, os, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
status = sys.argv[1]
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, st = os.waitpid(pid, 0)
with open(status + ".tmp", "w") as f:
    f.write(str(os.waitstatus_to_exitcode(st)))
os.rename(status + ".tmp", status)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"#;

/// What [`PrivateCluster::start`] is asked for.
pub struct PrivateClusterSpec<'a> {
    /// Compute nodes n1..nN (`SLURM_NODES`); with 1 the node is named after this host.
    pub nodes: u32,
    /// CPUs each node advertises (`SLURM_FAKE_CPUS`).
    pub cpus: u32,
    /// Extra `slurm.conf` lines (`SLURM_EXTRA_CONF`), e.g. `"MaxJobCount=50\nMaxArraySize=11"`;
    /// `{dir}` stands for the cluster's folder (`AuthInfo=socket={dir}/munge/munge.socket.2,...`).
    pub extra_conf: &'a str,
}

impl Requirement for PrivateClusterSpec<'_> {
    type Found = PrivateCluster;
    fn what(&self) -> String {
        format!(
            "a private Slurm cluster ({} node(s), extra conf {:?})",
            self.nodes, self.extra_conf
        )
    }
    fn hint(&self) -> String {
        "run as root with ../shared/slurm/start-slurm.sh beside the repository (or HWR_SHARED_DIR \
         naming the shared folder) and the slurm Debian packages"
            .into()
    }
    fn require_var(&self) -> Option<&'static str> {
        Some("HWR_REQUIRE_SLURM")
    }
    fn find(self) -> Result<PrivateCluster, String> {
        PrivateCluster::start_now(&self)
    }
}

impl PrivateCluster {
    /// Starts a cluster as `spec` says, or `None` after saying why the test is skipped
    /// ([`need`]); panics where skips are failures.
    pub fn start(spec: PrivateClusterSpec<'_>) -> Option<PrivateCluster> {
        need(spec)
    }

    /// [`PrivateCluster::start`] of one node advertising `cpus` CPUs, with `extra_conf`.
    pub fn one_node(cpus: u32, extra_conf: &str) -> Option<PrivateCluster> {
        Self::start(PrivateClusterSpec {
            nodes: 1,
            cpus,
            extra_conf,
        })
    }

    fn start_now(spec: &PrivateClusterSpec<'_>) -> Result<PrivateCluster, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root".into());
        }
        let shared = shared_dir().ok_or("no shared/slurm/start-slurm.sh found")?;
        let start = shared.join("slurm/start-slurm.sh");
        let stop = shared.join("slurm/stop-slurm.sh");
        // One start at a time: the ports are checked free and then taken by the daemons.
        let lock = std::fs::File::create(std::env::temp_dir().join("hwr-exp-private-slurm.lock"))
            .map_err(|e| e.to_string())?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).map_err(|e| e.to_string())?;
        let base = free_ports(spec.nodes as u16 + 1).ok_or("no free range of ports")?;
        let dir = tempfile::Builder::new()
            .prefix("hwr-slurm-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let (status, out_path, err_path) = (
            dir.path().join("start.status"),
            dir.path().join("start.out"),
            dir.path().join("start.err"),
        );
        let file =
            |p: &std::path::Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
        let reaper = std::process::Command::new("python3")
            .arg("-c")
            .arg(REAPER)
            .arg(&status)
            .arg("bash")
            .arg(&start)
            .stdin(std::process::Stdio::null())
            .stdout(file(&out_path)?)
            .stderr(file(&err_path)?)
            .env("SLURM_TEST_DIR", dir.path())
            .env("SLURM_NODES", spec.nodes.to_string())
            .env("SLURM_FAKE_CPUS", spec.cpus.to_string())
            .env(
                "SLURM_EXTRA_CONF",
                spec.extra_conf.replace("{dir}", &dir.path().to_string_lossy()),
            )
            .env("SLURMCTLD_PORT", base.to_string())
            .env("SLURMD_PORT", (base + 1).to_string())
            .env_remove("SLURM_CONF")
            .spawn()
            .map_err(|e| format!("python3 (the reaper of {}): {e}", start.display()))?;
        let mut cluster = PrivateCluster { dir, stop, reaper };
        // The start script waits for the node itself (SLURM_WAIT_S, 60 s by default).
        let reaper = &mut cluster.reaper;
        let ended = crate::support::process::poll(
            std::time::Duration::from_secs(300),
            std::time::Duration::from_millis(100),
            || match std::fs::read_to_string(&status) {
                Ok(code) => Some(Ok(code)),
                Err(_) => match reaper.try_wait() {
                    Ok(Some(s)) => Some(Err(format!("its reaper ended: {s}"))),
                    _ => None,
                },
            },
        );
        let failed = match ended {
            Some(Ok(code)) if code.trim() == "0" => return Ok(cluster),
            Some(Ok(code)) => format!("exit {}", code.trim()),
            Some(Err(why)) => why,
            None => "still starting after 300 s".into(),
        };
        Err(format!(
            "{} failed ({failed}): {}{}",
            start.display(),
            std::fs::read_to_string(&out_path).unwrap_or_default(),
            std::fs::read_to_string(&err_path).unwrap_or_default()
        ))
    }

    /// The cluster's `slurm.conf`: pass it as `SLURM_CONF`.
    pub fn conf(&self) -> std::path::PathBuf {
        self.dir.path().join("etc/slurm.conf")
    }

    /// The cluster's folder (`SLURM_TEST_DIR`): `run/slurmd-n2.pid` names node n2's slurmd.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A Slurm command (`squeue`, `scontrol`, ...) talking to this cluster.
    pub fn command(&self, program: &str) -> std::process::Command {
        let mut c = std::process::Command::new(program);
        c.env("SLURM_CONF", self.conf());
        c
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(&self.stop)
            .env("SLURM_TEST_DIR", self.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
    }
}

/// The shared folder: `HWR_SHARED_DIR`, else the first `shared/` holding
/// `slurm/start-slurm.sh` beside the repository or one of its ancestors.
pub fn shared_dir() -> Option<std::path::PathBuf> {
    if let Some(d) = std::env::var_os("HWR_SHARED_DIR") {
        return Some(d.into());
    }
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared"))
        .find(|s| s.join("slurm/start-slurm.sh").is_file())
}

/// The first port `p` in 20000..60000 such that `p..p+n` are all free on 127.0.0.1; tried
/// from a place that depends on this process so that test binaries do not all start at one.
fn free_ports(n: u16) -> Option<u16> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let start = 20000 + (std::process::id() % 400) as u16 * 100;
    (0..400u16)
        .map(|i| 20000 + (start - 20000 + i * 100) % 40000)
        .find(|&p| (p..p + n).all(free))
}

/// Polls `cond` every 100 ms until it holds; panics naming `what` after `limit` (a liveness
/// bound for waiting on a cluster, not a timing assertion).
#[track_caller]
pub fn wait_until(limit: std::time::Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let held = super::poll(limit, std::time::Duration::from_millis(100), || {
        cond().then_some(())
    });
    assert!(held.is_some(), "timed out after {limit:?} waiting for {what}");
}

/// An `hwr-exp` command in `dir`, talking to the cluster of `conf` (`SLURM_CONF`) when given,
/// else to the environment's.
pub fn hwr_on_command(dir: &Path, conf: Option<&Path>) -> Command {
    let mut cmd = super::hwr_command(dir);
    if let Some(c) = conf {
        cmd.env("SLURM_CONF", c);
    }
    cmd
}

/// `hwr-exp ARGS` in `dir` ([`hwr_on_command`]), run to its end.
pub fn hwr_on(dir: &Path, conf: Option<&Path>, args: &[&str]) -> Output {
    hwr_on_command(dir, conf)
        .args(args)
        .output()
        .expect("hwr-exp runs")
}

/// `hwr-exp ARGS` in `dir` ([`hwr_on_command`]) started, stdout and stderr piped.
pub fn spawn(dir: &Path, conf: Option<&Path>, args: &[&str]) -> Child {
    hwr_on_command(dir, conf)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hwr-exp starts")
}

/// `hwr-exp run MANIFEST ARGS...` of `manifest` (written as `dir/experiment.toml`) on the cluster
/// of `conf` ([`hwr_on`]), run to its end.
pub fn run_manifest(dir: &Path, conf: Option<&Path>, manifest: &str, args: &[&str]) -> Output {
    let m = super::write_manifest(dir, manifest);
    hwr_on_command(dir, conf)
        .arg("run")
        .arg(&m)
        .args(args)
        .output()
        .expect("hwr-exp runs")
}

/// [`run_manifest`] started, stdout and stderr piped ([`spawn`]).
pub fn spawn_manifest(dir: &Path, conf: Option<&Path>, manifest: &str, args: &[&str]) -> Child {
    let m = super::write_manifest(dir, manifest);
    hwr_on_command(dir, conf)
        .arg("run")
        .arg(&m)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hwr-exp starts")
}

/// A manifest of one run on Slurm that writes `started` in its bundle folder when it starts and
/// then blocks until `release` exists there (at most 300 s), catching SIGTERM and exiting 143 as
/// many programs do (which looks like a failure of its own); timeout 600 s, grace 2 s.
/// `executor` is more `[executor]` lines (`partition = "low"`, `requeue = true`).
pub fn blocking_until_release(name: &str, executor: &str) -> String {
    format!(
        r#"
format = 1
[experiment]
name = "{name}"
[command]
argv = ["bash", "-c", "touch ../../started; trap 'exit 143' TERM; i=0; while [ ! -e ../../release ] && [ $i -lt 3000 ]; do sleep 0.1 & wait $!; i=$((i+1)); done"]
workdir = "{{run-dir}}"
output = "out.txt"
output-format = "text"
[isolation]
timeout = "600s"
grace = "2s"
[executor]
kind = "slurm"
{executor}
"#
    )
}

/// The bundle path a command printed last on stdout, made absolute against `dir`; panics
/// (with the command's stderr) when it names no folder.
#[track_caller]
pub fn printed_bundle(dir: &Path, out: &Output) -> PathBuf {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no bundle path printed; stderr: {}", super::stderr(out)));
    let p = dir.join(line);
    assert!(
        p.is_dir(),
        "{} is no folder; stderr: {}",
        p.display(),
        super::stderr(out)
    );
    p
}

/// The only published bundle under `dir/results/<experiment>` (the hidden staging folder is
/// renamed into place once set up: reading it races with that rename, so it is not looked at)
/// once `ready` holds for it; panics after 60 s.
#[track_caller]
fn bundle_when(dir: &Path, experiment: &str, what: &str, ready: impl Fn(&Path) -> bool) -> PathBuf {
    let folder = dir.join("results").join(experiment);
    let mut found = None;
    wait_until(Duration::from_secs(60), what, || {
        found = std::fs::read_dir(&folder)
            .ok()
            .and_then(|mut r| {
                r.find_map(|e| {
                    e.ok()
                        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                })
            })
            .map(|e| e.path())
            .filter(|b| ready(b));
        found.is_some()
    });
    found.unwrap()
}

/// The only published bundle under `dir/results/<experiment>`, once it has a bundle.json.
#[track_caller]
pub fn published_bundle(dir: &Path, experiment: &str) -> PathBuf {
    bundle_when(dir, experiment, "the bundle", |b| b.join("bundle.json").is_file())
}

/// The only published bundle under `dir/results/<experiment>`, once bundle.json records an array.
#[track_caller]
pub fn find_submitted_bundle(dir: &Path, experiment: &str) -> PathBuf {
    bundle_when(dir, experiment, "the bundle's first submission", |b| {
        !arrays(b).is_empty()
    })
}

/// The arrays bundle.json records (none when it records none, or cannot be read yet).
pub fn arrays(bundle: &Path) -> Vec<slurm::SubmittedArray> {
    std::fs::read(bundle.join("bundle.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| serde_json::from_value(v["slurm"]["arrays"].clone()).ok())
        .unwrap_or_default()
}

/// The job ids of the arrays bundle.json records.
pub fn job_ids(bundle: &Path) -> Vec<u64> {
    arrays(bundle).iter().map(|a| a.job_id).collect()
}

/// The task map of the arrays bundle.json records.
pub fn task_map(bundle: &Path) -> slurm::TaskMap {
    slurm::TaskMap::new(&arrays(bundle)).unwrap()
}

/// The tasks of `map`'s arrays that squeue lists in `state` now (none when squeue fails).
pub fn tasks_in(client: &SlurmClient, map: &slurm::TaskMap, state: slurm::TaskState) -> Vec<slurm::TaskKey> {
    client
        .queue(&map.job_ids())
        .map(|s| {
            s.tasks
                .iter()
                .filter(|(_, e)| e.state == state)
                .map(|(k, _)| *k)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (60 s at most) until squeue lists no active (pending or running) task of `map`'s arrays.
#[track_caller]
pub fn wait_no_active_task(client: &SlurmClient, map: &slurm::TaskMap) {
    wait_until(Duration::from_secs(60), "no active task", || {
        client.active(&map.job_ids()).is_ok_and(|q| q.is_empty())
    });
}

/// The folders under `bundle/runs`, sorted by name.
fn run_dirs(bundle: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(bundle.join("runs"))
        .unwrap_or_else(|e| panic!("{}/runs: {e}", bundle.display()))
        .map(|e| e.unwrap().path())
        .collect();
    runs.sort();
    runs
}

/// The folder of the one run of `bundle` that has a folder (the first by name).
#[track_caller]
pub fn only_run_dir(bundle: &Path) -> PathBuf {
    run_dirs(bundle)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no run folder in {}", bundle.display()))
}

/// Each run folder's `attempts/` entries (sorted; none without `attempts/`), the runs sorted by
/// folder name.
pub fn attempt_folders(bundle: &Path) -> Vec<Vec<String>> {
    run_dirs(bundle)
        .iter()
        .map(|r| {
            let mut names: Vec<String> = std::fs::read_dir(r.join("attempts"))
                .map(|d| {
                    d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        })
        .collect()
}

/// The plan indices (`index`) of `bundle`'s run records, sorted: `0..N` when every run of an
/// N-run plan was recorded once.
pub fn recorded_indices(bundle: &Path) -> Vec<u64> {
    let mut indices: Vec<u64> = super::run_records(bundle)
        .iter()
        .map(|r| r["index"].as_u64().expect("run.json index"))
        .collect();
    indices.sort_unstable();
    indices
}

/// Whether `path` exists and was last modified at least `age` ago (a run's `started` marker:
/// the run has run that long).
pub fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|e| e >= age))
}

/// Cancels a bundle's arrays when dropped, the recorded ones and any tagged with the bundle
/// (an array whose id never reached bundle.json), so a failing test leaves nothing in the queue.
pub struct Cleanup {
    bundle: PathBuf,
    client: SlurmClient,
}

impl Cleanup {
    /// The clean-up of `bundle`'s arrays on the cluster of `conf` (`SLURM_CONF`; `None`: the
    /// environment's).
    pub fn new(bundle: &Path, conf: Option<&Path>) -> Cleanup {
        let client = match conf {
            Some(c) => SlurmClient::new().with_conf(c),
            None => SlurmClient::new(),
        }
        .with_retry(slurm::RetryPolicy::once());
        Cleanup {
            bundle: bundle.to_path_buf(),
            client,
        }
    }

    /// The bundle folder.
    pub fn bundle(&self) -> &Path {
        &self.bundle
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut ids = job_ids(&self.bundle);
        let experiment = std::fs::read(self.bundle.join("bundle.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["experiment"].as_str().map(str::to_string));
        if let Some(e) = experiment
            && let Ok(found) = self.client.tagged(&slurm::script::job_name(&e), &self.bundle)
        {
            ids.extend(found.iter().map(|a| a.job_id));
        }
        ids.sort_unstable();
        ids.dedup();
        let targets: Vec<_> = ids.into_iter().map(slurm::CancelTarget::Job).collect();
        let _ = self.client.cancel(&targets);
    }
}

/// The real program `name`: the first in `PATH`.
pub fn real(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not in PATH"))
}

/// A folder of wrapper programs of Slurm's commands, for `PATH` before the real ones: each a
/// shell body in which `$REAL` is the real program and `$STATE` the folder (for counters and
/// marker files the test reads or writes).
pub struct Wrappers {
    dir: tempfile::TempDir,
}

impl Wrappers {
    /// Writes each `(name, body)` as an executable `name` in a new folder.
    pub fn new(programs: &[(&str, &str)]) -> Wrappers {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in programs {
            let path = dir.path().join(name);
            let text = format!(
                "#!/bin/sh\nREAL={}\nSTATE={}\n{body}\n",
                real(name).display(),
                dir.path().display()
            );
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Wrappers { dir }
    }

    /// `PATH` with the wrappers first.
    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// An `hwr-exp` command in `dir` on the cluster of `conf` ([`hwr_on_command`]) with the
    /// wrappers first in its `PATH`.
    pub fn hwr(&self, dir: &Path, conf: Option<&Path>) -> Command {
        let mut cmd = hwr_on_command(dir, conf);
        cmd.env("PATH", self.path());
        cmd
    }

    /// `hwr-exp ARGS` with the wrappers ([`Wrappers::hwr`]), run to its end.
    pub fn run(&self, dir: &Path, conf: Option<&Path>, args: &[&str]) -> Output {
        self.hwr(dir, conf).args(args).output().expect("hwr-exp runs")
    }

    /// `hwr-exp ARGS` with the wrappers ([`Wrappers::hwr`]) started, stdout and stderr piped.
    pub fn spawn(&self, dir: &Path, conf: Option<&Path>, args: &[&str]) -> Child {
        self.hwr(dir, conf)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hwr-exp starts")
    }

    /// A file in the wrappers' folder (`$STATE/name`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits until a wrapper says it stalls ([`STALL`]).
    pub fn wait_stalled(&self) {
        wait_until(Duration::from_secs(60), "the wrapper to stall", || {
            self.file("stalled").exists()
        });
    }

    /// Lets a stalled wrapper go on.
    pub fn go(&self) {
        std::fs::write(self.file("go"), "").unwrap();
    }
}

impl Drop for Wrappers {
    fn drop(&mut self) {
        self.go();
    }
}

/// A wrapper body's stall (at most 120 s) until `$STATE/go` exists, saying so in `$STATE/stalled`.
pub const STALL: &str = "touch \"$STATE/stalled\"; i=0; while [ ! -e \"$STATE/go\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done";

/// A wrapper body that fails its first `n` calls whose arguments contain `word` (all calls for
/// an empty `word`) with `message` on stderr and exit 1, as Slurm's commands do when the
/// controller does not answer, counting them in `$STATE/<name>.failed`; every other call
/// `exec`s the real program.
pub fn failing_first(name: &str, word: &str, n: u32, message: &str) -> String {
    format!(
        "case \" $* \" in *\"{word}\"*)\n  c=$(cat \"$STATE/{name}.failed\" 2>/dev/null || echo 0)\n  if [ \"$c\" -lt {n} ]; then echo $((c+1)) > \"$STATE/{name}.failed\"; echo '{message}' >&2; exit 1; fi;;\nesac\nexec \"$REAL\" \"$@\""
    )
}
