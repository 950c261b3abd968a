//! Differential test of the recorded provenance against the git CLI, one test per repository state.
//!
//! Each test builds a repository state with the git CLI in a temporary folder (git isolated from
//! the user's and the system configuration, fixed identities and dates), records it with the real
//! binary (`hwr-exp run` of a one-run manifest whose results folder lies outside the repository),
//! then compares the bundle with what git says about the same tree:
//! - working-tree.txt with `git status --short --untracked-files=all`;
//! - provenance.json `dirty` with whether that output is empty;
//! - revision.txt with `git rev-parse HEAD`;
//! - the tree rebuilt by `git apply` of working-tree.patch on a clean clone at the recorded
//!   revision with the working tree (bytes, executable bits, symlink targets).
//!
//! Where git itself cannot rebuild the tree by `git apply` or has no answer, the test asserts
//! what the bundle must say instead (the operation in progress by name, `dirty: "unknown"` with a
//! reason), never a silently clean record. The `regression_*` tests at the end replay the
//! reported failures end to end (rerun, verify, drift).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{binary_bytes, sha256_hex};
use serde_json::Value;

/// Size of the large untracked file: over the limit above which untracked files are left out of
/// working-tree.patch (16 MiB).
const LARGE_UNTRACKED_BYTES: usize = 17 * 1024 * 1024;

/// A temporary folder holding a private HOME, the repositories of one state, the manifest and the
/// results folder.
struct World {
    tmp: tempfile::TempDir,
}

/// What one `hwr-exp run` recorded.
struct Recorded {
    /// The bundle folder.
    dir: PathBuf,
    revision: String,
    working_tree: String,
    patch: PathBuf,
    prov: Value,
    stderr: String,
    /// The same state recorded first without git on PATH (libgit2 alone), by [`World::record`].
    libgit2: Option<Box<Recorded>>,
}

/// How to rebuild the recorded tree for the comparison.
#[derive(Default)]
struct Replay {
    /// Repository to clone from (default: the recorded working tree).
    source: Option<PathBuf>,
    /// git commands run in the clone before the checkout (filter drivers, sparse patterns).
    setup: Vec<Vec<String>>,
    /// Paths (relative to the root) left out of the comparison, with everything under them.
    skip: Vec<String>,
}

impl Replay {
    fn setup(mut self, args: &[&str]) -> Self {
        self.setup.push(args.iter().map(|s| s.to_string()).collect());
        self
    }
    fn skip(mut self, path: &str) -> Self {
        self.skip.push(path.to_owned());
        self
    }
    fn source(mut self, path: &Path) -> Self {
        self.source = Some(path.to_path_buf());
        self
    }
}

