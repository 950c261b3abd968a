//! The runner under faults, end to end with real processes: closed stdout/stderr pipes, the
//! stopping signals (SIGHUP, SIGQUIT), file-size limits, a full disk (a small tmpfs), too many open
//! files, a SIGKILL at every step of the bundle's setup, and resume facing run.json files it cannot
//! read.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, code, json, stderr};

/// A temporary git repository with one commit, git isolated from the user's configuration.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(".home");
    std::fs::create_dir(&home).unwrap();
    let g = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir.path())
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    g(&["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join(".gitignore"), ".home/\nresults/\n").unwrap();
    g(&["add", ".gitignore"]);
    g(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-q",
        "-m",
        "init",
    ]);
    dir
}

/// `hwr-exp ARGS` in `dir`, git isolated from the user's configuration; stdin closed.
fn hwr(dir: &Path, args: &[&str]) -> Command {
    let home = dir.join(".home");
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .env_remove("HWR_TEST_PAUSE_AT")
        .stdin(Stdio::null());
    cmd
}

/// Writes `experiment.toml` with `[experiment] name = name`, a text output, `runs` repetitions of
/// `shell`.
fn manifest(dir: &Path, name: &str, shell: &str, runs: u32) {
    let text = format!(
        "format = 1\n[experiment]\nname = \"{name}\"\n[command]\nshell = '''{shell}'''\noutput-format = \"text\"\n[schedule]\nrepetitions = {runs}\n"
    );
    std::fs::write(dir.join("experiment.toml"), text).unwrap();
}

/// The bundle folders (not hidden) under `results/<name>`.
fn bundles(results: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(results.join(name)) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    found.sort();
    found
}

fn the_bundle(results: &Path, name: &str) -> PathBuf {
    let mut found = bundles(results, name);
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

fn status(bundle: &Path) -> String {
    json(&bundle.join("bundle.json"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every run of the bundle has a run.json with outcome `ok`, bundle.json says complete, no lock
/// file and no temporary file is left anywhere in it.
fn assert_complete(bundle: &Path, runs: usize) {
    assert_eq!(status(bundle), "complete", "{}", bundle.display());
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["counts"]["ok"], runs, "{info}");
    assert_eq!(common::run_records(bundle).len(), runs);
    assert!(!bundle.join(".lock").exists());
    assert_no_temporaries(bundle);
}

fn assert_no_temporaries(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".tmp"),
            "temporary file left: {}",
            entry.path().display()
        );
        if entry.file_type().unwrap().is_dir() {
            assert_no_temporaries(&entry.path());
        }
    }
}

// ---- The runner's own output -------------------------------------------------------------------

/// `hwr-exp run M 2>&1 | head -1`: stdout and stderr are one pipe whose reader leaves after the
/// first line; every later progress line and the summary meet a closed pipe.
#[test]
fn closed_stdout_and_stderr_after_the_first_line_do_not_stop_the_run() {
    let repo = repo();
    manifest(repo.path(), "piped", "sleep 0.3; echo {repetition}", 3);
    let (reader, writer) = std::io::pipe().unwrap();
    let mut cmd = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results"],
    );
    cmd.stdout(writer.try_clone().unwrap()).stderr(writer);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut first = String::new();
    BufReader::new(reader).read_line(&mut first).unwrap();
    assert!(first.contains("writing 3 runs"), "{first}");
    // The reader is dropped here: `head -1` exits.
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_complete(&the_bundle(&repo.path().join("results"), "piped"), 3);
}

/// `hwr-exp run M | true`: stdout is closed before the runner starts; the bundle path cannot be
/// printed, and that changes nothing.
#[test]
fn closed_stdout_from_the_start_keeps_the_exit_code_of_the_runs() {
    let repo = repo();
    manifest(
        repo.path(),
        "true",
        "echo {repetition}; exit $(( {repetition} == 2 ))",
        2,
    );
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results"],
    )
    .stdout(writer)
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    assert_eq!(code(&out), 1, "the second run failed: {}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    let bundle = the_bundle(&repo.path().join("results"), "true");
    assert_eq!(status(&bundle), "complete");
}

