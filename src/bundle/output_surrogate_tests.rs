//! Tests of the output reader's handling of lone UTF-16 surrogates.

use super::*;
use crate::bundle::surrogates::{LoneSurrogates, lone_surrogates, replace_escapes};
use proptest::prelude::*;

/// `text` with its lone-surrogate escapes replaced, the whole read at once.
fn whole(text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    let (lone, len) = lone_surrogates(&b, true);
    assert_eq!(len, b.len());
    replace_escapes(&mut b, &lone);
    String::from_utf8(b).unwrap()
}

/// The same through [`LoneSurrogates`] fed `chunk` bytes per read and read `out` at a time.
fn streamed(text: &str, chunk: usize, out: usize) -> String {
    struct Chunks<'a>(&'a [u8], usize);
    impl Read for Chunks<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let mut r = LoneSurrogates::new(Chunks(text.as_bytes(), chunk));
    let mut got = Vec::new();
    let mut buf = vec![0; out];
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

#[test]
fn lone_surrogates_become_u_fffd_and_pairs_and_other_escapes_stay() {
    let cases = [
        (r#"{"a":"x\ud800y"}"#, r#"{"a":"x\uFFFDy"}"#),
        (r#"{"a":"\udc80"}"#, r#"{"a":"\uFFFD"}"#),
        (r#"["\ud83d\ude00"]"#, r#"["\ud83d\ude00"]"#),
        (r#"["\ud83d\u0041"]"#, r#"["\uFFFD\u0041"]"#),
        (r#"["\ud83d\ud83d\ude00"]"#, r#"["\uFFFD\ud83d\ude00"]"#),
        (r#"["\ude00\ud83d"]"#, r#"["\uFFFD\uFFFD"]"#),
        (r#"["\\ud800"]"#, r#"["\\ud800"]"#),
        (r#"["\\\ud800"]"#, r#"["\\\uFFFD"]"#),
        (r#"["\u00e9\n\"\ud800"]"#, r#"["\u00e9\n\"\uFFFD"]"#),
        (r#"["\uzzzz"]"#, r#"["\uzzzz"]"#),
        (r#""\ud800"#, r#""\uFFFD"#),
    ];
    for (text, want) in cases {
        assert_eq!(whole(text), want, "{text}");
        for chunk in 1..14 {
            assert_eq!(streamed(text, chunk, 3), want, "{text} in pieces of {chunk}");
        }
    }
    // serde_json reads what the replacement gives.
    let v: serde_json::Value = serde_json::from_str(&whole(r#"{"a":"x\ud800y"}"#)).unwrap();
    assert_eq!(v["a"], "x\u{fffd}y");
}

#[test]
fn a_report_reads_a_kept_string_with_a_lone_surrogate_whole_and_streamed() {
    let mut interest = Interest::default();
    let at = interest.value("/mode").unwrap();
    let small = br#"{"mode":"a\ud800b","n":1}"#.to_vec();
    let found = read_output_bytes(&small, &interest, &mut |_| {}).unwrap();
    assert_eq!(found.values[at], Some(Scalar::String("a\u{fffd}b".into())));
    // Past the 1 MiB buffer: streamed.
    let mut big = br#"{"pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', BUFFER + 10));
    big.extend_from_slice(br#"","mode":"a\udc00b"}"#);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o");
    std::fs::write(&p, &big).unwrap();
    let found = read_output(File::open(&p).unwrap(), &interest, &mut |_| {}).unwrap();
    assert_eq!(found.values[at], Some(Scalar::String("a\u{fffd}b".into())));
    assert_eq!(check_output(&p, OutputFormat::Json).0, OutputCheck::Valid);
}

proptest! {
    #[test]
    fn streaming_replaces_what_the_whole_read_does(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("\\ud800".to_string()),
                Just("\\udc00".to_string()),
                Just("\\ud83d\\ude00".to_string()),
                Just("\\\\".to_string()),
                Just("\\u0041".to_string()),
                Just("\\n".to_string()),
                Just("\\".to_string()),
                Just("u".to_string()),
                "[a-f0-9]{1,4}",
            ],
            0..24,
        ),
        chunk in 1usize..16,
        out in 1usize..16,
    ) {
        let text = parts.concat();
        prop_assert_eq!(streamed(&text, chunk, out), whole(&text));
    }
}