impl World {
    fn new() -> World {
        let w = World {
            tmp: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(w.home().join(".config")).unwrap();
        w
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    /// `program` with the caller's GIT_* variables removed and git isolated from any configuration
    /// but the repository's own; fixed identities and dates.
    fn cmd(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("LC_ALL", "C")
            .env("GIT_AUTHOR_NAME", "Differential Test")
            .env("GIT_AUTHOR_EMAIL", "diff@example.invalid")
            .env("GIT_AUTHOR_DATE", "2024-01-02T03:04:05Z")
            .env("GIT_COMMITTER_NAME", "Differential Test")
            .env("GIT_COMMITTER_EMAIL", "diff@example.invalid")
            .env("GIT_COMMITTER_DATE", "2024-01-02T03:04:05Z")
            .env("GIT_EDITOR", "true")
            .env("GIT_SEQUENCE_EDITOR", "true")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PROTOCOL_FROM_USER", "1");
        cmd
    }

    /// `git args` in `dir`, whatever the exit status.
    fn git_output(&self, dir: &Path, args: &[&str]) -> Output {
        self.cmd("git")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("git runs")
    }

    /// `git args` in `dir`; panics with git's stderr when it fails.
    fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.git_output(dir, args);
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A new repository at `rel` (branch `main`, no signing, git's default settings).
    fn init(&self, rel: &str) -> PathBuf {
        let dir = self.path(rel);
        std::fs::create_dir_all(&dir).unwrap();
        self.git(&dir, &["init", "-q", "-b", "main"]);
        self.git(&dir, &["config", "commit.gpgsign", "false"]);
        dir
    }

    fn commit_all(&self, dir: &Path, message: &str) {
        self.git(dir, &["add", "-A"]);
        self.git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
    }

    /// The repository most states start from, committed on `main`: text files in folders, a
    /// binary file, an executable script and a symlink.
    fn base(&self, rel: &str) -> PathBuf {
        let dir = self.init(rel);
        let forty: String = (0..40).map(|i| format!("line {i}\n")).collect();
        write(&dir, "README", b"hello\n");
        write(&dir, "src/a.txt", forty.as_bytes());
        write(&dir, "src/b.txt", b"one\ntwo\nthree\n");
        write(&dir, "dir2/c.txt", b"in dir2\n");
        write(&dir, "bin.dat", &binary_bytes(4096, 1));
        write(&dir, "script.sh", b"#!/bin/sh\necho hi\n");
        chmod(&dir, "script.sh", 0o755);
        symlink(&dir, "link", "README");
        self.commit_all(&dir, "base");
        dir
    }

    /// Runs a one-run manifest (`/bin/true`) recording `repo` with the real binary, twice: first
    /// without git on PATH (kept in `libgit2`), then as usual; asserts exit 0.
    fn record(&self, repo: &Path) -> Recorded {
        let path = path_without_git(self);
        let lib = self.record_with(repo, &[("PATH", &path)], "true");
        let mut rec = self.record_with(repo, &[], "/bin/true");
        rec.libgit2 = Some(Box::new(lib));
        rec
    }

    fn record_with(&self, repo: &Path, extra: &[(&str, &str)], shell: &str) -> Recorded {
        let manifest = self.outside_manifest(repo, shell);
        self.record_manifest(&manifest, extra)
    }

    /// A one-run manifest running `shell` and recording `repo`, in a folder outside the
    /// repository.
    fn outside_manifest(&self, repo: &Path, shell: &str) -> PathBuf {
        let mdir = self.path("manifest");
        std::fs::create_dir_all(&mdir).unwrap();
        let manifest = mdir.join("experiment.toml");
        let text = format!(
            "format = 1\n[experiment]\nname = \"differential\"\n[command]\nshell = {}\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n[provenance]\nrepo = {}\n",
            toml::Value::String(shell.to_owned()),
            toml::Value::String(repo.display().to_string()),
        );
        std::fs::write(&manifest, text).unwrap();
        manifest
    }

    /// Commits a one-run manifest (`true`) as `experiment.toml` at the root of `repo`, as a user
    /// keeping the manifest in the repository would (what `rerun --at-recorded-revision` needs).
    fn commit_manifest(&self, repo: &Path) -> PathBuf {
        let manifest = repo.join("experiment.toml");
        std::fs::write(
            &manifest,
            "format = 1\n[experiment]\nname = \"in-repo\"\n[command]\nshell = \"true\"\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n",
        )
        .unwrap();
        self.git(repo, &["add", "experiment.toml"]);
        self.git(repo, &["commit", "-q", "-m", "manifest"]);
        manifest
    }

    /// `hwr-exp run MANIFEST` into the results folder outside the repositories; asserts exit 0.
    fn record_manifest(&self, manifest: &Path, extra: &[(&str, &str)]) -> Recorded {
        let (out, dir) = self.run_manifest(manifest, extra);
        assert_eq!(
            crate::support::code(&out),
            0,
            "hwr-exp run failed: {}",
            crate::support::stderr(&out)
        );
        let dir = dir.expect("bundle path printed");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        Recorded {
            revision: read("revision.txt"),
            working_tree: read("working-tree.txt"),
            patch: dir.join("working-tree.patch"),
            prov: crate::support::json(&dir.join("provenance.json")),
            stderr: crate::support::stderr(&out),
            dir,
            libgit2: None,
        }
    }

    fn run_manifest(&self, manifest: &Path, extra: &[(&str, &str)]) -> (Output, Option<PathBuf>) {
        let mdir = manifest.parent().unwrap();
        let mut cmd = self.cmd(crate::support::bin().to_str().expect("UTF-8 binary path"));
        cmd.current_dir(mdir)
            .arg("run")
            .arg(manifest)
            .arg("--results-dir")
            .arg(self.path("results"))
            .arg("--quiet")
            .stdin(Stdio::null());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("hwr-exp runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let bundle = stdout
            .lines()
            .last()
            .map(|p| mdir.join(p))
            .filter(|p| p.join("bundle.json").is_file());
        (out, bundle)
    }

    /// `hwr-exp args` with the isolated environment plus `extra`.
    fn hwr(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let mut cmd = self.cmd(crate::support::bin().to_str().expect("UTF-8 binary path"));
        cmd.current_dir(self.tmp.path()).args(args).stdin(Stdio::null());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.output().expect("hwr-exp runs")
    }

    /// `git status --short --untracked-files=all` in `work`.
    fn status(&self, work: &Path) -> String {
        self.git(work, &["status", "--short", "--untracked-files=all"])
    }

    /// Clones `replay.source` (default `work`), runs the setup commands, checks out the recorded
    /// revision detached and applies the patch with `git apply`; returns the clone's root.
    fn rebuild(&self, work: &Path, rec: &Recorded, replay: &Replay, name: &str) -> PathBuf {
        let clone = self.path(name);
        let source = replay.source.clone().unwrap_or_else(|| work.to_path_buf());
        self.git(
            self.tmp.path(),
            &[
                "clone",
                "-q",
                "--no-checkout",
                source.to_str().unwrap(),
                clone.to_str().unwrap(),
            ],
        );
        for args in &replay.setup {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.git(&clone, &args);
        }
        self.git(&clone, &["checkout", "-q", "--detach", rec.revision.trim()]);
        self.apply(&clone, rec);
        clone
    }

    /// `git apply` of the recorded patch in `dir` (nothing when the patch is empty).
    fn apply(&self, dir: &Path, rec: &Recorded) {
        if std::fs::metadata(&rec.patch).unwrap().len() > 0 {
            self.git(
                dir,
                &["apply", "--whitespace=nowarn", rec.patch.to_str().unwrap()],
            );
        }
    }

    /// Files of the tree at `root` that git does not ignore, without `.git`, nested repositories
    /// and the `skip` paths: relative path -> (content or symlink target, executable bit).
    fn tree(&self, git_root: &Path, root: &Path, skip: &[String]) -> BTreeMap<String, (Vec<u8>, bool)> {
        let mut all = BTreeMap::new();
        walk(root, root, &mut all);
        all.retain(|p, _| !skip.iter().any(|s| p == s || p.starts_with(&format!("{s}/"))));
        // Ignored files are neither in the patch nor in a clean clone.
        let mut child = self
            .cmd("git")
            .current_dir(git_root)
            .args(["check-ignore", "--stdin", "-z"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        {
            let mut stdin = child.stdin.take().unwrap();
            for p in all.keys() {
                stdin.write_all(p.as_bytes()).unwrap();
                stdin.write_all(b"\0").unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        let ignored: BTreeSet<String> = out
            .stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        all.retain(|p, _| !ignored.contains(p));
        all
    }

    /// Every comparison of the module docs for `state`, with the working tree at `work`; then
    /// the libgit2-only record, if any, must agree the same way or say `dirty: "unknown"`.
    fn assert_agrees(&self, state: &str, work: &Path, rec: &Recorded, replay: Replay) {
        self.assert_tree(state, work, rec, &replay, "replayed");
        if let Some(lib) = &rec.libgit2 {
            let state = format!("{state}, libgit2 only");
            if self.libgit2_says_unknown(&state, lib) {
                return;
            }
            self.assert_tree(&state, work, lib, &replay, "replayed-libgit2");
        }
    }

    fn assert_tree(&self, state: &str, work: &Path, rec: &Recorded, replay: &Replay, name: &str) {
        self.assert_one_status_and_revision(state, work, rec);
        let clone = self.rebuild(work, rec, replay, name);
        let ours = self.tree(work, work, &replay.skip);
        let rebuilt = self.tree(&clone, &clone, &replay.skip);
        assert_trees_equal(state, &ours, &rebuilt);
    }

    /// A libgit2-only record that could not decide says so: `dirty: "unknown"`, a reason and a
    /// warning. Returns whether it did.
    fn libgit2_says_unknown(&self, state: &str, lib: &Recorded) -> bool {
        assert_eq!(lib.prov["capture-method"], "libgit2", "[{state}] {:#}", lib.prov);
        if lib.prov["dirty"] != "unknown" {
            return false;
        }
        let reason = lib.prov["dirty-reason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "[{state}] dirty unknown without a reason");
        assert!(
            lib.stderr
                .contains("warning: the working tree's state is unknown"),
            "[{state}] no warning: {}",
            lib.stderr
        );
        true
    }

    /// working-tree.txt, `dirty` and revision.txt against git, for the record and for its
    /// libgit2-only twin (which may instead say `dirty: "unknown"`).
    fn assert_status_and_revision(&self, state: &str, work: &Path, rec: &Recorded) {
        self.assert_one_status_and_revision(state, work, rec);
        if let Some(lib) = &rec.libgit2 {
            let state = format!("{state}, libgit2 only");
            if !self.libgit2_says_unknown(&state, lib) {
                self.assert_one_status_and_revision(&state, work, lib);
            }
        }
    }

    fn assert_one_status_and_revision(&self, state: &str, work: &Path, rec: &Recorded) {
        assert_eq!(
            rec.prov["drift"], false,
            "[{state}] a run of `true` is no drift: {}",
            rec.prov["after"]
        );
        let theirs = self.status(work);
        assert_eq!(
            rec.working_tree, theirs,
            "[{state}] working-tree.txt differs from `git status --short --untracked-files=all`\nprovenance.json: {:#}",
            rec.prov
        );
        assert_eq!(
            rec.prov["dirty"],
            Value::Bool(!theirs.is_empty()),
            "[{state}] provenance.json dirty, git status:\n{theirs}"
        );
        let head = self.git(work, &["rev-parse", "HEAD"]);
        assert_eq!(
            rec.revision, head,
            "[{state}] revision.txt differs from `git rev-parse HEAD`"
        );
        assert_eq!(
            rec.prov["head"].as_str(),
            Some(head.trim()),
            "[{state}] provenance.json head"
        );
        assert_no_errors(state, rec);
    }
}

fn assert_no_errors(state: &str, rec: &Recorded) {
    assert!(
        rec.prov.get("errors").is_none(),
        "[{state}] capture errors: {}",
        rec.prov["errors"]
    );
}

fn assert_trees_equal(
    state: &str,
    ours: &BTreeMap<String, (Vec<u8>, bool)>,
    rebuilt: &BTreeMap<String, (Vec<u8>, bool)>,
) {
    let names = |m: &BTreeMap<String, (Vec<u8>, bool)>| m.keys().cloned().collect::<BTreeSet<_>>();
    let (a, b) = (names(ours), names(rebuilt));
    assert_eq!(
        a, b,
        "[{state}] files of the working tree (left) and of the clean clone after git apply (right) differ"
    );
    for (path, (bytes, exec)) in ours {
        let (other, other_exec) = &rebuilt[path];
        assert!(
            bytes == other,
            "[{state}] {path}: content differs after git apply ({} vs {} bytes)",
            bytes.len(),
            other.len()
        );
        assert_eq!(
            exec, other_exec,
            "[{state}] {path}: executable bit differs after git apply"
        );
    }
}

/// Walks `dir` below `root`, not into `.git` or nested repositories (folders holding `.git`).
fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (Vec<u8>, bool)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_name() == ".git" {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if meta.is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            out.insert(
                format!("{rel}@"),
                (target.into_os_string().into_encoded_bytes(), false),
            );
        } else if meta.is_dir() {
            if path.join(".git").exists() {
                continue;
            }
            walk(root, &path, out);
        } else {
            let exec = meta.permissions().mode() & 0o111 != 0;
            out.insert(rel, (std::fs::read(&path).unwrap(), exec));
        }
    }
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn chmod(root: &Path, rel: &str, mode: u32) {
    std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

fn symlink(root: &Path, rel: &str, target: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, path).unwrap();
}

/// Sets the modification time of `root/rel` 10 s into the future, so that its index entry's
/// cached stat data no longer matches (what `touch` does a moment later).
fn touch_later(root: &Path, rel: &str) {
    let file = std::fs::File::options()
        .append(true)
        .open(root.join(rel))
        .unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(10))
        .unwrap();
}

/// Copies a folder tree without keeping times or inodes (symlinks copied as symlinks).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&src).unwrap();
        if meta.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if meta.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn operation(rec: &Recorded) -> Option<&str> {
    rec.prov["operation"].as_str()
}

// ---------------------------------------------------------------------------------------------
// Ordinary states

#[test]
fn state_clean() {
    let w = World::new();
    let repo = w.base("repo");
    let rec = w.record(&repo);
    assert_eq!(rec.working_tree, "");
    assert_eq!(std::fs::metadata(&rec.patch).unwrap().len(), 0);
    w.assert_agrees("clean", &repo, &rec, Replay::default());
    assert!(operation(&rec).is_none());
}

#[test]
fn state_staged_unstaged_deleted_and_binary_changes() {
    let w = World::new();
    let repo = w.base("repo");
    let mut a = std::fs::read_to_string(repo.join("src/a.txt")).unwrap();
    a = a.replace("line 3\n", "line three\n");
    write(&repo, "src/a.txt", a.as_bytes());
    w.git(&repo, &["add", "src/a.txt"]);
    write(
        &repo,
        "src/a.txt",
        a.replace("line 30\n", "line thirty\n").as_bytes(),
    );
    write(&repo, "src/b.txt", b"one\n2\nthree\nfour\n");
    write(&repo, "new.txt", b"staged new file\n");
    w.git(&repo, &["add", "new.txt"]);
    std::fs::remove_file(repo.join("dir2/c.txt")).unwrap();
    w.git(&repo, &["rm", "-q", "README"]);
    write(&repo, "bin.dat", &binary_bytes(5000, 2));
    write(&repo, "no-newline.txt", b"no newline at the end");
    let rec = w.record(&repo);
    w.assert_agrees(
        "staged, unstaged, deleted and binary changes",
        &repo,
        &rec,
        Replay::default(),
    );
}

#[test]
fn state_untracked_files() {
    let w = World::new();
    let repo = w.base("repo");
    write(&repo, "notes/deep/er/n.txt", b"nested untracked\n");
    write(&repo, "notes/empty", b"");
    write(&repo, "with space.txt", b"space\n");
    write(&repo, "caf\u{e9}.txt", b"non-ascii name\n");
    write(&repo, "untracked.bin", &binary_bytes(3000, 3));
    let rec = w.record(&repo);
    w.assert_agrees("untracked files", &repo, &rec, Replay::default());
    let untracked = rec.prov["untracked"].as_array().unwrap();
    assert_eq!(untracked.len(), 5, "{untracked:?}");
    let n = untracked
        .iter()
        .find(|u| u["path"] == "notes/deep/er/n.txt")
        .unwrap();
    assert_eq!(n["sha256"], sha256_hex(b"nested untracked\n"));
}

#[test]
fn state_removed_from_index_kept_on_disk() {
    let w = World::new();
    let repo = w.base("repo");
    w.git(&repo, &["rm", "-q", "--cached", "src/b.txt"]);
    let rec = w.record(&repo);
    w.assert_agrees("git rm --cached", &repo, &rec, Replay::default());
}

#[test]
fn state_ignored_files() {
    let w = World::new();
    let repo = w.base("repo");
    write(&repo, ".gitignore", b"build/\n*.log\n");
    write(&repo, "tracked.log", b"tracked although ignored\n");
    w.git(&repo, &["add", "-f", "tracked.log"]);
    w.commit_all(&repo, "ignore rules");
    write(&repo, "build/out/x.o", b"object\n");
    write(&repo, "run.log", b"ignored\n");
    write(&repo, "tracked.log", b"tracked and modified\n");
    write(&repo, "src/keep.txt", b"untracked, not ignored\n");
    let rec = w.record(&repo);
    w.assert_agrees("ignored files", &repo, &rec, Replay::default());
    let patch = std::fs::read_to_string(&rec.patch).unwrap();
    assert!(
        !patch.contains("build/out") && !patch.contains("run.log"),
        "{patch}"
    );
}

#[test]
fn state_rename_staged() {
    let w = World::new();
    let repo = w.base("repo");
    w.git(&repo, &["mv", "src/a.txt", "src/renamed.txt"]);
    let rec = w.record(&repo);
    assert!(rec.working_tree.contains(" -> "), "{}", rec.working_tree);
    w.assert_agrees("rename staged", &repo, &rec, Replay::default());
}

#[test]
fn state_rename_unstaged() {
    let w = World::new();
    let repo = w.base("repo");
    std::fs::rename(repo.join("src/a.txt"), repo.join("src/moved.txt")).unwrap();
    let rec = w.record(&repo);
    w.assert_agrees("rename unstaged", &repo, &rec, Replay::default());
}

#[test]
fn state_exec_bit_only() {
    let w = World::new();
    let repo = w.base("repo");
    chmod(&repo, "src/b.txt", 0o755);
    chmod(&repo, "script.sh", 0o644);
    let rec = w.record(&repo);
    w.assert_agrees("exec bit only", &repo, &rec, Replay::default());
}

#[test]
fn state_symlinks() {
    let w = World::new();
    let repo = w.base("repo");
    std::fs::remove_file(repo.join("link")).unwrap();
    symlink(&repo, "link", "src/a.txt");
    symlink(&repo, "dangling", "does/not/exist");
    symlink(&repo, "to-dir", "src");
    let rec = w.record(&repo);
    w.assert_agrees("symlinks", &repo, &rec, Replay::default());
}

#[test]
fn state_typechanges() {
    let w = World::new();
    let repo = w.base("repo");
    std::fs::remove_file(repo.join("README")).unwrap();
    symlink(&repo, "README", "src/b.txt");
    std::fs::remove_file(repo.join("link")).unwrap();
    write(&repo, "link", b"now a regular file\n");
    let rec = w.record(&repo);
    w.assert_agrees("typechanges", &repo, &rec, Replay::default());
}

#[test]
fn state_intent_to_add() {
    let w = World::new();
    let repo = w.base("repo");
    write(&repo, "planned.txt", b"added with -N\n");
    w.git(&repo, &["add", "-N", "planned.txt"]);
    let rec = w.record(&repo);
    w.assert_agrees("git add -N", &repo, &rec, Replay::default());
}

#[test]
fn state_submodule_modified() {
    let w = World::new();
    let lib = w.base("lib");
    let repo = w.base("repo");
    w.git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "sub",
        ],
    );
    w.commit_all(&repo, "add submodule");
    write(&repo, "sub/README", b"changed inside the submodule\n");
    let rec = w.record(&repo);
    w.assert_status_and_revision("submodule modified", &repo, &rec);
    let subs = rec.prov["submodules"].as_array().unwrap();
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["path"], "sub");
    assert_eq!(subs[0]["dirty"], true);
}

// ---------------------------------------------------------------------------------------------
// Sparse checkouts and index bits

/// A repository with files in dir1/ and dir2/ at the top and a file at the root.
fn two_dirs(w: &World) -> PathBuf {
    let repo = w.init("repo");
    write(&repo, "top.txt", b"top\n");
    write(&repo, "dir1/a.txt", b"a\n");
    write(&repo, "dir1/sub/a2.txt", b"a2\n");
    write(&repo, "dir2/b.txt", b"b\n");
    write(&repo, "dir2/sub/b2.txt", b"b2\n");
    w.commit_all(&repo, "two folders");
    repo
}

#[test]
fn state_sparse_checkout_cone() {
    let w = World::new();
    let repo = two_dirs(&w);
    w.git(&repo, &["sparse-checkout", "set", "--cone", "dir1"]);
    assert!(!repo.join("dir2/b.txt").exists());
    write(&repo, "dir1/a.txt", b"a changed\n");
    // Untracked, outside the sparse patterns.
    write(&repo, "dir2/new.txt", b"new outside the cone\n");
    let rec = w.record(&repo);
    w.assert_agrees(
        "sparse checkout (cone)",
        &repo,
        &rec,
        Replay::default().setup(&["sparse-checkout", "set", "--cone", "dir1"]),
    );
}

#[test]
fn state_sparse_checkout_non_cone() {
    let w = World::new();
    let repo = two_dirs(&w);
    w.git(
        &repo,
        &["sparse-checkout", "set", "--no-cone", "/dir1/sub/", "/top.txt"],
    );
    assert!(!repo.join("dir1/a.txt").exists());
    write(&repo, "dir1/sub/a2.txt", b"a2 changed\n");
    let rec = w.record(&repo);
    w.assert_agrees(
        "sparse checkout (non-cone)",
        &repo,
        &rec,
        Replay::default().setup(&["sparse-checkout", "set", "--no-cone", "/dir1/sub/", "/top.txt"]),
    );
}

/// The file hidden by an index bit is listed in provenance.json `unchecked` with its content.
fn assert_unchecked(state: &str, rec: &Recorded, path: &str, bit: &str, content: &[u8]) {
    let list = rec.prov["unchecked"].as_array().unwrap_or_else(|| {
        panic!(
            "[{state}] provenance.json has no `unchecked` list: {:#}",
            rec.prov
        )
    });
    let entry = list
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("[{state}] {path} missing from `unchecked`: {list:?}"));
    assert_eq!(entry["bit"], bit, "[{state}]");
    assert_eq!(entry["sha256"], sha256_hex(content), "[{state}]");
}

#[test]
fn state_skip_worktree_bit() {
    let w = World::new();
    let repo = w.base("repo");
    w.git(&repo, &["update-index", "--skip-worktree", "src/b.txt"]);
    write(&repo, "src/b.txt", b"hidden from git status\n");
    write(&repo, "src/a.txt", b"visible change\n");
    let rec = w.record(&repo);
    // git does not look at src/b.txt: neither does the comparison, but the bundle says so.
    w.assert_agrees(
        "skip-worktree bit",
        &repo,
        &rec,
        Replay::default().skip("src/b.txt"),
    );
    assert_unchecked(
        "skip-worktree bit",
        &rec,
        "src/b.txt",
        "skip-worktree",
        b"hidden from git status\n",
    );
}

#[test]
fn state_assume_unchanged_bit() {
    let w = World::new();
    let repo = w.base("repo");
    w.git(&repo, &["update-index", "--assume-unchanged", "src/b.txt"]);
    write(&repo, "src/b.txt", b"hidden from git status\n");
    let rec = w.record(&repo);
    w.assert_agrees(
        "assume-unchanged bit",
        &repo,
        &rec,
        Replay::default().skip("src/b.txt"),
    );
    assert_unchecked(
        "assume-unchanged bit",
        &rec,
        "src/b.txt",
        "assume-unchanged",
        b"hidden from git status\n",
    );
}

// ---------------------------------------------------------------------------------------------
// Filters and line endings

/// A repository whose `*.up` files pass through an external filter driver (clean = upper case,
/// smudge = lower case): git runs it, libgit2 cannot.
fn filtered(w: &World) -> PathBuf {
    let repo = w.base("repo");
    w.git(&repo, &["config", "filter.upper.clean", "tr a-z A-Z"]);
    w.git(&repo, &["config", "filter.upper.smudge", "tr A-Z a-z"]);
    write(&repo, ".gitattributes", b"*.up filter=upper\n");
    write(&repo, "data.up", b"some lower case text\n");
    write(&repo, "other.up", b"another file\n");
    w.commit_all(&repo, "filtered files");
    let blob = w.git(&repo, &["cat-file", "-p", "HEAD:data.up"]);
    assert_eq!(blob, "SOME LOWER CASE TEXT\n", "the clean filter ran");
    repo
}

fn filter_replay() -> Replay {
    Replay::default()
        .setup(&["config", "filter.upper.clean", "tr a-z A-Z"])
        .setup(&["config", "filter.upper.smudge", "tr A-Z a-z"])
}

#[test]
fn state_external_filter_after_touch() {
    let w = World::new();
    let repo = filtered(&w);
    touch_later(&repo, "data.up");
    let rec = w.record(&repo);
    w.assert_agrees(
        "external filter, stale index after touch",
        &repo,
        &rec,
        filter_replay(),
    );
    assert_eq!(rec.working_tree, "");
}

#[test]
fn state_external_filter_after_copy_with_a_real_change() {
    let w = World::new();
    let repo = filtered(&w);
    let copy = w.path("copy");
    copy_tree(&repo, &copy);
    write(&copy, "other.up", b"another file, edited\n");
    let rec = w.record(&copy);
    w.assert_agrees(
        "external filter, stale index after copy",
        &copy,
        &rec,
        filter_replay().source(&copy),
    );
}

#[test]
fn state_text_auto_with_crlf_files() {
    let w = World::new();
    let repo = w.base("repo");
    // Committed with CRLF before any attribute: git keeps CRLF blobs as they are under text=auto.
    write(&repo, "win.txt", b"one\r\ntwo\r\n");
    write(&repo, "win2.txt", b"alpha\r\nbeta\r\n");
    w.commit_all(&repo, "crlf files");
    write(&repo, ".gitattributes", b"* text=auto\n");
    w.commit_all(&repo, "text=auto");
    touch_later(&repo, "win.txt");
    write(&repo, "win2.txt", b"alpha\r\nbeta\r\ngamma\r\n");
    write(&repo, "new-crlf.txt", b"new\r\nfile\r\n");
    let rec = w.record(&repo);
    w.assert_agrees("text=auto with CRLF files", &repo, &rec, Replay::default());
}

#[test]
fn state_eol_crlf_attribute() {
    let w = World::new();
    let repo = w.base("repo");
    write(&repo, ".gitattributes", b"*.crlf text eol=crlf\n");
    write(&repo, "win.crlf", b"one\r\ntwo\r\nthree\r\n");
    write(&repo, "same.crlf", b"unchanged\r\n");
    w.commit_all(&repo, "eol=crlf");
    write(&repo, "win.crlf", b"one\r\n2\r\nthree\r\nfour\r\n");
    touch_later(&repo, "same.crlf");
    write(&repo, "new.crlf", b"fresh\r\n");
    let rec = w.record(&repo);
    w.assert_agrees("eol=crlf attribute", &repo, &rec, Replay::default());
}

// ---------------------------------------------------------------------------------------------
// Operations in progress

/// `main` and `other` both change line 3 of src/a.txt (and `other` deletes src/b.txt while `main`
/// changes it).
fn diverged(w: &World) -> PathBuf {
    let repo = w.base("repo");
    w.git(&repo, &["checkout", "-q", "-b", "other"]);
    let a = std::fs::read_to_string(repo.join("src/a.txt")).unwrap();
    write(
        &repo,
        "src/a.txt",
        a.replace("line 3\n", "line 3 on other\n").as_bytes(),
    );
    w.git(&repo, &["rm", "-q", "src/b.txt"]);
    w.commit_all(&repo, "other");
    w.git(&repo, &["checkout", "-q", "main"]);
    write(
        &repo,
        "src/a.txt",
        a.replace("line 3\n", "line 3 on main\n").as_bytes(),
    );
    write(&repo, "src/b.txt", b"one\ntwo\nthree, on main\n");
    w.commit_all(&repo, "main");
    repo
}

/// The state is recorded by name, dirty, and the patch still rebuilds the working tree files
/// (conflict markers included).
fn assert_operation(w: &World, state: &str, repo: &Path, rec: &Recorded, name: &str) {
    assert_eq!(
        operation(rec),
        Some(name),
        "[{state}] provenance.json operation: {:#}",
        rec.prov
    );
    assert!(
        rec.stderr.contains(name),
        "[{state}] no warning naming the {name} in progress: {}",
        rec.stderr
    );
    w.assert_agrees(state, repo, rec, Replay::default());
}

#[test]
fn state_merge_conflict_both_modified() {
    let w = World::new();
    let repo = diverged(&w);
    let out = w.git_output(&repo, &["merge", "-q", "other"]);
    assert!(!out.status.success());
    let rec = w.record(&repo);
    assert!(rec.working_tree.contains("UU src/a.txt"), "{}", rec.working_tree);
    assert_operation(&w, "merge conflict (both modified)", &repo, &rec, "merge");
}

#[test]
fn state_merge_conflict_deleted_by_them() {
    let w = World::new();
    let repo = diverged(&w);
    let out = w.git_output(&repo, &["merge", "-q", "other"]);
    assert!(!out.status.success());
    // Resolve a.txt so that only the modify/delete conflict is left.
    w.git(&repo, &["checkout", "--ours", "src/a.txt"]);
    w.git(&repo, &["add", "src/a.txt"]);
    let rec = w.record(&repo);
    assert!(rec.working_tree.contains("UD src/b.txt"), "{}", rec.working_tree);
    assert_operation(&w, "merge conflict (deleted by them)", &repo, &rec, "merge");
}

#[test]
fn state_rebase_stopped_midway() {
    let w = World::new();
    let repo = diverged(&w);
    let out = w.git_output(&repo, &["rebase", "other"]);
    assert!(!out.status.success());
    let rec = w.record(&repo);
    assert_operation(&w, "rebase stopped midway", &repo, &rec, "rebase");
}

#[test]
fn state_cherry_pick_stopped_midway() {
    let w = World::new();
    let repo = diverged(&w);
    let out = w.git_output(&repo, &["cherry-pick", "other"]);
    assert!(!out.status.success());
    let rec = w.record(&repo);
    assert_operation(&w, "cherry-pick stopped midway", &repo, &rec, "cherry-pick");
}

#[test]
fn state_revert_stopped_midway() {
    let w = World::new();
    let repo = diverged(&w);
    write(&repo, "src/a.txt", b"rewritten on main\n");
    w.commit_all(&repo, "rewrite a");
    let out = w.git_output(&repo, &["revert", "--no-edit", "HEAD~1"]);
    assert!(!out.status.success());
    let rec = w.record(&repo);
    assert_operation(&w, "revert stopped midway", &repo, &rec, "revert");
}

#[test]
fn state_bisect_in_progress() {
    let w = World::new();
    let repo = diverged(&w);
    write(&repo, "README", b"third\n");
    w.commit_all(&repo, "third");
    w.git(&repo, &["bisect", "start", "HEAD", "HEAD~2"]);
    let rec = w.record(&repo);
    assert_eq!(rec.prov["detached"], true);
    assert_operation(&w, "bisect in progress", &repo, &rec, "bisect");
}

// ---------------------------------------------------------------------------------------------
// Nested repositories

#[test]
fn state_untracked_nested_repository() {
    let w = World::new();
    let repo = w.base("repo");
    let nested = w.init("repo/vendor/lib");
    write(&nested, "lib.c", b"int f(void) { return 1; }\n");
    w.commit_all(&nested, "lib");
    write(&nested, "lib.c", b"int f(void) { return 2; }\n");
    write(&nested, "extra.h", b"/* new */\n");
    let rec = w.record(&repo);
    assert_eq!(rec.working_tree, "?? vendor/lib/\n");
    w.assert_agrees(
        "untracked nested repository",
        &repo,
        &rec,
        Replay::default().skip("vendor/lib"),
    );
    let list = rec.prov["nested-repositories"]
        .as_array()
        .unwrap_or_else(|| panic!("no nested-repositories: {:#}", rec.prov));
    assert_eq!(list.len(), 1, "{list:?}");
    let n = &list[0];
    assert_eq!(n["path"], "vendor/lib");
    assert_eq!(
        n["head"].as_str(),
        Some(w.git(&nested, &["rev-parse", "HEAD"]).trim())
    );
    assert_eq!(n["dirty"], true);
    let lines: String = n["status"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            format!(
                "{} {}\n",
                l["code"].as_str().unwrap(),
                l["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(lines, w.status(&nested));
    let lib_c = n["status"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["path"] == "lib.c")
        .unwrap();
    assert_eq!(lib_c["sha256"], sha256_hex(b"int f(void) { return 2; }\n"));
}

// ---------------------------------------------------------------------------------------------
// Repository layouts

#[test]
fn state_shallow_clone() {
    let w = World::new();
    let origin = w.base("origin");
    write(&origin, "README", b"second\n");
    w.commit_all(&origin, "second");
    write(&origin, "README", b"third\n");
    w.commit_all(&origin, "third");
    let url = format!("file://{}", origin.display());
    w.git(w.tmp.path(), &["clone", "-q", "--depth", "1", &url, "shallow"]);
    let repo = w.path("shallow");
    assert_eq!(w.git(&repo, &["rev-parse", "--is-shallow-repository"]), "true\n");
    write(&repo, "src/a.txt", b"changed in the shallow clone\n");
    write(&repo, "untracked.txt", b"new\n");
    let rec = w.record(&repo);
    w.assert_agrees("shallow clone", &repo, &rec, Replay::default().source(&origin));
}

#[test]
fn state_linked_worktree() {
    let w = World::new();
    let repo = w.base("repo");
    let wt = w.path("linked");
    w.git(
        &repo,
        &["worktree", "add", "-q", "-b", "feature", wt.to_str().unwrap()],
    );
    write(&wt, "src/b.txt", b"changed in the linked worktree\n");
    write(&wt, "wt-only.txt", b"untracked in the worktree\n");
    write(
        &repo,
        "main-only.txt",
        b"untracked in the main tree, not recorded\n",
    );
    let rec = w.record(&wt);
    assert_eq!(rec.prov["branch"], "feature");
    w.assert_agrees("linked worktree", &wt, &rec, Replay::default().source(&repo));
}

#[test]
fn state_git_file_pointing_elsewhere() {
    let w = World::new();
    let store = w.path("store/sep.git");
    let repo = w.path("tree");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(store.parent().unwrap()).unwrap();
    w.git(
        &repo,
        &[
            "init",
            "-q",
            "-b",
            "main",
            "--separate-git-dir",
            store.to_str().unwrap(),
        ],
    );
    assert!(repo.join(".git").is_file());
    write(&repo, "f.txt", b"one\n");
    w.commit_all(&repo, "one");
    write(&repo, "f.txt", b"two\n");
    write(&repo, "g.txt", b"untracked\n");
    let rec = w.record(&repo);
    w.assert_agrees(
        ".git file pointing elsewhere",
        &repo,
        &rec,
        Replay::default().source(&store),
    );
}

#[test]
fn state_core_worktree() {
    let w = World::new();
    let repo = w.base("tree");
    // Move the git folder away and leave a .git file, with core.worktree naming the tree (the
    // layout git uses for submodules).
    let store = w.path("store/moved.git");
    std::fs::create_dir_all(store.parent().unwrap()).unwrap();
    std::fs::rename(repo.join(".git"), &store).unwrap();
    std::fs::write(repo.join(".git"), format!("gitdir: {}\n", store.display())).unwrap();
    w.git(&repo, &["config", "core.worktree", repo.to_str().unwrap()]);
    write(&repo, "src/a.txt", b"changed under core.worktree\n");
    write(&repo, "fresh.txt", b"untracked\n");
    let rec = w.record(&repo);
    assert_eq!(rec.prov["repo"].as_str(), Some(repo.to_str().unwrap()));
    w.assert_agrees("core.worktree", &repo, &rec, Replay::default().source(&store));
}

#[test]
fn state_large_untracked_file() {
    let w = World::new();
    let repo = w.base("repo");
    let big = binary_bytes(LARGE_UNTRACKED_BYTES, 9);
    write(&repo, "data/huge.bin", &big);
    write(&repo, "small.txt", b"small untracked file\n");
    let rec = w.record(&repo);
    w.assert_agrees(
        "large untracked file",
        &repo,
        &rec,
        Replay::default().skip("data/huge.bin"),
    );
    let entry = rec.prov["untracked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["path"] == "data/huge.bin")
        .unwrap()
        .clone();
    assert_eq!(entry["size-bytes"], LARGE_UNTRACKED_BYTES as u64);
    assert_eq!(entry["sha256"], sha256_hex(&big));
    assert_eq!(entry["in-patch"], false, "{entry}");
    let small = rec.prov["untracked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["path"] == "small.txt")
        .unwrap()
        .clone();
    assert_eq!(small["in-patch"], true, "{small}");
    assert!(rec.prov["untracked-patch-limit-bytes"].as_u64().unwrap() < LARGE_UNTRACKED_BYTES as u64);
    let patch = std::fs::read(&rec.patch).unwrap();
    assert!(patch.len() < 10_000, "the large file is not in the patch");
    assert!(
        rec.stderr.contains("data/huge.bin"),
        "no note about the file left out: {}",
        rec.stderr
    );
    let notes = crate::support::json(&rec.dir.join("bundle.json"))["notes"].to_string();
    assert!(notes.contains("data/huge.bin"), "bundle.json notes: {notes}");
}

#[test]
fn state_unborn_head() {
    let w = World::new();
    let repo = w.init("repo");
    write(&repo, "staged.txt", b"staged before the first commit\n");
    w.git(&repo, &["add", "staged.txt"]);
    write(&repo, "loose.txt", b"untracked\n");
    chmod(&repo, "loose.txt", 0o755);
    let rec = w.record(&repo);
    assert_eq!(rec.working_tree, w.status(&repo));
    assert_eq!(rec.prov["dirty"], true);
    assert!(rec.revision.starts_with("unborn HEAD"), "{}", rec.revision);
    assert_eq!(rec.prov["branch"], "main");
    // No commit to clone: the patch alone rebuilds the tree in an empty repository.
    let empty = w.init("replayed");
    w.apply(&empty, &rec);
    assert_trees_equal(
        "unborn HEAD",
        &w.tree(&repo, &repo, &[]),
        &w.tree(&empty, &empty, &[]),
    );
}

#[test]
fn state_detached_head() {
    let w = World::new();
    let repo = w.base("repo");
    write(&repo, "README", b"second\n");
    w.commit_all(&repo, "second");
    w.git(&repo, &["checkout", "-q", "--detach", "HEAD~1"]);
    write(&repo, "src/b.txt", b"changed while detached\n");
    let rec = w.record(&repo);
    assert_eq!(rec.prov["detached"], true);
    assert!(rec.prov["branch"].is_null());
    w.assert_agrees("detached HEAD", &repo, &rec, Replay::default());
}

#[test]
fn state_no_repository() {
    let w = World::new();
    let dir = w.path("plain");
    write(&dir, "file.txt", b"not in git\n");
    let out = w.git_output(&dir, &["status", "--short"]);
    assert!(!out.status.success(), "git finds no repository either");
    let rec = w.record(&dir);
    assert!(rec.revision.starts_with("no git repository"), "{}", rec.revision);
    assert_eq!(rec.working_tree, "");
    assert_eq!(std::fs::metadata(&rec.patch).unwrap().len(), 0);
    assert!(rec.prov["repo"].is_null());
    assert!(rec.prov["head"].is_null());
}

/// A SHA-256 repository: git reads it, libgit2 refuses it.
fn sha256_repo(w: &World) -> PathBuf {
    let repo = w.path("sha256");
    std::fs::create_dir_all(&repo).unwrap();
    w.git(&repo, &["init", "-q", "-b", "main", "--object-format=sha256"]);
    write(&repo, "f.txt", b"one\n");
    w.commit_all(&repo, "one");
    write(&repo, "f.txt", b"two\n");
    write(&repo, "new.txt", b"untracked\n");
    repo
}

#[test]
fn state_repository_libgit2_cannot_open() {
    // The git CLI records it; what needed libgit2 (submodules, index bits) is named as missing.
    let w = World::new();
    let repo = sha256_repo(&w);
    let rec = w.record_with(&repo, &[], "true");
    assert_eq!(rec.working_tree, w.status(&repo));
    assert_eq!(rec.prov["dirty"], true);
    assert_eq!(rec.revision, w.git(&repo, &["rev-parse", "HEAD"]));
    let errors = rec.prov["errors"].to_string();
    assert!(errors.contains("libgit2 cannot open"), "{errors}");
    let clone = w.rebuild(&repo, &rec, &Replay::default(), "replayed");
    assert_trees_equal(
        "SHA-256 repository",
        &w.tree(&repo, &repo, &[]),
        &w.tree(&clone, &clone, &[]),
    );
}

#[test]
fn state_repository_nothing_can_read_is_unknown_in_list_and_report() {
    // Without git, libgit2 alone refuses the repository: dirty "unknown", a warning, and list
    // and report say unknown, never clean.
    let w = World::new();
    let repo = sha256_repo(&w);
    let path = path_without_git(&w);
    let rec = w.record_with(&repo, &[("PATH", &path)], "true");
    assert_eq!(rec.prov["dirty"], "unknown", "{:#}", rec.prov);
    let reason = rec.prov["dirty-reason"].as_str().unwrap_or_default();
    assert!(reason.contains("libgit2 cannot open"), "{reason}");
    assert!(
        rec.stderr
            .contains("warning: the working tree's state is unknown"),
        "{}",
        rec.stderr
    );
    let notes = crate::support::json(&rec.dir.join("bundle.json"))["notes"].to_string();
    assert!(notes.contains("unknown"), "bundle.json notes: {notes}");
    let results = w.path("results");
    let list = w.hwr(&["list", results.to_str().unwrap()], &[]);
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(table.contains("unknown"), "list: {table}");
    let list = w.hwr(&["list", results.to_str().unwrap(), "--format", "json"], &[]);
    let json: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(json[0]["dirty"], "unknown", "list --json: {json:#}");
    let report = w.hwr(&["report", rec.dir.to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("dirty tree: unknown"), "report: {text}");
}

// ---------------------------------------------------------------------------------------------
// Without git on PATH: libgit2 alone, and what it cannot decide is recorded as unknown.

/// PATH holding only `sh` and `true`, no git.
fn path_without_git(w: &World) -> String {
    let bin = w.path("bin-no-git");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["sh", "true"] {
        let found = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    bin.display().to_string()
}

#[test]
fn without_git_plain_changes_are_still_recorded_by_libgit2() {
    let w = World::new();
    let repo = w.base("repo");
    write(&repo, "src/b.txt", b"changed\n");
    write(&repo, "new.txt", b"untracked\n");
    let path = path_without_git(&w);
    let rec = w.record_with(&repo, &[("PATH", &path)], "true");
    assert_eq!(rec.prov["capture-method"], "libgit2");
    assert!(
        rec.prov["capture-method-reason"]
            .as_str()
            .unwrap()
            .contains("git")
    );
    w.assert_agrees("libgit2 only: plain changes", &repo, &rec, Replay::default());
}

#[test]
fn without_git_filters_sparse_and_conflicts_are_unknown() {
    for (state, build) in [
        (
            "external filter",
            (|w: &World| {
                let repo = filtered(w);
                touch_later(&repo, "data.up");
                repo
            }) as fn(&World) -> PathBuf,
        ),
        ("sparse checkout", |w: &World| {
            let repo = two_dirs(w);
            w.git(&repo, &["sparse-checkout", "set", "dir1"]);
            repo
        }),
        ("merge conflict", |w: &World| {
            let repo = diverged(w);
            assert!(!w.git_output(&repo, &["merge", "-q", "other"]).status.success());
            repo
        }),
    ] {
        let w = World::new();
        let repo = build(&w);
        let path = path_without_git(&w);
        let rec = w.record_with(&repo, &[("PATH", &path)], "true");
        assert_eq!(rec.prov["dirty"], "unknown", "[{state}] {:#}", rec.prov);
        assert!(
            rec.prov["dirty-reason"].as_str().is_some_and(|r| !r.is_empty()),
            "[{state}] {:#}",
            rec.prov
        );
        assert!(rec.stderr.contains("warning"), "[{state}] {}", rec.stderr);
    }
}

#[test]
fn with_git_the_cli_is_named_as_the_capture_method() {
    let w = World::new();
    let repo = filtered(&w);
    touch_later(&repo, "data.up");
    let rec = w.record(&repo);
    assert_eq!(rec.prov["capture-method"], "git-cli", "{:#}", rec.prov);
}

// ---------------------------------------------------------------------------------------------
// The reported failures, end to end

#[test]
fn regression_sparse_checkout_is_clean_and_rerun_at_recorded_revision_works() {
    let w = World::new();
    let repo = two_dirs(&w);
    let manifest = w.commit_manifest(&repo);
    w.git(&repo, &["sparse-checkout", "set", "dir1"]);
    let rec = w.record_manifest(&manifest, &[]);
    let out = w.hwr(
        &[
            "rerun",
            rec.dir.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
        &[],
    );
    assert_eq!(
        crate::support::code(&out),
        0,
        "rerun: {}",
        crate::support::stderr(&out)
    );
    assert_eq!(rec.working_tree, "", "git status is clean in a sparse checkout");
    assert_eq!(rec.prov["dirty"], false);
    assert_eq!(std::fs::metadata(&rec.patch).unwrap().len(), 0);
}

#[test]
fn regression_external_filter_after_touch_is_clean() {
    let w = World::new();
    let repo = filtered(&w);
    touch_later(&repo, "data.up");
    let rec = w.record(&repo);
    assert_eq!(rec.working_tree, "");
    assert_eq!(rec.prov["dirty"], false);
    assert_eq!(std::fs::metadata(&rec.patch).unwrap().len(), 0);
}

#[test]
fn regression_nested_repository_edited_during_the_experiment_is_drift() {
    let w = World::new();
    let repo = w.base("repo");
    let nested = w.init("repo/vendor/lib");
    write(&nested, "lib.c", b"v1\n");
    w.commit_all(&nested, "lib");
    let shell = format!("echo v2 > {}/lib.c", nested.display());
    let rec = w.record_with(&repo, &[], &shell);
    let n = &rec.prov["nested-repositories"][0];
    assert_eq!(n["path"], "vendor/lib", "{:#}", rec.prov);
    assert_eq!(
        n["head"].as_str(),
        Some(w.git(&nested, &["rev-parse", "HEAD"]).trim())
    );
    assert_eq!(n["dirty"], false);
    assert_eq!(rec.prov["drift"], true, "{:#}", rec.prov);
    let changed = rec.prov["after"]["changed"].to_string();
    assert!(changed.contains("vendor/lib"), "{changed}");
}

#[test]
fn regression_merge_conflict_is_named_and_the_bundle_verifies() {
    let w = World::new();
    let repo = diverged(&w);
    assert!(!w.git_output(&repo, &["merge", "-q", "other"]).status.success());
    let rec = w.record(&repo);
    let out = w.hwr(&["verify", rec.dir.to_str().unwrap()], &[]);
    assert_eq!(
        crate::support::code(&out),
        0,
        "verify: {}",
        crate::support::stderr(&out)
    );
    let patch = std::fs::read_to_string(&rec.patch).unwrap();
    assert!(!patch.contains("old mode 0"), "{patch}");
    assert_eq!(operation(&rec), Some("merge"));
    assert!(rec.stderr.contains("merge"), "{}", rec.stderr);
    // git apply on a clean clone rebuilds the files (conflict markers included).
    w.assert_agrees("merge conflict", &repo, &rec, Replay::default());
}

#[test]
fn regression_git_dir_in_the_environment_is_ignored_by_verify_and_rerun() {
    let w = World::new();
    let repo = w.base("repo");
    let manifest = w.commit_manifest(&repo);
    write(&repo, "src/b.txt", b"dirty, so that verify applies the patch\n");
    let rec = w.record_manifest(&manifest, &[]);
    // Another repository, as a git hook or CI job would export it.
    let other = w.base("other");
    write(&other, "README", b"the other repository\n");
    w.commit_all(&other, "other");
    let git_dir = other.join(".git");
    let index = git_dir.join("index");
    let env: &[(&str, &str)] = &[
        ("GIT_DIR", git_dir.to_str().unwrap()),
        ("GIT_WORK_TREE", other.to_str().unwrap()),
        ("GIT_INDEX_FILE", index.to_str().unwrap()),
    ];
    let verify = w.hwr(&["verify", rec.dir.to_str().unwrap()], env);
    let rerun = w.hwr(
        &[
            "rerun",
            rec.dir.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
        env,
    );
    assert_eq!(
        (crate::support::code(&verify), crate::support::code(&rerun)),
        (0, 0),
        "verify: {}\nrerun: {}",
        crate::support::stderr(&verify),
        crate::support::stderr(&rerun)
    );
    // The capture itself records the bundle's repository, not the exported one.
    let again = w.record_manifest(&manifest, env);
    assert_eq!(again.revision, rec.revision);
    assert_eq!(again.working_tree, " M src/b.txt\n");
    assert_eq!(
        w.git(&other, &["status", "--short"]),
        "",
        "the other repository was not touched"
    );
}

#[test]
fn rerun_at_recorded_revision_with_a_git_file_pointing_elsewhere() {
    let w = World::new();
    let store = w.path("store/sep.git");
    let repo = w.path("tree");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(store.parent().unwrap()).unwrap();
    w.git(
        &repo,
        &[
            "init",
            "-q",
            "-b",
            "main",
            "--separate-git-dir",
            store.to_str().unwrap(),
        ],
    );
    let manifest = w.commit_manifest(&repo);
    write(&repo, "f.txt", b"uncommitted\n");
    let rec = w.record_manifest(&manifest, &[]);
    assert_eq!(rec.prov["repo"].as_str(), Some(repo.to_str().unwrap()));
    let out = w.hwr(
        &[
            "rerun",
            rec.dir.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
        &[],
    );
    assert_eq!(
        crate::support::code(&out),
        0,
        "rerun: {}",
        crate::support::stderr(&out)
    );
    let out = w.hwr(&["verify", rec.dir.to_str().unwrap()], &[]);
    assert_eq!(
        crate::support::code(&out),
        0,
        "verify: {}",
        crate::support::stderr(&out)
    );
}

/// `hwr-exp ARGS` in `cwd` with the isolated environment plus `extra`; asserts exit 0 and returns
/// the bundle folder it printed (canonical) and its stderr.
fn run_from(w: &World, cwd: &Path, args: &[&str], extra: &[(&str, &str)]) -> (PathBuf, String) {
    let mut cmd = w.cmd(crate::support::bin().to_str().expect("UTF-8 binary path"));
    cmd.current_dir(cwd).args(args).stdin(Stdio::null());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("hwr-exp runs");
    let stderr = crate::support::stderr(&out);
    assert_eq!(crate::support::code(&out), 0, "{stderr}");
    let printed = crate::support::stdout(&out);
    let bundle = cwd.join(printed.lines().last().expect("bundle path printed"));
    (bundle.canonicalize().unwrap(), stderr)
}

/// Issue 22.1: earlier bundles never leak into the record. From a subfolder, the default results
/// folder is the repository root's `results/` (as cargo's `target/`); with `--results-dir`
/// outside the repository, the bundles under the root's `results/` (and a bundle copied
/// elsewhere in the tree) are neither listed as untracked nor copied into working-tree.patch, by
/// either capture method; untracked files that are not in a bundle still are.
#[test]
fn earlier_bundles_are_never_part_of_the_recorded_tree() {
    let w = World::new();
    let repo = w.base("repo");
    let root = repo.canonicalize().unwrap();
    write(
        &repo,
        "experiments/leak.toml",
        b"format = 1\n[experiment]\nname = \"leak\"\n[command]\nshell = \"true\"\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n",
    );
    w.commit_all(&repo, "manifest");
    let exp = repo.join("experiments");
    // The first bundle, run from the root with the default results folder.
    let (first, _) = run_from(&w, &repo, &["run", "experiments/leak.toml", "--quiet"], &[]);
    assert!(
        first.starts_with(root.join("results/leak")),
        "{}",
        first.display()
    );
    copy_tree(&first, &repo.join("experiments/old-copy"));
    write(&repo, "results/notes.txt", b"mine\n");
    write(&repo, "experiments/scratch.txt", b"scratch\n");
    let outside = w.path("outside");
    let outside = outside.to_str().unwrap();
    let no_git = path_without_git(&w);
    for (method, extra) in [("git-cli", vec![]), ("libgit2", vec![("PATH", no_git.as_str())])] {
        // From the subfolder with the default results folder: the bundle goes to the root's.
        let (bundle, _) = run_from(&w, &exp, &["run", "leak.toml", "--quiet"], &extra);
        assert!(
            bundle.starts_with(root.join("results/leak")),
            "[{method}] {}",
            bundle.display()
        );
        // From the subfolder with the results outside the repository.
        let (away, _) = run_from(
            &w,
            &exp,
            &["run", "leak.toml", "--quiet", "--results-dir", outside],
            &extra,
        );
        for (case, b, notes_listed) in [("default results", &bundle, false), ("outside", &away, true)] {
            let state = format!("{method}, {case}");
            let prov = crate::support::json(&b.join("provenance.json"));
            assert_eq!(prov["capture-method"], method, "[{state}]");
            let tree = std::fs::read_to_string(b.join("working-tree.txt")).unwrap();
            let patch =
                String::from_utf8_lossy(&std::fs::read(b.join("working-tree.patch")).unwrap()).into_owned();
            for leaked in ["bundle.json", "results/leak/", "old-copy", "run.json"] {
                assert!(
                    !tree.contains(leaked),
                    "[{state}] {leaked} in working-tree.txt:\n{tree}"
                );
                assert!(
                    !patch.contains(leaked),
                    "[{state}] {leaked} in working-tree.patch"
                );
            }
            assert!(tree.contains("?? experiments/scratch.txt"), "[{state}] {tree}");
            assert!(patch.contains("experiments/scratch.txt"), "[{state}]");
            assert_eq!(
                tree.contains("?? results/notes.txt"),
                notes_listed,
                "[{state}] {tree}"
            );
            assert!(
                prov["bundles-left-out"].as_u64().unwrap_or(0) >= 1,
                "[{state}] {prov:#}"
            );
            assert_eq!(prov["dirty"], true, "[{state}]");
        }
    }
    // Only bundles untracked: the tree is clean, whichever method.
    std::fs::remove_file(repo.join("results/notes.txt")).unwrap();
    std::fs::remove_file(repo.join("experiments/scratch.txt")).unwrap();
    for extra in [vec![], vec![("PATH", no_git.as_str())]] {
        let (b, _) = run_from(
            &w,
            &exp,
            &["run", "leak.toml", "--quiet", "--results-dir", outside],
            &extra,
        );
        assert_eq!(std::fs::read_to_string(b.join("working-tree.txt")).unwrap(), "");
        assert_eq!(std::fs::metadata(b.join("working-tree.patch")).unwrap().len(), 0);
        let prov = crate::support::json(&b.join("provenance.json"));
        assert_eq!(prov["dirty"], false, "{prov:#}");
        assert_eq!(prov["drift"], false, "{prov:#}");
    }
    // `list` from the subfolder reads the same default folder.
    let mut cmd = w.cmd(crate::support::bin().to_str().unwrap());
    let out = cmd
        .current_dir(&exp)
        .args(["list", "--format", "json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed:#}");
}

/// A user's git configuration as hostile to hwr-exp's own git calls as it gets: no diff context,
/// no or mnemonic prefixes, colour always, an external diff driver that fails, unquoted paths,
/// CRLF conversion, untracked files hidden, whitespace errors refused by `git apply`, a hook
/// folder whose post-checkout hook writes into the tree. Written to `home/.gitconfig` and
/// `home/.config/git/config`; returns the variables that make hwr-exp read it.
fn hostile_home(w: &World) -> Vec<(String, String)> {
    let home = w.path("hostile-home");
    let hooks = home.join("hooks");
    std::fs::create_dir_all(home.join(".config/git")).unwrap();
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(
        hooks.join("post-checkout"),
        "#!/bin/sh\necho hooked > hooked.txt\n",
    )
    .unwrap();
    chmod(&home, "hooks/post-checkout", 0o755);
    let config = format!(
        "[diff]\n\tcontext = 0\n\tnoprefix = true\n\tmnemonicPrefix = true\n\texternal = /bin/false\n\trelative = true\n\tinterHunkContext = 7\n\tsuppressBlankEmpty = true\n\trenames = copies\n\tsubmodule = diff\n\
         [color]\n\tui = always\n\tdiff = always\n\tstatus = always\n\
         [core]\n\tquotepath = false\n\tautocrlf = true\n\tsafecrlf = true\n\teol = crlf\n\thooksPath = {}\n\twhitespace = trailing-space,space-before-tab\n\
         [status]\n\tshowUntrackedFiles = no\n\tshort = false\n\tbranch = true\n\trenames = false\n\trelativePaths = true\n\tshowStash = true\n\
         [apply]\n\twhitespace = error\n[submodule]\n\trecurse = true\n[gc]\n\tauto = 1\n[advice]\n\tdetachedHead = true\n",
        hooks.display()
    );
    std::fs::write(home.join(".gitconfig"), &config).unwrap();
    std::fs::write(home.join(".config/git/config"), &config).unwrap();
    vec![
        ("HOME".into(), home.display().to_string()),
        (
            "XDG_CONFIG_HOME".into(),
            home.join(".config").display().to_string(),
        ),
        (
            "GIT_CONFIG_GLOBAL".into(),
            home.join(".gitconfig").display().to_string(),
        ),
    ]
}

/// Issue 22.6: the user's git configuration never changes what hwr-exp records or checks. The
/// same dirty tree recorded with and without a hostile global configuration gives the same
/// working-tree.txt and working-tree.patch bytes; under it, `verify` passes and `rerun
/// --at-recorded-revision` rebuilds the recorded tree (no hook ran in it) and runs.
#[test]
fn hostile_user_git_configuration_changes_nothing_recorded() {
    let w = World::new();
    let repo = w.base("repo");
    w.commit_manifest(&repo);
    // Changes that need context lines, prefixes, quoting and exact bytes to replay.
    let forty: String = (0..40)
        .map(|i| {
            if i == 20 {
                "line twenty changed  \n".to_owned()
            } else {
                format!("line {i}\n")
            }
        })
        .collect();
    write(&repo, "src/a.txt", forty.as_bytes());
    write(&repo, "src/b.txt", b"one\ntwo \t\nthree\n\n\n");
    write(&repo, "untracked \u{fc}n\u{ef}.txt", b"caf\xc3\xa9\n");
    write(&repo, "crlf.txt", b"one\r\ntwo\r\n");
    write(&repo, "dir2/deep/new.txt", b"trailing space \n");
    w.git(&repo, &["mv", "dir2/c.txt", "dir2/moved.txt"]);
    let results = w.path("results");
    let results = results.to_str().unwrap();
    let args = ["run", "experiment.toml", "--quiet", "--results-dir", results];
    let (plain, _) = run_from(&w, &repo, &args, &[]);
    let hostile = hostile_home(&w);
    let hostile: Vec<(&str, &str)> = hostile.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (bad, _) = run_from(&w, &repo, &args, &hostile);
    let read = |b: &Path, name: &str| std::fs::read(b.join(name)).unwrap();
    for name in ["revision.txt", "working-tree.txt", "working-tree.patch"] {
        assert!(
            read(&plain, name) == read(&bad, name),
            "{name} differs under the hostile configuration:\n--- isolated\n{}\n--- hostile\n{}",
            String::from_utf8_lossy(&read(&plain, name)),
            String::from_utf8_lossy(&read(&bad, name))
        );
    }
    let prov = crate::support::json(&bad.join("provenance.json"));
    assert_eq!(prov["capture-method"], "git-cli");
    assert_eq!(prov["drift"], false, "{prov:#}");
    assert!(prov.get("errors").is_none(), "{prov:#}");
    // The record is the working tree: a clean clone plus the patch rebuilds it.
    let rec = w.record_manifest(&w.outside_manifest(&repo, "true"), &hostile);
    let clone = w.rebuild(&repo, &rec, &Replay::default(), "replayed-hostile");
    assert_trees_equal(
        "hostile configuration",
        &w.tree(&repo, &repo, &[]),
        &w.tree(&clone, &clone, &[]),
    );
    let b = bad.to_str().unwrap();
    let out = w.hwr(&["verify", b], &hostile);
    assert_eq!(
        crate::support::code(&out),
        0,
        "verify: {}",
        crate::support::stdout(&out)
    );
    // libgit2 (no git on PATH) under the same configuration: explicit prefixes and context, so
    // the patch it writes still applies.
    let no_git = path_without_git(&w);
    let mut lib_env = hostile.clone();
    lib_env.push(("PATH", no_git.as_str()));
    let (lib, _) = run_from(&w, &repo, &args, &lib_env);
    let lib_patch = String::from_utf8_lossy(&read(&lib, "working-tree.patch")).into_owned();
    assert!(
        lib_patch.contains("--- a/src/a.txt\n+++ b/src/a.txt\n"),
        "{lib_patch}"
    );
    assert!(
        lib_patch.contains(" line 19\n-line 20\n"),
        "no context lines: {lib_patch}"
    );
    let out = w.hwr(&["verify", lib.to_str().unwrap()], &hostile);
    assert_eq!(
        crate::support::code(&out),
        0,
        "verify: {}",
        crate::support::stdout(&out)
    );
    // Rebuilt and run under each configuration: the rebuilt trees record the same (a staged
    // rename comes back as a deletion and a new file: `git apply` without `--index`).
    let rerun = |bundle: &Path, extra: &[(&str, &str)]| {
        let out = w.hwr(
            &[
                "rerun",
                bundle.to_str().unwrap(),
                "--at-recorded-revision",
                "--quiet",
            ],
            extra,
        );
        assert_eq!(
            crate::support::code(&out),
            0,
            "rerun: {}",
            crate::support::stderr(&out)
        );
        let again = PathBuf::from(crate::support::stdout(&out).lines().last().unwrap());
        if again.is_absolute() {
            again
        } else {
            w.path("").join(again)
        }
    };
    let (again_plain, again_bad) = (rerun(&plain, &[]), rerun(&bad, &hostile));
    let tree = String::from_utf8(read(&again_bad, "working-tree.txt")).unwrap();
    assert!(
        !tree.contains("hooked"),
        "a hook ran in the recorded tree:\n{tree}"
    );
    for name in ["revision.txt", "working-tree.txt", "working-tree.patch"] {
        assert!(
            read(&again_plain, name) == read(&again_bad, name),
            "{name} of the rebuilt tree differs under the hostile configuration:\n{}",
            String::from_utf8_lossy(&read(&again_bad, name))
        );
    }
}
