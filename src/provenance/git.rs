//! Capture of the repository state into a [`Snapshot`]: HEAD, `git status`, the working-tree
//! patch, submodules, nested repositories, index bits and the operation in progress. Reads the
//! repository only; writes nothing (the repository's index included).
//!
//! Two methods, named in provenance.json `capture-method`:
//! - `git-cli` (whenever `git` is on PATH, [`super::git_cli`]): status and patch are git's own
//!   output, so filters, sparse checkouts, index bits, conflicts and layouts (linked worktrees,
//!   `.git` files, `core.worktree`) are decided by git.
//! - `libgit2` (no git on PATH, or git failed; `super::git_lib`): git2 alone. Where libgit2
//!   cannot decide what git would (external filters, skip-worktree and assume-unchanged bits,
//!   intent-to-add entries, conflicts, unreadable files), the paths are listed in
//!   `unknown-paths` and `dirty` is `"unknown"` with the reason; nothing is guessed.
//!
//! A repository that neither method can read is recorded with `dirty: "unknown"`, the reason, and
//! a warning.

use std::path::{Path, PathBuf};

use git2::Repository;

use super::doc::{CaptureMethod, Dirty, NestedRepository, Snapshot, StatusLine, UntrackedFile};
use super::git_cli::{self, GitError, Location};
use super::mark::Mark;
use super::patch::{PatchBytes, PatchLimits};
use super::worktree::{
    BundleFolders, FileFacts, TrackedChange, decide_tracked, decide_untracked, file_facts, index_bits,
    is_excluded, object_sizes, operation, read_submodules, record_tracked_left_out, relative_exclusions,
    size_on_disk,
};
pub use super::worktree::{content_sha256, is_bundle_folder};
use crate::digest::{sha256_bytes, sha256_reader};
use crate::names::NameBytes;

/// How many levels of repositories nested inside nested repositories are recorded.
const NESTED_DEPTH: usize = 3;

/// Captures the repository holding `start`, or records why there is none. Never fails and never
/// panics on repository state; see the module docs for the two methods.
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
    capture_with(start, exclude, PatchLimits::default(), None)
}

/// Like [`capture_excluding`], with `limits` deciding which changed files go into the patch
/// (the manifest's `[provenance] patch-limit` and `patch-file-limit`).
pub fn capture_limited(start: &Path, exclude: &[&Path], limits: PatchLimits) -> Snapshot {
    capture_with(start, exclude, limits, None)
}

/// The after-run capture compared with `before` for drift: like [`capture_excluding`], except
/// that when HEAD, every status entry (letters, content SHA-256, mode) and the untracked files are
/// the same as in `before` (taken by the same method), the patch is not computed again: it is
/// `before`'s, since `git diff HEAD` is then the same bytes. Saves the diff's cost (binary deltas
/// above all) on the common case of an experiment that leaves the tree alone. Needs `before`'s
/// patch bytes (held in its temporary file). The limits are `before`'s.
pub fn capture_after(start: &Path, exclude: &[&Path], before: &Snapshot) -> Snapshot {
    let limits = before.patch_limits.unwrap_or_default();
    capture_with(start, exclude, limits, Some(before))
}

fn capture_with(start: &Path, exclude: &[&Path], limits: PatchLimits, before: Option<&Snapshot>) -> Snapshot {
    // No `git --version` first: the first git command of the capture tells whether git is there.
    let mut snap = Snapshot::empty();
    snap.patch_limits = Some(limits);
    let fallback = match by_git_cli(start, exclude, limits, before, &mut snap) {
        Ok(()) => {
            finish(&mut snap);
            return snap;
        }
        Err(GitError::NotFound) => "git is not on PATH".to_owned(),
        Err(e @ GitError::Spawn { .. }) => format!("git cannot be run ({e})"),
        Err(e) => format!("git could not read the repository ({e}); libgit2 used instead"),
    };
    let mut snap = Snapshot::empty();
    snap.patch_limits = Some(limits);
    super::git_lib::capture(start, exclude, limits, &fallback, &mut snap);
    finish(&mut snap);
    snap
}

/// The root of the working tree holding `start` (`git rev-parse --show-toplevel`; libgit2 when
/// git is not on PATH or refuses the repository), `None` outside a working tree. The anchor of the
/// default results folder: `<root>/results`, as cargo's `target/` sits at the workspace root
/// whichever subfolder it is run from.
pub fn work_tree_root(start: &Path) -> Option<PathBuf> {
    match git_cli::locate(start) {
        Ok(Location::WorkTree { root, .. }) => Some(root),
        Ok(Location::NoRepository | Location::NoWorkTree { .. }) => None,
        Err(_) => Repository::discover(start)
            .ok()
            .and_then(|r| r.workdir().map(|w| w.components().collect())),
    }
}

