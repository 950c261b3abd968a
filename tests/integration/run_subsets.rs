//! Fail fast and subsets (issue 22, item 11): `run --fail-fast` stops after the first run that is
//! not ok (bundle `interrupted`, resumable, exit 1), `run --where KEY=VALUE` runs only the matching
//! cells, `run --repetitions N` overrides `[schedule] repetitions`; each is recorded in bundle.json
//! `overrides`, said by `report`, and applied again by `resume` and `rerun`. Twelve identical
//! failures print one reason with a count, in `run`'s closing list and in `report`.

use std::path::{Path, PathBuf};

use crate::support::{ManifestBuilder, code, hwr, json, printed_path, repo, run_records, stderr, stdout};

/// `mode` x `elements` (2 x 3) x 2 repetitions of a shell line that fails (exit 3, with a line on
/// stderr) exactly when `elements` is `fail_at`.
fn manifest(dir: &Path, fail_at: i64) -> PathBuf {
    ManifestBuilder::shell(
        "subsets",
        &format!(
            "echo {{mode}}-{{elements}}; if [ {{elements}} = {fail_at} ]; then echo 'boom: elements {{elements}}' >&2; exit 3; fi"
        ),
    )
    .text_output()
    .output("{run-id}.txt")
    .matrix("mode", ["get_tensor", "reuse"])
    .matrix("elements", [16, 32, 64])
    .repetitions(2)
    .set("measure", "sample-interval", "off")
    .write(dir)
}

/// `hwr-exp ARGS` in `dir`, then the bundle it printed when it printed one.
fn run(dir: &Path, args: &[&str]) -> (std::process::Output, PathBuf) {
    let out = hwr(dir, args);
    let bundle = printed_path(dir, &out);
    (out, bundle)
}

/// The run ids of plan.json, in order.
fn planned(bundle: &Path) -> Vec<String> {
    json(&bundle.join("plan.json"))["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run-id"].as_str().unwrap().to_owned())
        .collect()
}

