//! Readers stay inside the bundle and never hang: names from bundle files that would lead outside,
//! symbolic links to `/dev/zero`, FIFOs, and a run that replaces its own output with one.
//!
//! Every hwr-exp here runs under a 4 GB address-space limit and a time limit, so a reader that
//! follows `/dev/zero` fails the test instead of filling the machine or hanging it.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::*;

/// `hwr-exp <args>` in `cwd` under `ulimit -v 4000000` (KiB); panics when it runs longer than
/// `limit`, after killing it.
fn hwr_limited(cwd: &Path, args: &[&str], limit: Duration) -> Output {
    let mut cmd = hwr_command(cwd);
    cmd.args(args);
    let child = limited(&cmd, "ulimit -v 4000000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    output_within(child, limit, &format!("hwr-exp {args:?} (it hangs)"))
}

const LIMIT: Duration = Duration::from_secs(60);

const TWO: &str = r#"format = 1
[experiment]
name = "two"
[command]
shell = "echo '{{\"v\": {repetition}}}'"
output = "out-{repetition}.json"
[schedule]
repetitions = 2
[report]
metrics = { v = "/v" }
"#;

fn two_runs() -> (Repo, std::path::PathBuf) {
    let repo = repo();
    let m = write_manifest(repo.path(), TWO);
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    (repo, bundle)
}

fn run_dir(bundle: &Path, i: usize) -> std::path::PathBuf {
    let records = run_records(bundle);
    bundle.join("runs").join(records[i]["run-id"].as_str().unwrap())
}

fn output_path(bundle: &Path, i: usize) -> std::path::PathBuf {
    let records = run_records(bundle);
    run_dir(bundle, i).join(records[i]["output"].as_str().unwrap())
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut doc = json(path);
    edit(&mut doc);
    std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
}

#[test]
fn report_does_not_read_an_output_named_outside_the_bundle() {
    let (repo, bundle) = two_runs();
    // runs/<id>/../../../outside.json is results/two/outside.json.
    std::fs::write(bundle.join("../outside.json"), "{\"v\": 777}").unwrap();
    edit_json(&run_dir(&bundle, 0).join("run.json"), |r| {
        r["output"] = "../../../outside.json".into();
    });
    let b = bundle.to_str().unwrap();
    let out = hwr_limited(repo.path(), &["report", b, "--format", "csv"], LIMIT);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!text.contains("777"), "the outside file was read:\n{text}");
    assert_ne!(code(&out), 0, "{text}");
    assert!(
        text.contains("run.json") && text.contains("not a plain file name"),
        "{text}"
    );
}

#[test]
fn verify_does_not_hash_files_named_outside_the_bundle_by_plan_json() {
    let (repo, bundle) = two_runs();
    // A run folder outside the bundle that looks complete: old readers hashed its files.
    let outside = bundle.join("../outside");
    std::fs::create_dir_all(&outside).unwrap();
    for entry in std::fs::read_dir(run_dir(&bundle, 0)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), outside.join(entry.file_name())).unwrap();
    }
    edit_json(&bundle.join("plan.json"), |p| {
        p["runs"][0]["run-id"] = "../../outside".into();
    });
    let b = bundle.to_str().unwrap();
    let out = hwr_limited(repo.path(), &["verify", b], LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 1, "{text}{}", stderr(&out));
    assert!(
        text.contains("plan.json: runs[0].run-id: `../../outside` is not a plain file name"),
        "{text}"
    );
    assert!(!text.contains("outside/"), "{text}");
}

#[test]
fn a_symlink_to_dev_zero_in_a_run_folder_is_named_not_read() {
    let (repo, bundle) = two_runs();
    let dir = run_dir(&bundle, 0);
    let output = output_path(&bundle, 0);
    std::fs::remove_file(&output).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &output).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("extra")).unwrap();
    let b = bundle.to_str().unwrap();

    let out = hwr_limited(repo.path(), &["verify", b], LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 1, "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!(
            "{}: cannot read: a symbolic link, not a regular file",
            output.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{}: a symbolic link (not followed)",
            dir.join("extra").display()
        )),
        "{text}"
    );

    // The report takes the run's figures from run.json `summary`, never opening the link; a
    // run.json without it (a bundle written before it) has the report read the output, which it
    // does not follow.
    let out = hwr_limited(repo.path(), &["report", b, "--format", "csv"], LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(crate::support::strip_summary(&dir));
    let out = hwr_limited(repo.path(), &["report", b, "--format", "csv"], LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    assert!(
        text.contains("a symbolic link"),
        "the run is left out, saying why:\n{text}"
    );
}

#[test]
fn a_fifo_as_run_file_or_top_level_file_does_not_hang_verify_or_report() {
    let (repo, bundle) = two_runs();
    let dir = run_dir(&bundle, 1);
    for path in [
        output_path(&bundle, 1),
        dir.join("memory.jsonl"),
        bundle.join("host.json"),
    ] {
        let _ = std::fs::remove_file(&path);
        let status = Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(status.success());
    }
    let b = bundle.to_str().unwrap();
    let out = hwr_limited(repo.path(), &["verify", b], LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 1, "{text}{}", stderr(&out));
    assert!(text.contains("a FIFO"), "{text}");
    // The report takes the run's figures from run.json `summary`: it opens neither FIFO.
    let out = hwr_limited(repo.path(), &["report", b, "--format", "csv"], LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Without `summary` (a bundle written before it) it reads the output, and says why not.
    assert!(crate::support::strip_summary(&dir));
    let out = hwr_limited(repo.path(), &["report", b, "--format", "csv"], LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("a FIFO"));
}

/// A run that replaces its own output with `what` (made by `make`, `kind` in words): the runner
/// finishes, records the run as invalid output saying why, moves the thing aside as an artifact
/// (`out.json.from-run`), and hashes nothing through it.
fn run_replacing_output(make: &str, kind: &str) {
    let repo = repo();
    let text = format!(
        "format = 1\n[experiment]\nname = \"sneaky\"\n[command]\nshell = \"rm -f {{run-dir}}/out.json && {make} {{run-dir}}/out.json\"\noutput = \"out.json\"\n"
    );
    let m = write_manifest(repo.path(), &text);
    let results = repo.path().join("results");
    let out = hwr_limited(
        repo.path(),
        &[
            "run",
            m.to_str().unwrap(),
            "--results-dir",
            results.to_str().unwrap(),
            "--quiet",
        ],
        LIMIT,
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let bundle = repo
        .path()
        .join(String::from_utf8_lossy(&out.stdout).lines().last().unwrap());
    let records = run_records(&bundle);
    assert_eq!(records[0]["outcome"], "invalid-output", "{}", records[0]);
    let reason = records[0]["output-check-reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("the run put {kind} at out.json"))
            && reason.contains("moved to out.json.from-run"),
        "{reason}"
    );
    assert!(records[0]["sha256"].get("out.json").is_none(), "{}", records[0]);
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "complete");
}

#[test]
fn a_run_replacing_its_output_with_a_fifo_does_not_hang_the_runner() {
    run_replacing_output("mkfifo", "a FIFO, socket or device");
}

#[test]
fn a_run_replacing_its_output_with_a_link_to_dev_zero_does_not_hang_the_runner() {
    use std::os::unix::fs::PermissionsExt;
    let before = std::fs::metadata("/dev/zero").unwrap().permissions().mode();
    run_replacing_output("ln -s /dev/zero", "a symbolic link");
    let after = std::fs::metadata("/dev/zero").unwrap().permissions().mode();
    assert_eq!(
        before, after,
        "the runner changed /dev/zero's mode through the link"
    );
}
