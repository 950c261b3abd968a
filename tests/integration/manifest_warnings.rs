//! Manifest warnings and command-line values in errors: a key that is valid but has no effect
//! where it is (`seed` without `order = "shuffled"`, `[report]` keys with text outputs,
//! `time-margin` without a timeout, slurm keys under `run --executor local`) is a `warning:` with
//! `file:line:col` and a caret, printed by `check`, `plan` and `run` without failing them; a
//! problem a command-line value causes (`run --repetitions 4294967295`) names the option and its
//! value instead of pointing at a manifest line.

use std::path::Path;

use crate::support::{ManifestBuilder, code, hwr, repo, stderr, stdout, write_manifest};

/// A two-cell manifest of a shell line printing text, quick to run.
fn quick() -> ManifestBuilder {
    ManifestBuilder::shell("warn", "echo {mode}")
        .text_output()
        .output("{run-id}.txt")
        .matrix("mode", ["a", "reuse"])
        .set("measure", "sample-interval", "off")
}

/// The blocks of stderr that start with `warning: ` and contain `needle`.
fn warning_block<'a>(err: &'a str, needle: &str) -> Option<&'a str> {
    err.split("\nwarning: ")
        .map(|b| b.trim_start_matches("warning: "))
        .find(|b| b.contains(needle))
}

/// Asserts one warning containing `needle` located at `file:line:col` with the source line
/// `source` and a caret under it.
fn assert_located_warning(err: &str, needle: &str, at: &str, source: &str) {
    let block = warning_block(err, needle).unwrap_or_else(|| panic!("no warning with {needle:?}: {err}"));
    assert!(block.contains(&format!("--> {at}")), "{block}");
    let line = at.rsplit(':').nth(1).unwrap();
    assert!(block.contains(&format!("{line} | {source}")), "{block}");
    assert!(block.contains('^'), "{block}");
}

#[test]
fn seed_without_shuffled_is_a_located_warning_of_check_plan_and_run() {
    let repo = repo();
    let dir = repo.path();
    quick().set("schedule", "seed", 5).write(dir);
    let text = std::fs::read_to_string(dir.join("experiment.toml")).unwrap();
    let line = text.lines().position(|l| l.starts_with("seed")).unwrap() + 1;
    let at = format!("experiment.toml:{line}:8");
    for args in [
        &["check", "experiment.toml"][..],
        &["plan", "experiment.toml"],
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    ] {
        let out = hwr(dir, args);
        let err = stderr(&out);
        assert_eq!(code(&out), 0, "{args:?}: a warning does not fail: {err}");
        assert_located_warning(
            &err,
            "`seed` has no effect with order = \"interleaved\"",
            &at,
            "seed = 5",
        );
        assert!(err.contains("order = \"shuffled\""), "{err}");
        assert!(!err.contains("error"), "{args:?}: {err}");
    }
    let out = hwr(dir, &["check", "experiment.toml"]);
    assert!(
        stdout(&out).starts_with("ok: experiment.toml"),
        "{}",
        stdout(&out)
    );
    // Grouped is named as it is; shuffled uses the seed: no warning.
    quick()
        .set("schedule", "order", "grouped")
        .set("schedule", "seed", 5)
        .write(dir);
    let err = stderr(&hwr(dir, &["check", "experiment.toml"]));
    assert!(
        err.contains("`seed` has no effect with order = \"grouped\""),
        "{err}"
    );
    quick()
        .set("schedule", "order", "shuffled")
        .set("schedule", "seed", 5)
        .write(dir);
    let out = hwr(dir, &["check", "experiment.toml"]);
    assert_eq!(code(&out), 0);
    assert!(!stderr(&out).contains("warning: `seed`"), "{}", stderr(&out));
}

