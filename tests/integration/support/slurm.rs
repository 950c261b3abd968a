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
