//! Tests of the bundle reader.

use super::*;

/// A bundle folder holding a bundle.json and the given plan.json.
fn with_plan(plan: &str) -> (tempfile::TempDir, Bundle) {
    let dir = tempfile::tempdir().unwrap();
    let info = include_str!("../../tests/fixtures/bundles/interrupted/bundle.json");
    std::fs::write(dir.path().join("bundle.json"), info).unwrap();
    std::fs::write(dir.path().join("plan.json"), plan).unwrap();
    let b = Bundle::open(dir.path()).unwrap();
    (dir, b)
}

fn run_json(i: usize) -> String {
    format!(
        r#"{{"run-id":"{i:03}-r1","index":{i},"cell":{{}},"repetition":1,"argv":["true"],"workdir":"/","output":"{i:03}.json","env":{{"policy":"inherit","set":[],"unset":[]}},"cpus":[0],"timeout-seconds":null,"grace-seconds":5.0}}"#
    )
}

fn plan_text(runs: usize, header_last: bool) -> String {
    let header = r#""format":1,"order":"interleaved","seed":null,"jobs":1,"matrix-keys":["a"],"output-format":"json","sample-interval-seconds":0.1"#;
    let runs: Vec<String> = (0..runs).map(run_json).collect();
    let runs = format!(r#""runs":[{}]"#, runs.join(",\n"));
    if header_last {
        format!("{{{runs},{header}}}")
    } else {
        format!("{{{header},{runs}}}")
    }
}

#[test]
fn plan_runs_stream_in_order_wherever_the_header_is() {
    for header_last in [false, true] {
        let (_d, b) = with_plan(&plan_text(1000, header_last));
        let h = b.plan_header().unwrap();
        assert_eq!(
            (h.matrix_keys.clone(), h.sample_interval_seconds),
            (vec!["a".to_string()], Some(0.1))
        );
        let ids: Vec<usize> = b.planned_runs().unwrap().map(|r| r.unwrap().index).collect();
        assert_eq!(ids, (0..1000).collect::<Vec<_>>());
        assert_eq!(b.plan().unwrap().runs.len(), 1000);
    }
}

#[test]
fn a_truncated_plan_yields_its_runs_then_one_error() {
    let text = plan_text(10, false);
    let cut = text.find(&run_json(6)).unwrap() + 20;
    let (_d, b) = with_plan(&text[..cut]);
    let items: Vec<_> = b.planned_runs().unwrap().collect();
    assert_eq!(items.len(), 7, "6 runs, then the error");
    assert!(items[..6].iter().all(Result::is_ok));
    let e = items[6].as_ref().unwrap_err();
    assert!(e.to_string().contains("plan.json: truncated JSON"), "{e}");
}

/// A plan of `runs` runs, one per line, large enough (at least 1 MiB) to be mapped.
fn mapped_plan(runs: usize) -> String {
    let text = plan_text(runs, false);
    assert!(
        text.len() >= 1 << 20,
        "{} bytes: too small to be mapped",
        text.len()
    );
    text
}

#[test]
fn a_mapped_plan_streams_every_run_wherever_the_header_is() {
    for header_last in [false, true] {
        let (_d, b) = with_plan(&plan_text(6000, header_last));
        assert_eq!(b.plan_header().unwrap().matrix_keys, vec!["a".to_string()]);
        let ids: Vec<usize> = b.planned_runs().unwrap().map(|r| r.unwrap().index).collect();
        assert_eq!(ids, (0..6000).collect::<Vec<_>>());
    }
}

#[test]
fn a_run_a_mapped_plan_cannot_parse_is_said_as_the_streamed_reader_says_it() {
    // Run 4000 is on line 4001 (the header and run 0 share line 1): the error names the
    // file's line, once, after the 4000 runs before it, each handed over once.
    let bad = run_json(4000).replace("\"repetition\":1", "\"repetition\":\"one\"");
    let text = mapped_plan(6000).replace(&run_json(4000), &bad);
    let (_d, b) = with_plan(&text);
    let items: Vec<_> = b.planned_runs().unwrap().collect();
    assert_eq!(items.len(), 4001);
    let ids: Vec<usize> = items[..4000].iter().map(|r| r.as_ref().unwrap().index).collect();
    assert_eq!(ids, (0..4000).collect::<Vec<_>>());
    let e = items[4000].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("plan.json: unexpected content") && e.contains("line 4001"),
        "{e}"
    );

    // A cut in the middle of a run: its syntax error, with the runs before it.
    let cut = text.find(&run_json(5000)).unwrap() + 30;
    let (_d, b) = with_plan(&text[..cut]);
    let items: Vec<_> = b.planned_runs().unwrap().collect();
    assert_eq!(items.len(), 4001, "stops at the first error, run 4000");
    let text = mapped_plan(6000);
    let cut = text.find(&run_json(5000)).unwrap() + 30;
    let (_d, b) = with_plan(&text[..cut]);
    let items: Vec<_> = b.planned_runs().unwrap().collect();
    assert_eq!(items.len(), 5001);
    assert!(items[..5000].iter().all(Result::is_ok));
    let e = items[5000].as_ref().unwrap_err().to_string();
    assert!(e.contains("plan.json: truncated JSON"), "{e}");
}

