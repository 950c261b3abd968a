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

use super::doc::{
    CaptureMethod, Dirty, NestedRepository, Snapshot, StatusLine, SubmoduleState, UncheckedPath,
    UntrackedFile,
};
use super::git_cli::{self, GitError, Location};
use crate::digest::{sha256_bytes, sha256_file};

/// Untracked files larger than this many bytes (16 MiB) are recorded in provenance.json with
/// their size and SHA-256 but left out of working-tree.patch (`in-patch: false`), with a warning.
pub const UNTRACKED_PATCH_LIMIT_BYTES: u64 = 16 * 1024 * 1024;

/// Most bytes of untracked files working-tree.patch holds in all (64 MiB): past it, the files
/// that follow (in path order) are recorded like the files over [`UNTRACKED_PATCH_LIMIT_BYTES`],
/// by size and sha256 in provenance.json only, with a warning. The capture holds the patch in
/// memory, so this bounds what untracked files add to the runner's memory.
pub const PATCH_TOTAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Marks the untracked files past [`PATCH_TOTAL_LIMIT_BYTES`] (their sizes summed in path order)
/// as left out of the patch.
pub(super) fn limit_patch_total(untracked: &mut [UntrackedFile]) {
    let mut total = 0u64;
    for u in untracked.iter_mut().filter(|u| u.in_patch) {
        let size = u.size_bytes.unwrap_or(0);
        if total + size > PATCH_TOTAL_LIMIT_BYTES {
            u.in_patch = false;
        } else {
            total += size;
        }
    }
}

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
    capture_with(start, exclude, None)
}

/// The after-run capture compared with `before` for drift: like [`capture_excluding`], except
/// that when HEAD, every status entry (letters, content SHA-256, mode) and the untracked files are
/// the same as in `before` (taken by the same method), the patch is not computed again: it is
/// `before`'s, since `git diff HEAD` is then the same bytes. Saves the diff's cost (binary deltas
/// above all) on the common case of an experiment that leaves the tree alone. Needs `before`'s
/// patch bytes: the runner releases them during the runs and reads them back from the bundle
/// ([`Snapshot::with_patch`]).
pub fn capture_after(start: &Path, exclude: &[&Path], before: &Snapshot) -> Snapshot {
    capture_with(start, exclude, Some(before))
}

