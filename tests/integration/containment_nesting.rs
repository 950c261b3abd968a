//! Containment nests inside its caller (DESIGN 4): run cgroups are children of the runner's own
//! cgroup, so stopping the caller's cgroup (`systemctl stop` of a unit, Slurm's
//! `proctrack/cgroup` on `scancel`, an outer hwr-exp run) stops every run, and an outer run's
//! memory samples count an inner runner's runs.
//!
//! The caller is a fresh cgroup ([`CallerCgroup`]) the runner is started in. Needs a writable
//! cgroup2 ([`Cgroup`]: skipped elsewhere, a failure under CI or `HWR_REQUIRE_CGROUP=1`).

use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// A run whose processes sleep for minutes unless stopped: `setsid` leaves the process group.
const SLEEPERS: &str = r#"format = 1
[experiment]
name = "nested"
[command]
shell = "setsid sleep 300 & sleep 300"
output-format = "text"
[isolation]
timeout = "120s"
"#;

/// How the caller's cgroup is stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// `1` into its `cgroup.kill` (systemd, Slurm's cgroup plugin on Linux 5.14+).
    CgroupKill,
    /// SIGKILL to every pid listed in it and below, until it is empty (systemd's and Slurm's
    /// fallback without `cgroup.kill`).
    EveryPid,
}

/// Starts a runner in a caller's cgroup, waits for its run's processes, checks they sit inside
/// the caller's cgroup, stops the caller's cgroup `how`, and checks nothing of the run survives.
fn stopping_the_callers_cgroup_stops_the_runs(containment: &str, how: Stop) {
    let Some(mount) = need(Cgroup) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), SLEEPERS);
    let marker = run_marker(dir.path());
    let _left = KillOnDrop(marker.clone());
    let caller = CallerCgroup::new(&mount);
    let mut cmd = hwr_command(dir.path());
    cmd.env("HWR_CONTAINMENT", containment).args([
        "run",
        "experiment.toml",
        "--quiet",
        "--results-dir",
        "results",
    ]);
    let mut runner = caller
        .wrap(&cmd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // sh, the setsid'd sleep and sh's own sleep.
    let run = wait_for_value("the run's sleeps", Duration::from_secs(20), || {
        let p = processes_with_env(&marker);
        (p.iter().filter(|(_, cmd)| cmd.starts_with("sleep")).count() >= 2).then_some(p)
    });
    let outside: Vec<String> = run
        .iter()
        .filter_map(|(pid, cmd)| {
            let cgroup = cgroup_of(*pid).unwrap_or_default();
            (!cgroup.starts_with(caller.name())).then(|| format!("{cmd} (pid {pid}) in {}", cgroup.display()))
        })
        .collect();
    match how {
        Stop::CgroupKill => caller.kill(),
        Stop::EveryPid => {
            // As a service manager without cgroup.kill does: rounds until the cgroup is empty.
            let emptied = eventually(Duration::from_secs(10), || {
                for pid in caller.pids() {
                    try_signal(pid, Signal::KILL);
                }
                !caller.populated()
            });
            assert!(emptied, "the caller's cgroup still holds {:?}", caller.pids());
        }
    }
    let status = wait_child(
        &mut runner,
        Duration::from_secs(10),
        "the runner in the killed cgroup",
    );
    assert!(!status.success(), "{status}");
    let gone = eventually(Duration::from_secs(10), || processes_with_env(&marker).is_empty());
    assert!(
        gone,
        "runs survived their caller's cgroup: {:?}",
        processes_with_env(&marker)
    );
    assert!(
        outside.is_empty(),
        "run processes outside the caller's cgroup {}: {outside:?}",
        caller.name().display()
    );
}

#[test]
fn killing_the_runners_cgroup_stops_every_run_cgroup() {
    stopping_the_callers_cgroup_stops_the_runs("cgroup", Stop::CgroupKill);
}

#[test]
fn killing_every_pid_of_the_runners_cgroup_stops_every_run_cgroup() {
    stopping_the_callers_cgroup_stops_the_runs("cgroup", Stop::EveryPid);
}

#[test]
fn killing_the_runners_cgroup_stops_every_run_process_tree() {
    stopping_the_callers_cgroup_stops_the_runs("process-tree", Stop::CgroupKill);
}

