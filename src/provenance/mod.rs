//! Provenance: the repository state through git2 (revision, working tree, patch, submodules) and
//! host facts ([`host`]).
//!
//! A [`Snapshot`] is taken with [`capture`] (or [`capture_excluding`], to leave out an untracked
//! results directory inside the repository) before the first run; [`Snapshot::write_files`] writes
//! the bundle's `revision.txt`, `working-tree.txt`, `working-tree.patch` and `provenance.json`
//! (DESIGN section 5). After the last run a second snapshot is taken and [`record_after`] rewrites
//! `provenance.json` with the after-run check and `drift`.
//!
//! The patch is meant to be replayed: `git apply working-tree.patch` on a clean checkout of the
//! commit in `revision.txt` rebuilds the working tree byte for byte (staged and unstaged changes,
//! deleted files, mode changes, untracked files as new files, binary files as `GIT binary patch`
//! literal/delta hunks). Ignored files are not recorded; submodules are listed in `provenance.json`
//! but not diffed into.

pub mod host;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use git2::{DiffFormat, DiffOptions, ErrorCode, Oid, Repository, Status, StatusOptions};
use serde::{Deserialize, Serialize};

use crate::bundle::write::sha256_bytes;

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
    repo: Option<PathBuf>,
    /// HEAD commit id (40 hex), `None` without a repository or with an unborn HEAD.
    head: Option<String>,
    /// Short branch name HEAD points to (also for an unborn HEAD); `None` when detached.
    branch: Option<String>,
    /// HEAD points directly to a commit instead of a branch.
    detached: bool,
    /// The working tree differs from HEAD: any status entry, including untracked files.
    dirty: bool,
    /// Why there is no revision (no repository, unborn HEAD, HEAD unreadable); `None` when `head` is
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Status entries in `git status --short` order (by path), untracked files one by one.
    status: Vec<StatusLine>,
    /// Untracked (not ignored) files with the SHA-256 of their content.
    untracked: Vec<UntrackedFile>,
    /// Submodules registered in `.gitmodules`.
    submodules: Vec<SubmoduleState>,
    /// SHA-256 (hex) of `working-tree.patch`.
    patch_sha256: String,
    /// RFC 3339 UTC time of the capture.
    captured_at: String,
    /// Directories (relative to the repository root) whose untracked files were left out on
    /// request ([`capture_excluding`]), e.g. the results directory the runner writes into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    excluded: Vec<String>,
    /// Non-fatal git or I/O errors met while capturing (the affected part is incomplete).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
    /// The `working-tree.patch` bytes.
    #[serde(skip)]
    patch: Vec<u8>,
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

/// The after-run check stored in `provenance.json` by [`record_after`].
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
    /// The check after the last run (absent until [`record_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<AfterCheck>,
    /// The tree changed during the experiment (absent until [`record_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<bool>,
}

/// Captures the repository holding `start` (git2 `Repository::discover`, searching upward), or
/// records why there is none. Never fails and never panics on repository state.
///
/// Git operations: HEAD resolution, `git status` (untracked recursed, ignored excluded), the diff
/// of the HEAD tree (empty tree when unborn) against the working tree through the index, and the
/// submodule list with their status.
pub fn capture(start: &Path) -> Snapshot {
    capture_excluding(start, &[])
}