/// The run ids with a run.json, in plan order.
fn recorded(bundle: &Path) -> Vec<String> {
    run_records(bundle)
        .iter()
        .map(|r| r["run-id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn fail_fast_stops_after_the_first_run_that_is_not_ok_and_resume_goes_on() {
    let repo = repo();
    let dir = repo.path();
    manifest(dir, 32);
    let (out, bundle) = run(
        dir,
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "results",
            "--fail-fast",
        ],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "a failed run, not an interruption: {err}");
    // 000-get_tensor-16-r1 is ok, 001-get_tensor-32-r1 fails: nothing starts after it.
    assert_eq!(
        recorded(&bundle),
        ["000-get_tensor-16-r1", "001-get_tensor-32-r1"],
        "{err}"
    );
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted", "{info}");
    assert_eq!(info["overrides"]["fail-fast"], true, "{info}");
    assert!(err.contains("--fail-fast"), "{err}");
    assert!(err.contains("12 runs: 1 ok, 1 failed, 10 not run"), "{err}");
    let next = format!("next: {} resume ", crate::support::bin().display());
    assert!(err.contains(&next), "{err}");
    let report = stdout(&hwr(dir, &["report", bundle.to_str().unwrap()]));
    assert!(report.contains("overrides: run with --fail-fast"), "{report}");

    // resume keeps the recorded --fail-fast: it runs on to the next run that is not ok.
    let out = hwr(dir, &["resume", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        recorded(&bundle),
        [
            "000-get_tensor-16-r1",
            "001-get_tensor-32-r1",
            "002-get_tensor-64-r1",
            "003-reuse-16-r1",
            "004-reuse-32-r1"
        ],
        "{}",
        stderr(&out)
    );
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");

    // Without --fail-fast every run runs, failures or not.
    let (out, plain) = run(dir, &["run", "experiment.toml", "--results-dir", "results"]);
    assert_eq!(code(&out), 1);
    assert_eq!(recorded(&plain).len(), 12);
    assert_eq!(json(&plain.join("bundle.json"))["status"], "complete");
    assert!(json(&plain.join("bundle.json")).get("overrides").is_none());
}

#[test]
fn fail_fast_with_every_run_ok_completes_and_with_slurm_is_refused() {
    let repo = repo();
    let dir = repo.path();
    manifest(dir, 999);
    let (out, bundle) = run(
        dir,
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "results",
            "--fail-fast",
            "-q",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(recorded(&bundle).len(), 12);
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "complete");

    let out = hwr(
        dir,
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "other",
            "--fail-fast",
            "--executor",
            "slurm",
        ],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--fail-fast needs the local executor"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("other").exists(), "a refused run writes nothing");
}

#[test]
fn where_runs_only_the_matching_cells_and_repetitions_overrides_the_manifest() {
    let repo = repo();
    let dir = repo.path();
    manifest(dir, 999);
    let (out, bundle) = run(
        dir,
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "results",
            "-q",
            "--where",
            "mode=reuse",
            "--where",
            "elements=16",
            "--where",
            "elements=64.0",
            "--repetitions",
            "3",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The matching cells in the manifest's order, each 3 times, interleaved.
    let ids = planned(&bundle);
    assert_eq!(
        ids,
        [
            "000-reuse-16-r1",
            "001-reuse-64-r1",
            "002-reuse-16-r2",
            "003-reuse-64-r2",
            "004-reuse-16-r3",
            "005-reuse-64-r3"
        ]
    );
    assert_eq!(recorded(&bundle), ids);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(
        info["overrides"],
        serde_json::json!({"where": ["mode=reuse", "elements=16", "elements=64.0"], "repetitions": 3}),
        "{info}"
    );
    assert_eq!(info["planned-runs"], 6);
    // The manifest bytes are kept as they are.
    assert_eq!(
        std::fs::read(bundle.join("manifest.toml")).unwrap(),
        std::fs::read(dir.join("experiment.toml")).unwrap()
    );

    // report says so, in every format that has a preamble.
    let report = stdout(&hwr(dir, &["report", bundle.to_str().unwrap()]));
    assert!(
        report.contains(
            "overrides: run with --where mode=reuse --where elements=16 --where elements=64.0 --repetitions 3"
        ),
        "{report}"
    );
    let report = json_of(&hwr(
        dir,
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    ));
    assert_eq!(report["overrides"]["repetitions"], 3);
    let html = stdout(&hwr(
        dir,
        &["report", bundle.to_str().unwrap(), "--format", "html"],
    ));
    assert!(html.contains("--where mode=reuse"), "html names the overrides");

    // plan shows the same runs before anything is run.
    let out = hwr(
        dir,
        &[
            "plan",
            "experiment.toml",
            "--format",
            "json",
            "--where",
            "mode=reuse",
            "--where",
            "elements=16",
            "--where",
            "elements=64.0",
            "--repetitions",
            "3",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan_ids: Vec<&str> = plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run-id"].as_str().unwrap())
        .collect();
    assert_eq!(plan_ids, ids);

    // rerun does the same selection and records it again.
    let out = hwr(dir, &["rerun", bundle.to_str().unwrap(), "-q"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let again = printed_path(dir, &out);
    assert_ne!(again, bundle);
    assert_eq!(planned(&again), ids);
    assert_eq!(json(&again.join("bundle.json"))["overrides"], info["overrides"]);
    assert!(stderr(&out).contains("--where mode=reuse"), "{}", stderr(&out));
}

#[test]
fn resume_of_a_selection_expands_the_same_runs() {
    let repo = repo();
    let dir = repo.path();
    manifest(dir, 32);
    let (out, bundle) = run(
        dir,
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "results",
            "-q",
            "--fail-fast",
            "--where",
            "elements=32",
            "--repetitions",
            "1",
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(planned(&bundle), ["000-get_tensor-32-r1", "001-reuse-32-r1"]);
    assert_eq!(recorded(&bundle), ["000-get_tensor-32-r1"]);
    // Without the recorded selection the manifest would expand to 12 other runs, which resume
    // refuses; with it, resume runs the one left.
    let out = hwr(dir, &["resume", bundle.to_str().unwrap(), "-q"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(recorded(&bundle), ["000-get_tensor-32-r1", "001-reuse-32-r1"]);
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "complete");
}

#[test]
fn a_selection_that_matches_nothing_names_what_exists_and_writes_nothing() {
    let repo = repo();
    let dir = repo.path();
    ManifestBuilder::shell("subsets", "echo {mode}-{elements}")
        .text_output()
        .output("{run-id}.txt")
        .matrix("mode", ["get_tensor", "reuse"])
        .matrix("elements", [16, 64])
        .set(
            "matrix",
            "exclude",
            vec![crate::support::manifest::table([("mode", "reuse")])],
        )
        .set(
            "matrix",
            "include",
            vec![toml::Value::Table(
                [
                    ("mode".to_string(), toml::Value::from("view")),
                    ("elements".to_string(), toml::Value::from(64)),
                ]
                .into_iter()
                .collect(),
            )],
        )
        .write(dir);
    let refused = |args: &[&str]| {
        let mut all = vec!["run", "experiment.toml", "--results-dir", "results"];
        all.extend_from_slice(args);
        let out = hwr(dir, &all);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(!dir.join("results").exists(), "{args:?} wrote something");
        stderr(&out)
    };
    let err = refused(&["--where", "size=16"]);
    assert!(
        err.contains("`size` is not a matrix key; the keys are: mode, elements"),
        "{err}"
    );
    let err = refused(&["--where", "elements=32"]);
    assert!(
        err.contains("no cell has elements = 32; its values are: 16, 64"),
        "{err}"
    );
    // `reuse` is an axis value, but every reuse cell is excluded: no cell has it.
    let err = refused(&["--where", "mode=reuse"]);
    assert!(
        err.contains("no cell has mode = reuse; its values are: get_tensor, view"),
        "{err}"
    );
    // Each value exists, not together.
    let err = refused(&["--where", "mode=view", "--where", "elements=16"]);
    assert!(
        err.contains("no cell of the plan matches these together"),
        "{err}"
    );
    // Every problem at once.
    let err = refused(&["--where", "size=16", "--where", "elements=32"]);
    assert!(err.contains("2 problems"), "{err}");
    let err = refused(&["--where", "mode"]);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let err = refused(&["--repetitions", "0"]);
    assert!(err.contains("1 or more"), "{err}");

    // The include cell is selected like any other.
    let out = hwr(
        dir,
        &[
            "plan",
            "experiment.toml",
            "--format",
            "json",
            "--where",
            "mode=view",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["runs"].as_array().unwrap().len(), 1);
    assert_eq!(plan["runs"][0]["run-id"], "000-view-64-r1");
}

#[test]
fn twelve_identical_failures_are_one_reason_with_a_count() {
    let repo = repo();
    let dir = repo.path();
    ManifestBuilder::shell(
        "twelve",
        "echo 'Traceback (most recent call last):' >&2; echo \"ModuleNotFoundError: No module named 'numpy'\" >&2; exit 1",
    )
    .text_output()
    .output("{run-id}.txt")
    .matrix("n", (1..=12).collect::<Vec<i64>>())
    .set("measure", "sample-interval", "off")
    .write(dir);
    let (out, bundle) = run(dir, &["run", "experiment.toml", "--results-dir", "results"]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    let closing = &err[err.find("runs that are not ok").expect("a closing list")..];
    assert!(
        closing.contains("12 runs: exit 1: ModuleNotFoundError: No module named 'numpy'"),
        "{closing}"
    );
    assert!(
        closing.contains("runs: 000-1-r1, 001-2-r1, 002-3-r1 and 9 more"),
        "{closing}"
    );
    assert_eq!(
        closing.matches("| Traceback").count(),
        1,
        "one stderr tail: {closing}"
    );
    assert!(!closing.contains("and 2 more; all of them"), "{closing}");

    let b = bundle.to_str().unwrap();
    let report = stdout(&hwr(dir, &["report", b, "--stderr", "--wide"]));
    let by_reason = &report[report
        .find("Runs that are not ok, by reason")
        .expect("the table of reasons")..];
    assert!(by_reason.contains("12"), "{by_reason}");
    assert_eq!(report.matches("| Traceback").count(), 1, "{report}");
    assert!(
        report.contains("12 runs (000-1-r1, 001-2-r1, 002-3-r1 and 9 more)"),
        "{report}"
    );
    let html = stdout(&hwr(dir, &["report", b, "--format", "html"]));
    assert!(
        html.contains("Runs that are not ok, by reason"),
        "the HTML report has the table too"
    );
    let md = stdout(&hwr(dir, &["report", b, "--format", "md"]));
    assert!(md.contains("| 12 | failed | exit 1: ModuleNotFoundError"), "{md}");
    let report = json_of(&hwr(dir, &["report", b, "--format", "json"]));
    let groups = report["failures-by-reason"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["count"], 12);
    assert_eq!(groups[0]["runs"].as_array().unwrap().len(), 12);
}

/// stdout of `out` as JSON.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
}

#[test]
fn repetitions_replaces_an_adaptive_rule_with_a_fixed_number() {
    let manifest = crate::support::package_root().join("tests/manifests/good/adaptive.toml");
    let manifest = manifest.to_str().unwrap();
    let here = crate::support::package_root();
    let adaptive = stdout(&hwr(here, &["plan", manifest]));
    assert!(adaptive.contains("adaptive repetitions: 4 to 30"), "{adaptive}");
    let out = hwr(here, &["plan", manifest, "--repetitions", "2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fixed = stdout(&out);
    assert!(fixed.contains("6 runs, order shuffled"), "{fixed}");
    assert!(!fixed.contains("adaptive repetitions"), "{fixed}");
}

/// With `jobs = 2`, a run that is not ok stops the next runs of every slot; the run in flight in
/// the other slot runs to its end and is recorded as it ended (not `interrupted`).
#[test]
fn fail_fast_with_two_job_slots_lets_the_run_in_flight_finish() {
    if crate::support::need(crate::support::Cpus(2)).is_none() {
        return;
    }
    let repo = repo();
    let dir = repo.path();
    let flag = dir.join("second-started");
    // Run 0 fails once run 1 (the other slot) is running; run 1 ends ok once run 0 has been
    // recorded (its run.json is there; the runner counts it right after writing it).
    ManifestBuilder::shell(
        "two-slots",
        &format!(
            "case {{n}} in 1) while [ ! -e {f} ]; do sleep 0.02; done; exit 4 ;; \
             2) touch {f}; while [ ! -e \"$HWR_BUNDLE/runs/000-1-r1/run.json\" ]; do sleep 0.02; done; sleep 0.3 ;; \
             *) true ;; esac",
            f = flag.display()
        ),
    )
    .text_output()
    .output("{run-id}.txt")
    .matrix("n", [1, 2, 3, 4, 5, 6])
    .set("schedule", "jobs", 2)
    .set("measure", "sample-interval", "off")
    .write(dir);
    let (out, bundle) = run(
        dir,
        &[
            "run",
            "experiment.toml",
            "--results-dir",
            "results",
            "-q",
            "--fail-fast",
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let records = run_records(&bundle);
    let ended: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            (
                r["run-id"].as_str().unwrap().to_owned(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [
            ("000-1-r1".to_owned(), "failed".to_owned()),
            ("001-2-r1".to_owned(), "ok".to_owned())
        ]
    );
    assert_eq!(json(&bundle.join("bundle.json"))["status"], "interrupted");
}

/// `--where` that drops the control cell (`mode = reuse`, the default control) warns on `plan`
/// and `run`, naming the `--where` that keeps it; a selection keeping it, or not touching its
/// key, does not warn.
#[test]
fn a_selection_that_leaves_out_the_control_warns() {
    let repo = repo();
    manifest(repo.path(), 0);
    for cmd in ["plan", "run"] {
        let mut args = vec![cmd, "experiment.toml", "--where", "mode=get_tensor"];
        if cmd == "run" {
            args.extend(["--quiet", "--results-dir", "results"]);
        }
        let out = hwr(repo.path(), &args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("warning: --where leaves out the control cell (mode=reuse)")
                && stderr(&out).contains("add --where mode=reuse"),
            "{cmd}: {}",
            stderr(&out)
        );
    }
    for keep in [
        &["--where", "mode=get_tensor", "--where", "mode=reuse"][..],
        &["--where", "elements=16"][..],
    ] {
        let mut args = vec!["plan", "experiment.toml"];
        args.extend_from_slice(keep);
        let out = hwr(repo.path(), &args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            !stderr(&out).contains("control cell"),
            "{keep:?}: {}",
            stderr(&out)
        );
    }
}

/// `compare` of a whole run and a `--where`/`--repetitions` run of one manifest lists the
/// overrides as a difference (it said "same experiment, ... manifest" and nothing else).
#[test]
fn compare_lists_the_overrides_that_differ() {
    let repo = repo();
    manifest(repo.path(), 0);
    let (out, whole) = run(
        repo.path(),
        &["run", "experiment.toml", "--quiet", "--results-dir", "results"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (out, part) = run(
        repo.path(),
        &[
            "run",
            "experiment.toml",
            "--quiet",
            "--results-dir",
            "results",
            "--where",
            "elements=16",
            "--repetitions",
            "3",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = hwr(
        repo.path(),
        &[
            "compare",
            whole.to_str().unwrap(),
            part.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc = json_of(&out);
    let diffs = doc["differences"].as_array().unwrap_or_else(|| panic!("{doc}"));
    let o = diffs
        .iter()
        .find(|d| d["fact"] == "overrides")
        .unwrap_or_else(|| panic!("no overrides difference: {doc}"));
    assert_eq!(o["a"], "none", "{o}");
    assert_eq!(o["b"], "--where elements=16 --repetitions 3", "{o}");
    let out = hwr(
        repo.path(),
        &["compare", whole.to_str().unwrap(), part.to_str().unwrap()],
    );
    assert!(
        stdout(&out).contains("--where elements=16 --repetitions 3"),
        "{}",
        stdout(&out)
    );
}
