//! Faults of issue 37, end to end with real processes: a stop signal delivered twice (GNU
//! `timeout`) is one request and every exit marks the bundle; preflight failures write nothing;
//! a very deep folder in `{run-dir}`; bundle.json that is a FIFO or a link in `list`.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};

use crate::support::{ManifestBuilder, Repo, bundles, code, hwr_command, json, the_bundle, wait_for};

/// How long the runner may take to reach a state the test waits for (a hang guard, not a timing
/// assertion).
const PATIENCE: Duration = Duration::from_secs(30);

/// A temporary git repository with one commit that ignores `results/`.
fn repo() -> Repo {
    let repo = Repo::new();
    repo.write(".gitignore", "results/\n").commit("init");
    repo
}

/// `hwr-exp run experiment.toml --results-dir results --quiet` in `dir`, started, not waited for.
fn spawn_run(dir: &Path) -> Child {
    hwr_command(dir)
        .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
        .env_remove("HWR_TEST_PAUSE_AT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn status(bundle: &Path) -> String {
    json(&bundle.join("bundle.json"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// One run that ignores SIGTERM (the ignored disposition is inherited by `sleep`), so that the
/// runner's stop waits for `grace` before SIGKILL. It prints `ready` to stderr once the trap is set.
fn stubborn_manifest(dir: &Path, name: &str, grace: &str) {
    ManifestBuilder::shell(name, "trap '' TERM; echo ready >&2; sleep 120; echo done")
        .text_output()
        .repetitions(1)
        .isolation("grace", grace)
        .write(dir);
}

/// Waits until the first run has set its trap (it printed `ready` to its stderr.log): a stop
/// signal before that ends the shell at once, and the run with it.
fn wait_for_first_run(results: &Path, name: &str) {
    wait_for("the first run", PATIENCE, || {
        bundles(results, name).first().is_some_and(|b| {
            std::fs::read_to_string(b.join("runs/000-r1/stderr.log")).is_ok_and(|s| s.contains("ready"))
        })
    });
}

fn kill(child: &Child, signal: Signal) {
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), signal).unwrap();
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

/// GNU `timeout` passes its SIGTERM on twice (to the child, then to its process group): the same
/// signal twice within a moment is one request. The runner stops the run as on timeout (SIGKILL
/// after grace), records it, marks the bundle `interrupted` and exits 130; the old runner took the
/// second delivery as a second Ctrl-C and exited at once with the bundle `running`.
#[test]
fn the_same_signal_twice_in_a_moment_is_one_request() {
    let repo = repo();
    let results = repo.path().join("results");
    stubborn_manifest(repo.path(), "twice", "2s");
    let child = spawn_run(repo.path());
    wait_for_first_run(&results, "twice");
    kill(&child, Signal::TERM);
    std::thread::sleep(Duration::from_millis(100));
    kill(&child, Signal::TERM);
    let out = finish(child);
    assert_eq!(code(&out), 130, "{out:?}");
    let bundle = the_bundle(&results, "twice");
    assert_eq!(status(&bundle), "interrupted");
    // The one request waited for the run: it was stopped and recorded.
    let run = json(&bundle.join("runs/000-r1/run.json"));
    assert_eq!(run["termination"], "interrupted", "{run}");
}

/// `timeout 3 hwr-exp run ...` as a user types it: the bundle ends `interrupted`, never `running`.
#[test]
fn under_gnu_timeout_the_bundle_ends_interrupted() {
    let Some(timeout) = crate::support::need::on_path("timeout") else {
        eprintln!("skipped: no GNU timeout on PATH");
        return;
    };
    for attempt in 0..3 {
        let repo = repo();
        let results = repo.path().join("results");
        let name = format!("timeout{attempt}");
        stubborn_manifest(repo.path(), &name, "1s");
        let hwr = hwr_command(repo.path());
        let out = Command::new(&timeout)
            .arg("4")
            .arg(hwr.get_program())
            .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
            .current_dir(repo.path())
            .envs(hwr.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&out), 124, "timeout timed out: {out:?}");
        let bundle = the_bundle(&results, &name);
        assert_eq!(status(&bundle), "interrupted", "attempt {attempt}");
    }
}

/// A real second request (another signal, or the same one later) still exits at once, without
/// waiting for the run's grace period, and the bundle is marked `interrupted` with a note saying
/// the run in flight has no run.json; resume then runs it again.
#[test]
fn a_second_request_exits_at_once_and_marks_the_bundle() {
    let repo = repo();
    let results = repo.path().join("results");
    stubborn_manifest(repo.path(), "forced", "600s");
    let child = spawn_run(repo.path());
    wait_for_first_run(&results, "forced");
    // Another signal is another request at once (no duplicate window between different ones).
    kill(&child, Signal::TERM);
    kill(&child, Signal::INT);
    let out = finish(child);
    assert_eq!(code(&out), 130, "{out:?}");
    let bundle = the_bundle(&results, "forced");
    assert_eq!(status(&bundle), "interrupted");
    let info = json(&bundle.join("bundle.json"));
    assert!(info["finished"].is_string(), "{info}");
    assert!(info["notes"].to_string().contains("second stop signal"), "{info}");
    assert!(!bundle.join("runs/000-r1/run.json").exists());
}

/// A stand-in `scontrol` that answers the preflight's questions (ping, config, partitions) as a
/// one-partition cluster would; the other Slurm commands are absent from `PATH`.
const FAKE_SCONTROL: &str = r#"#!/bin/sh
case "$*" in
  ping) echo "Slurmctld(primary) at n1 is UP" ;;
  "show config") echo "MaxArraySize            = 1001"; echo "MaxJobCount             = 10000" ;;
  "-o show partition") echo "PartitionName=cpu AllowGroups=ALL Default=YES MaxTime=UNLIMITED Nodes=n1 State=UP TotalCPUs=2 TotalNodes=1 MaxNodes=UNLIMITED MaxCPUsPerNode=UNLIMITED MaxMemPerNode=UNLIMITED" ;;
  *) echo "fake scontrol: $*" >&2; exit 1 ;;
