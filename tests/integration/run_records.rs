//! Issue 22, "wrong records and lost data": what a run writes is kept whole, the bundle records
//! what it must (and says what it could not), and every bundle hwr-exp writes reads back.

use crate::support::{ManifestBuilder, code, repo, run, stderr};

/// A run that reopens `/dev/stdout` or `/dev/stderr` (the shell's `>` truncates what it opens)
/// loses nothing written before, and the order is kept (BenchExec issue 535).
#[test]
fn reopening_dev_stdout_or_dev_stderr_keeps_earlier_output() {
    let repo = repo();
    let m = ManifestBuilder::shell(
        "reopen",
        "echo a; echo b > /dev/stdout; echo c; echo x >&2; echo y > /dev/stderr; echo z >&2; \
         printf 'd\\n' | tee /dev/stderr; echo e >> /dev/stdout",
    )
    .text_output()
    .output("out.txt")
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle path");
    let runs: Vec<_> = std::fs::read_dir(bundle.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    let read = |name: &str| std::fs::read(runs[0].join(name)).unwrap();
    assert_eq!(String::from_utf8_lossy(&read("out.txt")), "a\nb\nc\nd\ne\n");
    assert_eq!(String::from_utf8_lossy(&read("stderr.log")), "x\ny\nz\nd\n");
}

/// Any valid JSON document is valid output, however deep (a 130-deep call tree was
/// `invalid-output`, "nested deeper than 127"), and the report reads the bundle.
#[test]
fn deep_json_outputs_are_valid_and_the_report_reads_them() {
    let repo = repo();
    let m = ManifestBuilder::shell(
        "deep",
        r#"d={depth}; printf '{{"m": 3, "tree": '; head -c "$d" /dev/zero | tr '\0' '['; printf 1; head -c "$d" /dev/zero | tr '\0' ']'; printf '}}\n'"#,
    )
    .matrix("depth", [130, 100_000])
    .set("report", "metrics", crate::support::manifest::table([("m", "/m")]))
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle path");
    for rec in crate::support::run_records(&bundle) {
        assert_eq!(rec["output-check"], "valid", "{rec:#}");
    }
    let report = crate::support::hwr(
        repo.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let text = crate::support::stdout(&report);
    assert!(text.contains("\"m\""), "{text}");
}

/// A metric pointer is at most 100 tokens deep (the reader recurses along it only); `check` says
/// so instead of a report that cannot read it.
#[test]
fn check_refuses_a_metric_pointer_deeper_than_100_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let ok = "/a".repeat(100);
    let deep = "/a".repeat(101);
    let base = ManifestBuilder::shell("ptr", "echo 1");
    let m = base
        .clone()
        .set("report", "metrics", crate::support::manifest::table([("m", ok.as_str())]))
        .write(dir.path());
    let out = crate::support::hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = base
        .set("report", "metrics", crate::support::manifest::table([("m", deep.as_str())]))
        .write(dir.path());
    let out = crate::support::hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("101 tokens, more than 100"), "{}", stderr(&out));
}
