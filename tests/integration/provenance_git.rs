//! Provenance against real git repositories built with the `git` CLI in temporary directories.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use hwr_exp::provenance::{self, host};
use serde_json::Value;

use crate::support::{
    binary_bytes, commit_all, git, init_repo, isolate_git, json, rerun_this_test, sha256_hex,
    write_file as write,
};

/// Every file under `root` except `.git` and names ending in `.log` (ignored in the fixtures):
/// relative path -> (content or symlink target, executable bit).
fn tree_files(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, bool)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (Vec<u8>, bool)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = entry.file_name();
            if name == ".git" || name.to_string_lossy().ends_with(".log") {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, (target.into_os_string().into_encoded_bytes(), false));
            } else if meta.is_dir() {
                walk(root, &path, out);
            } else {
                let exec = meta.permissions().mode() & 0o111 != 0;
                out.insert(rel, (std::fs::read(&path).unwrap(), exec));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn lines_set(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A temporary folder with an empty repository at `TMP/repo`, room beside it for a bundle and a
/// clone.
fn scratch_repo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    init_repo(&repo);
    (tmp, repo)
}

/// The trees under `a` and `b` hold the same files ([`tree_files`]): names, bytes, executable bits.
fn assert_same_tree(a: &Path, b: &Path) {
    let (a, b) = (tree_files(a), tree_files(b));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "file sets differ"
    );
    for (path, (content, exec)) in &a {
        let (c2, e2) = &b[path];
        assert!(content == c2, "content of {} differs", path.display());
        assert_eq!(exec, e2, "executable bit of {} differs", path.display());
    }
}

/// Clones `origin` at `rev` into the new folder `dest`, applies `patch` with `git apply` (no
/// `--index`), and asserts that the clone's tree is then `origin`'s ([`assert_same_tree`]).
fn assert_replay_rebuilds(origin: &Path, rev: &str, patch: &Path, dest: &Path) {
    git(
        dest.parent().unwrap(),
        &["clone", "-q", origin.to_str().unwrap(), dest.to_str().unwrap()],
    );
    git(dest, &["checkout", "-q", "--detach", rev]);
    if std::fs::metadata(patch).unwrap().len() > 0 {
        git(dest, &["apply", "--whitespace=nowarn", patch.to_str().unwrap()]);
    }
    assert_same_tree(origin, dest);
}

/// [`assert_replay_rebuilds`] with the snapshot's patch (saved as `TMP/working-tree.patch`) on a
/// clone at the snapshot's HEAD in `TMP/clone`.
fn assert_snapshot_patch_rebuilds(tmp: &Path, repo: &Path, snap: &provenance::Snapshot) {
    let patch = tmp.join("working-tree.patch");
    std::fs::write(&patch, snap.patch().read_all().unwrap()).unwrap();
    let head = snap.head().expect("the snapshot has a HEAD");
    assert_replay_rebuilds(repo, head, &patch, &tmp.join("clone"));
}

