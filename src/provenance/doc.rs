//! The provenance documents: [`Snapshot`] (one capture of the repository) and [`ProvenanceDoc`]
//! (the whole `provenance.json`, DESIGN section 5). Pure data: the bundle writer
//! (`crate::bundle::write`) serialises them into `provenance.json`, `revision.txt`,
//! `working-tree.txt` and `working-tree.patch`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Format version of `provenance.json`.
pub const PROVENANCE_FORMAT: u32 = 1;

/// Repository state captured at one moment. Capturing never fails: a missing repository, an unborn
/// HEAD, a detached HEAD, a bare repository and git errors are recorded instead.
///
/// Serialises (kebab-case) to the body of `provenance.json`; the patch bytes themselves go to
/// `working-tree.patch` and only their SHA-256 is serialised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    /// Root of the working tree (`git rev-parse --show-toplevel`), `None` without a repository or
    /// for a bare one.
    pub(super) repo: Option<PathBuf>,
    /// HEAD commit id (40 hex), `None` without a repository or with an unborn HEAD.
    pub(super) head: Option<String>,
    /// Short branch name HEAD points to (also for an unborn HEAD); `None` when detached.
    pub(super) branch: Option<String>,
    /// HEAD points directly to a commit instead of a branch.
    pub(super) detached: bool,
    /// The working tree differs from HEAD: any status entry, including untracked files.
    pub(super) dirty: bool,
    /// Why there is no revision (no repository, unborn HEAD, HEAD unreadable); `None` when `head` is
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    /// Status entries in `git status --short` order (by path), untracked files one by one.
    pub(super) status: Vec<StatusLine>,
    /// Untracked (not ignored) files with the SHA-256 of their content.
    pub(super) untracked: Vec<UntrackedFile>,
    /// Submodules registered in `.gitmodules`.
    pub(super) submodules: Vec<SubmoduleState>,
    /// SHA-256 (hex) of `working-tree.patch`.
    pub(super) patch_sha256: String,
    /// RFC 3339 UTC time of the capture.
    pub(super) captured_at: String,
    /// Directories (relative to the repository root) whose untracked files were left out on
    /// request ([`super::capture_excluding`]), e.g. the results directory the runner writes into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) excluded: Vec<String>,
    /// Non-fatal git or I/O errors met while capturing (the affected part is incomplete).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) errors: Vec<String>,
    /// The `working-tree.patch` bytes.
    #[serde(skip)]
    pub(super) patch: Vec<u8>,
}

/// One `git status --short` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StatusLine {
    /// The two status letters `XY` (index, working tree): `M` modified, `A` added, `D` deleted,
    /// `T` type change, `U` conflict, `??` untracked; a space where unchanged.
    pub code: String,
    /// Path relative to the repository root, `/`-separated.
    pub path: String,
    /// SHA-256 (hex) of the working-tree content (a symlink's target for symlinks); `None` when the
    /// path is absent from the working tree or is a directory (submodule).
    pub sha256: Option<String>,
}

/// An untracked file, recorded by content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct UntrackedFile {
    /// Path relative to the repository root.
    pub path: String,
    /// SHA-256 (hex) of the content; `None` when unreadable.
    pub sha256: Option<String>,
    /// Size in bytes; `None` when unreadable.
    pub size_bytes: Option<u64>,
}

/// A submodule as seen by the superproject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SubmoduleState {
    /// Path relative to the superproject root.
    pub path: String,
    /// URL from `.gitmodules`.
    pub url: Option<String>,
    /// Commit recorded for it in the HEAD tree (gitlink); `None` when not committed yet.
    pub recorded_commit: Option<String>,
    /// Commit checked out in the submodule's working tree; `None` when not initialised.
    pub checked_out_commit: Option<String>,
    /// The submodule has a different checkout than recorded, local modifications or untracked
    /// files.
    pub dirty: bool,
}

/// The after-run check stored in `provenance.json` ([`ProvenanceDoc::after_run`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AfterCheck {
    /// HEAD commit id after the last run.
    pub head: Option<String>,
    /// Working tree dirty after the last run.
    pub dirty: bool,
    /// SHA-256 of the patch the after-run capture would write.
    pub patch_sha256: String,
    /// RFC 3339 UTC time of the after-run capture.
    pub captured_at: String,
    /// What differs between the captures: `HEAD`, paths whose status or content changed, and
    /// submodule paths whose checkout changed. Empty when there is no drift.
    pub changed: Vec<String>,
}

