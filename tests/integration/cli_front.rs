//! The front door: where `hwr-exp run` puts a bundle by default, and that `run --help` says the same
//! (`results/` in the current directory, as the README says).

use std::path::Path;

use crate::support::{code, hwr, repo, stderr};

/// Folders directly inside `dir`, by name.
fn subdirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn run_help_names_the_repository_root_as_the_default_results_folder() {
    let cwd = tempfile::tempdir().unwrap();
    let out = hwr(cwd.path(), &["run", "--help"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // clap wraps long help lines: compare with runs of whitespace folded to one space.
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("--results-dir <DIR>")
            && help.contains(
                "Default: `results/` at the root of the git repository holding the current directory"
            )
            && help.contains("or in the current directory outside one"),
        "{help}"
    );
    assert!(!help.contains("beside the manifest"), "{help}");
}

#[test]
fn without_results_dir_the_bundle_lands_in_results_of_the_current_directory() {
    // The manifest lives in a subfolder of a git repository; the command runs from a folder
    // outside the repository. Only the current directory may receive `results/`.
    let repo = repo();
    let exp = repo.path().join("experiments");
    std::fs::create_dir(&exp).unwrap();
    let manifest = exp.join("where.toml");
    std::fs::write(
        &manifest,
        "format = 1\n[experiment]\nname = \"where\"\n[command]\nargv = [\"echo\", \"x\"]\noutput-format = \"text\"\n",
    )
    .unwrap();
    let cwd = tempfile::tempdir().unwrap();

    let out = hwr(cwd.path(), &["run", manifest.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(printed.starts_with("results/where/"), "printed {printed:?}");
    let bundle = cwd.path().join(&printed);
    assert!(bundle.join("bundle.json").is_file(), "{}", bundle.display());
    let stamps = subdirs(&cwd.path().join("results").join("where"));
    assert_eq!(stamps.len(), 1, "{stamps:?}");
    assert_eq!(bundle.file_name().unwrap().to_string_lossy(), stamps[0]);
    // Nothing beside the repository root or the manifest.
    assert!(!repo.path().join("results").exists());
    assert!(!exp.join("results").exists());
    assert_eq!(subdirs(repo.path()), [".git", "experiments"]);
}
