//! A stopped reader never tells (issue 22, item 9): every command that prints ends quietly with
//! exit 0 when its stdout is a pipe nobody reads any more (`| head`), and a table column wider
//! than a format width can hold (65,535) prints instead of panicking.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{
    ManifestBuilder, code, hwr, hwr_command, printed_path, repo, source_path, stderr, stdout,
};

/// Runs `cmd` with stdout a pipe whose read end is already closed (the first write gets EPIPE,
/// as under `| head` once head has gone); returns the exit code and stderr.
fn with_closed_stdout(cmd: &mut Command) -> (i32, String) {
    let (read, write) = rustix::pipe::pipe().expect("pipe");
    drop(read);
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .expect("hwr-exp runs");
    (code(&out), stderr(&out))
}

/// A finished bundle with two ok runs (text output) in `dir`.
fn bundle(dir: &Path) -> String {
    let manifest = ManifestBuilder::shell("pipes", "echo 1.5")
        .text_output()
        .repetitions(2)
        .write(dir);
    let out = hwr(
        dir,
        &[
            "run",
            manifest.to_str().unwrap(),
            "--quiet",
            "--results-dir",
            "results",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    printed_path(dir, &out).display().to_string()
}

#[test]
fn every_printing_command_ends_quietly_when_the_reader_is_gone() {
    let repo = repo();
    let dir = repo.path();
    let bundle = bundle(dir);
    let manifest = source_path("experiments/size-compare.toml");
    let manifest = manifest.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["plan", manifest],
        vec!["plan", manifest, "--format", "json"],
        vec!["plan", manifest, "--format", "shell"],
        vec!["plan", manifest, "--format", "sbatch"],
        vec!["check", manifest],
        vec!["schema"],
        vec!["report", &bundle],
        vec!["report", &bundle, "--format", "md"],
        vec!["report", &bundle, "--format", "csv"],
        vec!["report", &bundle, "--format", "json"],
        vec!["report", &bundle, "--format", "html"],
        vec!["compare", &bundle, &bundle],
        vec!["compare", &bundle, &bundle, "--format", "json"],
        vec!["list", "results"],
        vec!["list", "results", "--format", "json"],
        vec!["verify", &bundle],
        vec!["man"],
        vec!["man", "run"],
        vec!["completions", "bash"],
        vec!["--help"],
        vec!["run", "--help"],
        vec!["--version"],
    ];
    let mut problems = Vec::new();
    for args in &commands {
        let (code, err) = with_closed_stdout(hwr_command(dir).args(args));
        // Warnings about the manifest itself may come; nothing about the closed pipe may.
        let told = err
            .lines()
            .any(|l| !l.trim().is_empty() && !l.starts_with("warning: "));
        if code != 0 || told {
            problems.push(format!("hwr-exp {}: exit {code}, stderr {err:?}", args.join(" ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn plan_prints_a_column_wider_than_a_format_width_can_hold() {
    let repo = repo();
    let dir = repo.path();
    let wide = "x".repeat(70_000);
    let manifest = ManifestBuilder::shell("wide", "true {v}")
        .text_output()
        .matrix("v", [wide.as_str()])
        .write(dir);
    let manifest = manifest.to_str().unwrap();
    let check = hwr(dir, &["check", manifest]);
    assert_eq!(code(&check), 0, "{}", stderr(&check));
    for format in ["table", "json", "shell"] {
        let out = hwr(dir, &["plan", manifest, "--format", format]);
        assert_eq!(code(&out), 0, "plan --format {format}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&wide),
            "plan --format {format} lost the value"
        );
    }
    // The table cuts the run-id and the cell with `…` (issue 37 item 8: a 70,000-character value
    // must not flood a terminal), keeps the command whole (to reproduce the run) and still lines
    // up: the repetition (right-aligned) ends where the header's `rep` does, in characters.
    let out = hwr(dir, &["plan", manifest]);
    let text = stdout(&out);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let row: Vec<char> = lines.next().unwrap().chars().collect();
    let rep_end = header.find("rep").unwrap() + "rep".len();
    let before: String = row[..rep_end].iter().collect();
    assert!(before.contains('…') && !before.contains(&wide), "{before:.300}");
    assert_eq!(row[rep_end - 1], '1', "{header:.300}\n{before}");
    assert_eq!(row[rep_end..rep_end + 2], [' ', ' '], "{header:.300}\n{before}");
    let after: String = row[rep_end..].iter().collect();
    assert!(after.contains(&wide), "the command keeps the value");
}

/// A report of a bundle of more than 1,000 runs writes past stdout's buffer from inside the CSV
/// writer and serde_json (which wrap the EPIPE they meet): it ends quietly too. It exited 3 with
/// `error: Broken pipe (os error 32)` for csv and json.
#[test]
fn a_large_report_ends_quietly_when_the_reader_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let mut s = crate::report_fixtures::synth::Synth::small("pipes");
    s.repetitions = 300;
    s.loop_samples = 2;
    s.memory_jsonl = false;
    synth_bundle(&dir, &s);
    let bundle = dir.to_str().unwrap();
    let mut problems = Vec::new();
    for format in ["csv", "json", "table", "md", "html"] {
        let (code, err) =
            with_closed_stdout(hwr_command(tmp.path()).args(["report", bundle, "--format", format]));
        if code != 0 || !err.trim().is_empty() {
            problems.push(format!("report --format {format}: exit {code}, stderr {err:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn synth_bundle(dir: &Path, s: &crate::report_fixtures::synth::Synth) {
    crate::report_fixtures::synth::write_bundle(dir, s).unwrap();
}