/// Like [`capture`], but untracked files under any of the `exclude` paths (absolute, or relative
/// to the current directory) are neither listed nor put in the patch. Meant for the results
/// directory when it lives inside the repository without being ignored: otherwise earlier bundles
/// land in the patch and the bundle being written shows up as drift. Tracked files are always
/// recorded. Paths outside the repository are ignored; the excluded paths that applied are
/// recorded in `provenance.json` (`excluded`).
pub fn capture_excluding(start: &Path, exclude: &[&Path]) -> Snapshot {
    let mut snap = Snapshot {
        repo: None,
        head: None,
        branch: None,
        detached: false,
        dirty: false,
        reason: None,
        status: Vec::new(),
        untracked: Vec::new(),
        submodules: Vec::new(),
        patch_sha256: sha256_bytes(b""),
        captured_at: jiff::Timestamp::now().to_string(),
        excluded: Vec::new(),
        errors: Vec::new(),
        patch: Vec::new(),
    };
    let repo = match Repository::discover(start) {
        Ok(repo) => repo,
        Err(e) if e.code() == ErrorCode::NotFound => {
            snap.reason = Some(format!("no git repository at {}", start.display()));
            return snap;
        }
        Err(e) => {
            snap.reason = Some(format!(
                "cannot open git repository at {}: {}",
                start.display(),
                e.message()
            ));
            return snap;
        }
    };
    let unborn = read_head(&repo, &mut snap);
    let Some(workdir) = repo.workdir() else {
        snap.errors.push(format!(
            "bare repository at {}: no working tree to record",
            repo.path().display()
        ));
        return snap;
    };
    let root: PathBuf = workdir.components().collect();
    snap.repo = Some(root.clone());
    let excluded = relative_exclusions(&root, exclude);
    snap.excluded = excluded
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Err(e) = read_status(&repo, &root, &excluded, &mut snap) {
        snap.errors.push(format!("git status: {}", e.message()));
    }
    if let Err(e) = read_submodules(&repo, &mut snap) {
        snap.errors.push(format!("submodules: {}", e.message()));
    }
    if snap.head.is_none() && !unborn {
        snap.errors
            .push("no working-tree.patch: HEAD does not resolve to a commit".to_owned());
        return snap;
    }
    match make_patch(&repo, snap.head.is_some(), &excluded) {
        Ok((patch, mut problems)) => {
            snap.patch_sha256 = sha256_bytes(&patch);
            snap.patch = patch;
            snap.errors.append(&mut problems);
        }
        Err(e) => snap.errors.push(format!("git diff HEAD: {}", e.message())),
    }
    snap
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

    /// Writes `revision.txt`, `working-tree.txt`, `working-tree.patch` and `provenance.json`
    /// (without the after-run check) into `bundle_dir`, each atomically (temporary file in the
    /// same directory, then rename).
    ///
    /// # Errors
    /// I/O errors creating, writing or renaming the files.
    pub fn write_files(&self, bundle_dir: &Path) -> io::Result<()> {
        write_atomic(bundle_dir, "revision.txt", self.revision_text().as_bytes())?;
        write_atomic(
            bundle_dir,
            "working-tree.txt",
            self.working_tree_text().as_bytes(),
        )?;
        write_atomic(bundle_dir, "working-tree.patch", &self.patch)?;
        let doc = ProvenanceDoc {
            format: PROVENANCE_FORMAT,
            before: self.clone(),
            after: None,
            drift: None,
        };
        write_json(bundle_dir, "provenance.json", &doc)
    }
}

/// Compares two captures and lists what differs: `HEAD`, paths whose status entry or content
/// changed, and submodule paths whose checkout or dirtiness changed. Empty means no drift.
pub fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut changed = Vec::new();
    if before.head != after.head || before.reason != after.reason {
        changed.push("HEAD".to_owned());
    }
    let index = |s: &Snapshot| -> BTreeMap<String, Vec<(String, Option<String>)>> {
        let mut map: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for l in &s.status {
            map.entry(l.path.clone())
                .or_default()
                .push((l.code.clone(), l.sha256.clone()));
        }
        map
    };
    let (b, a) = (index(before), index(after));
    let mut paths: Vec<&String> = b.keys().chain(a.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        if b.get(path) != a.get(path) {
            changed.push(path.clone());
        }
    }
    let subs = |s: &Snapshot| -> BTreeMap<String, (Option<String>, bool)> {
        s.submodules
            .iter()
            .map(|m| (m.path.clone(), (m.checked_out_commit.clone(), m.dirty)))
            .collect()
    };
    let (b, a) = (subs(before), subs(after));
    let mut paths: Vec<&String> = b.keys().chain(a.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        if b.get(path) != a.get(path) && !changed.contains(path) {
            changed.push(path.clone());
        }
    }
    if changed.is_empty() && before.patch_sha256 != after.patch_sha256 {
        // Same status and contents but a different patch (e.g. a staged-vs-unstaged move that
        // kept the status letters): still a change of recorded state.
        changed.push("working-tree.patch".to_owned());
    }
    changed
}

