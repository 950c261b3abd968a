//! The provenance documents: [`Snapshot`] (one capture of the repository) and [`ProvenanceDoc`]
//! (the whole `provenance.json`, DESIGN section 5). Pure data: the bundle writer
//! (`crate::bundle::write`) serialises them into `provenance.json`, `revision.txt`,
//! `working-tree.txt` and `working-tree.patch`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::patch::{PatchBytes, PatchLimits};
use crate::names::NameBytes;

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
    /// The working tree differs from HEAD: any status entry, including untracked files;
    /// [`Dirty::Unknown`] (`"unknown"`) when that could not be decided (`dirty-reason` says why).
    pub(super) dirty: Dirty,
    /// Why `dirty` is `"unknown"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dirty_reason: Option<String>,
    /// How status and patch were obtained: `git-cli` or `libgit2` (absent in bundles made before
    /// hwr-exp recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) capture_method: Option<CaptureMethod>,
    /// Why `libgit2` was used instead of the git CLI (git not on PATH, or git failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) capture_method_reason: Option<String>,
    /// The git operation in progress: `merge`, `rebase`, `am`, `cherry-pick`, `revert` or
    /// `bisect`; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) operation: Option<String>,
    /// Why there is no revision (no repository, unborn HEAD, HEAD unreadable); `None` when `head` is
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    /// Status entries in `git status --short --untracked-files=all` order (tracked changes by
    /// path, then untracked files by path, one by one; a nested repository as one `path/` entry).
    pub(super) status: Vec<StatusLine>,
    /// Untracked (not ignored) files with the SHA-256 of their content.
    pub(super) untracked: Vec<UntrackedFile>,
    /// Files larger than this many bytes are left out of `working-tree.patch` (the per-file limit
    /// of `patch-limits`, under its older name; bundles made before `patch-limits` have only this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) untracked_patch_limit_bytes: Option<u64>,
    /// The limits that decided which changed files went into `working-tree.patch` (absent in
    /// bundles made before they were recorded, and without a repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) patch_limits: Option<PatchLimits>,
    /// Changed tracked files left out of `working-tree.patch` by [`PatchLimits`]: recorded by
    /// path, sizes and sha256 only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) tracked_left_out: Vec<TrackedLeftOut>,
    /// Submodules registered in `.gitmodules`.
    pub(super) submodules: Vec<SubmoduleState>,
    /// Repositories inside the working tree that are not submodules (`?? path/` in the status),
    /// recorded like submodules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) nested_repositories: Vec<NestedRepository>,
    /// Files present in the working tree that git does not look at (skip-worktree or
    /// assume-unchanged bit), with their content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) unchecked: Vec<UncheckedPath>,
    /// Paths libgit2 could not decide as git would (method `libgit2` only; at most 100 listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) unknown_paths: Vec<UnknownPath>,
    /// SHA-256 (hex) of `working-tree.patch`.
    pub(super) patch_sha256: String,
    /// RFC 3339 UTC time of the capture ([`crate::timestamp::rfc3339`]).
    pub(super) captured_at: String,
    /// Directories (relative to the repository root) whose untracked files were left out on
    /// request ([`super::capture_excluding`]), e.g. the results directory the runner writes into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) excluded: Vec<String>,
    /// Untracked bundle folders (folders holding a bundle.json hwr-exp wrote) found in the working
    /// tree and left out of the status and the patch: earlier results are not the experiment's
    /// source.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(super) bundles_left_out: usize,
    /// Non-fatal git or I/O errors met while capturing (the affected part is incomplete).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) errors: Vec<String>,
    /// What the runner says on the terminal and in bundle.json `notes`: an operation in progress,
    /// an unknown dirty state, untracked files left out of the patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) warnings: Vec<String>,
    /// The `working-tree.patch` bytes (spooled to a temporary file).
    #[serde(skip)]
    pub(super) patch: PatchBytes,
    /// What the after-run capture needs to prove that nothing changed ([`super::quiet`]).
    #[serde(skip)]
    pub(super) quiet: super::mark::Quiet,
}

