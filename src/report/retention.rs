//! The retention schema (DESIGN 2, 7): run outputs with `samples` in phases `before_file`,
//! `baseline`, `loop`, `closed`, as printed by the built-in `safetensors-retention` probe and by the
//! external Python diagnostic alike.
//!
//! From one output this module keeps only a few numbers ([`Retention`]): **growth** = final `loop`
//! sample minus `baseline`, **after-close** = `closed` minus `baseline`, for private bytes
//! (`private_bytes`), anonymous bytes (`anonymous_bytes`) and RSS (`rss_bytes`), plus the fd delta.

use serde::Serialize;
use serde_json::Value as Json;

/// Private, anonymous and RSS differences between two samples, in bytes (signed: memory can shrink).
/// A figure missing from either sample is `None`, never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Deltas {
    /// Difference of `private_bytes` (smaps_rollup `Private_Clean + Private_Dirty`).
    pub private_bytes: Option<i64>,
    /// Difference of `anonymous_bytes` (smaps_rollup `Anonymous`).
    pub anonymous_bytes: Option<i64>,
    /// Difference of `rss_bytes` (smaps_rollup `Rss`, file-backed pages included).
    pub rss_bytes: Option<i64>,
}

/// The summary numbers of one run's retention output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Retention {
    /// `arguments.mode` (`get_tensor`, `view`, `reuse`, ...), when present.
    pub mode: Option<String>,
    /// `arguments.tensor_elements`, when present.
    pub tensor_elements: Option<u64>,
    /// Loop iterations between the baseline and the final loop sample (`iterations` difference).
    pub loop_iterations: u64,
    /// Growth: final `loop` sample minus `baseline`, bytes.
    pub growth: Deltas,
    /// After-close: `closed` sample minus `baseline`, bytes; all `None` without a `closed` sample.
    pub after_close: Deltas,
    /// Open file descriptors: final `loop` sample's `fd_count` minus `baseline`'s.
    pub fd_delta: Option<i64>,
    /// `last_tensor_alive`, when the output has it.
    pub last_tensor_alive: Option<bool>,
    /// `completed`, when the output has it (`false` when the probe was stopped by SIGTERM).
    pub completed: Option<bool>,
}

impl Retention {
    /// Growth per 1000 loop iterations, bytes; `None` when the loop ran 0 iterations.
    pub fn per_1000(&self, bytes: Option<i64>) -> Option<f64> {
        let b = bytes?;
        (self.loop_iterations > 0).then(|| b as f64 * 1000.0 / self.loop_iterations as f64)
    }
}

/// One sample as kept for plotting: loop iterations and private bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    /// `iterations` of the sample.
    pub iterations: u64,
    /// `private_bytes` of the sample.
    pub private_bytes: u64,
}

/// What [`parse`] found in one output document.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// The document does not follow the retention schema (no `samples` array of objects with
    /// `phase`); only generic metrics apply.
    NotRetention,
    /// Retention schema, but unusable for growth (no `baseline` or no `loop` sample, ...): the reason.
    Unusable(String),
    /// The summary numbers, and the `baseline` and `loop` samples' private bytes for plotting.
    Retention(Retention, Vec<PlotPoint>),
}

struct Sample<'a> {
    phase: &'a str,
    iterations: u64,
    obj: &'a serde_json::Map<String, Json>,
}

impl Sample<'_> {
    fn get(&self, key: &str) -> Option<i64> {
        self.obj.get(key).and_then(Json::as_i64)
    }
}

fn delta(a: &Sample<'_>, b: &Sample<'_>, key: &str) -> Option<i64> {
    Some(b.get(key)? - a.get(key)?)
}

fn deltas(a: &Sample<'_>, b: &Sample<'_>) -> Deltas {
    Deltas {
        private_bytes: delta(a, b, "private_bytes"),
        anonymous_bytes: delta(a, b, "anonymous_bytes"),
        rss_bytes: delta(a, b, "rss_bytes"),
    }
}