/// The `git-cli` method.
///
/// # Errors
/// [`GitError`] when git refuses the repository or a step that decides status or HEAD fails;
/// the caller then falls back to libgit2.
fn by_git_cli(
    start: &Path,
    exclude: &[&Path],
    limits: PatchLimits,
    before: Option<&Snapshot>,
    snap: &mut Snapshot,
) -> Result<(), GitError> {
    snap.capture_method = Some(CaptureMethod::GitCli);
    let (root, git_dir) = match git_cli::locate(start)? {
        Location::NoRepository => {
            snap.reason = Some(format!("no git repository at {}", start.display()));
            return Ok(());
        }
        Location::NoWorkTree { git_dir } => {
            let head = git_cli::head(&git_dir)?;
            apply_head(snap, &head);
            snap.errors.push(format!(
                "bare repository at {}: no working tree to record",
                git_dir.display()
            ));
            return Ok(());
        }
        Location::WorkTree { root, git_dir } => (root, git_dir),
    };
    snap.repo = Some(root.clone());
    snap.operation = operation(&git_dir).map(str::to_owned);
    let excluded = relative_exclusions(&root, exclude);
    snap.excluded = excluded
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();

    // The status first (HEAD with it): its letters decide most of what `git diff HEAD` shows
    // (`git diff --raw` is asked only about the paths they leave open). Then the tracked changes
    // (sizes from `git cat-file`, the limits) and the tracked diff (the slow part: binary deltas;
    // not run when there is no tracked change) run in their own thread while git2 is consulted;
    // the untracked files are diffed once the tracked changes say how much of the total limit is
    // left. Both diffs go straight from git's stdout into temporary files.
    let reuse = before.filter(|b| b.capture_method == Some(CaptureMethod::GitCli));
    // The after-run capture: when nothing `git status` reports can have changed since `before`
    // (proven in-process, [`super::quiet`]), the capture is `before`'s, taken now; no git runs.
    if let Some(b) = reuse
        && snap.operation.is_none()
        && super::quiet::unchanged(&root, &git_dir, &snap.excluded, b)
    {
        let captured_at = std::mem::take(&mut snap.captured_at);
        *snap = b.clone();
        snap.captured_at = captured_at;
        snap.warnings.clear();
        return Ok(());
    }
    // A capture that may be compared with a later one leaves what the later one needs to prove
    // that nothing changed.
    let mut mark = before.is_none().then(|| Mark::start(&git_dir));
    let (head, from_status) = record_status(&root, &excluded, snap, mark.as_mut())?;
    // The index is read (gix-index) and libgit2 opens the repository while `git diff` runs
    // (during `git status` the read slowed it down as much as it saved). Later than the mark's
    // start is as good: the after-run check proves the index unchanged since then.
    let git2 = git2_reading(&git_dir, &root, mark.is_some());
    // The after-run capture: when the status and HEAD are what `before` recorded, the tracked
    // changes, the decisions of the limits and the patch are `before`'s too, and no `git diff`
    // runs at all.
    if let Some(b) = reuse
        && unchanged_since(b, snap)
    {
        let _ = read_with_git2(git2_read(git2), &git_dir, &root, snap, from_status.gitlink, None);
        snap.tracked_left_out.clone_from(&b.tracked_left_out);
        snap.untracked.clone_from(&b.untracked);
        snap.patch = b.patch.clone();
        snap.patch_sha256.clone_from(&b.patch_sha256);
        return Ok(());
    }
    let base = match (&head.commit, head.unborn) {
        (Some(commit), _) => Some(commit.clone()),
        (None, true) => Some(git_cli::empty_tree(&root, None)?),
        (None, false) => None,
    };
    // Nothing staged: `git diff` (the index to the working tree) shows what `git diff HEAD` does,
    // and of the changed paths alone without comparing HEAD's tree with the whole index.
    let (worktree_only, gitlink_in_status) = (from_status.worktree_only, from_status.gitlink);
    let (tracked, untracked) = std::thread::scope(|s| -> Result<_, GitError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (root, git_dir) = (&root, &git_dir);
        let worker = base.as_ref().map(|base| {
            let diff_base = (!worktree_only).then_some(base.as_str());
            s.spawn(move || -> Option<std::io::Result<tempfile::NamedTempFile>> {
                let changes = tracked_changes(root, git_dir, base, from_status).map(|mut c| {
                    let counter = decide_tracked(limits, &mut c);
                    (c, counter)
                });
                let included = changes
                    .as_ref()
                    .ok()
                    .map(|(c, _)| included_paths(c, worktree_only));
                let _ = tx.send(changes);
                if reuse.is_some() {
                    return None;
                }
                included.map(|paths| diff_tracked_spooled(root, diff_base, paths.as_deref()))
            })
        });
        let filemode = read_with_git2(
            git2_read(git2),
            git_dir,
            root,
            snap,
            gitlink_in_status,
            mark.as_mut(),
        );
        if let Some(mark) = mark.take() {
            snap.quiet = super::mark::Quiet(Some(std::sync::Arc::new(mark)));
        }
        let (tracked_changes, counter) = match rx.recv() {
            Ok(Ok(decided)) => decided,
            Ok(Err(e)) => {
                snap.errors
                    .push(format!("working-tree.patch: tracked changes left out: {e}"));
                (Vec::new(), limits.counter())
            }
            // No HEAD to diff against.
            Err(_) => (Vec::new(), limits.counter()),
        };
        decide_untracked(counter, &mut snap.untracked);
        record_tracked_left_out(root, &tracked_changes, snap);
        let reused = reuse.is_some_and(|b| same_tree_record(b, snap));
        let untracked = base.as_ref().filter(|_| !reused).map(|base| {
            let mut new_files: Vec<&[u8]> = snap
                .untracked
                .iter()
                .filter(|u| u.in_patch)
                .map(|u| crate::names::bytes_of(&u.path, u.path_bytes.as_ref()))
                .collect();
            // git's order: the index's, by bytes.
            new_files.sort_unstable();
            let mut out = std::io::BufWriter::new(super::patch::spool()?);
            // The base's id (HEAD, or the empty tree) names the repository's hash.
            super::new_files::write(root, base.len(), filemode, &new_files, &mut out)?;
            out.into_inner().map_err(std::io::IntoInnerError::into_error)
        });
        let joined = worker.map(|w| w.join().expect("the git diff thread does not panic"));
        let tracked = match (joined, &base) {
            (Some(Some(done)), _) => Some(done),
            (_, Some(base)) if !reused => {
                let paths = included_paths(&tracked_changes, worktree_only);
                Some(diff_tracked_spooled(
                    root,
                    (!worktree_only).then_some(base.as_str()),
                    paths.as_deref(),
                ))
            }
            _ => None,
        };
        Ok((tracked, untracked))
    })?;

    match (tracked, untracked) {
        (Some(tracked), Some(untracked)) => {
            let patch = tracked.and_then(|mut file| {
                match untracked {
                    Ok(mut u) => {
                        super::patch::append(file.as_file_mut(), u.as_file_mut())?;
                    }
                    Err(e) => untracked_diff_failed(snap, &e),
                }
                PatchBytes::from_temp(file)
            });
            match patch.and_then(|p| sha256_reader(p.reader()?).map(|sha| (p, sha))) {
                Ok((patch, sha)) => {
                    snap.patch_sha256 = sha;
                    snap.patch = patch;
                }
                Err(e) => snap.errors.push(format!("working-tree.patch: {e}")),
            }
        }
        _ if base.is_none() => snap
            .errors
            .push("no working-tree.patch: HEAD does not resolve to a commit".to_owned()),
        _ => {
            // Same tree as `before`: the same patch.
            let b = reuse.expect("the patch is only skipped when reused");
            snap.patch = b.patch.clone();
            snap.patch_sha256 = b.patch_sha256.clone();
        }
    }
    Ok(())
}