/// The whole `provenance.json` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProvenanceDoc {
    /// Format version ([`PROVENANCE_FORMAT`]).
    pub format: u32,
    /// The capture before the first run.
    #[serde(flatten)]
    pub before: Snapshot,
    /// The check after the last run (absent until [`ProvenanceDoc::after_run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<AfterCheck>,
    /// The tree changed during the experiment (absent until [`ProvenanceDoc::after_run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<bool>,
}

impl ProvenanceDoc {
    /// The document written when the bundle is created: `before` without the after-run check.
    pub fn before_run(before: &Snapshot) -> ProvenanceDoc {
        ProvenanceDoc {
            format: PROVENANCE_FORMAT,
            before: before.clone(),
            after: None,
            drift: None,
        }
    }
}

impl Snapshot {
    /// HEAD commit id (40 hex digits), `None` without a repository or with an unborn HEAD.
    pub fn head(&self) -> Option<&str> {
        self.head.as_deref()
    }

    /// Branch HEAD points to (short name, e.g. `main`); `None` when detached or without a repository.
    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref()
    }

    /// HEAD is detached (points directly to a commit).
    pub fn detached(&self) -> bool {
        self.detached
    }

    /// The working tree has any status entry (staged, unstaged, deleted or untracked files).
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Root of the working tree; `None` without a repository or for a bare repository.
    pub fn repo_root(&self) -> Option<&Path> {
        self.repo.as_deref()
    }

    /// Why there is no revision (the line written to `revision.txt`), `None` when HEAD is a commit.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Status entries, by path.
    pub fn status(&self) -> &[StatusLine] {
        &self.status
    }

    /// Untracked files with their SHA-256.
    pub fn untracked(&self) -> &[UntrackedFile] {
        &self.untracked
    }

    /// Submodules of the repository.
    pub fn submodules(&self) -> &[SubmoduleState] {
        &self.submodules
    }

    /// The `working-tree.patch` bytes (empty when clean).
    pub fn patch(&self) -> &[u8] {
        &self.patch
    }

    /// Non-fatal errors met while capturing.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// RFC 3339 UTC time of the capture.
    pub fn captured_at(&self) -> &str {
        &self.captured_at
    }

    /// `revision.txt` content: the HEAD commit id, or the reason there is none; one line.
    pub fn revision_text(&self) -> String {
        match (&self.head, &self.reason) {
            (Some(head), _) => format!("{head}\n"),
            (None, Some(reason)) => format!("{reason}\n"),
            (None, None) => "no revision recorded\n".to_owned(),
        }
    }

    /// `working-tree.txt` content: one `XY path` line per status entry (paths quoted as git does
    /// when they hold spaces, control, quote, backslash or non-ASCII characters).
    pub fn working_tree_text(&self) -> String {
        self.status
            .iter()
            .map(|s| format!("{} {}\n", s.code, quote_path(&s.path)))
            .collect()
    }
}

/// Quotes a path as `git status --short` does (`quote_path` with `core.quotePath` on and spaces
/// quoted): unchanged when plain, otherwise in double quotes with C escapes and octal for control
/// and non-ASCII bytes.
pub(super) fn quote_path(path: &str) -> String {
    let needs = path
        .bytes()
        .any(|b| b <= b' ' || b == b'"' || b == b'\\' || b >= 0x7f);
    if !needs {
        return path.to_owned();
    }
    let mut out = String::from("\"");
    for b in path.bytes() {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if !(0x20..0x7f).contains(&b) => out.push_str(&format!("\\{b:03o}")),
            b => out.push(b as char),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_follows_git() {
        assert_eq!(quote_path("src/a.rs"), "src/a.rs");
        assert_eq!(quote_path("src/a b.rs"), "\"src/a b.rs\"");
        assert_eq!(quote_path("tab\there"), "\"tab\\there\"");
        assert_eq!(quote_path("é"), "\"\\303\\251\"");
    }
}
