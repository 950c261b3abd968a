//! Failure reasons through the real binary (docs/DESIGN.md 9): a run that is not ok is named with a
//! one-line reason in `run`'s progress lines and closing list, in every format of `report`, with
//! `report --stderr` showing the stderr tails, and `list` counts the failed runs.
//!
//! The main case is `experiments/python-diagnostic.toml` on a machine without numpy: the missing
//! module must be named without opening a file. It is simulated with a shell command that writes a
//! Python-like traceback, so the test does not depend on what Python has installed.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Python, need};
use crate::support::{code, hwr_columns, json, stderr, stdout, write_manifest};

const MISSING: &str = "ModuleNotFoundError: No module named 'numpy_missing_xyz'";

/// A manifest whose every run fails the way the Python diagnostic does without numpy: a
/// traceback on stderr (with an ANSI colour sequence and a byte that is not UTF-8 in the middle),
/// nothing on stdout, exit 1.
fn numpy_manifest(dir: &Path, modes: &[&str], repetitions: u32) -> PathBuf {
    let modes: Vec<String> = modes.iter().map(|m| format!("\"{m}\"")).collect();
    let text = format!(
        r#"format = 1
[experiment]
name = "python-diagnostic"
[command]
shell = '''echo 'Traceback (most recent call last):' >&2
echo '  File "tests/python/retention_probe.py", line 21, in <module>' >&2
printf '    import numpy \033[31mas\033[0m np \377\n' >&2
echo "{MISSING}" >&2
exit 1'''
output = "{{mode}}-{{repetition}}.json"
output-format = "json"
[matrix]
mode = [{modes}]
[schedule]
repetitions = {repetitions}
[isolation]
timeout = "30s"
[measure]
sample-interval = "off"
"#,
        modes = modes.join(", ")
    );
    let path = dir.join("python-diagnostic.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `manifest` (not quiet) and returns the output and the bundle folder printed on stdout.
fn run(dir: &Path, manifest: &Path) -> (Output, PathBuf) {
    let out = hwr_columns(dir, &["run", manifest.to_str().unwrap()], None);
    let bundle = stdout(&out)
        .lines()
        .last()
        .map(|l| dir.join(l))
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no bundle path on stdout; stderr:\n{}", stderr(&out)));
    (out, bundle)
}

#[test]
fn run_and_report_name_the_missing_module_without_opening_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let m = numpy_manifest(dir.path(), &["get_tensor", "view", "reuse"], 2);
    let (out, bundle) = run(dir.path(), &m);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    let reason = format!("exit 1: {MISSING}");

    // Every progress line names the reason.
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(progress.len(), 6, "{err}");
    for line in &progress {
        assert!(line.contains("  failed  ") && line.ends_with(&reason), "{line}");
    }
    // The closing list: the six runs failed alike, so one reason with its count, the runs, and
    // the last lines of the first one's stderr, control characters escaped and the bad byte
    // replaced, before the summary line.
    let list_at = err.find("runs that are not ok").expect("closing list");
    let summary_at = err.find("6 runs: 6 failed").expect("summary line");
    assert!(list_at < summary_at, "{err}");
    let list = &err[list_at..summary_at];
    assert_eq!(list.matches(&format!("6 runs: {reason}")).count(), 1, "{list}");
    assert!(
        list.contains("runs: 000-get_tensor-r1, 001-view-r1, 002-reuse-r1 and 3 more"),
        "{list}"
    );
    assert_eq!(
        list.matches("| Traceback (most recent call last):").count(),
        1,
        "{list}"
    );
    assert!(
        list.contains("|     import numpy \\u{1b}[31mas\\u{1b}[0m np \u{fffd}"),
        "{list}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "no raw escape sequence reaches the terminal"
    );
    assert!(!list.contains("... and"), "six failures are all listed: {list}");

    // report, as a pipe sees it (100 columns): the reason is in the table.
    let report = hwr_columns(dir.path(), &["report", bundle.to_str().unwrap()], None);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let text = stdout(&report);
    // Once per run in the run table, once in the table of reasons.
    assert_eq!(text.matches(MISSING).count(), 7, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");

    // Markdown and CSV carry the reason column; JSON a "reason" key per run.
    let md = stdout(&hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "md"],
        None,
    ));
    assert!(md.contains("| output | reason |"), "{md}");
    assert_eq!(md.matches(MISSING).count(), 7, "{md}");
    assert!(
        md.contains(&format!("| 6 | failed | exit 1: {MISSING} |")),
        "{md}"
    );
    let csv_text = stdout(&hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "csv"],
        None,
    ));
    let mut rdr = csv::Reader::from_reader(csv_text.as_bytes());
    let at = rdr
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "reason")
        .expect("reason column");
    let reasons: Vec<String> = rdr.records().map(|r| r.unwrap()[at].to_owned()).collect();
    assert_eq!(reasons, vec![reason.clone(); 6]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
        None,
    )))
    .unwrap();
    for run in doc["runs"].as_array().unwrap() {
        assert_eq!(run["reason"], reason.as_str());
        let tail = run["stderr-tail"].as_array().unwrap();
        assert_eq!(tail.len(), 4);
        assert_eq!(tail[3], MISSING);
    }

    // report --stderr: the stderr tail after the tables, once for the six runs that failed alike.
    let with_tails = stdout(&hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--stderr"],
        None,
    ));
    let tails = &with_tails[with_tails
        .find("stderr of the runs that are not ok")
        .expect("tails")..];
    assert_eq!(
        tails.matches("| Traceback (most recent call last):").count(),
        1,
        "{tails}"
    );
    assert_eq!(tails.matches(&format!("| {MISSING}")).count(), 1, "{tails}");
    assert!(
        tails.contains("6 runs (000-get_tensor-r1, 001-view-r1, 002-reuse-r1 and 3 more): exit 1"),
        "{tails}"
    );
    assert!(!with_tails.contains('\u{1b}'));
    let csv_tails = hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "csv", "--stderr"],
        None,
    );
    assert_eq!(code(&csv_tails), 2, "--stderr with csv is a usage error");

    // list: the failed runs counted in a column of their own.
    let list = stdout(&hwr_columns(dir.path(), &["list"], None));
    let lines: Vec<&str> = list.lines().collect();
    let column = |line: &str, name: &str| -> String {
        let at = lines[0].find(name).unwrap();
        line[at..].split_whitespace().next().unwrap_or("").to_owned()
    };
    assert_eq!(lines.len(), 2, "{list}");
    assert_eq!(column(lines[0], "FAILED"), "FAILED");
    assert_eq!(column(lines[1], "OK"), "0");
}