/// The untracked files' patch failed (a file could not be read): none of them is in
/// working-tree.patch, so each is recorded `in-patch: false` (by size and sha256 only), with the
/// error in `errors` and a warning.
fn untracked_diff_failed(snap: &mut Snapshot, e: &std::io::Error) {
    let mut left_out = Vec::new();
    for u in snap.untracked.iter_mut().filter(|u| u.in_patch) {
        u.in_patch = false;
        u.left_out_reason = Some(format!("it could not be read: {e}"));
        left_out.push(u.path.clone());
    }
    snap.errors
        .push(format!("working-tree.patch: untracked files left out: {e}"));
    if !left_out.is_empty() {
        snap.warnings.push(format!(
            "{} untracked file(s) are not in working-tree.patch because they could not be read ({e}): recorded with their sizes and sha256 in provenance.json (`in-patch: false`): {}",
            left_out.len(),
            left_out.join(", ")
        ));
    }
}

/// The changed tracked files `git diff <base>` shows (in its path order), with their sizes in
/// `base` and in the working tree; not yet decided (`in_patch` true). `from_status` holds what
/// the status letters decide; `git diff --raw` is asked about the open paths only. The HEAD sizes
/// are read from the object store of `git_dir` in-process ([`object_sizes`]), or by
/// `git cat-file` where libgit2 cannot read it (SHA-256).
///
/// # Errors
/// [`GitError`] when git fails.
fn tracked_changes(
    root: &Path,
    git_dir: &Path,
    base: &str,
    from_status: StatusChanges,
) -> Result<Vec<TrackedChange>, GitError> {
    let mut raw = from_status.decided;
    raw.extend(git_cli::diff_raw(root, base, &from_status.open)?);
    raw.sort_by(|a, b| {
        crate::names::bytes_of(&a.path, a.raw.as_ref()).cmp(crate::names::bytes_of(&b.path, b.raw.as_ref()))
    });
    let oids: Vec<&str> = raw.iter().map(|r| r.old_oid.as_str()).collect();
    let sizes = match object_sizes(git_dir, &oids) {
        Some(sizes) => sizes,
        None => git_cli::blob_sizes(root, oids.into_iter())?,
    };
    Ok(raw
        .into_iter()
        .zip(sizes)
        .map(|(r, head_size)| TrackedChange {
            size: size_on_disk(&root.join(crate::names::path_of(&r.path, r.raw.as_ref()))),
            path: r.path,
            raw: r.raw,
            change: r.change,
            head_size,
            in_patch: true,
        })
        .collect())
}

