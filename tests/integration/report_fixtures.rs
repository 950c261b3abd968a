//! Writes the synthetic fixture bundles under tests/fixtures/bundles/ (checked in).
//!
//! Run `HWR_REGENERATE_FIXTURES=1 cargo test --test integration report_fixtures -- --ignored`
//! after changing benches/report/synth.rs; the snapshot tests then show what changed.

#[path = "../../benches/report/synth.rs"]
pub mod synth;

use std::path::PathBuf;

use crate::support::source_path;

fn fixtures() -> PathBuf {
    source_path("tests/fixtures/bundles")
}

fn fresh(name: &str) -> PathBuf {
    let dir = fixtures().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
#[ignore = "writes tests/fixtures/bundles; run with HWR_REGENERATE_FIXTURES=1"]
fn regenerate_fixtures() {
    if std::env::var_os("HWR_REGENERATE_FIXTURES").is_none() {
        return;
    }
    // A: 8 runs, one timed out; B: a later revision, dirty, with more growth.
    let a = synth::Synth::small("synthetic");
    synth::write_bundle(&fresh("synthetic-a"), &a).unwrap();
    let mut b = a.clone();
    b.revision = "9a8b7c6d5e4f30211234567890abcdef12345678".into();
    b.dirty = true;
    b.growth_offset = 40960;
    b.timeout_run = None;
    b.modes.push("view".into());
    synth::write_bundle(&fresh("synthetic-b"), &b).unwrap();

    // Interrupted: runs 5.. never finished.
    let mut i = a.clone();
    i.stop_at = Some(5);
    i.memory_jsonl = false;
    synth::write_bundle(&fresh("interrupted"), &i).unwrap();

    // Corrupted bundles: a newer format, a truncated run.json, no bundle.json.
    let mut small = a.clone();
    small.repetitions = 1;
    small.sizes = vec![16];
    small.timeout_run = None;
    small.memory_jsonl = false;
    let newer = fresh("newer-format");
    synth::write_bundle(&newer, &small).unwrap();
    let path = newer.join("bundle.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("\"bundle-format\": 1", "\"bundle-format\": 2"),
    )
    .unwrap();

    let truncated = fresh("truncated-run");
    synth::write_bundle(&truncated, &small).unwrap();
    let run = truncated.join("runs/0001-reuse-16-r1/run.json");
    let text = std::fs::read_to_string(&run).unwrap();
    std::fs::write(&run, &text[..text.len() / 2]).unwrap();

    let missing = fresh("missing-bundle-json");
    synth::write_bundle(&missing, &small).unwrap();
    std::fs::remove_file(missing.join("bundle.json")).unwrap();
}