/// Whether the working tree differs from HEAD (provenance.json `dirty`): serialised as `false`,
/// `true`, or the string `"unknown"` when hwr-exp could not decide what `git status` would say
/// (then `dirty-reason` says why). Readers of older bundles see only `true` / `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dirty {
    /// No status entry.
    #[default]
    Clean,
    /// At least one status entry (untracked files included).
    Dirty,
    /// Not decided: the repository could not be read, or libgit2 alone could not decide some
    /// paths as git would.
    Unknown,
}

impl Dirty {
    /// `clean`, `dirty` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dirty::Clean => "clean",
            Dirty::Dirty => "dirty",
            Dirty::Unknown => "unknown",
        }
    }

    /// `Some(true)` dirty, `Some(false)` clean, `None` unknown.
    pub fn known(self) -> Option<bool> {
        match self {
            Dirty::Clean => Some(false),
            Dirty::Dirty => Some(true),
            Dirty::Unknown => None,
        }
    }
}

impl Serialize for Dirty {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Dirty::Clean => s.serialize_bool(false),
            Dirty::Dirty => s.serialize_bool(true),
            Dirty::Unknown => s.serialize_str("unknown"),
        }
    }
}

impl<'de> Deserialize<'de> for Dirty {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Dirty::Dirty),
            Raw::Bool(false) => Ok(Dirty::Clean),
            Raw::Word(w) if w == "unknown" => Ok(Dirty::Unknown),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "dirty: expected true, false or \"unknown\", found {w:?}"
            ))),
        }
    }
}

/// How the status and the patch were obtained (provenance.json `capture-method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaptureMethod {
    /// The `git` command on PATH (`git status`, `git diff`): git decides everything.
    GitCli,
    /// libgit2 alone (no git on PATH, or git failed); what it cannot decide is listed in
    /// `unknown-paths`.
    Libgit2,
}

/// A path whose state libgit2 could not decide as git would (provenance.json `unknown-paths`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct UnknownPath {
    /// Path relative to the repository root.
    pub path: String,
    /// Why (the attribute, the index bit, the conflict).
    pub reason: String,
}

/// A path git does not look at in the working tree because of an index bit, present on disk
/// (provenance.json `unchecked`): its content is recorded since `git status` and the patch say
/// nothing about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct UncheckedPath {
    /// Path relative to the repository root.
    pub path: String,
    /// `skip-worktree` or `assume-unchanged`.
    pub bit: String,
    /// SHA-256 of the working-tree content (a symlink's target); `None` when unreadable.
    pub sha256: Option<String>,
}

/// A repository inside the working tree that is not a submodule (git shows it as `?? path/`),
/// recorded like a submodule (provenance.json `nested-repositories`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NestedRepository {
    /// Path relative to the outer repository's root, without a trailing `/`.
    pub path: String,
    /// Its HEAD commit; `None` when unborn or unreadable.
    pub head: Option<String>,
    /// Its branch; `None` when detached.
    pub branch: Option<String>,
    /// Its own `git status` has entries.
    pub dirty: Dirty,
    /// Why `dirty` is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its `git status --short --untracked-files=all` entries, with content SHA-256.
    pub status: Vec<StatusLine>,
}

impl NestedRepository {
    /// An entry for `path` with nothing known yet.
    pub(super) fn new(path: &str) -> NestedRepository {
        NestedRepository {
            path: path.to_owned(),
            head: None,
            branch: None,
            dirty: Dirty::Unknown,
            reason: None,
            status: Vec::new(),
        }
    }
}

