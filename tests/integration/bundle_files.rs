//! Every bundle file is written the same way: mode 0644 (folders 0755) whatever the runner's umask,
//! and one timestamp format (RFC 3339 UTC, milliseconds) in every document.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::{code, hwr_command, json, limited, repo, run_records, stderr, write_manifest};

/// Every file and folder under `dir` with its permission bits, sorted by path.
fn modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let rel = entry.path().strip_prefix(dir).unwrap().to_path_buf();
            out.push((rel, meta.permissions().mode() & 0o7777, meta.is_dir()));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn is_bundle_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.clone().all(|i| b[i].is_ascii_digit());
    b.len() == 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && b[23] == b'Z'
        && text.parse::<jiff::Timestamp>().is_ok()
}

#[test]
fn files_are_0644_under_umask_077_and_timestamps_share_one_format() {
    let repo = repo();
    std::fs::write(repo.path().join("untracked.txt"), "new\n").unwrap();
    let m = write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "modes"
[command]
shell = """printf '{{"n": %s}}\n' {n}; echo note >&2"""
[matrix]
n = [1, 2]
[isolation]
timeout = "30s"
[measure]
sample-interval = "10ms"
"#,
    );
    let results = repo.path().join("results");
    // The umask is set in the shell that then becomes hwr-exp, never in this test process.
    let mut hwr = hwr_command(repo.path());
    hwr.arg("run")
        .arg(&m)
        .arg("--results-dir")
        .arg(&results)
        .arg("--quiet");
    let out = limited(&hwr, "umask 077").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bundle = repo.path().join(stdout.lines().last().unwrap());
    assert!(bundle.is_dir(), "{stdout}");

    let all = modes(&bundle);
    let names: Vec<String> = all.iter().map(|(p, _, _)| p.display().to_string()).collect();
    for expected in [
        "bundle.json",
        "host.json",
        "manifest.toml",
        "plan.json",
        "provenance.json",
        "revision.txt",
        "working-tree.patch",
        "working-tree.txt",
        "runs",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
    assert!(names.iter().any(|n| n.ends_with("stderr.log")), "{names:?}");
    // memory.jsonl is made at a run's first sample: a run too short for one has none (no
    // empty file), and run.json says so.
    for run in crate::support::run_records(&bundle) {
        let f = bundle
            .join("runs")
            .join(run["run-id"].as_str().unwrap())
            .join("memory.jsonl");
        let samples = run["memory-samples"].as_u64().unwrap();
        assert_eq!(f.is_file(), samples > 0, "{run}");
        assert_eq!(run["sha256"].get("memory.jsonl").is_some(), samples > 0, "{run}");
    }
    let wrong: Vec<String> = all
        .iter()
        .filter(|(_, mode, dir)| *mode != if *dir { 0o755 } else { 0o644 })
        .map(|(p, mode, _)| format!("{} {mode:o}", p.display()))
        .collect();
    assert!(wrong.is_empty(), "files not 0644 / folders not 0755: {wrong:?}");
    assert_eq!(
        std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777,
        0o755,
        "the bundle folder itself"
    );

    let info = json(&bundle.join("bundle.json"));
    let provenance = json(&bundle.join("provenance.json"));
    let mut stamps = vec![
        ("created", info["created"].clone()),
        ("finished", info["finished"].clone()),
        ("captured-at", provenance["captured-at"].clone()),
        ("after.captured-at", provenance["after"]["captured-at"].clone()),
    ];
    let records = run_records(&bundle);
    assert_eq!(records.len(), 2);
    for r in &records {
        stamps.push(("start", r["start"].clone()));
        stamps.push(("end", r["end"].clone()));
    }
    for (key, value) in stamps {
        let text = value
            .as_str()
            .unwrap_or_else(|| panic!("{key} is not text: {value}"));
        assert!(
            is_bundle_timestamp(text),
            "{key} = {text:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
        );
    }
}