#[test]
fn a_mapped_plan_stops_at_an_unsafe_name_and_a_newer_format() {
    let text = mapped_plan(6000).replace("\"4000-r1\"", "\"../x\"");
    let (_d, b) = with_plan(&text);
    let items: Vec<_> = b.planned_runs().unwrap().collect();
    assert_eq!(items.len(), 4001);
    let e = items[4000].as_ref().unwrap_err().to_string();
    assert!(e.contains("runs[4000].run-id"), "{e}");
    let (_d, b) = with_plan(&mapped_plan(6000).replace("\"format\":1", "\"format\":7"));
    assert!(matches!(
        b.plan_header(),
        Err(ReadError::NewerFormat { found: 7, .. })
    ));
    let first = b.planned_runs().unwrap().next().unwrap();
    assert!(matches!(first, Err(ReadError::NewerFormat { found: 7, .. })));
}

/// What `planned_runs()` gives, each entry as (run-id, index, repetition, cell, output) or its
/// error's text.
fn entries(b: &Bundle) -> Vec<Result<String, String>> {
    b.planned_runs()
        .unwrap()
        .map(|r| {
            r.map(|r| {
                format!(
                    "{} {} {} {:?} {}",
                    r.run_id, r.index, r.repetition, r.cell, r.output
                )
            })
            .map_err(|e| e.to_string())
        })
        .collect()
}

