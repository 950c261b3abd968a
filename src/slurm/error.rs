//! The errors of Slurm's client commands ([`SlurmError`]): which are worth another try, and
//! which Slurm limit a refused submission names ([`refusal_limit`]).

use std::time::Duration;

/// The environment variable that sets the deadline of each Slurm command
/// ([`super::client::command_deadline`]), in humantime units (`30s`, `2m`).
pub const DEADLINE_VAR: &str = "HWR_SLURM_TIMEOUT";

/// A Slurm client command that could not be run or did not give a usable answer.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The program could not be started (not installed, not in `PATH`, not executable).
    #[error("cannot run `{command}`: {source}{}", spawn_hint(.source))]
    Spawn {
        /// The command line, shell-quoted.
        command: String,
        /// The error from `spawn`.
        source: std::io::Error,
    },
    /// The command exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line, shell-quoted.
        command: String,
        /// `exit status: N` or `signal: N`.
        status: String,
        /// Its stderr, trimmed (its stdout when stderr is empty).
        stderr: String,
    },
    /// The command did not finish within the deadline ([`super::client::command_deadline`]) and was killed: its
    /// effect (for `sbatch`, whether a job was created) is unknown.
    #[error("`{command}` did not answer within {} s and was stopped (a hung Slurm command; {DEADLINE_VAR} sets the deadline)", .after.as_secs_f64())]
    TimedOut {
        /// The command line, shell-quoted.
        command: String,
        /// The deadline it ran into.
        after: Duration,
    },
    /// The command was stopped because the caller was interrupted (Ctrl-C, SIGTERM): its effect
    /// (for `sbatch`, whether a job was created) is unknown.
    #[error("`{command}` was interrupted")]
    Interrupted {
        /// The command line, shell-quoted.
        command: String,
    },
    /// The command succeeded but its output is not what hwr-exp expects.
    #[error("unexpected output from `{command}`: {reason}: {output:?}")]
    Parse {
        /// The command line, shell-quoted.
        command: String,
        /// What was expected.
        reason: String,
        /// The output as printed.
        output: String,
    },
}

/// A hint after a spawn error: a missing program usually means no Slurm client here.
fn spawn_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::NotFound {
        " (is Slurm's client installed and in PATH?)"
    } else {
        ""
    }
}

/// Words of Slurm's messages for a controller that is down, restarting or overloaded: worth
/// another try after a pause (as ReFrame and submitit retry). Matched case-insensitively.
const TRANSIENT: &[&str] = &[
    "socket timed out",
    "connection refused",
    "unable to contact slurm controller",
    "connect failure",
    "communication connection failure",
    "zero bytes were transmitted or received",
    "slurmctld is not responding",
    "slurm controller not responding",
    "in standby mode",
    "connection reset by peer",
    "temporarily unable to contact",
];

impl SlurmError {
    /// stderr of a failed command; empty for other errors.
    pub fn stderr(&self) -> &str {
        match self {
            SlurmError::Failed { stderr, .. } => stderr,
            _ => "",
        }
    }

    /// Whether the failure is one a later try may not have: the controller could not be reached
    /// or timed out (`TRANSIENT`). Refusals (an invalid partition, a limit) are permanent.
    pub fn is_transient(&self) -> bool {
        let text = self.stderr().to_ascii_lowercase();
        matches!(self, SlurmError::Failed { .. }) && TRANSIENT.iter().any(|w| text.contains(w))
    }

    /// Slurm's own message from a failed command: the last line of its stderr without the
    /// `sbatch: error: ` prefix and `Batch job submission failed: ` (the whole error otherwise).
    pub fn slurm_message(&self) -> String {
        match self {
            SlurmError::Failed { stderr, .. } => {
                let line = stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or(stderr);
                let line = line.trim();
                let line = line.split_once("error: ").map_or(line, |(_, m)| m);
                line.strip_prefix("Batch job submission failed: ")
                    .unwrap_or(line)
                    .to_string()
            }
            other => other.to_string(),
        }
    }
}

/// The Slurm limit or setting an sbatch refusal names, from its message (Slurm 22.05's wording of
/// `slurm_strerror`); `None` when the message names none hwr-exp knows.
pub fn refusal_limit(message: &str) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    let table: &[(&str, &str)] = &[
        ("invalid partition", "partition"),
        ("invalid job array specification", "MaxArraySize"),
        ("job array index too large", "MaxArraySize"),
        ("requested time limit is invalid", "partition MaxTime"),
        ("time limit", "partition MaxTime"),
        ("resource temporarily unavailable", "MaxJobCount"),
        ("temporarily unable to accept job", "MaxJobCount"),
        ("job submit limit", "MaxSubmitJobs (association or QOS)"),
        ("accounting/qos policy", "association or QOS limit"),
        ("invalid account", "account"),
        ("invalid qos", "qos"),
        (
            "requested node configuration is not available",
            "node configuration (CPUs, memory, features)",
        ),
        ("memory specification", "memory (RealMemory, MaxMemPerNode)"),
        ("more processors requested than permitted", "MaxCPUsPerNode"),
        ("node count specification invalid", "MaxNodes"),
        (
            "access/permission denied",
            "partition access (AllowAccounts, AllowGroups, AllowQos)",
        ),
    ];
    table.iter().find(|(w, _)| m.contains(w)).map(|(_, l)| *l)
}