/// What the status entries say of `git diff HEAD --raw --no-renames --ignore-submodules=all`.
#[derive(Debug, Default)]
struct StatusChanges {
    /// The changes the letters decide.
    decided: Vec<git_cli::RawChange>,
    /// The paths they leave open: changed in both the index and the working tree (the file may
    /// be back to HEAD's content), submodules, conflicts, intent-to-add entries, copies.
    open: Vec<PathBuf>,
    /// Nothing is staged: every tracked entry is changed in the working tree only (` M`, ` T`,
    /// ` D`) or is a submodule (left out of the patch); the index holds HEAD's content for every
    /// path the patch shows.
    worktree_only: bool,
    /// Some entry is a submodule on some side (HEAD, index or working tree) or unmerged.
    gitlink: bool,
}

impl StatusChanges {
    /// Sorts the tracked `entries` of a status (letters as `git status --short`: `X` the index
    /// against HEAD, `Y` the working tree against the index; a rename `R` has its source).
    fn of(entries: &[git_cli::Entry]) -> StatusChanges {
        use std::os::unix::ffi::OsStrExt;
        let mut out = StatusChanges {
            worktree_only: true,
            ..StatusChanges::default()
        };
        for e in entries.iter().filter(|e| e.code != "??") {
            let (x, y) = (e.code.as_bytes()[0], e.code.as_bytes()[1]);
            out.worktree_only &= x == b' ' && (e.special || matches!(y, b'M' | b'T' | b'D'));
            out.gitlink |= e.special;
            let head_oid = e.head_oid.clone().unwrap_or_default();
            let zeros = "0".repeat(head_oid.len().max(40));
            let change = |path: &str, raw: Option<&NameBytes>, letter: u8, oid: &str| git_cli::RawChange {
                path: path.to_owned(),
                raw: raw.cloned(),
                change: (letter as char).to_string(),
                old_oid: oid.to_owned(),
            };
            let this = |letter: u8, oid: &str| change(&e.path, e.raw.as_ref(), letter, oid);
            let decided = match (x, y) {
                _ if e.special || e.head_oid.is_none() => None,
                // Changed on both sides: back to HEAD's content, or not; git decides.
                (b'M' | b'T', b'M' | b'T') => None,
                (b' ', b'M' | b'T' | b'D') => Some(vec![this(y, &head_oid)]),
                (b'M' | b'T', b' ') => Some(vec![this(x, &head_oid)]),
                (b'M' | b'T', b'D') | (b'D', b' ') => Some(vec![this(b'D', &head_oid)]),
                (b'A', b' ' | b'M' | b'T') => Some(vec![this(b'A', &zeros)]),
                (b'A', b'D') => Some(Vec::new()),
                (b'R', b' ' | b'M' | b'T' | b'D') => e.orig_path.as_deref().map(|orig| {
                    let mut v = vec![change(orig, e.orig_raw.as_ref(), b'D', &head_oid)];
                    if y != b'D' {
                        v.push(this(b'A', &zeros));
                    }
                    v
                }),
                _ => None,
            };
            match decided {
                Some(v) => out.decided.extend(v),
                None => {
                    out.open.push(e.fs_path());
                    if let Some(orig) = &e.orig_path {
                        let bytes = crate::names::bytes_of(orig, e.orig_raw.as_ref());
                        out.open.push(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)));
                    }
                }
            }
        }
        out
    }
}

/// The paths to diff (`None`: diff everything): given when some tracked change is left out, and
/// to a diff of the working tree alone (`worktree_only`: then git looks at those paths only, not
/// the whole tree) unless they are more than [`PATHSPEC_MOST`].
fn included_paths(changes: &[TrackedChange], worktree_only: bool) -> Option<Vec<PathBuf>> {
    // Tracked changes come first in the patch: their decisions do not depend on the untracked
    // files, so the diff thread makes them before the status is read.
    // Nothing changed: an empty list, so that no `git diff` runs (it would print nothing).
    let few = worktree_only && changes.len() <= PATHSPEC_MOST;
    (few || changes.is_empty() || changes.iter().any(|c| !c.in_patch)).then(|| {
        changes
            .iter()
            .filter(|c| c.in_patch)
            .map(TrackedChange::fs_path)
            .collect()
    })
}

/// Most changed paths a diff of the working tree alone names on its command line: git matches
/// every index entry against every path named, so for more the whole tree is diffed.
const PATHSPEC_MOST: usize = 1000;

/// `git diff <base>` (`git diff` with no base: the index to the working tree; all of it, or
/// `paths` only) into a new temporary file.
fn diff_tracked_spooled(
    root: &Path,
    base: Option<&str>,
    paths: Option<&[PathBuf]>,
) -> std::io::Result<tempfile::NamedTempFile> {
    spooled(|out| git_cli::diff_tracked(root, base, paths, out))
}

