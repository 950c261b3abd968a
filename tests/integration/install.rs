//! Installing where its users are (issue 22, item 15): pyproject.toml builds a wheel that carries
//! the binary (maturin, `bindings = "bin"`), and an installed copy of the binary, wherever it
//! lives, runs the built-in probe through `{hwr-exp}` as itself. (`.ci/run` builds the wheel,
//! installs it into a fresh venv and runs the main job with the installed command.)

use crate::support::{ManifestBuilder, bin, code, json, printed_path, repo, source_path, stderr};

#[test]
fn pyproject_builds_a_binary_wheel_named_as_the_crate() {
    let text = std::fs::read_to_string(source_path("pyproject.toml")).unwrap();
    let py: toml::Value = toml::from_str(&text).unwrap();
    let cargo: toml::Value =
        toml::from_str(&std::fs::read_to_string(source_path("Cargo.toml")).unwrap()).unwrap();
    assert_eq!(py["build-system"]["build-backend"].as_str(), Some("maturin"));
    assert_eq!(py["tool"]["maturin"]["bindings"].as_str(), Some("bin"));
    assert_eq!(py["project"]["name"].as_str(), cargo["package"]["name"].as_str());
    // The version is Cargo's, never a second copy.
    assert!(py["project"].get("version").is_none());
    let dynamic: Vec<&str> = py["project"]["dynamic"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(dynamic.contains(&"version"), "{dynamic:?}");
}

#[test]
fn an_installed_copy_runs_the_probe_as_itself() {
    let repo = repo();
    let dir = repo.path();
    let venv = tempfile::tempdir().unwrap();
    let installed = venv.path().join("bin/hwr-exp");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(bin(), &installed).unwrap();
    let manifest = ManifestBuilder::argv(
        "installed",
        &[
            "{hwr-exp}",
            "probe",
            "safetensors-retention",
            "--mode",
            "reuse",
            "--iterations",
            "10",
        ],
    )
    .write(dir);
    let mut cmd = std::process::Command::new(&installed);
    crate::support::isolate_git(&mut cmd);
    let out = cmd
        .current_dir(dir)
        .args([
            "run",
            manifest.to_str().unwrap(),
            "--results-dir",
            "results",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan = json(&printed_path(dir, &out).join("plan.json"));
    assert_eq!(plan["runs"][0]["argv"][0].as_str(), installed.to_str());
}
