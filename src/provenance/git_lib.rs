//! The `libgit2` capture method (git2 alone), used when `git` is not on PATH or cannot read the
//! repository. It records what libgit2 can decide the way git does and lists the rest in
//! `unknown-paths`, with `dirty: "unknown"` and the reason, instead of guessing:
//! - entries with the skip-worktree or assume-unchanged bit (sparse checkouts among them) and
//!   intent-to-add entries, which libgit2 does not report as git does;
//! - paths with a `filter` or `working-tree-encoding` attribute (git runs the driver, libgit2
//!   cannot);
//! - conflicted paths, and files libgit2 cannot read.
//!
//! Everything else follows `git status --short` (tracked entries by path, then untracked ones;
//! staged renames as `R  old -> new`; submodule letters `M`, `m`, `?`) and `git diff HEAD`
//! (binary patches, untracked files as new files).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use git2::{DiffOptions, ErrorCode, Repository, Status, StatusOptions};

use super::doc::{CaptureMethod, Dirty, NestedRepository, Snapshot, StatusLine, UnknownPath, UntrackedFile};
use super::patch::{PatchBytes, PatchLimits};
use super::worktree::{
    BundleFolders, FileFacts, TrackedChange, decide_tracked, decide_untracked, file_facts, index_bits,
    is_excluded, operation, read_submodules, record_tracked_left_out, relative_exclusions, size_on_disk,
};
use crate::digest::sha256_reader;

/// At most this many paths are listed in `unknown-paths`; the reason gives the total.
const UNKNOWN_LISTED: usize = 100;

/// Captures the repository holding `start` with git2 into `snap`; `why` says why the git CLI was
/// not used (`capture-method-reason`).
pub(super) fn capture(start: &Path, exclude: &[&Path], limits: PatchLimits, why: &str, snap: &mut Snapshot) {
    snap.capture_method = Some(CaptureMethod::Libgit2);
    snap.capture_method_reason = Some(why.to_owned());
    let repo = match Repository::discover(start) {
        Ok(repo) => repo,
        Err(e) if e.code() == ErrorCode::NotFound => {
            snap.reason = Some(format!("no git repository at {}", start.display()));
            return;
        }
        Err(e) => {
            snap.reason = Some(format!(
                "cannot open git repository at {}: {}",
                start.display(),
                e.message()
            ));
            snap.dirty = Dirty::Unknown;
            snap.dirty_reason = Some(format!(
                "libgit2 cannot open the repository at {} ({}) and {why}",
                start.display(),
                e.message()
            ));
            return;
        }
    };
    fix_workdir(&repo, start);
    let unborn = read_head(&repo, snap);
    snap.operation = operation(repo.path()).map(str::to_owned);
    let Some(workdir) = repo.workdir() else {
        snap.errors.push(format!(
            "bare repository at {}: no working tree to record",
            repo.path().display()
        ));
        return;
    };
    let root: PathBuf = workdir.components().collect();
    snap.repo = Some(root.clone());
    let excluded = relative_exclusions(&root, exclude);
    snap.excluded = excluded
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();

    let mut unknown: Vec<UnknownPath> = Vec::new();
    match index_bits(&repo, &root, None) {
        Ok(bits) => {
            for path in bits.hidden {
                unknown.push(UnknownPath {
                    path,
                    reason: "skip-worktree or assume-unchanged bit: libgit2 does not follow it as git does"
                        .to_owned(),
                });
            }
            for path in bits.intent_to_add {
                unknown.push(UnknownPath {
                    path,
                    reason: "intent-to-add entry (git add -N): libgit2 reports it unlike git".to_owned(),
                });
            }
            snap.unchecked = bits.unchecked;
        }
        Err(e) => {
            snap.dirty = Dirty::Unknown;
            snap.dirty_reason = Some(format!("libgit2 cannot read the index: {}", e.message()));
        }
    }
    if let Ok(index) = repo.index()
        && let Ok(conflicts) = index.conflicts()
    {
        for c in conflicts.flatten() {
            let entry = c.our.or(c.their).or(c.ancestor);
            if let Some(entry) = entry {
                unknown.push(UnknownPath {
                    path: String::from_utf8_lossy(&entry.path).into_owned(),
                    reason: "merge conflict: libgit2 does not report it as git status does".to_owned(),
                });
            }
        }
    }
    let mut bundles = BundleFolders::new(&root);
    if let Err(e) = read_status(&repo, &root, &excluded, &mut bundles, &mut unknown, snap) {
        snap.errors.push(format!("git status: {}", e.message()));
    }
    snap.bundles_left_out = bundles.found().count();
    // The patch leaves out the untracked files of the bundle folders the status left out.
    let mut excluded = excluded;
    excluded.extend(bundles.found().cloned());
    if let Err(e) = read_submodules(&repo, snap) {
        snap.errors.push(format!("submodules: {}", e.message()));
    }
    let skip: BTreeSet<String> = unknown.iter().map(|u| u.path.clone()).collect();
    if !unknown.is_empty() {
        let total = unknown.len();
        let first = &unknown[0];
        snap.dirty = Dirty::Unknown;
        snap.dirty_reason = Some(format!(
            "{total} path(s) libgit2 cannot decide as git would (first: {}: {}), and {why}; listed in unknown-paths and left out of working-tree.txt and working-tree.patch",
            first.path, first.reason
        ));
        unknown.truncate(UNKNOWN_LISTED);
        snap.unknown_paths = unknown;
    }
    if snap.head.is_none() && !unborn {
        snap.errors
            .push("no working-tree.patch: HEAD does not resolve to a commit".to_owned());
        return;
    }
    match make_patch(&repo, snap.head.is_some(), &excluded, &skip, limits, snap) {
        Ok((patch, mut problems)) => {
            match patch.reader().and_then(sha256_reader) {
                Ok(sha) => {
                    snap.patch_sha256 = sha;
                    snap.patch = patch;
                }
                Err(e) => snap.errors.push(format!("working-tree.patch: {e}")),
            }
            snap.errors.append(&mut problems);
        }
        Err(e) => snap.errors.push(format!("git diff HEAD: {e}")),
    }
}

