//! run.json `summary` (DESIGN 5): the per-run figures a report uses, computed once from the run's
//! output when the run is recorded ([`crate::bundle::output_summary::summarize`], the one
//! function that makes them; a report applies it to the output of a run.json without one). The
//! types only: this file reads no output, so that run.json's type ([`super::RunRecord`]) can hold
//! them.
//!
//! Units: bytes for memory, bytes per 1000 loop iterations for rates.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::retention::{Gaps, Parsed, Retention, Unusable};

/// 2^53: the largest integer up to which every integer is exact as a 64-bit float.
pub const EXACT_INTEGERS: u64 = 1 << 53;

/// What a value beyond [`EXACT_INTEGERS`] is called when it is left out.
pub const INEXACT: &str = "a value beyond 2^53 (not exact as a 64-bit float)";

/// Whether a metric value can go into the statistics: finite and within +-2^53, where a 64-bit
/// float holds every integer exactly (memory figures beyond that are not real byte counts).
pub fn usable(v: f64) -> bool {
    v.is_finite() && v.abs() <= EXACT_INTEGERS as f64
}

/// A metric value read by JSON Pointer from a run's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MetricValue {
    /// A JSON number (aggregated per cell).
    Number(f64),
    /// Anything else, shown as text (`true`, a string, `<array of 3>`); not aggregated.
    Text(String),
}

/// Most rows of [`Summary::mappings_grown`] (and of a report's mappings that grew) per pair of
/// breakdowns.
pub const MAPPING_GROWTH_ROWS: usize = 3;

/// One mapping's change between a run's first and last per-mapping breakdown (mappings.json:
/// `/proc/<pid>/smaps` of every process of the run, summed by mapping). Bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MappingGrowth {
    /// `heap`, `stack`, `anonymous`, `file`, `shmem` or `other`.
    pub kind: String,
    /// The file path, `[heap]`, `[anonymous]`, ...
    pub name: String,
    /// Private bytes (`Private_Clean + Private_Dirty`) last minus first.
    pub private_growth: i64,
    /// RSS last minus first.
    pub rss_growth: i64,
    /// Which two breakdowns: `probe baseline -> last loop` or `probe baseline -> closed` (the
    /// probe's own, from its output) or `first -> last` (the runner's mappings.json).
    pub between: String,
    /// Seconds since the run's start of the first and the last breakdown (for the probe's:
    /// since the probe started measuring).
    pub from_seconds: f64,
    /// See `from_seconds`.
    pub to_seconds: f64,
}

/// run.json `summary`: what a report takes from a run's output, computed once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Summary {
    /// The value at each `[report] metrics` JSON Pointer, by pointer (`null`: nothing there).
    pub metrics: BTreeMap<String, Option<MetricValue>>,
    /// The pointers whose value is not aggregated, and what it is (`null`, `a string`, `no value
    /// there`, [`INEXACT`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unusable_metrics: BTreeMap<String, String>,
    /// Elements of the output's `samples` read (0 when it has none).
    #[serde(default)]
    pub samples: usize,
    /// The retention figures (growth, after-close, Theil-Sen rates per measure), when the output
    /// follows the retention schema with usable values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// Which sample fields were `null` where a figure of [`Summary::retention`] is missing.
    #[serde(default, skip_serializing_if = "Gaps::is_empty")]
    pub gaps: Gaps,
    /// Why the output gives no retention figures although it follows the schema, and what it
    /// gave (to count runs by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unusable: Option<Unusable>,
    /// The mappings that changed most between the built-in probe's own breakdowns (its output's
    /// `mappings`), at most [`MAPPING_GROWTH_ROWS`] per pair; empty for other outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mappings_grown: Vec<MappingGrowth>,
}

impl Summary {
    /// Whether it holds the value of every pointer of `pointers` ((name, pointer) pairs): a
    /// summary made for other `[report] metrics` is not used.
    pub fn covers(&self, pointers: &[(String, String)]) -> bool {
        pointers.iter().all(|(_, p)| self.metrics.contains_key(p))
    }

    /// A summary of `metrics` (by pointer: the value and, when it is not aggregated, what it
    /// is), `samples` read, the retention figures `parsed` and the probe's `mappings_grown`.
    pub fn new(
        metrics: BTreeMap<String, (Option<MetricValue>, Option<&'static str>)>,
        samples: usize,
        parsed: Parsed,
        mappings_grown: Vec<MappingGrowth>,
    ) -> Summary {
        let mut s = Summary {
            samples,
            mappings_grown,
            ..Summary::default()
        };
        for (pointer, (value, kind)) in metrics {
            if let Some(kind) = kind {
                s.unusable_metrics.insert(pointer.clone(), kind.to_string());
            }
            s.metrics.insert(pointer, value);
        }
        match parsed {
            Parsed::NotRetention => {}
            Parsed::Unusable(u) => s.unusable = Some(u),
            Parsed::Retention(mut r, _) => {
                s.gaps = std::mem::take(&mut r.gaps);
                s.retention = Some(*r);
            }
        }
        s
    }

    /// Takes the retention figures out as the reader of the output gives them ([`Parsed`],
    /// without plot points), the gaps back in the figures.
    pub fn take_parsed(&mut self) -> Parsed {
        match (self.retention.take(), self.unusable.take()) {
            (Some(mut r), _) => {
                r.gaps = std::mem::take(&mut self.gaps);
                Parsed::Retention(Box::new(r), Vec::new())
            }
            (None, Some(u)) => Parsed::Unusable(u),
            (None, None) => Parsed::NotRetention,
        }
    }
}
