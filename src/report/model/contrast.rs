//! What a contrast is (DESIGN 9): "does this factor change the retention?" for one matrix axis
//! at fixed values of the others; `contrasts` computes them.

use std::collections::BTreeMap;

use serde::Serialize;

/// What a contrast allows (DESIGN 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ContrastVerdict {
    /// The interval of the difference of shifts excludes 0.
    #[serde(rename = "changes retention")]
    ChangesRetention,
    /// The interval contains 0.
    #[serde(rename = "no detectable change")]
    NoDetectableChange,
    /// A side's runs cannot reach the interval's confidence.
    #[serde(rename = "too few runs")]
    TooFewRuns,
}

impl ContrastVerdict {
    /// The verdict's words, as in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            ContrastVerdict::ChangesRetention => "changes retention",
            ContrastVerdict::NoDetectableChange => "no detectable change",
            ContrastVerdict::TooFewRuns => "too few runs",
        }
    }
}

/// One contrast (JSON `contrasts[]`): level `b` of `axis` against level `a` at the `fixed`
/// values of the other keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Contrast {
    /// The matrix key whose levels are compared.
    pub axis: String,
    /// The axis's first level (manifest order): the reference.
    pub level_a: String,
    /// The level compared with it.
    pub level_b: String,
    /// The other matrix values both compared cells share (the control's keys included), key to
    /// the value's text.
    pub fixed: BTreeMap<String, String>,
    /// The compared cell at `level_a` (`key=value ...`) and its control.
    pub cell_a: String,
    /// The control cell of `cell_a`.
    pub control_a: String,
    /// The compared cell at `level_b`.
    pub cell_b: String,
    /// The control cell of `cell_b`.
    pub control_b: String,
    /// The metric (a [`crate::report::metrics::Metric`] key, e.g. `anonymous-growth-bytes`).
    pub metric: String,
    /// Runs with the metric: cell at `a`, its control, cell at `b`, its control.
    pub runs: [usize; 4],
    /// `shift(b) - shift(a)`, bytes (the metric's unit); `None` when a side has no runs.
    pub estimate: Option<f64>,
    /// Lower end of the interval: `low_b - high_a`.
    pub ci_low: Option<f64>,
    /// Upper end: `high_b - low_a`.
    pub ci_high: Option<f64>,
    /// The interval's confidence, at least `1 - a` (Bonferroni over the two shifts' intervals).
    pub confidence: Option<f64>,
    /// The verdict.
    pub verdict: ContrastVerdict,
}

impl Contrast {
    /// `axis: b vs a`.
    pub fn title(&self) -> String {
        format!("{}: {} vs {}", self.axis, self.level_b, self.level_a)
    }

    /// The fixed values as `key=value` pairs, space separated (`-` for none).
    pub fn fixed_text(&self) -> String {
        if self.fixed.is_empty() {
            return "-".into();
        }
        self.fixed
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}