fn capture_with(start: &Path, exclude: &[&Path], before: Option<&Snapshot>) -> Snapshot {
    let fallback = match git_cli::available() {
        Ok(()) => {
            let mut snap = Snapshot::empty();
            match by_git_cli(start, exclude, before, &mut snap) {
                Ok(()) => {
                    finish(&mut snap);
                    return snap;
                }
                Err(e) => format!("git could not read the repository ({e}); libgit2 used instead"),
            }
        }
        Err(GitError::NotFound) => "git is not on PATH".to_owned(),
        Err(e) => format!("git cannot be run ({e})"),
    };
    let mut snap = Snapshot::empty();
    super::git_lib::capture(start, exclude, &fallback, &mut snap);
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
    let head = git_cli::head(&root)?;
    apply_head(snap, &head);
    snap.operation = operation(&git_dir).map(str::to_owned);
    let excluded = relative_exclusions(&root, exclude);
    snap.excluded = excluded
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();

    // The tracked diff (the slow part: binary deltas) runs in its own thread while status is
    // read, the changed files hashed, git2 consulted and the untracked files diffed. The
    // after-run capture first checks whether it is needed at all.
    let base = match (&head.commit, head.unborn) {
        (Some(commit), _) => Some(commit.clone()),
        (None, true) => Some(git_cli::empty_tree(&root)?),
        (None, false) => None,
    };
    let reuse = before.filter(|b| b.capture_method == Some(CaptureMethod::GitCli));
    let (tracked, untracked) = std::thread::scope(|s| -> Result<_, GitError> {
        let diff = base
            .as_ref()
            .filter(|_| reuse.is_none())
            .map(|base| s.spawn(|| git_cli::diff_tracked(&root, base)));
        let entries = git_cli::status(&root)?;
        record_entries(&root, &excluded, entries, snap, NESTED_DEPTH);
        snap.dirty = if snap.status.is_empty() {
            Dirty::Clean
        } else {
            Dirty::Dirty
        };
        read_with_git2(&git_dir, &root, snap);
        limit_patch_total(&mut snap.untracked);
        let reused = reuse.is_some_and(|b| same_tree_record(b, snap));
        let untracked = (base.is_some() && !reused).then(|| {
            let new_files: Vec<&str> = snap
                .untracked
                .iter()
                .filter(|u| u.in_patch)
                .map(|u| u.path.as_str())
                .collect();
            git_cli::diff_untracked(&root, &new_files)
        });
        let tracked = match diff {
            Some(handle) => Some(handle.join().expect("the git diff thread does not panic")),
            None if base.is_some() && !reused => {
                Some(git_cli::diff_tracked(&root, base.as_deref().unwrap_or("HEAD")))
            }
            None => None,
        };
        Ok((tracked, untracked))
    })?;

    match (tracked, untracked) {
        (Some(tracked), Some(untracked)) => {
            let mut patch = tracked.unwrap_or_else(|e| {
                snap.errors.push(format!("working-tree.patch: {e}"));
                Vec::new()
            });
            match untracked {
                Ok(p) => patch.extend_from_slice(&p),
                Err(e) => snap
                    .errors
                    .push(format!("working-tree.patch: untracked files left out: {e}")),
            }
            snap.patch_sha256 = sha256_bytes(&patch);
            snap.patch = patch;
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

/// Submodules and index bits through git2, opened at the git folder git named with git's working
/// tree (libgit2 would pick another one for a `.git` file); what fails goes to `errors`.
fn read_with_git2(git_dir: &Path, root: &Path, snap: &mut Snapshot) {
    match Repository::open(git_dir).and_then(|r| r.set_workdir(root, false).map(|()| r)) {
        Ok(repo) => {
            if let Err(e) = read_submodules(&repo, snap) {
                snap.errors.push(format!("submodules: {}", e.message()));
            }
            match index_bits(&repo, root) {
                Ok(bits) => snap.unchecked = bits.unchecked,
                Err(e) => snap.errors.push(format!(
                    "skip-worktree and assume-unchanged bits not read: {}",
                    e.message()
                )),
            }
        }
        Err(e) => {
            snap.errors.push(format!(
                "libgit2 cannot open {} ({}): submodules and index bits not recorded",
                git_dir.display(),
                e.message()
            ));
        }
    }
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
        if untracked && (is_excluded(Path::new(&e.path), excluded) || bundles.contains(Path::new(&e.path))) {
            continue;
        }
        let rel = e.path.trim_end_matches('/');
        let full = root.join(rel);
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
                sha256: facts.sha256.clone(),
                size_bytes: facts.size,
                in_patch: facts.size.is_none_or(|s| s <= UNTRACKED_PATCH_LIMIT_BYTES),
            });
        }
        snap.status.push(StatusLine {
            code: e.code,
            path: e.path,
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
    let result = (|| -> Result<Vec<git_cli::Entry>, GitError> {
        let head = git_cli::head(dir)?;
        nested.head = head.commit;
        nested.branch = head.branch;
        git_cli::status(dir)
    })();
    match result {
        Ok(entries) => {
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
            nested.dirty = Dirty::Unknown;
            nested.reason = Some(e.to_string());
            out.push(nested);
        }
    }
}

/// `before` and `now` record the same HEAD, status entries (letters, paths, content, modes) and
/// untracked files, and `before` holds its patch bytes: then `git diff HEAD` plus the untracked
/// files gives the same patch.
fn same_tree_record(before: &Snapshot, now: &Snapshot) -> bool {
    before.head == now.head
        && before.reason == now.reason
        && before.status == now.status
        && before.untracked == now.untracked
        && before.excluded == now.excluded
        && before.errors.is_empty()
        // The bytes are there (not a capture read back from provenance.json, which has none).
        && sha256_bytes(&before.patch) == before.patch_sha256
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
    for u in snap.untracked.iter().filter(|u| !u.in_patch) {
        let size = u.size_bytes.unwrap_or(0);
        let why = if size > UNTRACKED_PATCH_LIMIT_BYTES {
            format!("over the {UNTRACKED_PATCH_LIMIT_BYTES}-byte limit for one file")
        } else {
            format!("past the {PATCH_TOTAL_LIMIT_BYTES}-byte limit for all untracked files together")
        };
        snap.warnings.push(format!(
            "untracked file {} ({size} bytes) is {why}: recorded with its size and sha256 in provenance.json, left out of working-tree.patch (`rerun --at-recorded-revision` cannot rebuild it)",
            u.path,
        ));
    }
    if snap.repo.is_some() {
        snap.untracked_patch_limit_bytes = Some(UNTRACKED_PATCH_LIMIT_BYTES);
    }
}

/// The operation in progress in the git folder `git_dir`, by the marker files git itself reads
/// for `git status`: `am` (rebase-apply/applying), `rebase` (rebase-merge/ or rebase-apply/),
/// `merge` (MERGE_HEAD), `cherry-pick` (CHERRY_PICK_HEAD), `revert` (REVERT_HEAD), `bisect`
/// (BISECT_LOG); the first found in that order. `None` when there is none.
pub(super) fn operation(git_dir: &Path) -> Option<&'static str> {
    let has = |name: &str| git_dir.join(name).exists();
    [
        ("rebase-apply/applying", "am"),
        ("rebase-merge", "rebase"),
        ("rebase-apply", "rebase"),
        ("MERGE_HEAD", "merge"),
        ("CHERRY_PICK_HEAD", "cherry-pick"),
        ("REVERT_HEAD", "revert"),
        ("BISECT_LOG", "bisect"),
    ]
    .into_iter()
    .find(|(marker, _)| has(marker))
    .map(|(_, name)| name)
}

/// What the working tree holds at a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct FileFacts {
    /// SHA-256 of the file's bytes, or of a symlink's target; `None` when absent, a folder or
    /// unreadable.
    pub sha256: Option<String>,
    /// git's mode: `100644`, `100755` or `120000`; `None` when absent or a folder.
    pub mode: Option<String>,
    /// Size in bytes (of the target for a symlink).
    pub size: Option<u64>,
}

