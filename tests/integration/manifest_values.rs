//! Values reach commands as written: float matrix values keep the manifest's spelling in argv,
//! shell text, environment, file names, run ids and plan.json; placeholders substituted into
//! `shell` are quoted, so each stays one word (a results folder with a space included); the plan's
//! shell lines reproduce the runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{code, hwr, hwr_command, json, repo, stderr, write_manifest};

/// `hwr-exp run MANIFEST --results-dir RESULTS --quiet` in `dir`; returns the bundle folder.
fn run_into(dir: &Path, manifest: &Path, results: &Path) -> PathBuf {
    let out = hwr_command(dir)
        .arg("run")
        .arg(manifest)
        .arg("--results-dir")
        .arg(results)
        .arg("--quiet")
        .output()
        .expect("hwr-exp runs");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bundle = dir.join(stdout.lines().last().expect("bundle path printed"));
    assert!(bundle.is_dir(), "{}", bundle.display());
    bundle
}

/// `runs/<run-id>/` of every run in plan order, with the plan.json entry.
fn runs(bundle: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    let plan = json(&bundle.join("plan.json"));
    plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (bundle.join("runs").join(r["run-id"].as_str().unwrap()), r.clone()))
        .collect()
}

#[test]
fn float_values_keep_their_spelling_everywhere() {
    let repo = repo();
    let m = write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "floats"
[command]
shell = "printf '%s|%s\n' {x} \"$X\""
output = "{x}-{repetition}.txt"
[matrix]
x = [1.0, 1e-5, 3e20, 2.50]
[isolation]
env = { X = "{x}" }
"#,
    );
    let results = repo.path().join("results");
    let bundle = run_into(repo.path(), &m, &results);
    let written = ["1.0", "1e-5", "3e20", "2.50"];
    let runs = runs(&bundle);
    assert_eq!(runs.len(), written.len());
    for ((folder, entry), x) in runs.iter().zip(written) {
        let id = entry["run-id"].as_str().unwrap();
        assert!(id.contains(&format!("-{x}-")), "run id {id} spells {x}");
        assert_eq!(entry["output"], format!("{x}-1.txt"));
        let out = std::fs::read_to_string(folder.join(format!("{x}-1.txt"))).unwrap();
        assert_eq!(out, format!("{x}|{x}\n"), "shell text and environment");
    }
    // plan.json keeps the numbers' text where it is JSON (all four here).
    let text = std::fs::read_to_string(bundle.join("plan.json")).unwrap();
    for x in written {
        assert!(
            text.contains(&format!("\"x\":{x}}}")),
            "plan.json spells {x}:\n{text}"
        );
    }

    // argv, through the plan.
    std::fs::write(
        repo.path().join("argv.toml"),
        "format = 1\n[experiment]\nname = \"a\"\n[command]\nargv = [\"echo\", \"{x}\"]\n[matrix]\nx = [1.0, 1e-5, 3e20]\n",
    )
    .unwrap();
    let out = hwr(repo.path(), &["plan", "argv.toml", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let argv: Vec<&str> = plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["argv"][1].as_str().unwrap())
        .collect();
    assert_eq!(argv, ["1.0", "1e-5", "3e20"]);
}

#[test]
fn run_dir_under_a_results_folder_with_a_space_stays_in_the_bundle() {
    let repo = repo();
    let m = write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "spaced"
[command]
shell = "echo note > {run-dir}/note.txt; echo done"
output-format = "text"
"#,
    );
    let results = repo.path().join("my results");
    let bundle = run_into(repo.path(), &m, &results);
    let (folder, _) = runs(&bundle).remove(0);
    assert_eq!(
        std::fs::read_to_string(folder.join("note.txt")).unwrap(),
        "note\n"
    );
    let stray: Vec<_> = std::fs::read_dir(repo.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".git" && n != "README" && n != "experiment.toml" && n != "my results")
        .collect();
    assert!(stray.is_empty(), "files written outside the bundle: {stray:?}");
}

#[test]
fn shell_values_are_one_word_and_plan_lines_reproduce_the_runs() {
    let repo = repo();
    let m = write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "words"
[command]
shell = "printf '[%s]' {s} {n}; echo"
output-format = "text"
[matrix]
s = ["a b", "it's", "$HOME;x", "", "*"]
n = [1.0]
"#,
    );
    let results = repo.path().join("results");
    let bundle = run_into(repo.path(), &m, &results);
    let outputs: Vec<String> = runs(&bundle)
        .iter()
        .map(|(folder, entry)| {
            std::fs::read_to_string(folder.join(entry["output"].as_str().unwrap())).unwrap()
        })
        .collect();
    assert_eq!(
        outputs,
        [
            "[a b][1.0]\n",
            "[it's][1.0]\n",
            "[$HOME;x][1.0]\n",
            "[][1.0]\n",
            "[*][1.0]\n"
        ]
    );
    let out = hwr(repo.path(), &["plan", "experiment.toml", "--format", "shell"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(lines.lines().count(), outputs.len());
    for (line, expected) in lines.lines().zip(&outputs) {
        let sh = Command::new("sh").arg("-c").arg(line).output().unwrap();
        assert_eq!(&String::from_utf8_lossy(&sh.stdout), expected, "{line}");
    }
}
