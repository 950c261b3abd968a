//! Tests of reading a run: metric pointers, plot series thinning.

use super::*;

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
