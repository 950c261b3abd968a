//! A run is a closed unit (DESIGN 4): every process it starts is contained, measured and stopped,
//! its run folder is sealed when run.json is written, and interrupted attempts are kept.
//!
//! Real `hwr-exp` processes on real manifests. Each containment test runs twice: with the
//! per-run cgroup (`HWR_CONTAINMENT=cgroup`; skipped with a message where no writable cgroup2
//! exists, failed instead when `HWR_REQUIRE_CGROUP=1`) and with the process-tree fallback forced
//! (`HWR_CONTAINMENT=process-tree`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// The two ways a run is contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Cgroup,
    Tree,
}

impl Mode {
    /// The `HWR_CONTAINMENT` value that forces this mode, which is also run.json's `containment`.
    fn name(self) -> &'static str {
        match self {
            Mode::Cgroup => "cgroup",
            Mode::Tree => "process-tree",
        }
    }

    /// `false` (after saying why, or failing under CI) when this mode cannot be tested on this
    /// machine: the cgroup mode needs a writable cgroup2 mount ([`Cgroup`]).
    #[track_caller]
    fn usable(self) -> bool {
        self == Mode::Tree || need(Cgroup).is_some()
    }
}

/// `hwr-exp run experiment.toml --quiet --results-dir results` in `dir` with the containment of
/// `mode` forced; returns the output and the bundle folder.
fn run_in(dir: &Path, mode: Mode) -> (Output, PathBuf) {
    let out = hwr_command(dir)
        .env("HWR_CONTAINMENT", mode.name())
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .output()
        .expect("hwr-exp runs");
    let bundle = the_bundle(dir);
    (out, bundle)
}

/// The one bundle folder under `dir/results/<experiment>/`.
fn the_bundle(dir: &Path) -> PathBuf {
    let mut found = Vec::new();
    for experiment in std::fs::read_dir(dir.join("results")).unwrap().flatten() {
        for bundle in std::fs::read_dir(experiment.path()).unwrap().flatten() {
            if bundle.path().join("bundle.json").exists() {
                found.push(bundle.path());
            }
        }
    }
    assert_eq!(found.len(), 1, "one bundle expected: {found:?}");
    found.pop().unwrap()
}

/// The environment prefix every process of a run in `dir` carries ([`run_marker`]).
fn marker(dir: &Path) -> String {
    run_marker(dir)
}

/// A temporary folder with `experiment.toml` holding `text` (outside any git repository).
fn setup(text: &str) -> (tempfile::TempDir, KillOnDrop) {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), text);
    let leftovers = KillOnDrop(marker(dir.path()));
    (dir, leftovers)
}

/// `false` (after saying why the test is skipped, or failing under CI) when fewer than two CPUs
/// are allowed here; `what` says what needs them (may be empty).
#[track_caller]
fn two_cpus(what: &str) -> bool {
    let what = if what.is_empty() {
        "two allowed CPUs".to_string()
    } else {
        format!("two allowed CPUs ({what})")
    };
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    need(Check::new(what, "run on a machine with two CPUs", || {
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} allowed"))
        }
    }))
    .is_some()
}

