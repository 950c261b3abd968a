//! Facts of a working tree both capture methods record the same way: the sizes and limits of
//! changed files, file contents (SHA-256, mode), exclusions, bundle folders, the operation in
//! progress, and what git2 reads of submodules and index bits. Used by [`super::git`] (the
//! `git-cli` method) and `super::git_lib` (the `libgit2` method); imports neither.

use std::path::{Path, PathBuf};

use git2::Repository;

use super::doc::{Snapshot, SubmoduleState, TrackedLeftOut, UncheckedPath, UntrackedFile};
use super::patch::{LimitCounter, PatchLimits};
use crate::digest::{sha256_bytes, sha256_file};
use crate::names::NameBytes;

/// A changed tracked file as `git diff --raw` shows it, with the sizes the limits count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TrackedChange {
    /// Path relative to the root, readable.
    pub path: String,
    /// The exact bytes of `path` when they are not UTF-8.
    pub raw: Option<NameBytes>,
    /// The `--raw` letter (`M`, `D`, `A`, `T`).
    pub change: String,
    /// Size of the HEAD blob; `None` when HEAD has none.
    pub head_size: Option<u64>,
    /// Size of the working-tree content; `None` when absent.
    pub size: Option<u64>,
    /// Whether working-tree.patch holds it.
    pub in_patch: bool,
}

impl TrackedChange {
    /// What the limits count: the larger of the two sizes (the patch may hold either whole).
    pub(super) fn counted(&self) -> u64 {
        self.head_size.unwrap_or(0).max(self.size.unwrap_or(0))
    }

    /// The path's exact bytes as a relative path.
    pub(super) fn fs_path(&self) -> PathBuf {
        crate::names::path_of(&self.path, self.raw.as_ref())
    }
}

/// Size of the working-tree content at `path` without reading it (a symlink's target length);
/// `None` when absent or not a file.
pub(super) fn size_on_disk(path: &Path) -> Option<u64> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        return std::fs::read_link(path).ok().map(|t| t.as_os_str().len() as u64);
    }
    meta.is_file().then_some(meta.len())
}

/// Decides, in the patch's order, which tracked changes go into working-tree.patch; returns the
/// counter for the untracked files that follow ([`decide_untracked`]).
pub(super) fn decide_tracked(limits: PatchLimits, tracked: &mut [TrackedChange]) -> LimitCounter {
    let mut counter = limits.counter();
    for t in tracked.iter_mut() {
        t.in_patch = counter.take(t.counted());
    }
    counter
}

/// Decides, after the tracked changes, which untracked files go into working-tree.patch.
pub(super) fn decide_untracked(mut counter: LimitCounter, untracked: &mut [UntrackedFile]) {
    for u in untracked.iter_mut() {
        // An unreadable file (no size) goes in as git decides; it is counted as empty.
        u.in_patch = counter.take(u.size_bytes.unwrap_or(0));
    }
}

/// Records the tracked changes left out of the patch in `snap.tracked_left_out`, with the
/// working-tree sha256 (the status line's when it has one) and mode.
pub(super) fn record_tracked_left_out(root: &Path, tracked: &[TrackedChange], snap: &mut Snapshot) {
    for t in tracked.iter().filter(|t| !t.in_patch) {
        let status = snap
            .status
            .iter()
            .find(|s| s.path == t.path && s.path_bytes == t.raw && s.sha256.is_some());
        let (sha256, mode) = match status {
            Some(s) => (s.sha256.clone(), s.mode.clone()),
            None if t.size.is_some() => {
                let facts = file_facts(&root.join(t.fs_path()));
                (facts.sha256, facts.mode)
            }
            None => (None, None),
        };
        snap.tracked_left_out.push(TrackedLeftOut {
            path: t.path.clone(),
            path_bytes: t.raw.clone(),
            change: t.change.clone(),
            size_bytes: t.size,
            sha256,
            mode,
            head_size_bytes: t.head_size,
            in_patch: false,
        });
    }
}