/// libgit2 takes the git folder's parent as the working tree of a repository reached through a
/// `.git` file; git takes the folder holding that file (unless `core.worktree` says otherwise).
fn fix_workdir(repo: &Repository, start: &Path) {
    let Ok(start) = start.canonicalize() else {
        return;
    };
    if repo
        .workdir()
        .is_some_and(|w| w.canonicalize().is_ok_and(|w| start.starts_with(w)))
    {
        return;
    }
    if repo.config().is_ok_and(|c| c.get_path("core.worktree").is_ok()) {
        return;
    }
    let holder = start.ancestors().find(|d| d.join(".git").is_file());
    if let Some(dir) = holder {
        let _ = repo.set_workdir(dir, false);
    }
}

/// Fills head, branch, detached and reason. Returns true for an unborn HEAD (no commits yet).
pub(super) fn read_head(repo: &Repository, snap: &mut Snapshot) -> bool {
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

/// The attribute that makes git run a program libgit2 cannot, if `path` has one.
fn external_filter(repo: &Repository, path: &Path) -> Option<String> {
    let flags = git2::AttrCheckFlags::FILE_THEN_INDEX;
    for name in ["filter", "working-tree-encoding"] {
        if let Ok(Some(value)) = repo.get_attr(path, name, flags)
            && !matches!(
                git2::AttrValue::from_string(Some(value)),
                git2::AttrValue::False | git2::AttrValue::Unspecified
            )
        {
            return Some(format!("{name}={value}"));
        }
    }
    None
}

fn read_status(
    repo: &Repository,
    root: &Path,
    excluded: &[PathBuf],
    bundles: &mut BundleFolders,
    unknown: &mut Vec<UnknownPath>,
    snap: &mut Snapshot,
) -> Result<(), git2::Error> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(false)
        .renames_head_to_index(true)
        .renames_index_to_workdir(false)
        .sort_case_sensitively(true);
    let statuses = repo.statuses(Some(&mut opts))?;
    let decided: BTreeSet<String> = unknown.iter().map(|u| u.path.clone()).collect();
    let mut tracked = Vec::new();
    let mut untracked = Vec::new();
    for entry in statuses.iter() {
        let s = entry.status();
        let (path, orig_path) = match entry
            .head_to_index()
            .filter(|_| s.contains(Status::INDEX_RENAMED))
        {
            Some(d) => (
                d.new_file().path().map(|p| p.to_string_lossy().into_owned()),
                d.old_file().path().map(|p| p.to_string_lossy().into_owned()),
            ),
            None => (
                Some(String::from_utf8_lossy(entry.path_bytes()).into_owned()),
                None,
            ),
        };
        let Some(path) = path else { continue };
        if decided.contains(&path) || s.contains(Status::CONFLICTED) {
            continue;
        }
        if std::str::from_utf8(entry.path_bytes()).is_err() {
            unknown.push(UnknownPath {
                path: path.clone(),
                reason: "the name is not UTF-8: the libgit2 method cannot record it exactly".to_owned(),
            });
            continue;
        }
        let rel = Path::new(path.trim_end_matches('/'));
        if s.contains(Status::WT_UNREADABLE) {
            unknown.push(UnknownPath {
                path: path.clone(),
                reason: "unreadable in the working tree".to_owned(),
            });
            continue;
        }
        if let Some(attr) = (!path.ends_with('/'))
            .then(|| external_filter(repo, rel))
            .flatten()
        {
            unknown.push(UnknownPath {
                path: path.clone(),
                reason: format!("{attr}: git runs this filter, libgit2 cannot"),
            });
            continue;
        }
        let (index_code, untracked_too) = codes(s);
        let full = root.join(rel);
        let folder = path.ends_with('/');
        let facts = if folder {
            FileFacts::default()
        } else {
            file_facts(&full)
        };
        if let Some(mut code) = index_code {
            if code.ends_with('M') && repo.find_submodule(&path).is_ok() {
                code = submodule_code(repo, &path, &code);
            }
            tracked.push(StatusLine {
                code,
                path: path.clone(),
                path_bytes: None,
                orig_path,
                sha256: facts.sha256.clone(),
                mode: facts.mode.clone(),
            });
        }
        if untracked_too {
            if is_excluded(rel, excluded) || bundles.contains(rel) {
                continue;
            }
            if folder {
                if full.join(".git").exists() {
                    snap.nested_repositories.push(nested(&full, &path));
                }
            } else if let Some(why) = converted_untracked(repo, rel, &full) {
                unknown.push(UnknownPath { path, reason: why });
                continue;
            } else {
                snap.untracked.push(UntrackedFile {
                    path: path.clone(),
                    path_bytes: None,
                    left_out_reason: None,
                    sha256: facts.sha256.clone(),
                    size_bytes: facts.size,
                    // Decided with the limits when the patch is made.
                    in_patch: true,
                });
            }
            untracked.push(StatusLine {
                code: "??".to_owned(),
                path,
                path_bytes: None,
                orig_path: None,
                sha256: facts.sha256,
                mode: facts.mode,
            });
        }
    }
    snap.status = tracked;
    snap.status.append(&mut untracked);
    snap.dirty = if snap.status.is_empty() {
        Dirty::Clean
    } else {
        Dirty::Dirty
    };
    Ok(())
}