/// Starts `hwr-exp run experiment.toml --quiet --results-dir results` in `dir` with
/// `HWR_CONTAINMENT=containment`, output discarded, and returns it running.
fn start_runner(dir: &Path, containment: &str) -> Child {
    hwr_command(dir)
        .env("HWR_CONTAINMENT", containment)
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `hwr-exp run experiment.toml --quiet --results-dir results` in `dir` with the default
/// containment; asserts it exits 0.
fn run_ok(dir: &Path) {
    let out = hwr_command(dir)
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .output()
        .expect("hwr-exp runs");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// What run `run` (a run.json) printed: its output file `<run-id>.txt` in `bundle`.
fn printed(bundle: &Path, run: &serde_json::Value) -> String {
    let id = run["run-id"].as_str().expect("run-id");
    std::fs::read_to_string(bundle.join("runs").join(id).join(format!("{id}.txt"))).expect("the run's output")
}

fn verify_ok(bundle: &Path) {
    let out = hwr(bundle, &["verify", "."]);
    assert_eq!(
        code(&out),
        0,
        "verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

fn assert_nothing_left(dir: &Path) {
    let left = processes_with_env(&marker(dir));
    assert!(left.is_empty(), "processes of the run survived: {left:?}");
}

/// The bundle's runner removed every cgroup it made.
fn assert_cgroups_removed(bundle: &Path) {
    let pid = json(&bundle.join("bundle.json"))["runner-pid"].as_u64().unwrap();
    let left = run_cgroups_of(pid);
    assert!(left.is_empty(), "run cgroups left behind: {left:?}");
}

// --- measurement follows containment -------------------------------------------------------

fn timeout_python_memory(mode: Mode) {
    if !mode.usable() {
        return;
    }
    if need(Python(&[])).is_none() {
        return;
    }
    // GNU timeout puts itself and python into a new process group: the run is more than the
    // run's process group.
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "timeout-python"
[command]
shell = "timeout 60s python3 -c 'import time; b = b\"x\" * (200 << 20); time.sleep(1.5)'"
output-format = "text"
[isolation]
timeout = "60s"
[measure]
sample-interval = "100ms"
"#,
    );
    let (out, bundle) = run_in(dir.path(), mode);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run = &run_records(&bundle)[0];
    let memory = std::fs::read_to_string(
        bundle
            .join("runs")
            .join(run["run-id"].as_str().unwrap())
            .join("memory.jsonl"),
    )
    .unwrap();
    let samples: Vec<serde_json::Value> = memory.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let largest = samples
        .iter()
        .max_by_key(|s| s["rss"].as_u64().unwrap_or(0))
        .expect("samples");
    assert!(
        largest["rss"].as_u64().unwrap() >= 200 << 20,
        "the largest sample misses python's 200 MiB: {largest}"
    );
    assert!(
        largest["processes"].as_u64().unwrap() > 1,
        "the sample covers one process only: {largest}"
    );
    assert_nothing_left(dir.path());
    assert_eq!(run["containment"], mode.name(), "{run}");
}

/// Runs are forked by the runner's spawner (a small process exec'd from the same binary,
/// `exec/spawner.rs`) and still are the runner's children: a run's parent is the runner (its
/// `wait4`, child subreaper and parent-death signal), the runner has a child whose argv[0] is
/// `hwr-exp-spawner`, and that spawner is gone once the runner has exited.
fn runs_are_the_runners_children_forked_by_its_spawner(mode: Mode) {
    if !mode.usable() {
        return;
    }
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "spawned"
[command]
shell = "echo ppid=$PPID; for c in $(cat /proc/$PPID/task/*/children); do printf '%s ' $c; tr '\\0' ' ' < /proc/$c/cmdline; echo; done"
output-format = "text"
[schedule]
repetitions = 2
"#,
    );
    let (out, bundle) = run_in(dir.path(), mode);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let runner = json(&bundle.join("bundle.json"))["runner-pid"].as_u64().unwrap();
    let mut spawners = Vec::new();
    for run in run_records(&bundle) {
        let text = printed(&bundle, &run);
        assert!(
            text.starts_with(&format!("ppid={runner}\n")),
            "the run's parent is not the runner {runner}:\n{text}"
        );
        let spawner: Vec<&str> = text
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some("hwr-exp-spawner"))
            .collect();
        assert_eq!(
            spawner.len(),
            1,
            "no spawner among the runner's children:\n{text}"
        );
        spawners.push(spawner[0].split_whitespace().next().unwrap().to_string());
        assert_eq!(run["containment"], mode.name(), "{run}");
    }
    assert_eq!(
        spawners[0], spawners[1],
        "one spawner serves every run: {spawners:?}"
    );
    let proc_dir = PathBuf::from(format!("/proc/{}", spawners[0]));
    wait_for(
        "the spawner to end with its runner",
        Duration::from_secs(10),
        || std::fs::read(proc_dir.join("cmdline")).map_or(true, |c| !c.starts_with(b"hwr-exp-spawner")),
    );
    assert_nothing_left(dir.path());
}

#[test]
fn runs_are_the_runners_children_forked_by_its_spawner_cgroup() {
    runs_are_the_runners_children_forked_by_its_spawner(Mode::Cgroup);
}

#[test]
fn runs_are_the_runners_children_forked_by_its_spawner_process_tree() {
    runs_are_the_runners_children_forked_by_its_spawner(Mode::Tree);
}

#[test]
fn timeout_python_memory_is_measured_cgroup() {
    timeout_python_memory(Mode::Cgroup);
}

#[test]
fn timeout_python_memory_is_measured_process_tree() {
    timeout_python_memory(Mode::Tree);
}

// --- nothing of a run outlives it -----------------------------------------------------------

fn timeout_loop_is_stopped_and_sealed(mode: Mode) {
    if !mode.usable() {
        return;
    }
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "tick"
[command]
shell = "timeout 30 sh -c 'while :; do echo tick; sleep 0.5; done'; echo end"
output = "out.txt"
output-format = "text"
[isolation]
timeout = "2s"
grace = "1s"
"#,
    );
    let t = Instant::now();
    let (out, bundle) = run_in(dir.path(), mode);
    let took = t.elapsed();
    assert_eq!(
        code(&out),
        1,
        "a timed-out run fails the bundle: {}",
        stderr(&out)
    );
    let run = &run_records(&bundle)[0];
    assert_eq!(run["termination"], "timeout", "{run}");
    assert_nothing_left(dir.path());
    let output = bundle
        .join("runs")
        .join(run["run-id"].as_str().unwrap())
        .join("out.txt");
    let size = std::fs::metadata(&output).unwrap().len();
    assert!(size > 0, "the loop printed ticks");
    // Waiting for `timeout 30` instead of stopping the run would have let the shell print `end`
    // (a mark, not a time bound a loaded machine could break).
    let text = std::fs::read_to_string(&output).unwrap();
    assert!(
        !text.contains("end"),
        "the run ended on its own after {took:?}: {text}"
    );
    // Sealed: no process of the run is alive (above) and no process anywhere holds the output
    // open, so nothing can make it grow after run.json was written.
    let holders = holders_of(&output);
    assert!(
        holders.is_empty(),
        "processes still hold the output open: {holders:?}"
    );
    verify_ok(&bundle);
    assert_eq!(run["containment"], mode.name(), "{run}");
}

