//! The progress bar on a terminal (issue 22, item 14): it does not stay on the terminal after
//! Ctrl-C, also when a second Ctrl-C makes `run` exit at once instead of waiting for the run in
//! flight to stop. The terminal is a pseudo-terminal (util-linux `script`).

use std::process::Stdio;
use std::time::Duration;

use crate::support::{
    Lines, ManifestBuilder, Program, Signal, in_terminal, need, repo, signal, terminal_lines, wait_child,
    wait_for_file,
};

/// The pid of the one child of process `pid` (`/proc/PID/task/PID/children`), once it has one.
fn child_of(pid: u32) -> u32 {
    crate::support::wait_for_value("the child of script", Duration::from_secs(30), || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[test]
fn a_second_ctrl_c_leaves_no_progress_bar_on_the_terminal() {
    if need(Program("script")).is_none() {
        return;
    }
    let repo = repo();
    let dir = repo.path();
    let started = dir.join("started");
    let termed = dir.join("termed");
    // A run that outlives SIGTERM (its grace is long): the first Ctrl-C leaves the runner waiting
    // for it, the second makes the runner exit at once.
    ManifestBuilder::shell(
        "stubborn",
        &format!(
            "trap 'echo term > {}' TERM; echo go > {}; while :; do sleep 0.1; done",
            termed.display(),
            started.display()
        ),
    )
    .text_output()
    .isolation("grace", "120s")
    .set("measure", "sample-interval", "off")
    .write(dir);
    let mut script = in_terminal(dir, 100, &["run", "experiment.toml", "--results-dir", "results"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("script starts");
    let mut output = Lines::read(script.stdout.take().unwrap());
    let runner = child_of(script.id());
    wait_for_file(&started, "go", Duration::from_secs(60));
    signal(runner, Signal::INT);
    // The runner has taken the first Ctrl-C when the run got its SIGTERM.
    wait_for_file(&termed, "term", Duration::from_secs(60));
    // A second Ctrl-C is a second request only after the window in which a repeated delivery of
    // the first counts as that one (issue 37 item 4: GNU `timeout` delivers its signal twice):
    // the runner says when that is.
    output.wait_for(hwr_exp::signal::STOP_AT_ONCE_HINT, Duration::from_secs(60));
    signal(runner, Signal::INT);
    let status = wait_child(
        &mut script,
        Duration::from_secs(60),
        "hwr-exp after a second Ctrl-C",
    );
    assert_eq!(status.code(), Some(130));
    let raw = output.rest();
    let text = String::from_utf8_lossy(&raw);
    let last_bar = text
        .rfind(" ETA ")
        .unwrap_or_else(|| panic!("no progress bar was drawn: {text:?}"));
    let erased = text.rfind("\r\u{1b}[2K").unwrap_or(0);
    assert!(
        erased > last_bar,
        "the bar's line was not erased before the exit: {:?}",
        text.chars()
            .rev()
            .take(200)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<String>()
    );
    // What the terminal's last line shows: what follows its last carriage return.
    let last_line = text.rsplit('\n').next().unwrap_or_default();
    let shown = terminal_lines(last_line.rsplit('\r').next().unwrap_or_default().as_bytes());
    assert!(
        shown.iter().all(|l| l.trim().is_empty()),
        "the terminal's last line still shows {shown:?}"
    );
}

#[test]
fn one_ctrl_c_erases_the_bar_before_the_closing_lines() {
    if need(Program("script")).is_none() {
        return;
    }
    let repo = repo();
    let dir = repo.path();
    let started = dir.join("started");
    ManifestBuilder::shell("sleepy", &format!("echo go > {}; sleep 60", started.display()))
        .text_output()
        .matrix("n", [1, 2])
        .set("measure", "sample-interval", "off")
        .write(dir);
    let mut script = in_terminal(dir, 100, &["run", "experiment.toml", "--results-dir", "results"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("script starts");
    let output = Lines::read(script.stdout.take().unwrap());
    let runner = child_of(script.id());
    wait_for_file(&started, "go", Duration::from_secs(60));
    signal(runner, Signal::INT);
    let status = wait_child(&mut script, Duration::from_secs(60), "hwr-exp after Ctrl-C");
    assert_eq!(status.code(), Some(130));
    let raw = output.rest();
    let text = String::from_utf8_lossy(&raw);
    let last_bar = text.rfind(" ETA ").expect("a progress bar was drawn");
    let closing = text.find("bundle interrupted").expect("the summary line");
    let erased = text[..closing].rfind("\r\u{1b}[2K").unwrap_or(0);
    assert!(last_bar < erased, "{text:?}");
    let next = format!("next: {} resume ", crate::support::bin().display());
    assert!(text.contains(&next), "{text:?}");
}
