//! Issue 21 item 3: `hwr-exp bisect MANIFEST --good REV --bad REV [--where KEY=VALUE]...
//! [--repetitions N]` over a real git repository whose commits change a small script printing the
//! retention schema (DESIGN 7): each probed commit runs in a temporary worktree, in adaptive
//! rounds, as a bundle of its own.

use std::path::Path;

use crate::support::{Repo, code, hwr, json, repo, stderr, stdout};

/// The probe at a commit: `mode` other than `reuse` grows by `leak` bytes per 1000 iterations;
/// both modes get the same page of noise (by repetition), so without a leak no number of runs
/// tells them apart. `first` is a line run before anything else ([`BROKEN`], [`HANGS`] or "").
fn script(leak: i64, first: &str) -> String {
    format!(
        r#"#!/bin/sh
{}mode=$1
case "$mode" in reuse) rate=0 ;; *) rate={leak} ;; esac
R=${{HWR_REPETITION:-1}}
printf '{{"schema_version":1,"arguments":{{"mode":"%s"}},"samples":[' "$mode"
i=0
while [ $i -le 5 ]; do
  j=$(( (R + i) % 2 ))
  p=$(( 1048576 + rate * i + 4096 * j ))
  phase=loop; [ $i -eq 0 ] && phase=baseline
  printf '{{"phase":"%s","iterations":%d,"private_bytes":%d,"anonymous_bytes":%d,"rss_bytes":%d,"fd_count":3}},' $phase $((i * 1000)) $p $p $((p + 65536))
  i=$((i + 1))
done
printf '{{"phase":"closed","iterations":5000,"private_bytes":1048576,"anonymous_bytes":1048576,"rss_bytes":1114112,"fd_count":3}}],"completed":true}}\n'
"#,
        first
    )
}

/// A probe that fails before printing anything.
const BROKEN: &str = "echo 'probe.sh: syntax error near line 3' >&2; exit 1\n";

/// A probe that hangs (past the manifest's timeout, when it has one).
const HANGS: &str = "exec sleep 60\n";

const MANIFEST: &str = r#"format = 1
[experiment]
name = "bisect-demo"
[command]
argv = ["sh", "probe.sh", "{mode}"]
[matrix]
mode = ["get", "view", "reuse"]
[report]
control = { mode = "reuse" }
"#;

/// Commits `(leak, first line)` one after the other (the manifest, with `extra` lines appended,
/// and `.gitignore` in the first); returns the commit ids in order.
fn history_with(repo: &Repo, extra: &str, commits: &[(i64, &str)]) -> Vec<String> {
    let mut ids = Vec::new();
    for (n, &(leak, first)) in commits.iter().enumerate() {
        if n == 0 {
            repo.write("experiment.toml", format!("{MANIFEST}{extra}"))
                .write(".gitignore", "results/\n");
        }
        repo.write("probe.sh", script(leak, first));
        repo.write("HISTORY", format!("commit {}\n", n + 1));
        ids.push(repo.commit(&format!("commit {}", n + 1)));
    }
    ids
}

fn bisect(dir: &Path, good: &str, bad: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "bisect",
        "experiment.toml",
        "--good",
        good,
        "--bad",
        bad,
        "--results-dir",
        "results",
    ];
    args.extend_from_slice(extra);
    hwr(dir, &args)
}

fn history(repo: &Repo, commits: &[(i64, &str)]) -> Vec<String> {
    history_with(repo, "", commits)
}

/// The steps' bundle.json files, by step.
fn steps(dir: &Path) -> Vec<serde_json::Value> {
    let mut infos: Vec<serde_json::Value> = crate::support::bundles(&dir.join("results"), "bisect-demo")
        .iter()
        .map(|b| json(&b.join("bundle.json")))
        .collect();
    infos.sort_by_key(|i| i["bisect"]["step"].as_u64());
    infos
}