/// Rewrites `provenance.json` in `bundle_dir` with `before`, the after-run check from `after` and
/// `drift` (true when HEAD, the status entries, the content of any changed or untracked file, or a
/// submodule checkout differs between the captures; see [`differences`]). Returns `drift`.
///
/// # Errors
/// I/O errors writing the file (atomically, as in [`Snapshot::write_files`]).
pub fn record_after(bundle_dir: &Path, before: &Snapshot, after: &Snapshot) -> io::Result<bool> {
    let changed = differences(before, after);
    let drift = !changed.is_empty();
    let doc = ProvenanceDoc {
        format: PROVENANCE_FORMAT,
        before: before.clone(),
        after: Some(AfterCheck {
            head: after.head.clone(),
            dirty: after.dirty,
            patch_sha256: after.patch_sha256.clone(),
            captured_at: after.captured_at.clone(),
            changed,
        }),
        drift: Some(drift),
    };
    write_json(bundle_dir, "provenance.json", &doc)?;
    Ok(drift)
}

/// Fills head, branch, detached and reason. Returns true for an unborn HEAD (no commits yet).
fn read_head(repo: &Repository, snap: &mut Snapshot) -> bool {
    snap.detached = repo.head_detached().unwrap_or(false);
    match repo.head() {
        Ok(head) => {
            if !snap.detached && head.is_branch() {
                snap.branch = head.shorthand().ok().map(str::to_owned);
            }
            match head.peel_to_commit() {
                Ok(commit) => snap.head = Some(commit.id().to_string()),
                Err(e) => {
                    snap.reason = Some(format!("HEAD does not resolve to a commit: {}", e.message()));
                }
            }
            false
        }
        Err(e) if e.code() == ErrorCode::UnbornBranch => {
            let branch = repo
                .find_reference("HEAD")
                .ok()
                .and_then(|r| r.symbolic_target().ok().flatten().map(str::to_owned))
                .map(|t| t.strip_prefix("refs/heads/").unwrap_or(&t).to_owned());
            snap.reason = Some(format!(
                "unborn HEAD: no commits yet on {}",
                branch.as_deref().unwrap_or("an unknown branch")
            ));
            snap.branch = branch;
            true
        }
        Err(e) => {
            snap.reason = Some(format!("cannot resolve HEAD: {}", e.message()));
            false
        }
    }
}

