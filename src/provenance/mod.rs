//! Provenance: repository state through git2 (revision, working tree, patch, submodules) and host facts.

pub mod host;

use std::path::Path;

/// Repository state captured at one moment. (stub until the provenance branch lands)
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// Placeholder until implemented.
    pub todo: (),
}

/// Captures the repository holding `path`. (stub)
pub fn capture(path: &Path) -> Snapshot {
    let _ = path;
    Snapshot { todo: () }
}

impl Snapshot {
    /// Writes revision.txt, working-tree.txt, working-tree.patch, provenance.json. (stub)
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_files(&self, bundle_dir: &Path) -> std::io::Result<()> {
        let _ = bundle_dir;
        Ok(())
    }
    /// HEAD commit id. (stub)
    pub fn head(&self) -> Option<&str> {
        None
    }
    /// Whether the tree differs from HEAD. (stub)
    pub fn dirty(&self) -> bool {
        false
    }
}

/// Adds the after-run check to provenance.json. (stub)
///
/// # Errors
/// I/O errors.
pub fn record_after(bundle_dir: &Path, before: &Snapshot, after: &Snapshot) -> std::io::Result<bool> {
    let _ = (bundle_dir, before, after);
    Ok(false)
}