#[test]
fn timeout_loop_is_stopped_and_sealed_cgroup() {
    timeout_loop_is_stopped_and_sealed(Mode::Cgroup);
}

#[test]
fn timeout_loop_is_stopped_and_sealed_process_tree() {
    timeout_loop_is_stopped_and_sealed(Mode::Tree);
}

/// Processes that leave the run's process group or session, then the run exits 0.
const ESCAPES: &str = r#"format = 1
[experiment]
name = "escapes"
[command]
argv = ["sh", "-c", "{how} sleep 0.3; exit 0"]
output-format = "text"
[matrix]
how = [
  "setsid sleep 300 &",
  "(setsid sleep 300 &);",
  "nohup sleep 300 > /dev/null 2>&1 &",
  "timeout 300 sleep 300 &",
]
[isolation]
timeout = "60s"
grace = "1s"
"#;

fn escapes_are_killed(mode: Mode) {
    if !mode.usable() {
        return;
    }
    let (dir, _left) = setup(ESCAPES);
    let (out, bundle) = run_in(dir.path(), mode);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_nothing_left(dir.path());
    let runs = run_records(&bundle);
    assert_eq!(runs.len(), 4);
    for run in &runs {
        assert_eq!(run["outcome"], "ok", "{run}");
        assert_eq!(run["containment"], mode.name(), "{run}");
        let killed = run["stray-processes-killed"].as_u64().unwrap();
        // `timeout` and its `sleep` are two processes; the others are one `sleep`.
        assert!((1..=2).contains(&killed), "count of killed processes: {run}");
    }
    verify_ok(&bundle);
    assert_cgroups_removed(&bundle);
}

