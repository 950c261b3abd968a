//! The one function that makes run.json `summary` ([`Summary`], DESIGN 5) from a run's output:
//! the `[report] metrics` pointers' values and the retention fields, streamed through the one
//! output reader the output check uses ([`read_output`], same limits), `samples` folded one at a
//! time into an [`Accumulator`]. The recorder calls it when it writes run.json; a report calls it
//! for a run.json without `summary` (and for the plot series, which run.json does not keep).

use std::fs::File;
use std::io::Seek;

use serde_json::Value as Json;

use super::output::{Interest, ListEvent, OutputError, Scalar, read_output, read_output_bytes};
use super::retention::{
    Accumulator, DocFields, Parsed, PlotPoint, SampleField, SampleFields, SampleValue, Unusable, number_kind,
};
use super::summary::{
    EXACT_INTEGERS, INEXACT, MAPPING_GROWTH_ROWS, MappingGrowth, MetricValue, Summary, usable,
};

impl SampleValue for Scalar {
    fn as_str(&self) -> Option<&str> {
        Scalar::as_str(self)
    }
    fn as_integer(&self) -> Option<i128> {
        self.as_i64()
            .map(i128::from)
            .or_else(|| self.as_u64().map(i128::from))
    }
    fn is_null(&self) -> bool {
        matches!(self, Scalar::Null)
    }
    fn as_bool(&self) -> Option<bool> {
        Scalar::as_bool(self)
    }
    fn text(&self) -> String {
        match self {
            Scalar::Null => "null".into(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Number(n) => n.to_string(),
            Scalar::String(s) => Json::String(s.clone()).to_string(),
            Scalar::LongString(n) => format!("<string of {n} bytes>"),
            Scalar::Array(n) => format!("<array of {n}>"),
            Scalar::Object => "<object>".into(),
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            Scalar::Null => "null",
            Scalar::Bool(_) => "a boolean",
            Scalar::Number(n) => number_kind(n),
            Scalar::String(_) | Scalar::LongString(_) => "a string",
            Scalar::Array(_) => "an array",
            Scalar::Object => "an object",
        }
    }
}

/// What a `[report] metric` value that is not aggregated is (`null`, `a string`, `a number beyond
/// 2^53 ...`); `None` for a number that is.
fn metric_kind(v: Option<&Scalar>) -> Option<&'static str> {
    match v {
        None => Some("no value there"),
        Some(Scalar::Number(n)) => match n.as_f64() {
            Some(x) if !usable(x) => Some(INEXACT),
            // An integer beyond 2^53 would round when read as a 64-bit float.
            _ if n.as_i64().is_some_and(|i| i.unsigned_abs() > EXACT_INTEGERS)
                || n.as_u64().is_some_and(|u| u > EXACT_INTEGERS) =>
            {
                Some(INEXACT)
            }
            _ => None,
        },
        Some(other) => Some(other.kind()),
    }
}

fn metric_value(v: &Scalar) -> MetricValue {
    match v {
        Scalar::Number(n) if metric_kind(Some(v)).is_some() => MetricValue::Text(n.to_string()),
        Scalar::Number(n) => n
            .as_f64()
            .map_or_else(|| MetricValue::Text(n.to_string()), MetricValue::Number),
        Scalar::String(s) => MetricValue::Text(s.clone()),
        Scalar::LongString(n) => MetricValue::Text(format!("<string of {n} bytes>")),
        Scalar::Array(n) => MetricValue::Text(format!("<array of {n}>")),
        Scalar::Object => MetricValue::Text("<object>".into()),
        Scalar::Bool(b) => MetricValue::Text(b.to_string()),
        Scalar::Null => MetricValue::Text("null".into()),
    }
}

/// Pointers of the retention schema's document-level values, in [`DocFields`] order.
const DOC_POINTERS: [&str; 6] = [
    "/arguments/mode",
    "/arguments/tensor_elements",
    "/last_tensor_alive",
    "/completed",
    "/mappings/source",
    // What `samples` is when it is not an array.
    "/samples",
];

/// What [`summarize`] asks of every output: built once for a set of `[report] metrics`.
#[derive(Debug)]
pub struct OutputInterest {
    interest: Interest,
    /// `[report] metrics` pointers, each once, in order.
    pointers: Vec<String>,
    /// Slot of each pointer of `pointers`.
    metric_slots: Vec<usize>,
    /// Slot of each of [`DOC_POINTERS`].
    doc_slots: Vec<usize>,
    /// The list of `/samples`.
    samples: usize,
}

