//! The runner under faults, end to end with real processes: closed stdout/stderr pipes, the
//! stopping signals (SIGHUP, SIGQUIT), file-size limits, a full disk (a small tmpfs), too many open
//! files, a SIGKILL at every step of the bundle's setup, and resume facing run.json files it cannot
//! read.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Check, need, wrapped};
use crate::support::{
    ManifestBuilder, Repo, bundles, code, hwr_command, json, run_records, stderr, the_bundle, wait_for,
};

/// How long the runner may take to reach a state the test waits for (a hang guard, not a timing
/// assertion).
const PATIENCE: Duration = Duration::from_secs(30);

/// A temporary git repository (git isolated from the user's configuration) with one commit that
/// ignores `results/`.
fn repo() -> Repo {
    let repo = Repo::new();
    repo.write(".gitignore", "results/\n").commit("init");
    repo
}

/// `hwr-exp ARGS` in `dir`, git isolated from the user's configuration; stdin closed, no
/// setup pause (`HWR_TEST_PAUSE_AT`) inherited.
fn hwr(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = hwr_command(dir);
    cmd.args(args)
        .env_remove("HWR_TEST_PAUSE_AT")
        .stdin(Stdio::null());
    cmd
}

/// Writes `experiment.toml`: experiment `name`, `runs` repetitions of `shell`, text output.
fn manifest(dir: &Path, name: &str, shell: &str, runs: i64) {
    ManifestBuilder::shell(name, shell)
        .text_output()
        .repetitions(runs)
        .write(dir);
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
    assert_eq!(run_records(bundle).len(), runs);
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
        // Its stderr.log is created as it starts (its folder may be made earlier, while run 1
        // executes).
        wait_for("the second run", PATIENCE, || {
            bundles(&results, name)
                .first()
                .is_some_and(|b| b.join("runs/001-r2/stderr.log").is_file())
        });
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let out = finish(child);
        assert_eq!(code(&out), 130, "{name}: {out:?}");
        let bundle = the_bundle(&results, name);
        assert_eq!(status(&bundle), "interrupted", "{name}");
        assert_eq!(
            run_records(&bundle).len(),
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

// ---- Limits and full disks ---------------------------------------------------------------------

/// `hwr-exp ARGS` started through `prlimit LIMIT` (util-linux): the limit applies to the runner.
fn hwr_limited(dir: &Path, limit: &str, args: &[&str]) -> Output {
    wrapped(&["prlimit", limit, "--"], &hwr(dir, args))
        .stdin(Stdio::null())
        .output()
        .expect("prlimit runs")
}

fn assert_clean_exit_3(out: &Output, names: &str) {
    let err = stderr(out);
    assert_eq!(code(out), 3, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "one error: {err}");
    assert!(err.contains(names), "names {names}: {err}");
}

/// A 512-byte file-size limit: a setup file (bundle.json here) cannot be written during the setup
/// (plan.json is written later, while the first runs execute). The runner is not killed by SIGXFSZ: one error
/// naming the file, exit 3, no bundle (not even a half one for `list`).
#[test]
fn a_file_size_limit_during_the_setup_is_one_clear_error_and_leaves_no_bundle() {
    let repo = repo();
    let results = repo.path().join("results");
    manifest(repo.path(), "fsize", "echo {repetition}", 8);
    let out = hwr_limited(
        repo.path(),
        "--fsize=512",
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    assert_clean_exit_3(&out, ".json: cannot write: File too large");
    assert!(stderr(&out).contains("no bundle was created"), "{}", stderr(&out));
    assert!(bundles(&results, "fsize").is_empty());
    let list = hwr(repo.path(), &["list", "results"]).output().unwrap();
    assert_eq!(code(&list), 0);
    assert_eq!(stderr(&list), "");
    assert_eq!(
        String::from_utf8_lossy(&list.stdout).lines().count(),
        1,
        "header only"
    );
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_complete(&the_bundle(&results, "fsize"), 8);
}

/// A file-size limit set on the runner while it runs (by its second run, through `prlimit
/// --pid`): a run.json cannot be written, nor the `failed` mark; the error names that run.json and
/// says the bundle is abandoned, `list` shows it so, and resume completes it.
#[test]
fn a_file_size_limit_after_the_setup_leaves_a_bundle_that_resume_completes() {
    // 1600 bytes: below a run.json (about 2 KB), above the `failed` bundle.json (about 1.1 KB
    // since it records the binary's path and sha256).
    for (limit, left) in [("200", "shows as abandoned"), ("1600", "is marked failed")] {
        let repo = repo();
        let results = repo.path().join("results");
        let shell = format!(
            "if [ {{repetition}} -eq 2 ] && [ ! -e $HWR_BUNDLE/../../lifted ]; then prlimit --pid $(cat $HWR_BUNDLE/.lock) --fsize={limit}; fi; echo {{repetition}}"
        );
        manifest(repo.path(), "late", &shell, 3);
        let out = hwr(
            repo.path(),
            &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
        )
        .output()
        .unwrap();
        // The limit hits the run.json written next: the second run's, or the first run's when
        // the first is still being recorded while the second executes (recording overlaps the
        // next run where a CPU is free).
        assert_clean_exit_3(&out, "/run.json: cannot write: File too large");
        assert!(
            ["runs/000-r1/run.json", "runs/001-r2/run.json"]
                .iter()
                .any(|f| stderr(&out).contains(f)),
            "{limit}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(left), "{limit}: {}", stderr(&out));
        let bundle = the_bundle(&results, "late");
        let list = hwr(repo.path(), &["list", "results"]).output().unwrap();
        let listed = String::from_utf8_lossy(&list.stdout).into_owned();
        let expected = if limit == "200" { "abandoned" } else { "failed" };
        assert!(listed.contains(expected), "{limit}: {listed}");
        assert!(!listed.contains("running"), "{limit}: {listed}");

        std::fs::write(results.join("lifted"), "").unwrap();
        let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{limit}: {}", stderr(&out));
        assert_complete(&bundle, 3);
    }
}

/// Too many open files: the runner cannot start a run, or cannot write plan.json (written by a
/// thread while the first runs execute: which of the two hits the limit first is a race). That is
/// not a run's fault: no run is recorded as spawn-failed; one error naming the file (inside the
/// bundle, or the program), exit 3, the bundle marked failed, and resume with the limit lifted
/// completes it, writing plan.json again when the runner could not.
#[test]
fn too_many_open_files_stop_the_session_and_resume_completes_it() {
    // At the lowest limits the runner runs out before a bundle exists: nothing is written (issue
    // 37 item 5). At least one limit must stop a started session, for resume to complete it.
    let mut resumed = 0;
    for nofile in ["--nofile=6", "--nofile=8", "--nofile=10", "--nofile=12"] {
        let repo = repo();
        let results = repo.path().join("results");
        manifest(repo.path(), "emfile", "echo {repetition}", 3);
        let out = hwr_limited(
            repo.path(),
            nofile,
            &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
        );
        if code(&out) == 0 {
            continue;
        }
        assert_clean_exit_3(&out, "Too many open files");
        if bundles(&results, "emfile").is_empty() {
            continue;
        }
        resumed += 1;
        let bundle = the_bundle(&results, "emfile");
        let err = stderr(&out);
        let named = ["runs/000-r1", "plan.json"]
            .iter()
            .any(|f| err.contains(&format!("{}", bundle.join(f).display())))
            || err.contains("/bin/sh");
        assert!(named, "{nofile}: names the file: {err}");
        assert_eq!(status(&bundle), "failed", "{nofile}");
        // Read the run folders themselves: plan.json may be the file that could not be written.
        for record in recorded_runs(&bundle) {
            assert_eq!(
                record["outcome"], "ok",
                "{nofile}: a run the runner could not start is not recorded: {record}"
            );
        }
        let plan_missing = !bundle.join("plan.json").exists();
        // Where the limit also cut the provenance capture short, provenance.json says so in
        // `errors`, and resume cannot confirm the same tree: it refuses until told to go on.
        let capture_failed = json(&bundle.join("provenance.json"))["errors"]
            .as_array()
            .is_some_and(|e| !e.is_empty());
        let mut args = vec!["resume", bundle.to_str().unwrap(), "--quiet"];
        if capture_failed {
            let refused = hwr(repo.path(), &args).output().unwrap();
            assert_eq!(code(&refused), 3, "{nofile}: {}", stderr(&refused));
            assert!(stderr(&refused).contains("--allow-drift"), "{}", stderr(&refused));
            args.push("--allow-drift");
        }
        let out = hwr(repo.path(), &args).output().unwrap();
        assert_eq!(code(&out), 0, "{nofile}: {}", stderr(&out));
        if plan_missing {
            let notes = json(&bundle.join("bundle.json"))["notes"].to_string();
            assert!(
                notes.contains("plan.json was missing"),
                "{nofile}: bundle.json notes say plan.json was written again: {notes}"
            );
        }
        assert_complete(&bundle, 3);
    }
    assert!(resumed > 0, "no limit stopped a started session");
}

/// Every run.json under the bundle's runs/ folder, read without plan.json.
fn recorded_runs(bundle: &Path) -> Vec<serde_json::Value> {
    let Ok(entries) = std::fs::read_dir(bundle.join("runs")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let p = e.ok()?.path().join("run.json");
            p.exists().then(|| json(&p))
        })
        .collect()
}

/// A tmpfs of `size` mounted at `path` for the life of the guard; `None` (with a message) where
/// the test may not mount one, a failure under CI or `HWR_REQUIRE_TMPFS=1` ([`need`]).
struct Tmpfs(PathBuf);

impl Tmpfs {
    #[track_caller]
    fn mount(path: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(path).unwrap();
        need(
            Check::new(
                "a tmpfs the test may mount",
                "run as root to test a full disk",
                || {
                    let out = Command::new("mount")
                        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                        .arg(path)
                        .output()
                        .map_err(|e| e.to_string())?;
                    if out.status.success() {
                        Ok(Tmpfs(path.to_path_buf()))
                    } else {
                        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
                    }
                },
            )
            .required_by("HWR_REQUIRE_TMPFS"),
        )
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A full disk: the results folder is a 3 MiB tmpfs, a filler file takes two thirds, and each
/// run writes 400 KB. When it is full: one error naming the file, exit 3, the bundle not left
/// `running`; once the filler is removed, resume completes it. (The filler leaves room for the
/// attempts resume keeps: the run that was recording when the disk filled up, and the run that
/// was executing meanwhile.)
#[test]
fn a_full_disk_stops_the_session_and_resume_completes_it_once_there_is_space() {
    let repo = repo();
    let results = repo.path().join("results");
    let Some(_tmpfs) = Tmpfs::mount(&results, "3m") else {
        return;
    };
    let filler = results.join("filler");
    std::fs::write(&filler, vec![b'x'; 2 * 1024 * 1024]).unwrap();
    manifest(repo.path(), "full", "head -c 400000 /dev/zero | tr '\\0' x", 4);
    let out = hwr(
        repo.path(),
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    )
    .output()
    .unwrap();
    assert_clean_exit_3(&out, "No space left on device");
    let bundle = the_bundle(&results, "full");
    assert!(
        stderr(&out).contains(&format!("{}", bundle.display())),
        "{}",
        stderr(&out)
    );
    let list = hwr(repo.path(), &["list", "results"]).output().unwrap();
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        listed.contains("abandoned") || listed.contains("failed"),
        "{listed}"
    );

    std::fs::remove_file(&filler).unwrap();
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_complete(&bundle, 4);
}

// ---- The setup window --------------------------------------------------------------------------

/// The runner is killed (SIGKILL) at every step of the bundle's setup (`HWR_TEST_PAUSE_AT`, a
/// test-only hook). Before the bundle is published nothing shows (`list` is empty and quiet);
/// after, the bundle is complete enough for resume, which finishes it.
#[test]
fn sigkill_at_every_setup_step_leaves_nothing_or_a_resumable_bundle() {
    for step in ["staged", "manifest", "plan", "host", "provenance", "published"] {
        let repo = repo();
        let results = repo.path().join("results");
        manifest(repo.path(), "setup", "echo {repetition}", 2);
        let mut child = hwr(
            repo.path(),
            &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
        )
        .env("HWR_TEST_PAUSE_AT", step)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), format!("paused at {step}"));
        child.kill().unwrap();
        child.wait().unwrap();

        let list = hwr(repo.path(), &["list", "results"]).output().unwrap();
        assert_eq!(code(&list), 0, "{step}: {}", stderr(&list));
        assert_eq!(stderr(&list), "", "{step}: list skips nothing it cannot read");
        let listed = String::from_utf8_lossy(&list.stdout).into_owned();
        if step == "published" {
            let bundle = the_bundle(&results, "setup");
            assert!(listed.contains("abandoned"), "{step}: {listed}");
            // The local runner writes plan.json while the first runs execute: not yet here.
            assert!(
                !bundle.join("plan.json").exists(),
                "{step}: plan.json not written yet"
            );
            let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"])
                .output()
                .unwrap();
            assert_eq!(code(&out), 0, "{step}: {}", stderr(&out));
            assert_complete(&bundle, 2);
            let notes = json(&bundle.join("bundle.json"))["notes"].to_string();
            assert!(notes.contains("plan.json was missing"), "{step}: {notes}");
        } else {
            assert!(
                bundles(&results, "setup").is_empty(),
                "{step}: no bundle folder yet"
            );
            assert_eq!(listed.lines().count(), 1, "{step}: header only: {listed}");
        }
    }
}

/// The runner is killed the moment its bundle folder appears, found by polling: whatever the
/// moment, the folder is a bundle resume can finish (never "provenance.json: missing").
#[test]
fn sigkill_at_the_first_appearance_of_the_bundle_folder_leaves_a_resumable_bundle() {
    for attempt in 0..5 {
        let repo = repo();
        let results = repo.path().join("results");
        manifest(repo.path(), "appear", "sleep 0.2; echo {repetition}", 2);
        let mut child = hwr(
            repo.path(),
            &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let t = Instant::now();
        let bundle = loop {
            if let Some(b) = bundles(&results, "appear").pop() {
                break b;
            }
            assert!(t.elapsed() < PATIENCE, "no bundle appeared");
            std::hint::spin_loop();
        };
        child.kill().unwrap();
        child.wait().unwrap();
        let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "attempt {attempt}: {}", stderr(&out));
        assert_complete(&bundle, 2);
    }
}
