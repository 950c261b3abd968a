//! Throughput of the JSON output check: `cargo bench --bench json_output -- FILE` checks FILE as a
//! run's JSON output three times with the reader the runner and the report use
//! ([`hwr_exp::bundle::output::check_output`]) and prints MB/s (10^6 bytes per second) of each pass,
//! by wall time and by CPU time of this process (the load-independent figure on a busy machine),
//! then the same for its parts: reading the file, the UTF-8/nesting scan ([`Checked`]), and
//! `serde_json` skipping the document without the scan.
//! Driven by `benches/json_output.sh`, which generates a ~490 MB output first.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Instant;

use hwr_exp::bundle::OutputCheck;
use hwr_exp::bundle::output::{Checked, check_output};
use hwr_exp::manifest::OutputFormat;

/// User + system CPU seconds of this process so far (getrusage RUSAGE_SELF).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn measure(what: &str, bytes: u64, f: impl FnOnce()) {
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    f();
    let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let mb = bytes as f64 / 1e6;
    println!(
        "{what}: {mb:.1} MB, {wall:.2} s wall = {:.0} MB/s, {cpu:.2} s CPU = {:.0} MB/s",
        mb / wall,
        mb / cpu
    );
}

fn drain(mut r: impl Read) {
    let mut buf = vec![0u8; 1 << 20];
    while r.read(&mut buf).expect("read") > 0 {}
}

fn main() {
    let Some(file) = std::env::args().skip(1).find(|a| !a.starts_with("--")) else {
        eprintln!("usage: cargo bench --bench json_output -- FILE");
        std::process::exit(2);
    };
    let path = Path::new(&file);
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or_else(|e| {
        eprintln!("{file}: {e}");
        std::process::exit(2);
    });
    for pass in 1..=3 {
        measure(&format!("output check, pass {pass}"), bytes, || {
            let (check, why) = check_output(path, OutputFormat::Json);
            if check != OutputCheck::Valid {
                eprintln!("{file}: {check:?}: {}", why.unwrap_or_default());
                std::process::exit(1);
            }
        });
    }
    let open = || File::open(path).expect("open");
    measure("  part: read only", bytes, || drain(open()));
    measure("  part: read + UTF-8/nesting scan", bytes, || {
        drain(Checked::new(open()))
    });
    measure("  part: read + serde_json skip, no scan", bytes, || {
        let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, open()));
        serde::de::Deserialize::deserialize(&mut de)
            .map(|serde::de::IgnoredAny| ())
            .expect("valid");
    });
}
