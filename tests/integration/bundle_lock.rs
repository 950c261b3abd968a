//! Ownership of a bundle by an OS lock: a runner is alive exactly while it holds the bundle's
//! `flock`, whatever its program name; `list`, `report` and `resume` ask the lock.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{Signal, signal};
use crate::support::{
    bin, bundles, code, hwr, isolate_git, json, repo, run_records, stderr, wait_for, write_manifest,
};

/// How long the runner may take to reach a state the test waits for (a hang guard, not a timing
/// assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// Lines appended so far to `path` (0 when it does not exist yet).
fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The one bundle folder under `results/<experiment>/`, once its bundle.json exists (a hidden
/// `.tmp-*` folder is a bundle still being set up: [`bundles`] leaves it out).
fn the_bundle(results: &Path, experiment: &str) -> PathBuf {
    let mut found = Vec::new();
    wait_for("the bundle", PATIENCE, || {
        found = bundles(results, experiment)
            .into_iter()
            .filter(|p| p.join("bundle.json").is_file())
            .collect();
        !found.is_empty()
    });
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// `list results --format json`: the status of its only bundle.
fn listed_status(cwd: &Path) -> String {
    let out = hwr(cwd, &["list", "results", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    listed[0]["status"].as_str().unwrap().to_owned()
}

/// The `status` word of `hwr-exp report BUNDLE`'s first line (`bundle: ... status <word>, ...`).
fn reported_status(cwd: &Path, bundle: &Path) -> String {
    let out = hwr(cwd, &["report", bundle.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = text
        .lines()
        .find_map(|l| l.split("status ").nth(1))
        .and_then(|rest| rest.split([',', ')']).next())
        .unwrap_or_else(|| panic!("no status in the report:\n{text}\n{}", stderr(&out)));
    status.trim().to_owned()
}

/// A manifest of 10 runs that each append a line to `count` (outside the bundle), sleep 0.3 s and
/// then wait while `gate` exists, so the test decides when the runner may finish.
fn counting_manifest(dir: &Path, experiment: &str, count: &Path, gate: &Path) -> PathBuf {
    write_manifest(
        dir,
        &format!(
            r#"format = 1
[experiment]
name = "{experiment}"
[command]
shell = "echo {{repetition}} >> '{count}'; sleep 0.3; while [ -e '{gate}' ]; do sleep 0.05; done"
output-format = "text"
[schedule]
repetitions = 10
[isolation]
timeout = "120s"
"#,
            count = count.display(),
            gate = gate.display(),
        ),
    )
}

/// Starts `program run MANIFEST --results-dir results --quiet` in `cwd`, git isolated
/// ([`isolate_git`]; `program` is hwr-exp under another name, so not [`crate::support::hwr_command`]).
fn start_runner(program: &Path, cwd: &Path, manifest: &Path) -> Child {
    let mut cmd = Command::new(program);
    isolate_git(&mut cmd)
        .current_dir(cwd)
        .arg("run")
        .arg(manifest)
        .args(["--results-dir", "results", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_runner_started_through_a_symlink_is_alive_and_resume_is_refused() {
    let repo = repo();
    let outside = tempfile::tempdir().unwrap();
    let count = outside.path().join("executions.txt");
    let gate = outside.path().join("gate");
    std::fs::write(&gate, "").unwrap();
    let runner = outside.path().join("exp-runner");
    std::os::unix::fs::symlink(bin(), &runner).unwrap();
    let m = counting_manifest(repo.path(), "symlinked", &count, &gate);

    let mut child = start_runner(&runner, repo.path(), &m);
    let bundle = the_bundle(&repo.path().join("results"), "symlinked");
    wait_for("the first run", PATIENCE, || lines(&count) >= 1);

    // The runner lives (held at the gate): every reader sees it alive.
    assert_eq!(listed_status(repo.path()), "running");
    assert_eq!(reported_status(repo.path(), &bundle), "running");
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 3, "resume of a live bundle: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("live runner (pid {})", child.id())),
        "{}",
        stderr(&out)
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the runner was alive during the checks"
    );

    std::fs::remove_file(&gate).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(lines(&count), 10, "executions of the 10 planned runs");
    let run_dirs = std::fs::read_dir(bundle.join("runs")).unwrap().count();
    assert_eq!(run_dirs, 10);
    assert_eq!(run_records(&bundle).len(), 10);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete");
    assert_eq!(info["counts"]["ok"], 10, "{info}");
    assert!(!bundle.join(".lock").exists(), "lock file removed at the end");
    assert_eq!(listed_status(repo.path()), "complete");
}

#[test]
fn a_sigkilled_runner_leaves_a_bundle_that_report_and_list_call_abandoned() {
    let repo = repo();
    let outside = tempfile::tempdir().unwrap();
    let count = outside.path().join("executions.txt");
    let gate = outside.path().join("gate");
    std::fs::write(&gate, "").unwrap();
    let m = counting_manifest(repo.path(), "killed", &count, &gate);

    let mut child = start_runner(bin(), repo.path(), &m);
    let bundle = the_bundle(&repo.path().join("results"), "killed");
    wait_for("the first run", PATIENCE, || lines(&count) >= 1);
    assert_eq!(reported_status(repo.path(), &bundle), "running");

    signal(child.id(), Signal::KILL);
    child.wait().unwrap();
    // The run in flight dies with its runner; should it not, it must not wait forever.
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "running");
    assert!(
        bundle.join(".lock").exists(),
        "a killed runner leaves its lock file"
    );

    assert_eq!(reported_status(repo.path(), &bundle), "abandoned");
    assert_eq!(listed_status(repo.path()), "abandoned");
    let text = hwr(repo.path(), &["list", "results"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("abandoned"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // verify says so too, not "still running".
    let out = hwr(repo.path(), &["verify", bundle.to_str().unwrap()]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("not checked: the bundle was abandoned"), "{said}");
    assert!(!said.contains("still running"), "{said}");
}

/// A runner killed while it was starting a run dies first; the child it was forking holds a copy
/// of the lock's descriptor until its exec or its own death a moment later. A lock held while the
/// recorded writer's pid is gone is therefore waited for (up to about a second), not reported
/// as a live runner; a lock held by a live recorded writer is refused at once. The holder here is
/// `flock(1)`, keeping the lock for 0.4 s.
#[test]
fn a_lock_outliving_its_dead_writer_for_a_moment_is_waited_for() {
    use hwr_exp::bundle::lock::{BundleLock, LockError};
    let dir = tempfile::tempdir().unwrap();
    let lock_file = dir.path().join(".lock");
    let hold = |recorded: &str| {
        std::fs::write(&lock_file, format!("{recorded}\n")).unwrap();
        let child = Command::new("flock")
            .arg(&lock_file)
            .args(["sleep", "0.4"])
            .spawn()
            .unwrap();
        wait_for("flock to hold the lock", PATIENCE, || {
            Command::new("flock")
                .args(["--nonblock", "--shared"])
                .arg(&lock_file)
                .arg("true")
                .status()
                .is_ok_and(|s| !s.success())
        });
        child
    };

    // A recorded writer that no longer exists (pid_max is at most 2^22).
    let mut child = hold("4194305");
    let lock = BundleLock::acquire(dir.path());
    assert!(
        lock.is_ok(),
        "waited for the dead writer's lock: {:?}",
        lock.err()
    );
    drop(lock);
    child.wait().unwrap();

    // A live recorded writer (this test process): refused at once.
    let mut child = hold(&std::process::id().to_string());
    match BundleLock::acquire(dir.path()) {
        Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
        other => panic!("a live writer's lock was taken: {:?}", other.map(|_| ())),
    }
    child.wait().unwrap();
}
