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

/// A metric pointer is at most 120 tokens deep (the reader recurses along it only); `check` says
/// so instead of a report that cannot read it.
#[test]
fn check_refuses_a_metric_pointer_deeper_than_120_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let ok = "/a".repeat(120);
    let deep = "/a".repeat(121);
    let base = ManifestBuilder::shell("ptr", "echo 1");
    let m = base
        .clone()
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([("m", ok.as_str())]),
        )
        .write(dir.path());
    let out = crate::support::hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let m = base
        .set(
            "report",
            "metrics",
            crate::support::manifest::table([("m", deep.as_str())]),
        )
        .write(dir.path());
    let out = crate::support::hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("121 tokens, more than 120"),
        "{}",
        stderr(&out)
    );
}

/// `hwr-exp ARGS` in `dir` from a shell that set `umask 077` first (never in this process).
fn hwr_umask_077(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut sh = std::process::Command::new("/bin/sh");
    crate::support::isolate_git(&mut sh)
        .arg("-c")
        .arg(r#"umask 077; exec "$@""#)
        .arg("sh")
        .arg(crate::support::bin())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Every folder and file under `root` whose mode is not 0755 (folders) or 0644 (files).
fn wrong_modes(root: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut wrong = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            let want = if meta.is_dir() { 0o755 } else { 0o644 };
            if mode != want {
                wrong.push(format!("{} {mode:o}", e.path().display()));
            }
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    wrong
}

/// Under `umask 077`, the `attempts/` folders resume makes are 0755 like every other folder (they
/// were 0700), and a second resume numbers the next attempt after the first.
#[test]
fn resume_under_umask_077_keeps_attempts_in_0755_folders() {
    let repo = repo();
    repo.write(".gitignore", "results/\nstop\n").commit("ignore");
    // The second run interrupts the runner (its parent) while the `stop` marker exists.
    let m = ManifestBuilder::shell(
        "attempts",
        "echo started-{repetition}; if [ {repetition} -eq 2 ] && [ -e stop ]; then kill -INT $PPID; sleep 30; fi; echo done",
    )
    .text_output()
    .repetitions(2)
    .write(repo.path());
    std::fs::write(repo.path().join("stop"), "").unwrap();
    let m = m.to_str().unwrap();
    let out = hwr_umask_077(repo.path(), &["run", m, "--quiet", "--results-dir", "results"]);
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let bundle = crate::support::the_bundle(&repo.path().join("results"), "attempts");
    let b = bundle.to_str().unwrap();
    // Resumed while the marker is still there: interrupted again, attempt 1 kept.
    let out = hwr_umask_077(repo.path(), &["resume", b, "--quiet"]);
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    std::fs::remove_file(repo.path().join("stop")).unwrap();
    let out = hwr_umask_077(repo.path(), &["resume", b, "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_dir = bundle.join("runs/001-r2");
    for n in ["1", "2"] {
        let kept = run_dir.join("attempts").join(n);
        assert_eq!(
            std::fs::read_to_string(kept.join("stderr.log")).map(|_| ()).ok(),
            Some(()),
            "attempt {n} kept whole: {}",
            kept.display()
        );
        assert!(
            std::fs::read_to_string(kept.join("001-r2.txt"))
                .unwrap()
                .starts_with("started-2\n"),
            "attempt {n}"
        );
    }
    assert!(!run_dir.join("attempts/3").exists());
    assert_eq!(
        wrong_modes(&bundle),
        Vec::<String>::new(),
        "files not 0644 / folders not 0755"
    );
    let verify = crate::support::hwr(repo.path(), &["verify", b]);
    assert_eq!(code(&verify), 0, "{}", crate::support::stdout(&verify));
}

/// Issue 22.2: a manifest outside any git repository runs with a warning, and `report`, the HTML
/// report and `list` say the provenance was `not recorded` (they said `dirty tree: no`).
#[test]
fn provenance_outside_a_repository_is_not_recorded_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let m = ManifestBuilder::shell("norepo", "echo hi")
        .text_output()
        .write(dir.path());
    let out = crate::support::hwr(
        dir.path(),
        &["run", m.to_str().unwrap(), "--results-dir", "results"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: provenance not recorded: no git repository"),
        "{}",
        stderr(&out)
    );
    let bundle = crate::support::printed_path(dir.path(), &out);
    let b = bundle.to_str().unwrap();
    let report = crate::support::hwr(dir.path(), &["report", b]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let text = crate::support::stdout(&report);
    assert!(text.contains("dirty tree: not recorded"), "{text}");
    assert!(text.contains("drift: not recorded"), "{text}");
    assert!(!text.lines().any(|l| l.ends_with("dirty tree: no")), "{text}");
    let json = crate::support::hwr(dir.path(), &["report", b, "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["provenance-recorded"], false, "{json:#}");
    let list = crate::support::hwr(dir.path(), &["list", "results"]);
    let text = crate::support::stdout(&list);
    assert!(text.contains("not recorded"), "{text}");
    let list = crate::support::hwr(dir.path(), &["list", "results", "--format", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["provenance-recorded"], false, "{list:#}");
    assert!(list[0]["dirty"].is_null(), "{list:#}");
    // In a repository the same keys say it was recorded.
    let repo = repo();
    let m = ManifestBuilder::shell("inrepo", "echo hi")
        .text_output()
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("provenance not recorded"),
        "{}",
        stderr(&out)
    );
    let report = crate::support::hwr(repo.path(), &["report", bundle.unwrap().to_str().unwrap()]);
    assert!(crate::support::stdout(&report).contains("dirty tree: yes"));
}

/// Issue 22.4: `inf`/`nan` matrix values made plan.json and run.json hold `null`, and the bundle
/// could not be read (report and compare exit 2, verify 1). `check` refuses them (JSON has no
/// such numbers), saying to write a string; as strings they run, and every reader reads the
/// bundle.
#[test]
fn non_finite_matrix_values_are_refused_and_strings_of_them_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for (value, what) in [
        ("inf", "is infinite"),
        ("-inf", "is infinite"),
        ("+inf", "is infinite"),
        ("nan", "is not a number (nan)"),
        ("-nan", "is not a number (nan)"),
        ("1e400", "is out of range of a 64-bit float"),
    ] {
        let text = format!(
            "format = 1\n[experiment]\nname = \"nf\"\n[command]\nshell = \"echo {{x}}\"\noutput-format = \"text\"\n[matrix]\nx = [1.5, {value}]\n"
        );
        let m = crate::support::write_manifest(dir.path(), &text);
        for cmd in ["check", "plan"] {
            let out = crate::support::hwr(dir.path(), &[cmd, m.to_str().unwrap()]);
            assert_eq!(code(&out), 2, "[{cmd} {value}] {}", stderr(&out));
            let err = stderr(&out);
            assert!(
                err.contains(&format!("matrix value `{value}` {what}")),
                "[{cmd} {value}] {err}"
            );
            assert!(
                err.contains(&format!("write it as a string, \"{value}\"")),
                "[{value}] {err}"
            );
        }
        let out = crate::support::hwr(
            dir.path(),
            &["run", m.to_str().unwrap(), "--results-dir", "results"],
        );
        assert_eq!(code(&out), 2, "[run {value}] {}", stderr(&out));
        assert!(!dir.path().join("results").exists(), "[{value}] nothing written");
    }
    // The same values as strings: the run gets the text, and the bundle reads back everywhere.
    let repo = repo();
    let m = ManifestBuilder::shell("nf", "echo {x}")
        .text_output()
        .matrix("x", ["inf", "nan", "-inf"])
        .write(repo.path());
    let mut bundles = Vec::new();
    for _ in 0..2 {
        let (out, bundle) = run(repo.path(), &m);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        bundles.push(bundle.unwrap());
    }
    let b = bundles[0].to_str().unwrap();
    let plan = crate::support::json(&bundles[0].join("plan.json"));
    assert!(plan.to_string().contains("\"inf\""), "{plan}");
    let outputs: Vec<String> = crate::support::run_records(&bundles[0])
        .iter()
        .map(|r| r["cell"]["x"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(outputs, ["inf", "nan", "-inf"]);
    for args in [
        vec!["report", b],
        vec!["report", b, "--format", "json"],
        vec!["verify", b],
        vec!["compare", b, bundles[1].to_str().unwrap()],
    ] {
        let out = crate::support::hwr(repo.path(), &args);
        assert_eq!(
            code(&out),
            0,
            "{args:?}: {}{}",
            crate::support::stdout(&out),
            stderr(&out)
        );
    }
}

/// A run that puts something at a name hwr-exp writes in its run folder (a folder named run.json,
/// stderr.log, memory.jsonl or mappings.json, its output replaced by a folder, a file of its own
/// named run.json): the thing is moved aside to `<name>.from-run` as an artifact, run.json says so,
/// the other runs go on and the bundle is complete and verifies. A folder named run.json stopped
/// the runner with exit 3 and a bundle that `resume` refused.
#[test]
fn what_a_run_puts_at_the_runners_names_is_moved_aside() {
    let repo = repo();
    let dir = repo.path();
    std::fs::write(
        dir.join("h.sh"),
        r#"case "$1" in
  runjson) mkdir "$2/run.json" ;;
  runfile) echo mine > "$2/run.json" ;;
  memory) mkdir "$2/memory.jsonl" ;;
  mappings) mkdir "$2/mappings.json" ;;
  stderr) rm -f "$2/stderr.log"; mkdir "$2/stderr.log" ;;
  output) rm -f "$2/out-output.txt"; mkdir "$2/out-output.txt" ;;
esac
echo hi
"#,
    )
    .unwrap();
    let m = ManifestBuilder::shell("taken", "sh ./h.sh {k} '{run-dir}'")
        .text_output()
        .set("command", "output", "out-{k}.txt")
        .matrix(
            "k",
            [
                "runjson", "runfile", "memory", "mappings", "stderr", "output", "ok",
            ],
        )
        .write(dir);
    let (out, bundle) = run(dir, &m);
    let bundle = bundle.unwrap_or_else(|| panic!("{}", stderr(&out)));
    // Exit 1: the run whose output became a folder has invalid output; the others are ok.
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("bundle.json")).unwrap()).unwrap();
    assert_eq!(info["status"], "complete", "{info:#}");
    assert_eq!(info["counts"]["ok"], 6, "{info:#}");
    let verify = crate::support::hwr(dir, &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}", crate::support::stdout(&verify));
    let record = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(bundle.join("runs").join(id).join("run.json")).unwrap())
            .unwrap()
    };
    for (id, name, what) in [
        ("000-runjson-r1", "run.json", "a folder"),
        ("001-runfile-r1", "run.json", "a file"),
        ("002-memory-r1", "memory.jsonl", "a folder"),
        ("003-mappings-r1", "mappings.json", "a folder"),
        ("004-stderr-r1", "stderr.log", "a folder"),
        ("005-output-r1", "out-output.txt", "a folder"),
    ] {
        let r = record(id);
        let error = r["error"].as_str().unwrap_or_else(|| panic!("{id}: {r:#}"));
        assert!(
            error.contains(&format!("the run put {what} at {name}"))
                && error.contains(&format!("moved to {name}.from-run")),
            "{id}: {error}"
        );
        let artifacts: Vec<&str> = r["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert!(
            artifacts
                .iter()
                .any(|a| a.starts_with(&format!("{name}.from-run"))),
            "{id}: {artifacts:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(bundle.join("runs/001-runfile-r1/run.json.from-run")).unwrap(),
        "mine\n"
    );
    let output = record("005-output-r1");
    assert_eq!(output["output-check"], "invalid");
    assert!(
        output["output-check-reason"]
            .as_str()
            .unwrap()
            .contains("moved to out-output.txt.from-run")
    );
    assert!(record("006-ok-r1")["error"].is_null());
}
