//! `hwr-exp resume` end to end: a real runner interrupted (SIGINT) or killed (SIGKILL), then resumed.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::support::{
    ManifestBuilder, Repo, code, group_members, hwr, json, process_state, repo, run_records, spawn_run,
    stderr, the_bundle, wait_for,
};
use crate::support::{Signal, signal};

/// Five runs; the third sleeps 30 s while `results/slow` exists. Each run writes its shell's pid to
/// `results/pid-<repetition>` and prints a fresh timestamp, so a redone run has other bytes.
fn resumable() -> ManifestBuilder {
    ManifestBuilder::shell(
        "resumable",
        "echo $$ > $HWR_BUNDLE/../../pid-{repetition}; if [ {repetition} -eq 3 ] && [ -e $HWR_BUNDLE/../../slow ]; then exec sleep 30; fi; sleep 0.1; date +%s%N",
    )
    .text_output()
    .repetitions(5)
}

/// Starts the runner and waits until the third run is in flight.
fn start_until_the_third_run(dir: &Path) -> Child {
    let child = spawn_run(dir);
    wait_for("the third run", Duration::from_secs(20), || {
        pid_of_run(dir, 3).is_some()
    });
    child
}

fn pid_of_run(dir: &Path, repetition: u32) -> Option<i32> {
    std::fs::read_to_string(dir.join(format!("results/pid-{repetition}")))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Bytes of run.json and of every file it lists, by run id.
fn run_files(bundle: &Path, run_id: &str) -> Vec<(String, Vec<u8>)> {
    let dir = bundle.join("runs").join(run_id);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

fn assert_complete_with_five_ok(bundle: &Path) {
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete", "{info}");
    assert_eq!(info["counts"], serde_json::json!({"ok": 5}), "{info}");
    let records = run_records(bundle);
    assert_eq!(records.len(), 5);
    for r in &records {
        assert_eq!(r["outcome"], "ok", "{r}");
        assert_eq!(r["termination"], "exited", "{r}");
    }
    assert!(!bundle.join(".lock").exists(), "lock removed at the end");
    let verify = hwr(bundle, &["verify", "."]);
    assert_eq!(code(&verify), 0, "{}", String::from_utf8_lossy(&verify.stdout));
}

/// A repository with experiment.toml committed, `results/` ignored, and the `results/slow` marker.
fn setup() -> Repo {
    let repo = repo();
    resumable().write(repo.path());
    repo.write(".gitignore", "results/\n").commit("experiment");
    repo.write("results/slow", "");
    repo
}

#[test]
fn sigint_after_the_second_run_then_resume_keeps_the_first_two() {
    let repo = setup();
    let child = start_until_the_third_run(repo.path());
    let bundle = the_bundle(&repo.path().join("results"), "resumable");
    // Run 2 is recorded while run 3 executes (recording overlaps the next run).
    wait_for("runs 1 and 2 recorded", Duration::from_secs(20), || {
        run_records(&bundle).len() == 2
    });
    signal(child.id(), Signal::INT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");
    let listed = hwr(repo.path(), &["list", "results", "--format", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["status"], "interrupted", "{listed}");
    assert_eq!(listed[0]["runs-ok"], 2, "{listed}");
    assert_eq!(
        json(&bundle.join("runs/002-r3/run.json"))["termination"],
        "interrupted"
    );
    let kept: Vec<_> = ["000-r1", "001-r2"]
        .iter()
        .map(|id| run_files(&bundle, id))
        .collect();
    let kept_sha: Vec<_> = ["000-r1", "001-r2"]
        .iter()
        .map(|id| json(&bundle.join("runs").join(id).join("run.json"))["sha256"].clone())
        .collect();

    // A changed working tree refuses the resume and writes nothing.
    std::fs::write(repo.path().join("README"), "edited\n").unwrap();
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("README") && stderr(&out).contains("--allow-drift"),
        "{}",
        stderr(&out)
    );
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");
    repo.git(&["checkout", "README"]);

    // The third run no longer sleeps once the marker is gone.
    std::fs::remove_file(repo.path().join("results/slow")).unwrap();
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        repo.path().join(String::from_utf8_lossy(&out.stdout).trim()),
        bundle
    );
    assert_complete_with_five_ok(&bundle);
    for (id, (files, sha)) in ["000-r1", "001-r2"].iter().zip(kept.iter().zip(&kept_sha)) {
        assert_eq!(&run_files(&bundle, id), files, "{id} untouched");
        assert_eq!(
            &json(&bundle.join("runs").join(id).join("run.json"))["sha256"],
            sha
        );
    }
    let info = json(&bundle.join("bundle.json"));
    assert!(
        info["notes"][0].as_str().unwrap().contains("3 of 5 runs"),
        "{info}"
    );
    // A complete bundle is not resumed.
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("status is complete"), "{}", stderr(&out));
}

#[test]
fn sigkill_leaves_an_abandoned_bundle_that_resume_completes() {
    let repo = setup();
    let mut child = start_until_the_third_run(repo.path());
    let bundle = the_bundle(&repo.path().join("results"), "resumable");
    let run_pid = pid_of_run(repo.path(), 3).unwrap();
    // Run 2 is recorded while run 3 executes (recording overlaps the next run).
    wait_for("runs 1 and 2 recorded", Duration::from_secs(20), || {
        run_records(&bundle).len() == 2
    });

    // While the runner lives, resume is refused and list says running.
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("live runner (pid {})", child.id())),
        "{}",
        stderr(&out)
    );
    let listed = hwr(repo.path(), &["list", "results"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(" running "));

    signal(child.id(), Signal::KILL);
    child.wait().unwrap();
    // The run in flight dies with its runner (parent-death signal) and no process of its group is left.
    wait_for("the run to die", Duration::from_secs(20), || {
        matches!(process_state(i64::from(run_pid)), None | Some('Z'))
    });
    assert!(group_members(i64::from(run_pid)).is_empty());
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "running");
    assert!(!bundle.join("runs/002-r3/run.json").exists(), "half-written run");
    let listed = hwr(repo.path(), &["list", "results", "--format", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["status"], "abandoned", "{listed}");
    let text = hwr(repo.path(), &["list", "results"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("abandoned"));

    let kept: Vec<_> = ["000-r1", "001-r2"]
        .iter()
        .map(|id| run_files(&bundle, id))
        .collect();
    // Drift allowed: an untracked file appears, the resume runs and records it.
    std::fs::write(repo.path().join("notes.txt"), "later\n").unwrap();
    std::fs::remove_file(repo.path().join("results/slow")).unwrap();
    let out = hwr(
        repo.path(),
        &["resume", bundle.to_str().unwrap(), "--quiet", "--allow-drift"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_complete_with_five_ok(&bundle);
    for (id, files) in ["000-r1", "001-r2"].iter().zip(&kept) {
        assert_eq!(&run_files(&bundle, id), files, "{id} untouched");
    }
    let info = json(&bundle.join("bundle.json"));
    let notes = info["notes"].to_string();
    assert!(
        notes.contains("--allow-drift") && notes.contains("notes.txt"),
        "{info}"
    );
    assert!(notes.contains("previous status abandoned"), "{info}");
    assert_eq!(json(&bundle.join("provenance.json"))["drift"], true);
    assert_ne!(
        info["runner-pid"],
        child.id(),
        "the resuming runner's pid is recorded"
    );
}