/// Why libgit2's patch would not hold the exact bytes of the untracked file `full` (`rel` from
/// the root): CRLF line ends in a file that attributes or `core.autocrlf` make text, which
/// libgit2's diff converts to LF (the git CLI method shows the bytes unconverted).
fn converted_untracked(repo: &Repository, rel: &Path, full: &Path) -> Option<String> {
    let flags = git2::AttrCheckFlags::FILE_THEN_INDEX;
    let attr = |name: &str| {
        repo.get_attr(rel, name, flags)
            .ok()
            .flatten()
            .map(|v| git2::AttrValue::from_string(Some(v)))
            .filter(|v| !matches!(v, git2::AttrValue::Unspecified | git2::AttrValue::False))
    };
    let autocrlf = repo
        .config()
        .ok()
        .and_then(|c| c.get_string("core.autocrlf").ok())
        .is_some_and(|v| v != "false");
    let text = attr("text").is_some() || attr("eol").is_some() || attr("crlf").is_some() || autocrlf;
    if !text {
        return None;
    }
    has_crlf(full).then(|| {
        "untracked file with CRLF line ends that text/eol attributes or core.autocrlf make text: libgit2's patch would convert them"
            .to_owned()
    })
}

/// Whether the file at `path` holds a CR LF pair (read in 64 KiB blocks, never whole).
fn has_crlf(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_cr = false;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let block = &buf[..n];
        if (last_cr && block[0] == b'\n') || block.windows(2).any(|w| w == b"\r\n") {
            return true;
        }
        last_cr = block[n - 1] == b'\r';
    }
}

