//! The one-node Slurm test cluster, when one answers.

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
}

/// What [`PrivateCluster::start`] is asked for.
pub struct PrivateClusterSpec<'a> {
    /// Compute nodes n1..nN (`SLURM_NODES`); with 1 the node is named after this host.
    pub nodes: u32,
    /// CPUs each node advertises (`SLURM_FAKE_CPUS`).
    pub cpus: u32,
    /// Extra `slurm.conf` lines (`SLURM_EXTRA_CONF`), e.g. `"MaxJobCount=50\nMaxArraySize=11"`.
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
        let out = std::process::Command::new("bash")
            .arg(&start)
            .env("SLURM_TEST_DIR", dir.path())
            .env("SLURM_NODES", spec.nodes.to_string())
            .env("SLURM_FAKE_CPUS", spec.cpus.to_string())
            .env("SLURM_EXTRA_CONF", spec.extra_conf)
            .env("SLURMCTLD_PORT", base.to_string())
            .env("SLURMD_PORT", (base + 1).to_string())
            .env_remove("SLURM_CONF")
            .output()
            .map_err(|e| format!("{}: {e}", start.display()))?;
        let cluster = PrivateCluster { dir, stop };
        if !out.status.success() {
            return Err(format!(
                "{} failed ({}): {}{}",
                start.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(cluster)
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
