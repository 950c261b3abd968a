//! `hwr-exp run` end to end: real processes, temporary git repositories, the bundle on disk.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::manifest::table;
use crate::support::{Cpus, Lines, Signal, need, signal, wait_for_file};
use crate::support::{
    ManifestBuilder, code, group_members, hwr, hwr_command, json, printed_path, repo, run, run_records,
    sha256_hex, spawn_run, stderr, wait_for,
};

/// SHA-256 of the file at `path`, in hex.
fn sha256(path: &Path) -> String {
    sha256_hex(&std::fs::read(path).unwrap())
}

#[test]
fn complete_bundle_with_every_file() {
    let repo = repo();
    std::fs::write(repo.path().join("untracked.txt"), "new\n").unwrap();
    let m = ManifestBuilder::shell(
        "echo-json",
        r#"printf '{{"mode": "%s", "n": %s, "rep": %s}}\n' {mode} {n} {repetition}"#,
    )
    .set("experiment", "description", "prints its cell as JSON")
    .output("{mode}-{n}-{repetition}.json")
    .matrix("mode", ["a", "b"])
    .matrix("n", [1, 2])
    .repetitions(2)
    .isolation("timeout", "30s")
    .set("measure", "sample-interval", "10ms")
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle path on stdout");
    assert!(bundle.starts_with(repo.path().join("results/echo-json")));
    for f in [
        "bundle.json",
        "manifest.toml",
        "plan.json",
        "host.json",
        "revision.txt",
        "working-tree.txt",
        "working-tree.patch",
        "provenance.json",
    ] {
        assert!(bundle.join(f).is_file(), "{f} missing");
    }
    assert!(!bundle.join(".lock").exists(), "lock removed at the end");
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "complete");
    assert_eq!(info["counts"]["ok"], 8);
    assert_eq!(info["bundle-format"], 1);
    assert_eq!(
        std::fs::read(bundle.join("manifest.toml")).unwrap(),
        std::fs::read(&m).unwrap()
    );
    assert_eq!(info["manifest-sha256"], sha256(&m));
    assert_eq!(
        std::fs::read_to_string(bundle.join("revision.txt"))
            .unwrap()
            .trim(),
        repo.head()
    );
    let tree = std::fs::read_to_string(bundle.join("working-tree.txt")).unwrap();
    assert!(tree.contains("?? untracked.txt"), "{tree}");

    let records = run_records(&bundle);
    assert_eq!(records.len(), 8);
    let r = &records[5];
    assert_eq!(r["run-id"], "005-a-2-r2");
    assert_eq!(r["termination"], "exited");
    assert_eq!(r["exit-code"], 0);
    assert_eq!(r["output-check"], "valid");
    assert_eq!(r["outcome"], "ok");
    assert_eq!(
        r["cpus-effective"], r["cpus-requested"],
        "affinity read back from the child"
    );
    assert!(r["wall-seconds"].as_f64().unwrap() > 0.0);
    assert!(r["peak-rss-bytes"].as_u64().unwrap() > 0);
    let dir = bundle.join("runs/005-a-2-r2");
    let output = std::fs::read_to_string(dir.join("a-2-2.json")).unwrap();
    assert_eq!(output, "{\"mode\": \"a\", \"n\": 2, \"rep\": 2}\n");
    assert_eq!(r["sha256"]["a-2-2.json"], sha256(&dir.join("a-2-2.json")));
    assert!(dir.join("stderr.log").is_file());
    // Made at the first sample only: no empty file for a run too short for one.
    assert_eq!(
        dir.join("memory.jsonl").is_file(),
        r["memory-samples"].as_u64().unwrap() > 0,
        "{r}"
    );
    let env = r["env"]["set"].as_array().unwrap();
    assert!(
        env.iter()
            .any(|kv| kv[0] == "CUDA_VISIBLE_DEVICES" && kv[1] == ""),
        "{env:?}"
    );
    assert!(
        !env.iter().any(|kv| kv[0] == "HOME"),
        "only changed variables are recorded"
    );
}