#[test]
fn eight_commits_the_fifth_leaks_and_the_sixth_fails() {
    let repo = repo();
    const LEAK: i64 = 40960;
    let ids = history(
        &repo,
        &[
            (0, ""),
            (0, ""),
            (0, ""),
            (0, ""),
            (LEAK, ""),
            (LEAK, BROKEN),
            (LEAK, ""),
            (LEAK, ""),
        ],
    );
    let out = bisect(
        repo.path(),
        &ids[0],
        &ids[7],
        &["--where", "mode=get", "--repetitions", "6"],
    );
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}\n{}", stderr(&out));
    let last = text.lines().last().unwrap();
    assert_eq!(last, format!("first bad commit: {} commit 5", ids[4]), "{text}");
    let infos = steps(repo.path());
    assert!(infos.len() <= 4, "{} commits probed:\n{text}", infos.len());
    let probed: Vec<&str> = infos
        .iter()
        .map(|i| i["bisect"]["commit"].as_str().unwrap())
        .collect();
    assert!(
        probed.contains(&ids[4].as_str()),
        "the 5th was probed: {probed:?}"
    );
    assert!(
        probed.contains(&ids[5].as_str()),
        "the 6th was probed: {probed:?}"
    );
    // One session; each step names the one before as parent.
    let session = infos[0]["bisect"]["session"].clone();
    for (k, info) in infos.iter().enumerate() {
        assert_eq!(info["bisect"]["session"], session);
        assert_eq!(info["bisect"]["step"], k as u64 + 1);
        if k > 0 {
            assert!(info["parent"].is_string(), "{info:#}");
        }
        // Only the selected cell and its control ran, in adaptive rounds up to 6.
        assert_eq!(info["adaptive"]["max"], 6, "{info:#}");
        let cells: Vec<&str> = info["adaptive"]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["cell"]["mode"].as_str().unwrap())
            .collect();
        assert_eq!(cells, ["get", "reuse"], "{info:#}");
    }
    // The evidence table: the bad commit above control with its interval, the 6th skipped.
    let fifth = text
        .lines()
        .find(|l| l.contains(&ids[4][..10]))
        .unwrap_or_else(|| panic!("no row for the 5th:\n{text}"));
    assert!(
        fifth.contains("above control") && fifth.contains("bad"),
        "{fifth}"
    );
    assert!(
        fifth.contains('[') && fifth.contains("KiB"),
        "shift and interval: {fifth}"
    );
    let sixth = text
        .lines()
        .find(|l| l.contains(&ids[5][..10]))
        .unwrap_or_else(|| panic!("no row for the 6th:\n{text}"));
    assert!(sixth.contains("skip") && sixth.contains("failed"), "{sixth}");
    // A good commit: no detectable difference after the most runs.
    let good_row = text
        .lines()
        .find(|l| l.contains(" good") && l.contains("no detectable difference"));
    assert!(good_row.is_some(), "{text}");
    // A step reruns at its commit (the bundle records the worktree's paths; the worktree is gone).
    let bad_step = crate::support::bundles(&repo.path().join("results"), "bisect-demo")
        .into_iter()
        .find(|b| json(&b.join("bundle.json"))["bisect"]["commit"] == ids[4].as_str())
        .unwrap();
    let rerun = hwr(
        repo.path(),
        &[
            "rerun",
            bad_step.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    assert_eq!(code(&rerun), 0, "{}", stderr(&rerun));
    // The temporary worktrees are gone.
    let worktrees = repo.git(&["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
}

/// With BAD the child of GOOD nothing is probed: the output says the answer is only the
/// endpoints as given (they are never run), not measured evidence (a new user's trial read it
/// as a measured first bad commit).
#[test]
fn a_bad_next_to_good_is_named_as_given_not_as_measured() {
    let repo = repo();
    let ids = history(&repo, &[(40960, ""), (40960, "")]);
    let out = bisect(repo.path(), &ids[0], &ids[1], &["--repetitions", "4", "--quiet"]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}\n{}", stderr(&out));
    assert!(text.contains("taken as given, not run"), "{text}");
    assert!(text.contains("no commit was probed"), "{text}");
    assert!(steps(repo.path()).is_empty(), "nothing runs: {text}");
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with(&format!("first bad commit: {}", ids[1])),
        "{last}"
    );
}

#[test]
fn only_skipped_commits_between_good_and_bad_is_not_decidable() {
    let repo = repo();
    let ids = history(&repo, &[(0, ""), (0, BROKEN), (40960, "")]);
    let out = bisect(repo.path(), &ids[0], &ids[2], &["--repetitions", "4", "--quiet"]);
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "{text}\n{}", stderr(&out));
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("not decidable: the first bad commit is one of"),
        "{last}"
    );
    assert!(
        last.contains(&ids[1][..10]) && last.contains(&ids[2][..10]),
        "{last}"
    );
}

