//! Invalid settings fail once, up front (issue 22, item 13): an environment setting hwr-exp reads
//! (`HWR_CONTAINMENT`, the test hook `HWR_TEST_PAUSE_AT`) with a value it does not know is one
//! error, exit 3 (DESIGN 6: environment), before any bundle is made; not one `spawn-failed` run
//! per planned run.

use std::path::Path;

use crate::support::{ManifestBuilder, code, hwr, hwr_command, printed_path, repo, stderr};

/// A manifest of 50 quick runs in `dir`.
fn many_runs(dir: &Path) -> std::path::PathBuf {
    ManifestBuilder::shell("settings", "echo 1")
        .text_output()
        .repetitions(50)
        .write(dir)
}

/// `hwr-exp ARGS` in `dir` with `name=value` in the environment.
fn with_env(dir: &Path, name: &str, value: &str, args: &[&str]) -> std::process::Output {
    hwr_command(dir)
        .env(name, value)
        .args(args)
        .output()
        .expect("hwr-exp runs")
}

#[test]
fn an_unknown_containment_is_one_error_before_the_bundle() {
    let repo = repo();
    let dir = repo.path();
    let manifest = many_runs(dir);
    for value in ["tree", "cgroups", "Process-Tree", " auto"] {
        let out = with_env(
            dir,
            "HWR_CONTAINMENT",
            value,
            &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
        );
        let err = stderr(&out);
        assert_eq!(code(&out), 3, "HWR_CONTAINMENT={value}: {err}");
        assert!(
            !dir.join("results").exists(),
            "HWR_CONTAINMENT={value}: a bundle was made"
        );
        assert_eq!(err.matches("HWR_CONTAINMENT").count(), 1, "{err}");
        assert!(
            err.contains("auto") && err.contains("cgroup") && err.contains("process-tree"),
            "the error names the values: {err}"
        );
        assert!(!err.contains("spawn"), "{err}");
    }
}

#[test]
fn the_known_containments_run() {
    let repo = repo();
    let dir = repo.path();
    let manifest = ManifestBuilder::shell("settings", "echo 1")
        .text_output()
        .write(dir);
    for value in ["", "auto", "process-tree"] {
        let out = with_env(
            dir,
            "HWR_CONTAINMENT",
            value,
            &[
                "run",
                manifest.to_str().unwrap(),
                "--results-dir",
                "results",
                "--quiet",
            ],
        );
        assert_eq!(code(&out), 0, "HWR_CONTAINMENT={value:?}: {}", stderr(&out));
    }
}

#[test]
fn a_misspelt_test_hook_is_refused_too() {
    let repo = repo();
    let dir = repo.path();
    let manifest = many_runs(dir);
    let out = with_env(
        dir,
        "HWR_TEST_PAUSE_AT",
        "publish",
        &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("published"), "{}", stderr(&out));
    assert!(!dir.join("results").exists());
}

#[test]
fn rerun_checks_the_settings_before_making_a_bundle() {
    let repo = repo();
    let dir = repo.path();
    let manifest = ManifestBuilder::shell("settings", "echo 1")
        .text_output()
        .write(dir);
    let out = hwr(
        dir,
        &[
            "run",
            manifest.to_str().unwrap(),
            "--results-dir",
            "results",
            "--quiet",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = printed_path(dir, &out);
    let experiment = bundle.parent().unwrap();
    let out = with_env(
        dir,
        "HWR_CONTAINMENT",
        "tree",
        &["rerun", bundle.to_str().unwrap(), "--results-dir", "results"],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("HWR_CONTAINMENT"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(experiment).unwrap().count(),
        1,
        "a second bundle was made"
    );
}