#[test]
fn environment_reaches_the_run_exactly() {
    let repo = repo();
    for policy in ["inherit", "clean"] {
        let m = ManifestBuilder::shell(
            &format!("env-{policy}"),
            r#"echo "cuda=${{CUDA_VISIBLE_DEVICES-unset}} empty=${{EMPTY-unset}} gone=${{GONE-unset}} path=${{PATH:+yes}} secret=${{SECRET-unset}} value=$VALUE run=$HWR_RUN_ID rep=$HWR_REPETITION""#,
        )
        .output("env.txt")
        .isolation("env-policy", policy)
        .isolation("env", table([("EMPTY", ""), ("VALUE", "{repetition}-x")]))
        .isolation("env-unset", vec!["GONE"])
        .write(repo.path());
        let out = hwr_command(repo.path())
            .env("GONE", "here")
            .env("SECRET", "s3cret")
            .arg("run")
            .arg(&m)
            .args(["--quiet", "--results-dir", "results"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let bundle = printed_path(repo.path(), &out);
        let r = &run_records(&bundle)[0];
        let dir = bundle.join("runs").join(r["run-id"].as_str().unwrap());
        let text = std::fs::read_to_string(dir.join("env.txt")).unwrap();
        assert!(text.contains("cuda= "), "{text}");
        assert!(text.contains("empty= "), "{text}");
        assert!(text.contains("gone=unset"), "{text}");
        assert!(text.contains("path=yes"), "{text}");
        assert!(text.contains("value=1-x"), "{text}");
        assert!(
            text.contains(&format!("run={} ", r["run-id"].as_str().unwrap())),
            "{text}"
        );
        assert!(text.contains("rep=1"), "{text}");
        let secret = if policy == "clean" {
            "secret=unset"
        } else {
            "secret=s3cret"
        };
        assert!(text.contains(secret), "{policy}: {text}");
        let recorded = std::fs::read_to_string(dir.join("run.json")).unwrap();
        assert!(
            !recorded.contains("s3cret"),
            "the environment is not recorded whole"
        );
    }
}

#[test]
fn timeout_kills_the_whole_group_including_a_grandchild_holding_stdout() {
    let repo = repo();
    // Both sleeps leave a mark when they end on their own; a runner that waited for them (for
    // the end of stdout) would return after it.
    let m = ManifestBuilder::shell("hang", "(sleep 60; : > late) & echo started; sleep 60; : > late")
        .text_output()
        .isolation("timeout", "2s")
        .isolation("grace", "1s")
        .write(repo.path());
    let start = Instant::now();
    let (out, bundle) = run(repo.path(), &m);
    let took = start.elapsed();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        !repo.path().join("late").exists(),
        "the runner waited for the run's processes: returned after {took:?}"
    );
    let r = &run_records(&bundle.unwrap())[0];
    assert_eq!(r["termination"], "timeout");
    assert_eq!(r["outcome"], "timeout");
    let pid = r["pid"].as_i64().unwrap();
    assert!(
        group_members(pid).is_empty(),
        "processes of group {pid} survived: {:?}",
        group_members(pid)
    );
}

#[test]
fn own_timeout_exit_124_and_signals_are_told_apart() {
    let repo = repo();
    let m = ManifestBuilder::argv("codes", &["sh", "-c", "{cmd}"])
        .text_output()
        .matrix("cmd", ["timeout 0.2 sleep 5", "kill -TERM $$", "exit 3"])
        .isolation("timeout", "20s")
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 1);
    let records = run_records(&bundle.unwrap());
    assert_eq!(records[0]["termination"], "exited");
    assert_eq!(records[0]["exit-code"], 124);
    assert_eq!(records[1]["termination"], "signaled");
    assert_eq!(records[1]["signal"], 15);
    assert_eq!(records[2]["exit-code"], 3);
    assert_eq!(records[2]["outcome"], "failed");
}

