//! Tests of the output reader and the output check.

use super::*;
use std::fs;

#[test]
fn invalid_output_quotes_the_bytes_the_parser_stopped_at() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o");
    let why = |bytes: &[u8]| {
        fs::write(&p, bytes).unwrap();
        let (check, why) = check_output(&p, OutputFormat::Json);
        assert_eq!(check, OutputCheck::Invalid);
        why.unwrap()
    };
    assert_eq!(
        why(b"Traceback (most recent call last):\n  File x\n"),
        "expected value at line 1 column 1, at \"Traceback (most recent c\u{2026}\""
    );
    assert_eq!(
        why(b"{\"a\": 1} and more"),
        "trailing characters at line 1 column 10, at \"and more\""
    );
    assert_eq!(
        why(b"{\n  \"a\": nope\n}"),
        "expected null, true or false at line 2 column 9, at \"nope\""
    );
    // A word is quoted from its start, not from where the parser stopped inside it.
    assert_eq!(
        why(b"not json"),
        "expected null, true or false at line 1 column 2, at \"not json\""
    );
    assert_eq!(
        why(b"[1, nul]"),
        "expected null, true or false at line 1 column 8, at \"nul]\""
    );
    let escaped = why(b"\x1b[31mred\x1b[0m");
    assert!(escaped.ends_with("at \"\\u{1b}[31mred\\u{1b}[0m\""), "{escaped}");
    // Where the document just ends there is nothing to quote.
    assert_eq!(why(b"{\"a\": "), "EOF while parsing a value at line 1 column 6");
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn output_checks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o");
    let check = |bytes: &[u8], f| {
        fs::write(&p, bytes).unwrap();
        check_output(&p, f)
    };
    assert_eq!(check(b"{\"a\": 1}\n", OutputFormat::Json).0, OutputCheck::Valid);
    assert_eq!(check(b"", OutputFormat::Json).0, OutputCheck::Empty);
    assert_eq!(
        check(b"warning: x\n{\"a\": 1}", OutputFormat::Json).0,
        OutputCheck::Invalid
    );
    assert_eq!(
        check(b"{\"a\": 1} {}", OutputFormat::Json).0,
        OutputCheck::Invalid
    );
    assert_eq!(check(b"{\"a\": ", OutputFormat::Json).0, OutputCheck::Invalid);
    assert_eq!(check(b"anything", OutputFormat::Text).0, OutputCheck::Valid);
    assert_eq!(check(b"", OutputFormat::Text).0, OutputCheck::Empty);
    let (c, why) = check(b"{\"a\": \"\xff\"}", OutputFormat::Json);
    assert_eq!(c, OutputCheck::Invalid);
    assert!(why.unwrap().contains("not UTF-8 (byte 7"), "invalid UTF-8");
    let (c, why) = check(b"{\"a\": \"\xe2\x82\"}", OutputFormat::Json);
    assert_eq!(
        (c, why.is_some()),
        (OutputCheck::Invalid, true),
        "truncated character"
    );
    assert_eq!(
        check("{\"a\": \"\u{e9}\u{1f600}\"}".as_bytes(), OutputFormat::Json).0,
        OutputCheck::Valid,
        "multi-byte characters"
    );
    // Any depth is valid JSON: 130 levels (past serde_json's recursion limit) and 100,000.
    for depth in [127, 128, 130, 100_000] {
        assert_eq!(
            check(nested(depth).as_bytes(), OutputFormat::Json),
            (OutputCheck::Valid, None),
            "{depth} levels"
        );
    }
    let (c, why) = check(
        format!("{}1{}", "[".repeat(100_000), "]".repeat(99_999)).as_bytes(),
        OutputFormat::Json,
    );
    assert_eq!(c, OutputCheck::Invalid, "one bracket short");
    assert!(why.unwrap().contains("EOF"));
    // Brackets inside strings do not count.
    let s = format!("[\"{}\\\"\"]", "[".repeat(500));
    assert_eq!(check(s.as_bytes(), OutputFormat::Json).0, OutputCheck::Valid);
}

#[test]
fn utf8_split_across_blocks_is_accepted() {
    let text = "\"\u{1f600}\u{e9}\"".repeat(3);
    let mut r = Checked::new(text.as_bytes());
    let mut out = Vec::new();
    let mut buf = [0u8; 1];
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    assert_eq!(out, text.as_bytes());
}

