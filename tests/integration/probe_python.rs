//! The Python twin of the probe (tests/python/retention_probe.py) writes the same keys and phases
//! as `hwr-exp probe safetensors-retention`. Skipped (with a note) when python3 with safetensors
//! and numpy is not installed.

use std::process::Command;

use serde_json::Value;

use crate::support::probe::{DOCUMENT_KEYS, SAMPLE_KEYS, phases, probe, python_ready, python_script};
use crate::support::{Signal, catches, signal, wait_for};

fn keys(doc: &Value) -> Vec<&str> {
    doc.as_object().unwrap().keys().map(String::as_str).collect()
}

#[test]
fn python_get_tensor_matches_the_builtin_probe() {
    same_keys_and_phases("get_tensor");
}

#[test]
fn python_view_matches_the_builtin_probe() {
    same_keys_and_phases("view");
}

#[test]
fn python_reuse_matches_the_builtin_probe() {
    same_keys_and_phases("reuse");
}

/// Runs both probes in `mode` with the same flags and compares their documents.
fn same_keys_and_phases(mode: &str) {
    if !python_ready() {
        return;
    }
    let args = [
        "--tensor-elements",
        "16",
        "--iterations",
        "3000",
        "--sample-every",
        "1000",
        "--warmup",
        "10",
    ];
    {
        let py = Command::new("python3")
            .arg(python_script())
            .args(["--mode", mode])
            .args(args)
            .env_remove("HWR_PROBE_SMAPS_PATH")
            .output()
            .unwrap();
        assert_eq!(
            py.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&py.stderr)
        );
        let py: Value = serde_json::from_slice(&py.stdout).unwrap();
        let rs = probe().args(["--mode", mode]).args(args).output().unwrap();
        assert!(rs.status.success());
        let rs: Value = serde_json::from_slice(&rs.stdout).unwrap();

        for key in DOCUMENT_KEYS {
            assert!(
                py.get(*key).is_some(),
                "python {mode}: missing `{key}`: {:?}",
                keys(&py)
            );
            assert!(rs.get(*key).is_some(), "rust {mode}: missing `{key}`");
        }
        assert_eq!(py["arguments"], rs["arguments"]);
        assert_eq!(py["schema_version"], 1);
        assert_eq!(py["first_read_ok"], true);
        assert_eq!(py["completed"], true);
        assert_eq!(py["last_tensor_alive"], false);
        assert_eq!(py["iterations_completed"], 3000);
        // Same iteration semantics: same checksum.
        assert_eq!(py["checksum"], rs["checksum"], "{mode}");
        assert_eq!(py["kernel"], rs["kernel"]);

        let samples = py["samples"].as_array().unwrap();
        assert_eq!(
            phases(&py),
            ["before_file", "baseline", "loop", "loop", "loop", "closed"]
        );
        let iterations: Vec<u64> = samples
            .iter()
            .map(|s| s["iterations"].as_u64().unwrap())
            .collect();
        assert_eq!(iterations, [0, 0, 1000, 2000, 3000, 3000]);
        for (p, r) in samples.iter().zip(rs["samples"].as_array().unwrap()) {
            let pk: Vec<&str> = keys(p);
            let rk: Vec<&str> = keys(r);
            assert_eq!(pk, rk, "{mode}: sample keys differ");
            for key in SAMPLE_KEYS {
                assert!(p.get(*key).is_some(), "{mode}: `{key}` missing in {p}");
            }
            assert!(p["rss_bytes"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn python_probe_refuses_bad_flags_and_unreadable_smaps_with_exit_2() {
    if !python_ready() {
        return;
    }
    for args in [
        &["--mode", "view", "--iterations", "0"][..],
        &["--mode", "view", "--warmup", "-1"],
        &["--mode", "view", "--sample-every", "x"],
        &["--mode", "copy"],
    ] {
        let out = Command::new("python3")
            .arg(python_script())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }
    let out = Command::new("python3")
        .arg(python_script())
        .args(["--mode", "view", "--iterations", "10"])
        .env("HWR_PROBE_SMAPS_PATH", "/nonexistent/smaps_rollup")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/smaps_rollup"));
}

#[test]
fn python_probe_prints_what_it_has_on_sigterm() {
    if !python_ready() {
        return;
    }
    let child = Command::new("python3")
        .arg(python_script())
        .args(["--mode", "get_tensor", "--iterations", "1000000000"])
        .args(["--sample-every", "1000", "--warmup", "10"])
        .env_remove("HWR_PROBE_SMAPS_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The handler is installed before the imports: once Python catches SIGTERM, the probe
    // prints what it has when stopped.
    wait_for(
        "the probe's SIGTERM handler",
        std::time::Duration::from_secs(30),
        || catches(child.id(), Signal::TERM),
    );
    signal(child.id(), Signal::TERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("valid JSON after SIGTERM");
    assert_eq!(doc["completed"], false);
    assert_eq!(doc["stopped_by"], "SIGTERM");
    assert_eq!(doc["samples"][0]["phase"], "before_file");
    assert!(doc["iterations_completed"].as_u64().unwrap() < 1_000_000_000);
}