#[test]
fn setsid_double_fork_nohup_and_timeout_are_killed_cgroup() {
    escapes_are_killed(Mode::Cgroup);
}

#[test]
fn setsid_double_fork_nohup_and_timeout_are_killed_process_tree() {
    escapes_are_killed(Mode::Tree);
}

fn strays_charged_to_their_run(mode: Mode) {
    if !mode.usable() {
        return;
    }
    // The CPUs this process may use (sched_getaffinity on Linux).
    if !two_cpus("jobs = 2") {
        return;
    }
    // Both runs are in flight at once; run n leaves n session leaders behind.
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "two-jobs"
[command]
shell = "i=0; while [ $i -lt {n} ]; do setsid sleep 300 & i=$((i+1)); done; sleep 1; exit 0"
output-format = "text"
[matrix]
n = [1, 3]
[schedule]
jobs = 2
[isolation]
timeout = "60s"
grace = "1s"
"#,
    );
    let (out, bundle) = run_in(dir.path(), mode);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_nothing_left(dir.path());
    let runs = run_records(&bundle);
    assert_eq!(runs.len(), 2);
    for run in &runs {
        assert_eq!(run["containment"], mode.name(), "{run}");
        assert_eq!(
            run["stray-processes-killed"], run["cell"]["n"],
            "strays charged to another run: {run}"
        );
    }
    verify_ok(&bundle);
}

#[test]
fn strays_are_charged_to_their_run_with_two_jobs_cgroup() {
    strays_charged_to_their_run(Mode::Cgroup);
}

#[test]
fn strays_are_charged_to_their_run_with_two_jobs_process_tree() {
    strays_charged_to_their_run(Mode::Tree);
}

// --- no controlling terminal ------------------------------------------------------------------

fn dev_tty_fails_fast(mode: Mode) {
    if !mode.usable() {
        return;
    }
    if need(Program("script")).is_none() {
        return;
    }
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "tty"
[command]
shell = "cat /dev/tty"
output-format = "text"
[isolation]
timeout = "8s"
grace = "1s"
"#,
    );
    // hwr-exp in the foreground of a pseudo-terminal, as when started from a shell.
    let inner = format!(
        "HWR_CONTAINMENT={} '{}' run experiment.toml --quiet --results-dir results",
        mode.name(),
        bin().display()
    );
    let out = Command::new("script")
        .current_dir(dir.path())
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let bundle = the_bundle(dir.path());
    let run = &run_records(&bundle)[0];
    assert_eq!(
        run["termination"],
        "exited",
        "the run was not stopped by the terminal until its timeout: {run}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_ne!(run["exit-code"], 0, "{run}");
    let stderr_log = std::fs::read_to_string(
        bundle
            .join("runs")
            .join(run["run-id"].as_str().unwrap())
            .join("stderr.log"),
    )
    .unwrap();
    assert!(
        stderr_log.contains("/dev/tty") && stderr_log.contains("No such device or address"),
        "stderr.log: {stderr_log}"
    );
    assert_nothing_left(dir.path());
}

#[test]
fn dev_tty_fails_at_once_under_a_terminal_cgroup() {
    dev_tty_fails_fast(Mode::Cgroup);
}

#[test]
fn dev_tty_fails_at_once_under_a_terminal_process_tree() {
    dev_tty_fails_fast(Mode::Tree);
}

// --- the guardian -----------------------------------------------------------------------------

fn guardian_kills_the_run(mode: Mode) {
    if !mode.usable() {
        return;
    }
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "orphaned"
[command]
shell = "setsid sleep 300 & sleep 300"
output-format = "text"
[isolation]
timeout = "120s"
"#,
    );
    let mut runner = start_runner(dir.path(), mode.name());
    let marker = marker(dir.path());
    // sh, the setsid'd sleep and sh's own sleep.
    let started = eventually(Duration::from_secs(20), || {
        processes_with_env(&marker)
            .iter()
            .filter(|(_, cmd)| cmd.starts_with("sleep"))
            .count()
            >= 2
    });
    assert!(started, "the run's processes: {:?}", processes_with_env(&marker));
    // No pause: the run was listed with the guardian before its spawn.
    runner.kill().unwrap(); // SIGKILL
    runner.wait().unwrap();
    let gone = eventually(Duration::from_secs(10), || processes_with_env(&marker).is_empty());
    assert!(
        gone,
        "processes of the run outlived the killed runner: {:?}",
        processes_with_env(&marker)
    );
    // The guardian also removes the cgroup of the run it stopped.
    let removed = eventually(Duration::from_secs(10), || {
        run_cgroups_of(u64::from(runner.id())).is_empty()
    });
    assert!(removed, "{:?}", run_cgroups_of(u64::from(runner.id())));
}