/// A new temporary file filled by `fill` (git's stdout pointed at it).
fn spooled(
    fill: impl FnOnce(&std::fs::File) -> Result<(), GitError>,
) -> std::io::Result<tempfile::NamedTempFile> {
    let file = super::patch::spool()?;
    fill(file.as_file()).map_err(std::io::Error::other)?;
    Ok(file)
}

/// Submodules and index bits through git2 (`read`, from [`git2_reading`]: opened at the git folder
/// git named with git's working tree, as libgit2 would pick another one for a `.git` file); what
/// fails goes to `errors`.
/// `gitlink_in_status`: a status entry is a submodule (or unmerged) on some side, HEAD's among
/// them.
///
/// libgit2 finds submodules in `.gitmodules`, the index and HEAD's tree, which it walks whole;
/// with no `.gitmodules` in the working tree, no gitlink in the index and none in the status
/// (a gitlink of HEAD's that the index does not hold shows there) there is none, and the walk is
/// not made.
///
/// With a `mark`, the index's paths and whether it holds a gitlink go to it.
///
/// Returns `core.filemode` (true when libgit2 cannot tell): whether git takes an untracked file's
/// mode from its execute bit.
fn read_with_git2(
    read: Result<Git2Read, git2::Error>,
    git_dir: &Path,
    root: &Path,
    snap: &mut Snapshot,
    gitlink_in_status: bool,
    mark: Option<&mut Mark>,
) -> bool {
    match read {
        Ok(Git2Read {
            repo,
            filemode,
            bits,
            paths,
        }) => {
            let gitlink_in_index = bits.as_ref().map_or(true, |b| b.gitlink);
            if let (Some(mark), Ok(b)) = (mark, &bits) {
                mark.tracked = paths;
                mark.gitlink = b.gitlink;
            }
            let gitmodules = std::fs::symlink_metadata(root.join(".gitmodules")).is_ok();
            if (gitlink_in_status || gitlink_in_index || gitmodules)
                && let Err(e) = read_submodules(&repo, snap)
            {
                snap.errors.push(format!("submodules: {}", e.message()));
            }
            match bits {
                Ok(bits) => snap.unchecked = bits.unchecked,
                Err(e) => snap.errors.push(format!(
                    "skip-worktree and assume-unchanged bits not read: {}",
                    e.message()
                )),
            }
            filemode
        }
        Err(e) => {
            snap.errors.push(format!(
                "libgit2 cannot open {} ({}): submodules and index bits not recorded",
                git_dir.display(),
                e.message()
            ));
            true
        }
    }
}

/// What [`read_with_git2`] takes from libgit2 while the tracked changes are diffed: the repository
/// opened at `git_dir` with `root` as its working tree, `core.filemode` (true when libgit2 cannot
/// tell), the index's bits ([`index_bits`]) and, when `paths`, every index entry's path.
struct Git2Read {
    repo: Repository,
    filemode: bool,
    bits: Result<super::worktree::IndexBits, git2::Error>,
    paths: Option<super::mark::Paths>,
}

/// Reads [`Git2Read`] on a thread of its own, so that the index is read while `git diff` runs.
///
/// # Errors
/// libgit2's, when the repository cannot be opened (the thread's result).
fn git2_reading(
    git_dir: &Path,
    root: &Path,
    paths: bool,
) -> std::thread::JoinHandle<Result<Git2Read, git2::Error>> {
    let (git_dir, root) = (git_dir.to_path_buf(), root.to_path_buf());
    std::thread::spawn(move || {
        let repo = Repository::open(&git_dir).and_then(|r| r.set_workdir(&root, false).map(|()| r))?;
        let filemode = repo
            .config()
            .and_then(|c| c.get_bool("core.filemode"))
            .unwrap_or(true);
        let mut paths = paths.then(super::mark::Paths::default);
        let bits = index_bits(&repo, &root, paths.as_mut());
        Ok(Git2Read {
            repo,
            filemode,
            bits,
            paths,
        })
    })
}

/// The [`Git2Read`] of [`git2_reading`].
fn git2_read(
    reading: std::thread::JoinHandle<Result<Git2Read, git2::Error>>,
) -> Result<Git2Read, git2::Error> {
    reading.join().expect("the libgit2 reading thread does not panic")
}

/// Fills head, branch, detached and reason from git's answer.
fn apply_head(snap: &mut Snapshot, head: &git_cli::Head) {
    snap.head.clone_from(&head.commit);
    snap.branch.clone_from(&head.branch);
    snap.detached = head.detached;
    snap.reason.clone_from(&head.reason);
}

