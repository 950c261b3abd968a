//! Throughput of the JSON output check: `cargo bench --bench json_output -- FILE` checks FILE as a
//! run's JSON output three times with the reader the runner and the report use
//! ([`hwr_exp::bundle::output::check_output`]) and prints MB/s (10^6 bytes per second) of each pass.
//! Driven by `benches/json_output.sh`, which generates a ~490 MB output first.

use std::path::Path;
use std::time::Instant;

use hwr_exp::bundle::OutputCheck;
use hwr_exp::bundle::output::check_output;
use hwr_exp::manifest::OutputFormat;

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
        let start = Instant::now();
        let (check, why) = check_output(path, OutputFormat::Json);
        let seconds = start.elapsed().as_secs_f64();
        if check != OutputCheck::Valid {
            eprintln!("{file}: {check:?}: {}", why.unwrap_or_default());
            std::process::exit(1);
        }
        println!(
            "output check pass {pass}: {:.1} MB in {seconds:.2} s = {:.0} MB/s",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / seconds
        );
    }
}