/// `git status --short` letters of a submodule with worktree changes: `M` new commits, `m`
/// modified content, `?` untracked content only.
fn submodule_code(repo: &Repository, path: &str, code: &str) -> String {
    use git2::SubmoduleStatus as S;
    let Ok(s) = repo.submodule_status(path, git2::SubmoduleIgnore::None) else {
        return code.to_owned();
    };
    let x = &code[..1];
    let y = if s.contains(S::WD_MODIFIED) {
        "M"
    } else if s.intersects(S::WD_INDEX_MODIFIED | S::WD_WD_MODIFIED) {
        "m"
    } else if s.contains(S::WD_UNTRACKED) {
        "?"
    } else {
        "M"
    };
    format!("{x}{y}")
}

/// A nested repository recorded with git2 (HEAD, branch, status lines).
fn nested(dir: &Path, path: &str) -> NestedRepository {
    let mut n = NestedRepository::new(path.trim_end_matches('/'));
    match Repository::open(dir) {
        Ok(repo) => {
            let mut inner = Snapshot::empty();
            read_head(&repo, &mut inner);
            n.head = inner.head.clone();
            n.branch = inner.branch.clone();
            let mut unknown = Vec::new();
            match read_status(
                &repo,
                dir,
                &[],
                &mut BundleFolders::new(dir),
                &mut unknown,
                &mut inner,
            ) {
                Ok(()) if unknown.is_empty() => {
                    n.dirty = inner.dirty;
                    n.status = inner.status;
                }
                Ok(()) => {
                    n.dirty = Dirty::Unknown;
                    n.reason = Some(format!("{}: {}", unknown[0].path, unknown[0].reason));
                    n.status = inner.status;
                }
                Err(e) => {
                    n.dirty = Dirty::Unknown;
                    n.reason = Some(e.message().to_owned());
                }
            }
        }
        Err(e) => {
            n.dirty = Dirty::Unknown;
            n.reason = Some(format!("libgit2 cannot open it: {}", e.message()));
        }
    }
    n
}

/// `XY` letters of `git status --short` for a libgit2 status (`None` when git shows no tracked
/// entry), and whether the path is also listed untracked (`git rm --cached` of a file kept on
/// disk gives `D ` and `??`).
fn codes(s: Status) -> (Option<String>, bool) {
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
    } else if s.contains(Status::WT_MODIFIED) {
        'M'
    } else {
        ' '
    };
    let code = (x != ' ' || y != ' ').then(|| format!("{x}{y}"));
    (code, untracked)
}