/// While a run executes, the runner makes the next run's folder and cgroup, so that less is left
/// to do between two runs. When the runner is SIGKILLed then, the guardian removes that cgroup
/// with the run's own, and `resume` runs the next run as a first attempt: its folder, made ahead,
/// holds nothing that was ever run.
#[test]
fn the_next_run_made_ahead_is_cleaned_up_after_a_sigkill_and_resumed_as_a_first_attempt() {
    if !Mode::Cgroup.usable() {
        return;
    }
    if !two_cpus("runs are made ahead only where one is free") {
        return;
    }
    let repo = repo();
    // Run 2 sleeps while work/hold exists (an ignored folder: no drift).
    write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "ahead"
[command]
shell = "if [ {repetition} = 2 ] && [ -e work/hold ]; then sleep 300; fi"
output-format = "text"
[schedule]
repetitions = 3
[isolation]
timeout = "120s"
"#,
    );
    std::fs::write(repo.path().join(".gitignore"), "results/\nwork/\n").unwrap();
    git(repo.path(), &["add", "experiment.toml", ".gitignore"]);
    git(repo.path(), &["commit", "-q", "-m", "experiment"]);
    std::fs::create_dir(repo.path().join("work")).unwrap();
    std::fs::write(repo.path().join("work/hold"), "").unwrap();
    let _left = KillOnDrop(marker(repo.path()));
    let mut runner = start_runner(repo.path(), Mode::Cgroup.name());
    let marker = marker(repo.path());
    let sleeping = eventually(Duration::from_secs(20), || {
        processes_with_env(&marker)
            .iter()
            .any(|(_, cmd)| cmd.starts_with("sleep"))
    });
    assert!(sleeping, "run 2 started: {:?}", processes_with_env(&marker));
    let bundle = the_bundle(repo.path());
    let pid = u64::from(runner.id());
    let next = bundle.join("runs/002-r3");
    let ahead = eventually(Duration::from_secs(10), || {
        next.is_dir()
            && run_cgroups_of(pid)
                .iter()
                .any(|c| c.to_string_lossy().ends_with("-002-r3"))
    });
    assert!(
        ahead,
        "run 3's folder and cgroup are made while run 2 executes: folder {}, cgroups {:?}",
        next.is_dir(),
        run_cgroups_of(pid)
    );
    runner.kill().unwrap(); // SIGKILL
    runner.wait().unwrap();
    let removed = eventually(Duration::from_secs(10), || run_cgroups_of(pid).is_empty());
    assert!(
        removed,
        "cgroups left after the guardian: {:?}",
        run_cgroups_of(pid)
    );
    assert!(
        eventually(Duration::from_secs(10), || processes_with_env(&marker).is_empty()),
        "{:?}",
        processes_with_env(&marker)
    );
    assert_eq!(
        std::fs::read_dir(&next).unwrap().count(),
        0,
        "run 3's folder made ahead is empty"
    );

    std::fs::remove_file(repo.path().join("work/hold")).unwrap();
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let third = json(&next.join("run.json"));
    assert_eq!(third["attempt"], 1, "{third}");
    assert!(
        !next.join("attempts").exists(),
        "no attempt kept for a run that never started"
    );
    let second = json(&bundle.join("runs/001-r2/run.json"));
    assert_eq!(second["attempt"], 2, "{second}");
    verify_ok(&bundle);
    assert_cgroups_removed(&bundle);
}