esac
"#;

/// With `sbatch` (and `squeue`, `scancel`) missing from `PATH`, `run` on the slurm executor is a
/// preflight failure that names each program and writes nothing (DESIGN 4); the old runner left
/// a `failed` bundle that said nowhere why.
#[test]
fn a_slurm_command_missing_from_path_fails_preflight_and_writes_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let repo = repo();
    let bin = tempfile::tempdir().unwrap();
    let scontrol = bin.path().join("scontrol");
    std::fs::write(&scontrol, FAKE_SCONTROL).unwrap();
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    for program in ["sbatch", "squeue", "scancel"] {
        if ["/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(program).exists())
        {
            eprintln!("skipped: {program} is installed in /usr/bin or /bin");
            return;
        }
    }
    ManifestBuilder::shell("nosbatch", "echo hi")
        .text_output()
        .repetitions(1)
        .set("executor", "kind", "slurm")
        .write(repo.path());
    let out = hwr_command(repo.path())
        .args(["run", "experiment.toml", "--results-dir", "results"])
        .env("PATH", &path)
        .env_remove("SLURM_CONF")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 3, "{err}");
    assert!(err.contains("preflight failed"), "{err}");
    for program in ["sbatch", "squeue", "scancel"] {
        assert!(
            err.contains(&format!("`{program}` was not found in PATH")),
            "{err}"
        );
    }
    let results = repo.path().join("results");
    assert!(
        !results.exists() || std::fs::read_dir(&results).unwrap().next().is_none(),
        "a failed preflight wrote {:?}",
        bundles(&results, "nosbatch")
    );
}

/// A finished local bundle of one run under `dir/results`; returns its folder.
fn one_bundle(dir: &Path, name: &str) -> std::path::PathBuf {
    ManifestBuilder::shell(name, "echo hi")
        .text_output()
        .repetitions(1)
        .write(dir);
    let out = hwr_command(dir)
        .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{out:?}");
    the_bundle(&dir.join("results"), name)
}

