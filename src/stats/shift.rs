//! Two samples `x` (a cell's runs) and `y` (its control's runs): the Hodges-Lehmann shift (median
//! of all pairwise differences `x_i - y_j`), its distribution-free confidence interval from the
//! Mann-Whitney distribution as R's `wilcox.test(x, y, conf.int = TRUE, exact = TRUE)` computes it
//! (order statistics `qu` and `m n + 1 - qu` of the differences, `qu = qwilcox(alpha / 2, m, n)`,
//! at least 1), and a two-sided permutation p-value of the Mann-Whitney statistic that is exact with
//! ties (the null distribution of the sum of mid-ranks over every way to split the pooled runs,
//! counted by dynamic programming over the groups of tied values; `2 min(P(T <= t), P(T >= t))`,
//! at most 1, as `scipy.stats.permutation_test` gives it).
//!
//! The m n differences are never stored: their order statistics are found by bisection over the
//! f64 values with a linear count, so memory is O(m + n). Exact distributions are counted up to
//! [`EXACT_MAX_RUNS`] runs in both samples together; beyond that, the normal approximation with
//! tie and continuity corrections gives the p-value and the interval's ranks (`exact = false`).

use serde::Serialize;

/// Most runs in both samples together for which the null distribution is counted exactly.
pub const EXACT_MAX_RUNS: usize = 60;

/// The comparison of two samples (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Shift {
    /// Runs in `x` (the cell, or bundle B).
    pub n_x: usize,
    /// Runs in `y` (the control, or bundle A).
    pub n_y: usize,
    /// Hodges-Lehmann shift: median of `x_i - y_j`.
    pub shift: f64,
    /// Lower end of the interval.
    pub ci_low: f64,
    /// Upper end of the interval.
    pub ci_high: f64,
    /// Confidence of the interval: 0.95, or less when the sample sizes cannot reach it (R's rule:
    /// the achieved level, to 2 significant digits, when its alpha exceeds 1.5 times 0.05).
    pub confidence: f64,
    /// Two-sided p-value (permutation, exact with ties when `exact`).
    pub p: f64,
    /// Whether the p-value and the interval's ranks come from the exact distribution.
    pub exact: bool,
}

/// Compares `x` with `y` at the level [`super::ALPHA`] (a 95% interval); `None` when either is
/// empty. Values must be finite.
pub fn shift(x: &[f64], y: &[f64]) -> Option<Shift> {
    shift_at(x, y, super::ALPHA)
}

/// [`shift`] with an interval of confidence `1 - alpha` (as R's `wilcox.test(conf.level = 1 -
/// alpha)`), for intervals combined by Bonferroni's inequality.
pub fn shift_at(x: &[f64], y: &[f64], alpha: f64) -> Option<Shift> {
    if x.is_empty() || y.is_empty() {
        return None;
    }
    let mut xs = x.to_vec();
    let mut ys = y.to_vec();
    xs.sort_by(f64::total_cmp);
    ys.sort_by(f64::total_cmp);
    let (m, n) = (xs.len(), ys.len());
    let mn = m * n;
    let d = |k: usize| kth_difference(&xs, &ys, k);
    let hl = if mn % 2 == 1 {
        d(mn.div_ceil(2))
    } else {
        d(mn / 2) / 2.0 + d(mn / 2 + 1) / 2.0
    };
    let exact = m + n <= EXACT_MAX_RUNS;
    let (qu, achieved_alpha) = if exact {
        let null = null_u(m, n);
        let qu = null.cdf_index(alpha / 2.0).max(1);
        (qu, 2.0 * null.cdf(qu - 1))
    } else {
        let z = normal_quantile_two_sided(alpha);
        let k = (mn as f64 / 2.0 - z * (mn as f64 * (m + n + 1) as f64 / 12.0).sqrt()).floor();
        ((k.max(1.0) as usize).min(mn), alpha)
    };
    let confidence = if achieved_alpha - alpha > alpha / 2.0 {
        let c = 1.0 - achieved_alpha;
        if c <= 0.0 { 0.0 } else { signif2(c) }
    } else {
        1.0 - alpha
    };
    let p = if exact {
        exact_p(&xs, &ys)
    } else {
        normal_p(&xs, &ys)
    };
    Some(Shift {
        n_x: m,
        n_y: n,
        shift: hl + 0.0,
        ci_low: d(qu) + 0.0,
        ci_high: d(mn + 1 - qu) + 0.0,
        confidence,
        p,
        exact,
    })
}