/// The runner puts its runs' cgroups inside its own and moves itself into a leaf beside them
/// (no process sits in a cgroup that has children with controllers); it warns about nothing.
#[test]
fn run_cgroups_nest_in_the_runners_cgroup_next_to_the_runner() {
    let Some(mount) = need(Cgroup) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    ManifestBuilder::shell("where", "cat /proc/self/cgroup; cat /proc/$PPID/cgroup")
        .text_output()
        .write(dir.path());
    let _left = KillOnDrop(run_marker(dir.path()));
    let caller = CallerCgroup::new(&mount);
    let mut cmd = hwr_command(dir.path());
    cmd.env("HWR_CONTAINMENT", "cgroup").args([
        "run",
        "experiment.toml",
        "--quiet",
        "--results-dir",
        "results",
    ]);
    let out = caller.wrap(&cmd).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("cgroup"),
        "no cgroup warning when nested: {}",
        stderr(&out)
    );
    let bundle = the_bundle(&dir.path().join("results"), "where");
    let record = &run_records(&bundle)[0];
    let id = record["run-id"].as_str().unwrap();
    let printed = std::fs::read_to_string(bundle.join("runs").join(id).join(format!("{id}.txt"))).unwrap();
    let lines: Vec<&str> = printed.lines().filter_map(|l| l.strip_prefix("0::")).collect();
    let runner_pid = json(&bundle.join("bundle.json"))["runner-pid"].as_u64().unwrap();
    let caller_name = caller.name().display().to_string();
    assert!(
        lines[0].starts_with(&format!("{caller_name}/hwr-exp/{runner_pid}-")),
        "the run's cgroup: {printed}"
    );
    assert_eq!(
        lines[1],
        format!("{caller_name}/hwr-exp-runner-{runner_pid}"),
        "the runner's cgroup: {printed}"
    );
    let info = json(&bundle.join("bundle.json"));
    assert!(!info["notes"].to_string().contains("cgroup"), "{info}");
    assert!(
        run_cgroups_of(runner_pid).is_empty(),
        "{:?}",
        run_cgroups_of(runner_pid)
    );
}

/// hwr-exp inside hwr-exp: the inner runner's runs nest inside the outer run's cgroup, so the
/// outer run's memory samples count their processes, and the outer runner removes the nested
/// cgroups with its run's.
#[test]
fn an_outer_runs_samples_include_the_inner_runs_processes() {
    if need(Cgroup).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    // The inner run: sh and three sleeps, a few of the outer run's sample intervals long.
    ManifestBuilder::shell(
        "inner",
        "cat /proc/self/cgroup; sleep 1 & sleep 1 & sleep 1 & wait",
    )
    .text_output()
    .write(&inner);
    let inner_results = inner.join("results");
    let inner_manifest = inner.join("experiment.toml").display().to_string();
    let inner_results_arg = inner_results.display().to_string();
    ManifestBuilder::argv(
        "outer",
        &[
            "{hwr-exp}",
            "run",
            &inner_manifest,
            "--quiet",
            "--results-dir",
            &inner_results_arg,
        ],
    )
    .text_output()
    .set("measure", "sample-interval", "50ms")
    .write(dir.path());
    let _left = KillOnDrop(run_marker(dir.path()));
    let _inner_left = KillOnDrop(run_marker(&inner));
    let out = hwr_command(dir.path())
        .env("HWR_CONTAINMENT", "cgroup")
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let outer = the_bundle(&dir.path().join("results"), "outer");
    let outer_run = &run_records(&outer)[0];
    assert!(outer_run["error"].is_null(), "{outer_run}");
    let outer_pid = json(&outer.join("bundle.json"))["runner-pid"].as_u64().unwrap();

    let inner_bundle = the_bundle(&inner_results, "inner");
    let inner_run = &run_records(&inner_bundle)[0];
    let id = inner_run["run-id"].as_str().unwrap();
    let printed =
        std::fs::read_to_string(inner_bundle.join("runs").join(id).join(format!("{id}.txt"))).unwrap();
    let cgroup = printed.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let inner_pid = json(&inner_bundle.join("bundle.json"))["runner-pid"]
        .as_u64()
        .unwrap();
    assert!(
        cgroup.contains(&format!("/hwr-exp/{outer_pid}-"))
            && cgroup.contains(&format!("/hwr-exp/{inner_pid}-")),
        "the inner run's cgroup {cgroup} is not inside the outer run's"
    );

    // The inner runner (and its guardian) plus the inner run's sh and three sleeps.
    let samples = memory_samples(&outer, outer_run);
    let most = samples
        .iter()
        .map(|s| s["processes"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        most >= 5,
        "the outer run's samples saw at most {most} processes: {samples:?}"
    );
    assert!(
        run_cgroups_of(outer_pid).is_empty(),
        "{:?}",
        run_cgroups_of(outer_pid)
    );
}

/// The samples of run `run` (a run.json) of `bundle`: its `memory.jsonl`.
fn memory_samples(bundle: &Path, run: &serde_json::Value) -> Vec<serde_json::Value> {
    let path = bundle
        .join("runs")
        .join(run["run-id"].as_str().unwrap())
        .join("memory.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
