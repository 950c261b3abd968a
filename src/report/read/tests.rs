//! Tests of reading a run's output: the quick reader against the general one, metric pointers,
//! plot series thinning.

use super::*;
use proptest::prelude::*;

#[test]
fn decimation_keeps_ends_and_count() {
    let v: Vec<u32> = (0..10_001).collect();
    let d = decimate(v, 1000);
    assert_eq!(d.len(), 1000);
    assert_eq!((d[0], d[999]), (0, 10_000));
    assert!(d.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(decimate(vec![1, 2, 3], 1000), vec![1, 2, 3]);
}

#[test]
fn metric_pointers_from_manifest() {
    let text = "format = 1\n[report]\nmetrics = { b = \"/x/0\", a = \"/y\" }\n";
    assert_eq!(
        metric_pointers(text).unwrap(),
        vec![("a".into(), "/y".into()), ("b".into(), "/x/0".into())]
    );
    assert!(metric_pointers("[report]\nmetrics = { a = 3 }\n").is_err());
    assert!(metric_pointers("format = 1\n").unwrap().is_empty());
}

/// The metric pointers the quick reader is tested with: top-level ones, one into a key a
/// document may have, none.
fn pointer_sets() -> Vec<Vec<(String, String)>> {
    let p = |n: &str, v: &str| (n.to_string(), v.to_string());
    vec![
        vec![],
        vec![
            p("preparation", "/preparation_seconds"),
            p("completed", "/completed"),
            p("absent", "/no/such/key"),
        ],
        vec![p("x", "/x"), p("y", "/x"), p("t", "/last_tensor_alive")],
    ]
}

/// `read_values` of `doc` the quick way when it takes it, and by the general reader alone,
/// as text; and whether the quick way took it.
fn both_ways(doc: &str, pointers: &[(String, String)], keep: bool) -> (String, String, bool) {
    let quick = OutputInterest::new(pointers);
    assert!(
        quick.quick.is_some(),
        "{pointers:?} are all of a kind the quick reader takes"
    );
    let general = OutputInterest {
        quick: None,
        ..OutputInterest::new(pointers)
    };
    let whole = || OutputSource::Whole(doc.as_bytes().to_vec());
    let took = super::super::quick::read(
        doc.as_bytes(),
        &mut Accumulator::new(0),
        quick.quick.as_ref().unwrap(),
    )
    .is_some();
    (
        format!("{:?}", read_values(whole(), pointers, &quick, keep)),
        format!("{:?}", read_values(whole(), pointers, &general, keep)),
        took,
    )
}

const PLAIN: &str = r#"{"schema_version":1,"arguments":{"mode":"get_tensor","tensor_elements":16,"iterations":2000},
        "preparation_seconds":0.0135,"samples":[
        {"phase":"before_file","iterations":0,"rss_bytes":5900000,"private_bytes":1900064,"anonymous_bytes":1400000,"fd_count":3},
        {"phase":"baseline","iterations":0,"loop_seconds":0.0,"rss_bytes":6000000,"private_bytes":2000064,"anonymous_bytes":1500000,"fd_count":4},
        {"phase":"loop","iterations":500,"rss_bytes":6004096,"private_bytes":2004160,"anonymous_bytes":1504096,"fd_count":4},
        {"phase":"loop","iterations":1000,"rss_bytes":6012288,"private_bytes":2012352,"anonymous_bytes":1512288,"fd_count":4},
        {"phase":"closed","iterations":1000,"rss_bytes":6000000,"private_bytes":2000064,"anonymous_bytes":1500000,"fd_count":3}],
        "mappings":{"source":"smaps"},"completed":true,"last_tensor_alive":false}"#;

#[test]
fn the_quick_reader_takes_a_plain_output_and_reads_it_as_the_general_one() {
    for pointers in pointer_sets() {
        for keep in [false, true] {
            let (quick, general, took) = both_ways(PLAIN, &pointers, keep);
            assert!(took, "a plain output is taken the quick way");
            assert_eq!(quick, general);
            assert!(quick.contains("Retention"), "{quick}");
        }
    }
}