#[test]
fn dirty_tree_is_listed_and_patch_rebuilds_it_byte_for_byte() {
    let (tmp, repo) = scratch_repo();

    let lines: String = (0..40).map(|i| format!("line {i}\n")).collect();
    write(&repo, "a.txt", lines.as_bytes());
    write(&repo, "b.txt", b"one\ntwo\nthree\n");
    write(&repo, "c.txt", b"alpha\nbeta\n");
    write(&repo, "gone.txt", b"to be deleted in the working tree\n");
    write(&repo, "staged-gone.txt", b"to be deleted with git rm\n");
    write(&repo, "script.sh", b"#!/bin/sh\necho hi\n");
    write(&repo, "data/bin.dat", &binary_bytes(6000, 1));
    write(&repo, ".gitignore", b"*.log\n");
    write(&repo, "becomes-link.txt", b"a regular file first\n");
    write(&repo, "with space.txt", b"spaced\n");
    commit_all(&repo, "initial");

    // Staged edit.
    write(
        &repo,
        "a.txt",
        lines.replace("line 20\n", "line twenty\n").as_bytes(),
    );
    git(&repo, &["add", "a.txt"]);
    // Unstaged edit, losing the final newline.
    write(&repo, "b.txt", b"one\n2\nthree");
    // Staged edit plus a further unstaged edit (MM).
    write(&repo, "c.txt", b"alpha\nbeta\ngamma\n");
    git(&repo, &["add", "c.txt"]);
    write(&repo, "c.txt", b"ALPHA\nbeta\ngamma\ndelta\n");
    // Deleted files: one in the working tree only, one staged.
    std::fs::remove_file(repo.join("gone.txt")).unwrap();
    git(&repo, &["rm", "-q", "staged-gone.txt"]);
    // Mode change.
    std::fs::set_permissions(repo.join("script.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Changed binary file: a few bytes flipped and some appended.
    let mut bin = binary_bytes(6000, 1);
    bin[100] ^= 0xff;
    bin[4000] = 0;
    bin.extend_from_slice(&[0, 1, 2, 0, 3]);
    write(&repo, "data/bin.dat", &bin);
    // Untracked files inside a new folder (nested), an empty one and a binary one.
    write(&repo, "newdir/sub/new.txt", b"fresh file\n");
    write(&repo, "newdir/empty.txt", b"");
    write(&repo, "newdir/blob.bin", &binary_bytes(300, 2));
    // Type change (file -> symlink), a new symlink, and paths git quotes.
    std::fs::remove_file(repo.join("becomes-link.txt")).unwrap();
    std::os::unix::fs::symlink("a.txt", repo.join("becomes-link.txt")).unwrap();
    std::os::unix::fs::symlink("../a.txt", repo.join("newdir/link")).unwrap();
    write(&repo, "with space.txt", b"spaced out\n");
    write(&repo, "newdir/na\u{ef}ve \"q\".txt", b"unicode name\n");
    // Ignored files.
    write(&repo, "debug.log", b"ignored\n");
    write(&repo, "newdir/trace.log", b"ignored too\n");

    // Discover upward from a subdirectory.
    let snap = provenance::capture(&repo.join("newdir/sub"));
    assert!(snap.errors().is_empty(), "errors: {:?}", snap.errors());
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(snap.head(), Some(head.as_str()));
    assert_eq!(snap.branch(), Some("main"));
    assert_eq!(snap.dirty(), provenance::Dirty::Dirty);
    assert_eq!(snap.reason(), None);
    assert_eq!(
        snap.repo_root().unwrap().canonicalize().unwrap(),
        repo.canonicalize().unwrap()
    );

    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();
    hwr_exp::bundle::write::write_provenance(&bundle, &snap).unwrap();

    let revision = std::fs::read_to_string(bundle.join("revision.txt")).unwrap();
    assert_eq!(revision, format!("{head}\n"));

    let ours = lines_set(&std::fs::read_to_string(bundle.join("working-tree.txt")).unwrap());
    let theirs = lines_set(&git(&repo, &["status", "--short", "--untracked-files=all"]));
    assert_eq!(ours, theirs);
    for expected in [
        "M  a.txt",
        " M b.txt",
        "MM c.txt",
        " D gone.txt",
        "D  staged-gone.txt",
        " M script.sh",
        " M data/bin.dat",
        "?? newdir/sub/new.txt",
        "?? newdir/empty.txt",
        "?? newdir/blob.bin",
        "?? newdir/link",
        " T becomes-link.txt",
        " M \"with space.txt\"",
        "?? \"newdir/na\\303\\257ve \\\"q\\\".txt\"",
    ] {
        assert!(ours.contains(expected), "missing {expected:?} in {ours:?}");
    }
    assert!(!ours.iter().any(|l| l.contains(".log")), "{ours:?}");

    let patch = std::fs::read(bundle.join("working-tree.patch")).unwrap();
    let patch_text = String::from_utf8_lossy(&patch);
    assert!(patch_text.contains("GIT binary patch"), "{patch_text}");
    assert!(!patch_text.contains("Binary files"), "{patch_text}");
    assert!(!patch_text.contains(".log"), "ignored file in patch");

    let doc = json(&bundle.join("provenance.json"));
    assert_eq!(doc["format"], 1);
    assert_eq!(doc["head"], head.as_str());
    assert_eq!(doc["branch"], "main");
    assert_eq!(doc["detached"], false);
    assert_eq!(doc["dirty"], true);
    assert_eq!(doc["patch-sha256"], sha256_hex(&patch).as_str());
    assert!(doc["captured-at"].as_str().unwrap().ends_with('Z'));
    let at = doc["captured-at"].as_str().unwrap();
    at.parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("captured-at {at:?} is not RFC 3339: {e}"));
    let untracked: BTreeMap<&str, &str> = doc["untracked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["path"].as_str().unwrap(), u["sha256"].as_str().unwrap()))
        .collect();
    assert_eq!(untracked.len(), 5, "{untracked:?}");
    assert_eq!(untracked["newdir/link"], sha256_hex(b"../a.txt"));
    assert_eq!(untracked["newdir/sub/new.txt"], sha256_hex(b"fresh file\n"));
    assert_eq!(untracked["newdir/empty.txt"], sha256_hex(b""));
    assert_eq!(untracked["newdir/blob.bin"], sha256_hex(&binary_bytes(300, 2)));

    // Replay on a clean clone at revision.txt: the trees must be identical.
    let clone = tmp.path().join("clone");
    assert_replay_rebuilds(&repo, revision.trim(), &bundle.join("working-tree.patch"), &clone);
}

#[test]
fn clean_repository_has_empty_patch() {
    let tmp = tempfile::tempdir().unwrap();
    init_repo(tmp.path());
    write(tmp.path(), "f.txt", b"content\n");
    commit_all(tmp.path(), "one");

    let snap = provenance::capture(tmp.path());
    assert_eq!(snap.dirty(), provenance::Dirty::Clean);
    assert!(snap.patch().is_empty());
    assert!(snap.status().is_empty());
    assert!(snap.errors().is_empty(), "{:?}", snap.errors());
    let bundle = tempfile::tempdir().unwrap();
    hwr_exp::bundle::write::write_provenance(bundle.path(), &snap).unwrap();
    assert_eq!(
        std::fs::read(bundle.path().join("working-tree.patch")).unwrap(),
        b""
    );
    assert_eq!(
        std::fs::read(bundle.path().join("working-tree.txt")).unwrap(),
        b""
    );
    let doc = json(&bundle.path().join("provenance.json"));
    assert_eq!(doc["dirty"], false);
    assert_eq!(doc["patch-sha256"], sha256_hex(b"").as_str());
    assert!(doc.get("reason").is_none());
}

#[test]
fn no_repository_is_recorded_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let inside_repo = isolate_git(
        Command::new("git")
            .args(["rev-parse", "--git-dir"])
            .current_dir(tmp.path()),
    )
    .output()
    .unwrap()
    .status
    .success();
    assert!(!inside_repo, "the temp dir must not be inside a repository");

    let snap = provenance::capture(tmp.path());
    assert_eq!(snap.head(), None);
    assert_eq!(snap.repo_root(), None);
    assert_eq!(snap.dirty(), provenance::Dirty::Clean);
    let bundle = tempfile::tempdir().unwrap();
    hwr_exp::bundle::write::write_provenance(bundle.path(), &snap).unwrap();
    let revision = std::fs::read_to_string(bundle.path().join("revision.txt")).unwrap();
    assert_eq!(
        revision,
        format!("no git repository at {}\n", tmp.path().display())
    );
    let doc = json(&bundle.path().join("provenance.json"));
    assert_eq!(doc["reason"], revision.trim());
    assert_eq!(doc["head"], Value::Null);
    assert_eq!(doc["repo"], Value::Null);

    // A path that does not exist at all is recorded too.
    let snap = provenance::capture(&tmp.path().join("missing/dir"));
    assert!(snap.reason().is_some());
}

#[test]
fn unborn_head_records_branch_and_patch_adds_files() {
    let (tmp, repo) = scratch_repo();
    write(&repo, "first.txt", b"before any commit\n");

    let snap = provenance::capture(&repo);
    assert_eq!(snap.head(), None);
    assert_eq!(snap.branch(), Some("main"));
    assert_eq!(snap.reason(), Some("unborn HEAD: no commits yet on main"));
    assert_eq!(snap.dirty(), provenance::Dirty::Dirty);
    assert_eq!(snap.status().len(), 1);
    assert_eq!(snap.status()[0].code, "??");
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();
    hwr_exp::bundle::write::write_provenance(&bundle, &snap).unwrap();
    assert_eq!(
        std::fs::read_to_string(bundle.join("revision.txt")).unwrap(),
        "unborn HEAD: no commits yet on main\n"
    );
    assert_eq!(
        std::fs::read_to_string(bundle.join("working-tree.txt")).unwrap(),
        "?? first.txt\n"
    );
    let patch = String::from_utf8(snap.patch().read_all().unwrap()).unwrap();
    assert!(patch.contains("new file mode 100644"), "{patch}");
    assert!(patch.contains("+before any commit"), "{patch}");

    // Applying to an empty repository rebuilds the file.
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    init_repo(&fresh);
    git(
        &fresh,
        &["apply", bundle.join("working-tree.patch").to_str().unwrap()],
    );
    assert_same_tree(&repo, &fresh);
}

#[test]
fn detached_head_has_no_branch() {
    let tmp = tempfile::tempdir().unwrap();
    init_repo(tmp.path());
    write(tmp.path(), "f.txt", b"1\n");
    commit_all(tmp.path(), "one");
    write(tmp.path(), "f.txt", b"2\n");
    git(tmp.path(), &["commit", "-q", "-am", "two"]);
    git(tmp.path(), &["checkout", "-q", "--detach", "HEAD~1"]);
    let head = git(tmp.path(), &["rev-parse", "HEAD"]).trim().to_owned();

    let snap = provenance::capture(tmp.path());
    assert_eq!(snap.head(), Some(head.as_str()));
    assert_eq!(snap.branch(), None);
    assert!(snap.detached());
    assert_eq!(snap.dirty(), provenance::Dirty::Clean);
    let bundle = tempfile::tempdir().unwrap();
    hwr_exp::bundle::write::write_provenance(bundle.path(), &snap).unwrap();
    let doc = json(&bundle.path().join("provenance.json"));
    assert_eq!(doc["branch"], Value::Null);
    assert_eq!(doc["detached"], true);
    assert_eq!(doc["head"], head.as_str());
}

#[test]
fn drift_is_detected_between_captures() {
    let (tmp, repo) = scratch_repo();
    write(&repo, "f.txt", b"1\n");
    commit_all(&repo, "one");
    write(&repo, "f.txt", b"dirty\n");
    write(&repo, "notes.txt", b"untracked\n");
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();

    // Unchanged: no drift.
    let before = provenance::capture(&repo);
    hwr_exp::bundle::write::write_provenance(&bundle, &before).unwrap();
    let again = provenance::capture(&repo);
    assert!(!hwr_exp::bundle::write::write_provenance_after(&bundle, &before, &again).unwrap());
    let doc = json(&bundle.join("provenance.json"));
    assert_eq!(doc["drift"], false);
    assert_eq!(doc["after"]["patch-sha256"], doc["patch-sha256"]);
    assert_eq!(doc["after"]["dirty"], true);

    // An untracked file's content changes (same status letters): drift.
    write(&repo, "notes.txt", b"edited during the run\n");
    let after = provenance::capture(&repo);
    assert!(hwr_exp::bundle::write::write_provenance_after(&bundle, &before, &after).unwrap());
    let doc = json(&bundle.join("provenance.json"));
    assert_eq!(doc["drift"], true);
    assert_eq!(doc["after"]["changed"], serde_json::json!(["notes.txt"]));
    assert_ne!(doc["after"]["patch-sha256"], doc["patch-sha256"]);
    // The before-capture is kept as it was.
    assert_eq!(
        doc["patch-sha256"],
        sha256_hex(&before.patch().read_all().unwrap()).as_str()
    );

    // A commit moves HEAD: drift, HEAD named.
    commit_all(&repo, "two");
    let after = provenance::capture(&repo);
    assert!(hwr_exp::bundle::write::write_provenance_after(&bundle, &before, &after).unwrap());
    let doc = json(&bundle.join("provenance.json"));
    let new_head = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(doc["after"]["head"], new_head.as_str());
    assert_eq!(doc["after"]["dirty"], false);
    assert_eq!(doc["after"]["changed"][0], "HEAD");
}

#[test]
fn submodules_are_listed_with_recorded_and_checked_out_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let sub_origin = tmp.path().join("lib-origin");
    std::fs::create_dir(&sub_origin).unwrap();
    init_repo(&sub_origin);
    write(&sub_origin, "lib.txt", b"library v1\n");
    let sub_head = commit_all(&sub_origin, "lib one");

    let repo = tmp.path().join("super");
    std::fs::create_dir(&repo).unwrap();
    init_repo(&repo);
    write(&repo, "main.txt", b"superproject\n");
    git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            sub_origin.to_str().unwrap(),
            "libs/lib",
        ],
    );
    commit_all(&repo, "with submodule");

    let snap = provenance::capture(&repo);
    assert_eq!(snap.dirty(), provenance::Dirty::Clean, "{:?}", snap.status());
    assert_eq!(snap.submodules().len(), 1);
    let sm = &snap.submodules()[0];
    assert_eq!(sm.path, "libs/lib");
    assert_eq!(sm.recorded_commit.as_deref(), Some(sub_head.as_str()));
    assert_eq!(sm.checked_out_commit.as_deref(), Some(sub_head.as_str()));
    assert!(!sm.dirty);

    // A new commit checked out inside the submodule: recorded and checked-out commits differ.
    let sub = repo.join("libs/lib");
    write(&sub, "lib.txt", b"library v2\n");
    git(&sub, &["commit", "-q", "-am", "lib two"]);
    let new_sub_head = git(&sub, &["rev-parse", "HEAD"]).trim().to_owned();

    let snap = provenance::capture(&repo);
    let sm = &snap.submodules()[0];
    assert_eq!(sm.recorded_commit.as_deref(), Some(sub_head.as_str()));
    assert_eq!(sm.checked_out_commit.as_deref(), Some(new_sub_head.as_str()));
    assert!(sm.dirty);
    let theirs = lines_set(&git(&repo, &["status", "--short", "--untracked-files=all"]));
    assert_eq!(lines_set(&snap.working_tree_text()), theirs);
    // The submodule is not diffed into.
    assert!(!String::from_utf8_lossy(&snap.patch().read_all().unwrap()).contains("Subproject commit"));

    let bundle = tempfile::tempdir().unwrap();
    hwr_exp::bundle::write::write_provenance(bundle.path(), &snap).unwrap();
    let doc = json(&bundle.path().join("provenance.json"));
    assert_eq!(doc["submodules"][0]["path"], "libs/lib");
    assert_eq!(doc["submodules"][0]["recorded-commit"], sub_head.as_str());
    assert_eq!(doc["submodules"][0]["checked-out-commit"], new_sub_head.as_str());
    assert_eq!(doc["submodules"][0]["dirty"], true);
}

