//! Benchmark of `hwr-exp report` over a synthetic bundle of 10,000 runs.
//!
//! `cargo bench --bench report` generates the bundle in a temp dir (benches/report/synth.rs: the
//! real on-disk format, retention-schema outputs with 8 loop samples each), then runs the report in
//! a child process (this binary re-executed with `--child`) per format, so that the child's peak RSS
//! (`getrusage(RUSAGE_CHILDREN)` ru_maxrss) is the report's alone. Runs are streamed one at a time:
//! memory grows with the number of runs only by the per-run summary numbers.
//! Optional argument: the number of runs (default 10000). `ROUNDS=5` reports each format 5 times
//! and prints min / median / max.

#[path = "report/synth.rs"]
mod synth;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use hwr_exp::report::{Format, ReportOptions, report_to_writer};

fn peak_rss_children_bytes() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru.ru_maxrss as u64 * 1024
}

fn peak_rss_self_bytes() -> u64 {
    // SAFETY: as above.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as u64 * 1024
}

fn format_of(name: &str) -> Format {
    match name {
        "table" => Format::Table,
        "md" => Format::Md,
        "csv" => Format::Csv,
        "json" => Format::Json,
        other => panic!("unknown format {other}"),
    }
}

/// Counts the bytes written to it and drops them (the report is streamed as `hwr-exp report` streams
/// it to stdout).
struct Count(u64);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Child: one report, output counted and discarded; prints seconds and its own peak RSS.
fn child(dir: &Path, format: &str, plot: Option<PathBuf>) {
    let start = Instant::now();
    let mut out = Count(0);
    report_to_writer(
        &ReportOptions {
            bundle: dir.to_path_buf(),
            format: format_of(format),
            plot,
            ..Default::default()
        },
        &mut out,
    )
    .expect("report");
    let secs = start.elapsed().as_secs_f64();
    println!("{secs} {} {}", peak_rss_self_bytes(), out.0);
}

fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        total += if m.is_dir() { du(&e.path()) } else { m.len() };
    }
    total
}

/// Child: writes a synthetic bundle of `runs` runs with `loop_samples` loop samples each into `dir`.
fn generate(dir: &Path, runs: usize, loop_samples: u64) {
    let mut s = synth::Synth::small("bench");
    if runs >= 100 {
        s.modes = vec![
            "get_tensor".into(),
            "view".into(),
            "reuse".into(),
            "get_tensor_b".into(),
        ];
        s.sizes = (1..=25).map(|i| i * 16).collect();
    }
    s.repetitions = (runs / (s.modes.len() * s.sizes.len())).max(1) as u32;
    s.loop_samples = loop_samples;
    s.memory_jsonl = false;
    s.timeout_run = Some(3);
    synth::write_bundle(dir, &s).unwrap();
}

/// Generates a bundle in a child, then reports it in one child per format.
fn scenario(tmp: &Path, name: &str, runs: usize, loop_samples: u64, formats: &[(&str, bool)]) {
    let dir = tmp.join(name);
    let start = Instant::now();
    spawn(&[
        "--generate".as_ref(),
        dir.as_os_str(),
        runs.to_string().as_ref(),
        loop_samples.to_string().as_ref(),
    ]);
    let planned = hwr_exp::bundle::read::Bundle::open(&dir)
        .unwrap()
        .info()
        .planned_runs;
    let largest = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| du(&e.unwrap().path()))
        .max()
        .unwrap_or(0);
    println!(
        "{name}: {planned} runs, {:.1} MB on disk (largest run folder {:.1} KB), written in {:.1} s",
        du(&dir) as f64 / 1e6,
        largest as f64 / 1e3,
        start.elapsed().as_secs_f64()
    );
    let svg = tmp.join(format!("{name}.svg"));
    for &(format, plot) in formats {
        let mut a: Vec<&std::ffi::OsStr> = vec!["--child".as_ref(), dir.as_os_str(), format.as_ref()];
        if plot {
            a.push(svg.as_os_str());
        }
        let (mut secs, mut peaks, mut len) = (Vec::new(), Vec::new(), 0);
        for _ in 0..rounds() {
            let text = spawn(&a);
            let mut it = text.split_whitespace();
            secs.push(it.next().unwrap().parse::<f64>().unwrap());
            peaks.push(it.next().unwrap().parse::<u64>().unwrap() as f64 / 1048576.0);
            len = it.next().unwrap().parse().unwrap();
        }
        println!(
            "  report --format {format}{}: {} s, peak RSS {} MiB, output {:.1} MB",
            if plot { " --plot" } else { "" },
            min_median_max(&mut secs, 3),
            min_median_max(&mut peaks, 1),
            len as f64 / 1e6
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reports per format: `ROUNDS` (default 1).
fn rounds() -> usize {
    std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// `min / median / max` with `decimals` decimals (one value: just it).
fn min_median_max(v: &mut [f64], decimals: usize) -> String {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 1 {
        return format!("{:.decimals$}", v[0]);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    format!(
        "{:.decimals$} / {median:.decimals$} / {:.decimals$}",
        v[0],
        v[n - 1]
    )
}

/// Runs this binary with `args`; returns its stdout.
fn spawn(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.first().map(String::as_str) {
        Some("--child") => {
            let plot = args.get(3).map(PathBuf::from);
            child(Path::new(&args[1]), &args[2], plot);
            return;
        }
        Some("--generate") => {
            generate(
                Path::new(&args[1]),
                args[2].parse().unwrap(),
                args[3].parse().unwrap(),
            );
            return;
        }
        _ => {}
    }
    // The parent stays small: on Linux a child's ru_maxrss starts from its parent's RSS at fork,
    // so bundles are generated in children too.
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let tmp = tempfile::tempdir().unwrap();
    let all = [
        ("csv", false),
        ("json", false),
        ("md", false),
        ("table", false),
        ("table", true),
    ];
    scenario(tmp.path(), "many-small-runs", runs, 8, &all);
    // Memory follows one run's output, not the bundle: runs of ~1.7 MB output each, 20 then 80
    // of them; the peak RSS stays the same.
    let large = [("csv", false), ("table", true)];
    scenario(tmp.path(), "20-large-outputs", 20, 10_000, &large);
    scenario(tmp.path(), "80-large-outputs", 80, 10_000, &large);
    println!(
        "largest child's peak RSS (getrusage RUSAGE_CHILDREN): {:.1} MiB; this runner's peak RSS (RUSAGE_SELF): {:.1} MiB",
        peak_rss_children_bytes() as f64 / 1048576.0,
        peak_rss_self_bytes() as f64 / 1048576.0
    );
}
