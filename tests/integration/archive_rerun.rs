//! `hwr-exp rerun` end to end: archived bytes, parent, differences, recorded revision in a worktree.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::support::{
    ManifestBuilder, code, git, hwr, hwr_command, json, printed_path, repo, run, run_records, stderr,
    wait_for, write_manifest,
};
use crate::support::{Signal, processes_with_env, run_marker, signal};

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

/// `hwr-exp rerun BUNDLE --at-recorded-revision --quiet` in `repo`.
fn rerun_at_recorded_revision(repo: &Path, bundle: &Path) -> Output {
    hwr(
        repo,
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    )
}

fn worktrees(repo: &Path) -> usize {
    git(repo, &["worktree", "list", "--porcelain"])
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
}

/// Prints `WORDS`: which manifest bytes a run used.
fn echo(words: &str) -> String {
    ManifestBuilder::shell("echo", &format!("echo {words}"))
        .text_output()
        .text()
}

#[test]
fn rerun_runs_the_archived_bytes_after_the_manifest_was_edited_or_deleted() {
    let repo = repo();
    let m = write_manifest(repo.path(), &echo("archived-bytes"));
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();

    std::fs::write(&m, echo("edited-bytes")).unwrap();
    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let new = printed_path(repo.path(), &out);
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
    let third = printed_path(repo.path(), &out);
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
    std::fs::write(old.join("manifest.toml"), echo("tampered-bytes")).unwrap();
    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("manifest.toml"), "{}", stderr(&out));
}

/// Hashes `FILE`: what the run saw in the working tree.
fn hash_of(file: &str) -> ManifestBuilder {
    ManifestBuilder::shell("probe", &format!("sha256sum {file}")).text_output()
}