#[test]
fn host_facts_are_collected() {
    let facts = host::collect();
    assert_eq!(facts.format, 1);
    assert!(facts.hostname.as_deref().is_some_and(|h| !h.is_empty()));
    assert!(facts.logical_cpus.is_some_and(|n| n > 0));
    assert!(facts.memory_total_bytes.is_some_and(|b| b > 1 << 20));
    let allowed = facts.allowed_cpus.clone().unwrap();
    assert!(!allowed.is_empty() && allowed.len() <= facts.logical_cpus.unwrap());
    let kernel = facts.kernel.as_ref().unwrap();
    let uname_r = Command::new("uname").arg("-r").output().unwrap();
    assert_eq!(kernel.release, String::from_utf8_lossy(&uname_r.stdout).trim());
    assert_eq!(
        facts.env.contains_key("LD_PRELOAD"),
        std::env::var_os("LD_PRELOAD").is_some()
    );
    assert_eq!(facts.hwr_exp_version, env!("CARGO_PKG_VERSION"));

    let dir = tempfile::tempdir().unwrap();
    hwr_exp::bundle::write::write_host(dir.path(), &facts).unwrap();
    let doc = json(&dir.path().join("host.json"));
    assert_eq!(doc["format"], 1);
    assert!(doc["logical-cpus"].as_u64().unwrap() > 0);
    assert!(doc["memory-total-bytes"].as_u64().unwrap() > 0);
    assert!(doc["env"].is_object());
}

