//! The sequential design of adaptive repetitions (DESIGN 9): the looks (runs per cell at which the
//! rule judges) and the level spent at each. A cell's verdict at a look uses that look's level, so
//! that over all looks the chance of a false `above control` / `below control` stays at or under
//! [`super::ALPHA`].

use serde::{Deserialize, Serialize};

/// Looks and the level spent at each (the sum of `levels` is at most [`super::ALPHA`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Design {
    /// Runs per cell at each look, increasing.
    pub looks: Vec<usize>,
    /// The level spent at each look (same length as `looks`).
    pub levels: Vec<f64>,
}

impl Design {
    /// The level of the look a cell with `runs` planned runs is at: the last look at or below
    /// `runs` (the first look's for fewer runs).
    pub fn level_at(&self, runs: usize) -> f64 {
        let i = self.looks.iter().rposition(|&l| l <= runs).unwrap_or(0);
        self.levels.get(i).copied().unwrap_or(super::ALPHA)
    }
}