/// One `git status --short` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StatusLine {
    /// The two status letters `XY` (index, working tree): `M` modified, `A` added, `D` deleted,
    /// `T` type change, `U` conflict, `??` untracked; a space where unchanged.
    pub code: String,
    /// Path relative to the repository root, `/`-separated (the destination of a rename; a
    /// nested repository ends in `/`); readable: a name that is not UTF-8 has its exact bytes in
    /// `path_bytes` ([`crate::names`]).
    pub path: String,
    /// The exact bytes of `path` as hex (`path-bytes`), only when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<NameBytes>,
    /// Source path of a rename or copy (`R  orig-path -> path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orig_path: Option<String>,
    /// SHA-256 (hex) of the working-tree content (a symlink's target for symlinks); `None` when the
    /// path is absent from the working tree or is a directory (submodule).
    pub sha256: Option<String>,
    /// git mode of the working-tree file: `100644`, `100755` or `120000` (symlink); absent when
    /// the path is absent or a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// An untracked file, recorded by content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct UntrackedFile {
    /// Path relative to the repository root, readable ([`StatusLine::path`]).
    pub path: String,
    /// The exact bytes of `path` as hex (`path-bytes`), only when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<NameBytes>,
    /// SHA-256 (hex) of the content; `None` when unreadable.
    pub sha256: Option<String>,
    /// Size in bytes; `None` when unreadable.
    pub size_bytes: Option<u64>,
    /// Whether `working-tree.patch` holds it: `false` for files left out by `patch-limits`
    /// (`true` in bundles made before the limits existed).
    #[serde(default = "yes")]
    pub in_patch: bool,
    /// Why the file is not in the patch when the size limits did not decide it (git could not
    /// diff it); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out_reason: Option<String>,
}

fn yes() -> bool {
    true
}

/// A changed tracked file left out of `working-tree.patch` by its size (provenance.json
/// `tracked-left-out`): what `git diff HEAD` would have shown for it is recorded by sizes and
/// sha256 only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TrackedLeftOut {
    /// Path relative to the repository root, readable ([`StatusLine::path`]).
    pub path: String,
    /// The exact bytes of `path` as hex (`path-bytes`), only when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<NameBytes>,
    /// `git diff --raw` letter: `M` modified, `D` deleted, `A` added (in the index, not in
    /// HEAD), `T` type change.
    pub change: String,
    /// Size in bytes of the working-tree content; `None` when deleted.
    pub size_bytes: Option<u64>,
    /// SHA-256 (hex) of the working-tree content (a symlink's target); `None` when deleted or
    /// unreadable.
    pub sha256: Option<String>,
    /// git mode of the working-tree file (`100644`, `100755`, `120000`); `None` when deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Size in bytes of the file in HEAD; `None` when HEAD has none (added).
    pub head_size_bytes: Option<u64>,
    /// Always `false`: the patch does not hold it.
    pub in_patch: bool,
}

/// A file working-tree.patch does not hold, tracked or untracked ([`Snapshot::left_out_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOutFile {
    /// Path relative to the repository root, readable.
    pub path: String,
    /// The exact bytes of `path` when they are not UTF-8.
    pub path_bytes: Option<NameBytes>,
    /// A tracked file (its HEAD version is what a rebuilt tree has instead), or an untracked one
    /// (absent from a rebuilt tree).
    pub tracked: bool,
    /// Deleted from the working tree (tracked only): a rebuilt tree only has to remove it.
    pub deleted: bool,
    /// Size in bytes of the working-tree content.
    pub size_bytes: Option<u64>,
    /// SHA-256 of the working-tree content.
    pub sha256: Option<String>,
    /// git mode of the working-tree file, where known.
    pub mode: Option<String>,
}

impl LeftOutFile {
    /// `path (N bytes, sha256 X)`, `path (deleted)` for a deletion.
    pub fn describe(&self) -> String {
        if self.deleted {
            return format!("{} (tracked, deleted)", self.path);
        }
        format!(
            "{} ({}, {} bytes, sha256 {})",
            self.path,
            if self.tracked { "tracked" } else { "untracked" },
            self.size_bytes.map_or_else(|| "?".into(), |n| n.to_string()),
            self.sha256.as_deref().unwrap_or("unknown")
        )
    }
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
    /// Working tree dirty after the last run (`true`, `false` or `"unknown"`).
    pub dirty: Dirty,
    /// SHA-256 of the patch the after-run capture would write.
    pub patch_sha256: String,
    /// RFC 3339 UTC time of the after-run capture ([`crate::timestamp::rfc3339`]).
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

