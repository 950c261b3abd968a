//! The after-run check's shortcut: proves, in-process and without git, that nothing `git status`
//! would report has changed since the capture before the runs, so that the after-run capture can
//! be the before capture again (with its own time) instead of a second `git status`.
//!
//! The proof rests on the inode change time (ctime): the kernel sets it to the current time on
//! every change of a file's content, mode, links or name and of a directory's entries, and no
//! system call sets it back. A file or directory whose ctime is older than the start of the
//! before capture (by a margin covering the file system's timestamp granularity and the kernel's
//! coarse clock) has not changed since then, so `git status` reads the same there now as it did
//! then. Checked: the index, HEAD (resolved through libgit2), the files git reads its
//! configuration, excludes and attributes from, every tracked path, every path the status listed,
//! and every directory `git status` looked into (those holding tracked or listed files, and,
//! found by reading them, their subdirectories that git did not report ignored), whose entries
//! are then the same, so no file appeared or vanished. Anything not covered (a file system not
//! known to keep local ctimes, a mount point inside the tree, submodules, nested repositories,
//! index bits, a git operation in progress, `core.fsmonitor`, configuration includes, a change
//! within the margin, an unreadable file) means "not proven": the full capture runs.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::doc::Snapshot;
use super::mark::Mark;
use super::mark::{NLINK_COUNTS_SUBFOLDERS, local, watched};

/// Nothing `git status` would report in the working tree at `root` (git folder `git_dir`) has
/// changed since `before` was captured with the git CLI, `excluded` (relative) being its
/// exclusions again: see the module docs. `false` whenever that cannot be proven.
pub(super) fn unchanged(root: &Path, git_dir: &Path, excluded: &[String], before: &Snapshot) -> bool {
    let Some(mark) = before.quiet.0.as_deref() else {
        return false;
    };
    let Some(tracked) = &mark.tracked else {
        return false;
    };
    let tracked: Vec<&[u8]> = tracked.iter().collect();
    let tracked = tracked.as_slice();
    let simple = before.errors.is_empty()
        && before.head.is_some()
        && before.operation.is_none()
        && before.submodules.is_empty()
        && before.nested_repositories.is_empty()
        && before.unchecked.is_empty()
        && before.unknown_paths.is_empty()
        && before.excluded == excluded
        && !mark.gitlink
        && (before.patch.has_file() || before.patch_sha256 == crate::digest::sha256_bytes(b""));
    if !(simple && local(root)) {
        return false;
    }
    // Two halves of the work on two threads: the tracked files cost most (one `lstat` each).
    let (first, second) = tracked.split_at(tracked.len() / 2);
    let settings =
        || !git_environment() && !mount_below(root) && config_and_head_unchanged(git_dir, before, mark);
    if tracked.len() < 1000 {
        return settings()
            && files_unchanged(root, before, mark, tracked, true)
            && directories_unchanged(root, before, mark, tracked);
    }
    std::thread::scope(|s| {
        let other = s.spawn(|| files_unchanged(root, before, mark, first, false) && settings());
        let here = files_unchanged(root, before, mark, second, true)
            && directories_unchanged(root, before, mark, tracked);
        other.join().unwrap_or(false) && here
    })
}

/// `GIT_CONFIG_GLOBAL` or `GIT_CONFIG_SYSTEM` (which the git processes of a capture inherit,
/// [`super::git_cli::scrub_environment`]) names a configuration file other than `/dev/null`: git
/// reads it, libgit2's configuration does not (nor its includes, nor the excludes file it names),
/// so nothing is proven. (`GIT_CONFIG_NOSYSTEM` and `GIT_ATTR_NOSYSTEM` make git read less than
/// libgit2 does: the check then looks at more files than git reads.)
fn git_environment() -> bool {
    ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"]
        .iter()
        .filter_map(std::env::var_os)
        .any(|file| file != "/dev/null")
}

