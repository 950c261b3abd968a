//! The adaptive rule's error rate, power and cost (issue 36 item 2), by simulation: `cargo bench
//! --bench adaptive [SEQUENCES]` (default 2000 sequences per row). Each sequence is one cell and
//! its control, `max` runs each, drawn from a skewed (exponential) growth distribution, either
//! continuous or page-quantized (whole 4 KiB pages: many ties), the cell shifted by `effect`
//! standard deviations. It is judged by the decision code of the runner and the report
//! (`stats::shift::shift_at` and `stats::verdict::decide` at each look's level):
//!
//! - **sequential**: [`Design::for_rule`]`(4, 30)` (and its alternatives with other spending
//!   exponents), stopping at the first look whose verdict is `above` / `below control`;
//! - **every run at 0.05**: the rule before issue 36 (a look after every run from 4 to 30);
//! - **fixed 30**: one look at 30 runs at 0.05.
//!
//! Printed per rule: the rate of false verdicts under the null (effect 0), the power (share of
//! sequences called `above control`) at effects 0.5, 1 and 1.5, and the mean runs per cell at
//! the decision (`max` for the undecided).

use hwr_exp::stats::sequential::Design;
use hwr_exp::stats::{ALPHA, Verdict};

const MIN: usize = 4;
const MAX: usize = 30;

/// The verdict at the first look that gives `above` / `below control`, and the runs there.
fn judge(x: &[f64], y: &[f64], looks: &[usize], levels: &[f64]) -> (Option<Verdict>, usize) {
    for (&n, &level) in looks.iter().zip(levels) {
        let s = hwr_exp::stats::shift::shift_at(&x[..n], &y[..n], level);
        let v = hwr_exp::stats::verdict::decide(s.as_ref(), s.map_or(1.0, |s| s.p), level, level, None);
        if matches!(v, Verdict::AboveControl | Verdict::BelowControl) {
            return (Some(v), n);
        }
    }
    (None, *looks.last().expect("a look"))
}

/// Exponential with mean 3 (standard deviation 3), in pages of 4 KiB, shifted by `effect` sd.
fn draw(rng: &mut fastrand::Rng, effect: f64, quantized: bool) -> f64 {
    let v = -(1.0 - rng.f64()).ln() * 3.0 + effect * 3.0;
    if quantized { v.floor() * 4096.0 } else { v * 4096.0 }
}

/// (share with `want`, mean runs) over `n` sequences.
fn rate(
    n: usize,
    effect: f64,
    quantized: bool,
    looks: &[usize],
    levels: &[f64],
    want: &[Verdict],
) -> (f64, f64) {
    let mut rng = fastrand::Rng::with_seed(36 + (effect * 10.0) as u64 + quantized as u64);
    let (mut hits, mut runs) = (0usize, 0usize);
    for _ in 0..n {
        let x: Vec<f64> = (0..MAX).map(|_| draw(&mut rng, effect, quantized)).collect();
        let y: Vec<f64> = (0..MAX).map(|_| draw(&mut rng, 0.0, quantized)).collect();
        let (v, at) = judge(&x, &y, looks, levels);
        hits += v.is_some_and(|v| want.contains(&v)) as usize;
        runs += at;
    }
    (hits as f64 / n as f64, runs as f64 / n as f64)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let every: Vec<usize> = (MIN..=MAX).collect();
    let mut rules: Vec<(String, Vec<usize>, Vec<f64>)> = Vec::new();
    for rho in [3.0, 2.0, 1.0] {
        let d = Design::with_spending(MIN, MAX, ALPHA, rho);
        let name = format!("sequential t^{rho}{}", if rho == 3.0 { " (used)" } else { "" });
        println!("{name}: looks (level) {}", d.looks_text());
        rules.push((name, d.looks, d.levels));
    }
    rules.push((
        "every run at 0.05".into(),
        every.clone(),
        vec![ALPHA; every.len()],
    ));
    rules.push(("fixed 30 at 0.05".into(), vec![MAX], vec![ALPHA]));
    println!("{n} sequences per cell of the table, min {MIN}, max {MAX}");
    println!(
        "| rule | data | false verdicts (null) | power 0.5 sd | runs | power 1 sd | runs | power 1.5 sd | runs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, looks, levels) in &rules {
        for quantized in [false, true] {
            let both = [Verdict::AboveControl, Verdict::BelowControl];
            let (null, _) = rate(n, 0.0, quantized, looks, levels, &both);
            let mut row = format!(
                "| {name} | {} | {:.3} |",
                if quantized { "pages" } else { "continuous" },
                null
            );
            for effect in [0.5, 1.0, 1.5] {
                let (power, runs) = rate(n, effect, quantized, looks, levels, &[Verdict::AboveControl]);
                row.push_str(&format!(" {power:.3} | {runs:.1} |"));
            }
            println!("{row}");
        }
    }
}