#[test]
fn a_real_python_without_the_module_is_named_too() {
    if need(Python(&[])).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        r#"format = 1
[experiment]
name = "python-import"
[command]
argv = ["python3", "-c", "import numpy_missing_xyz"]
output = "out-{repetition}.json"
[isolation]
timeout = "60s"
[measure]
sample-interval = "off"
"#,
    );
    let (out, bundle) = run(dir.path(), &m);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(
        err.contains("exit 1: ModuleNotFoundError: No module named 'numpy_missing_xyz'"),
        "{err}"
    );
    let report = stdout(&hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap()],
        None,
    ));
    assert!(report.contains("No module named 'numpy_missing_xyz'"), "{report}");
}

/// Issue 22, item 11: twelve identical failures are one reason with a count, not ten stderr tails.
#[test]
fn twelve_identical_failures_are_one_reason_with_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let modes: Vec<String> = (0..12).map(|i| format!("m{i:02}")).collect();
    let modes: Vec<&str> = modes.iter().map(String::as_str).collect();
    let m = numpy_manifest(dir.path(), &modes, 1);
    let (out, _) = run(dir.path(), &m);
    let err = stderr(&out);
    let list = &err[err.find("runs that are not ok").expect("closing list")..];
    assert!(list.contains(&format!("  12 runs: exit 1: {MISSING}")), "{list}");
    assert!(
        list.contains("runs: 000-m00-r1, 001-m01-r1, 002-m02-r1 and 9 more"),
        "{list}"
    );
    assert_eq!(list.matches("| Traceback").count(), 1, "{list}");
    assert!(!list.contains("009-m09-r1"), "{list}");
    assert!(!list.contains("... and"), "{list}");
}

/// Runs that fail for different reasons: the first ten reasons are listed, the runs of the others
/// are counted, with the command that shows all of them.
#[test]
fn the_closing_list_shows_the_first_ten_reasons_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        r#"format = 1
[experiment]
name = "reasons"
[command]
shell = "echo 'error number {n}' >&2; exit 1"
output-format = "text"
[matrix]
n = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
[measure]
sample-interval = "off"
"#,
    );
    let (out, bundle) = run(dir.path(), &m);
    let err = stderr(&out);
    let list = &err[err.find("runs that are not ok").expect("closing list")..];
    assert!(list.contains("000-0-r1: exit 1: error number 0"), "{list}");
    assert!(list.contains("009-9-r1: exit 1: error number 9"), "{list}");
    assert!(!list.contains("010-10-r1"), "{list}");
    let display = bundle.strip_prefix(dir.path()).unwrap().display().to_string();
    assert!(
        list.contains(&format!(
            "... and 2 runs with other reasons; all of them: hwr-exp report {display} --stderr"
        )),
        "{list}"
    );
}

#[test]
fn timeouts_and_invalid_outputs_have_reasons_with_the_last_stderr_line() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_manifest(
        dir.path(),
        r#"format = 1
[experiment]
name = "reasons"
[command]
shell = """case {mode} in
  slow) echo 'step 1 of 10' >&2; sleep 30 ;;
  junk) echo 'not json'; echo 'warning: wrote text' >&2 ;;
  ok) echo '{{"a": 1}}' ;;
esac"""
output = "{mode}.json"
output-format = "json"
[matrix]
mode = ["slow", "junk", "ok"]
[isolation]
timeout = "1s"
grace = "1s"
[measure]
sample-interval = "off"
"#,
    );
    let (out, bundle) = run(dir.path(), &m);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("000-slow-r1  timeout  "), "{err}");
    assert!(
        err.contains(", ended by SIGTERM: step 1 of 10") || err.contains(", ended by SIGKILL: step 1 of 10"),
        "{err}"
    );
    assert!(err.contains("001-junk-r1  invalid-output  "), "{err}");
    assert!(
        err.contains("output invalid (") && err.contains("): warning: wrote text"),
        "{err}"
    );
    assert!(err.contains("[3/3] 002-ok-r1  ok  exit 0  "), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&stdout(&hwr_columns(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
        None,
    )))
    .unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert!(
        runs[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("timeout, ended by SIG")
    );
    assert!(
        runs[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("output invalid (")
    );
    assert_eq!(
        runs[2]["reason"],
        serde_json::Value::Null,
        "an ok run has no reason"
    );
    assert!(runs[2].get("stderr-tail").is_none());
    // The recorded run.json is unchanged by the reason: it is derived, not stored.
    assert!(
        json(&bundle.join("runs/000-slow-r1/run.json"))
            .get("reason")
            .is_none()
    );
}
