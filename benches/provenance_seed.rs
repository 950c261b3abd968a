//! Issue 37 item 12: what provenance costs a run against the seed's own three git commands,
//! `git rev-parse HEAD; git status --short; git diff`, side by side; prints figures, asserts
//! nothing.
//!
//! Usage: `cargo bench --bench provenance_seed -- [FILES=5000] [ROUNDS=7]`. Builds a repository of
//! FILES committed files (100 folders) in a temporary folder, with one modified tracked file and one
//! untracked file, then each round times, back to back:
//! 1. the seed: `git rev-parse HEAD`, `git status --short`, `git diff` (output read, discarded);
//! 2. hwr-exp's provenance of one run: the capture before the runs
//!    (`hwr_exp::provenance::capture_limited`) and the drift capture after them
//!    (`hwr_exp::provenance::capture_after`).
//!
//! Each round starts both from a folder of the repository not asked about before (hwr-exp
//! remembers a folder's repository for the rest of the process; a run's process finds it once).
//! Wall time and CPU time (this process and its waited-for children, /proc/self/stat) are printed
//! as min / median / max with the per-round ratio hwr-exp / seed, hwr-exp's split between the two
//! captures, and the number of git processes each side starts (counted once, after the timed
//! rounds, through a logging `git` wrapper put first on PATH).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

fn cpu_seconds() -> f64 {
    let stat = procfs::process::Process::myself()
        .and_then(|p| p.stat())
        .expect("/proc/self/stat is readable");
    let ticks = stat.utime + stat.stime + stat.cutime.max(0) as u64 + stat.cstime.max(0) as u64;
    ticks as f64 / procfs::ticks_per_second() as f64
}

fn timed(f: impl FnOnce()) -> (f64, f64) {
    let (c0, t0) = (cpu_seconds(), Instant::now());
    f();
    (t0.elapsed().as_secs_f64(), cpu_seconds() - c0)
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

fn spread(xs: &[f64], fmt: impl Fn(f64) -> String) -> String {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    format!("{} / {} / {}", fmt(v[0]), fmt(median(&v)), fmt(v[v.len() - 1]))
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

fn seed(repo: &Path) {
    git(repo, &["rev-parse", "HEAD"]);
    git(repo, &["status", "--short"]);
    git(repo, &["diff"]);
}

/// hwr-exp's provenance of one run from `start`; the wall times of the capture before the runs
/// and of the one after them.
fn provenance(start: &Path) -> (f64, f64) {
    let t0 = Instant::now();
    let before = hwr_exp::provenance::capture_limited(start, &[], Default::default());
    let t1 = Instant::now();
    let _after = hwr_exp::provenance::capture_after(start, &[], &before);
    (t1.duration_since(t0).as_secs_f64(), t1.elapsed().as_secs_f64())
}

/// A repository of `files` committed files, one modified, one untracked.
fn build(dir: &Path, files: usize) {
    git(dir, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        let folder = dir.join(format!("d{:03}", i % 100));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join(format!("f{i:05}.txt")),
            format!("file {i}\n{}\n", "x".repeat(200)),
        )
        .unwrap();
    }
    git(dir, &["add", "-A"]);
    git(
        dir,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=b@e.invalid",
            "commit",
            "-qm",
            "files",
        ],
    );
    std::fs::write(dir.join("d000/f00000.txt"), "changed\n").unwrap();
    std::fs::write(dir.join("untracked.txt"), "new\n").unwrap();
}

/// The git processes `f` starts: PATH gets a `git` that logs each call and execs the real one.
fn git_processes(wrapper_dir: &Path, f: impl FnOnce()) -> usize {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let log = wrapper_dir.join("calls");
    let script = format!(
        "#!/bin/sh\necho x >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        real.trim()
    );
    let bin = wrapper_dir.join("git");
    std::fs::write(&bin, script).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let old = std::env::var_os("PATH").unwrap_or_default();
    let mut path = wrapper_dir.as_os_str().to_os_string();
    path.push(":");
    path.push(&old);
    // SAFETY: single-threaded at this point of the bench (no other thread reads the environment).
    unsafe { std::env::set_var("PATH", &path) };
    f();
    unsafe { std::env::set_var("PATH", &old) };
    std::fs::read_to_string(&log).map_or(0, |t| t.lines().count())
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let files = args.first().copied().unwrap_or(5000);
    let rounds = args.get(1).copied().unwrap_or(7).max(1);
    // SAFETY: before any thread starts.
    unsafe {
        std::env::set_var("GIT_CONFIG_NOSYSTEM", "1");
        std::env::set_var("GIT_CONFIG_GLOBAL", "/dev/null");
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    build(&repo, files);
    // Warm the caches once (and the index's stat data).
    seed(&repo);
    provenance(&repo);

    let (mut sw, mut sc, mut hw, mut hc, mut rw, mut rc) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut before, mut after) = (vec![], vec![]);
    for round in 0..rounds {
        // A folder not asked about before (up to 99 rounds): hwr-exp remembers where a folder's
        // repository is for the rest of the process, and a run's process finds it once.
        let start = repo.join(format!("d{:03}", 1 + round % 99));
        let (w1, c1) = timed(|| seed(&start));
        let (w2, c2) = timed(|| {
            let (b, a) = provenance(&start);
            before.push(b);
            after.push(a);
        });
        sw.push(w1);
        sc.push(c1);
        hw.push(w2);
        hc.push(c2);
        rw.push(w2 / w1);
        rc.push(if c1 > 0.0 { c2 / c1 } else { f64::NAN });
    }
    // Counted after the rounds, from a folder not asked about yet: what a run's process starts.
    let wrappers = tmp.path().join("wrap-seed");
    std::fs::create_dir(&wrappers).unwrap();
    let seed_procs = git_processes(&wrappers, || seed(&repo.join("d000")));
    let wrappers = tmp.path().join("wrap-hwr");
    std::fs::create_dir(&wrappers).unwrap();
    let hwr_procs = git_processes(&wrappers, || {
        provenance(&repo.join("d000"));
    });
    let ms = |x: f64| format!("{:.1} ms", x * 1000.0);
    let ratio = |x: f64| format!("{x:.2}x");
    println!("provenance of one run vs the seed's `git rev-parse HEAD; git status --short; git diff`");
    println!("repository: {files} files, one modified, one untracked; {rounds} rounds (min / median / max)");
    println!("                      seed                      hwr-exp (before + after)");
    println!("  wall   {:>30}   {}", spread(&sw, ms), spread(&hw, ms));
    println!("  CPU    {:>30}   {}", spread(&sc, ms), spread(&hc, ms));
    println!("  git processes {seed_procs:>23}   {hwr_procs}");
    println!(
        "  hwr-exp before / after the runs (median): {} / {}",
        ms(median(&before)),
        ms(median(&after))
    );
    println!(
        "ratio hwr-exp / seed per round: wall {} (median {}), CPU {} (median {})",
        spread(&rw, ratio),
        ratio(median(&rw)),
        spread(&rc, ratio),
        ratio(median(&rc))
    );
}