/// `git diff HEAD` plus untracked files as new files, with binary patches, leaving out the
/// `unknown` paths and the files `limits` leave out (decided here: the tracked changes first,
/// then the untracked files, each in path order; recorded in `snap`), spooled to a temporary file
/// one file at a time (only the files that go in are read). Returns the patch and problems that
/// make it incomplete (binary changes git2 could not encode).
///
/// The base is `diff_tree_to_workdir_with_index` (what `git diff HEAD` shows, plus untracked
/// content). One case needs a fix-up: a file removed from the index but kept on disk
/// (`git rm --cached`) is a deletion there, like in `git diff HEAD`, yet replaying must keep the
/// file; those paths are diffed tree-to-workdir instead (HEAD content to disk content).
///
/// # Errors
/// [`std::io::Error`] (git2's errors wrapped) when the diff cannot be made or the temporary
/// file written.
fn make_patch(
    repo: &Repository,
    has_head: bool,
    excluded: &[PathBuf],
    unknown: &BTreeSet<String>,
    limits: PatchLimits,
    snap: &mut Snapshot,
) -> std::io::Result<(PatchBytes, Vec<String>)> {
    let tree = if has_head {
        Some(repo.head().map_err(io)?.peel_to_tree().map_err(io)?)
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
            .id_abbrev(40)
            // Explicit, whatever the user's configuration says (`diff.noprefix`,
            // `diff.mnemonicPrefix`, `diff.context`): the patch `git apply` replays.
            .old_prefix("a/")
            .new_prefix("b/")
            .context_lines(3)
            .interhunk_lines(0);
        opts
    };
    let diff = repo
        .diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut options()))
        .map_err(io)?;
    let root = repo.workdir().map(Path::to_path_buf).unwrap_or_default();

    // Deleted against HEAD yet present (and not ignored) on disk: removed from the index only.
    let mut kept_on_disk: Vec<PathBuf> = Vec::new();
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
    let is_unknown = |p: &Path| {
        let text = p.to_string_lossy();
        unknown.contains(text.as_ref()) || unknown.contains(&format!("{text}/"))
    };
    let path_of = |delta: &git2::DiffDelta<'_>| {
        delta
            .old_file()
            .path()
            .or_else(|| delta.new_file().path())
            .map(Path::to_path_buf)
    };
    let odb = repo.odb().map_err(io)?;
    let head_size = |id: git2::Oid| {
        (!id.is_zero())
            .then(|| odb.read_header(id).ok().map(|(size, _)| size as u64))
            .flatten()
    };

    // The tracked changes in path order (as `git diff HEAD` lists them), the kept-on-disk ones
    // among them; then the untracked files, already listed by the status.
    let mut tracked: Vec<TrackedChange> = Vec::new();
    for delta in diff.deltas() {
        let Some(path) = path_of(&delta) else { continue };
        if delta.status() == git2::Delta::Untracked || is_unknown(&path) {
            continue;
        }
        let kept = kept_on_disk.contains(&path);
        let change = match delta.status() {
            git2::Delta::Deleted if !kept => "D",
            git2::Delta::Added => "A",
            git2::Delta::Typechange => "T",
            _ => "M",
        };
        tracked.push(TrackedChange {
            path: path.to_string_lossy().into_owned(),
            raw: None,
            change: change.to_owned(),
            head_size: head_size(delta.old_file().id()),
            size: size_on_disk(&root.join(&path)),
            in_patch: true,
        });
    }
    tracked.sort_by(|a, b| a.path.cmp(&b.path));
    let counter = decide_tracked(limits, &mut tracked);
    decide_untracked(counter, &mut snap.untracked);
    record_tracked_left_out(&root, &tracked, snap);
    let left_out: BTreeSet<String> = tracked
        .iter()
        .filter(|t| !t.in_patch)
        .map(|t| t.path.clone())
        .chain(
            snap.untracked
                .iter()
                .filter(|u| !u.in_patch)
                .map(|u| u.path.clone()),
        )
        .collect();
    let is_left_out = |p: &Path| is_unknown(p) || left_out.contains(p.to_string_lossy().as_ref());

    let file = super::patch::spool()?;
    let mut out = std::io::BufWriter::new(file);
    let mut problems = Vec::new();
    print_patch(
        &diff,
        |delta| {
            path_of(delta).is_some_and(|p| {
                kept_on_disk.contains(&p)
                    || is_left_out(&p)
                    || (delta.status() == git2::Delta::Untracked && is_excluded(&p, excluded))
            })
        },
        &mut out,
        &mut problems,
    )?;
    kept_on_disk.retain(|p| !is_left_out(p));
    if !kept_on_disk.is_empty() {
        let mut opts = options();
        opts.disable_pathspec_match(true);
        for path in &kept_on_disk {
            opts.pathspec(path.as_os_str());
        }
        let extra = repo
            .diff_tree_to_workdir(tree.as_ref(), Some(&mut opts))
            .map_err(io)?;
        print_patch(&extra, |_| false, &mut out, &mut problems)?;
    }
    let file = out.into_inner().map_err(std::io::IntoInnerError::into_error)?;
    Ok((PatchBytes::from_temp(file)?, problems))
}

