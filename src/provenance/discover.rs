//! Where git finds the working tree holding a folder, answered in-process for the plain case so
//! that a capture does not start `git rev-parse` for it ([`super::git_cli::locate`] runs git for
//! everything else).
//!
//! The plain case is the one git's discovery (`setup_git_directory_gently`, with no `GIT_*`
//! variable, as hwr-exp starts git) settles without a choice: walking up from the folder's
//! physical path, on the folder's own file system, no folder on the way is itself a git folder
//! (none holds `HEAD`), and the first `.git` found is a directory that is a valid git folder
//! (`HEAD` a regular file holding a ref or an object id, `objects/` and `refs/` there), owned by
//! this user like the folder holding it, no linked worktree's (`commondir`), whose `config` git
//! reads plainly ([`plain_config`]: no worktree, include or `bare = true`, repository format 0 or
//! 1, known extensions). git then prints that folder as `--show-toplevel` and its `.git` as
//! `--absolute-git-dir`; anything else is not answered here.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The working-tree root and git folder git would find from `start` (both physical paths,
/// `git rev-parse --show-toplevel` and `--absolute-git-dir`), when the repository is a plain one
/// (module docs); `None` when git must be asked: no repository found, a file system boundary,
/// a `.git` file or link, an unusual configuration, or anything unreadable.
pub(super) fn plain_work_tree(start: &Path) -> Option<(PathBuf, PathBuf)> {
    let start = std::fs::canonicalize(start).ok()?;
    let device = std::fs::metadata(&start).ok()?.dev();
    let user = rustix::process::geteuid().as_raw();
    let mut folder = start.as_path();
    loop {
        let meta = std::fs::metadata(folder).ok()?;
        if meta.dev() != device {
            return None;
        }
        let dot_git = folder.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(git) if git.is_dir() => {
                return (meta.uid() == user && git.uid() == user && plain_git_folder(&dot_git))
                    .then(|| (folder.to_path_buf(), dot_git));
            }
            Ok(_) => return None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
        // A folder holding HEAD may be a git folder itself (bare, or inside one).
        match std::fs::symlink_metadata(folder.join("HEAD")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return None,
        }
        folder = folder.parent()?;
    }
}

/// `git_dir` is a valid git folder (git's `is_git_directory`) of a plain repository: see the
/// module docs.
fn plain_git_folder(git_dir: &Path) -> bool {
    let is_dir = |name: &str| std::fs::symlink_metadata(git_dir.join(name)).is_ok_and(|m| m.is_dir());
    // A linked HEAD is valid to git only when the link names `refs/...`: left to git.
    if !std::fs::symlink_metadata(git_dir.join("HEAD")).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(head) = std::fs::read(git_dir.join("HEAD")) else {
        return false;
    };
    let head = head.trim_ascii_end();
    let valid_head = head.starts_with(b"ref: refs/")
        || (matches!(head.len(), 40 | 64) && head.iter().all(u8::is_ascii_hexdigit));
    valid_head
        && is_dir("objects")
        && is_dir("refs")
        && !git_dir.join("commondir").exists()
        && std::fs::read(git_dir.join("config")).is_ok_and(|c| plain_config(&c))
}

