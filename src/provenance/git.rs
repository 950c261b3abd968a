//! Capture of the repository state through git2: HEAD, `git status`, the working-tree patch and
//! submodules, into a [`Snapshot`]. Reads the repository only; writes nothing.

use std::path::{Path, PathBuf};

use git2::{DiffFormat, DiffOptions, ErrorCode, Oid, Repository, Status, StatusOptions};

use super::doc::{Snapshot, StatusLine, SubmoduleState, UntrackedFile};
use crate::digest::sha256_bytes;

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
/// recorded in the snapshot (`excluded` in `provenance.json`).
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
}