#[test]
fn guardian_kills_a_setsid_child_when_the_runner_is_sigkilled_cgroup() {
    guardian_kills_the_run(Mode::Cgroup);
}

#[test]
fn guardian_kills_a_setsid_child_when_the_runner_is_sigkilled_process_tree() {
    guardian_kills_the_run(Mode::Tree);
}

// --- sealed run folders: artifacts ------------------------------------------------------------

#[test]
fn artifacts_in_the_run_folder_are_listed_and_verified() {
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "artifacts"
[command]
shell = "echo data > {run-dir}/profile.txt; mkdir {run-dir}/traces; printf 'abc' > {run-dir}/traces/t1.bin; ln -s /etc/hostname {run-dir}/link; mkfifo {run-dir}/fifo; echo '{{}}'"
"#,
    );
    run_ok(dir.path());
    let bundle = the_bundle(dir.path());
    // A fresh bundle verifies: the run's own files are recorded.
    verify_ok(&bundle);
    let run = &run_records(&bundle)[0];
    let artifacts = run["artifacts"].as_array().expect("artifacts in run.json");
    let by_name = |name: &str| {
        artifacts
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {artifacts:?}"))
            .clone()
    };
    let profile = by_name("profile.txt");
    assert_eq!(profile["kind"], "file");
    assert_eq!(profile["size"], 5);
    assert_eq!(
        profile["sha256"],
        "6667b2d1aab6a00caa5aee5af8ad9f1465e567abf1c209d15727d57b3e8f6e5f"
    );
    assert_eq!(by_name("traces")["kind"], "directory");
    assert_eq!(by_name("traces/t1.bin")["size"], 3);
    let link = by_name("link");
    assert_eq!(link["kind"], "symlink");
    assert_eq!(link["target"], "/etc/hostname");
    assert!(
        link.get("sha256").is_none(),
        "a symlink is never followed: {link}"
    );
    assert_eq!(by_name("fifo")["kind"], "fifo");
    assert_eq!(artifacts.len(), 5, "{artifacts:?}");
    for own in [
        "run.json",
        "stderr.log",
        "memory.jsonl",
        run["output"].as_str().unwrap(),
    ] {
        assert!(
            artifacts.iter().all(|a| a["name"] != own),
            "{own} is the runner's file, not an artifact"
        );
    }

    // Any change is caught, naming the file.
    let run_dir = bundle.join("runs").join(run["run-id"].as_str().unwrap());
    std::fs::write(run_dir.join("profile.txt"), "edited\n").unwrap();
    let out = hwr(&bundle, &["verify", "."]);
    assert_ne!(code(&out), 0);
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out);
    assert!(said.contains("profile.txt"), "{said}");
    std::fs::write(run_dir.join("profile.txt"), "data\n").unwrap();
    verify_ok(&bundle);
    std::fs::remove_file(run_dir.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", run_dir.join("link")).unwrap();
    let out = hwr(&bundle, &["verify", "."]);
    assert_ne!(code(&out), 0, "a retargeted symlink is caught");
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out);
    assert!(said.contains("link"), "{said}");
}

// --- interrupted attempts are kept ------------------------------------------------------------

