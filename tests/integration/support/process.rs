//! Processes seen through `/proc`, and polling for a condition with a deadline.

use std::time::{Duration, Instant};

/// The fields of `/proc/PID/stat` after `(comm)`: state, ppid, pgrp, ... (`None` when gone).
fn stat_fields(pid: i64) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The state letter of process `pid` from `/proc/PID/stat` (`R`, `S`, `Z`, ...), `None` when it
/// is gone (reaped).
pub fn process_state(pid: i64) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// Pids of the live (not zombie) processes whose process group is `pgid`, from `/proc/*/stat`.
pub fn group_members(pgid: i64) -> Vec<i64> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let Some(fields) = stat_fields(pid) else {
            continue;
        };
        if fields.len() > 2 && fields[2].parse::<i64>() == Ok(pgid) && fields[0] != "Z" {
            out.push(pid);
        }
    }
    out
}

/// Polls `ok` every 10 ms until it holds; panics naming `what` when `within` has passed.
pub fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Compiles the C program `source` with `cc -O2 -pthread` into `dir/name`; returns its path, or
/// `None` (after saying why the test is skipped) where no C compiler is installed.
pub fn compile_c(dir: &std::path::Path, name: &str, source: &str) -> Option<std::path::PathBuf> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    match std::process::Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
    {
        Ok(out) if out.status.success() => Some(exe),
        Ok(out) => panic!("cc failed on {name}.c: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            eprintln!("skipped: no C compiler (cc: {e})");
            None
        }
    }
}
