//! The memory-retention probe's document (docs/probe.md), shared by the tests of the built-in
//! probe and of its Python twin.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Top-level keys both probes write (the original diagnostic's, plus the port's own).
pub const DOCUMENT_KEYS: &[&str] = &[
    "schema_version",
    "probe",
    "arguments",
    "kernel",
    "hostname",
    "pid",
    "cpu_affinity",
    "probe_version",
    "safetensors_version",
    "allocator",
    "file_bytes",
    "first_read_ok",
    "preparation_seconds",
    "warmup_seconds",
    "samples",
    "iterations_completed",
    "checksum",
    "last_tensor_alive",
    "completed",
];

/// Top-level keys only the built-in probe writes.
pub const BUILTIN_ONLY_KEYS: &[&str] = &["rust_version", "build_profile"];

/// Keys every sample has.
pub const SAMPLE_KEYS: &[&str] = &[
    "phase",
    "iterations",
    "loop_seconds",
    "rss_bytes",
    "private_bytes",
    "anonymous_bytes",
    "fd_count",
];

/// `hwr-exp probe safetensors-retention` with `HWR_PROBE_SMAPS_PATH` removed (the real
/// `/proc/self/smaps_rollup` is read); add the flags.
pub fn probe() -> Command {
    let mut cmd = super::hwr_command(super::package_root());
    cmd.args(["probe", "safetensors-retention"]);
    cmd.env_remove("HWR_PROBE_SMAPS_PATH");
    cmd
}

/// The `phase` of every sample of a probe document, in order.
pub fn phases(doc: &Value) -> Vec<&str> {
    doc["samples"]
        .as_array()
        .expect("samples is an array")
        .iter()
        .map(|s| s["phase"].as_str().expect("phase is a string"))
        .collect()
}

/// The Python twin of the probe, `tests/python/retention_probe.py`.
pub fn python_script() -> PathBuf {
    super::source_path("tests/python/retention_probe.py")
}

/// `true` when `python3 -c 'import safetensors, numpy'` succeeds; else says why the test is
/// skipped, or fails it under CI ([`super::need`]).
#[track_caller]
pub fn python_ready() -> bool {
    super::need(super::Python(&["safetensors", "numpy"])).is_some()
}
