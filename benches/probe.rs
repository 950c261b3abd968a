//! Cost of the built-in probe's loop, per iteration, per mode, at 16, 64 and 4096 f32 elements,
//! and the cost of one memory sample (smaps_rollup + fd count).
//!
//! Plain `std::time` measurement (no harness): `cargo bench --bench probe`. Each figure is the
//! median of 5 timed rounds of a fixed iteration count, after a warm-up; the count is chosen so
//! that one round takes about 0.2 s. Two figures per row: wall-clock time, and the thread's CPU
//! time (`CLOCK_THREAD_CPUTIME_ID`), which is less inflated when other processes share the CPUs.

use std::time::{Duration, Instant};

use hwr_exp::memory::Rollup;
use hwr_exp::probe::{Fixture, Mode, Phase, Sampler, Workload, fd_count};

const ROUNDS: usize = 5;
const ROUND_TARGET: Duration = Duration::from_millis(200);

/// CPU time of the calling thread in seconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Median (wall, thread CPU) seconds per call of `f(count)` over [`ROUNDS`] rounds of `count`
/// calls, with `count` grown until a round takes [`ROUND_TARGET`].
fn per_call(mut f: impl FnMut(u64)) -> (f64, f64) {
    let mut count = 16;
    loop {
        let t = Instant::now();
        f(count);
        if t.elapsed() >= ROUND_TARGET / 4 {
            break;
        }
        count *= 2;
    }
    count *= 4;
    let mut wall = Vec::with_capacity(ROUNDS);
    let mut cpu = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (t, c) = (Instant::now(), thread_cpu_seconds());
        f(count);
        cpu.push((thread_cpu_seconds() - c) / count as f64);
        wall.push(t.elapsed().as_secs_f64() / count as f64);
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (wall[ROUNDS / 2], cpu[ROUNDS / 2])
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    println!("hwr-exp probe safetensors-retention: cost per loop iteration (median of {ROUNDS} rounds)");
    println!(
        "{:<12} {:>10} {:>18} {:>18}",
        "mode", "elements", "wall ns/iteration", "cpu ns/iteration"
    );
    for mode in [Mode::GetTensor, Mode::View, Mode::Reuse] {
        for elements in [16usize, 64, 4096] {
            let fixture = Fixture::create(elements).expect("fixture");
            let first = hwr_exp::probe::materialize(fixture.bytes(), elements).expect("first read");
            let mut workload = Workload::new(mode, &fixture, first);
            workload.run(1000).expect("warm-up");
            let (wall, cpu) = per_call(|n| workload.run(n).expect("iterations"));
            std::hint::black_box(workload.checksum());
            let name = mode_name(mode);
            println!(
                "{name:<12} {elements:>10} {:>18.1} {:>18.1}",
                wall * 1e9,
                cpu * 1e9
            );
        }
    }

    println!();
    println!("cost of one memory sample");
    let sampler = Sampler::from_env();
    let sample = per_call(|n| {
        for _ in 0..n {
            std::hint::black_box(sampler.sample(Phase::Loop, 0, 0.0).expect("sample"));
        }
    });
    let rollup = per_call(|n| {
        for _ in 0..n {
            std::hint::black_box(Rollup::read(sampler.path()).expect("smaps_rollup"));
        }
    });
    let fds = per_call(|n| {
        for _ in 0..n {
            std::hint::black_box(fd_count().expect("fd count"));
        }
    });
    println!("{:<36} {:>12} {:>12}", "", "wall us", "cpu us");
    for (name, (wall, cpu)) in [
        ("sample (smaps_rollup + fd count)", sample),
        ("  smaps_rollup read + parse", rollup),
        ("  /proc/self/fd count", fds),
    ] {
        println!("{name:<36} {:>12.1} {:>12.1}", wall * 1e6, cpu * 1e6);
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::GetTensor => "get_tensor",
        Mode::View => "view",
        Mode::Reuse => "reuse",
    }
}