    /// The working tree has any status entry (staged, unstaged, deleted or untracked files), or
    /// [`Dirty::Unknown`].
    pub fn dirty(&self) -> Dirty {
        self.dirty
    }

    /// Why [`Snapshot::dirty`] is unknown.
    pub fn dirty_reason(&self) -> Option<&str> {
        self.dirty_reason.as_deref()
    }

    /// How status and patch were obtained; `None` in bundles made before it was recorded.
    pub fn capture_method(&self) -> Option<CaptureMethod> {
        self.capture_method
    }

    /// The git operation in progress (`merge`, `rebase`, `am`, `cherry-pick`, `revert`, `bisect`).
    pub fn operation(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// Untracked nested repositories.
    pub fn nested_repositories(&self) -> &[NestedRepository] {
        &self.nested_repositories
    }

    /// Files git does not look at because of an index bit, with their content.
    pub fn unchecked(&self) -> &[UncheckedPath] {
        &self.unchecked
    }

    /// Paths libgit2 could not decide (method `libgit2`).
    pub fn unknown_paths(&self) -> &[UnknownPath] {
        &self.unknown_paths
    }

    /// Warnings to show on the terminal and to keep in bundle.json `notes`.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
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

    /// The files working-tree.patch does not hold, tracked ones first (changed tracked files in
    /// `tracked-left-out`, untracked files with `in-patch: false`): a tree rebuilt from the patch
    /// lacks them (or has their HEAD version).
    pub fn left_out_files(&self) -> Vec<LeftOutFile> {
        let tracked = self.tracked_left_out.iter().map(|t| LeftOutFile {
            path: t.path.clone(),
            path_bytes: t.path_bytes.clone(),
            tracked: true,
            deleted: t.change == "D",
            size_bytes: t.size_bytes,
            sha256: t.sha256.clone(),
            mode: t.mode.clone(),
        });
        let untracked = self.untracked.iter().filter(|u| !u.in_patch).map(|u| {
            let mode = self
                .status
                .iter()
                .find(|s| s.code == "??" && s.path == u.path && s.path_bytes == u.path_bytes)
                .and_then(|s| s.mode.clone());
            LeftOutFile {
                path: u.path.clone(),
                path_bytes: u.path_bytes.clone(),
                tracked: false,
                deleted: false,
                size_bytes: u.size_bytes,
                sha256: u.sha256.clone(),
                mode,
            }
        });
        tracked.chain(untracked).collect()
    }

    /// [`Snapshot::left_out_files`], one line each ([`LeftOutFile::describe`]).
    pub fn left_out_of_patch(&self) -> Vec<String> {
        self.left_out_files().iter().map(LeftOutFile::describe).collect()
    }

    /// The limits that decided what went into working-tree.patch; `None` in bundles made before
    /// they were recorded.
    pub fn patch_limits(&self) -> Option<PatchLimits> {
        self.patch_limits
    }

    /// Submodules of the repository.
    pub fn submodules(&self) -> &[SubmoduleState] {
        &self.submodules
    }

    /// The `working-tree.patch` bytes (empty when clean; also empty for a capture read back from
    /// provenance.json, which holds only their sha256).
    pub fn patch(&self) -> &PatchBytes {
        &self.patch
    }

    /// SHA-256 (64 lowercase hex digits) of the `working-tree.patch` bytes of this capture
    /// (`patch-sha256` in provenance.json).
    pub fn patch_sha256(&self) -> &str {
        &self.patch_sha256
    }

    /// Non-fatal errors met while capturing.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// RFC 3339 UTC time of the capture ([`crate::timestamp::rfc3339`]).
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

    /// `working-tree.txt` content: one `XY path` line per status entry, `XY orig -> path` for
    /// renames (paths quoted as git does when they hold spaces, control, quote, backslash or
    /// non-ASCII characters).
    pub fn working_tree_text(&self) -> String {
        status_text(&self.status)
    }

    /// A capture with nothing recorded yet, taken now: no repository, clean, empty patch.
    pub(super) fn empty() -> Snapshot {
        Snapshot {
            repo: None,
            head: None,
            branch: None,
            detached: false,
            dirty: Dirty::Clean,
            dirty_reason: None,
            capture_method: None,
            capture_method_reason: None,
            operation: None,
            reason: None,
            status: Vec::new(),
            untracked: Vec::new(),
            untracked_patch_limit_bytes: None,
            patch_limits: None,
            tracked_left_out: Vec::new(),
            submodules: Vec::new(),
            nested_repositories: Vec::new(),
            unchecked: Vec::new(),
            unknown_paths: Vec::new(),
            patch_sha256: crate::digest::sha256_bytes(b""),
            captured_at: crate::timestamp::now(),
            excluded: Vec::new(),
            bundles_left_out: 0,
            errors: Vec::new(),
            warnings: Vec::new(),
            patch: PatchBytes::default(),
            quiet: super::mark::Quiet::default(),
        }
    }
}

/// Status lines in `git status --short` format, one per entry.
pub fn status_text(lines: &[StatusLine]) -> String {
    lines
        .iter()
        .map(|s| match &s.orig_path {
            Some(orig) => format!(
                "{} {} -> {}\n",
                s.code,
                quote_path(orig),
                quote_bytes(crate::names::bytes_of(&s.path, s.path_bytes.as_ref()))
            ),
            None => format!(
                "{} {}\n",
                s.code,
                quote_bytes(crate::names::bytes_of(&s.path, s.path_bytes.as_ref()))
            ),
        })
        .collect()
}

/// Quotes a path as `git status --short` does (`quote_path` with `core.quotePath` on and spaces
/// quoted): unchanged when plain, otherwise in double quotes with C escapes and octal for control
/// and non-ASCII bytes.
pub(super) fn quote_path(path: &str) -> String {
    quote_bytes(path.as_bytes())
}

/// [`quote_path`] of a name's exact bytes (a name that is not UTF-8 gets its bytes in octal, as
/// git writes it).
pub(super) fn quote_bytes(path: &[u8]) -> String {
    let needs = path
        .iter()
        .any(|&b| b <= b' ' || b == b'"' || b == b'\\' || b >= 0x7f);
    if !needs {
        return String::from_utf8_lossy(path).into_owned();
    }
    let mut out = String::from("\"");
    for &b in path {
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

/// `skip_serializing_if` for counts that are left out when 0.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_is_a_bool_or_unknown_in_json() {
        for (dirty, json) in [
            (Dirty::Clean, "false"),
            (Dirty::Dirty, "true"),
            (Dirty::Unknown, "\"unknown\""),
        ] {
            assert_eq!(serde_json::to_string(&dirty).unwrap(), json);
            assert_eq!(serde_json::from_str::<Dirty>(json).unwrap(), dirty);
        }
        assert!(serde_json::from_str::<Dirty>("\"maybe\"").is_err());
        assert!(serde_json::from_str::<Dirty>("1").is_err());
    }

    #[test]
    fn renames_are_written_as_git_status_short_does() {
        let line = |code: &str, path: &str, orig: Option<&str>| StatusLine {
            code: code.to_owned(),
            path: path.to_owned(),
            path_bytes: None,
            orig_path: orig.map(str::to_owned),
            sha256: None,
            mode: None,
        };
        let text = status_text(&[
            line("R ", "new name.txt", Some("old.txt")),
            line(" M", "a.txt", None),
            line("??", "vendor/lib/", None),
        ]);
        assert_eq!(text, "R  old.txt -> \"new name.txt\"\n M a.txt\n?? vendor/lib/\n");
    }

    #[test]
    fn quoting_follows_git() {
        assert_eq!(quote_path("src/a.rs"), "src/a.rs");
        assert_eq!(quote_path("src/a b.rs"), "\"src/a b.rs\"");
        assert_eq!(quote_path("tab\there"), "\"tab\\there\"");
        assert_eq!(quote_path("é"), "\"\\303\\251\"");
    }
}