/// [`FileFacts`] of `path` (lstat, then the file streamed through SHA-256, or `readlink`).
pub(super) fn file_facts(path: &Path) -> FileFacts {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return FileFacts::default();
    };
    if meta.file_type().is_symlink() {
        let Ok(target) = std::fs::read_link(path) else {
            return FileFacts::default();
        };
        let bytes = target.as_os_str().as_bytes();
        return FileFacts {
            sha256: Some(sha256_bytes(bytes)),
            mode: Some("120000".to_owned()),
            size: Some(bytes.len() as u64),
        };
    }
    if !meta.is_file() {
        return FileFacts::default();
    }
    let exec = meta.permissions().mode() & 0o111 != 0;
    FileFacts {
        sha256: sha256_file(path).ok(),
        mode: Some(if exec { "100755" } else { "100644" }.to_owned()),
        size: Some(meta.len()),
    }
}

/// The `exclude` paths that lie inside `root`, relative to it (tried as given and canonicalised,
/// since the root may be reached through a symlink).
pub(super) fn relative_exclusions(root: &Path, exclude: &[&Path]) -> Vec<PathBuf> {
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

pub(super) fn is_excluded(path: &Path, excluded: &[PathBuf]) -> bool {
    excluded.iter().any(|e| path.starts_with(e))
}

/// The file that marks a bundle folder (DESIGN 5; `bundle::files::BUNDLE`, which this module
/// cannot name: bundle/ depends on provenance/, not the other way).
const BUNDLE_FILE: &str = "bundle.json";

/// Bytes of a bundle.json read to recognise it: its first keys are `bundle-format` and
/// `hwr-exp-version`.
const BUNDLE_HEAD_BYTES: usize = 4096;

/// Whether the folder `dir` holds a bundle.json that hwr-exp wrote (a regular file, not followed
/// through a symlink, whose opening names `"bundle-format"` and `"hwr-exp-version"`).
pub fn is_bundle_folder(dir: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(BUNDLE_FILE);
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::with_capacity(BUNDLE_HEAD_BYTES);
    if file
        .take(BUNDLE_HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .is_err()
    {
        return false;
    }
    let head = String::from_utf8_lossy(&head);
    head.trim_start().starts_with('{')
        && head.contains("\"bundle-format\"")
        && head.contains("\"hwr-exp-version\"")
}

/// The untracked bundle folders of a working tree: every untracked path inside a folder that
/// holds a bundle.json hwr-exp wrote ([`is_bundle_folder`]) is left out of the record, wherever
/// the folder is (`results/` of an earlier run from another folder, a copied bundle). A bundle
/// that is committed is tracked content and recorded as such.
#[derive(Debug)]
pub(super) struct BundleFolders {
    root: PathBuf,
    /// Folders (relative to `root`) looked at, and whether each is a bundle folder.
    known: std::collections::HashMap<PathBuf, bool>,
    /// The bundle folders that held untracked paths.
    found: std::collections::BTreeSet<PathBuf>,
}

impl BundleFolders {
    pub(super) fn new(root: &Path) -> BundleFolders {
        BundleFolders {
            root: root.to_path_buf(),
            known: std::collections::HashMap::new(),
            found: std::collections::BTreeSet::new(),
        }
    }

    /// Whether the untracked `rel` (relative to the root; a folder may end in `/`) is or lies in
    /// a bundle folder below the root.
    pub(super) fn contains(&mut self, rel: &Path) -> bool {
        for dir in rel.ancestors() {
            if dir.as_os_str().is_empty() {
                break;
            }
            let bundle = match self.known.get(dir) {
                Some(&b) => b,
                None => {
                    let b = is_bundle_folder(&self.root.join(dir));
                    self.known.insert(dir.to_path_buf(), b);
                    b
                }
            };
            if bundle {
                self.found.insert(dir.to_path_buf());
                return true;
            }
        }
        false
    }

    /// The bundle folders found so far (relative to the root).
    pub(super) fn found(&self) -> impl Iterator<Item = &PathBuf> {
        self.found.iter()
    }
}

/// Submodules registered in `.gitmodules` with their state (git2: submodule list and status).
pub(super) fn read_submodules(repo: &Repository, snap: &mut Snapshot) -> Result<(), git2::Error> {
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
            recorded_commit: sm.head_id().map(|o| o.to_string()),
            checked_out_commit: sm.workdir_id().map(|o| o.to_string()),
            dirty,
        });
    }
    snap.submodules.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(())
}