#[test]
fn garbage_output_is_recorded_as_invalid_and_kept() {
    let repo = repo();
    let m = ManifestBuilder::shell(
        "garbage",
        r#"echo "UserWarning: something"; echo '{{"a": 1}}'; echo "Traceback (most recent call last):" >&2"#,
    )
    .output("out.json")
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 1);
    let bundle = bundle.unwrap();
    let r = &run_records(&bundle)[0];
    assert_eq!(r["output-check"], "invalid");
    assert!(r["output-check-reason"].as_str().unwrap().len() > 3);
    assert_eq!(r["outcome"], "invalid-output");
    let dir = bundle.join("runs").join(r["run-id"].as_str().unwrap());
    assert!(
        std::fs::read_to_string(dir.join("out.json"))
            .unwrap()
            .starts_with("UserWarning")
    );
    assert!(
        std::fs::read_to_string(dir.join("stderr.log"))
            .unwrap()
            .contains("Traceback")
    );
}

#[test]
fn hostile_matrix_values_stay_inside_the_bundle() {
    let repo = repo();
    let m = ManifestBuilder::argv("hostile", &["echo", "{v}"])
        .output("{v}.txt")
        .matrix("v", ["../../escape", "a/b", ".."])
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    assert!(!repo.path().join("escape.txt").exists());
    for r in run_records(&bundle) {
        let dir = bundle.join("runs").join(r["run-id"].as_str().unwrap());
        assert!(dir.starts_with(bundle.join("runs")) && dir.is_dir());
        let output = r["output"].as_str().unwrap();
        assert!(
            !output.contains('/') && output != ".." && output != ".",
            "{output}"
        );
        assert!(dir.join(output).is_file());
    }
}

#[test]
fn cpu_outside_the_allowed_set_fails_before_anything_is_written() {
    let repo = repo();
    let m = ManifestBuilder::argv("cpus", &["true"])
        .isolation("cpus", vec![4095])
        .write(repo.path());
    let (out, _) = run(repo.path(), &m);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("4095"), "{}", stderr(&out));
    assert!(!repo.path().join("results").exists(), "nothing written");
}

#[test]
fn missing_program_is_a_preflight_error_naming_path() {
    let repo = repo();
    let m = ManifestBuilder::argv("missing", &["hwr-exp-no-such-program", "x"]).write(repo.path());
    let (out, _) = run(repo.path(), &m);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("PATH"), "{}", stderr(&out));
    assert!(!repo.path().join("results").exists(), "nothing written");
}

#[test]
fn tree_changed_during_the_run_sets_drift() {
    let repo = repo();
    let m = ManifestBuilder::shell("drift", "echo changed >> README")
        .text_output()
        .write(repo.path());
    repo.commit("manifest");
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let prov = json(&bundle.unwrap().join("provenance.json"));
    assert_eq!(prov["drift"], true, "{prov}");
}

/// The newest change time (ctime) of `path` and, for a folder, of everything beneath it.
fn newest_change(path: &Path) -> std::time::SystemTime {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    let own = std::time::UNIX_EPOCH + Duration::new(meta.ctime() as u64, meta.ctime_nsec() as u32);
    if !meta.is_dir() {
        return own;
    }
    std::fs::read_dir(path)
        .unwrap()
        .map(|e| newest_change(&e.unwrap().path()))
        .fold(own, std::cmp::max)
}

#[test]
fn an_excludes_file_named_by_git_config_global_edited_during_a_run_sets_drift() {
    // GIT_CONFIG_GLOBAL names a configuration (git reads it, libgit2 does not) whose
    // core.excludesFile hides secret.txt; the second run empties that file, so secret.txt shows.
    let repo = repo();
    let ext = tempfile::tempdir().unwrap();
    let (ignore, config, second) = (
        ext.path().join("ignore"),
        ext.path().join("config"),
        ext.path().join("second"),
    );
    std::fs::write(&ignore, "secret.txt\n").unwrap();
    std::fs::write(
        &config,
        format!("[core]\n\texcludesFile = {}\n", ignore.display()),
    )
    .unwrap();
    std::fs::write(repo.path().join(".gitignore"), "results/\n").unwrap();
    let script = format!(
        "if [ -f {} ]; then echo '# none' > {}; fi; echo ok",
        second.display(),
        ignore.display()
    );
    let m = ManifestBuilder::shell("cfg", &script)
        .text_output()
        .write(repo.path());
    repo.commit("manifest");
    std::fs::write(repo.path().join("secret.txt"), "s\n").unwrap();
    let run = || {
        hwr_command(repo.path())
            .env("GIT_CONFIG_GLOBAL", &config)
            .arg("run")
            .arg(&m)
            .args(["--results-dir", "results", "--quiet"])
            .output()
            .expect("hwr-exp runs")
    };
    let first = run();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    std::fs::write(&second, "").unwrap();
    // The after-run check is tried only on a tree whose every change is older than its margin
    // (50 ms) when the capture starts: without it the full capture would run anyway and this
    // test could not fail. Wait until the tree's newest change (the first run's bundle) is three
    // margins old.
    let newest = newest_change(repo.path());
    while std::time::SystemTime::now() < newest + Duration::from_millis(150) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|p| repo.path().join(p))
        .unwrap();
    let prov = json(&bundle.join("provenance.json"));
    assert_eq!(prov["drift"], true, "{prov}");
}