/// Child half of `host_env_reflects_the_runner_environment`: prints the facts when asked.
#[test]
fn host_env_child() {
    if std::env::var_os("HWR_HOST_CHILD").is_some() {
        let facts = host::collect();
        println!("HOSTJSON {}", serde_json::to_string(&facts).unwrap());
    }
}

#[test]
fn host_env_reflects_the_runner_environment() {
    let run = |set_preload: bool| -> Value {
        let mut cmd = rerun_this_test(module_path!(), "host_env_child");
        cmd.env("HWR_HOST_CHILD", "1")
            .env("MALLOC_ARENA_MAX", "2")
            .env("PYTHONMALLOC", "malloc")
            .env("HWR_TEST_SECRET_TOKEN", "hunter2")
            .env_remove("LD_PRELOAD");
        if set_preload {
            // A library that does not exist: ld.so warns on stderr and continues.
            cmd.env("LD_PRELOAD", "/nonexistent/libhwr-test-preload.so");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("HOSTJSON ").map(|(_, json)| json))
            .unwrap_or_else(|| panic!("no facts in child output: {stdout}"));
        serde_json::from_str(line).unwrap()
    };
    let with = run(true);
    assert_eq!(with["env"]["LD_PRELOAD"], "/nonexistent/libhwr-test-preload.so");
    assert_eq!(with["env"]["MALLOC_ARENA_MAX"], "2");
    assert_eq!(with["env"]["PYTHONMALLOC"], "malloc");
    assert!(with["env"].get("HWR_TEST_SECRET_TOKEN").is_none());
    assert!(with["env"].get("PATH").is_none());
    let without = run(false);
    assert!(without["env"].get("LD_PRELOAD").is_none(), "{without}");
}