/// A repository configuration (`.git/config`) git reads as a plain one: every line empty, a
/// comment, a section header with nothing after its `]`, or `key = value` with a key git accepts
/// (a letter, then letters, digits and `-`) and a value without quotes or backslashes; no key
/// naming a worktree (`core.worktree`, `extensions.worktreeConfig`) or an include; `bare` only
/// `false`; `core.repositoryformatversion` 0 or 1, and of the `extensions` only `objectFormat`
/// and `refStorage` with values git knows. Anything else (which git may read otherwise, or
/// refuse) is not plain.
fn plain_config(config: &[u8]) -> bool {
    let mut section: Vec<u8> = Vec::new();
    config.split(|&b| b == b'\n').all(|line| {
        let line = line.trim_ascii().to_ascii_lowercase();
        if line.is_empty() || line.starts_with(b"#") || line.starts_with(b";") {
            return true;
        }
        if let Some(header) = line.strip_prefix(b"[") {
            // `[name]` or `[name "sub"]`, the first `]` ending the line.
            let Some(close) = header.iter().position(|&b| b == b']') else {
                return false;
            };
            if close + 1 != header.len() {
                return false;
            }
            let name = &header[..close];
            section = name
                .split(|&b| b == b' ' || b == b'"')
                .next()
                .unwrap_or_default()
                .to_vec();
            return memchr::memmem::find(name, b"include").is_none();
        }
        let mut parts = line.splitn(2, |&b| b == b'=');
        let key = parts.next().unwrap_or_default().trim_ascii();
        let value = parts.next().map(<[u8]>::trim_ascii);
        let key_ok = key.first().is_some_and(u8::is_ascii_alphabetic)
            && key.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-');
        let value_ok = value.is_none_or(|v| !v.iter().any(|&b| b == b'"' || b == b'\\'));
        let has = |word: &[u8]| memchr::memmem::find(key, word).is_some();
        let known = match (section.as_slice(), key) {
            (b"core", b"repositoryformatversion") => matches!(value, Some(b"0" | b"1")),
            (b"extensions", b"objectformat") => matches!(value, Some(b"sha1" | b"sha256")),
            (b"extensions", b"refstorage") => matches!(value, Some(b"files" | b"reftable")),
            (b"extensions", _) => false,
            (_, b"bare") => value == Some(b"false"),
            _ => !has(b"worktree") && !has(b"include") && !has(b"bare"),
        };
        key_ok && value_ok && known
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::quiet::tests::git;

    /// git's own answer from `start`: (`--show-toplevel`, `--absolute-git-dir`), `None` when it
    /// finds no working tree there.
    fn git_answer(start: &Path) -> Option<(PathBuf, PathBuf)> {
        let out = super::super::git_cli::command(start)
            .args(["rev-parse", "--show-toplevel", "--absolute-git-dir"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        match (out.status.success(), lines.next(), lines.next()) {
            (true, Some(root), Some(dir)) => Some((root.into(), dir.into())),
            _ => None,
        }
    }

    fn repository(root: &Path) {
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("sub/f"), "f\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "c"]);
    }

    /// Answered in-process: git's answer exactly (physical paths, from a folder reached through a
    /// link too).
    #[test]
    fn a_plain_repository_is_answered_as_git_answers() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        repository(&root);
        std::os::unix::fs::symlink(&root, tmp.path().join("link")).unwrap();
        let nested = root.join("sub/nested");
        std::fs::create_dir_all(&nested).unwrap();
        repository(&nested);
        for start in [
            root.clone(),
            root.join("sub/deeper"),
            tmp.path().join("link/sub"),
            nested.join("sub"),
        ] {
            let ours = plain_work_tree(&start);
            assert!(ours.is_some(), "{} is a plain repository", start.display());
            assert_eq!(ours, git_answer(&start), "from {}", start.display());
        }
    }

    /// Whatever is not plain goes to git: never an answer git would not give.
    #[test]
    fn anything_but_a_plain_repository_is_left_to_git() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        repository(&root);
        let mut starts: Vec<PathBuf> = Vec::new();
        // A linked worktree (`.git` is a file).
        git(&root, &["worktree", "add", "-q", "../linked"]);
        starts.push(tmp.path().join("linked"));
        // Inside the git folder.
        starts.push(root.join(".git/refs"));
        // An invalid `.git` folder below the root: git passes over it to the outer repository.
        std::fs::create_dir_all(root.join("sub/fake/.git")).unwrap();
        starts.push(root.join("sub/fake"));
        // No repository at all.
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        starts.push(outside);
        // A bare repository.
        git(tmp.path(), &["init", "-q", "--bare", "bare.git"]);
        starts.push(tmp.path().join("bare.git"));
        for start in &starts {
            assert_eq!(plain_work_tree(start), None, "from {}", start.display());
        }
        // Configurations that move or hide the working tree, each in its own repository.
        let settings: [&[&str]; 4] = [
            &["config", "core.worktree", "/"],
            &["config", "core.bare", "true"],
            &["config", "include.path", "elsewhere"],
            &["config", "extensions.worktreeConfig", "true"],
        ];
        for (i, setting) in settings.iter().enumerate() {
            let repo = tmp.path().join(format!("configured{i}"));
            repository(&repo);
            git(&repo, setting);
            assert_eq!(plain_work_tree(&repo.join("sub")), None, "with {setting:?}");
        }
        // Lines git reads otherwise, or refuses: each appended to a repository's configuration.
        let lines = [
            "[core] bare = true\n",
            "[core] bare = true ;]\n",
            "[core] bare=true#]\n",
            "[core]\r\tbare = true ;]\n",
            "[core] bare ;]\n",
            "[core]\n\trepositoryformatversion = 2\n",
            "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tfrobnicate = yes\n",
            "[core]\n\tBare = \"true\"\n",
            "[x]\n\t!!bad\n",
        ];
        for (i, line) in lines.iter().enumerate() {
            let repo = tmp.path().join(format!("line{i}"));
            repository(&repo);
            let config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
            std::fs::write(repo.join(".git/config"), format!("{config}{line}")).unwrap();
            assert_eq!(plain_work_tree(&repo.join("sub")), None, "with {line:?}");
        }
        // A linked HEAD: valid to git only when the link names `refs/...`.
        let outer = tmp.path().join("outer");
        repository(&outer);
        let inner = outer.join("sub/x/.git");
        for folder in ["objects", "refs"] {
            std::fs::create_dir_all(inner.join(folder)).unwrap();
        }
        std::fs::write(tmp.path().join("head"), "ref: refs/heads/main\n").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("head"), inner.join("HEAD")).unwrap();
        std::fs::write(inner.join("config"), "[core]\n\trepositoryformatversion = 0\n").unwrap();
        assert_eq!(plain_work_tree(&outer.join("sub/x")), None);
        assert_eq!(git_answer(&outer.join("sub/x")).map(|a| a.0), Some(outer.clone()));
    }

    /// What a cloned repository's configuration holds (remotes, branches, `bare = false` in any
    /// case, a SHA-256 object format) is plain, and answered as git answers.
    #[test]
    fn a_usual_configuration_is_plain() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        git(&root, &["init", "-q", "-b", "main", "--object-format=sha256"]);
        std::fs::create_dir(root.join("sub")).unwrap();
        git(
            &root,
            &["remote", "add", "origin", "https://example.invalid/x.git"],
        );
        git(&root, &["config", "branch.main.remote", "origin"]);
        git(&root, &["config", "core.bare", "FALSE"]);
        let start = root.join("sub");
        assert!(plain_work_tree(&start).is_some());
        assert_eq!(plain_work_tree(&start), git_answer(&start));
    }

    /// A repository owned by another user: git refuses it (dubious ownership); not answered here.
    #[test]
    fn a_repository_of_another_owner_is_left_to_git() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: changing a folder's owner needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        repository(&root);
        assert!(plain_work_tree(&root).is_some());
        rustix::fs::chown(
            &root,
            Some(rustix::fs::Uid::from_raw(65534)),
            Some(rustix::fs::Gid::from_raw(65534)),
        )
        .unwrap();
        assert_eq!(plain_work_tree(&root), None);
    }

    /// A file system mounted inside a repository: git does not look past its mount point (no
    /// `GIT_DISCOVERY_ACROSS_FILESYSTEM`), so neither does this.
    #[test]
    fn discovery_stops_at_a_file_system_boundary_as_git_does() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        repository(&root);
        let mount = root.join("sub/mnt");
        std::fs::create_dir(&mount).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: mounting a tmpfs needs root");
            return;
        }
        let inside = mount.join("dir");
        std::fs::create_dir(&inside).unwrap();
        let ours = plain_work_tree(&inside);
        let theirs = git_answer(&inside);
        let unmounted = std::process::Command::new("umount")
            .arg("-l")
            .arg(&mount)
            .status();
        assert!(unmounted.is_ok_and(|s| s.success()));
        assert_eq!(ours, None);
        assert_eq!(theirs, None, "git stops at the mount point too");
    }
}