impl OutputInterest {
    /// What to keep of an output for the `[report] metrics` `pointers` ((name, JSON Pointer)
    /// pairs) and the retention schema.
    pub fn new(pointers: &[(String, String)]) -> OutputInterest {
        let mut interest = Interest::default();
        let mut unique: Vec<String> = pointers.iter().map(|(_, p)| p.clone()).collect();
        unique.sort();
        unique.dedup();
        // Pointers were checked to start with `/` or be empty when the manifest was read.
        let metric_slots = unique
            .iter()
            .map(|p| interest.value(p).unwrap_or(usize::MAX))
            .collect();
        let doc_slots = DOC_POINTERS
            .iter()
            .map(|p| interest.value(p).unwrap_or(usize::MAX))
            .collect();
        let names = SampleField::ALL.map(SampleField::name);
        let samples = interest.each("/samples", &names).unwrap_or(usize::MAX);
        OutputInterest {
            interest,
            pointers: unique,
            metric_slots,
            doc_slots,
            samples,
        }
    }
}

/// A run's output: read whole (when short), or an open file to be streamed.
#[derive(Debug)]
pub enum OutputSource {
    /// The whole document.
    Whole(Vec<u8>),
    /// The file, at its start.
    File(File),
}

/// Makes the summary of one output document ([`Summary`]): the value at each pointer of
/// `asked`, the retention figures, and with `mappings` the built-in probe's mappings that grew
/// (read in a second pass over the document); also the plot points of the baseline and loop
/// samples, at most about `2 * max_points` (0: none).
///
/// # Errors
/// As [`read_output`] (the output check's reader and limits).
pub fn summarize(
    output: OutputSource,
    asked: &OutputInterest,
    max_points: usize,
    mappings: bool,
) -> Result<(Summary, Vec<PlotPoint>), OutputError> {
    let again = match &output {
        OutputSource::File(f) if mappings => f.try_clone().ok(),
        _ => None,
    };
    let new_acc = || Accumulator::new(max_points);
    let mut acc = new_acc();
    let mut on_list = |event: ListEvent<'_>| match event {
        ListEvent::Start { .. } => acc = new_acc(),
        ListEvent::Element { index, fields, .. } => {
            // fields[0] is the element itself, then the fields in SampleField::ALL's order.
            let sample = matches!(fields.first(), Some(Some(Scalar::Object))).then(|| {
                let mut s = SampleFields::default();
                for (field, value) in SampleField::ALL.iter().zip(&fields[1..]) {
                    s.set(*field, value.as_ref());
                }
                s
            });
            acc.push(index, sample);
        }
    };
    let found = match &output {
        OutputSource::Whole(bytes) => read_output_bytes(bytes, &asked.interest, &mut on_list),
        OutputSource::File(file) => read_output(
            file.try_clone()
                .map_err(|e| OutputError::Invalid(serde_json::Error::io(e)))?,
            &asked.interest,
            &mut on_list,
        ),
    }?;
    let value = |slot: usize| found.values.get(slot).and_then(Option::as_ref);
    let metrics = asked
        .pointers
        .iter()
        .zip(&asked.metric_slots)
        .map(|(p, slot)| {
            let v = value(*slot);
            (p.clone(), (v.map(metric_value), metric_kind(v)))
        })
        .collect();
    let doc = &asked.doc_slots;
    let samples = acc.seen();
    let parsed = if found.lists.get(asked.samples).copied().flatten() == Some(true) {
        acc.finish(DocFields {
            mode: value(doc[0]).and_then(Scalar::as_str).map(str::to_string),
            tensor_elements: value(doc[1]).and_then(Scalar::as_u64),
            last_tensor_alive: value(doc[2]).and_then(Scalar::as_bool),
            completed: value(doc[3]).and_then(Scalar::as_bool),
        })
    } else if let Some(other) = value(doc[5]) {
        // `samples` there but not an array: the retention schema's key with nothing usable in
        // it, said as such (it was taken for an output of another schema and left out silently).
        let kind = other.kind();
        Parsed::Unusable(Unusable {
            reason: format!("samples is {kind}, not an array of samples"),
            gave: format!("{kind} for samples"),
        })
    } else {
        Parsed::NotRetention
    };
    let probe_mappings = value(doc[4]).and_then(Scalar::as_str).is_some();
    let grown = if mappings && probe_mappings && matches!(parsed, Parsed::Retention(..)) {
        match (output, again) {
            (OutputSource::Whole(bytes), _) => probe_mappings_growth(serde_json::from_slice(&bytes)),
            (OutputSource::File(_), Some(mut file)) => match file.rewind() {
                Ok(()) => probe_mappings_growth(serde_json::from_reader(std::io::BufReader::new(file))),
                Err(_) => Vec::new(),
            },
            _ => Vec::new(),
        }
    } else {
        Vec::new()
    };
    let (parsed, points) = match parsed {
        Parsed::Retention(r, points) => (Parsed::Retention(r, Vec::new()), points),
        other => (other, Vec::new()),
    };
    Ok((Summary::new(metrics, samples, parsed, grown), points))
}

/// The built-in probe's breakdowns of mappings (`crate::probe::document::MappingBreakdowns`), as
/// `probe_mappings_growth` reads them: only that object of the document is kept.
#[derive(serde::Deserialize)]
struct ProbeMappings {
    mappings: Option<Breakdowns>,
}

