//! `hwr-exp probe safetensors-retention` end to end, as a subprocess of the real binary.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::probe::{BUILTIN_ONLY_KEYS, DOCUMENT_KEYS, SAMPLE_KEYS, phases, probe};
use crate::support::{Signal, cpu_time, signal, wait_for};

fn run_ok(args: &[&str]) -> Value {
    let out = probe().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}

/// Sum over iterations k in 0..total of (k mod n): the checksum the probe must report.
fn expected_checksum(total: u64, n: u64) -> u64 {
    (0..total).map(|k| k % n).sum()
}

#[test]
fn every_mode_prints_all_keys_phases_in_order_and_exact_iterations() {
    for mode in ["get_tensor", "view", "reuse"] {
        let doc = run_ok(&[
            "--mode",
            mode,
            "--tensor-elements",
            "16",
            "--iterations",
            "2500",
            "--sample-every",
            "1000",
            "--warmup",
            "50",
        ]);
        let obj = doc.as_object().unwrap();
        for key in DOCUMENT_KEYS.iter().chain(BUILTIN_ONLY_KEYS) {
            assert!(obj.contains_key(*key), "{mode}: missing `{key}` in {doc:#}");
        }
        assert_eq!(doc["schema_version"], 1);
        assert_eq!(doc["probe"], "safetensors-retention");
        assert_eq!(
            doc["arguments"],
            serde_json::json!({"mode": mode, "tensor_elements": 16, "iterations": 2500,
                               "sample_every": 1000, "warmup": 50})
        );
        assert_eq!(doc["first_read_ok"], true, "{mode}: the 0..N check");
        assert_eq!(doc["completed"], true);
        assert_eq!(doc["last_tensor_alive"], false);
        assert!(doc.get("stopped_by").is_none());
        assert_eq!(doc["iterations_completed"], 2500);
        assert_eq!(doc["checksum"], expected_checksum(2550, 16), "{mode}");
        // 8-byte length + JSON header (padded to 8) + 16 * 4 data bytes.
        let file_bytes = doc["file_bytes"].as_u64().unwrap();
        assert!(
            file_bytes > 64 && (file_bytes - 64).is_multiple_of(8),
            "{file_bytes}"
        );
        assert!(!doc["kernel"].as_str().unwrap().is_empty());
        let pid = doc["pid"].as_u64().unwrap();
        assert!(
            pid > 0 && pid != u64::from(std::process::id()),
            "the probe's own pid"
        );
        assert!(!doc["cpu_affinity"].as_array().unwrap().is_empty());
        assert!(doc["rust_version"].as_str().unwrap().starts_with("rustc "));
        assert!(doc["allocator"].as_str().unwrap().starts_with("system malloc"));
        assert!(doc["preparation_seconds"].as_f64().unwrap() > 0.0);

        assert_eq!(
            phases(&doc),
            ["before_file", "baseline", "loop", "loop", "loop", "closed"],
            "{mode}"
        );
        let samples = doc["samples"].as_array().unwrap();
        for s in samples {
            for key in SAMPLE_KEYS {
                assert!(s.get(*key).is_some(), "{mode}: sample lacks `{key}`: {s}");
            }
            assert!(s["rss_bytes"].as_u64().unwrap() > 0);
            // This kernel prints Pss, Pss_Anon and Swap: they must be there.
            for key in ["pss_bytes", "pss_anon_bytes", "swap_bytes"] {
                assert!(s.get(key).is_some(), "{mode}: sample lacks `{key}`: {s}");
            }
        }
        let iterations: Vec<u64> = samples
            .iter()
            .map(|s| s["iterations"].as_u64().unwrap())
            .collect();
        assert_eq!(iterations, [0, 0, 1000, 2000, 2500, 2500], "{mode}");
        let loop_seconds: Vec<f64> = samples
            .iter()
            .map(|s| s["loop_seconds"].as_f64().unwrap())
            .collect();
        assert_eq!(loop_seconds[0], 0.0);
        assert_eq!(loop_seconds[1], 0.0);
        assert!(loop_seconds[2] > 0.0);
        assert!(loop_seconds.windows(2).all(|w| w[0] <= w[1]), "{loop_seconds:?}");
        assert_eq!(loop_seconds[4], loop_seconds[5], "closed repeats the loop total");
        // The open file (the reader) is one fd from mapping to close.
        let fds: Vec<u64> = samples.iter().map(|s| s["fd_count"].as_u64().unwrap()).collect();
        assert_eq!(fds[1], fds[0] + 1, "{mode}: fds {fds:?}");
        assert_eq!(fds[5], fds[0], "{mode}: fds {fds:?}");
    }
}

