//! The one-node Slurm test cluster, when one answers.

use hwr_exp::slurm::{self, SlurmClient};

/// The cluster's client, or `None` (with a note) when no cluster answers and none is required;
/// with `HWR_REQUIRE_SLURM=1` (set by `.ci/run`) a missing cluster fails the test instead.
pub fn cluster() -> Option<SlurmClient> {
    let required = std::env::var("HWR_REQUIRE_SLURM").is_ok_and(|v| v == "1");
    let why = if !slurm::cluster_configured() {
        "SLURM_CONF is not set or names no file".to_string()
    } else {
        let client = SlurmClient::new();
        match client.ping() {
            Ok(()) => return Some(client),
            Err(e) => e.to_string(),
        }
    };
    assert!(
        !required,
        "HWR_REQUIRE_SLURM=1 but no Slurm cluster answers: {why}"
    );
    eprintln!(
        "note: skipping: no Slurm cluster ({why}); start one with ../shared/slurm/start-slurm.sh \
         and `source $SLURM_TEST_DIR/slurm.env`"
    );
    None
}