#[test]
fn a_plan_entry_spoilt_in_any_field_stops_the_runs_at_its_place() {
    // Run 1 of 3 (small plans, streamed) and run 4000 of 6000 (mapped) spoilt in one field: the
    // runs before it, then an error.
    let spoilt = [
        (r#""argv":["true"]"#, r#""argv":"true""#),
        (r#""argv":["true"]"#, r#""argv":[7]"#),
        (r#""argv":["true"],"#, ""),
        (r#""workdir":"/""#, r#""workdir":null"#),
        (r#""set":[]"#, r#""set":[["A"]]"#),
        (r#""set":[]"#, r#""set":[["A",1]]"#),
        (r#""unset":[]"#, r#""unset":{}"#),
        (r#""policy":"inherit""#, r#""policy":3"#),
        (r#""cpus":[0]"#, r#""cpus":[-1]"#),
        (r#""cpus":[0]"#, r#""cpus":["0"]"#),
        (r#""timeout-seconds":null"#, r#""timeout-seconds":"1s""#),
        (r#""grace-seconds":5.0"#, r#""grace-seconds":true"#),
        (r#""grace-seconds":5.0"#, r#""grace-seconds":5.0,"allocator":3"#),
        (r#""env":{"#, r#""env":[{"#),
    ];
    for (runs, spoilt_run) in [(3, 1), (6000, 4000)] {
        let plain = plan_text(runs, false);
        let (_d, b) = with_plan(&plain);
        let whole = entries(&b);
        assert!(whole.iter().all(Result::is_ok));
        assert_eq!(whole.len(), runs);
        let at = plain.find(&run_json(spoilt_run)).unwrap();
        for (from, to) in spoilt {
            let entry = run_json(spoilt_run).replacen(from, to, 1);
            assert_ne!(entry, run_json(spoilt_run), "{from}");
            let text = format!(
                "{}{entry}{}",
                &plain[..at],
                &plain[at + run_json(spoilt_run).len()..]
            );
            let (_d, b) = with_plan(&text);
            let whole = entries(&b);
            assert_eq!(whole.len(), spoilt_run + 1, "{to}");
            assert!(whole[..spoilt_run].iter().all(Result::is_ok), "{to}");
            assert!(whole[spoilt_run].is_err(), "{to}");
        }
    }
    // An allocator name is read.
    let text = plan_text(2, false).replace(
        r#""grace-seconds":5.0}"#,
        r#""grace-seconds":5.0,"allocator":"jemalloc"}"#,
    );
    let (_d, b) = with_plan(&text);
    let runs: Vec<_> = b.planned_runs().unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        runs[1].allocator.as_ref().map(|a| a.name.as_str()),
        Some("jemalloc")
    );
}

#[test]
fn an_unsafe_run_id_stops_the_runs_with_its_place() {
    let text = plan_text(3, false).replace("\"001-r1\"", "\"../x\"");
    let (_d, b) = with_plan(&text);
    let items: Vec<_> = b.planned_runs().unwrap().collect();
    assert_eq!(items.len(), 2);
    let e = items[1].as_ref().unwrap_err();
    assert!(e.to_string().contains("runs[1].run-id"), "{e}");
}

#[test]
fn dropping_the_runs_early_stops_the_reader() {
    let (_d, b) = with_plan(&plan_text(5000, false));
    let first: Vec<_> = b.planned_runs().unwrap().take(3).collect();
    assert_eq!(first.len(), 3);
    // Dropped above with thousands of runs unread: the reading thread was joined.
}

#[test]
fn a_newer_plan_format_is_refused() {
    let (_d, b) = with_plan(&plan_text(2, false).replace("\"format\":1", "\"format\":7"));
    assert!(matches!(
        b.plan_header(),
        Err(ReadError::NewerFormat { found: 7, .. })
    ));
    let first = b.planned_runs().unwrap().next().unwrap();
    assert!(matches!(first, Err(ReadError::NewerFormat { found: 7, .. })));
}

#[test]
fn newer_format_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bundle.json"), r#"{"bundle-format": 99}"#).unwrap();
    let err = Bundle::open(dir.path()).unwrap_err();
    assert!(matches!(err, ReadError::NewerFormat { found: 99, .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("bundle.json") && msg.contains("format 99"), "{msg}");
}

#[test]
fn truncated_bundle_json_says_truncated() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bundle.json"), r#"{"bundle-format": 1, "hwr"#).unwrap();
    let msg = Bundle::open(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("bundle.json: truncated JSON"), "{msg}");
}

#[test]
fn missing_folder_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = Bundle::open(dir.path().join("nope")).unwrap_err();
    assert!(matches!(err, ReadError::NotABundle { .. }));
    let err = Bundle::open(dir.path()).unwrap_err();
    assert!(matches!(err, ReadError::Missing { .. }));
    assert!(err.path().ends_with("bundle.json"));
}

#[test]
fn versioned_reader_checks_the_key_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.json");
    #[derive(serde::Deserialize, Debug)]
    struct Doc {
        #[allow(dead_code)]
        format: u32,
    }
    std::fs::write(&p, r#"{"format": 1}"#).unwrap();
    assert!(read_versioned::<Doc>(&p, "format", 1).is_ok());
    std::fs::write(&p, r#"{"format": 2}"#).unwrap();
    let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::NewerFormat {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&p.display().to_string()) && msg.contains("newer"),
        "{msg}"
    );
    assert!(e.reason().starts_with("written in format 2"), "{}", e.reason());
    std::fs::write(&p, r#"{"other": 1}"#).unwrap();
    let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
    assert!(e.to_string().contains("no `format` format version key"), "{e}");
    std::fs::write(&p, r#"{"format": "1"}"#).unwrap();
    let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
    assert!(matches!(e, ReadError::NoFormat { .. }), "{e}");
    std::fs::write(&p, "{").unwrap();
    let e = read_versioned::<Doc>(&p, "format", 1).unwrap_err();
    assert!(e.to_string().contains("truncated JSON"), "{e}");
}

#[test]
fn run_record_is_none_until_the_run_finished_and_commit_needs_40_hex() {
    let dir = tempfile::tempdir().unwrap();
    let info = serde_json::json!({
        "bundle-format": 1, "hwr-exp-version": "0.1.0", "experiment": "x", "status": "running",
        "created": "2026-11-30T00:00:00Z", "planned-runs": 1, "counts": {},
        "manifest-sha256": "", "manifest-path": "/x.toml", "runner-pid": 1
    });
    std::fs::write(dir.path().join("bundle.json"), info.to_string()).unwrap();
    let b = Bundle::open(dir.path()).unwrap();
    assert!(b.run_record("0000-x").unwrap().is_none());
    std::fs::create_dir_all(b.run_dir("0000-x")).unwrap();
    std::fs::write(b.run_dir("0000-x").join("run.json"), r#"{"format": 7}"#).unwrap();
    let e = b.run_record("0000-x").unwrap_err();
    assert!(matches!(e, ReadError::NewerFormat { found: 7, .. }), "{e}");

    assert_eq!(b.recorded_commit(), None, "no revision.txt");
    std::fs::write(b.path("revision.txt"), "no commit: not a git repository\n").unwrap();
    assert_eq!(b.recorded_commit(), None);
    let id = "0123456789abcdef0123456789abcdef01234567";
    std::fs::write(b.path("revision.txt"), format!("{id}\n")).unwrap();
    assert_eq!(b.recorded_commit().as_deref(), Some(id));
}

#[test]
fn run_folders_are_listed_up_to_a_bound() {
    let (dir, b) = with_plan(&plan_text(4, false));
    assert!(b.run_folders_listed(10).is_none(), "no runs/ folder: no listing");
    for id in ["000-r1", "002-r1"] {
        std::fs::create_dir_all(dir.path().join("runs").join(id)).unwrap();
    }
    // A fresh reader: the one above has not opened runs/.
    let b = Bundle::open(dir.path()).unwrap();
    let listed = b.run_folders_listed(2).expect("two folders, at most two listed");
    assert!(listed.may_hold("000-r1") && listed.may_hold("002-r1"));
    assert!(!listed.may_hold("001-r1") && !listed.may_hold("003-r1") && !listed.may_hold("."));
    assert!(
        b.run_folders_listed(1).is_none(),
        "more folders than asked for: no listing"
    );
}
