//! Is a bundle's runner alive? The effective status of a bundle.
//!
//! A runner writes its pid into the bundle's `.lock` file (and `runner-pid` of bundle.json) and
//! removes the lock when it finishes. A bundle whose bundle.json still says `running` is
//! `abandoned` when that pid is not a live hwr-exp process: no such process, a zombie, or a pid
//! reused by another program (`/proc/<pid>/cmdline` does not name hwr-exp).

use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::bundle::{BundleInfo, BundleStatus, files};

/// Status as `list` shows it: the recorded status, with `running` split into live and abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectiveStatus {
    /// A live hwr-exp process holds the bundle.
    Running,
    /// Every planned run finished.
    Complete,
    /// Stopped by SIGINT/SIGTERM; `resume` can finish it.
    Interrupted,
    /// The runner hit an error it could not record per run.
    Failed,
    /// bundle.json says `running` but its runner is gone (killed, machine rebooted); `resume` can
    /// finish it.
    Abandoned,
}

impl EffectiveStatus {
    /// The kebab-case word, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectiveStatus::Running => "running",
            EffectiveStatus::Complete => "complete",
            EffectiveStatus::Interrupted => "interrupted",
            EffectiveStatus::Failed => "failed",
            EffectiveStatus::Abandoned => "abandoned",
        }
    }
}

/// Whether `pid` is a live hwr-exp process: `/proc/<pid>/cmdline` is readable and its first
/// argument's file name starts with `hwr-exp` (a zombie has an empty cmdline and counts as dead;
/// so does a pid reused by another program).
pub fn is_live_runner(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let name = argv0.rsplit(|&b| b == b'/').next().unwrap_or_default();
    name.starts_with(b"hwr-exp")
}

/// The pid holding the bundle: the one in `.lock` when that file exists and holds a number,
/// otherwise bundle.json's `runner-pid`.
pub fn holder_pid(dir: &Path, info: &BundleInfo) -> u32 {
    fs::read_to_string(dir.join(files::LOCK))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(info.runner_pid)
}

/// The effective status of a bundle (reads `.lock` and `/proc` only when the status is `running`).
pub fn effective_status(dir: &Path, info: &BundleInfo) -> EffectiveStatus {
    match info.status {
        BundleStatus::Complete => EffectiveStatus::Complete,
        BundleStatus::Interrupted => EffectiveStatus::Interrupted,
        BundleStatus::Failed => EffectiveStatus::Failed,
        BundleStatus::Running if is_live_runner(holder_pid(dir, info)) => EffectiveStatus::Running,
        BundleStatus::Running => EffectiveStatus::Abandoned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_by_cmdline() {
        // The test binary is not named hwr-exp: a live pid of another program counts as dead.
        assert!(!is_live_runner(std::process::id()));
        assert!(!is_live_runner(0));
        assert!(!is_live_runner(u32::MAX));
    }
}
