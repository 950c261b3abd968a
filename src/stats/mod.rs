//! The statistics of a report (DESIGN 9), pure functions without I/O: Theil-Sen slopes
//! ([`theil_sen`](mod@theil_sen)), the Hodges-Lehmann shift of two samples with its exact distribution-free
//! interval and an exact permutation p-value that is valid with ties ([`shift`](mod@shift)), Holm's correction
//! ([`holm`](mod@holm)) and the verdict words ([`verdict`]).
//!
//! The run is the unit of analysis: every sample here is one number per run. Checked against
//! scipy (`theilslopes`, `permutation_test`, `mannwhitneyu`) and R's `wilcox.test(conf.int = TRUE)`
//! algorithm by the fixtures in tests/fixtures/stats/ (made by make_fixtures.py there).

pub mod holm;
pub mod sequential;
pub mod shift;
pub mod theil_sen;
pub mod verdict;

pub use holm::holm;
pub use shift::{Shift, shift};
pub use theil_sen::theil_sen;
pub use verdict::{CompareVerdict, Verdict};

/// The level of every test and the complement of every interval's confidence (0.95).
pub const ALPHA: f64 = 0.05;

/// The median of `v` (mean of the two middle values for an even count), `None` when empty.
/// Reorders `v` (it is not left sorted).
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    // The middle of the sorted order by selection, without sorting the rest (the same values:
    // `total_cmp` is a total order).
    let n = v.len();
    let (lower, &mut upper, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    Some(if n % 2 == 1 {
        upper
    } else {
        let below = lower.iter().copied().max_by(f64::total_cmp).expect("n >= 2");
        below / 2.0 + upper / 2.0
    })
}

/// C(n, k) as f64 (exact up to 2^53, then rounded).
pub fn binomial(n: u64, k: u64) -> f64 {
    let k = k.min(n.saturating_sub(k));
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// The smallest two-sided p-value a rank test of `m` runs against `n` runs can give (no ties):
/// `2 / C(m + n, m)`, at most 1; 1 when either side is empty.
pub fn smallest_p(m: usize, n: usize) -> f64 {
    if m == 0 || n == 0 {
        return 1.0;
    }
    (2.0 / binomial((m + n) as u64, m as u64)).min(1.0)
}

/// The fewest repetitions per side (the same on both) for which [`smallest_p`] is below `level`.
pub fn repetitions_needed(level: f64) -> usize {
    (1..=10_000).find(|&r| smallest_p(r, r) < level).unwrap_or(10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_p_and_needed_repetitions() {
        assert!((smallest_p(2, 2) - 1.0 / 3.0).abs() < 1e-12);
        assert!((smallest_p(3, 3) - 0.1).abs() < 1e-12);
        assert!((smallest_p(4, 4) - 2.0 / 70.0).abs() < 1e-12);
        assert_eq!(smallest_p(0, 5), 1.0);
        assert_eq!(smallest_p(1, 1), 1.0);
        assert_eq!(repetitions_needed(0.05), 4);
        assert_eq!(repetitions_needed(0.05 / 3.0), 5);
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }
}
