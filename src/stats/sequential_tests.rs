//! Tests of the sequential design: its shape, and by simulation under the null that the rule the
//! runner uses (the exact rank test of [`crate::stats::shift::shift_at`] and
//! [`crate::stats::verdict::decide`] at each look's level) keeps false verdicts at or under 5%,
//! where looking after every run at 0.05 does not.

use super::*;
use crate::stats::{ALPHA, Verdict};

#[test]
fn looks_are_geometric_and_levels_sum_to_alpha() {
    let d = Design::for_rule(4, 30);
    // 4 and 6 runs cannot reach their increments (smallest p 0.029 and 0.0022): no looks.
    assert_eq!(d.looks, vec![9, 13, 20, 30]);
    assert_eq!(geometric_looks(4, 30), vec![4, 6, 9, 13, 20, 30]);
    let sum: f64 = d.levels.iter().sum();
    assert!((sum - ALPHA).abs() < 1e-12, "{sum}");
    assert!((d.levels[0] - 0.05 * 0.3f64.powi(3)).abs() < 1e-12);
    assert!(d.levels.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(d.level_at(4), d.levels[0]);
    assert_eq!(d.level_at(30), d.levels[3]);
    assert_eq!(d.next_look(4), Some(9));
    assert_eq!(d.next_look(30), None);
    assert!(d.is_look(13) && !d.is_look(12));
    // A rule too short for early looks is a fixed design at max.
    let short = Design::for_rule(4, 6);
    assert_eq!(
        (short.looks.clone(), short.levels.clone()),
        (vec![6], vec![ALPHA])
    );
    assert_eq!(Design::for_rule(5, 5).looks, vec![5]);
    assert_eq!(Design::for_rule(2, 100).looks.last(), Some(&100));
    assert_eq!(level_text(0.001_35), "0.00135");
    assert_eq!(level_text(0.035_2), "0.0352");
}

/// One cell and its control from the same distribution, `max` runs each.
fn null_pair(rng: &mut fastrand::Rng, max: usize, quantized: bool) -> (Vec<f64>, Vec<f64>) {
    let mut draw = || {
        // Skewed (exponential) retention growth in bytes; page-quantized: whole 4 KiB pages
        // of a few values, so most runs tie.
        let v = -(1.0 - rng.f64()).ln() * 3.0;
        if quantized { v.floor() * 4096.0 } else { v * 4096.0 }
    };
    let x = (0..max).map(|_| draw()).collect();
    let y = (0..max).map(|_| draw()).collect();
    (x, y)
}

/// Whether the rule judging at `looks` (runs per side) with `levels` gives `above control` or
/// `below control` at some look: the decision of the runner and the report.
pub(super) fn false_verdict(x: &[f64], y: &[f64], looks: &[usize], levels: &[f64]) -> bool {
    looks.iter().zip(levels).any(|(&n, &level)| {
        let s = crate::stats::shift::shift_at(&x[..n], &y[..n], level);
        matches!(
            crate::stats::verdict::decide(s.as_ref(), s.map_or(1.0, |s| s.p), level, level, None),
            Verdict::AboveControl | Verdict::BelowControl
        )
    })
}

/// False verdicts among `sequences` null sequences.
fn false_rate(
    seed: u64,
    sequences: usize,
    max: usize,
    quantized: bool,
    looks: &[usize],
    levels: &[f64],
) -> f64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let hits = (0..sequences)
        .filter(|_| {
            let (x, y) = null_pair(&mut rng, max, quantized);
            false_verdict(&x, &y, looks, levels)
        })
        .count();
    hits as f64 / sequences as f64
}

/// The 5% plus the upper 99% normal bound of a binomial proportion of 5% over `n` sequences.
fn bound(n: usize) -> f64 {
    ALPHA + 2.326 * (ALPHA * (1.0 - ALPHA) / n as f64).sqrt()
}

#[test]
fn design_keeps_false_verdicts_at_five_percent_under_the_null() {
    // min 4, max 12 (looks 6, 8, 12): the exact tests of 30 against 30 runs are too slow for
    // thousands of sequences in a debug build; benches/adaptive.rs runs max 30.
    let d = Design::for_rule(4, 12);
    assert_eq!(d.looks, vec![6, 8, 12]);
    for (quantized, seed) in [(false, 36), (true, 37)] {
        let n = 3000;
        let rate = false_rate(seed, n, 12, quantized, &d.looks, &d.levels);
        assert!(rate <= bound(n), "quantized {quantized}: false verdicts {rate}");
    }
}

#[test]
fn looking_after_every_run_at_five_percent_exceeds_it() {
    // The old rule: a look after every run from 4 to 12, each at 0.05.
    let looks: Vec<usize> = (4..=12).collect();
    let levels = vec![ALPHA; looks.len()];
    let n = 1000;
    let rate = false_rate(36, n, 12, false, &looks, &levels);
    assert!(rate > bound(n), "old rule: false verdicts {rate}");
}