/// A mount point lies inside the working tree at `root` now (`/proc/self/mountinfo`): a bind
/// mount changes what a path shows without changing any ctime. Unreadable: `true`.
fn mount_below(root: &Path) -> bool {
    let Ok(mounts) = procfs::process::Process::myself().and_then(|p| p.mountinfo()) else {
        return true;
    };
    mounts
        .into_iter()
        .any(|m| m.mount_point != root && m.mount_point.starts_with(root))
}

/// The watched files are unchanged, the configuration names no include, no fsmonitor, and
/// excludes and attributes files that are unchanged, and HEAD resolves as before.
fn config_and_head_unchanged(git_dir: &Path, before: &Snapshot, mark: &Mark) -> bool {
    if !watched(git_dir).iter().all(|p| mark.watched_unchanged(p)) {
        return false;
    }
    let Ok(repo) = git2::Repository::open(git_dir) else {
        return false;
    };
    let Ok(config) = repo.config() else {
        return false;
    };
    let Ok(entries) = config.entries(None) else {
        return false;
    };
    let mut named = Vec::new();
    let mut ok = true;
    entries
        .for_each(|e| {
            let name = e.name().unwrap_or_default().to_ascii_lowercase();
            if name.starts_with("include.") || name.starts_with("includeif.") || name == "core.fsmonitor" {
                ok = false;
            } else if name == "core.excludesfile" || name == "core.attributesfile" {
                match config.get_path(&name) {
                    Ok(path) => named.push(path),
                    Err(_) => ok = false,
                }
            }
        })
        .is_ok()
        && ok
        && named.iter().all(|p| mark.path_settled(p).unwrap_or(false))
        && head_unchanged(&repo, before)
}

/// HEAD resolves through libgit2 to `before`'s commit, on `before`'s branch (or detached).
fn head_unchanged(repo: &git2::Repository, before: &Snapshot) -> bool {
    let Ok(head) = repo.head() else { return false };
    let commit = head.peel_to_commit().ok().map(|c| c.id().to_string());
    let detached = repo.head_detached().unwrap_or(true);
    let branch = head
        .name()
        .ok()
        .and_then(|n| n.strip_prefix("refs/heads/"))
        .map(str::to_owned);
    commit.is_some()
        && commit == before.head
        && detached == before.detached
        && (detached || branch == before.branch)
}