/// The sizes of the objects `oids` as the headers in the object store of the git folder `git_dir`
/// give them (libgit2: loose objects and packs, the alternates they name; no content is
/// inflated), in the same order; `None` for an id of zeros or a missing object. `None` as a whole
/// when libgit2 cannot open the store or an id is not a SHA-1 id (libgit2 reads SHA-1 stores
/// only): git is asked then. The store is opened by its folder, so repositories libgit2 refuses
/// for their configuration (reftable references) are read too.
pub(super) fn object_sizes(git_dir: &Path, oids: &[&str]) -> Option<Vec<Option<u64>>> {
    let zero = |o: &str| o.bytes().all(|b| b == b'0');
    if oids.iter().any(|o| !zero(o) && o.len() != 40) {
        return None;
    }
    // A linked worktree's git folder names the common one, which holds the objects.
    let common = std::fs::read_to_string(git_dir.join("commondir")).map_or_else(
        |_| git_dir.to_path_buf(),
        |c| git_dir.join(c.trim_end_matches('\n')),
    );
    let objects = common.join("objects");
    let odb = git2::Odb::new().ok()?;
    odb.add_disk_alternate(objects.to_str()?).ok()?;
    oids.iter()
        .map(|o| {
            if zero(o) {
                return Some(None);
            }
            let id = git2::Oid::from_str(o).ok()?;
            Some(odb.read_header(id).ok().map(|(size, _)| size as u64))
        })
        .collect()
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

/// SHA-256 (hex) of the content at `path` as provenance.json records it: a file's bytes, a
/// symlink's target; `None` when absent, a folder or unreadable.
pub fn content_sha256(path: &Path) -> Option<String> {
    file_facts(path).sha256
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
    /// Some entry is a gitlink (a submodule's commit).
    pub gitlink: bool,
}

/// Reads the index bits of `repo` (its git folder's `index` file, parsed by gix-index, split
/// indexes too, without checking its trailing checksum, as git reads it outside `git fsck`:
/// libgit2's parse, with its SHA-1, cost as much as the rest of a capture's in-process work; one
/// lstat per flagged entry); pushes every entry's path to `paths` when given. The object format is the
/// configuration's `extensions.objectFormat` (SHA-1 without it). No index file: no entries.
///
/// # Errors
/// The configuration cannot be read, or the index cannot be read or parsed (gix-index's error
/// as a [`git2::Error`] message naming the file).
pub(super) fn index_bits(
    repo: &Repository,
    root: &Path,
    mut paths: Option<&mut super::mark::Paths>,
) -> Result<IndexBits, git2::Error> {
    use gix_index::entry::{Flags, Mode};
    let sha256 = repo
        .config()?
        .get_string("extensions.objectformat")
        .is_ok_and(|f| f.eq_ignore_ascii_case("sha256"));
    let kind = if sha256 {
        gix_hash::Kind::Sha256
    } else {
        gix_hash::Kind::Sha1
    };
    let file = repo.path().join("index");
    let index = gix_index::File::at_or_default(&file, kind, true, Default::default())
        .map_err(|e| git2::Error::from_str(&format!("{}: {e}", file.display())))?;
    let mut bits = IndexBits::default();
    for entry in index.entries() {
        let bytes: &[u8] = entry.path(&index);
        if let Some(paths) = paths.as_deref_mut() {
            paths.push(bytes);
        }
        let skip = entry.flags.contains(Flags::SKIP_WORKTREE);
        let assume = entry.flags.contains(Flags::ASSUME_VALID);
        let ita = entry.flags.contains(Flags::INTENT_TO_ADD);
        bits.gitlink |= entry.mode == Mode::COMMIT;
        if !skip && !assume && !ita {
            continue;
        }
        let path = String::from_utf8_lossy(bytes).into_owned();
        if ita {
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