/// `assume-unchanged` flag of an index entry (`CE_VALID`, in `flags`).
const ASSUME_UNCHANGED: u16 = 0x8000;
/// `skip-worktree` flag of an index entry (in `flags_extended`).
const SKIP_WORKTREE: u16 = 1 << 14;
/// `intent-to-add` flag of an index entry (in `flags_extended`).
const INTENT_TO_ADD: u16 = 1 << 13;

/// Index entries whose bits change what git reports.
#[derive(Debug, Default)]
pub(super) struct IndexBits {
    /// Entries with the skip-worktree or assume-unchanged bit whose file exists in the working
    /// tree: git does not look at them, so their content is recorded here.
    pub unchecked: Vec<UncheckedPath>,
    /// Paths with skip-worktree or assume-unchanged bits (also absent ones).
    pub hidden: Vec<String>,
    /// Paths added with `git add -N`.
    pub intent_to_add: Vec<String>,
}

/// Reads the index bits of `repo` (git2 index, one lstat per flagged entry).
pub(super) fn index_bits(repo: &Repository, root: &Path) -> Result<IndexBits, git2::Error> {
    let index = repo.index()?;
    let mut bits = IndexBits::default();
    for entry in index.iter() {
        let skip = entry.flags_extended & SKIP_WORKTREE != 0;
        let assume = entry.flags & ASSUME_UNCHANGED != 0;
        let path = String::from_utf8_lossy(&entry.path).into_owned();
        if entry.flags_extended & INTENT_TO_ADD != 0 {
            bits.intent_to_add.push(path.clone());
        }
        if !skip && !assume {
            continue;
        }
        let facts = file_facts(&root.join(&path));
        if facts.mode.is_some() {
            bits.unchecked.push(UncheckedPath {
                path: path.clone(),
                bit: if skip { "skip-worktree" } else { "assume-unchanged" }.to_owned(),
                sha256: facts.sha256,
            });
        }
        bits.hidden.push(path);
    }
    Ok(bits)
}