/// Reads the retention numbers out of one run's output document.
///
/// The baseline is the last `baseline` sample, the final loop sample the `loop` sample with the most
/// `iterations` (the last one on ties), the closed sample the last `closed` sample.
/// `keep_points` keeps the baseline and loop samples' private bytes for the plot.
pub fn parse(doc: &Json, keep_points: bool) -> Parsed {
    let Some(samples) = doc.get("samples").and_then(Json::as_array) else {
        return Parsed::NotRetention;
    };
    let mut parsed = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let Some(obj) = s.as_object() else {
            return Parsed::Unusable(format!("samples[{i}] is not an object"));
        };
        let Some(phase) = obj.get("phase").and_then(Json::as_str) else {
            if i == 0 {
                return Parsed::NotRetention;
            }
            return Parsed::Unusable(format!("samples[{i}] has no phase"));
        };
        let iterations = obj.get("iterations").and_then(Json::as_u64).unwrap_or(0);
        parsed.push(Sample {
            phase,
            iterations,
            obj,
        });
    }
    if parsed.is_empty() {
        return Parsed::Unusable("no samples".into());
    }
    let Some(baseline) = parsed.iter().rev().find(|s| s.phase == "baseline") else {
        return Parsed::Unusable("no baseline sample".into());
    };
    let Some(last_loop) = parsed
        .iter()
        .filter(|s| s.phase == "loop")
        .max_by_key(|s| s.iterations)
    else {
        return Parsed::Unusable("no loop sample".into());
    };
    let closed = parsed.iter().rev().find(|s| s.phase == "closed");
    let args = doc.get("arguments");
    let retention = Retention {
        mode: args
            .and_then(|a| a.get("mode"))
            .and_then(Json::as_str)
            .map(str::to_string),
        tensor_elements: args.and_then(|a| a.get("tensor_elements")).and_then(Json::as_u64),
        loop_iterations: last_loop.iterations.saturating_sub(baseline.iterations),
        growth: deltas(baseline, last_loop),
        after_close: closed.map(|c| deltas(baseline, c)).unwrap_or_default(),
        fd_delta: delta(baseline, last_loop, "fd_count"),
        last_tensor_alive: doc.get("last_tensor_alive").and_then(Json::as_bool),
        completed: doc.get("completed").and_then(Json::as_bool),
    };
    let points = if keep_points {
        parsed
            .iter()
            .filter(|s| s.phase == "baseline" || s.phase == "loop")
            .filter_map(|s| {
                Some(PlotPoint {
                    iterations: s.iterations,
                    private_bytes: s.obj.get("private_bytes")?.as_u64()?,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    Parsed::Retention(retention, points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(phase: &str, it: u64, private: i64, anon: i64, rss: i64, fd: i64) -> Json {
        serde_json::json!({"phase": phase, "iterations": it, "loop_seconds": 0.1,
            "rss_bytes": rss, "private_bytes": private, "anonymous_bytes": anon, "fd_count": fd})
    }

    #[test]
    fn growth_and_after_close() {
        let doc = serde_json::json!({
            "schema_version": 1,
            "arguments": {"mode": "get_tensor", "tensor_elements": 64},
            "samples": [
                sample("before_file", 0, 100, 50, 1000, 3),
                sample("baseline", 0, 200, 80, 2000, 4),
                sample("loop", 500, 300, 150, 2100, 4),
                sample("loop", 1000, 4296, 4176, 6096, 5),
                sample("closed", 1000, 4000, 4000, 5000, 3),
            ],
            "completed": true,
            "last_tensor_alive": false,
        });
        let Parsed::Retention(r, points) = parse(&doc, true) else {
            panic!()
        };
        assert_eq!(r.loop_iterations, 1000);
        assert_eq!(r.growth.private_bytes, Some(4096));
        assert_eq!(r.growth.anonymous_bytes, Some(4096));
        assert_eq!(r.growth.rss_bytes, Some(4096));
        assert_eq!(r.after_close.private_bytes, Some(3800));
        assert_eq!(r.fd_delta, Some(1));
        assert_eq!(r.per_1000(r.growth.private_bytes), Some(4096.0));
        assert_eq!(r.mode.as_deref(), Some("get_tensor"));
        assert_eq!(r.last_tensor_alive, Some(false));
        assert_eq!(points.len(), 3);
    }

    #[test]
    fn missing_field_stays_none_and_missing_phase_is_unusable() {
        let mut b = sample("baseline", 0, 200, 80, 2000, 4);
        b.as_object_mut().unwrap().remove("anonymous_bytes");
        let doc = serde_json::json!({"samples": [b, sample("loop", 10, 210, 90, 2000, 4)]});
        let Parsed::Retention(r, _) = parse(&doc, false) else {
            panic!()
        };
        assert_eq!(r.growth.anonymous_bytes, None);
        assert_eq!(r.after_close, Deltas::default());
        let doc = serde_json::json!({"samples": [sample("baseline", 0, 1, 1, 1, 1)]});
        assert_eq!(parse(&doc, false), Parsed::Unusable("no loop sample".into()));
        assert_eq!(parse(&serde_json::json!({"x": 1}), false), Parsed::NotRetention);
    }
}