/// Reading commands whose reader left (`| head`) end quietly with success, like ripgrep.
#[test]
fn reading_commands_end_quietly_on_a_closed_stdout() {
    let repo = repo();
    manifest(repo.path(), "reader", "echo {repetition}", 2);
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = the_bundle(&repo.path().join("results"), "reader");
    let bundle = bundle.to_str().unwrap();
    for args in [
        vec!["report", bundle],
        vec!["report", bundle, "--format", "json"],
        vec!["list", "results"],
        vec!["plan", "experiment.toml"],
        vec!["plan", "experiment.toml", "--format", "shell"],
        vec!["check", "experiment.toml"],
        vec!["verify", bundle],
        vec!["schema"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = hwr(repo.path(), &args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?} is quiet");
    }
}

// ---- Signals -----------------------------------------------------------------------------------

/// SIGHUP (terminal closed) and SIGQUIT stop the runner like SIGTERM: the run in flight is
/// stopped, the bundle is `interrupted`, exit 130, and resume finishes it.
#[test]
fn sighup_and_sigquit_interrupt_the_bundle() {
    for (signal, name) in [
        (rustix::process::Signal::HUP, "hup"),
        (rustix::process::Signal::QUIT, "quit"),
    ] {
        let repo = repo();
        let results = repo.path().join("results");
        manifest(
            repo.path(),
            name,
            "if [ {repetition} -eq 2 ] && [ ! -e $HWR_BUNDLE/../../resumed ]; then exec sleep 30; fi; echo {repetition}",
            3,
        );
        let child = hwr(
            repo.path(),
            &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        wait_for("the second run", || {
            bundles(&results, name)
                .first()
                .is_some_and(|b| b.join("runs/001-r2").is_dir())
        });
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let out = finish(child);
        assert_eq!(code(&out), 130, "{name}: {out:?}");
        let bundle = the_bundle(&results, name);
        assert_eq!(status(&bundle), "interrupted", "{name}");
        assert_eq!(
            common::run_records(&bundle).len(),
            2,
            "{name}: run 1 and the interrupted run 2"
        );

        std::fs::write(results.join("resumed"), "").unwrap();
        let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        assert_complete(&bundle, 3);
    }
}

// ---- resume never deletes what it cannot read --------------------------------------------------

/// A finished run whose run.json is corrupted or of a newer format is refused by resume with the
/// reason; the run folder is left exactly as it was.
#[test]
fn resume_refuses_unreadable_or_newer_run_json_and_deletes_nothing() {
    for (case, damage) in [
        ("corrupted", "{\"format\": 1, \"run-id\": "),
        ("newer", "{\"format\": 99, \"run-id\": \"000-r1\"}\n"),
    ] {
        let repo = repo();
        let results = repo.path().join("results");
        manifest(repo.path(), case, "echo {repetition}", 2);
        let out = hwr(
            repo.path(),
            &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
        )
        .output()
        .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let bundle = the_bundle(&results, case);
        // An interrupted bundle whose first run finished and whose second did not.
        let info = std::fs::read_to_string(bundle.join("bundle.json")).unwrap();
        std::fs::write(
            bundle.join("bundle.json"),
            info.replace("\"complete\"", "\"interrupted\""),
        )
        .unwrap();
        std::fs::remove_file(bundle.join("runs/001-r2/run.json")).unwrap();
        let run_json = bundle.join("runs/000-r1/run.json");
        std::fs::write(&run_json, damage).unwrap();
        let before = std::fs::read(bundle.join("runs/000-r1/000-r1.txt")).unwrap();

        let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{case}: {err}");
        assert!(
            err.contains("runs/000-r1/run.json"),
            "{case}: names the file: {err}"
        );
        match case {
            "newer" => assert!(err.contains("newer"), "{err}"),
            _ => assert!(err.contains("JSON"), "{err}"),
        }
        assert_eq!(
            std::fs::read_to_string(&run_json).unwrap(),
            damage,
            "{case}: run.json untouched"
        );
        assert_eq!(
            std::fs::read(bundle.join("runs/000-r1/000-r1.txt")).unwrap(),
            before
        );
        assert_eq!(status(&bundle), "interrupted", "{case}: nothing changed");
        assert!(!bundle.join(".lock").exists(), "{case}: no lock left");
    }
}
