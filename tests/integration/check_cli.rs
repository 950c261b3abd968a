//! `hwr-exp check` and `hwr-exp schema` through the binary.

use crate::support::{ManifestBuilder, code, hwr, repo, source_path, stderr};

#[test]
fn every_malformed_manifest_gives_a_located_error_and_exit_2() {
    let dir = source_path("tests/manifests/bad");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        n += 1;
        let out = hwr(&dir, &["check", path.file_name().unwrap().to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{}: {err}", path.display());
        assert!(!err.contains("panicked"), "{}: {err}", path.display());
        let first = std::fs::read_to_string(&path).unwrap();
        let expect = first
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("# expect:")
            .trim();
        let location = expect.split_whitespace().next().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            err.contains(&format!("{name}:{location}")),
            "{name}: expected {location} in\n{err}"
        );
        assert!(err.contains('^'), "{name}: no caret in\n{err}");
    }
    assert!(n >= 30, "only {n} malformed manifests");
}

#[test]
fn check_reports_every_file_and_plan_level_errors() {
    let repo = repo();
    let good = ManifestBuilder::argv("g", &["true"])
        .matrix("x", [1, 2])
        .write(repo.path());
    // Literal text: the error's line and column are part of what is checked.
    let dup = repo.path().join("dup.toml");
    std::fs::write(
        &dup,
        "format = 1\n[experiment]\nname = \"d\"\n[command]\nargv = [\"true\"]\noutput = \"same.json\"\n[matrix]\nx = [1, 2]\n",
    )
    .unwrap();
    let out = hwr(
        repo.path(),
        &["check", good.to_str().unwrap(), dup.to_str().unwrap()],
    );
    assert_eq!(code(&out), 2);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok: "),
        "the good file is reported ok"
    );
    let err = stderr(&out);
    assert!(err.contains("dup.toml:6:10"), "{err}");
    assert!(err.contains("both save their output as `same.json`"), "{err}");
    assert!(!repo.path().join("results").exists());
}

#[test]
fn schema_is_json_schema_with_every_section() {
    let out = hwr(std::path::Path::new("."), &["schema"]);
    assert_eq!(code(&out), 0);
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for section in [
        "format",
        "experiment",
        "command",
        "matrix",
        "schedule",
        "isolation",
        "measure",
        "provenance",
        "report",
        "executor",
        "environments",
    ] {
        assert!(schema["properties"].get(section).is_some(), "{section} missing");
    }
}

/// A CPU range string far outside the allowed set is one problem naming the outside CPUs, not one
/// error block per CPU (`cpus = "0-999"` printed 998 blocks).
#[test]
fn a_cpu_range_outside_the_allowed_set_is_one_error() {
    let allowed = hwr_exp::cpus::allowed_cpus().expect("sched_getaffinity");
    assert!(
        allowed.len() < 1000,
        "this test needs fewer than 1000 allowed CPUs"
    );
    let dir = repo();
    let m = ManifestBuilder::argv("wide", &["true"])
        .text_output()
        .isolation("cpus", "0-999")
        .write(dir.path());
    let out = hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(err.contains("are not in this process's allowed CPU set"), "{err}");
    assert!(err.contains("-999"), "{err}");
}

/// Issue 22, item 14: a duration written as a bare number (`timeout = 60`) gets a help line that
/// shows how to write it, for every duration key.
#[test]
fn a_number_for_a_duration_gets_a_help_line() {
    let dir = tempfile::tempdir().unwrap();
    for (section, key) in [
        ("isolation", "timeout"),
        ("isolation", "grace"),
        ("measure", "sample-interval"),
    ] {
        let text = format!(
            "format = 1\n[experiment]\nname = \"t\"\n[command]\nshell = \"echo 1\"\noutput-format = \"text\"\n[{section}]\n{key} = 60\n"
        );
        let path = crate::support::write_manifest(dir.path(), &text);
        let out = crate::support::hwr(dir.path(), &["check", path.to_str().unwrap()]);
        assert_eq!(crate::support::code(&out), 2);
        let err = crate::support::stderr(&out);
        assert!(
            err.contains(&format!(
                "help: a duration is a string with its unit: `{key} = \"60s\"`"
            )),
            "{err}"
        );
    }
}

/// `check` refuses what `run`'s preflight refuses on this machine, located in the manifest: a
/// workdir that is not a folder and a program not found (before, `check` said `ok` and `run`
/// failed with exit 3 and no location). A manifest for Slurm is not looked at here (the nodes
/// resolve its program), and a workdir inside the bundle is not (it cannot exist yet).
#[test]
fn check_refuses_a_missing_workdir_and_a_missing_program_at_their_lines() {
    let repo = repo();
    let m = ManifestBuilder::argv("missing", &["no-such-program-hwr", "x"])
        .set("command", "workdir", "nowhere")
        .write(repo.path());
    let out = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(!crate::support::stdout(&out).contains("ok:"));
    let text = std::fs::read_to_string(&m).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    assert!(
        err.contains("workdir") && err.contains("does not exist or is not a folder"),
        "{err}"
    );
    assert!(
        err.contains(&format!("experiment.toml:{}:", line_of("workdir"))),
        "{err}"
    );
    // The workdir is checked first; with it fixed the program is named at argv's line.
    std::fs::create_dir(repo.path().join("nowhere")).unwrap();
    let out = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("`no-such-program-hwr` was not found"), "{err}");
    assert!(
        err.contains(&format!("experiment.toml:{}:", line_of("argv"))),
        "{err}"
    );
    // A run folder workdir and a real program: ok, one run said as one.
    let m = ManifestBuilder::argv("fine", &["true"])
        .set("command", "workdir", "{run-dir}")
        .write(repo.path());
    let out = hwr(repo.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        crate::support::stdout(&out).contains("(1 run)"),
        "{}",
        crate::support::stdout(&out)
    );
}
