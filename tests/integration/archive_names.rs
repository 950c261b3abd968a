//! Bundles by shorter names (issue 22, item 12): `report`, `verify`, `resume`, `rerun` and
//! `compare` take an experiment folder (its newest bundle, said on stderr), `latest` (the newest
//! bundle under the results folder) and `latest~N`; `run` ends by naming the next command on
//! stderr while stdout stays the bundle path alone.

use std::path::{Path, PathBuf};

use crate::support::{ManifestBuilder, code, hwr, printed_path, repo, stderr, stdout};

/// Runs `manifest` (not quiet) in `dir` into `results/`; returns the bundle and the output.
fn run(dir: &Path, manifest: &Path) -> (PathBuf, std::process::Output) {
    let out = hwr(
        dir,
        &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
    );
    (printed_path(dir, &out), out)
}

#[test]
fn an_experiment_folder_and_latest_name_the_newest_bundle() {
    let repo = repo();
    let dir = repo.path();
    let manifest = ManifestBuilder::shell("names", "echo 1").text_output().write(dir);
    let (first, _) = run(dir, &manifest);
    let (second, _) = run(dir, &manifest);
    assert_ne!(first, second);
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();

    for args in [
        vec!["report", "results/names"],
        vec!["report", "latest"],
        vec!["verify", "results/names"],
        vec!["verify", "latest"],
        vec!["report", "results"],
    ] {
        let out = hwr(dir, &args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("note: {}: its newest bundle", args[1])) && err.contains(&name(&second)),
            "{args:?}: {err}"
        );
        assert!(!stdout(&out).contains(&name(&first)), "{args:?}");
    }
    // latest~1 is the one before; compare takes both forms.
    let out = hwr(dir, &["compare", "latest~1", "results/names", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains(&name(&first)) && stderr(&out).contains(&name(&second)));
    // The bundle folder itself: no note.
    let out = hwr(dir, &["verify", second.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("note: "), "{}", stderr(&out));
    // Past the oldest, an empty folder, no results folder: usage errors that say why.
    let out = hwr(dir, &["report", "latest~2"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("past the oldest"), "{}", stderr(&out));
    std::fs::create_dir(dir.join("empty")).unwrap();
    let out = hwr(dir, &["report", "empty"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no bundle in it"), "{}", stderr(&out));
    let elsewhere = tempfile::tempdir().unwrap();
    let out = hwr(elsewhere.path(), &["verify", "latest"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

#[test]
fn rerun_and_resume_take_the_shorter_names() {
    let repo = repo();
    let dir = repo.path();
    let manifest = ManifestBuilder::shell("names", "echo 1").text_output().write(dir);
    let (first, _) = run(dir, &manifest);
    let out = hwr(dir, &["rerun", "results/names", "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rerun = printed_path(dir, &out);
    let bundle: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rerun.join("bundle.json")).unwrap()).unwrap();
    let parent = bundle["parent"].as_str().unwrap_or_default().to_owned();
    assert!(
        parent.ends_with(&*first.file_name().unwrap().to_string_lossy()),
        "parent {parent}"
    );
    // resume of the newest (complete) bundle is refused for what it is, not for its name.
    let out = hwr(dir, &["resume", "latest"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("note: latest: its newest bundle"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("status is complete"), "{}", stderr(&out));
}

#[test]
fn run_names_the_next_command_on_stderr() {
    let repo = repo();
    let dir = repo.path();
    let ok = ManifestBuilder::shell("next", "echo 1").text_output().write(dir);
    let (bundle, out) = run(dir, &ok);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = bundle.strip_prefix(dir).unwrap().display().to_string();
    assert_eq!(stdout(&out).trim(), shown, "stdout is the bundle path alone");
    // Started by a path (not found as `hwr-exp` on PATH), the hint names that path, so that it
    // can be pasted as it is (`cargo run --release -- run ...` puts no hwr-exp on PATH).
    let bin = crate::support::bin().display().to_string();
    let last = stderr(&out).lines().last().unwrap_or_default().to_owned();
    assert_eq!(last, format!("next: {bin} report {shown}"));
    // With `hwr-exp` on PATH being this binary: the name alone; started by another name found
    // on PATH (a link `hx`): that name.
    let on_path = dir.join("on-path");
    std::fs::create_dir(&on_path).unwrap();
    let path = format!(
        "{}:{}",
        on_path.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let next_line = |program: &str| {
        let mut cmd = std::process::Command::new(program);
        cmd.current_dir(dir);
        crate::support::isolate_git(&mut cmd);
        let out = cmd
            .env("PATH", &path)
            .args(["run", ok.to_str().unwrap(), "--results-dir", "results"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let shown = stdout(&out).trim().to_owned();
        (stderr(&out).lines().last().unwrap_or_default().to_owned(), shown)
    };
    std::os::unix::fs::symlink(crate::support::bin(), on_path.join("hwr-exp")).unwrap();
    let (last, shown) = next_line(crate::support::bin().to_str().unwrap());
    assert_eq!(last, format!("next: hwr-exp report {shown}"));
    std::fs::remove_file(on_path.join("hwr-exp")).unwrap();
    std::os::unix::fs::symlink(crate::support::bin(), on_path.join("hx")).unwrap();
    let (last, shown) = next_line("hx");
    assert_eq!(last, format!("next: hx report {shown}"));
    // --quiet: nothing on stderr.
    let out = hwr(
        dir,
        &["run", ok.to_str().unwrap(), "--results-dir", "results", "--quiet"],
    );
    assert_eq!(stderr(&out), "");
}

#[test]
fn an_interrupted_run_names_resume() {
    let repo = repo();
    let dir = repo.path();
    let manifest = ManifestBuilder::shell("next", "sleep 30")
        .text_output()
        .write(dir);
    let child = crate::support::hwr_command(dir)
        .args(["run", manifest.to_str().unwrap(), "--results-dir", "results"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::wait_for("the run to start", std::time::Duration::from_secs(60), || {
        std::fs::read_dir(dir.join("results/next"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|b| b.path().join("runs/000-r1").is_dir())
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let shown = stdout(&out).trim().to_owned();
    let last = stderr(&out).lines().last().unwrap_or_default().to_owned();
    let bin = crate::support::bin().display().to_string();
    assert_eq!(last, format!("next: {bin} resume {shown}"), "{}", stderr(&out));
    // Issue 22, item 14: `list` counts the interrupted run as not run, never as failed.
    let list = hwr(dir, &["list", "results", "--format", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows[0]["runs-failed"], 0, "{rows}");
    assert_eq!(rows[0]["runs-not-run"], 1, "{rows}");
    let table = stdout(&hwr(dir, &["list", "results"]));
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert!(header.contains(&"NOT-RUN"), "{table}");
}

/// `list` before any run: no bundles yet, said on stderr, an empty list and exit 0 (before: `error:
/// results: no such folder`, exit 2); a folder named that does not exist stays an error.
#[test]
fn list_before_any_run_is_an_empty_list() {
    let repo = repo();
    let dir = repo.path();
    let out = hwr(dir, &["list", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");
    assert!(stderr(&out).contains("no bundles yet"), "{}", stderr(&out));
    let out = hwr(dir, &["list", "nowhere"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("no such folder"), "{}", stderr(&out));
}