/// Turns git status entries into status lines with content facts, untracked files and nested
/// repositories (recorded to `depth` levels).
fn record_entries(
    root: &Path,
    excluded: &[PathBuf],
    entries: Vec<git_cli::Entry>,
    snap: &mut Snapshot,
    depth: usize,
) {
    let mut bundles = BundleFolders::new(root);
    for e in entries {
        let untracked = e.code == "??";
        let fs_path = e.fs_path();
        if untracked && (is_excluded(&fs_path, excluded) || bundles.contains(&fs_path)) {
            continue;
        }
        let rel = e.path.trim_end_matches('/');
        let full = root.join(&fs_path);
        let folder = e.path.ends_with('/');
        let facts = if folder {
            FileFacts::default()
        } else {
            file_facts(&full)
        };
        if untracked && folder {
            if full.join(".git").exists() && depth > 0 {
                let mut found = Vec::new();
                nested_by_git_cli(&full, rel, depth - 1, &mut found);
                snap.nested_repositories.extend(found);
            }
        } else if untracked {
            snap.untracked.push(UntrackedFile {
                path: e.path.clone(),
                path_bytes: e.raw.clone(),
                left_out_reason: None,
                sha256: facts.sha256.clone(),
                size_bytes: facts.size,
                // Decided with the limits once the tracked changes are counted.
                in_patch: true,
            });
        }
        snap.status.push(StatusLine {
            code: e.code,
            path: e.path,
            path_bytes: e.raw,
            orig_path: e.orig_path,
            sha256: facts.sha256,
            mode: facts.mode,
        });
    }
    snap.bundles_left_out += bundles.found().count();
}

/// Records the untracked nested repository at `dir` (`rel` from the outer root) and, `depth`
/// levels down, the ones nested in it, with git: HEAD, branch, dirty and status lines.
fn nested_by_git_cli(dir: &Path, rel: &str, depth: usize, out: &mut Vec<NestedRepository>) {
    let mut nested = NestedRepository::new(rel);
    match git_cli::status(dir, false) {
        Ok((head, entries)) => {
            nested.head = head.commit;
            nested.branch = head.branch;
            let mut inner = Snapshot::empty();
            record_entries(dir, &[], entries, &mut inner, depth);
            nested.dirty = if inner.status.is_empty() {
                Dirty::Clean
            } else {
                Dirty::Dirty
            };
            nested.status = inner.status;
            out.push(nested);
            for mut n in inner.nested_repositories {
                n.path = format!("{rel}/{}", n.path);
                out.push(n);
            }
        }
        Err(e) => {
            // HEAD as far as git tells it without the status.
            if let Ok(head) = git_cli::head(dir) {
                nested.head = head.commit;
                nested.branch = head.branch;
            }
            nested.dirty = Dirty::Unknown;
            nested.reason = Some(e.to_string());
            out.push(nested);
        }
    }
}

/// `git status` into `snap`: HEAD (returned too, with what the letters say of the tracked
/// changes), status lines, untracked files, nested
/// repositories, `dirty`. With a `mark`, the folders git reports ignored go to it.
///
/// # Errors
/// [`GitError`] when git fails.
fn record_status(
    root: &Path,
    excluded: &[PathBuf],
    snap: &mut Snapshot,
    mark: Option<&mut Mark>,
) -> Result<(git_cli::Head, StatusChanges), GitError> {
    let (head, mut entries) = git_cli::status(root, mark.is_some())?;
    if let Some(mark) = mark {
        entries.retain(|e| {
            let ignored = e.code == "!!";
            let bytes = crate::names::bytes_of(&e.path, e.raw.as_ref());
            if let Some(dir) = bytes.strip_suffix(b"/").filter(|_| ignored) {
                mark.ignored_dirs.push(dir.to_vec());
            }
            !ignored
        });
    }
    apply_head(snap, &head);
    let changes = StatusChanges::of(&entries);
    record_entries(root, excluded, entries, snap, NESTED_DEPTH);
    snap.dirty = if snap.status.is_empty() {
        Dirty::Clean
    } else {
        Dirty::Dirty
    };
    Ok((head, changes))
}

/// `now` (its status read, nothing else) records the same HEAD, status entries (letters, paths,
/// content sha256, modes), untracked files (paths, sha256, sizes) and exclusions as `before`, and
/// `before` is complete with its patch bytes: then `git diff --raw` and `git diff` would give what
/// `before` holds.
fn unchanged_since(before: &Snapshot, now: &Snapshot) -> bool {
    let untracked_same = before.untracked.len() == now.untracked.len()
        && before.untracked.iter().zip(&now.untracked).all(|(a, b)| {
            a.path == b.path
                && a.path_bytes == b.path_bytes
                && a.sha256 == b.sha256
                && a.size_bytes == b.size_bytes
        });
    before.head == now.head
        && before.reason == now.reason
        && before.status == now.status
        && untracked_same
        && before.excluded == now.excluded
        && before.nested_repositories == now.nested_repositories
        && before.errors.is_empty()
        && before.patch_limits == now.patch_limits
        && (before.patch.has_file() || before.patch_sha256 == sha256_bytes(b""))
}

/// `before` and `now` record the same HEAD, status entries (letters, paths, content, modes) and
/// untracked files, and `before` holds its patch bytes: then `git diff HEAD` plus the untracked
/// files gives the same patch.
fn same_tree_record(before: &Snapshot, now: &Snapshot) -> bool {
    before.head == now.head
        && before.reason == now.reason
        && before.status == now.status
        && before.untracked == now.untracked
        && before.tracked_left_out == now.tracked_left_out
        && before.excluded == now.excluded
        && before.errors.is_empty()
        // The bytes are there (not a capture read back from provenance.json, which has none).
        && (before.patch.has_file() || before.patch_sha256 == sha256_bytes(b""))
}