/// The `exclude` paths that lie inside `root`, relative to it (tried as given and canonicalised,
/// since the root may be reached through a symlink).
fn relative_exclusions(root: &Path, exclude: &[&Path]) -> Vec<PathBuf> {
    let canonical_root = root.canonicalize().ok();
    let mut out: Vec<PathBuf> = exclude
        .iter()
        .filter_map(|p| {
            let abs = std::path::absolute(p).ok()?;
            let canon = abs.canonicalize().ok();
            let rel = abs.strip_prefix(root).ok().map(Path::to_path_buf).or_else(|| {
                let (c, r) = (canon.as_ref()?, canonical_root.as_ref()?);
                c.strip_prefix(r).ok().map(Path::to_path_buf)
            })?;
            // Excluding the root itself would hide every untracked file; refuse that.
            (!rel.as_os_str().is_empty()).then_some(rel)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn is_excluded(path: &Path, excluded: &[PathBuf]) -> bool {
    excluded.iter().any(|e| path.starts_with(e))
}

fn read_status(
    repo: &Repository,
    root: &Path,
    excluded: &[PathBuf],
    snap: &mut Snapshot,
) -> Result<(), git2::Error> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(false)
        .renames_head_to_index(false)
        .renames_index_to_workdir(false)
        .sort_case_sensitively(true);
    let statuses = repo.statuses(Some(&mut opts))?;
    for entry in statuses.iter() {
        let mut codes = status_codes(entry.status());
        if is_excluded(&bytes_to_path(entry.path_bytes()), excluded) {
            codes.retain(|c| c != "??");
        }
        if codes.is_empty() {
            continue;
        }
        let path = String::from_utf8_lossy(entry.path_bytes()).into_owned();
        let full = root.join(bytes_to_path(entry.path_bytes()));
        let content = read_content(&full);
        let sha256 = content.as_deref().map(sha256_bytes);
        for code in codes {
            if code == "??" {
                snap.untracked.push(UntrackedFile {
                    path: path.clone(),
                    sha256: sha256.clone(),
                    size_bytes: content.as_ref().map(|c| c.len() as u64),
                });
            }
            snap.status.push(StatusLine {
                code,
                path: path.clone(),
                sha256: sha256.clone(),
            });
        }
    }
    snap.dirty = !snap.status.is_empty();
    Ok(())
}

/// `XY` letters of `git status --short` for a libgit2 status; empty for entries git does not show.
/// A path deleted (or otherwise changed) in the index and present but untracked in the working tree
/// (`git rm --cached`) gives two entries, as git prints them: the index change, then `??`.
fn status_codes(s: Status) -> Vec<String> {
    if s.contains(Status::CONFLICTED) {
        return vec!["UU".to_owned()];
    }
    let untracked = s.contains(Status::WT_NEW);
    let x = if s.contains(Status::INDEX_NEW) {
        'A'
    } else if s.contains(Status::INDEX_DELETED) {
        'D'
    } else if s.contains(Status::INDEX_RENAMED) {
        'R'
    } else if s.contains(Status::INDEX_TYPECHANGE) {
        'T'
    } else if s.contains(Status::INDEX_MODIFIED) {
        'M'
    } else {
        ' '
    };
    let y = if s.contains(Status::WT_DELETED) {
        'D'
    } else if s.contains(Status::WT_RENAMED) {
        'R'
    } else if s.contains(Status::WT_TYPECHANGE) {
        'T'
    } else if s.intersects(Status::WT_MODIFIED | Status::WT_UNREADABLE) {
        'M'
    } else {
        ' '
    };
    let mut codes = Vec::new();
    if x != ' ' || y != ' ' {
        codes.push(format!("{x}{y}"));
    }
    if untracked {
        codes.push("??".to_owned());
    }
    codes
}

fn read_submodules(repo: &Repository, snap: &mut Snapshot) -> Result<(), git2::Error> {
    for sm in repo.submodules()? {
        let path = sm.path().to_string_lossy().into_owned();
        let status = sm
            .name()
            .ok()
            .and_then(|name| repo.submodule_status(name, git2::SubmoduleIgnore::None).ok());
        let dirty = status.is_some_and(|s| {
            s.intersects(
                git2::SubmoduleStatus::WD_MODIFIED
                    | git2::SubmoduleStatus::WD_INDEX_MODIFIED
                    | git2::SubmoduleStatus::WD_WD_MODIFIED
                    | git2::SubmoduleStatus::WD_UNTRACKED
                    | git2::SubmoduleStatus::INDEX_MODIFIED
                    | git2::SubmoduleStatus::INDEX_ADDED,
            )
        });
        snap.submodules.push(SubmoduleState {
            path,
            url: sm.url().ok().flatten().map(str::to_owned),
            recorded_commit: sm.head_id().map(|o: Oid| o.to_string()),
            checked_out_commit: sm.workdir_id().map(|o| o.to_string()),
            dirty,
        });
    }
    snap.submodules.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(())
}

/// `git diff HEAD` plus untracked files as new files, with binary patches. Returns the patch and
/// problems that make it incomplete (binary changes git2 could not encode).
///
/// The base is `diff_tree_to_workdir_with_index` (what `git diff HEAD` shows, plus untracked
/// content). One case needs a fix-up: a file removed from the index but kept on disk
/// (`git rm --cached`) is a deletion there, like in `git diff HEAD`, yet replaying must keep the
/// file; those paths are diffed tree-to-workdir instead (HEAD content to disk content).
///
/// Untracked files under `excluded` (relative paths) are left out.
fn make_patch(
    repo: &Repository,
    has_head: bool,
    excluded: &[PathBuf],
) -> Result<(Vec<u8>, Vec<String>), git2::Error> {
    let tree = if has_head {
        Some(repo.head()?.peel_to_tree()?)
    } else {
        None // unborn HEAD: diff against the empty tree
    };
    let options = || {
        let mut opts = DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .show_untracked_content(true)
            .include_ignored(false)
            .ignore_submodules(true)
            .include_typechange(false)
            .show_binary(true)
            .id_abbrev(40);
        opts
    };
    let diff = repo.diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut options()))?;

    // Deleted against HEAD yet present (and not ignored) on disk: removed from the index only.
    let mut kept_on_disk: Vec<PathBuf> = Vec::new();
    if let Some(root) = repo.workdir() {
        for delta in diff.deltas() {
            if delta.status() != git2::Delta::Deleted {
                continue;
            }
            let Some(path) = delta.old_file().path() else {
                continue;
            };
            let on_disk = std::fs::symlink_metadata(root.join(path)).is_ok_and(|m| !m.is_dir());
            if on_disk && !repo.status_should_ignore(path).unwrap_or(false) {
                kept_on_disk.push(path.to_path_buf());
            }
        }
    }

    let mut patch = Vec::new();
    print_patch(
        &diff,
        |delta| {
            let path = delta.old_file().path().or_else(|| delta.new_file().path());
            path.is_some_and(|p| {
                kept_on_disk.iter().any(|k| k == p)
                    || (delta.status() == git2::Delta::Untracked && is_excluded(p, excluded))
            })
        },
        &mut patch,
    )?;
    if !kept_on_disk.is_empty() {
        let mut opts = options();
        opts.disable_pathspec_match(true);
        for path in &kept_on_disk {
            opts.pathspec(path.as_os_str());
        }
        let extra = repo.diff_tree_to_workdir(tree.as_ref(), Some(&mut opts))?;
        print_patch(&extra, |_| false, &mut patch)?;
    }
    let problems = patch
        .split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"Binary files ") && l.ends_with(b" differ"))
        .map(|l| {
            format!(
                "working-tree.patch: binary change without data ({}); git apply cannot rebuild it",
                String::from_utf8_lossy(l)
            )
        })
        .collect();
    Ok((patch, problems))
}