/// Every path of `tracked` (and with `with_listed`, every path the status listed) is settled, or
/// missing (its folder, checked by [`directories_unchanged`], then says it was missing before).
/// Each path is looked up from its folder, opened once per run of paths in it (a lookup from `/`
/// costs as much again).
fn files_unchanged(
    root: &Path,
    before: &Snapshot,
    mark: &Mark,
    tracked: &[&[u8]],
    with_listed: bool,
) -> bool {
    let Ok(root_fd) = rustix::fs::open(
        root,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    let listed: Vec<&[u8]> = before
        .status
        .iter()
        .filter(|_| with_listed)
        .map(|s| crate::names::bytes_of(&s.path, s.path_bytes.as_ref()))
        .map(|p| p.strip_suffix(b"/").unwrap_or(p))
        .collect();
    let settled = |paths: &mut dyn Iterator<Item = &[u8]>| -> bool {
        let mut folder: Option<(&[u8], Option<rustix::fd::OwnedFd>)> = None;
        for rel in paths {
            let (parent, name) = match rel.iter().rposition(|&b| b == b'/') {
                Some(slash) => (&rel[..slash], &rel[slash + 1..]),
                None => (&rel[..0], rel),
            };
            if folder.as_ref().is_none_or(|(p, _)| *p != parent) {
                let fd = if parent.is_empty() {
                    None
                } else {
                    match rustix::fs::openat(
                        &root_fd,
                        OsStr::from_bytes(parent),
                        rustix::fs::OFlags::PATH
                            | rustix::fs::OFlags::DIRECTORY
                            | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    ) {
                        Ok(fd) => Some(fd),
                        // The folder is gone or no folder: so is the path.
                        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {
                            folder = Some((parent, None));
                            continue;
                        }
                        Err(_) => return false,
                    }
                };
                folder = Some((parent, fd));
            }
            let Some((_, fd)) = &folder else { return false };
            let at = match fd {
                Some(fd) => {
                    rustix::fs::statat(fd, OsStr::from_bytes(name), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                }
                None if parent.is_empty() => rustix::fs::statat(
                    &root_fd,
                    OsStr::from_bytes(name),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                ),
                None => continue,
            };
            match at {
                #[allow(clippy::unnecessary_cast, reason = "the field types differ between targets")]
                Ok(st) => {
                    if !mark.settled_at(st.st_ctime as i64, st.st_ctime_nsec as i64) {
                        return false;
                    }
                }
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {}
                Err(_) => return false,
            }
        }
        true
    };
    settled(&mut tracked.iter().copied().chain(listed.iter().copied()))
}

/// The folders `git status` looked into are settled (so their entries are those it saw) and on
/// the root's device: the root, every folder of a tracked or listed path, and, recursively,
/// their subfolders not reported ignored, not excluded. A `.git` below the root (a nested
/// repository or submodule that is not ignored) is not handled.
fn directories_unchanged(root: &Path, before: &Snapshot, mark: &Mark, tracked: &[&[u8]]) -> bool {
    let Ok(root_dev) = std::fs::metadata(root).map(|m| m.dev()) else {
        return false;
    };
    let listed = before
        .status
        .iter()
        .map(|s| crate::names::bytes_of(&s.path, s.path_bytes.as_ref()));
    let mut known: HashSet<&[u8]> = HashSet::new();
    known.insert(b"");
    for path in tracked.iter().copied().chain(listed) {
        let path = path.strip_suffix(b"/").unwrap_or(path);
        let mut end = path.len();
        while let Some(slash) = path[..end].iter().rposition(|&b| b == b'/') {
            if !known.insert(&path[..slash]) {
                break;
            }
            end = slash;
        }
    }
    let ignored: HashSet<&[u8]> = mark.ignored_dirs.iter().map(Vec::as_slice).collect();
    let excluded = |rel: &[u8]| {
        before.excluded.iter().any(|x| {
            let x = x.as_bytes();
            rel.starts_with(x) && (rel.len() == x.len() || rel[x.len()] == b'/')
        })
    };
    // Inside an ignored folder git looks at the tracked files alone.
    let under_ignored = |rel: &[u8]| {
        !ignored.is_empty()
            && (0..=rel.len())
                .filter(|&i| i == rel.len() || rel[i] == b'/')
                .any(|i| ignored.contains(&rel[..i]))
    };
    // Phase 1: the known folders, then the ignored and excluded ones, that are folders now.
    let mut present: Vec<(&[u8], u64)> = Vec::new();
    for &rel in &known {
        let meta = match std::fs::symlink_metadata(root.join(OsStr::from_bytes(rel))) {
            Ok(meta) => meta,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue;
            }
            Err(_) => return false,
        };
        if !mark.settled(&meta) {
            return false;
        }
        if meta.is_dir() {
            if meta.dev() != root_dev {
                return false;
            }
            present.push((rel, meta.nlink()));
        }
    }
    // Phase 2: a folder whose link count says it has no subfolder but those known, ignored or
    // excluded (2 + subfolders on the file systems of `NLINK_COUNTS_SUBFOLDERS`) holds no folder
    // git looked into unseen; the others are read, and the folders found in them too.
    let counts = rustix::fs::statfs(root).is_ok_and(|s| NLINK_COUNTS_SUBFOLDERS.contains(&(s.f_type as u64)));
    let mut subfolders: std::collections::HashMap<&[u8], u64> = std::collections::HashMap::new();
    if counts {
        let others = mark
            .ignored_dirs
            .iter()
            .map(Vec::as_slice)
            .chain(before.excluded.iter().map(|x| x.as_bytes()))
            .chain([b".git".as_slice()])
            .filter(|rel| !known.contains(rel))
            .filter(|rel| {
                std::fs::symlink_metadata(root.join(OsStr::from_bytes(rel))).is_ok_and(|m| m.is_dir())
            });
        // Each folder once (an ignored folder may be excluded too): counting one twice could
        // hide an unknown one.
        let folders: HashSet<&[u8]> = present
            .iter()
            .map(|(rel, _)| *rel)
            .filter(|r| !r.is_empty())
            .chain(others)
            .collect();
        for rel in folders {
            let parent = rel
                .iter()
                .rposition(|&b| b == b'/')
                .map_or(&rel[..0], |slash| &rel[..slash]);
            *subfolders.entry(parent).or_default() += 1;
        }
    }
    let mut queue: Vec<Vec<u8>> = Vec::new();
    for (rel, nlink) in present {
        if under_ignored(rel) {
            continue;
        }
        if counts && nlink == 2 + subfolders.get(rel).copied().unwrap_or(0) {
            let dir = root.join(OsStr::from_bytes(rel));
            let rules_settled = [".gitignore", ".gitattributes"].iter().all(|f| {
                match std::fs::symlink_metadata(dir.join(f)) {
                    Ok(meta) => mark.settled(&meta),
                    Err(e) => e.kind() == std::io::ErrorKind::NotFound,
                }
            });
            if !rules_settled {
                return false;
            }
        } else if !list_folder(root, rel, mark, &known, &ignored, &excluded, &mut queue) {
            return false;
        }
    }
    while let Some(rel) = queue.pop() {
        let meta = match std::fs::symlink_metadata(root.join(OsStr::from_bytes(&rel))) {
            Ok(meta) => meta,
            Err(_) => return false,
        };
        if !mark.settled(&meta) || !meta.is_dir() || meta.dev() != root_dev {
            return false;
        }
        if !list_folder(root, &rel, mark, &known, &ignored, &excluded, &mut queue) {
            return false;
        }
    }
    true
}

/// Reads the folder `rel` of `root`: its subfolders neither `known`, `ignored` nor `excluded` go
/// to `queue`; its `.gitignore` and `.gitattributes` must be settled. `false`: a `.git` below the
/// root, a rules file changed, or an unreadable entry.
fn list_folder(
    root: &Path,
    rel: &[u8],
    mark: &Mark,
    known: &HashSet<&[u8]>,
    ignored: &HashSet<&[u8]>,
    excluded: &dyn Fn(&[u8]) -> bool,
    queue: &mut Vec<Vec<u8>>,
) -> bool {
    let Ok(entries) = std::fs::read_dir(root.join(OsStr::from_bytes(rel))) else {
        return false;
    };
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let name = entry.file_name();
        let name = name.as_bytes();
        if name == b".git" {
            if rel.is_empty() {
                continue;
            }
            return false;
        }
        let Ok(kind) = entry.file_type() else { return false };
        if kind.is_dir() {
            let mut child = rel.to_vec();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(name);
            if !known.contains(child.as_slice()) && !ignored.contains(child.as_slice()) && !excluded(&child) {
                queue.push(child);
            }
        } else if matches!(name, b".gitignore" | b".gitattributes")
            && !std::fs::symlink_metadata(entry.path()).is_ok_and(|m| mark.settled(&m))
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::provenance::{capture_after, capture_excluding, capture_limited, differences};

    /// Runs git in `root` (an author set); its stdout. Panics when git fails.
    pub(in crate::provenance) fn git(root: &Path, args: &[&str]) -> String {
        let out = crate::provenance::git_cli::command(root)
            .args(["-c", "user.name=t", "-c", "user.email=t@e.invalid"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The newest ctime of `path` and, for a folder, of everything beneath it (links not followed).
    fn newest_ctime(path: &Path) -> std::time::SystemTime {
        let meta = std::fs::symlink_metadata(path).unwrap();
        let own =
            std::time::UNIX_EPOCH + std::time::Duration::new(meta.ctime() as u64, meta.ctime_nsec() as u32);
        if !meta.is_dir() {
            return own;
        }
        std::fs::read_dir(path)
            .unwrap()
            .map(|e| newest_ctime(&e.unwrap().path()))
            .fold(own, std::cmp::max)
    }

    /// Waits until everything beneath each of `roots` changed longer ago than the check's margin
    /// (three times over), so that a capture started next can prove it unchanged.
    fn settle(roots: &[&Path]) {
        let newest = roots.iter().map(|r| newest_ctime(r)).max().unwrap();
        while std::time::SystemTime::now() < newest + super::super::mark::FINE_MARGIN * 3 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A repository with tracked files in the root and two folders down, a modified file, an
    /// untracked file in the root and an untracked folder, an ignored file and folder, an empty
    /// folder, and a `.gitignore`.
    fn repository(root: &Path) {
        git(root, &["init", "-q", "-b", "main"]);
        write(root, "a.txt", "a\n");
        write(root, "d/b.txt", "b\n");
        write(root, "d/sub/c.txt", "c\n");
        write(root, ".gitignore", "*.log\nbuild/\n");
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "c"]);
        write(root, "d/b.txt", "B\n");
        write(root, "u.txt", "u\n");
        write(root, "u/x/y.txt", "y\n");
        write(root, "run.log", "log\n");
        write(root, "logs/old.log", "log\n");
        write(root, "build/out.o", "o\n");
        write(root, "ign.txt", "ignored by info/exclude\n");
        write(root, ".git/info/exclude", "ign.txt\n");
        std::fs::create_dir(root.join("empty")).unwrap();
    }

    /// Takes the before capture of a settled `repository`, applies `change`, and checks that the
    /// shortcut does not claim "unchanged", that the after capture reports the drift the full
    /// capture reports, and that there is some (`expect_drift`).
    fn check(change: impl FnOnce(&Path), expect_drift: bool) {
        check_set_up(|_| {}, change, expect_drift);
    }

    /// [`check`] of the repository after `set_up`; returns the repository's folder.
    fn check_set_up(
        set_up: impl FnOnce(&Path),
        change: impl FnOnce(&Path),
        expect_drift: bool,
    ) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        repository(root);
        set_up(root);
        settle(&[root]);
        let before = capture_limited(root, &[], Default::default());
        let git_dir = root.join(".git");
        assert!(before.quiet.0.is_some(), "{before:#?}");
        assert!(
            unchanged(root, &git_dir, &before.excluded, &before),
            "the untouched tree is proven unchanged"
        );
        change(root);
        let proven = unchanged(root, &git_dir, &before.excluded, &before);
        let after = capture_after(root, &[], &before);
        let full = capture_excluding(root, &[]);
        let drift = differences(&before, &after);
        assert_eq!(drift, differences(&before, &full));
        assert_eq!(after.status, full.status);
        assert_eq!(after.untracked, full.untracked);
        assert_eq!(after.patch_sha256, full.patch_sha256);
        assert_eq!(after.head, full.head);
        if expect_drift {
            assert!(!proven, "a change was taken for none");
            assert!(!drift.is_empty(), "{after:#?}");
        } else {
            assert!(proven);
            assert!(drift.is_empty(), "{drift:?}");
        }
        tmp
    }

    #[test]
    fn untouched_tree_is_proven_unchanged_without_drift() {
        check(|_| {}, false);
    }

    #[test]
    fn tracked_file_rewritten_with_the_same_size_is_drift() {
        check(|r| write(r, "a.txt", "A\n"), true);
        check(|r| write(r, "d/sub/c.txt", "C\n"), true);
        // The modified file, again with its size.
        check(|r| write(r, "d/b.txt", "b\n"), true);
    }

    #[test]
    fn new_untracked_files_are_drift() {
        check(|r| write(r, "new.txt", "n\n"), true);
        check(|r| write(r, "d/sub/new.txt", "n\n"), true);
        check(|r| write(r, "u/x/new.txt", "n\n"), true);
        check(|r| write(r, "u/new.txt", "n\n"), true);
        check(|r| write(r, "n/m/f.txt", "n\n"), true);
        check(|r| write(r, "empty/f.txt", "n\n"), true);
        // A folder holding ignored files only (git looks into it, lists nothing).
        check(|r| write(r, "logs/new.txt", "n\n"), true);
    }

    #[test]
    fn changed_untracked_file_is_drift() {
        check(|r| write(r, "u.txt", "U\n"), true);
        check(|r| write(r, "u/x/y.txt", "Y\n"), true);
    }

    #[test]
    fn deleted_staged_and_committed_changes_are_drift() {
        check(|r| std::fs::remove_file(r.join("d/sub/c.txt")).unwrap(), true);
        check(|r| drop(git(r, &["add", "d/b.txt"])), true);
        check(|r| drop(git(r, &["commit", "-qam", "next"])), true);
    }

    #[test]
    fn edited_excludes_are_drift() {
        check(|r| write(r, ".git/info/exclude", "# none\n"), true);
        check(|r| write(r, ".gitignore", "build/\n"), true);
    }

    #[test]
    fn mode_link_and_ref_changes_are_drift() {
        use std::os::unix::fs::PermissionsExt;
        let exec = std::fs::Permissions::from_mode(0o755);
        check(|r| std::fs::set_permissions(r.join("a.txt"), exec).unwrap(), true);
        check(
            |r| std::os::unix::fs::symlink("a.txt", r.join("link")).unwrap(),
            true,
        );
        // HEAD's branch moved by a ref write alone: the index and the tree stay as they were.
        check(
            |r| {
                let commit = git(r, &["commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "next"]);
                git(r, &["update-ref", "refs/heads/main", commit.trim()]);
            },
            true,
        );
    }

    #[test]
    fn an_exclude_file_behind_a_link_edited_is_drift() {
        // .git/info/exclude links to a file outside the tree; the file is edited, not the link.
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("exclude");
        check_set_up(
            |r| {
                write(outside.path(), "exclude", "ign.txt\n");
                std::fs::remove_file(r.join(".git/info/exclude")).unwrap();
                std::os::unix::fs::symlink(&target, r.join(".git/info/exclude")).unwrap();
            },
            |_| std::fs::write(&target, "# none\n").unwrap(),
            true,
        );
    }

    #[test]
    fn a_bind_mount_inside_the_tree_is_drift() {
        // A bind mount changes what a path shows and no ctime.
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "old.txt", "old\n");
        let old = outside.path().join("old.txt");
        let probe = tempfile::tempdir().unwrap();
        write(probe.path(), "f", "");
        if bind(&old, &probe.path().join("f")).is_none() {
            eprintln!("skipped: mount --bind is not allowed here (needs root)");
            return;
        }
        let mounted = std::cell::RefCell::new(None);
        let tree = check_set_up(
            |_| {},
            |r| *mounted.borrow_mut() = Some(bind(&old, &r.join("a.txt")).expect("mount --bind over a.txt")),
            true,
        );
        // Unmounted before the repository's folder is removed.
        drop(mounted);
        drop(tree);
    }

    /// A bind mount, undone when dropped.
    struct Bind(std::path::PathBuf);

    impl Drop for Bind {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }

    /// `mount --bind from to`, `None` when not allowed.
    fn bind(from: &Path, to: &Path) -> Option<Bind> {
        std::process::Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(to)
            .status()
            .is_ok_and(|s| s.success())
            .then(|| Bind(to.to_path_buf()))
    }

    #[test]
    fn changes_inside_ignored_folders_are_no_drift_and_keep_the_shortcut() {
        // A new ignored file in an ignored folder: not looked at.
        check(|r| write(r, "build/more.o", "o\n"), false);
    }
}
