//! Mean wall time per run of `/bin/true`, for the launcher and for plain `std::process` baselines.
//!
//! `cargo run --example exec_overhead -- [runs]` (default 500 runs).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use hwr_exp::exec::{Launcher, ProcessLauncher, RunSpec};

fn time(name: &str, n: u32, mut f: impl FnMut()) {
    f();
    let mut each = Vec::with_capacity(n as usize);
    let cpu0 = self_cpu();
    let t = Instant::now();
    for _ in 0..n {
        let t1 = Instant::now();
        f();
        each.push(t1.elapsed().as_secs_f64() * 1e3);
    }
    let wall = t.elapsed();
    let cpu = self_cpu() - cpu0;
    each.sort_by(f64::total_cmp);
    println!(
        "{name:<46} mean {:>6.3} ms/run, median {:>6.3} ms, runner CPU {:>6.3} ms/run",
        wall.as_secs_f64() * 1e3 / f64::from(n),
        each[each.len() / 2],
        cpu * 1e3 / f64::from(n)
    );
}

/// User + system CPU seconds of this process so far (`getrusage(RUSAGE_SELF)`).
fn self_cpu() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn main() {
    let n: u32 = std::env::args().nth(1).map_or(500, |a| a.parse().expect("runs"));
    let dir = tempfile::tempdir().expect("tempdir");
    let base = RunSpec {
        argv: vec!["/bin/true".into()],
        workdir: dir.path().to_path_buf(),
        env: vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
        cpus: Vec::new(),
        timeout: Some(Duration::from_secs(120)),
        grace: Duration::from_secs(5),
        stdout_path: dir.path().join("stdout"),
        stderr_path: dir.path().join("stderr"),
        memory_path: None,
        sample_interval: Duration::from_millis(100),
        allocator: None,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let ex = ProcessLauncher::new();

    time("std Command::status (posix_spawn)", n, || {
        Command::new("/bin/true").status().expect("spawn");
    });
    time("std Command::status + empty pre_exec (fork)", n, || {
        let mut c = Command::new("/bin/true");
        // SAFETY: the closure does nothing.
        unsafe { c.pre_exec(|| Ok(())) };
        c.status().expect("spawn");
    });
    time("ProcessLauncher, no pinning, no sampling", n, || {
        ex.execute(&base, &cancel);
    });
    let cpu0 = hwr_exp::cpus::allowed_cpus().expect("cpus")[0];
    let mut pinned = base.clone();
    pinned.cpus = vec![cpu0];
    time("ProcessLauncher, pinned", n, || {
        ex.execute(&pinned, &cancel);
    });
    let mut sampled = base.clone();
    sampled.memory_path = Some(dir.path().join("memory.jsonl"));
    time("ProcessLauncher, sampling every 100ms", n, || {
        ex.execute(&sampled, &cancel);
    });
    let mut both = pinned.clone();
    both.memory_path = sampled.memory_path.clone();
    time("ProcessLauncher, pinned + sampling", n, || {
        ex.execute(&both, &cancel);
    });
    let mut bare = base.clone();
    bare.argv = vec!["true".into()];
    time("ProcessLauncher, `true` looked up in PATH", n, || {
        ex.execute(&bare, &cancel);
    });
}