#[test]
fn pointers_and_lists_are_read_as_serde_json_values_would() {
    let doc = serde_json::json!({
        "a": {"b": [10, {"c": "x"}], "n": null, "t": true, "f": 1.5, "neg": -3},
        "samples": [{"phase": "baseline", "it": 1}, 7, {"phase": "loop", "it": 2, "deep": [[1]]}],
        "k/ey": 5, "t~x": 6, "dup": 1, "dup": 2
    });
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o.json");
    fs::write(&p, r#"{"dup": 1, "x": 0, "dup": 2}"#).unwrap();
    let mut i = Interest::default();
    let dup = i.value("/dup").unwrap();
    let found = read_output(File::open(&p).unwrap(), &i, &mut |_| {}).unwrap();
    assert_eq!(found.values[dup], Some(Scalar::Number(2.into())), "last key wins");

    fs::write(&p, doc.to_string()).unwrap();
    let pointers = [
        "",
        "/a",
        "/a/b",
        "/a/b/0",
        "/a/b/1/c",
        "/a/b/01",
        "/a/n",
        "/a/t",
        "/a/f",
        "/a/neg",
        "/k~1ey",
        "/t~0x",
        "/samples/2/it",
        "/missing",
        "/a/b/x",
    ];
    let mut i = Interest::default();
    let slots: Vec<usize> = pointers.iter().map(|p| i.value(p).unwrap()).collect();
    let list = i.each("/samples", &["phase", "it"]).unwrap();
    let mut events = Vec::new();
    let found = read_output(File::open(&p).unwrap(), &i, &mut |e| {
        events.push(match e {
            ListEvent::Start { .. } => "start".to_string(),
            ListEvent::Element { index, fields, .. } => format!("{index}:{fields:?}"),
        })
    })
    .unwrap();
    for (ptr, slot) in pointers.iter().zip(slots) {
        let want = doc.pointer(ptr).map(|v| match v {
            serde_json::Value::Null => Scalar::Null,
            serde_json::Value::Bool(b) => Scalar::Bool(*b),
            serde_json::Value::Number(n) => Scalar::Number(n.clone()),
            serde_json::Value::String(s) => Scalar::String(s.clone()),
            serde_json::Value::Array(a) => Scalar::Array(a.len()),
            serde_json::Value::Object(_) => Scalar::Object,
        });
        assert_eq!(found.values[slot], want, "{ptr}");
    }
    assert_eq!(found.lists[list], Some(true));
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[0], "start");
    assert!(
        events[1].starts_with("0:[Some(Object), Some(String(\"baseline\"))"),
        "{events:?}"
    );
    assert_eq!(events[2], "1:[Some(Number(Number(7))), None, None]");
}

#[test]
fn deep_documents_are_read_whatever_the_depth() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o.json");
    for depth in [64, 100, 127, 130, 100_000] {
        // The value asked for sits beside the deep part and after it.
        let deep = format!("{}1{}", "{\"a\": ".repeat(depth), "}".repeat(depth));
        let text = format!(
            "{{\"tree\": {deep}, \"samples\": [{{\"phase\": \"loop\", \"deep\": {deep}}}], \"m\": 7}}"
        );
        fs::write(&p, &text).unwrap();
        assert_eq!(
            check_output(&p, OutputFormat::Json).0,
            OutputCheck::Valid,
            "{depth}"
        );
        let mut i = Interest::default();
        let m = i.value("/m").unwrap();
        let tree = i.value("/tree/a").unwrap();
        let near = i
            .value(&"/a".repeat(crate::manifest::MAX_POINTER_TOKENS.min(depth)))
            .unwrap();
        let list = i.each("/samples", &["phase", "deep"]).unwrap();
        let mut phases = Vec::new();
        let found = read_output(File::open(&p).unwrap(), &i, &mut |e| {
            if let ListEvent::Element { fields, .. } = e {
                phases.push((fields[1].clone(), fields[2].clone()));
            }
        })
        .unwrap();
        assert_eq!(found.values[m], Some(Scalar::Number(7.into())), "{depth}");
        let inner = if depth == 1 {
            Scalar::Number(1.into())
        } else {
            Scalar::Object
        };
        assert_eq!(found.values[tree], Some(inner), "{depth}");
        assert_eq!(found.values[near], None, "{depth}: not under the root");
        assert_eq!(found.lists[list], Some(true));
        assert_eq!(
            phases,
            vec![(Some(Scalar::String("loop".into())), Some(Scalar::Object))]
        );
    }
    // A pointer as deep as allowed finds its value in a document deeper still.
    let depth = 1000;
    fs::write(&p, format!("{}1{}", "{\"a\": ".repeat(depth), "}".repeat(depth))).unwrap();
    let mut i = Interest::default();
    let at = i
        .value(&"/a".repeat(crate::manifest::MAX_POINTER_TOKENS))
        .unwrap();
    let found = read_output(File::open(&p).unwrap(), &i, &mut |_| {}).unwrap();
    assert_eq!(found.values[at], Some(Scalar::Object));
    let too_deep = "/a".repeat(crate::manifest::MAX_POINTER_TOKENS + 1);
    assert!(i.value(&too_deep).unwrap_err().contains("more than"));
}
