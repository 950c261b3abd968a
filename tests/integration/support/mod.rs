//! Shared helpers for integration tests: temporary git repositories, manifests, bundle lookup.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of the hwr-exp binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_hwr-exp")
}

/// Runs `git` in `dir`, panicking with its stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A temporary git repository with one commit holding `README`.
pub fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["config", "user.email", "t@example.com"]);
    git(dir.path(), &["config", "user.name", "t"]);
    std::fs::write(dir.path().join("README"), "hello\n").unwrap();
    git(dir.path(), &["add", "README"]);
    git(dir.path(), &["commit", "-q", "-m", "init"]);
    dir
}

/// Writes `experiment.toml` into `dir` and returns its path.
pub fn manifest(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("experiment.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `hwr-exp <args>` with the working directory `cwd`.
pub fn hwr(cwd: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("hwr-exp runs")
}

/// `hwr-exp run MANIFEST --results-dir DIR/results --quiet`; returns (output, bundle folder if printed).
pub fn run(dir: &Path, manifest: &Path) -> (Output, Option<PathBuf>) {
    let results = dir.join("results");
    let out = Command::new(bin())
        .current_dir(dir)
        .arg("run")
        .arg(manifest)
        .arg("--results-dir")
        .arg(&results)
        .arg("--quiet")
        .output()
        .expect("hwr-exp runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bundle = stdout.lines().last().map(|p| dir.join(p)).filter(|p| p.is_dir());
    (out, bundle)
}

/// Parses a JSON file.
pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// run.json of every run in the bundle, in plan order.
pub fn run_records(bundle: &Path) -> Vec<serde_json::Value> {
    let plan = json(&bundle.join("plan.json"));
    plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let p = bundle
                .join("runs")
                .join(r["run-id"].as_str().unwrap())
                .join("run.json");
            p.exists().then(|| json(&p))
        })
        .collect()
}

/// Pids of live processes whose process group is `pgid` (scans /proc/*/stat).
pub fn group_members(pgid: i64) -> Vec<i64> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the `(comm)`: state ppid pgrp ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2].parse::<i64>() == Ok(pgid) && fields[0] != "Z" {
            out.push(pid);
        }
    }
    out
}

/// Exit code of an output, -1 when killed by a signal.
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
