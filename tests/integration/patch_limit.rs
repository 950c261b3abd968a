//! working-tree.patch's limits (issue 20 item 5): a 300 MB untracked file is recorded by size and
//! sha256 only, untracked files past the 64 MiB total likewise, and so is a 300 MB modified
//! tracked file; the run, `verify` and `rerun --at-recorded-revision` name them, and the patch
//! stays under the limit. `[provenance] patch-limit` and `patch-file-limit` set the limits; a
//! rerun rebuilds a left-out file from the recorded working tree when it still holds the recorded
//! bytes.

use crate::support::{bundles, code, hwr, repo, sha256_hex, stderr, stdout, the_bundle, write_manifest};

const MIB: u64 = 1024 * 1024;

/// sha256 of `mib` MiB of zeros.
fn zeros_sha256(mib: u64) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let block = vec![0u8; MIB as usize];
    for _ in 0..mib {
        h.update(&block);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The bundle of `experiment` under `results` that is not `other`.
fn other_bundle(results: &std::path::Path, experiment: &str, other: &std::path::Path) -> std::path::PathBuf {
    let found: Vec<_> = bundles(results, experiment)
        .into_iter()
        .filter(|b| b != other)
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// A sparse file of `len` bytes at `rel` in `dir` (zeros, instant to write, no disk used).
fn sparse(dir: &std::path::Path, rel: &str, len: u64) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
}

#[test]
fn a_300_mb_untracked_file_and_files_past_the_total_are_recorded_by_size_and_sha256() {
    let repo = repo();
    let dir = repo.path();
    sparse(dir, "data/huge.bin", 300 * MIB);
    // Five files under the per-file limit (16 MiB) whose sum is past the total (64 MiB).
    for i in 0..5 {
        sparse(dir, &format!("shards/{i}.bin"), 15 * MIB);
    }
    std::fs::write(dir.join("small.txt"), "small\n").unwrap();
    write_manifest(
        dir,
        "format = 1\n[experiment]\nname = \"big\"\n[command]\nargv = [\"true\"]\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n",
    );
    let out = hwr(
        dir,
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    let err = stderr(&out);
    assert!([0, 1].contains(&code(&out)), "{err}");
    assert!(
        err.contains("data/huge.bin") && err.contains("limit for one file"),
        "{err}"
    );
    assert!(
        err.contains("shards/4.bin") && err.contains("limit for all files of the patch together"),
        "{err}"
    );
    let bundle = the_bundle(&dir.join("results"), "big");
    let prov = crate::support::json(&bundle.join("provenance.json"));
    let untracked = prov["untracked"].as_array().unwrap();
    let entry = |p: &str| untracked.iter().find(|u| u["path"] == p).unwrap().clone();
    let huge = entry("data/huge.bin");
    assert_eq!(huge["size-bytes"], 300 * MIB);
    assert_eq!(huge["in-patch"], false);
    assert_eq!(huge["sha256"], zeros_sha256(300));
    assert_eq!(entry("small.txt")["in-patch"], true);
    let in_patch = (0..5)
        .filter(|i| entry(&format!("shards/{i}.bin"))["in-patch"] == true)
        .count();
    assert_eq!(in_patch, 4, "4 x 15 MiB fit in 64 MiB, the fifth does not");
    let patch = std::fs::metadata(bundle.join("working-tree.patch"))
        .unwrap()
        .len();
    assert!(patch < 64 * MIB, "patch of {patch} bytes");
    let patch_text = std::fs::read(bundle.join("working-tree.patch")).unwrap();
    assert!(
        !patch_text.windows(13).any(|w| w == b"data/huge.bin"),
        "the large file is not in the patch"
    );

    let verify = hwr(dir, &["verify", bundle.to_str().unwrap()]);
    let said = format!("{}{}", stdout(&verify), stderr(&verify));
    assert_eq!(code(&verify), 0, "{said}");
    assert!(
        said.contains("data/huge.bin") && said.contains("shards/4.bin"),
        "verify notes them: {said}"
    );

    // The working tree no longer holds the recorded bytes: the rerun cannot rebuild them.
    std::fs::remove_file(dir.join("data/huge.bin")).unwrap();
    std::fs::write(dir.join("shards/4.bin"), "changed\n").unwrap();
    let rerun = hwr(
        dir,
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    let said = stderr(&rerun);
    assert!([0, 1].contains(&code(&rerun)), "{said}");
    assert!(
        said.contains("cannot be rebuilt whole") && said.contains("data/huge.bin"),
        "{said}"
    );
    assert!(said.contains("shards/4.bin"), "{said}");
}

#[test]
fn a_300_mb_modified_tracked_file_is_recorded_by_size_and_sha256_and_kept_out_of_the_patch() {
    let repo = repo();
    let dir = repo.path();
    repo.write("data/model.bin", "v1\n")
        .write("src.txt", "old line\n");
    repo.commit("small model");
    // Rewritten as 300 MB of zeros (sparse: no disk used); git sees the size change.
    sparse(dir, "data/model.bin", 300 * MIB);
    std::fs::write(dir.join("src.txt"), "new line\n").unwrap();
    assert!(repo.git(&["status", "--short"]).contains(" M data/model.bin"));
    write_manifest(
        dir,
        "format = 1\n[experiment]\nname = \"tracked\"\n[command]\nargv = [\"true\"]\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n",
    );
    let out = hwr(
        dir,
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    let err = stderr(&out);
    assert!([0, 1].contains(&code(&out)), "{err}");
    assert!(
        err.contains("changed tracked file data/model.bin") && err.contains("limit for one file"),
        "the run says so: {err}"
    );
    let bundle = the_bundle(&dir.join("results"), "tracked");
    let prov = crate::support::json(&bundle.join("provenance.json"));
    assert_eq!(prov["patch-limits"]["total-bytes"], 64 * MIB, "{prov}");
    assert_eq!(prov["patch-limits"]["file-bytes"], 16 * MIB, "{prov}");
    assert_eq!(prov["patch-limits"]["set-by"], "default", "{prov}");
    let left = prov["tracked-left-out"].as_array().expect("tracked-left-out");
    assert_eq!(left.len(), 1, "{prov}");
    let model = &left[0];
    assert_eq!(model["path"], "data/model.bin");
    assert_eq!(model["change"], "M");
    assert_eq!(model["size-bytes"], 300 * MIB);
    assert_eq!(model["head-size-bytes"], 3);
    assert_eq!(model["in-patch"], false);
    assert_eq!(model["sha256"], zeros_sha256(300));
    let notes = crate::support::json(&bundle.join("bundle.json"))["notes"].to_string();
    assert!(notes.contains("data/model.bin"), "bundle.json notes: {notes}");

    let patch = std::fs::read(bundle.join("working-tree.patch")).unwrap();
    assert!(patch.len() < 4096, "patch of {} bytes", patch.len());
    let text = String::from_utf8_lossy(&patch);
    assert!(text.contains("+new line") && text.contains("-old line"), "{text}");
    assert!(!text.contains("model.bin"), "{text}");
    assert_eq!(prov["patch-sha256"], sha256_hex(&patch));

    let verify = hwr(dir, &["verify", bundle.to_str().unwrap()]);
    let said = format!("{}{}", stdout(&verify), stderr(&verify));
    assert_eq!(code(&verify), 0, "{said}");
    assert!(
        said.contains("data/model.bin (tracked, 314572800 bytes"),
        "verify names it: {said}"
    );

    // Changed since: the rerun cannot rebuild it and says what it does instead.
    std::fs::write(dir.join("data/model.bin"), "v3\n").unwrap();
    let rerun = hwr(
        dir,
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    let said = stderr(&rerun);
    assert!([0, 1].contains(&code(&rerun)), "{said}");
    assert!(
        said.contains("cannot be rebuilt whole") && said.contains("data/model.bin"),
        "{said}"
    );
    assert!(
        said.contains("tracked ones have their content at the recorded revision"),
        "{said}"
    );
    let again = other_bundle(&dir.join("results"), "tracked", &bundle);
    let notes = crate::support::json(&again.join("bundle.json"))["notes"].to_string();
    assert!(notes.contains("cannot be rebuilt whole"), "{notes}");
}

/// The manifest of the limit tests: a tiny per-file and total limit, and a command that shows
/// what the tree it runs in holds.
const TINY: &str = "format = 1\n[experiment]\nname = \"tiny\"\n[command]\nshell = \"cat a.txt u3.txt | sha256sum; test -e gone.txt && echo gone-is-there; true\"\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n[provenance]\npatch-limit = \"2KiB\"\npatch-file-limit = 1024\n";

#[test]
fn a_tiny_limit_in_the_manifest_puts_small_files_out_and_a_rerun_rebuilds_them_from_the_tree() {
    let repo = repo();
    let dir = repo.path();
    repo.write("a.txt", "a\n")
        .write("b.txt", "b\n")
        .write("gone.txt", "g".repeat(3000));
    repo.commit("three files");
    write_manifest(dir, TINY);
    repo.commit("manifest");
    std::fs::write(dir.join("a.txt"), "A".repeat(2000)).unwrap(); // over 1024 bytes
    std::fs::write(dir.join("b.txt"), "B\n").unwrap(); // small: in the patch
    std::fs::remove_file(dir.join("gone.txt")).unwrap(); // 3000 bytes in HEAD
    std::fs::write(dir.join("u1.txt"), "1".repeat(600)).unwrap();
    std::fs::write(dir.join("u2.txt"), "2".repeat(600)).unwrap();
    std::fs::write(dir.join("u3.txt"), "3".repeat(900)).unwrap(); // past 2 KiB in all
    let out = hwr(
        dir,
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(
        err.contains("a.txt") && err.contains("1024-byte limit for one file"),
        "{err}"
    );
    assert!(
        err.contains("u3.txt") && err.contains("2048-byte limit for all files"),
        "{err}"
    );
    let bundle = the_bundle(&dir.join("results"), "tiny");
    let prov = crate::support::json(&bundle.join("provenance.json"));
    assert_eq!(prov["patch-limits"]["total-bytes"], 2048, "{prov}");
    assert_eq!(prov["patch-limits"]["file-bytes"], 1024, "{prov}");
    assert_eq!(prov["patch-limits"]["set-by"], "manifest", "{prov}");
    let left: Vec<(String, String)> = prov["tracked-left-out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["path"].as_str().unwrap().to_owned(),
                t["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        left,
        [("a.txt".into(), "M".into()), ("gone.txt".into(), "D".into())],
        "{prov}"
    );
    let untracked = prov["untracked"].as_array().unwrap();
    let in_patch = |p: &str| untracked.iter().find(|u| u["path"] == p).unwrap()["in-patch"].clone();
    assert_eq!(in_patch("u1.txt"), true);
    assert_eq!(in_patch("u2.txt"), true);
    assert_eq!(in_patch("u3.txt"), false);
    let patch = std::fs::read_to_string(bundle.join("working-tree.patch")).unwrap();
    for name in ["b.txt", "u1.txt", "u2.txt"] {
        assert!(
            patch.contains(&format!("b/{name}")),
            "{name} in the patch: {patch}"
        );
    }
    for name in ["a.txt", "gone.txt", "u3.txt"] {
        assert!(!patch.contains(name), "{name} not in the patch: {patch}");
    }
    let verify = hwr(dir, &["verify", bundle.to_str().unwrap()]);
    let said = format!("{}{}", stdout(&verify), stderr(&verify));
    assert_eq!(code(&verify), 0, "{said}");
    assert!(
        said.contains("3 file(s) are recorded in provenance.json by size and sha256 only"),
        "{said}"
    );
    assert!(said.contains("set in the manifest"), "{said}");
    for name in [
        "a.txt (tracked",
        "gone.txt (tracked, deleted)",
        "u3.txt (untracked",
    ] {
        assert!(said.contains(name), "verify names {name}: {said}");
    }

    // The working tree still holds the recorded bytes: the rerun rebuilds the tree whole.
    let rerun = hwr(
        dir,
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    let said = stderr(&rerun);
    assert_eq!(code(&rerun), 0, "{said}");
    assert!(
        said.contains("3 file(s) left out of working-tree.patch by its size limits were rebuilt"),
        "{said}"
    );
    assert!(!said.contains("cannot be rebuilt whole"), "{said}");
    let again = other_bundle(&dir.join("results"), "tiny", &bundle);
    let runs = |b: &std::path::Path| {
        let run = std::fs::read_dir(b.join("runs"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                !["run.json", "stderr.log", "memory.jsonl"]
                    .contains(&p.file_name().unwrap().to_str().unwrap())
            })
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_default()
    };
    assert_eq!(runs(&again), runs(&bundle), "the rerun saw the recorded tree");
    assert!(!runs(&again).contains("gone-is-there"));
    let prov_again = crate::support::json(&again.join("provenance.json"));
    assert_eq!(
        prov_again["patch-sha256"], prov["patch-sha256"],
        "the same tree, the same patch"
    );

    // Changed since: named, and the rerun goes on without it.
    std::fs::write(dir.join("u3.txt"), "changed\n").unwrap();
    let rerun = hwr(
        dir,
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    let said = stderr(&rerun);
    assert_eq!(code(&rerun), 0, "{said}");
    assert!(said.contains("cannot be rebuilt whole: 1 file(s)"), "{said}");
    assert!(said.contains("u3.txt (untracked, 900 bytes"), "{said}");
    assert!(said.contains("changed in"), "{said}");
}

#[test]
fn a_bad_patch_limit_is_a_manifest_error_where_it_is_written() {
    let repo = repo();
    let dir = repo.path();
    for (value, message) in [
        ("\"lots\"", "[provenance] patch-limit: \"lots\" is not a size"),
        ("-5", "[provenance] patch-limit: a size cannot be negative"),
        ("true", "a size like \"64KiB\""),
    ] {
        let path = write_manifest(
            dir,
            &format!(
                "format = 1\n[experiment]\nname = \"bad\"\n[command]\nargv = [\"true\"]\n[provenance]\npatch-limit = {value}\n"
            ),
        );
        for cmd in ["check", "run"] {
            let out = hwr(dir, &[cmd, path.to_str().unwrap()]);
            let err = stderr(&out);
            assert_eq!(code(&out), 2, "{cmd} {value}: {err}");
            assert!(err.contains("experiment.toml:7:15"), "{cmd} {value}: {err}");
            assert!(err.contains(message), "{cmd} {value}: {err}");
        }
    }
    assert!(!dir.join("results").exists(), "nothing written");
}

/// PATH holding only `sh` and `true`, no git: the capture falls back to libgit2.
fn path_without_git(dir: &std::path::Path) -> String {
    let bin = dir.join("bin-no-git");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["sh", "true"] {
        let found = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    bin.display().to_string()
}

#[test]
fn libgit2_applies_the_same_limits_as_the_git_cli() {
    let repo = repo();
    let dir = repo.path();
    repo.write("a.txt", "a\n")
        .write("b.txt", "b\n")
        .write("gone.txt", "g".repeat(3000))
        .write("model.bin", "v1\n");
    repo.commit("files");
    std::fs::write(dir.join("a.txt"), "A".repeat(2000)).unwrap();
    std::fs::write(dir.join("b.txt"), "B\n").unwrap();
    std::fs::remove_file(dir.join("gone.txt")).unwrap();
    sparse(dir, "model.bin", 300 * MIB);
    std::fs::write(dir.join("u1.txt"), "1".repeat(600)).unwrap();
    std::fs::write(dir.join("u3.txt"), "3".repeat(1500)).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let no_git = path_without_git(outside.path());
    let manifest = outside.path().join("experiment.toml");
    std::fs::write(
        &manifest,
        format!(
            "format = 1\n[experiment]\nname = \"lib\"\n[command]\nargv = [\"true\"]\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n[provenance]\nrepo = {:?}\npatch-limit = \"2KiB\"\npatch-file-limit = 1024\n",
            dir.display().to_string()
        ),
    )
    .unwrap();
    let mut recorded = Vec::new();
    for (method, path) in [("git-cli", None), ("libgit2", Some(no_git.as_str()))] {
        let results = outside.path().join(format!("results-{method}"));
        let mut cmd = crate::support::hwr_command(outside.path());
        cmd.args([
            "run",
            manifest.to_str().unwrap(),
            "--results-dir",
            results.to_str().unwrap(),
            "--quiet",
        ]);
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        let out = cmd.output().unwrap();
        assert_eq!(code(&out), 0, "{method}: {}", stderr(&out));
        let bundle = the_bundle(&results, "lib");
        let prov = crate::support::json(&bundle.join("provenance.json"));
        assert_eq!(prov["capture-method"], method, "{prov}");
        let patch = std::fs::read_to_string(bundle.join("working-tree.patch")).unwrap();
        for name in ["b.txt", "u1.txt"] {
            assert!(
                patch.contains(&format!("b/{name}")),
                "{method}: {name} in the patch: {patch}"
            );
        }
        for name in ["a.txt", "gone.txt", "model.bin", "u3.txt"] {
            assert!(
                !patch.contains(name),
                "{method}: {name} not in the patch: {patch}"
            );
        }
        recorded.push((
            prov["tracked-left-out"].clone(),
            prov["untracked"].clone(),
            prov["patch-limits"].clone(),
        ));
    }
    assert_eq!(recorded[0], recorded[1], "both methods record the same");
    let left = recorded[0].0.as_array().unwrap();
    let paths: Vec<&str> = left.iter().map(|t| t["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["a.txt", "gone.txt", "model.bin"]);
    assert_eq!(left[2]["size-bytes"], 300 * MIB);
    assert_eq!(left[2]["sha256"], zeros_sha256(300));
}

/// The patch's temporary file of a runner killed by SIGKILL stays behind; the next runner removes
/// it (its process is gone), and a finished run leaves none.
#[test]
fn the_patch_file_of_a_killed_runner_is_removed_by_the_next_run() {
    use std::io::BufRead;
    let repo = repo();
    let dir = repo.path();
    std::fs::write(dir.join("new.txt"), "untracked\n").unwrap();
    write_manifest(
        dir,
        "format = 1\n[experiment]\nname = \"kill\"\n[command]\nargv = [\"true\"]\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n",
    );
    let tmp = tempfile::tempdir().unwrap();
    let spooled = || -> Vec<String> {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("hwr-exp-patch-"))
            .collect()
    };
    let mut child = crate::support::hwr_command(dir)
        .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
        .env("TMPDIR", tmp.path())
        .env("HWR_TEST_PAUSE_AT", "staged")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "paused at staged");
    let left = spooled();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].starts_with(&format!("hwr-exp-patch-{}-", child.id())),
        "{left:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(spooled(), left, "SIGKILL leaves it behind");

    let out = crate::support::hwr_command(dir)
        .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        spooled().is_empty(),
        "removed by the next run, and its own too: {:?}",
        spooled()
    );
}