#[test]
fn warnings_come_with_the_errors_and_the_exit_code_stays_the_errors() {
    let repo = repo();
    let dir = repo.path();
    quick()
        .set("schedule", "seed", 5)
        .set("schedule", "jobs", 0)
        .write(dir);
    let out = hwr(dir, &["check", "experiment.toml"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("error: "), "{err}");
    assert!(err.contains("warning: `seed` has no effect"), "{err}");
}

/// An equivalence margin with no control cell (no `[report] control`, no `mode = "reuse"`) can
/// give no `equivalent`: check says so where the margin is (the new-user trial of 2026-12-04
/// saw `ok`, then a report with no control). With a control, or the default one, no warning.
#[test]
fn an_equivalence_margin_without_a_control_is_warned_about() {
    let repo = repo();
    let dir = repo.path();
    let head = "format = 1\n[experiment]\nname = \"t\"\n[command]\nshell = \"echo {variant}\"\n";
    write_manifest(
        dir,
        &format!("{head}[matrix]\nvariant = [\"a\", \"b\"]\n[report]\nequivalence-margin = \"64KiB\"\n"),
    );
    let out = hwr(dir, &["check", "experiment.toml"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert_located_warning(
        &err,
        "[report] equivalence-margin has no effect: there is no control cell to compare with",
        "experiment.toml:9:22",
        "equivalence-margin = \"64KiB\"",
    );
    assert!(err.contains("[report] control = { KEY = \"VALUE\" }"), "{err}");
    for fine in [
        format!(
            "{head}[matrix]\nvariant = [\"a\", \"b\"]\n[report]\ncontrol = {{ variant = \"a\" }}\nequivalence-margin = \"64KiB\"\n"
        ),
        format!("{head}[matrix]\nmode = [\"a\", \"reuse\"]\n[report]\nequivalence-margin = \"64KiB\"\n"),
    ] {
        write_manifest(dir, &fine);
        let err = stderr(&hwr(dir, &["check", "experiment.toml"]));
        assert!(!err.contains("has no effect"), "{err}");
    }
}

#[test]
fn report_keys_with_text_outputs_are_warned_about() {
    let repo = repo();
    let dir = repo.path();
    write_manifest(
        dir,
        "format = 1\n[experiment]\nname = \"t\"\n[command]\nshell = \"echo {mode}\"\noutput-format = \"text\"\n\
         [matrix]\nmode = [\"a\", \"reuse\"]\n[report]\nmetrics = { load = \"/load_ms\" }\n\
         control = { mode = \"a\" }\nequivalence-margin = \"64KiB\"\n",
    );
    let out = hwr(dir, &["check", "experiment.toml"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert_located_warning(
        &err,
        "[report] metrics has no effect with output-format = \"text\"",
        "experiment.toml:10:11",
        "metrics = { load = \"/load_ms\" }",
    );
    assert_located_warning(
        &err,
        "[report] control has no effect",
        "experiment.toml:11:11",
        "control = { mode = \"a\" }",
    );
    assert_located_warning(
        &err,
        "[report] equivalence-margin has no effect",
        "experiment.toml:12:22",
        "equivalence-margin = \"64KiB\"",
    );
    // The same keys with JSON outputs are used: no warning.
    let json = "format = 1\n[experiment]\nname = \"t\"\n[command]\nshell = \"echo {mode}\"\n\
         [matrix]\nmode = [\"a\", \"reuse\"]\n[report]\nmetrics = { load = \"/load_ms\" }\n";
    write_manifest(dir, json);
    let err = stderr(&hwr(dir, &["check", "experiment.toml"]));
    assert!(!err.contains("has no effect"), "{err}");
}

/// A slurm manifest with `partition` and `time-margin` but no `timeout`.
fn slurm_manifest(dir: &Path, timeout: bool) {
    let mut m = quick()
        .set("executor", "kind", "slurm")
        .set("executor", "partition", "cpu")
        .set("executor", "time-margin", "30s");
    if timeout {
        m = m.isolation("timeout", "60s");
    }
    m.write(dir);
}

#[test]
fn time_margin_without_a_timeout_and_slurm_keys_under_executor_local_are_warned_about() {
    let repo = repo();
    let dir = repo.path();
    slurm_manifest(dir, false);
    let out = hwr(dir, &["check", "experiment.toml"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(
        warning_block(&err, "`time-margin` has no effect without `timeout`").is_some(),
        "{err}"
    );
    slurm_manifest(dir, true);
    let err = stderr(&hwr(dir, &["check", "experiment.toml"]));
    assert!(!err.contains("has no effect"), "{err}");
    // Run locally: the slurm keys are read and do nothing.
    let out = hwr(
        dir,
        &[
            "run",
            "experiment.toml",
            "--executor",
            "local",
            "--results-dir",
            "results",
            "--quiet",
        ],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let block = warning_block(&err, "--executor local: [executor] partition has no effect")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(block.contains("| partition = \"cpu\""), "{block}");
    assert!(
        warning_block(&err, "--executor local: [executor] time-margin has no effect").is_some(),
        "{err}"
    );
    assert!(!err.contains("[executor] kind"), "{err}");
}

#[test]
fn a_command_line_value_is_named_in_its_error_not_a_manifest_line() {
    let repo = repo();
    let dir = repo.path();
    quick().repetitions(2).write(dir);
    for command in ["run", "plan"] {
        let out = hwr(dir, &[command, "experiment.toml", "--repetitions", "4294967295"]);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{command}: {err}");
        assert!(
            err.starts_with(
                "error: --repetitions 4294967295: the matrix times the repetitions makes 8589934590 runs"
            ),
            "{command}: {err}"
        );
        assert!(
            err.contains("--> command line: --repetitions 4294967295 (in place of experiment.toml:"),
            "{err}"
        );
        assert!(
            !err.contains("| repetitions = 2"),
            "no manifest line and caret: {err}"
        );
        assert!(!dir.join("results").exists(), "nothing written");
    }
    // Without `repetitions` in the manifest there is no place it replaces.
    quick().write(dir);
    let err = stderr(&hwr(
        dir,
        &["plan", "experiment.toml", "--repetitions", "4294967295"],
    ));
    assert!(
        err.contains("--> command line: --repetitions 4294967295 (for experiment.toml)"),
        "{err}"
    );
    // A negative value is the option's error, without clap's tip to write `-- -1`.
    let out = hwr(dir, &["run", "experiment.toml", "--repetitions", "-1"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("'--repetitions <N>'"), "{err}");
    assert!(err.contains("got -1"), "{err}");
    assert!(!err.contains("-- -1"), "{err}");
}

#[test]
fn a_problem_at_another_key_says_which_command_line_values_it_was_planned_with() {
    let repo = repo();
    let dir = repo.path();
    // One output name per cell: two repetitions from the command line make them collide.
    quick().output("{mode}.txt").write(dir);
    assert_eq!(code(&hwr(dir, &["check", "experiment.toml"])), 0);
    let out = hwr(dir, &["plan", "experiment.toml", "--repetitions", "2"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(
        err.contains("| output = \"{mode}.txt\""),
        "the template is the manifest's: {err}"
    );
    assert!(
        err.contains("planned with --repetitions 2 from the command line"),
        "{err}"
    );
}
