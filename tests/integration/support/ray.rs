//! A real two-node Ray cluster on this machine for the Ray executor's tests ([`RayCluster`]):
//! `support/ray_cluster.py` started in a process group of its own, both nodes bound to loopback,
//! 2 CPUs each. Needs python3 with Ray ([`Ray`]); mandatory with `HWR_REQUIRE_RAY=1` (set by
//! `.ci/run`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::need::{Python, Requirement, need};

/// python3 that imports `ray` (`python3 -m pip install ray`).
pub struct Ray;

impl Requirement for Ray {
    type Found = ();
    fn what(&self) -> String {
        "python3 with ray".into()
    }
    fn hint(&self) -> String {
        "python3 -m pip install ray".into()
    }
    fn require_var(&self) -> Option<&'static str> {
        Some("HWR_REQUIRE_RAY")
    }
    fn find(self) -> Result<(), String> {
        Python(&["ray"]).find()
    }
}

/// A running two-node cluster; shut down (and its process group killed) when dropped.
pub struct RayCluster {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// `host:port` of the head's GCS.
    pub address: String,
    /// The head node's id.
    pub head: String,
    /// The second node's id.
    pub second: String,
}

impl RayCluster {
    /// Starts the cluster, or `None` (after [`need`] printed why) without Ray.
    pub fn start() -> Option<RayCluster> {
        need(Ray)?;
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/support/ray_cluster.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3 starts");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the cluster helper answers");
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the ray cluster did not start ({e}): {line:?}"));
        Some(RayCluster {
            child,
            stdin,
            stdout,
            address: v["address"].as_str().expect("address").to_string(),
            head: v["head"].as_str().expect("head").to_string(),
            second: v["second"].as_str().expect("second").to_string(),
        })
    }

    /// The name hwr-exp gives the node `id` (run.json `node`): `<hostname>-<id's first 8>`.
    pub fn node_name(id: &str) -> String {
        format!(
            "{}-{}",
            hwr_exp::runner::backend::slurm::task::hostname(),
            &id[..8]
        )
    }

    /// Kills the second node at once (its raylet and workers with SIGKILL); returns the helper's
    /// answer.
    pub fn kill_second(&mut self) -> String {
        let stdin = self.stdin.as_mut().expect("helper stdin");
        stdin.write_all(b"kill second\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line
    }

    /// `hwr-exp` in `cwd` pointed at this cluster (`RAY_ADDRESS`).
    pub fn hwr(&self, cwd: &Path) -> Command {
        let mut cmd = super::cli::hwr_command(cwd);
        cmd.env("RAY_ADDRESS", &self.address);
        cmd
    }
}

impl Drop for RayCluster {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"quit\n");
        }
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
        }
        // Whatever of the cluster is left (a GCS server, raylets) is in the helper's group.
        if let Some(pgid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

/// Waits up to `limit` for `cond`, panicking with `what` when it does not come.
pub fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < until, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