/// `doc` with the keys the readers look for written with an escape (`"\u0073amples":`): the
/// same document to a JSON reader.
fn keys_escaped(doc: &str) -> String {
    let mut doc = doc.to_string();
    for key in SampleField::ALL.map(SampleField::name).into_iter().chain([
        "samples",
        "arguments",
        "mode",
        "completed",
        "mappings",
        "source",
        "x",
    ]) {
        let escaped = format!("\"\\u{:04x}{}\":", key.as_bytes()[0], &key[1..]);
        doc = doc.replace(&format!("\"{key}\":"), &escaped);
    }
    doc
}

#[test]
fn keys_written_with_escapes_are_read_as_the_keys_they_are() {
    let doc = keys_escaped(PLAIN);
    assert!(doc.contains(r#""\u0073amples":"#), "{doc}");
    for pointers in pointer_sets() {
        let (quick, general, took) = both_ways(&doc, &pointers, false);
        assert!(took, "taken the quick way");
        assert_eq!(quick, general);
        assert_eq!(
            quick,
            both_ways(PLAIN, &pointers, false).0,
            "as if written plainly"
        );
    }
}

#[test]
fn the_quick_reader_leaves_to_the_general_one_what_it_does_not_take() {
    let pointers = &pointer_sets()[1];
    for doc in [
        // A key twice, at the top and in a sample.
        PLAIN.replace(r#""completed":true"#, r#""completed":true,"completed":false"#),
        PLAIN.replace(
            r#""phase":"loop","iterations":500"#,
            r#""phase":"loop","phase":"closed","iterations":500"#,
        ),
        // A key a longer pointer goes into; samples not an array; a sample not an object.
        PLAIN.replace(r#""schema_version":1"#, r#""no":{"such":{"key":7}}"#),
        PLAIN.replace(r#""samples":["#, r#""samples":7,"s":["#),
        PLAIN.replace(r#""samples":["#, r#""samples":[3,"#),
        // Not a document at all.
        PLAIN[..200].to_string(),
        "[1,2]".to_string(),
    ] {
        let (quick, general, took) = both_ways(&doc, pointers, false);
        assert!(!took, "{doc}");
        assert_eq!(quick, general);
    }
    // Pointers it does not take at all: the whole document, into the schema's keys.
    for pointer in ["", "/samples/0/phase", "/arguments/mode", "/completed/x"] {
        let pointers = vec![("p".to_string(), pointer.to_string())];
        assert!(
            super::super::quick::Pointers::new(&pointers).is_none(),
            "{pointer}"
        );
    }
}

/// JSON text of a value: scalars of every kind (strings with escapes and lone surrogates,
/// integers at the 64-bit edges, fractions, floats that are whole), arrays and objects,
/// `depth` deep.
fn any_value(depth: u32) -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|i| i.to_string()),
        (0u64..10_000).prop_map(|i| i.to_string()),
        Just("18446744073709551616".to_string()),
        Just("1.5".to_string()),
        Just("4096.0".to_string()),
        Just("1e3".to_string()),
        Just(r#""loop""#.to_string()),
        Just(r#""baseline""#.to_string()),
        Just(r#""closed""#.to_string()),
        Just(r#""get_tensor""#.to_string()),
        Just(r#""caf\u00e9""#.to_string()),
        Just(r#""\ud800x""#.to_string()),
        Just(r#""\ud83d\ude00""#.to_string()),
    ];
    scalar.prop_recursive(depth, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key(), inner), 0..4).prop_map(|kv| object(&kv)),
        ]
    })
}

/// An object key: a sample field, or another key a document may have.
fn key() -> impl Strategy<Value = String> {
    let others = [
        "loop_seconds",
        "mode",
        "tensor_elements",
        "source",
        "such",
        "key",
        "x",
        "other",
    ];
    let keys: Vec<&str> = SampleField::ALL
        .map(SampleField::name)
        .into_iter()
        .chain(others)
        .collect();
    prop::sample::select(keys).prop_map(str::to_string)
}

fn object(kv: &[(String, String)]) -> String {
    let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", fields.join(","))
}

/// A sample: mostly an object of the sample fields (each at most once, in any order, now and
/// then one twice) with likely values, sometimes anything.
fn any_sample() -> impl Strategy<Value = String> {
    let phase = prop::sample::select(vec![
        r#""baseline""#,
        r#""loop""#,
        r#""closed""#,
        r#""before_file""#,
        "null",
        "3",
    ])
    .prop_map(str::to_string);
    sample_in(phase.boxed())
}

/// [`any_sample`] with its phase from `phase`.
fn sample_in(phase: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    let count = || {
        prop_oneof![
            20 => (0u64..100_000_000).prop_map(|i| i.to_string()),
            1 => Just("null".to_string()),
            1 => any_value(1),
        ]
    };
    let iterations = prop_oneof![
        6 => (0u64..5000).prop_map(|i| (i * 100).to_string()),
        1 => any_value(0),
    ];
    let fields = (
        (phase, iterations, count(), count(), count(), count()),
        prop::collection::vec(prop::bool::weighted(0.95), 6),
        prop::option::weighted(0.2, (key(), any_value(1))),
    )
        .prop_map(|((p, i, a, b, c, d), present, extra)| {
            let names = SampleField::ALL.map(SampleField::name);
            let mut kv: Vec<(String, String)> = names
                .iter()
                .zip([p, i, a, b, c, d])
                .zip(present)
                .filter(|(_, here)| *here)
                .map(|((n, v), _)| (n.to_string(), v))
                .collect();
            kv.extend(extra);
            kv
        })
        .prop_shuffle();
    prop_oneof![
        9 => fields.prop_map(|kv| object(&kv)),
        1 => any_value(1),
    ]
}

/// A document: mostly an object with the retention schema's keys, sometimes anything.
fn any_doc() -> impl Strategy<Value = String> {
    let arguments = prop_oneof![
        3 => (any_value(0), any_value(0)).prop_map(|(m, t)| format!(r#"{{"mode":{m},"tensor_elements":{t},"iterations":9}}"#)),
        1 => any_value(2),
    ];
    // The phases in the schema's order (before_file, baseline, loops, closed), each sample
    // likely but not sure to be plain: most such documents give a retention summary.
    let in_order = (any::<bool>(), 1usize..6, any::<bool>())
        .prop_flat_map(|(before, loops, closed)| {
            let mut phases = Vec::new();
            if before {
                phases.push("before_file");
            }
            phases.push("baseline");
            phases.extend(std::iter::repeat_n("loop", loops));
            if closed {
                phases.push("closed");
            }
            phases
                .into_iter()
                .map(|p| sample_in(Just(format!("\"{p}\"")).boxed()))
                .collect::<Vec<_>>()
        })
        .prop_map(|v| format!("[{}]", v.join(",")));
    let samples = prop_oneof![
        6 => in_order,
        3 => prop::collection::vec(any_sample(), 0..8).prop_map(|v| format!("[{}]", v.join(","))),
        1 => any_value(2),
    ];
    let mappings = prop_oneof![
        3 => any_value(0).prop_map(|s| format!(r#"{{"source":{s}}}"#)),
        1 => any_value(1),
    ];
    let flag = || prop_oneof![3 => Just("true".to_string()), 1 => any_value(1)];
    let scalar = || any_value(0);
    // Each key at most once, in any order (now and then one twice).
    let entries = (
        (
            prop::option::weighted(0.9, arguments),
            prop::option::weighted(0.9, samples),
        ),
        (
            prop::option::weighted(0.5, flag()),
            prop::option::weighted(0.5, flag()),
        ),
        (
            prop::option::weighted(0.5, scalar()),
            prop::option::weighted(0.3, any_value(2)),
        ),
        (
            prop::option::weighted(0.2, any_value(2)),
            prop::option::weighted(0.3, mappings),
        ),
        prop::option::weighted(0.1, (key(), any_value(1))),
    )
        .prop_map(|((a, s), (c, l), (p, x), (n, m), extra)| {
            let keys = [
                "arguments",
                "samples",
                "completed",
                "last_tensor_alive",
                "preparation_seconds",
                "x",
                "no",
                "mappings",
            ];
            let mut kv: Vec<(String, String)> = keys
                .iter()
                .zip([a, s, c, l, p, x, n, m])
                .filter_map(|(k, v)| Some((k.to_string(), v?)))
                .collect();
            kv.extend(extra);
            kv
        })
        .prop_shuffle();
    prop_oneof![
        19 => entries.prop_map(|kv| object(&kv)),
        1 => any_value(2),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn the_quick_reader_agrees_with_the_general_one(doc in any_doc(), keep in any::<bool>(), set in 0usize..3, escaped in any::<bool>()) {
        let doc = if escaped { keys_escaped(&doc) } else { doc };
        let (quick, general, _) = both_ways(&doc, &pointer_sets()[set], keep);
        prop_assert_eq!(quick, general);
    }
}
