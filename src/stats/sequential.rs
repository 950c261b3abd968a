//! The sequential design of adaptive repetitions (DESIGN 9): the looks (runs per cell at which the
//! rule judges) and the level spent at each. A cell's verdict at a look uses that look's level, so
//! that over all looks the chance of a false `above control` / `below control` stays at or under
//! [`super::ALPHA`].
//!
//! # The design ([`Design::for_rule`])
//!
//! - **Looks** are spaced geometrically from `min` to `max` runs per cell, ratio about 1.5, the
//!   last exactly at `max` (`min = 4, max = 30`: 4, 6, 9, 13, 20, 30).
//! - **Alpha spending**: the cumulative level spent by the look at `n` runs is
//!   `0.05 * (n / max)^3` (a power-family spending function, O'Brien-Fleming-like: little early,
//!   most at `max`); a look gets the increment. A look whose increment is not above the smallest
//!   two-sided p-value a rank test of `n` against `n` runs can give
//!   ([`super::smallest_p`]: 0.029 for 4 against 4) could never decide: it is no look, and its
//!   level is carried to the next one. The last look gets all that remains, so the levels sum to
//!   exactly 0.05 (`min = 4, max = 30`: 0.00135 at 9 runs, 0.0027 at 13, 0.0107 at 20, 0.0352 at
//!   30).
//! - **Validity**: a false verdict over the whole sequence needs a false verdict at some look, so
//!   by Bonferroni's inequality its chance is at most the sum of the looks' levels (0.05), for
//!   any dependence between looks and with ties (each look's exact permutation test holds its
//!   level with tied, page-quantized data). It is conservative against a design that uses the
//!   correlation between looks (Lan-DeMets), which needs the joint normal distribution that rank
//!   tests of a few runs with ties do not have.
//! - **Power**: shown by `cargo bench --bench adaptive` (docs/report.md): at `max` the last look's
//!   level (0.035) keeps most of a fixed design's power, while a large effect is decided at 9 or
//!   13 runs.

use serde::{Deserialize, Serialize};

/// The exponent of the spending function `alpha * t^RHO` (t = runs / max).
pub const RHO: f64 = 3.0;

/// The ratio between successive looks (before rounding).
pub const LOOK_RATIO: f64 = 1.5;

/// The name [`Design::for_rule`] gives its designs (bundle.json `adaptive.design.name`).
pub const NAME: &str = "group-sequential, Bonferroni over looks, alpha spent as t^3";

/// Looks and the level spent at each (the sum of `levels` is at most [`super::ALPHA`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Design {
    /// What the design is (for the report's adaptive line).
    #[serde(default)]
    pub name: String,
    /// Runs per cell at each look, increasing.
    pub looks: Vec<usize>,
    /// The level spent at each look (same length as `looks`).
    pub levels: Vec<f64>,
}

impl Design {
    /// The design of an adaptive rule from `min` to `max` runs per cell at family level
    /// [`super::ALPHA`] (see the module docs). `max` below `min` is taken as `min`; `min` 0 as 1.
    pub fn for_rule(min: usize, max: usize) -> Design {
        Self::with_spending(min, max, super::ALPHA, RHO)
    }

    /// [`Design::for_rule`] at family level `alpha` with spending `alpha * t^rho`.
    pub fn with_spending(min: usize, max: usize, alpha: f64, rho: f64) -> Design {
        let min = min.max(1);
        let max = max.max(min);
        let candidates = geometric_looks(min, max);
        let spent = |n: usize| alpha * (n as f64 / max as f64).powf(rho);
        let (mut looks, mut levels) = (Vec::new(), Vec::new());
        let mut given = 0.0;
        for &n in &candidates {
            let level = if n == max { alpha - given } else { spent(n) - given };
            if n == max || level > super::smallest_p(n, n) {
                looks.push(n);
                levels.push(level.max(0.0));
                given += level;
            }
        }
        Design {
            name: NAME.to_string(),
            looks,
            levels,
        }
    }

    /// The level of the look a cell with `runs` planned runs is at: the last look at or below
    /// `runs` (the first look's for fewer runs).
    pub fn level_at(&self, runs: usize) -> f64 {
        let i = self.looks.iter().rposition(|&l| l <= runs).unwrap_or(0);
        self.levels.get(i).copied().unwrap_or(super::ALPHA)
    }

    /// Whether `runs` is a look (the rule may decide a cell only there).
    pub fn is_look(&self, runs: usize) -> bool {
        self.looks.contains(&runs)
    }

    /// The first look after `runs` (`None`: none is left).
    pub fn next_look(&self, runs: usize) -> Option<usize> {
        self.looks.iter().copied().find(|&l| l > runs)
    }

    /// `9 (0.00135), 13 (0.0027), ...`: each look with its level.
    pub fn looks_text(&self) -> String {
        self.looks
            .iter()
            .zip(&self.levels)
            .map(|(n, l)| format!("{n} ({})", crate::stats::sequential::level_text(*l)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A level with three significant digits (`0.00135`).
pub fn level_text(level: f64) -> String {
    if level <= 0.0 {
        return "0".into();
    }
    let digits = (2 - level.log10().floor() as i32).max(0) as usize;
    format!("{level:.digits$}")
}

/// `min`, then `min * r^i` rounded, the last `max` (increasing, at least one run apart), with `r`
/// near [`LOOK_RATIO`].
fn geometric_looks(min: usize, max: usize) -> Vec<usize> {
    if min >= max {
        return vec![max];
    }
    let steps = ((max as f64 / min as f64).ln() / LOOK_RATIO.ln())
        .round()
        .max(1.0);
    let r = (max as f64 / min as f64).powf(1.0 / steps);
    let mut looks = vec![min];
    for i in 1..=steps as i32 {
        let n = ((min as f64 * r.powi(i)).round() as usize).min(max);
        let last = *looks.last().expect("non-empty");
        looks.push(n.max(last + 1).min(max));
    }
    if *looks.last().expect("non-empty") != max {
        looks.push(max);
    }
    looks.dedup();
    looks
}

#[cfg(test)]
#[path = "sequential_tests.rs"]
mod tests;
