//! smaps_rollup parsing on fixture text: fields taken by key, unknown fields tolerated, fields the
//! kernel does not print absent (None, and left out of the JSON), never 0.

use std::path::PathBuf;

use hwr_exp::memory::Rollup;
use hwr_exp::probe::{Phase, Sample, Sampler};
use serde_json::Value;

use crate::support::probe::probe;
use crate::support::source_path;

const KB: u64 = 1024;

fn fixture(name: &str) -> PathBuf {
    source_path("tests/fixtures").join(name)
}

#[test]
fn old_kernel_text_parses_by_key_with_missing_fields_absent() {
    // Linux 4.14 format: a `[rollup]` header line, no Pss_Anon/Pss_File/Pss_Shmem/Pss_Dirty,
    // and one field no kernel prints (FutureCounter) that must be ignored.
    let text = std::fs::read_to_string(fixture("smaps_rollup_old.txt")).unwrap();
    assert!(text.starts_with("00400000-"), "fixture keeps its header line");
    assert!(!text.contains("Pss_"), "fixture has no Pss_* lines");
    assert!(text.contains("FutureCounter:"), "fixture has an unknown field");

    let r = Rollup::parse(&text).unwrap();
    assert_eq!(r.rss, Some(884 * KB));
    assert_eq!(r.pss, Some(385 * KB));
    assert_eq!(r.private, Some((268 + 120) * KB));
    assert_eq!(r.anonymous, Some(120 * KB));
    assert_eq!(r.swap, Some(16 * KB), "Swap, not SwapPss");
    assert_eq!(r.pss_anon, None, "Pss_Anon is not in the text");

    let json = serde_json::to_value(&r).unwrap();
    let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["rss", "pss", "private", "anonymous", "swap"]);
}

#[test]
fn reading_the_fixture_file_matches_parsing_its_text() {
    let path = fixture("smaps_rollup_old.txt");
    let read = Rollup::read(&path).unwrap();
    let parsed = Rollup::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(read, parsed);
}

#[test]
fn text_without_header_line_parses_and_lacks_swap() {
    let r = Rollup::parse(&std::fs::read_to_string(fixture("smaps_rollup_no_header.txt")).unwrap()).unwrap();
    assert_eq!(r.rss, Some(884 * KB));
    assert_eq!(r.private, Some(388 * KB));
    assert_eq!(r.swap, None);
    assert_eq!(r.pss_anon, None);
}

#[test]
fn probe_sample_leaves_missing_fields_out_of_its_json() {
    let sampler = Sampler::new(fixture("smaps_rollup_old.txt"));
    let sample = sampler.sample(Phase::Loop, 10, 0.5).unwrap();
    assert_eq!(sample.rss_bytes, 884 * KB);
    assert_eq!(sample.private_bytes, 388 * KB);
    assert_eq!(sample.anonymous_bytes, 120 * KB);
    assert_eq!(sample.pss_bytes, Some(385 * KB));
    assert_eq!(sample.pss_anon_bytes, None);
    assert_eq!(sample.swap_bytes, Some(16 * KB));
    assert!(sample.fd_count >= 3, "stdin, stdout, stderr at least");

    let json = serde_json::to_value(&sample).unwrap();
    let obj = json.as_object().unwrap();
    assert_eq!(obj["phase"], "loop");
    assert_eq!(obj["pss_bytes"], 385 * KB);
    assert!(!obj.contains_key("pss_anon_bytes"), "absent, not 0: {json}");
    // And it reads back.
    let back: Sample = serde_json::from_value(json).unwrap();
    assert_eq!(back, sample);
}

#[test]
fn probe_run_on_old_kernel_text_has_no_pss_anon_in_any_sample() {
    let out = probe()
        .env("HWR_PROBE_SMAPS_PATH", fixture("smaps_rollup_old.txt"))
        .args(["--mode", "view"])
        .args(["--iterations", "300", "--sample-every", "100", "--warmup", "10"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let samples = doc["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2 + 3 + 1);
    for s in samples {
        assert_eq!(s["rss_bytes"], 884 * KB);
        assert_eq!(s["pss_bytes"], 385 * KB);
        assert!(s.get("pss_anon_bytes").is_none(), "absent, not 0: {s}");
        assert_eq!(s["swap_bytes"], 16 * KB);
    }
}

#[test]
fn probe_refuses_text_without_anonymous_naming_file_and_field() {
    let path = fixture("smaps_rollup_no_anonymous.txt");
    let out = probe()
        .env("HWR_PROBE_SMAPS_PATH", &path)
        .args(["--mode", "view", "--iterations", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("smaps_rollup_no_anonymous.txt"), "{err}");
    assert!(err.contains("Anonymous"), "{err}");
}