#[test]
fn an_interrupted_probe_attempt_is_kept_by_resume() {
    let repo = repo();
    // Long while work/slow exists (an ignored folder: no drift), short after.
    write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "probe-attempts"
[command]
shell = "if [ -e work/slow ]; then n=2000000000; else n=1000; fi; exec {hwr-exp} probe safetensors-retention --mode get_tensor --tensor-elements 16 --iterations $n --sample-every 1000"
output = "probe.json"
[isolation]
timeout = "120s"
"#,
    );
    std::fs::write(repo.path().join(".gitignore"), "results/\nwork/\n").unwrap();
    git(repo.path(), &["add", "experiment.toml", ".gitignore"]);
    git(repo.path(), &["commit", "-q", "-m", "experiment"]);
    std::fs::create_dir(repo.path().join("work")).unwrap();
    let slow = repo.path().join("work/slow");
    std::fs::write(&slow, "").unwrap();
    let _left = KillOnDrop(marker(repo.path()));

    let runner = spawn_run(repo.path());
    let marker = marker(repo.path());
    let probe = wait_for_value("the probe to start", Duration::from_secs(20), || {
        processes_with_env(&marker)
            .into_iter()
            .find(|(_, cmd)| cmd.contains("safetensors-retention"))
            .map(|(pid, _)| pid as u32)
    });
    // Its SIGTERM handler is in place: stopped now, it prints what it has.
    wait_for("the probe's SIGTERM handler", Duration::from_secs(20), || {
        catches(probe, Signal::TERM)
    });
    signal(runner.id(), Signal::INT);
    let out = runner.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let bundle = the_bundle(repo.path());
    let first = &run_records(&bundle)[0];
    assert_eq!(first["termination"], "interrupted", "{first}");
    let run_id = first["run-id"].as_str().unwrap().to_string();
    let partial = std::fs::read(bundle.join("runs").join(&run_id).join("probe.json")).unwrap();

    std::fs::remove_file(&slow).unwrap();
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_dir = bundle.join("runs").join(&run_id);
    let kept = run_dir.join("attempts/1/probe.json");
    assert_eq!(
        std::fs::read(&kept).expect("the interrupted attempt's output is kept"),
        partial
    );
    let doc: serde_json::Value = serde_json::from_slice(&partial).expect("partial JSON on SIGTERM");
    assert_eq!(doc["completed"], false, "{doc}");
    assert_eq!(
        json(&run_dir.join("attempts/1/run.json"))["termination"],
        "interrupted"
    );
    let last = json(&run_dir.join("run.json"));
    assert_eq!(last["termination"], "exited", "{last}");
    assert_eq!(last["attempt"], 2, "{last}");
    verify_ok(&bundle);

    // The report reads the final attempt only, and counts the attempts.
    let out = hwr(
        repo.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &report["runs"][0];
    assert_eq!(summary["attempts"], 2, "{summary}");
    assert_eq!(summary["outcome"], "ok", "{summary}");
    assert_eq!(report["counts"], serde_json::json!({"ok": 1}), "{report}");
    // Tampering with the kept attempt is caught too.
    std::fs::write(&kept, b"{}").unwrap();
    let out = hwr(&bundle, &["verify", "."]);
    assert_ne!(code(&out), 0, "an edited earlier attempt is caught");
}

// --- the runner's own CPUs ------------------------------------------------------------------

#[test]
fn the_runner_samples_away_from_the_runs_cpu() {
    if !two_cpus("") {
        return;
    }
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "runner-cpus"
[command]
shell = "sleep 0.3"
output-format = "text"
[measure]
sample-interval = "50ms"
"#,
    );
    run_ok(dir.path());
    let run = &run_records(&the_bundle(dir.path()))[0];
    let run_cpus = run["cpus-effective"].as_array().unwrap();
    let runner_cpus = run["runner-cpus"].as_array().expect("runner-cpus in run.json");
    assert!(!runner_cpus.is_empty(), "{run}");
    assert!(
        runner_cpus.iter().all(|c| !run_cpus.contains(c)),
        "the runner shared the run's CPUs: {run}"
    );
    assert!(run["memory-samples"].as_u64().unwrap() >= 2, "{run}");
}