#[test]
fn sigint_stops_the_run_in_flight_and_marks_the_bundle_interrupted() {
    let repo = repo();
    ManifestBuilder::shell("interrupt", "sleep 1; echo done")
        .text_output()
        .repetitions(5)
        .write(repo.path());
    // Without --quiet, stderr is one line per finished run.
    let mut child = hwr_command(repo.path())
        .args(["run", "experiment.toml", "--results-dir", "results"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut progress = Lines::read(child.stderr.take().unwrap());
    progress.wait_for("[2/5]", Duration::from_secs(30));
    signal(child.id(), Signal::INT);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&progress.rest()).into_owned();
    assert_eq!(code(&out), 130, "{err}");
    let bundle = printed_path(repo.path(), &out);
    let info = json(&bundle.join("bundle.json"));
    assert_eq!(info["status"], "interrupted");
    let records = run_records(&bundle);
    assert!(
        records.len() >= 2 && records.len() < 5,
        "{} runs recorded",
        records.len()
    );
    assert_eq!(records[0]["outcome"], "ok");
    let last = records.last().unwrap();
    assert_eq!(last["termination"], "interrupted");
    assert!(group_members(last["pid"].as_i64().unwrap()).is_empty());
}

#[test]
fn jobs_run_at_once_on_disjoint_cpus() {
    if need(Cpus(2)).is_none() {
        return;
    }
    let repo = repo();
    // A rendezvous instead of a stopwatch: each run leaves a marker, then waits for the marker
    // of its partner (runs 1 and 2 wait for 2 markers, runs 3 and 4 for 4), so the runs end only
    // if two of them are alive at once. One at a time, the first run would wait in vain: after
    // its 6,000 looks (one every 0.1 s at least, however loaded the machine) it exits 1.
    let markers = repo.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let d = markers.display();
    let script = format!(
        "grep Cpus_allowed_list /proc/self/status; : > {d}/arrived-$HWR_REPETITION; \
         need=$((HWR_REPETITION + HWR_REPETITION % 2)); i=0; \
         while [ $(ls {d} | wc -l) -lt $need ]; do i=$((i + 1)); [ $i -gt 6000 ] && exit 1; sleep 0.1; done"
    );
    let m = ManifestBuilder::shell("jobs", &script)
        .text_output()
        .repetitions(4)
        .set("schedule", "jobs", 2)
        .set("isolation", "timeout", "1200s")
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let records = run_records(&bundle.unwrap());
    assert_ne!(records[0]["cpus-effective"], records[1]["cpus-effective"]);
    assert_eq!(records[0]["cpus-effective"], records[2]["cpus-effective"]);
}

#[test]
fn plan_formats() {
    let repo = repo();
    ManifestBuilder::argv("p", &["echo", "{mode}"])
        .matrix("mode", ["x y", "z"])
        .isolation("timeout", "120s")
        .isolation("cpus", "auto")
        .write(repo.path());
    let out = hwr(repo.path(), &["plan", "experiment.toml", "--format", "shell"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.contains("CUDA_VISIBLE_DEVICES=''"), "{first}");
    assert!(first.contains("taskset -c "), "{first}");
    assert!(first.contains("timeout -k 5s 120s echo 'x y'"), "{first}");
    // The line really reproduces the run.
    let sh = std::process::Command::new("sh")
        .arg("-c")
        .arg(first)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sh.stdout), "x y\n");

    // Clean policy, a removed variable and an odd name: the line still runs as the run would.
    let clean = ManifestBuilder::argv(
        "c",
        &[
            "sh",
            "-c",
            "echo ${{FOO-unset}} ${{SECRET-unset}} ${{GONE-unset}} ${{PATH:+path}}",
        ],
    )
    .isolation("env-policy", "clean")
    .isolation("env", table([("FOO", "bar baz"), ("ODD NAME", "x")]))
    .isolation("env-unset", vec!["GONE"])
    .text();
    std::fs::write(repo.path().join("clean.toml"), clean).unwrap();
    let out = hwr(repo.path(), &["plan", "clean.toml", "--format", "shell"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    let sh = std::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env("SECRET", "s")
        .env("GONE", "g")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sh.stdout),
        "bar baz unset unset path\n",
        "{line}"
    );

    let out = hwr(repo.path(), &["plan", "experiment.toml", "--format", "json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["runs"].as_array().unwrap().len(), 2);
    let out = hwr(repo.path(), &["plan", "experiment.toml"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("001-z-r1"));
    assert!(!repo.path().join("results").exists(), "plan writes nothing");
}

#[test]
fn sigkill_of_the_runner_leaves_no_process_of_the_run() {
    let repo = repo();
    ManifestBuilder::shell(
        "killed",
        "echo $$ > leader.pid; sh -c 'sleep 31; :' & sleep 32; :",
    )
    .text_output()
    .write(repo.path());
    let mut child = spawn_run(repo.path());
    let pid_file = repo.path().join("leader.pid");
    let leader: i64 = wait_for_file(&pid_file, "\n", Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    wait_for(
        "leader, sleep 32, sh and sleep 31 to run",
        Duration::from_secs(10),
        || group_members(leader).len() >= 3,
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    wait_for(
        &format!("the processes of group {leader} to die"),
        Duration::from_secs(3),
        || group_members(leader).is_empty(),
    );
}

#[test]
fn preflight_catches_a_missing_provenance_repo_and_an_unwritable_results_folder() {
    let repo = repo();
    let m = ManifestBuilder::argv("p", &["true"])
        .set("provenance", "repo", "no-such-folder")
        .write(repo.path());
    let (out, _) = run(repo.path(), &m);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("no-such-folder"), "{}", stderr(&out));
    assert!(!repo.path().join("results").exists());

    let m = ManifestBuilder::argv("p", &["true"]).write(repo.path());
    let file = repo.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = hwr(
        repo.path(),
        &[
            "run",
            m.to_str().unwrap(),
            "--quiet",
            "--results-dir",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("results folder"), "{}", stderr(&out));
}

#[test]
fn workdir_inside_the_run_folder() {
    let repo = repo();
    let m = ManifestBuilder::shell("w", "pwd; echo x > here.txt")
        .set("command", "workdir", "{run-dir}")
        .output("pwd.txt")
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = &run_records(bundle.as_ref().unwrap())[0];
    let dir = bundle.unwrap().join("runs").join(r["run-id"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.join("pwd.txt")).unwrap().trim(),
        dir.to_str().unwrap()
    );
    assert!(dir.join("here.txt").exists());
}

#[test]
fn memory_samples_cover_the_program_behind_a_shell() {
    let repo = repo();
    let m = ManifestBuilder::shell(
        "shellmem",
        "python3 -c 'import time; x = bytearray(64 << 20); time.sleep(0.6)'; true",
    )
    .text_output()
    .set("measure", "sample-interval", "100ms")
    .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let r = &run_records(&bundle)[0];
    let text = std::fs::read_to_string(
        bundle
            .join("runs")
            .join(r["run-id"].as_str().unwrap())
            .join("memory.jsonl"),
    )
    .unwrap();
    let samples: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // `rss-anon` (status counters) is in every sample; `private` only in the samples whose
    // page-table walk the 1% budget allowed, which a short run under load may not reach.
    let biggest = samples
        .iter()
        .filter_map(|s| s["rss-anon"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(
        biggest > 60 << 20,
        "the python child's 64 MiB are in the samples: {text}"
    );
    assert!(
        samples.iter().any(|s| s["processes"].as_u64() == Some(2)),
        "{text}"
    );
}