/// `list` warns, naming the file, about a bundle whose bundle.json is a FIFO or a symbolic link
/// (docs/archive.md: any bundle it cannot read); the old `list` skipped both in silence. It never
/// blocks on the FIFO.
#[test]
fn list_warns_about_a_bundle_json_that_is_a_fifo_or_a_link() {
    let repo = repo();
    let fifo = one_bundle(repo.path(), "fifo");
    let link = one_bundle(repo.path(), "link");
    let json_path = fifo.join("bundle.json");
    std::fs::remove_file(&json_path).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &json_path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let target = repo.path().join("elsewhere.json");
    std::fs::rename(link.join("bundle.json"), &target).unwrap();
    std::os::unix::fs::symlink(&target, link.join("bundle.json")).unwrap();
    let out = hwr_command(repo.path())
        .args(["list", "results"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    for bundle in [&fifo, &link] {
        let name = bundle.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            err.lines()
                .any(|l| l.contains("warning") && l.contains(&name) && l.contains("bundle.json")),
            "no warning naming {name}/bundle.json: {err}"
        );
    }
}

/// A detached Slurm bundle (bundle.json `running`, no lock holder) whose `squeue` hangs: `list`
/// stops the command at its deadline and says the state is unknown, naming squeue, instead of
/// hanging or calling a bundle whose tasks may be running `abandoned`.
#[test]
fn list_says_unknown_when_squeue_hangs() {
    use std::os::unix::fs::PermissionsExt;
    let repo = repo();
    let bundle = one_bundle(repo.path(), "detached");
    let path = bundle.join("bundle.json");
    let mut info = json(&path);
    info["status"] = "running".into();
    info["executor"] = "slurm".into();
    info["slurm"] = serde_json::json!({"arrays": [
        {"job-id": 4242, "offset": 0, "array": "0", "script": "slurm/array-0.sbatch", "state": "released"}
    ]});
    std::fs::write(&path, serde_json::to_vec_pretty(&info).unwrap()).unwrap();
    let _ = std::fs::remove_file(bundle.join(".lock"));
    let bin = tempfile::tempdir().unwrap();
    for program in ["squeue", "scontrol"] {
        let p = bin.path().join(program);
        std::fs::write(&p, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let conf = bin.path().join("slurm.conf");
    std::fs::write(&conf, "ClusterName=none\n").unwrap();
    let out = hwr_command(repo.path())
        .args(["list", "results"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.path().display()))
        .env("SLURM_CONF", &conf)
        .env("HWR_SLURM_TIMEOUT", "1s")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("detached"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains("unknown"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(line.contains("squeue"), "{line}");
    assert!(!line.contains("abandoned"), "{line}");
}

/// Matrix values with an ANSI colour sequence, a bell, a bidirectional override (U+202E) and
/// 70,000 characters, run 4 times: on a pseudo-terminal, `report`, `compare` and `plan` show the
/// control characters escaped (`\u{1b}`, `\u{202e}`), never raw, and cut the long value in their
/// tables and titles, so each prints well under a megabyte (the old report printed 20-75 MB).
#[test]
fn terminal_output_escapes_hostile_values_and_cuts_long_ones() {
    let repo = repo();
    let evil = "a\u{1b}[31mRED\u{1b}[0m\u{202e}evil\u{7}";
    let long = "y".repeat(70_000);
    ManifestBuilder::shell("hostile", "echo hi")
        .text_output()
        .matrix("mode", ["reuse", evil])
        .matrix("v", [long.as_str()])
        .repetitions(2)
        .write(repo.path());
    let out = hwr_command(repo.path())
        .args(["run", "experiment.toml", "--results-dir", "results", "--quiet"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{out:?}");
    let bundle = the_bundle(&repo.path().join("results"), "hostile");
    let b = bundle.to_str().unwrap();
    for args in [
        vec!["report", b],
        vec!["compare", b, b],
        vec!["plan", "experiment.toml"],
    ] {
        let out = crate::support::in_terminal(repo.path(), 120, &args)
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert_eq!(code(&out), 0, "{args:?}: {}", &shown[..shown.len().min(2000)]);
        for raw in ["\u{1b}[31mRED", "\u{202e}", "\u{7}"] {
            assert!(!shown.contains(raw), "{args:?} printed {raw:?} raw");
        }
        // Escaped (a narrow column may wrap the escape itself over two lines).
        assert!(
            shown.contains("u{1b}") || shown.contains("u{202e}"),
            "{args:?}: the value is shown escaped"
        );
        assert!(
            out.stdout.len() < 1_000_000,
            "{args:?} printed {} bytes",
            out.stdout.len()
        );
        assert!(
            !shown.contains(&long[..1000]),
            "{args:?} printed the long value whole"
        );
    }
}