/// A git2 error as an I/O error (its message kept).
fn io(e: git2::Error) -> std::io::Error {
    std::io::Error::other(e.message().to_owned())
}

/// Writes `diff` in patch format to `out`, one delta at a time (each delta's content is loaded
/// only when it is printed), leaving out the deltas `skip` selects; binary changes git2 could not
/// encode go to `problems`.
fn print_patch(
    diff: &git2::Diff<'_>,
    skip: impl Fn(&git2::DiffDelta<'_>) -> bool,
    out: &mut dyn std::io::Write,
    problems: &mut Vec<String>,
) -> std::io::Result<()> {
    for (i, delta) in diff.deltas().enumerate() {
        if skip(&delta) {
            continue;
        }
        let Some(mut patch) = git2::Patch::from_diff(diff, i).map_err(io)? else {
            continue;
        };
        let mut failed: Option<std::io::Error> = None;
        patch
            .print(&mut |_delta, _hunk, line| {
                let content = line.content();
                if content.starts_with(b"Binary files ") && content.trim_ascii_end().ends_with(b" differ") {
                    problems.push(format!(
                        "working-tree.patch: binary change without data ({}); git apply cannot rebuild it",
                        String::from_utf8_lossy(content.trim_ascii_end())
                    ));
                }
                let written = if matches!(line.origin(), '+' | '-' | ' ') {
                    out.write_all(&[line.origin() as u8])
                } else {
                    Ok(())
                }
                .and_then(|()| out.write_all(content));
                match written {
                    Ok(()) => true,
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                }
            })
            .map_err(|e| failed.take().unwrap_or_else(|| io(e)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_match_git_short_format() {
        let c = |s: Status| codes(s);
        assert_eq!(c(Status::WT_NEW), (None, true));
        assert_eq!(c(Status::INDEX_NEW), (Some("A ".to_owned()), false));
        assert_eq!(
            c(Status::INDEX_MODIFIED | Status::WT_MODIFIED).0.as_deref(),
            Some("MM")
        );
        assert_eq!(c(Status::WT_DELETED).0.as_deref(), Some(" D"));
        assert_eq!(c(Status::INDEX_NEW | Status::WT_DELETED).0.as_deref(), Some("AD"));
        assert_eq!(
            c(Status::INDEX_DELETED | Status::WT_NEW),
            (Some("D ".to_owned()), true)
        );
        assert_eq!(c(Status::CURRENT), (None, false));
        assert_eq!(c(Status::IGNORED), (None, false));
    }
}
