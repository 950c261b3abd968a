//! The `hwr-exp` binary under test, started the one way the tests start it, and its output.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Path of the `hwr-exp` binary cargo built for this test run (`CARGO_BIN_EXE_hwr-exp`).
pub fn bin() -> &'static Path {
    assert_cmd::cargo::cargo_bin!("hwr-exp")
}

/// `hwr-exp` with working directory `cwd`, git isolated from the user's configuration
/// ([`super::isolate_git`]: the runner captures provenance with libgit2 and the git CLI).
pub fn hwr_command(cwd: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.current_dir(cwd);
    super::isolate_git(&mut cmd);
    cmd
}

/// `cmd` started through `PREFIX...` (`prlimit --fsize=1024 --`, `sh -c 'ulimit -v 4000000;
/// exec "$0" "$@"'`): the prefix's argv, then `cmd`'s program and arguments, with `cmd`'s working
/// directory and environment changes. Stdio is not carried over: set it on the result.
pub fn wrapped<S: AsRef<std::ffi::OsStr>>(prefix: &[S], cmd: &Command) -> Command {
    let (first, rest) = prefix.split_first().expect("a prefix program");
    let mut out = Command::new(first);
    out.args(rest).arg(cmd.get_program()).args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        out.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => out.env(k, v),
            None => out.env_remove(k),
        };
    }
    out
}

/// `cmd` run by a shell that first runs `setup` (`ulimit -v 4000000`), then `exec`s it
/// ([`wrapped`]).
pub fn limited(cmd: &Command, setup: &str) -> Command {
    wrapped(&["sh", "-c", &format!(r#"{setup}; exec "$0" "$@""#)], cmd)
}

/// Runs `hwr-exp ARGS` in `cwd` ([`hwr_command`]) to the end, output captured, stdin empty.
pub fn hwr(cwd: &Path, args: &[&str]) -> Output {
    hwr_command(cwd).args(args).output().expect("hwr-exp runs")
}

/// [`hwr`] with `COLUMNS` set to `columns`, or removed when `None` (stdout is a pipe, so tables
/// then fit 100 columns: docs/DESIGN.md 9).
pub fn hwr_columns(cwd: &Path, args: &[&str], columns: Option<&str>) -> Output {
    let mut cmd = hwr_command(cwd);
    cmd.args(args);
    match columns {
        Some(c) => cmd.env("COLUMNS", c),
        None => cmd.env_remove("COLUMNS"),
    };
    cmd.output().expect("hwr-exp runs")
}

/// `hwr-exp run MANIFEST --results-dir DIR/results --quiet` in `dir`; returns the output and the
/// bundle folder it printed (when the last stdout line names a folder under `dir`).
pub fn run(dir: &Path, manifest: &Path) -> (Output, Option<PathBuf>) {
    let results = dir.join("results");
    let out = hwr_command(dir)
        .arg("run")
        .arg(manifest)
        .arg("--results-dir")
        .arg(&results)
        .arg("--quiet")
        .output()
        .expect("hwr-exp runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bundle = stdout.lines().last().map(|p| dir.join(p)).filter(|p| p.is_dir());
    (out, bundle)
}

/// Starts `hwr-exp run experiment.toml --quiet --results-dir results` in `dir` without waiting;
/// stdin is empty, stdout and stderr are piped (read them with `wait_with_output`).
pub fn spawn_run(dir: &Path) -> Child {
    hwr_command(dir)
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hwr-exp starts")
}

/// The bundle path a command run in `cwd` printed on stdout (relative to `cwd` when inside it).
pub fn printed_path(cwd: &Path, out: &Output) -> PathBuf {
    cwd.join(String::from_utf8_lossy(&out.stdout).trim())
}

/// Exit code of an output, -1 when killed by a signal.
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// stdout as text (bytes that are not UTF-8 replaced).
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// This test binary again, running only the test `NAME` of the calling module (pass
/// `module_path!()`): for tests whose other half must be a separate process. The test runs even
/// when `#[ignore]`d, on one thread, with its stdout shown.
pub fn rerun_this_test(module_path: &str, name: &str) -> Command {
    // Test names leave out the crate: `integration::exec_process` -> `exec_process::NAME`.
    let module = module_path.split_once("::").map_or("", |(_, rest)| rest);
    let test = if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    };
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    cmd.args([test.as_str(), "--exact", "--include-ignored", "--nocapture"])
        .arg("--test-threads=1");
    cmd
}

/// `hwr-exp ARGS` in `cwd` on a pseudo-terminal `columns` wide and 24 rows high (util-linux
/// `script`), git isolated as in [`hwr_command`], `TERM=xterm-256color`, `COLUMNS` unset; not
/// started yet. Its stdout carries everything the terminal received (stdout and stderr, `\r\n`
/// line ends, the progress bar's redraws); its exit code is hwr-exp's (`script -e`).
pub fn in_terminal(cwd: &Path, columns: u16, args: &[&str]) -> Command {
    let words: Vec<String> = std::iter::once(bin().display().to_string())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .map(|w| shlex::try_quote(&w).expect("no NUL in a word").into_owned())
        .collect();
    let script = format!("stty rows 24 cols {columns}; exec {}", words.join(" "));
    let mut cmd = Command::new("script");
    cmd.current_dir(cwd)
        .args(["-qefc", &script, "/dev/null"])
        .env("TERM", "xterm-256color")
        .env_remove("COLUMNS")
        .stdin(Stdio::null());
    super::isolate_git(&mut cmd);
    cmd
}

/// What a terminal shows of `raw` pseudo-terminal output, roughly: each `\r`-separated piece of a
/// line after the last erase-line (`ESC [2K`) sequence, escape sequences removed; one entry per
/// line. Enough to find the lines the progress bar printed above itself.
pub fn terminal_lines(raw: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    let mut lines = Vec::new();
    for piece in text.split(['\r', '\n']) {
        let mut shown = String::new();
        let mut chars = piece.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    while let Some(&n) = chars.peek() {
                        chars.next();
                        if ('@'..='~').contains(&n) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            } else {
                shown.push(c);
            }
        }
        lines.push(shown);
    }
    lines
}
