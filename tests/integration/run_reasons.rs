//! Reasons keep the useful end (issue 22, item 10): a long last stderr line keeps its end (`No such
//! file or directory`) in `run`'s progress (lines and the terminal bar, fitted to the width) and in
//! every format of `report`; a last line of escape sequences and blanks is no reason; an invalid
//! JSON output is named with the bytes the parser stopped at.

use std::path::Path;

use crate::support::{
    ManifestBuilder, code, hwr_columns, in_terminal, printed_path, repo, stderr, stdout, terminal_lines,
};

const END: &str = "[Errno 2] No such file or directory";

/// A manifest whose one run is `python3 <a long path>/missing_script.py` (a real `can't open
/// file` from Python, whatever its version), in a folder of `dir` deep enough that the line is
/// longer than 150 columns.
fn missing_script(dir: &Path) -> std::path::PathBuf {
    let deep =
        dir.join("a-rather-long-folder-for-experiment-scripts/with-another-level-below-it/and-one-more");
    std::fs::create_dir_all(&deep).unwrap();
    let script = deep.join("missing_script.py");
    ManifestBuilder::argv("missing", &["python3", script.to_str().unwrap()])
        .text_output()
        .set("measure", "sample-interval", "off")
        .write(dir)
}

/// The widest line of `text`, in characters.
fn widest(lines: &[String]) -> usize {
    lines.iter().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn a_long_reason_keeps_its_end_in_progress_lines_and_the_report() {
    let repo = repo();
    let dir = repo.path();
    let manifest = missing_script(dir);
    let out = hwr_columns(
        dir,
        &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
        Some("100"),
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    let progress: Vec<String> = err
        .lines()
        .filter(|l| l.starts_with("[1/1]"))
        .map(String::from)
        .collect();
    assert_eq!(progress.len(), 1, "{err}");
    assert!(progress[0].ends_with(END), "{err}");
    assert!(progress[0].contains("exit 2: …"), "the first clause stays: {err}");
    assert!(widest(&progress) <= 100, "{err}");
    let bundle = printed_path(dir, &out);
    let bundle = bundle.to_str().unwrap();
    for columns in ["100", "60"] {
        let report = hwr_columns(dir, &["report", bundle], Some(columns));
        // The table may wrap the reason over lines; the words of its end are all there.
        let words: String = stdout(&report).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("No such file or"),
            "COLUMNS={columns}:\n{}",
            stdout(&report)
        );
    }
    for format in ["json", "csv", "md", "html"] {
        let report = hwr_columns(dir, &["report", bundle, "--format", format], Some("100"));
        assert!(
            stdout(&report).contains("No such file or directory"),
            "--format {format}"
        );
    }
}

#[test]
fn the_terminal_bar_fits_a_reason_to_the_terminal_width() {
    let repo = repo();
    let dir = repo.path();
    let manifest = missing_script(dir);
    let out = in_terminal(
        dir,
        90,
        &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
    )
    .output()
    .expect("script runs");
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let lines = terminal_lines(&out.stdout);
    let failed: Vec<&String> = lines.iter().filter(|l| l.contains("[1/1] ")).collect();
    assert_eq!(failed.len(), 1, "{lines:#?}");
    // The bar redraws itself right after the line: what precedes it is the run's line.
    let line = &failed[0][failed[0].find("[1/1]").unwrap()..];
    let line = line.split(" [00:").next().unwrap().trim_end();
    let line = line.trim_end_matches(|c: char| !c.is_ascii() || c.is_whitespace());
    assert!(line.ends_with(END), "{line:?}");
    assert!(
        line.chars().count() <= 90,
        "{} columns: {line:?}",
        line.chars().count()
    );
}

#[test]
fn a_last_line_of_escape_sequences_is_no_reason() {
    let repo = repo();
    let dir = repo.path();
    let manifest = ManifestBuilder::shell(
        "escapes",
        r"echo 'error: the disk is full' >&2; printf '\033[0m\n  \033[?25h\n\033]0;title\007\n' >&2; exit 1",
    )
    .text_output()
    .write(dir);
    let out = hwr_columns(
        dir,
        &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
        Some("100"),
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exit 1: error: the disk is full"),
        "{}",
        stderr(&out)
    );
    let report = hwr_columns(
        dir,
        &[
            "report",
            printed_path(dir, &out).to_str().unwrap(),
            "--format",
            "json",
        ],
        None,
    );
    assert!(
        stdout(&report).contains("\"exit 1: error: the disk is full\""),
        "{}",
        stdout(&report)
    );
}

#[test]
fn invalid_output_quotes_the_bytes_it_choked_on() {
    let repo = repo();
    let dir = repo.path();
    let manifest =
        ManifestBuilder::shell("choked", "echo 'Traceback (most recent call last):'; echo '{{}}'").write(dir);
    let out = hwr_columns(
        dir,
        &["run", manifest.to_str().unwrap(), "--results-dir", "results"],
        Some("200"),
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("expected value at line 1 column 1, at \"Traceback (most recent c…\""),
        "{}",
        stderr(&out)
    );
}
