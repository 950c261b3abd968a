//! Provenance: repository state through git2 (revision, working tree, patch, submodules) and host facts.

pub mod host;

use std::path::Path;

/// Repository state captured at one moment. Capturing never fails: a missing repository, an unborn
/// HEAD or a git error is recorded as the reason there is no revision.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// Placeholder until implemented.
    pub todo: (),
}

/// Captures the repository holding `path` (discovering upward), or records why there is none.
pub fn capture(path: &Path) -> Snapshot {
    let _ = path;
    todo!("provenance::capture")
}
