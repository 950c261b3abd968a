//! `hwr-exp rerun` end to end: archived bytes, parent, differences, recorded revision in a worktree.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn out_path(bundle: &Path) -> String {
    let records = run_records(bundle);
    assert_eq!(records.len(), 1);
    let r = &records[0];
    std::fs::read_to_string(
        bundle
            .join("runs")
            .join(r["run-id"].as_str().unwrap())
            .join(r["output"].as_str().unwrap()),
    )
    .unwrap()
}

/// The bundle path printed by a command run in `cwd` (printed relative to it when inside).
fn stdout_path(cwd: &Path, out: &std::process::Output) -> PathBuf {
    cwd.join(String::from_utf8_lossy(&out.stdout).trim())
}

fn worktrees(repo: &Path) -> usize {
    git(repo, &["worktree", "list", "--porcelain"])
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
}

const ECHO: &str = r#"format = 1
[experiment]
name = "echo"
[command]
shell = "echo archived-bytes"
output-format = "text"
"#;

#[test]
fn rerun_runs_the_archived_bytes_after_the_manifest_was_edited_or_deleted() {
    let repo = repo();
    let m = manifest(repo.path(), ECHO);
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();

    std::fs::write(&m, ECHO.replace("archived-bytes", "edited-bytes")).unwrap();
    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let new = stdout_path(repo.path(), &out);
    assert_ne!(new, old);
    assert_eq!(new.parent(), old.parent(), "same results folder by default");
    assert_eq!(out_path(&new), "archived-bytes\n");
    let info = json(&new.join("bundle.json"));
    assert_eq!(info["parent"], old.to_str().unwrap());
    assert_eq!(
        std::fs::read(new.join("manifest.toml")).unwrap(),
        std::fs::read(old.join("manifest.toml")).unwrap()
    );
    assert_eq!(
        info["manifest-path"],
        json(&old.join("bundle.json"))["manifest-path"]
    );
    // The differences are printed before the run: the manifest edit shows in the working tree.
    let err = stderr(&out);
    assert!(
        err.contains("differs from the archived bundle") && err.contains("experiment.toml"),
        "{err}"
    );

    std::fs::remove_file(&m).unwrap();
    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let third = stdout_path(repo.path(), &out);
    assert_eq!(out_path(&third), "archived-bytes\n");

    // list shows the lineage.
    let listed = hwr(repo.path(), &["list", "results", "--format", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let old_rel = old
        .strip_prefix(repo.path().join("results"))
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(rows[0]["parent"], serde_json::Value::Null);
    assert_eq!(rows[1]["parent"], old_rel);
    assert_eq!(rows[2]["parent"], old_rel);

    // A modified archived manifest is refused.
    std::fs::write(old.join("manifest.toml"), ECHO.replace("archived", "tampered")).unwrap();
    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("manifest.toml"), "{}", stderr(&out));
}

const PROBE: &str = r#"format = 1
[experiment]
name = "probe"
[command]
shell = "sha256sum data.txt"
output-format = "text"
"#;

#[test]
fn rerun_at_recorded_revision_sees_the_old_untracked_file() {
    let repo = repo();
    std::fs::write(repo.path().join(".gitignore"), "results/\n").unwrap();
    git(repo.path(), &["add", ".gitignore"]);
    git(repo.path(), &["commit", "-q", "-m", "ignore results"]);
    let recorded_head = git(repo.path(), &["rev-parse", "HEAD"]).trim().to_string();
    // data.txt and the manifest are untracked when the experiment runs.
    std::fs::write(repo.path().join("data.txt"), "old contents\n").unwrap();
    let m = manifest(repo.path(), PROBE);
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    let old_hash = out_path(&old);

    // HEAD moves on with other contents; the tree is clean.
    std::fs::write(repo.path().join("data.txt"), "new contents\n").unwrap();
    git(repo.path(), &["add", "data.txt", "experiment.toml"]);
    git(repo.path(), &["commit", "-q", "-m", "moved on"]);

    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_ne!(
        out_path(&stdout_path(repo.path(), &out)),
        old_hash,
        "today's tree has the new file"
    );
    assert!(
        stderr(&out).contains(&format!("revision: {recorded_head} -> ")),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("dirty: dirty -> clean"), "{}", stderr(&out));

    let out = hwr(
        repo.path(),
        &[
            "rerun",
            old.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let new = stdout_path(repo.path(), &out);
    assert_eq!(out_path(&new), old_hash, "the run saw the recorded file");
    assert!(
        stderr(&out).contains("same revision, working tree, host and hwr-exp version"),
        "{}",
        stderr(&out)
    );
    let info = json(&new.join("bundle.json"));
    assert_eq!(info["parent"], old.to_str().unwrap());
    assert!(info["notes"].to_string().contains("recorded revision"), "{info}");
    assert_eq!(
        std::fs::read_to_string(new.join("revision.txt")).unwrap().trim(),
        recorded_head
    );
    assert_eq!(
        std::fs::read(new.join("working-tree.patch")).unwrap(),
        std::fs::read(old.join("working-tree.patch")).unwrap(),
        "the rebuilt tree records the same patch"
    );
    let workdir = PathBuf::from(run_records(&new)[0]["workdir"].as_str().unwrap());
    assert!(
        !workdir.exists(),
        "temporary worktree {} removed",
        workdir.display()
    );
    assert_eq!(worktrees(repo.path()), 1);
}

#[test]
fn missing_revision_or_bad_patch_is_an_error_before_any_run() {
    let repo = repo();
    std::fs::write(repo.path().join("data.txt"), "x\n").unwrap();
    let m = manifest(repo.path(), PROBE);
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    let bundles = || std::fs::read_dir(old.parent().unwrap()).unwrap().count();
    let count = bundles();

    let revision = std::fs::read_to_string(old.join("revision.txt")).unwrap();
    std::fs::write(old.join("revision.txt"), format!("{}\n", "ab".repeat(20))).unwrap();
    let out = hwr(
        repo.path(),
        &[
            "rerun",
            old.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not have the recorded commit"),
        "{}",
        stderr(&out)
    );
    std::fs::write(old.join("revision.txt"), revision).unwrap();

    std::fs::write(
        old.join("working-tree.patch"),
        "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-not what is there\n+x\n",
    )
    .unwrap();
    let out = hwr(
        repo.path(),
        &[
            "rerun",
            old.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("does not apply"), "{}", stderr(&out));
    assert_eq!(bundles(), count, "no bundle written");
    assert_eq!(worktrees(repo.path()), 1);
    // verify reports the same patch as a problem.
    let out = hwr(repo.path(), &["verify", old.to_str().unwrap()]);
    assert_eq!(code(&out), 1);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("working-tree.patch") && text.contains("does not apply"),
        "{text}"
    );
}

#[test]
fn interrupted_rerun_at_recorded_revision_removes_its_worktree() {
    let repo = repo();
    let m = manifest(
        repo.path(),
        "format = 1\n[experiment]\nname = \"sleeper\"\n[command]\nshell = \"test -e $HWR_BUNDLE/../../slow && exec sleep 30; echo ok\"\noutput-format = \"text\"\n",
    );
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    std::fs::write(repo.path().join("results/slow"), "").unwrap();
    let child = std::process::Command::new(bin())
        .current_dir(repo.path())
        .args([
            "rerun",
            old.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while worktrees(repo.path()) < 2 || std::fs::read_dir(old.parent().unwrap()).unwrap().count() < 2 {
        assert!(t.elapsed().as_secs() < 20, "rerun did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert_eq!(worktrees(repo.path()), 1, "worktree removed after Ctrl-C");
    let new = stdout_path(repo.path(), &out);
    assert_eq!(json(&new.join("bundle.json"))["status"], "interrupted");
}

#[test]
fn rerun_and_verify_in_a_moved_repository() {
    let repo = repo();
    std::fs::create_dir(repo.path().join("exp")).unwrap();
    std::fs::write(repo.path().join("exp/input.txt"), "input\n").unwrap();
    let m = repo.path().join("exp/experiment.toml");
    std::fs::write(&m, PROBE.replace("data.txt", "input.txt")).unwrap();
    git(repo.path(), &["add", "exp"]);
    git(repo.path(), &["commit", "-q", "-m", "experiment"]);
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    let hash = out_path(&old);

    // Months later the repository lives elsewhere; the recorded paths are gone.
    let moved = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", repo.path().display()))
        .arg(moved.path())
        .status()
        .unwrap();
    assert!(status.success());
    let rel = old.strip_prefix(repo.path()).unwrap().to_path_buf();
    drop(repo);
    let old = moved.path().join(rel);
    let out = hwr(moved.path(), &["verify", old.to_str().unwrap()]);
    assert_eq!(
        code(&out),
        0,
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    let out = hwr(moved.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("does not exist; used"), "{}", stderr(&out));
    assert_eq!(out_path(&stdout_path(moved.path(), &out)), hash);
}