#[test]
fn awkward_changes_replay_too() {
    let (tmp, repo) = scratch_repo();
    write(
        &repo,
        "unstaged-from-index.txt",
        b"kept on disk, removed from index\n",
    );
    write(&repo, "file-then-dir", b"a file that becomes a directory\n");
    write(&repo, "empty.txt", b"");
    write(&repo, "exec.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(repo.join("exec.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    write(&repo, "to-empty.txt", b"will be emptied\n");
    commit_all(&repo, "initial");

    // `git rm --cached`: staged deletion while the file stays on disk (D  + ??).
    git(&repo, &["rm", "-q", "--cached", "unstaged-from-index.txt"]);
    write(&repo, "unstaged-from-index.txt", b"kept on disk, and edited\n");
    // A file replaced by a directory of the same name.
    std::fs::remove_file(repo.join("file-then-dir")).unwrap();
    write(&repo, "file-then-dir/inner.txt", b"now a directory\n");
    // Added to the index, then deleted from the working tree (AD): nothing to replay.
    write(&repo, "added-then-removed.txt", b"short-lived\n");
    git(&repo, &["add", "added-then-removed.txt"]);
    std::fs::remove_file(repo.join("added-then-removed.txt")).unwrap();
    // Empty file gains content, a file is emptied, an executable loses its bit.
    write(&repo, "empty.txt", b"no longer empty\n");
    write(&repo, "to-empty.txt", b"");
    std::fs::set_permissions(repo.join("exec.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();

    let snap = provenance::capture(&repo);
    assert!(snap.errors().is_empty(), "{:?}", snap.errors());
    let theirs = lines_set(&git(&repo, &["status", "--short", "--untracked-files=all"]));
    assert_eq!(lines_set(&snap.working_tree_text()), theirs);

    assert_snapshot_patch_rebuilds(tmp.path(), &repo, &snap);
}

#[test]
fn excluded_results_directory_is_left_out_and_causes_no_drift() {
    let (_tmp, repo) = scratch_repo();
    write(&repo, "exp.toml", b"[experiment]\n");
    commit_all(&repo, "one");
    write(&repo, "results/exp/old-bundle/bundle.json", b"{}\n");
    write(&repo, "notes.txt", b"untracked, recorded\n");
    let results = repo.join("results");

    let before = provenance::capture_excluding(&repo, &[&results]);
    assert_eq!(snapshot_lines(&before), ["?? notes.txt"]);
    assert_eq!(before.untracked().len(), 1);
    let patch = String::from_utf8_lossy(&before.patch().read_all().unwrap()).into_owned();
    assert!(
        patch.contains("b/notes.txt") && !patch.contains("results/"),
        "{patch}"
    );

    // The runner writes its bundle under results/: not drift.
    let bundle = results.join("exp/new-bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    hwr_exp::bundle::write::write_provenance(&bundle, &before).unwrap();
    let after = provenance::capture_excluding(&repo, &[&results]);
    assert!(!hwr_exp::bundle::write::write_provenance_after(&bundle, &before, &after).unwrap());
    let doc = json(&bundle.join("provenance.json"));
    assert_eq!(doc["excluded"], serde_json::json!(["results"]));
    assert_eq!(doc["drift"], false);

    // Without the exclusion the bundle files are untracked changes.
    let plain = provenance::capture(&repo);
    assert!(
        plain
            .status()
            .iter()
            .any(|l| l.path.starts_with("results/exp/new-bundle/"))
    );
    assert!(hwr_exp::bundle::write::write_provenance_after(&bundle, &before, &plain).unwrap());
}

fn snapshot_lines(snap: &provenance::Snapshot) -> Vec<String> {
    snap.working_tree_text().lines().map(str::to_owned).collect()
}

#[test]
fn eol_conversion_round_trips_through_git_apply() {
    let (tmp, repo) = scratch_repo();
    write(&repo, ".gitattributes", b"*.crlf text eol=crlf\n");
    write(&repo, "win.crlf", b"one\r\ntwo\r\nthree\r\n");
    commit_all(&repo, "one");
    write(&repo, "win.crlf", b"one\r\n2\r\nthree\r\nfour\r\n");
    write(&repo, "new.crlf", b"fresh\r\n");

    let snap = provenance::capture(&repo);
    assert_snapshot_patch_rebuilds(tmp.path(), &repo, &snap);
}

#[test]
fn bare_and_broken_repositories_are_recorded_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let bare = tmp.path().join("bare.git");
    std::fs::create_dir(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let snap = provenance::capture(&bare);
    assert_eq!(snap.repo_root(), None);
    assert_eq!(snap.reason(), Some("unborn HEAD: no commits yet on main"));
    assert!(snap.errors().iter().any(|e| e.starts_with("bare repository at ")));
    let bundle = tempfile::tempdir().unwrap();
    hwr_exp::bundle::write::write_provenance(bundle.path(), &snap).unwrap();

    // HEAD pointing at a commit id that does not exist.
    let broken = tmp.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    init_repo(&broken);
    write(&broken, "f.txt", b"x\n");
    std::fs::write(
        broken.join(".git/HEAD"),
        "0123456789abcdef0123456789abcdef01234567\n",
    )
    .unwrap();
    let snap = provenance::capture(&broken);
    assert_eq!(snap.head(), None);
    let reason = snap.reason().expect("a reason for the missing revision");
    assert!(
        reason.starts_with("HEAD does not resolve to a commit"),
        "{reason}"
    );
    // No patch against an empty tree pretending every file is new.
    assert!(snap.patch().is_empty());
    assert!(snap.errors().iter().any(|e| e.contains("no working-tree.patch")));
    hwr_exp::bundle::write::write_provenance(bundle.path(), &snap).unwrap();
    assert_eq!(
        std::fs::read_to_string(bundle.path().join("revision.txt")).unwrap(),
        format!("{reason}\n")
    );
}

/// Issue 37 item 12: the git processes of one run, counted through a PATH wrapper that logs each
/// call (no timing). Before, a run asked `git --version` twice (once per capture) and ran 18 git
/// processes, then 16 with `--version` once, then 9. Now: no `--version` (the first real command
/// tells whether git is there), the repository located once per process, HEAD and its branch
/// read from the status itself (`--porcelain=v2 --branch`), no `git diff` when `git diff --raw`
/// lists no tracked change, and an after-run capture that is one `git status` when the tree is
/// what it was: 6 here (a clean tracked tree, one untracked file): locate, status, diff --raw,
/// add -N and diff of the untracked file, status after. The bound is that count, so that a call
/// added back fails here.
#[test]
fn one_run_never_asks_git_for_its_version_and_runs_at_most_6_git_processes() {
    let git = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH");
    let (_tmp, repo) = scratch_repo();
    let bin = repo.parent().unwrap().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = repo.parent().unwrap().join("git.log");
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            git.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let m = crate::support::ManifestBuilder::shell("gitcount", "true")
        .text_output()
        .set("measure", "sample-interval", "off")
        .write(&repo);
    // A repository with a commit (an unborn HEAD costs more: its branch, the empty tree, and a
    // `git diff --raw` started against HEAD before the status said there is none).
    crate::support::commit_all(&repo, "manifest");
    std::fs::write(repo.join("untracked.txt"), "u\n").unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let results = repo.parent().unwrap().join("results");
    let out = crate::support::hwr_command(&repo)
        .env("PATH", path)
        .args(["run", m.to_str().unwrap(), "--quiet", "--results-dir"])
        .arg(&results)
        .output()
        .unwrap();
    assert_eq!(crate::support::code(&out), 0, "{}", crate::support::stderr(&out));
    let calls = std::fs::read_to_string(&log).unwrap();
    let versions = calls.lines().filter(|l| l.ends_with("--version")).count();
    assert_eq!(versions, 0, "{calls}");
    // HEAD comes with the status: no `rev-parse HEAD` of its own.
    assert!(!calls.contains("rev-parse HEAD"), "{calls}");
    assert!(
        calls.lines().count() <= 6,
        "{} git processes:\n{calls}",
        calls.lines().count()
    );
}
