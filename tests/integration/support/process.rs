//! Processes seen through `/proc`, signals to them, and waiting for what they do: a condition
//! polled with a deadline, a line they print, a file they write, their exit.

use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Child, ExitStatus, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use rustix::process::Signal;

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

/// CPU time (user plus system) process `pid` has used so far, from `/proc/PID/stat` (clock ticks
/// of 10 ms); zero when it is gone.
pub fn cpu_time(pid: u32) -> Duration {
    let ticks = stat_fields(i64::from(pid)).map_or(0, |f| {
        // After `(comm)`: state is field 0, utime field 11, stime field 12.
        f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
    });
    // USER_HZ, the unit of /proc's times, is 100 on every Linux architecture.
    Duration::from_millis(ticks * 10)
}

/// `true` once process `pid` has a handler installed for `sig` (its bit in `SigCgt` of
/// `/proc/PID/status`).
pub fn catches(pid: u32, sig: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (sig.as_raw() - 1)) != 0)
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

/// Sends `sig` to process `pid` (`kill(2)` through rustix).
///
/// # Panics
/// When the signal cannot be sent (no such process, no permission).
#[track_caller]
pub fn signal(pid: u32, sig: Signal) {
    let p = rustix::process::Pid::from_raw(pid as i32).expect("a pid above 0");
    rustix::process::kill_process(p, sig).unwrap_or_else(|e| panic!("kill({pid}, {sig:?}): {e}"));
}

/// Sends `sig` to process `pid` if it is still there; `false` when it is gone.
pub fn try_signal(pid: i32, sig: Signal) -> bool {
    rustix::process::Pid::from_raw(pid).is_some_and(|p| rustix::process::kill_process(p, sig).is_ok())
}

/// `true` while a process of process group `pgid` exists (zombies included: `kill(-pgid, 0)`).
pub fn group_exists(pgid: i32) -> bool {
    rustix::process::Pid::from_raw(pgid).is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok())
}

/// Polls `f` every `every` until it gives a value; `None` when `within` has passed first.
pub fn poll<T>(within: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= within {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Polls `ok` every 10 ms for up to `within`; `true` when it held (the last try is after the
/// deadline).
pub fn eventually(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    poll(within, Duration::from_millis(10), || ok().then_some(())).is_some()
}

/// Polls `ok` every 10 ms until it holds; panics naming `what` when `within` has passed.
#[track_caller]
pub fn wait_for(what: &str, within: Duration, ok: impl FnMut() -> bool) {
    assert!(
        eventually(within, ok),
        "timed out after {within:?} waiting for {what}"
    );
}

/// Polls `f` every 10 ms until it gives a value; panics naming `what` when `within` has passed.
#[track_caller]
pub fn wait_for_value<T>(what: &str, within: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll(within, Duration::from_millis(10), f)
        .unwrap_or_else(|| panic!("timed out after {within:?} waiting for {what}"))
}

/// Waits until the file `path` exists and holds `needle` (any content when empty); returns its
/// text. Panics when `within` has passed.
#[track_caller]
pub fn wait_for_file(path: &Path, needle: &str, within: Duration) -> String {
    wait_for_value(&format!("{} to hold {needle:?}", path.display()), within, || {
        std::fs::read_to_string(path).ok().filter(|t| t.contains(needle))
    })
}

/// Waits for `child` to exit; when `within` passes first, kills it and panics naming `what`.
#[track_caller]
pub fn wait_child(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let status = poll(within, Duration::from_millis(10), || {
        child.try_wait().expect("try_wait")
    });
    status.unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} was still running after {within:?}: killed")
    })
}

/// [`wait_child`], then everything the child wrote to its piped stdout and stderr.
#[track_caller]
pub fn output_within(mut child: Child, within: Duration, what: &str) -> Output {
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let status = wait_child(&mut child, within, what);
    let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| h.map_or(Vec::new(), |h| h.join().unwrap());
    Output {
        status,
        stdout: join(out),
        stderr: join(err),
    }
}

/// Reads `r` to its end on a thread of its own.
fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = r.read_to_end(&mut all);
        all
    })
}

/// The lines a child prints on one pipe, read as they come on a thread of their own: wait for
/// one ([`Lines::wait_for`]), then take everything ([`Lines::rest`]).
pub struct Lines {
    lines: mpsc::Receiver<String>,
    all: std::thread::JoinHandle<Vec<u8>>,
    seen: Vec<u8>,
}

impl Lines {
    /// Starts reading `pipe` (a child's `stdout` or `stderr`, taken from it).
    pub fn read(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        let all = std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(pipe);
            let mut all = Vec::new();
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                all.extend_from_slice(&line);
                let _ = tx.send(String::from_utf8_lossy(&line).into_owned());
                line.clear();
            }
            all
        });
        Lines {
            lines: rx,
            all,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `needle`; returns it. Panics when `within` passes or the pipe
    /// closes first, with the lines seen.
    #[track_caller]
    pub fn wait_for(&mut self, needle: &str, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.extend_from_slice(line.as_bytes());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {needle:?} ({e:?} after {within:?}); seen:\n{}",
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }

    /// Everything the pipe carried, once it closed (the child exited).
    pub fn rest(self) -> Vec<u8> {
        self.all.join().expect("the reader thread")
    }
}

/// Live processes whose environment holds an entry starting with `prefix` (e.g.
/// `HWR_BUNDLE=/tmp/x/results/`, [`run_marker`]): the processes of runs still there, as
/// `(pid, command line)`. Zombies have an empty environ and are not listed.
pub fn processes_with_env(prefix: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|e| e.starts_with(prefix.as_bytes()))
        {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

/// Pids of the processes that have the file `path` open (an entry of `/proc/PID/fd` links to it).
pub fn holders_of(path: &Path) -> Vec<i32> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path))
        {
            out.push(pid);
        }
    }
    out
}

/// The environment prefix every process of a run with results in `dir/results` carries
/// (`HWR_BUNDLE=<dir>/results/`).
pub fn run_marker(dir: &Path) -> String {
    format!("HWR_BUNDLE={}/", dir.join("results").display())
}

/// SIGKILLs whatever processes carry the environment prefix when dropped ([`processes_with_env`]),
/// so that a failing test (or a runner without containment) leaves no `sleep 300` behind.
pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for (pid, _) in processes_with_env(&self.0) {
            try_signal(pid, Signal::KILL);
        }
    }
}

/// Compiles the C program `source` with `cc -O2 -pthread` into `dir/name`; returns its path, or
/// `None` (after saying why the test is skipped, or failing under CI: [`super::need`]) where no C
/// compiler is installed.
#[track_caller]
pub fn compile_c(dir: &std::path::Path, name: &str, source: &str) -> Option<std::path::PathBuf> {
    let cc = super::need(super::Program("cc"))?;
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    match std::process::Command::new(cc)
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
    {
        Ok(out) if out.status.success() => Some(exe),
        Ok(out) => panic!("cc failed on {name}.c: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("cc does not start: {e}"),
    }
}