#[derive(serde::Deserialize)]
struct Breakdown {
    t_seconds: f64,
    rows: crate::memory::Mappings,
}

#[derive(serde::Deserialize)]
struct Breakdowns {
    baseline: Option<Breakdown>,
    last_loop: Option<Breakdown>,
    closed: Option<Breakdown>,
}

/// The mappings that changed most between the built-in probe's `baseline` breakdown and its
/// `last_loop` one (growth), then between `baseline` and `closed` (after close); empty when the
/// document could not be read or has no baseline breakdown.
fn probe_mappings_growth(doc: Result<ProbeMappings, serde_json::Error>) -> Vec<MappingGrowth> {
    let Ok(ProbeMappings {
        mappings:
            Some(Breakdowns {
                baseline: Some(first),
                last_loop,
                closed,
            }),
    }) = doc
    else {
        return Vec::new();
    };
    [
        ("probe baseline -> last loop", last_loop),
        ("probe baseline -> closed", closed),
    ]
    .into_iter()
    .filter_map(|(between, last)| Some((between, last?)))
    .flat_map(|(between, last)| {
        last.rows
            .growth(&first.rows)
            .into_iter()
            .filter(|(_, private, rss)| *private != 0 || *rss != 0)
            .take(MAPPING_GROWTH_ROWS)
            .map(|(row, private, rss)| MappingGrowth {
                kind: row.kind.as_str().to_string(),
                name: row.name.clone(),
                private_growth: private,
                rss_growth: rss,
                between: between.to_string(),
                from_seconds: first.t_seconds,
                to_seconds: last.t_seconds,
            })
            .collect::<Vec<_>>()
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::retention::{RATE_ONE_SAMPLE, parse};

    /// The summary of `doc` for `pointers`, written as run.json writes it and read back.
    fn through_run_json(doc: &Json, pointers: &[(String, String)]) -> Summary {
        let bytes = serde_json::to_vec(doc).unwrap();
        let (made, _) = summarize(
            OutputSource::Whole(bytes),
            &OutputInterest::new(pointers),
            0,
            true,
        )
        .unwrap();
        let text = serde_json::to_string(&made).unwrap();
        let read: Summary = serde_json::from_str(&text).unwrap();
        assert_eq!(read, made, "{text}");
        read
    }

    #[test]
    fn a_summary_read_back_from_run_json_gives_the_figures_of_the_output() {
        let sample = |phase: &str, it: u64, private: Json| {
            serde_json::json!({"phase": phase, "iterations": it, "private_bytes": private,
                "anonymous_bytes": 10, "rss_bytes": 100, "pss_anon_bytes": 5, "fd_count": 3})
        };
        let docs = [
            // A rate, a null in the closed sample, pss_anon.
            serde_json::json!({"arguments": {"mode": "view", "tensor_elements": 8}, "load": 1.5,
                "samples": [sample("baseline", 0, 100.into()), sample("loop", 10, 200.into()),
                    sample("loop", 20, 300.into()), sample("closed", 20, Json::Null)],
                "completed": false, "last_tensor_alive": true}),
            // One loop sample (no rate, by name), a null growth.
            serde_json::json!({"samples": [sample("baseline", 0, 1.into()), sample("loop", 5, Json::Null)]}),
            // Unusable, and not in the schema.
            serde_json::json!({"samples": [sample("baseline", 0, "x".into())], "load": "text"}),
            serde_json::json!({"samples": 3}),
            serde_json::json!({"load": 18_446_744_073_709_551_615u64}),
        ];
        let pointers = [
            ("load".to_string(), "/load".to_string()),
            ("none".into(), "/none".into()),
        ];
        for doc in &docs {
            let mut read = through_run_json(doc, &pointers);
            assert!(read.covers(&pointers));
            assert!(read.metrics["/none"].is_none());
            assert_eq!(read.unusable_metrics["/none"], "no value there");
            let parsed = read.take_parsed();
            match parse(doc, false) {
                // `parse` takes a `samples` that is not an array for another schema.
                Parsed::NotRetention if doc["samples"].is_number() => {
                    assert!(matches!(parsed, Parsed::Unusable(_)), "{parsed:?}")
                }
                expected => assert_eq!(parsed, expected, "{doc}"),
            }
        }
        let Parsed::Retention(r, _) = through_run_json(&docs[1], &pointers).take_parsed() else {
            panic!()
        };
        assert_eq!(r.rate_unusable, Some(RATE_ONE_SAMPLE));
        assert_eq!(r.gaps.growth_null, ["private_bytes"]);
        let inexact = through_run_json(&docs[4], &pointers);
        assert_eq!(inexact.unusable_metrics["/load"], INEXACT);
        // A summary made for other pointers does not cover these.
        assert!(!inexact.covers(&[("x".into(), "/x".into())]));
    }
}
