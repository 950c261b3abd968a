//! The bundle reader (`hwr_exp::bundle::read`) on the fixture bundles.

use hwr_exp::bundle::read::{Bundle, ReadError};
use hwr_exp::bundle::{BundleStatus, Outcome};

use crate::support::bundle_fixture;

#[test]
fn runs_stream_in_plan_order_and_missing_runs_are_marked() {
    let b = Bundle::open(bundle_fixture("interrupted")).unwrap();
    assert_eq!(b.info().status, BundleStatus::Interrupted);
    assert_eq!(b.plan().unwrap().runs.len(), 8);
    assert_eq!(b.plan_header().unwrap().matrix_keys, ["mode", "elements"]);
    let mut runs = b.runs().unwrap();
    let mut seen = Vec::new();
    let mut missing = Vec::new();
    for r in runs.by_ref() {
        match r {
            Ok(rec) => seen.push(rec.index),
            Err(ReadError::RunMissing { run_id, path }) => {
                assert!(path.ends_with(format!("runs/{run_id}/run.json")));
                missing.push(run_id);
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(seen, [0, 1, 2, 3, 4]);
    assert_eq!(
        missing,
        ["0005-get_tensor-64-r2", "0006-reuse-16-r2", "0007-reuse-64-r2"]
    );
}

#[test]
fn real_bundle_files() {
    let b = Bundle::open(bundle_fixture("python-retention")).unwrap();
    assert_eq!(b.revision().unwrap(), "e8a71c82b1c5f9433752ec3053ec22dbd40c483e");
    assert_eq!(b.provenance().unwrap()["dirty"], false);
    assert!(b.host().unwrap()["hostname"].is_string());
    assert!(b.manifest_text().unwrap().contains("[report]"));
    let first = b.runs().unwrap().next().unwrap().unwrap();
    assert_eq!(first.outcome, Outcome::Ok);
    let out = b.run_output_path(&first);
    assert!(out.ends_with("runs/000-get_tensor-16-r1/get_tensor-16-1.json"));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert!(b.run_memory_path(&first).exists());
}

#[test]
fn truncated_run_json_is_an_error_naming_the_file() {
    let b = Bundle::open(bundle_fixture("truncated-run")).unwrap();
    let errors: Vec<ReadError> = b.runs().unwrap().filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1);
    assert!(matches!(
        errors[0],
        ReadError::Json {
            what: "truncated JSON",
            ..
        }
    ));
    assert!(errors[0].path().ends_with("runs/0001-reuse-16-r1/run.json"));
}

#[test]
fn newer_plan_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = bundle_fixture("newer-format");
    for f in ["bundle.json", "plan.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    // bundle.json there says 2; make it 1 and plan.json 3.
    let bj = std::fs::read_to_string(dir.path().join("bundle.json")).unwrap();
    std::fs::write(
        dir.path().join("bundle.json"),
        bj.replace("\"bundle-format\": 2", "\"bundle-format\": 1"),
    )
    .unwrap();
    let pj = std::fs::read_to_string(dir.path().join("plan.json")).unwrap();
    std::fs::write(
        dir.path().join("plan.json"),
        pj.replacen("\"format\": 1", "\"format\": 3", 1),
    )
    .unwrap();
    let b = Bundle::open(dir.path()).unwrap();
    let e = b.plan().unwrap_err();
    assert!(matches!(e, ReadError::NewerFormat { found: 3, .. }), "{e}");
    assert!(e.to_string().contains("plan.json: written in format 3"));
}
