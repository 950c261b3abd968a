//! Provenance capture time against git's own commands on the same tree; prints figures, asserts
//! nothing. Driven by `benches/provenance_capture.sh`, which builds the repositories.
//!
//! Usage: `provenance_capture REPO RUNS [--clean]`. Each of RUNS rounds times, back to back:
//! 1. `git status --porcelain` followed by `git diff HEAD --binary` (the baseline, output read
//!    and discarded);
//! 2. `hwr_exp::provenance::capture(REPO)` (the capture before the first run);
//! 3. `hwr_exp::provenance::capture_after(REPO, [], before)` (the after-run drift capture).
//!
//! Wall time per step and CPU time (user + system of this process and its waited-for children,
//! from /proc/self/stat) are printed as min / median / max, with the per-round ratio
//! capture / baseline. With `--clean` the baseline is `git status --porcelain` alone.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// CPU seconds used so far by this process and its reaped children (/proc/self/stat utime, stime,
/// cutime, cstime).
fn cpu_seconds() -> f64 {
    let stat = procfs::process::Process::myself()
        .and_then(|p| p.stat())
        .expect("/proc/self/stat is readable");
    let ticks = stat.utime + stat.stime + stat.cutime.max(0) as u64 + stat.cstime.max(0) as u64;
    ticks as f64 / procfs::ticks_per_second() as f64
}

/// Wall and CPU seconds of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    let (c0, t0) = (cpu_seconds(), Instant::now());
    let out = f();
    (out, t0.elapsed().as_secs_f64(), cpu_seconds() - c0)
}

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} failed");
}

/// `min / median / max` of `xs` with `unit` formatting.
fn spread(xs: &[f64], fmt: impl Fn(f64) -> String) -> String {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!("{} / {} / {}", fmt(v[0]), fmt(median), fmt(v[v.len() - 1]))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let repo = Path::new(
        args.first()
            .expect("usage: provenance_capture REPO RUNS [--clean]"),
    );
    let runs: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(5);
    let clean = args.iter().any(|a| a == "--clean");

    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = vec![
        (
            if clean {
                "git status --porcelain"
            } else {
                "git status --porcelain + git diff HEAD --binary"
            },
            vec![],
            vec![],
        ),
        ("hwr-exp capture (before the runs)", vec![], vec![]),
        ("hwr-exp after-run drift capture", vec![], vec![]),
    ];
    let mut ratio_wall = Vec::new();
    let mut ratio_cpu = Vec::new();
    let mut method = String::new();
    let mut patch_bytes = 0;
    for _ in 0..runs {
        let ((), w0, c0) = timed(|| {
            git(repo, &["status", "--porcelain"]);
            if !clean {
                git(repo, &["diff", "HEAD", "--binary"]);
            }
        });
        let (before, w1, c1) = timed(|| hwr_exp::provenance::capture(repo));
        let (after, w2, c2) = timed(|| hwr_exp::provenance::capture_after(repo, &[], &before));
        let (b, a) = (
            serde_json::to_value(&before).expect("serialises"),
            serde_json::to_value(&after).expect("serialises"),
        );
        assert_eq!(b["patch-sha256"], a["patch-sha256"], "no drift expected");
        assert!(before.errors().is_empty(), "{:?}", before.errors());
        method = b["capture-method"].to_string();
        patch_bytes = before.patch().len();
        for (row, (w, c)) in rows.iter_mut().zip([(w0, c0), (w1, c1), (w2, c2)]) {
            row.1.push(w);
            row.2.push(c);
        }
        ratio_wall.push(w1 / w0);
        ratio_cpu.push(c1 / c0);
    }
    println!(
        "{} ({runs} rounds; capture-method {method}; working-tree.patch {patch_bytes} bytes)",
        repo.display()
    );
    println!(
        "  {:<50} {:>28}   {:>28}",
        "", "wall s min / median / max", "CPU s min / median / max"
    );
    let secs = |x: f64| format!("{x:.3}");
    for (name, wall, cpu) in &rows {
        println!(
            "  {name:<50} {:>28}   {:>28}",
            spread(wall, secs),
            spread(cpu, secs)
        );
    }
    let ratio = |x: f64| format!("{x:.2}x");
    println!(
        "  {:<50} {:>28}   {:>28}",
        "ratio capture / git (per round)",
        spread(&ratio_wall, ratio),
        spread(&ratio_cpu, ratio)
    );
}