/// The `z` whose two-sided normal tail is `alpha` (`P(|Z| > z) = alpha`): 1.959963984540054 for
/// 0.05 exactly, else found by bisection on the complementary error function (to its 1.2e-7).
pub fn normal_quantile_two_sided(alpha: f64) -> f64 {
    if alpha == super::ALPHA {
        return 1.959_963_984_540_054;
    }
    let (mut lo, mut hi) = (0.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if erfc(mid / std::f64::consts::SQRT_2) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

fn signif2(x: f64) -> f64 {
    let e = x.abs().log10().floor() as i32 - 1;
    let f = 10f64.powi(-e);
    (x * f).round() / f
}

/// f64 to a u64 key in the same order (`total_cmp`).
fn key(f: f64) -> u64 {
    let b = f.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

fn unkey(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

/// Number of pairs with `x_i - y_j <= t` (both sorted ascending): O(m + n).
fn count_at_most(xs: &[f64], ys: &[f64], t: f64) -> usize {
    let mut j = 0;
    let mut count = 0;
    for &x in xs {
        while j < ys.len() && x - ys[j] > t {
            j += 1;
        }
        count += ys.len() - j;
    }
    count
}

/// The k-th smallest (1-based) of the differences `x_i - y_j`, as f64 subtraction gives them.
fn kth_difference(xs: &[f64], ys: &[f64], k: usize) -> f64 {
    let mut lo = key(xs[0] - ys[ys.len() - 1]);
    let mut hi = key(xs[xs.len() - 1] - ys[0]);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if count_at_most(xs, ys, unkey(mid)) >= k {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    unkey(lo)
}

/// A null distribution of a doubled rank sum: `counts[s]` ways to reach `s`, out of `total`.
struct Null {
    counts: Vec<f64>,
    total: f64,
    /// Doubled rank sum of the smallest possible choice (the distribution's index 0 for U).
    offset: usize,
}

impl Null {
    /// P(U <= u) for the no-ties U (index u = doubled sum / 2 - offset).
    fn cdf(&self, u: usize) -> f64 {
        let mut acc = 0.0;
        for (s, c) in self.counts.iter().enumerate() {
            if s % 2 == 0 && s / 2 >= self.offset && s / 2 - self.offset <= u {
                acc += c;
            }
        }
        acc / self.total
    }

    /// R's qwilcox(p): the smallest u with P(U <= u) >= p.
    fn cdf_index(&self, p: f64) -> usize {
        let mut acc = 0.0;
        let mut u = 0;
        for (s, c) in self.counts.iter().enumerate() {
            if s % 2 != 0 || s / 2 < self.offset {
                continue;
            }
            acc += c;
            u = s / 2 - self.offset;
            // A relative tolerance as R's qwilcox uses (1 - 64 eps).
            if acc / self.total >= p * (1.0 - 64.0 * f64::EPSILON) {
                return u;
            }
        }
        u
    }
}

/// Ways to choose `m` of the pooled values (groups of tied values: size, doubled mid-rank) by the
/// doubled sum of their ranks.
fn rank_sum_counts(groups: &[(usize, usize)], m: usize) -> Vec<f64> {
    let max_sum: usize = groups.iter().map(|(t, r)| t * r).sum();
    let width = max_sum + 1;
    let mut dp = vec![0.0f64; (m + 1) * width];
    dp[0] = 1.0;
    let mut taken_max = 0usize;
    for &(t, r) in groups {
        let mut next = vec![0.0f64; (m + 1) * width];
        for j in 0..=m.min(taken_max) {
            for s in 0..width {
                let v = dp[j * width + s];
                if v == 0.0 {
                    continue;
                }
                for c in 0..=t.min(m - j) {
                    next[(j + c) * width + s + c * r] += v * super::binomial(t as u64, c as u64);
                }
            }
        }
        taken_max += t;
        dp = next;
    }
    dp[m * width..].to_vec()
}

/// The no-ties null distribution of U for `m` against `n`.
fn null_u(m: usize, n: usize) -> Null {
    let groups: Vec<(usize, usize)> = (1..=m + n).map(|i| (1, 2 * i)).collect();
    Null {
        counts: rank_sum_counts(&groups, m),
        total: super::binomial((m + n) as u64, m as u64),
        offset: m * (m + 1) / 2,
    }
}

/// Groups of tied values of the pooled samples with their doubled mid-ranks, and the doubled rank
/// sum of `xs`.
fn ranks(xs: &[f64], ys: &[f64]) -> (Vec<(usize, usize)>, usize) {
    let mut pooled: Vec<(f64, bool)> = xs
        .iter()
        .map(|&v| (v, true))
        .chain(ys.iter().map(|&v| (v, false)))
        .collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut groups = Vec::new();
    let mut t_obs = 0;
    let mut i = 0;
    while i < pooled.len() {
        let mut j = i;
        while j < pooled.len() && pooled[j].0 == pooled[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j: doubled mid-rank i + 1 + j.
        let r2 = i + 1 + j;
        let in_x = pooled[i..j].iter().filter(|p| p.1).count();
        groups.push((j - i, r2));
        t_obs += in_x * r2;
        i = j;
    }
    (groups, t_obs)
}

/// The exact two-sided permutation p-value of the rank sum with mid-ranks.
fn exact_p(xs: &[f64], ys: &[f64]) -> f64 {
    let (groups, t_obs) = ranks(xs, ys);
    let counts = rank_sum_counts(&groups, xs.len());
    let total: f64 = counts.iter().sum();
    let le: f64 = counts[..=t_obs.min(counts.len() - 1)].iter().sum();
    let ge: f64 = counts[t_obs.min(counts.len())..].iter().sum();
    (2.0 * (le / total).min(ge / total)).min(1.0)
}

/// The two-sided p-value from the normal approximation of U, with tie and continuity corrections.
fn normal_p(xs: &[f64], ys: &[f64]) -> f64 {
    let (groups, t_obs) = ranks(xs, ys);
    let (m, n) = (xs.len() as f64, ys.len() as f64);
    let big_n = m + n;
    let u = t_obs as f64 / 2.0 - m * (m + 1.0) / 2.0;
    let ties: f64 = groups.iter().map(|&(t, _)| (t as f64).powi(3) - t as f64).sum();
    let var = m * n / 12.0 * ((big_n + 1.0) - ties / (big_n * (big_n - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = ((u - m * n / 2.0).abs() - 0.5).max(0.0) / var.sqrt();
    erfc(z / std::f64::consts::SQRT_2).min(1.0)
}

/// The complementary error function (Numerical Recipes' erfcc: relative error below 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_cases() {
        assert!(shift(&[], &[1.0]).is_none());
        let s = shift(&[1.0], &[0.0]).unwrap();
        assert_eq!((s.shift, s.ci_low, s.ci_high, s.p), (1.0, 1.0, 1.0, 1.0));
        let same = shift(&[5.0; 6], &[5.0; 6]).unwrap();
        assert_eq!(
            (same.shift, same.ci_low, same.ci_high, same.p),
            (0.0, 0.0, 0.0, 1.0)
        );
        // 5 vs 5 completely apart: p = 2 / C(10, 5).
        let apart = shift(&[10.0, 11.0, 12.0, 13.0, 14.0], &[0.0, 1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!((apart.p - 2.0 / 252.0).abs() < 1e-12, "{apart:?}");
        assert_eq!(apart.shift, 10.0);
        assert!(apart.ci_low > 0.0);
        assert!(key(-0.0) < key(0.0));
        assert_eq!(unkey(key(-3.5)), -3.5);
        assert!((erfc(0.0) - 1.0).abs() < 1e-7);
    }
}