/// Appends `diff` in patch format to `out`, leaving out the deltas `skip` selects.
fn print_patch(
    diff: &git2::Diff<'_>,
    skip: impl Fn(&git2::DiffDelta<'_>) -> bool,
    out: &mut Vec<u8>,
) -> Result<(), git2::Error> {
    diff.print(DiffFormat::Patch, |delta, _hunk, line| {
        if skip(&delta) {
            return true;
        }
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    })
}

/// Content as git sees it: file bytes, or the link target for a symlink; `None` when absent, a
/// directory or unreadable.
fn read_content(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        use std::os::unix::ffi::OsStrExt;
        return std::fs::read_link(path)
            .ok()
            .map(|t| t.as_os_str().as_bytes().to_vec());
    }
    if meta.is_file() {
        std::fs::read(path).ok()
    } else {
        None
    }
}

fn bytes_to_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Quotes a path as `git status --short` does (`quote_path` with `core.quotePath` on and spaces
/// quoted): unchanged when plain, otherwise in double quotes with C escapes and octal for control
/// and non-ASCII bytes.
fn quote_path(path: &str) -> String {
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

fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    let mut json = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    json.push(b'\n');
    write_atomic(dir, name, &json)
}

/// Writes `dir/name` atomically: a temporary file in `dir` is written, flushed, made readable
/// (mode 0644) and renamed over the target.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_match_git_short_format() {
        let codes = |s: Status| status_codes(s);
        assert_eq!(codes(Status::WT_NEW), ["??"]);
        assert_eq!(codes(Status::INDEX_NEW), ["A "]);
        assert_eq!(codes(Status::INDEX_MODIFIED | Status::WT_MODIFIED), ["MM"]);
        assert_eq!(codes(Status::WT_DELETED), [" D"]);
        assert_eq!(codes(Status::INDEX_NEW | Status::WT_DELETED), ["AD"]);
        assert_eq!(codes(Status::INDEX_DELETED | Status::WT_NEW), ["D ", "??"]);
        assert!(codes(Status::CURRENT).is_empty());
        assert!(codes(Status::IGNORED).is_empty());
    }

    #[test]
    fn quoting_follows_git() {
        assert_eq!(quote_path("src/a.rs"), "src/a.rs");
        assert_eq!(quote_path("src/a b.rs"), "\"src/a b.rs\"");
        assert_eq!(quote_path("tab\there"), "\"tab\\there\"");
        assert_eq!(quote_path("é"), "\"\\303\\251\"");
    }
}