#[test]
fn defaults_are_the_diagnostics() {
    let doc = run_ok(&["--mode", "reuse"]);
    assert_eq!(
        doc["arguments"],
        serde_json::json!({"mode": "reuse", "tensor_elements": 64, "iterations": 1000000,
                           "sample_every": 100000, "warmup": 1000})
    );
    let loops: Vec<u64> = doc["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["phase"] == "loop")
        .map(|s| s["iterations"].as_u64().unwrap())
        .collect();
    assert_eq!(loops, (1..=10).map(|k| k * 100_000).collect::<Vec<_>>());
    assert_eq!(doc["checksum"], expected_checksum(1_001_000, 64));
}

#[test]
fn a_single_iteration_with_a_sample_interval_beyond_it_still_samples_the_loop_end() {
    let doc = run_ok(&[
        "--mode",
        "get_tensor",
        "--iterations",
        "1",
        "--sample-every",
        "1000",
        "--warmup",
        "1",
        "--tensor-elements",
        "1",
    ]);
    assert_eq!(phases(&doc), ["before_file", "baseline", "loop", "closed"]);
    assert_eq!(doc["samples"][2]["iterations"], 1);
}

#[test]
fn bad_flags_exit_2_with_a_message_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--mode", "view", "--iterations", "0"], "--iterations"),
        (&["--mode", "view", "--iterations", "-5"], "--iterations"),
        (&["--mode", "view", "--iterations=-1"], "--iterations"),
        (&["--mode", "view", "--iterations", "lots"], "--iterations"),
        (&["--mode", "view", "--sample-every", "0"], "--sample-every"),
        (&["--mode", "view", "--sample-every", "1.5"], "--sample-every"),
        (&["--mode", "view", "--warmup", "-3"], "--warmup"),
        (&["--mode", "view", "--warmup", ""], "--warmup"),
        (&["--mode", "view", "--tensor-elements", "0"], "--tensor-elements"),
        (&["--mode", "view", "--tensor-elements", "x"], "--tensor-elements"),
        (
            &["--mode", "view", "--tensor-elements", "4294967296"],
            "--tensor-elements",
        ),
        (&["--mode", "get-tensor"], "--mode"),
        (&["--mode", "GET_TENSOR"], "--mode"),
        (&["--mode", "copy"], "--mode"),
        (&["--iterations", "10"], "--mode"),
    ];
    for (args, flag) in cases {
        let out = probe().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        assert!(
            err.contains(flag),
            "{args:?}: message does not name {flag}: {err}"
        );
    }
    let out = probe()
        .args(["--mode", "view", "--iterations", "-5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("positive integer"), "{err}");
    let out = probe().args(["--mode", "copy"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("get_tensor, view, reuse"), "{err}");
}

#[test]
fn unreadable_smaps_rollup_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("smaps_rollup");
    // A directory cannot be read as a file either (and root can read any mode-000 file).
    for path in [missing.as_path(), dir.path()] {
        let out = probe()
            .env("HWR_PROBE_SMAPS_PATH", path)
            .args(["--mode", "get_tensor", "--iterations", "10"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(out.stdout.is_empty());
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
}

#[test]
fn sigterm_mid_loop_prints_what_it_has_and_exits_143() {
    let child = probe()
        .args(["--mode", "get_tensor"])
        .args(["--iterations", "1000000000", "--sample-every", "500"])
        .args(["--warmup", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Into its loop: the set-up (a 64-element file, ten warm-up iterations) takes well under a
    // tick of CPU time, so once the probe has used 100 ms it is sampling the loop.
    wait_for("the probe to run its loop", Duration::from_secs(30), || {
        cpu_time(child.id()) >= Duration::from_millis(100)
    });
    signal(child.id(), Signal::TERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(143),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("valid JSON after SIGTERM");
    assert_eq!(doc["completed"], false);
    assert_eq!(doc["stopped_by"], "SIGTERM");
    assert_eq!(doc["first_read_ok"], true);
    let done = doc["iterations_completed"].as_u64().unwrap();
    assert!(done > 0 && done < 1_000_000_000, "{done}");
    assert_eq!(doc["checksum"], expected_checksum(10 + done, 64));
    let phases = phases(&doc);
    assert_eq!(&phases[..2], ["before_file", "baseline"]);
    assert!(phases[2..].iter().all(|p| *p == "loop"), "{phases:?}");
    assert!(
        phases.len() > 2,
        "some loop samples in 100 ms of CPU time: {phases:?}"
    );
    // The samples stop at a multiple of sample-every; the work done since is in the count.
    let last = doc["samples"].as_array().unwrap().last().unwrap();
    assert_eq!(last["iterations"].as_u64().unwrap() % 500, 0);
    assert!(last["iterations"].as_u64().unwrap() <= done);
}