/// Warnings for the terminal and the bundle notes: the operation in progress, an unknown dirty
/// state, untracked files left out of the patch.
fn finish(snap: &mut Snapshot) {
    if snap.repo.is_none() && snap.head.is_none() && snap.dirty != Dirty::Unknown {
        snap.warnings.push(format!(
            "provenance not recorded: {}; the bundle holds no revision and no working tree (report and list say `not recorded`)",
            snap.reason.as_deref().unwrap_or("no git working tree")
        ));
    }
    if let Some(op) = &snap.operation {
        let markers = if op == "bisect" {
            ""
        } else {
            "; the working tree may hold conflict markers"
        };
        snap.warnings.push(format!(
            "a {op} is in progress in {}: recorded as operation \"{op}\" in provenance.json{markers}",
            snap.repo
                .as_deref()
                .map_or_else(|| "the repository".to_owned(), |p| p.display().to_string())
        ));
    }
    if snap.dirty == Dirty::Unknown {
        snap.warnings.push(format!(
            "the working tree's state is unknown: {}",
            snap.dirty_reason.as_deref().unwrap_or("no reason recorded")
        ));
    }
    let limits = snap.patch_limits.unwrap_or_default();
    for t in &snap.tracked_left_out {
        let counted = t.size_bytes.unwrap_or(0).max(t.head_size_bytes.unwrap_or(0));
        let what = match (t.change.as_str(), t.size_bytes, t.head_size_bytes) {
            ("D", _, Some(head)) => format!("deleted, {head} bytes in HEAD"),
            (_, Some(now), Some(head)) => format!("{now} bytes, {head} in HEAD"),
            (_, Some(now), None) => format!("{now} bytes, not in HEAD"),
            _ => "size unknown".to_owned(),
        };
        let rebuild = if t.change == "D" {
            "`rerun --at-recorded-revision` deletes it"
        } else {
            "`rerun --at-recorded-revision` cannot rebuild it from the bundle"
        };
        snap.warnings.push(format!(
            "changed tracked file {} ({what}) is {}: recorded with its sizes and sha256 in provenance.json `tracked-left-out`, left out of working-tree.patch ({rebuild})",
            t.path,
            limits.why(counted),
        ));
    }
    for u in snap
        .untracked
        .iter()
        .filter(|u| !u.in_patch && u.left_out_reason.is_none())
    {
        let size = u.size_bytes.unwrap_or(0);
        snap.warnings.push(format!(
            "untracked file {} ({size} bytes) is {}: recorded with its size and sha256 in provenance.json, left out of working-tree.patch (`rerun --at-recorded-revision` cannot rebuild it from the bundle)",
            u.path,
            limits.why(size),
        ));
    }
    if snap.repo.is_some() {
        snap.untracked_patch_limit_bytes = Some(limits.file_bytes);
    } else {
        snap.patch_limits = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::quiet::tests::git;

    /// The index's paths and bits, read by gix-index, are those git lists (`git ls-files`, `-t`,
    /// `-v`), in index version 2, version 4 (paths compressed against the one before) and a split
    /// index (libgit2 reads no split index: its bits and paths were lost there).
    #[test]
    fn index_paths_and_bits_are_those_git_lists_in_every_index_form() {
        for form in ["2", "4", "split"] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path();
            git(root, &["init", "-q", "-b", "main"]);
            for i in 0..30 {
                let folder = root.join(format!("d{}/deeper{}", i % 3, i % 2));
                std::fs::create_dir_all(&folder).unwrap();
                std::fs::write(folder.join(format!("file-{i}.txt")), format!("{i}\n")).unwrap();
            }
            git(root, &["add", "-A"]);
            git(root, &["commit", "-qm", "c"]);
            std::fs::write(root.join("new.txt"), "n\n").unwrap();
            git(root, &["add", "-N", "new.txt"]);
            git(
                root,
                &["update-index", "--skip-worktree", "d0/deeper0/file-0.txt"],
            );
            git(
                root,
                &["update-index", "--assume-unchanged", "d1/deeper1/file-1.txt"],
            );
            match form {
                "split" => git(root, &["update-index", "--split-index"]),
                version => git(root, &["update-index", "--index-version", version]),
            };
            let repo = Repository::open(root.join(".git")).unwrap();
            let mut paths = super::super::mark::Paths::default();
            let bits = index_bits(&repo, root, Some(&mut paths)).unwrap();
            let listed = git(root, &["ls-files", "-z"]);
            let listed: Vec<&[u8]> = listed.split_terminator('\0').map(str::as_bytes).collect();
            assert_eq!(paths.iter().collect::<Vec<_>>(), listed, "index form {form}");
            let flagged = |args: &[&str], keep: fn(&str) -> bool| -> Vec<String> {
                git(root, args)
                    .lines()
                    .filter(|l| keep(l))
                    .map(|l| l[2..].to_owned())
                    .collect()
            };
            let mut hidden = flagged(&["ls-files", "-t"], |l| l.starts_with("S "));
            hidden.extend(flagged(&["ls-files", "-v"], |l| l.starts_with("h ")));
            hidden.sort();
            assert_eq!(bits.hidden, hidden, "index form {form}");
            assert_eq!(bits.intent_to_add, ["new.txt"], "index form {form}");
            assert!(!bits.gitlink);
        }
    }

    /// The tracked changes the status letters decide (plus `git diff --raw` of the open paths)
    /// are those `git diff HEAD --raw` lists of the whole tree, in every state of a path.
    #[test]
    fn status_letters_give_the_changes_git_diff_raw_lists() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        git(root, &["init", "-q", "-b", "main"]);
        let names = [
            "wm", "im", "mm", "mm-back", "d-index", "d-work", "d-kept", "r-from", "rm-from", "rd-from", "t",
        ];
        for n in names {
            std::fs::write(root.join(n), format!("{n}\n")).unwrap();
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "c"]);
        let write = |n: &str, t: &str| std::fs::write(root.join(n), t).unwrap();
        write("wm", "changed\n");
        write("im", "staged\n");
        git(root, &["add", "im"]);
        write("mm", "staged\n");
        git(root, &["add", "mm"]);
        write("mm", "and more\n");
        write("mm-back", "staged\n");
        git(root, &["add", "mm-back"]);
        write("mm-back", "mm-back\n");
        for (n, t) in [("ad", "x\n"), ("am", "x\n"), ("a", "x\n")] {
            write(n, t);
            git(root, &["add", n]);
        }
        std::fs::remove_file(root.join("ad")).unwrap();
        write("am", "y\n");
        git(root, &["rm", "-q", "d-index"]);
        std::fs::remove_file(root.join("d-work")).unwrap();
        git(root, &["rm", "-q", "--cached", "d-kept"]);
        git(root, &["mv", "r-from", "r-to"]);
        git(root, &["mv", "rm-from", "rm-to"]);
        write("rm-to", "moved and changed\n");
        git(root, &["mv", "rd-from", "rd-to"]);
        std::fs::remove_file(root.join("rd-to")).unwrap();
        std::fs::remove_file(root.join("t")).unwrap();
        std::os::unix::fs::symlink("wm", root.join("t")).unwrap();
        write("new-ita", "n\n");
        git(root, &["add", "-N", "new-ita"]);
        write("untracked", "u\n");

        let (head, entries) = git_cli::status(root, false).unwrap();
        let base = head.commit.unwrap();
        let of_status =
            tracked_changes(root, &root.join(".git"), &base, StatusChanges::of(&entries)).unwrap();
        let everything = StatusChanges {
            decided: Vec::new(),
            open: vec![PathBuf::from(".")],
            worktree_only: false,
            gitlink: false,
        };
        let of_git = tracked_changes(root, &root.join(".git"), &base, everything).unwrap();
        assert!(of_git.len() >= 12, "{of_git:#?}");
        assert_eq!(of_status, of_git);
        // Only the paths changed on both sides (and the intent-to-add one) were left to git.
        let open = StatusChanges::of(&entries).open;
        assert_eq!(
            open,
            ["mm", "mm-back", "new-ita"].map(PathBuf::from),
            "{entries:#?}"
        );
    }

    /// The submodules a capture records are those libgit2 lists from `.gitmodules`, the index and
    /// HEAD, also when the walk of HEAD's tree is skipped: a gitlink in the index alone (no
    /// `.gitmodules`), then in HEAD alone (removed from the index), then none.
    #[test]
    fn submodules_are_recorded_from_the_index_and_head_without_gitmodules() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("f"), "f\n").unwrap();
        git(root, &["add", "f"]);
        git(root, &["commit", "-qm", "f"]);
        let head = String::from_utf8(
            git_cli::command(root)
                .args(["rev-parse", "HEAD"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let cacheinfo = format!("160000,{},sub", head.trim());
        git(root, &["update-index", "--add", "--cacheinfo", &cacheinfo]);
        let libgit2 = || {
            let mut s = Snapshot::empty();
            read_submodules(&Repository::open(root).unwrap(), &mut s).unwrap();
            s.submodules
        };
        let in_index = capture(root).submodules;
        assert_eq!(in_index.len(), 1, "{in_index:#?}");
        assert_eq!(in_index, libgit2());
        git(root, &["commit", "-qm", "gitlink"]);
        git(root, &["rm", "-q", "--cached", "sub"]);
        let in_head = capture(root).submodules;
        assert_eq!(in_head.len(), 1, "{in_head:#?}");
        assert_eq!(in_head, libgit2());
        git(root, &["commit", "-qm", "no gitlink"]);
        assert!(capture(root).submodules.is_empty());
        assert!(libgit2().is_empty());
    }
}
