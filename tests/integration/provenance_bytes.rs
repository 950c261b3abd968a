//! Issue 37 item 3: names are bytes end to end (untracked files and artifacts whose names are not
//! UTF-8), submodules in a rebuilt tree, and reftable repositories in `verify` and `rerun`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::support::{
    ManifestBuilder, Repo, code, git, hwr, json, printed_path, repo, run, run_records, stderr, stdout,
};

/// `hwr-exp verify BUNDLE` in `dir`: exit code and stdout.
fn verify(dir: &Path, bundle: &Path) -> (i32, String) {
    let out = hwr(dir, &["verify", bundle.to_str().unwrap()]);
    (code(&out), format!("{}{}", stdout(&out), stderr(&out)))
}

/// The text output of the bundle's only run.
fn only_output(bundle: &Path) -> String {
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

#[test]
fn an_untracked_file_whose_name_is_not_utf8_is_in_the_patch_and_checked_by_verify() {
    let repo = repo();
    repo.write(".gitignore", "results/\n").commit("ignore results");
    let name = OsStr::from_bytes(b"data\xff.txt");
    std::fs::write(repo.path().join(name), "untracked bytes\n").unwrap();
    let m = ManifestBuilder::shell("names", "echo '{{}}'").write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();

    let prov = json(&bundle.join("provenance.json"));
    let entry = prov["untracked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["path"].as_str().unwrap().starts_with("data"))
        .unwrap_or_else(|| panic!("{prov}"))
        .clone();
    assert_eq!(entry["path-bytes"], "64617461ff2e747874", "{entry}");
    assert_eq!(
        entry["sha256"],
        crate::support::sha256_hex(b"untracked bytes\n"),
        "{entry}"
    );
    assert_eq!(entry["in-patch"], true);
    assert!(prov["errors"].as_array().is_none_or(|e| e.is_empty()), "{prov}");
    // working-tree.txt quotes the exact bytes as `git status --short` does.
    let status = std::fs::read(bundle.join("working-tree.txt")).unwrap();
    assert!(
        String::from_utf8_lossy(&status).contains("?? \"data\\377.txt\""),
        "{}",
        String::from_utf8_lossy(&status)
    );

    // The patch rebuilds the file's bytes on a clean clone at the recorded revision.
    let clone = tempfile::tempdir().unwrap();
    git(clone.path(), &["clone", "-q", repo.path().to_str().unwrap(), "c"]);
    let c = clone.path().join("c");
    git(
        &c,
        &["apply", bundle.join("working-tree.patch").to_str().unwrap()],
    );
    assert_eq!(std::fs::read(c.join(name)).unwrap(), b"untracked bytes\n");

    let (rc, text) = verify(repo.path(), &bundle);
    assert_eq!(rc, 0, "{text}");

    // verify checks the file against the patch: a record naming other bytes is a problem.
    let path = bundle.join("provenance.json");
    let edited = std::fs::read_to_string(&path)
        .unwrap()
        .replace(entry["sha256"].as_str().unwrap(), &"0".repeat(64));
    std::fs::write(&path, edited).unwrap();
    let (rc, text) = verify(repo.path(), &bundle);
    assert_eq!(rc, 1, "{text}");
    assert!(text.contains("holds the untracked file data"), "{text}");
}

#[test]
fn an_artifact_whose_name_is_not_utf8_verifies_in_a_fresh_bundle() {
    let repo = repo();
    repo.write(".gitignore", "results/\n").commit("ignore results");
    let m = ManifestBuilder::shell(
        "artifact",
        r#"echo '{{}}'; printf z > "{run-dir}/$(printf 'art\377')"; printf y > "{run-dir}/$(printf 'art\376')""#,
    )
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let (rc, text) = verify(repo.path(), &bundle);
    assert_eq!(rc, 0, "{text}");
    let record = &run_records(&bundle)[0];
    let mut bytes: Vec<&str> = record["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name-bytes"].as_str().unwrap_or_else(|| panic!("{a}")))
        .collect();
    bytes.sort_unstable();
    assert_eq!(bytes, ["617274fe", "617274ff"]);

    // A changed artifact is still caught by its exact name.
    let run_dir = bundle.join("runs").join(record["run-id"].as_str().unwrap());
    std::fs::write(run_dir.join(OsStr::from_bytes(b"art\xff")), "changed").unwrap();
    let (rc, text) = verify(repo.path(), &bundle);
    assert_eq!(rc, 1, "{text}");
}

/// A library repository with two commits (`version.txt` v1, then v2) and a superproject with it
/// as submodule `lib` checked out at v1; returns (library, superproject, v1, v2).
fn superproject() -> (Repo, Repo, String, String) {
    let lib = Repo::new();
    let v1 = lib.write("version.txt", "v1\n").commit("v1");
    let v2 = lib.write("version.txt", "v2\n").commit("v2");
    let sup = Repo::new();
    sup.write(".gitignore", "results/\n");
    let url = format!("file://{}", lib.path().display());
    crate::support::git_file_protocol(sup.path(), &["submodule", "add", "-q", &url, "lib"]);
    git(&sup.path().join("lib"), &["checkout", "-q", &v1]);
    sup.commit("lib at v1");
    (lib, sup, v1, v2)
}

#[test]
fn rerun_at_recorded_revision_checks_submodules_out_at_their_recorded_commits() {
    let (_lib, sup, v1, v2) = superproject();
    let m = ManifestBuilder::shell("sub", "cat lib/version.txt")
        .text_output()
        .write(sup.path());
    let (out, old) = run(sup.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    assert_eq!(only_output(&old), "v1\n");

    // The superproject moves its submodule on.
    git(&sup.path().join("lib"), &["checkout", "-q", &v2]);
    sup.commit("lib at v2");

    let out = hwr(
        sup.path(),
        &[
            "rerun",
            old.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let new = printed_path(sup.path(), &out);
    assert_eq!(only_output(&new), "v1\n", "the submodule at its recorded commit");
    let sub = &json(&new.join("provenance.json"))["submodules"][0];
    assert_eq!(sub["checked-out-commit"], v1.as_str(), "{sub}");
    assert!(
        stderr(&out).contains("same revision, working tree"),
        "{}",
        stderr(&out)
    );
    let worktrees = git(sup.path(), &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
}

#[test]
fn a_submodule_that_cannot_be_checked_out_is_said_not_same() {
    let (lib, sup, _v1, _v2) = superproject();
    let m = ManifestBuilder::shell("sub", "cat lib/version.txt || true")
        .text_output()
        .write(sup.path());
    let (out, old) = run(sup.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let old = old.unwrap();
    // Neither the checkout nor the URL holds the submodule any more.
    std::fs::remove_dir_all(sup.path().join("lib")).unwrap();
    std::fs::create_dir(sup.path().join("lib")).unwrap();
    let lib_path: PathBuf = lib.path().to_path_buf();
    drop(lib);
    assert!(!lib_path.exists());
    let out = hwr(
        sup.path(),
        &[
            "rerun",
            old.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("same revision, working tree"), "{err}");
    assert!(err.contains("submodule lib: not checked out"), "{err}");
}

/// Whether this git makes reftable repositories (`git init --ref-format`, git 2.45 and later).
fn reftable_supported() -> bool {
    let version = git(Path::new("."), &["--version"]);
    let numbers: Vec<u32> = version
        .split_whitespace()
        .nth(2)
        .unwrap_or("0")
        .split('.')
        .take(2)
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    numbers >= vec![2, 45]
}

#[test]
fn a_reftable_repository_gets_its_patch_checked_and_a_rerun_at_the_recorded_revision() {
    if !reftable_supported() {
        eprintln!("skipped: git older than 2.45 makes no reftable repositories");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main", "--ref-format=reftable"]);
    crate::support::write_file(dir.path(), "data.txt", b"committed\n");
    crate::support::write_file(dir.path(), ".gitignore", b"results/\n");
    let head = crate::support::commit_all(dir.path(), "init");
    crate::support::write_file(dir.path(), "data.txt", b"changed\n");
    let m = ManifestBuilder::shell("reftable", "cat data.txt")
        .text_output()
        .write(dir.path());
    let (out, bundle) = run(dir.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    assert_eq!(
        std::fs::read_to_string(bundle.join("revision.txt"))
            .unwrap()
            .trim(),
        head
    );
    let (rc, text) = verify(dir.path(), &bundle);
    assert_eq!(rc, 0, "{text}");
    assert!(!text.contains("patch not checked"), "{text}");

    // The rerun rebuilds the recorded tree, whatever the working tree holds today.
    crate::support::write_file(dir.path(), "data.txt", b"changed again\n");
    let out = hwr(
        dir.path(),
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let new = printed_path(dir.path(), &out);
    assert_eq!(only_output(&new), "changed\n", "the recorded tree, not today's");
}