#[test]
fn revisions_that_do_not_bisect_are_usage_errors() {
    let repo = repo();
    let ids = history(&repo, &[(0, ""), (40960, "")]);
    let out = bisect(repo.path(), &ids[1], &ids[0], &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not an ancestor of --bad"),
        "{}",
        stderr(&out)
    );
    let out = bisect(repo.path(), "no-such-rev", &ids[1], &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--good no-such-rev: no such commit"),
        "{}",
        stderr(&out)
    );
    let out = bisect(repo.path(), &ids[0], &ids[1], &["--repetitions", "1"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = bisect(repo.path(), &ids[0], &ids[1], &["--where", "mode=nope"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(!repo.path().join("results").exists());
}

#[test]
fn a_commit_whose_runs_time_out_is_skipped_and_the_bisect_goes_on() {
    let repo = repo();
    let ids = history_with(
        &repo,
        "[isolation]\ntimeout = \"1s\"\ngrace = \"1s\"\n",
        &[(0, ""), (40960, ""), (40960, HANGS), (40960, ""), (40960, "")],
    );
    let out = bisect(
        repo.path(),
        &ids[0],
        &ids[4],
        &["--where", "mode=get", "--repetitions", "5"],
    );
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}\n{}", stderr(&out));
    assert_eq!(
        text.lines().last().unwrap(),
        format!("first bad commit: {} commit 2", ids[1]),
        "{text}"
    );
    // The middle commit was probed first: its runs timed out, a value recorded in its bundle.
    let third = text
        .lines()
        .find(|l| l.contains(&ids[2][..10]))
        .unwrap_or_else(|| panic!("no row for the 3rd:\n{text}"));
    assert!(third.contains("skip") && third.contains("timeout"), "{third}");
    let infos = steps(repo.path());
    assert_eq!(infos[0]["bisect"]["commit"], ids[2].as_str());
    assert_eq!(infos[0]["status"], "complete", "{:#}", infos[0]);
    assert_eq!(infos[0]["counts"]["timeout"], 8, "{:#}", infos[0]);
    assert_eq!(infos[0]["adaptive"]["stopping-reason"], "no estimates");
}

/// Issue 37 item 3: each probed commit runs with its submodules checked out at the commits it
/// names (before, every submodule was an empty folder in the probe's worktree). The leak lives in
/// the submodule: the superproject's third commit moves `lib` to the leaking commit.
#[test]
fn each_probed_commit_has_its_submodules_checked_out() {
    let lib = Repo::new();
    let clean = lib.write("leak.txt", "0\n").commit("no leak");
    let leaking = lib.write("leak.txt", "40960\n").commit("leak");
    let sup = Repo::new();
    let probe = script(0, "LEAK=$(cat lib/leak.txt) || exit 1\n").replace("*) rate=0 ;;", "*) rate=$LEAK ;;");
    sup.write("experiment.toml", MANIFEST)
        .write(".gitignore", "results/\n")
        .write("probe.sh", probe);
    let url = format!("file://{}", lib.path().display());
    crate::support::git_file_protocol(sup.path(), &["submodule", "add", "-q", &url, "lib"]);
    crate::support::git(&sup.path().join("lib"), &["checkout", "-q", &clean]);
    let mut ids = vec![sup.commit("commit 1")];
    ids.push(sup.write("HISTORY", "2\n").commit("commit 2"));
    crate::support::git(&sup.path().join("lib"), &["checkout", "-q", &leaking]);
    ids.push(sup.commit("commit 3"));
    ids.push(sup.write("HISTORY", "4\n").commit("commit 4"));

    let out = bisect(
        sup.path(),
        &ids[0],
        &ids[3],
        &["--where", "mode=get", "--repetitions", "6"],
    );
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}\n{}", stderr(&out));
    let last = text.lines().last().unwrap();
    assert_eq!(last, format!("first bad commit: {} commit 3", ids[2]), "{text}");
}