#[test]
fn rerun_at_recorded_revision_sees_the_old_untracked_file() {
    let repo = repo();
    let recorded_head = repo.write(".gitignore", "results/\n").commit("ignore results");
    // data.txt and the manifest are untracked when the experiment runs.
    std::fs::write(repo.path().join("data.txt"), "old contents\n").unwrap();
    let m = hash_of("data.txt").write(repo.path());
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    let old_hash = out_path(&old);

    // HEAD moves on with other contents; the tree is clean.
    std::fs::write(repo.path().join("data.txt"), "new contents\n").unwrap();
    repo.commit("moved on");

    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_ne!(
        out_path(&printed_path(repo.path(), &out)),
        old_hash,
        "today's tree has the new file"
    );
    assert!(
        stderr(&out).contains(&format!("revision: {recorded_head} -> ")),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("dirty: dirty -> clean"), "{}", stderr(&out));

    let out = rerun_at_recorded_revision(repo.path(), &old);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let new = printed_path(repo.path(), &out);
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
    let m = hash_of("data.txt").write(repo.path());
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    let bundles = || std::fs::read_dir(old.parent().unwrap()).unwrap().count();
    let count = bundles();

    let revision = std::fs::read_to_string(old.join("revision.txt")).unwrap();
    std::fs::write(old.join("revision.txt"), format!("{}\n", "ab".repeat(20))).unwrap();
    let out = rerun_at_recorded_revision(repo.path(), &old);
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
    let out = rerun_at_recorded_revision(repo.path(), &old);
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
    let m = ManifestBuilder::shell(
        "sleeper",
        "test -e $HWR_BUNDLE/../../slow && exec sleep 30; echo ok",
    )
    .text_output()
    .write(repo.path());
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    std::fs::write(repo.path().join("results/slow"), "").unwrap();
    let child = hwr_command(repo.path())
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
    // The rerun's run sleeps in its worktree: the rerun is in flight. The worktree is counted
    // only then: `git worktree list` fails while a worktree is half made.
    let marker = run_marker(repo.path());
    wait_for("the rerun's run to start", Duration::from_secs(20), || {
        processes_with_env(&marker)
            .iter()
            .any(|(_, cmd)| cmd.starts_with("sleep 30"))
    });
    assert_eq!(worktrees(repo.path()), 2, "the rerun's worktree");
    signal(child.id(), Signal::INT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert_eq!(worktrees(repo.path()), 1, "worktree removed after Ctrl-C");
    let new = printed_path(repo.path(), &out);
    assert_eq!(json(&new.join("bundle.json"))["status"], "interrupted");
}

#[test]
fn rerun_and_verify_in_a_moved_repository() {
    let repo = repo();
    repo.write("exp/input.txt", "input\n")
        .write("exp/experiment.toml", hash_of("input.txt").text())
        .commit("experiment");
    let m = repo.path().join("exp/experiment.toml");
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
    assert_eq!(out_path(&printed_path(moved.path(), &out)), hash);
}

/// bundle.json `hwr-exp-sha256` with `sum` written in place of the recorded one.
fn set_recorded_binary(bundle: &Path, sum: &str) {
    let path = bundle.join("bundle.json");
    let mut info = json(&path);
    info["hwr-exp-sha256"] = sum.into();
    std::fs::write(&path, serde_json::to_vec_pretty(&info).unwrap()).unwrap();
}

#[test]
fn the_binary_that_was_hwr_exp_is_recorded_and_a_different_one_shows_as_drift() {
    let repo = repo();
    repo.write(".gitignore", "results/\n").commit("ignore results");
    let m = ManifestBuilder::argv(
        "builtin",
        &[
            "{hwr-exp}",
            "probe",
            "safetensors-retention",
            "--mode",
            "reuse",
            "--iterations",
            "100",
            "--sample-every",
            "50",
        ],
    )
    .write(repo.path());
    repo.commit("manifest");
    let (out, old) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    let info = json(&old.join("bundle.json"));
    let binary = crate::support::bin();
    let sum = crate::support::sha256_hex(&std::fs::read(binary).unwrap());
    assert_eq!(info["hwr-exp-sha256"], sum.as_str(), "{info}");
    assert_eq!(
        info["hwr-exp-path"],
        std::fs::canonicalize(binary).unwrap().to_str().unwrap(),
        "{info}"
    );
    assert_eq!(info["hwr-exp-version"], env!("CARGO_PKG_VERSION"));

    // Same binary: a rerun at the recorded revision says what {hwr-exp} is, and nothing differs.
    let out = rerun_at_recorded_revision(repo.path(), &old);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let note = err
        .lines()
        .find(|l| l.starts_with("note: {hwr-exp} is this binary"))
        .unwrap_or_else(|| panic!("no note on {{hwr-exp}}: {err}"));
    assert!(
        note.contains("it is the binary that wrote the archived bundle"),
        "{note}"
    );
    let before_runs = err.find("rerun of").expect("rerun line");
    assert!(
        err.find(note).unwrap() < before_runs,
        "said before the runs start: {err}"
    );
    assert!(
        err.contains("same revision, working tree, host and hwr-exp version"),
        "{err}"
    );
    let new = printed_path(repo.path(), &out);
    assert!(
        json(&new.join("bundle.json"))["notes"]
            .to_string()
            .contains("{hwr-exp} is this binary")
    );

    // Another binary wrote the archived bundle: drift in rerun and in compare.
    let other = "ab".repeat(32);
    set_recorded_binary(&old, &other);
    let out = rerun_at_recorded_revision(repo.path(), &old);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "hwr-exp binary: sha256 {} -> {}",
            &other[..12],
            &sum[..12]
        )),
        "{err}"
    );
    assert!(err.contains("the built-in probe may differ"), "{err}");
    let compare = hwr(
        repo.path(),
        &[
            "compare",
            old.to_str().unwrap(),
            new.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(code(&compare), 0, "{}", stderr(&compare));
    let doc: serde_json::Value = serde_json::from_slice(&compare.stdout).unwrap();
    assert!(
        doc.to_string().contains("hwr-exp-sha256"),
        "compare names the binary difference: {doc}"
    );
    // A rerun without --at-recorded-revision shows the difference too, without the note.
    let out = hwr(repo.path(), &["rerun", old.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hwr-exp binary: sha256"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("{hwr-exp} is this binary"),
        "{}",
        stderr(&out)
    );
}