/// With a CPU that no run uses, each run is recorded by a second runner thread pinned to it
/// while the next run executes, and no thread of the runner may use the run's CPU. Each run
/// lists the runner's threads (its parent's `/proc/PID/task`) with their allowed CPUs; every run
/// after the first sees the recording thread, and every run is recorded, in order.
#[test]
fn runs_are_recorded_while_the_next_run_executes_on_a_cpu_of_their_own() {
    // Every runner thread but `forced-exit` (src/signal.rs), which is blocked in read() from its
    // start until the process must end and so never shares a run's CPU while the run runs.
    if !two_cpus("") {
        return;
    }
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "recorder"
[command]
shell = "sleep 0.2; for t in /proc/$PPID/task/*; do grep -q '^Name:[[:space:]]*forced-exit' $t/status || sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' $t/status; done"
output-format = "text"
[schedule]
repetitions = 4
"#,
    );
    let out = hwr(
        dir.path(),
        &["run", "experiment.toml", "--results-dir", "results"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let progress: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(progress, ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], "{}", stderr(&out));
    let bundle = the_bundle(dir.path());
    let runs = run_records(&bundle);
    assert_eq!(runs.len(), 4);
    for (i, run) in runs.iter().enumerate() {
        let run_cpus: Vec<usize> = run["cpus-effective"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as usize)
            .collect();
        let id = run["run-id"].as_str().unwrap();
        let listed = printed(&bundle, run);
        let threads: Vec<Vec<usize>> = listed
            .lines()
            .map(|l| hwr_exp::cpus::parse_cpu_list(l).unwrap())
            .collect();
        assert!(
            threads
                .iter()
                .all(|cpus| cpus.iter().all(|c| !run_cpus.contains(c))),
            "a runner thread may use the CPU of run {id} ({run_cpus:?}): {threads:?}"
        );
        if i > 0 {
            assert!(
                threads.len() >= 2,
                "no recording thread during run {id}: {threads:?}"
            );
        }
    }
}

/// A run's `peak-rss-bytes` (wait4's `ru_maxrss`) is the run's own, not the runner's. At exec
/// the kernel takes the peak RSS of the memory the process leaves into `ru_maxrss`: a child that
/// shared the runner's memory until its exec (as `vfork` and `posix_spawn` make it) reported the
/// runner's whole RSS (6.6 MB in a release build) for a shell whose own peak is 2 MB. A forked
/// child leaves only its copy of the runner's private pages, so its peak stays below the
/// runner's file-backed RSS (the runner's code, never copied). Each run prints its parent's
/// `RssFile` and becomes `sleep`.
#[test]
fn a_small_runs_peak_rss_is_its_own_not_the_runners() {
    let (dir, _left) = setup(
        r#"format = 1
[experiment]
name = "peak"
[command]
shell = "sed -n 's/^RssFile:[[:space:]]*\\([0-9]*\\) kB/\\1/p' /proc/$PPID/status; exec sleep 0.1"
output-format = "text"
[schedule]
repetitions = 3
"#,
    );
    run_ok(dir.path());
    let bundle = the_bundle(dir.path());
    for run in run_records(&bundle) {
        let id = run["run-id"].as_str().unwrap();
        let printed =
            std::fs::read_to_string(bundle.join("runs").join(id).join(format!("{id}.txt"))).unwrap();
        let runner_file_rss = printed.trim().parse::<u64>().unwrap() * 1024;
        let peak = run["peak-rss-bytes"].as_u64().unwrap();
        assert!(
            peak < runner_file_rss,
            "run {id}: peak-rss-bytes {peak} is not below the runner's file-backed RSS {runner_file_rss}: it is the runner's"
        );
    }
}

/// The runner holds what it captured of the working tree: with a 10 MB untracked file, the
/// `working-tree.patch` bytes (about 13 MB of base85) stayed in its memory for the whole session,
/// and each forked run carried a copy of them into exec, where the kernel took them into the
/// run's `ru_maxrss`: `peak-rss-bytes` of a `sleep` was 20 MB. The patch is released once it is
/// written, so a run's peak is its own again.
#[test]
fn the_working_tree_patch_does_not_inflate_a_runs_peak_rss() {
    let repo = repo();
    let mut noise = vec![0u8; 10 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(repo.path().join("weights.bin"), &noise).unwrap();
    let m = ManifestBuilder::shell("patch-held", "exec sleep 0.1")
        .text_output()
        .repetitions(2)
        .write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let patch = std::fs::metadata(bundle.join("working-tree.patch"))
        .unwrap()
        .len();
    assert!(
        patch > 10 << 20,
        "the untracked file is in the patch: {patch} bytes"
    );
    for run in run_records(&bundle) {
        let peak = run["peak-rss-bytes"].as_u64().unwrap();
        assert!(
            peak < 8 << 20,
            "{}: peak-rss-bytes {peak} of a sleep carries the runner's copy of the patch",
            run["run-id"]
        );
    }
}
