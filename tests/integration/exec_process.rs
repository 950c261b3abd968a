//! `ProcessLauncher` end to end: real child processes, real files in temporary directories.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hwr_exp::exec::EnvPolicy;
use hwr_exp::exec::{
    CancelFlag, Launcher, MemorySample, ProcessLauncher, RunOutcome, RunSpec, Termination, build_env,
    resolve_program,
};

use crate::support::{group_exists, group_members, process_state, rerun_this_test, wait_for, wait_for_file};

/// A spec running `argv` in `dir` with the test's PATH, output into `dir`.
fn spec(dir: &Path, argv: &[&str]) -> RunSpec {
    RunSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        workdir: dir.to_path_buf(),
        env: vec![(
            OsString::from("PATH"),
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )],
        cpus: Vec::new(),
        timeout: Some(Duration::from_secs(20)),
        grace: Duration::from_secs(1),
        stdout_path: dir.join("stdout"),
        stderr_path: dir.join("stderr"),
        memory_path: None,
        sample_interval: Duration::from_millis(100),
        allocator: None,
    }
}

fn sh(dir: &Path, script: &str) -> RunSpec {
    spec(dir, &["sh", "-c", script])
}

fn run(spec: &RunSpec) -> RunOutcome {
    ProcessLauncher::new().execute(spec, &no_cancel())
}

fn no_cancel() -> CancelFlag {
    Arc::new(AtomicBool::new(false))
}

fn stdout(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stdout")).unwrap()
}

/// The group is gone for the kernel too: kill(-pgid, 0) fails with ESRCH.
fn assert_group_gone(pgid: u32) {
    assert!(
        !group_exists(pgid as i32),
        "group {pgid} still exists: {:?}",
        group_members(i64::from(pgid))
    );
    assert!(group_members(i64::from(pgid)).is_empty());
}

#[test]
fn timeout_kills_the_whole_group_including_a_grandchild_holding_stdout() {
    let dir = tempfile::tempdir().unwrap();
    // The grandchild holds stdout for 30 s and then leaves a mark: a runner that waited for it
    // (for the end of stdout) would return after the mark, not before. No time bound needed.
    let late = dir.path().join("late");
    let mut s = sh(
        dir.path(),
        &format!("(sleep 30; : > {0}) & sleep 30; : > {0}", late.display()),
    );
    s.timeout = Some(Duration::from_secs(2));
    s.grace = Duration::from_secs(1);
    let t = Instant::now();
    let o = run(&s);
    let took = t.elapsed();
    assert_eq!(o.termination, Termination::Timeout, "{o:?}");
    assert!(
        !late.exists(),
        "the runner waited for the grandchild's end (took {took:?})"
    );
    // Causal, so a loaded machine cannot break it: no timeout before its time.
    assert!(took >= Duration::from_secs(2), "took {took:?}");
    assert!(o.wall_seconds >= 2.0);
    assert_eq!(o.exit_code, None);
    assert_eq!(o.signal, Some(libc::SIGTERM));
    assert_group_gone(o.pid.unwrap());
}

#[test]
fn sigterm_ignored_gets_sigkill_after_grace() {
    let dir = tempfile::tempdir().unwrap();
    // The shell marks that its trap is set. A SIGTERM that came before the trap (a loaded
    // machine may take longer than the timeout to start a shell) is no test of the grace
    // period: then the run is repeated with a timeout four times as long, until the trap was
    // in place in time; a run that saw its trap and still died of SIGTERM is a failure.
    let ready = dir.path().join("trap-set");
    let script = format!(
        "trap '' TERM; : > {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let mut timeout = Duration::from_millis(300);
    let grace = Duration::from_millis(500);
    loop {
        let _ = std::fs::remove_file(&ready);
        let mut s = sh(dir.path(), &script);
        s.timeout = Some(timeout);
        s.grace = grace;
        let t = Instant::now();
        let o = run(&s);
        let took = t.elapsed();
        assert_eq!(o.termination, Termination::Timeout, "{o:?}");
        assert_group_gone(o.pid.unwrap());
        if o.signal == Some(libc::SIGTERM) && !ready.exists() {
            assert!(
                timeout < Duration::from_secs(300),
                "the shell never set its trap in time"
            );
            timeout *= 4;
            continue;
        }
        assert!(ready.exists(), "{o:?}");
        assert_eq!(o.signal, Some(libc::SIGKILL), "{o:?}");
        // SIGKILL never comes before the grace period is over.
        assert!(took >= timeout + grace, "took {took:?}");
        break;
    }
}

#[test]
fn own_timeout_124_is_an_exit_code_not_our_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&spec(dir.path(), &["timeout", "0.3", "sleep", "5"]));
    assert_eq!(o.termination, Termination::Exited, "{o:?}");
    assert_eq!(o.exit_code, Some(124));
    assert_eq!(o.signal, None);
}

#[test]
fn exit_codes_and_signals() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&sh(dir.path(), "exit 3"));
    assert_eq!(
        (o.termination, o.exit_code, o.signal),
        (Termination::Exited, Some(3), None)
    );

    let o = run(&sh(dir.path(), "kill -SEGV $$"));
    assert_eq!(o.termination, Termination::Signaled, "{o:?}");
    assert_eq!((o.exit_code, o.signal), (None, Some(libc::SIGSEGV)));

    let o = run(&sh(dir.path(), "kill -KILL $$"));
    assert_eq!(o.termination, Termination::Signaled, "{o:?}");
    assert_eq!(o.signal, Some(libc::SIGKILL));

    let o = run(&spec(dir.path(), &["true"]));
    assert_eq!((o.termination, o.exit_code), (Termination::Exited, Some(0)));
    assert_eq!(o.stray_processes_killed, 0);
    assert!(o.error.is_none());
}

#[test]
fn stdout_and_stderr_go_to_their_files_and_stdin_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&sh(
        dir.path(),
        "echo out; echo err >&2; cat; echo \"cwd=$(pwd)\"",
    ));
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    let out = stdout(dir.path());
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(out, format!("out\ncwd={}\n", cwd.display()));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("stderr")).unwrap(),
        "err\n"
    );
}

/// Runs the child half `name` of a test of this module in a process of its own (started by
/// `cmd`, made from [`rerun_this_test`]) and asserts that it ran and passed: process-wide state a
/// test needs (an environment variable, an ignored signal) is set there, never in this process,
/// whose other tests run at the same time.
fn run_child_half(name: &str, mut cmd: std::process::Command) {
    let out = cmd.output().expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The runner's environment holds `HWR_TEST_CUSTOM`: the spec decides whether a run sees it.
/// The variable is set for a child process running [`environment_child`].
#[test]
fn environment_is_exactly_the_spec() {
    let mut cmd = rerun_this_test(module_path!(), "environment_child");
    cmd.env("HWR_TEST_CUSTOM", "from-runner");
    run_child_half("environment_child", cmd);
}

/// Not a test by itself: the body of `environment_is_exactly_the_spec`, in a process started
/// with `HWR_TEST_CUSTOM=from-runner`.
#[test]
#[ignore = "child half of environment_is_exactly_the_spec"]
fn environment_child() {
    if std::env::var_os("HWR_TEST_CUSTOM").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = build_env(
        EnvPolicy::Inherit,
        &[
            ("X".into(), "".into()),
            ("Y".into(), "1".into()),
            ("Y".into(), "2".into()),
        ],
        &["HWR_TEST_CUSTOM".to_string()],
    );
    let mut s = sh(
        dir.path(),
        "echo \"X=${X-unset} Y=${Y-unset} C=${HWR_TEST_CUSTOM-unset} Z=${HWR_TEST_NOT_SET-unset}\"",
    );
    s.env = env;
    let o = run(&s);
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(stdout(dir.path()), "X= Y=2 C=unset Z=unset\n");

    // inherit keeps the custom var
    let env = build_env(EnvPolicy::Inherit, &[], &[]);
    assert!(
        env.iter()
            .any(|(k, v)| k == "HWR_TEST_CUSTOM" && v == "from-runner")
    );

    // clean keeps PATH and drops the custom var
    let env = build_env(EnvPolicy::Clean, &[("X".into(), "".into())], &[]);
    assert!(env.iter().all(|(k, _)| k != "HWR_TEST_CUSTOM"));
    assert!(env.iter().any(|(k, v)| k == "X" && v.is_empty()));
    let mut s = sh(
        dir.path(),
        "echo \"C=${HWR_TEST_CUSTOM-unset}\"; echo \"PATH=$PATH\"",
    );
    s.env = env;
    let o = run(&s);
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    let path = std::env::var("PATH").unwrap();
    assert_eq!(stdout(dir.path()), format!("C=unset\nPATH={path}\n"));
}

#[test]
fn spawn_failures_are_reported_not_panicked() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&spec(dir.path(), &["hwr-no-such-program-xyz"]));
    assert_eq!(o.termination, Termination::SpawnFailed);
    let err = o.error.unwrap();
    assert!(err.contains("PATH"), "{err}");
    assert!(err.contains("hwr-no-such-program-xyz"), "{err}");
    assert_eq!(o.pid, None);

    let e = resolve_program(
        "hwr-no-such-program-xyz",
        Some("/nonexistent-a:/usr/bin".as_ref()),
        dir.path(),
    )
    .unwrap_err();
    assert!(
        e.contains("PATH") && e.contains("/nonexistent-a, /usr/bin"),
        "{e}"
    );
    let sh_path = resolve_program("sh", std::env::var_os("PATH").as_deref(), dir.path()).unwrap();
    assert!(sh_path.is_absolute() && sh_path.ends_with("sh"));

    // a file that is not executable
    std::fs::write(dir.path().join("script"), "#!/bin/sh\n").unwrap();
    let o = run(&spec(dir.path(), &["./script"]));
    assert_eq!(o.termination, Termination::SpawnFailed);
    assert!(o.error.as_ref().unwrap().contains("not executable"), "{o:?}");
    // the same found via PATH
    let e = resolve_program("script", Some(dir.path().as_os_str()), Path::new("/")).unwrap_err();
    assert!(e.contains("cannot be executed"), "{e}");

    // missing workdir
    let mut s = spec(dir.path(), &["true"]);
    s.workdir = dir.path().join("missing");
    let o = run(&s);
    assert_eq!(o.termination, Termination::SpawnFailed);
    assert!(o.error.as_ref().unwrap().contains("working directory"), "{o:?}");
    // The OS error travels typed beside the message.
    assert_eq!(o.start_os_error, Some(rustix::io::Errno::NOENT), "{o:?}");
    // Not found in PATH is no OS error; an output file that cannot be created is.
    let o = run(&spec(dir.path(), &["hwr-no-such-program-xyz"]));
    assert_eq!(o.start_os_error, None, "{o:?}");
    let mut s = spec(dir.path(), &["true"]);
    s.stdout_path = dir.path().join("no-folder").join("stdout");
    let o = run(&s);
    assert_eq!(o.termination, Termination::SpawnFailed);
    assert_eq!(o.start_os_error, Some(rustix::io::Errno::NOENT), "{o:?}");
    assert!(
        o.error.as_ref().unwrap().contains("cannot create stdout file"),
        "{o:?}"
    );
}

#[test]
fn relative_program_is_resolved_against_the_workdir() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hello.sh");
    std::fs::write(&script, "#!/bin/sh\necho \"hello $0 $1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run(&spec(dir.path(), &["./hello.sh", "arg"]));
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(stdout(dir.path()), "hello ./hello.sh arg\n");
}

#[test]
fn only_fds_0_1_2_are_inherited() {
    let dir = tempfile::tempdir().unwrap();
    // An fd without close-on-exec in the runner.
    let f = std::fs::File::open("/dev/null").unwrap();
    let raw = unsafe { libc::dup(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    assert!(raw > 2);
    assert_eq!(unsafe { libc::fcntl(raw, libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
    let o = run(&spec(dir.path(), &["ls", "/proc/self/fd"]));
    unsafe { libc::close(raw) };
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    let fds: Vec<u32> = stdout(dir.path()).lines().map(|l| l.parse().unwrap()).collect();
    // 0, 1, 2 and the directory ls opened to list /proc/self/fd.
    assert!(fds.starts_with(&[0, 1, 2]), "{fds:?}");
    assert!(fds.len() <= 4, "inherited extra fds: {fds:?}");
}

#[test]
fn cpu_affinity_is_applied_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = hwr_exp::cpus::allowed_cpus().unwrap();
    let cpu = *allowed.last().unwrap();
    let mut s = sh(dir.path(), "grep Cpus_allowed_list /proc/self/status");
    s.cpus = vec![cpu];
    let o = run(&s);
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(o.cpus_effective, Some(vec![cpu]));
    let out = stdout(dir.path());
    let list = out.trim().strip_prefix("Cpus_allowed_list:").unwrap().trim();
    assert_eq!(hwr_exp::cpus::parse_cpu_list(list).unwrap(), vec![cpu]);

    // unpinned: the runner's own set
    let o = run(&spec(dir.path(), &["true"]));
    assert_eq!(o.cpus_effective, Some(allowed));
}

#[test]
fn memory_samples_are_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    // The run lasts `length`; 3 samples of 100 ms need more than 0.3 s of it. A loaded machine
    // may give the sampler fewer: then the run is repeated four times as long (as a slow start
    // is in sigterm_ignored_gets_sigkill_after_grace). A sampler that stops, or never starts,
    // fails at every length.
    let interval = Duration::from_millis(100);
    let mut length = Duration::from_millis(600);
    let (o, samples) = loop {
        let mut s = spec(dir.path(), &["sleep", &format!("{}", length.as_secs_f64())]);
        s.memory_path = Some(dir.path().join("memory.jsonl"));
        s.sample_interval = interval;
        let _ = std::fs::remove_file(dir.path().join("memory.jsonl"));
        let o = run(&s);
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        let text = std::fs::read_to_string(dir.path().join("memory.jsonl")).unwrap_or_default();
        let samples: Vec<MemorySample> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if samples.len() >= 3 || length >= Duration::from_secs(40) {
            break (o, samples);
        }
        length *= 4;
    };
    assert_eq!(samples.len() as u32, o.memory_samples);
    assert!(
        samples.len() >= 3,
        "{} samples in a run of {length:?}",
        samples.len()
    );
    assert!(samples.windows(2).all(|w| w[0].t_seconds < w[1].t_seconds));
    assert!(samples.iter().all(|s| s.rollup.rss.unwrap() > 0));
    // Never early (causal: load only delays): the first sample one interval after the start, each
    // next one an interval later, so never more samples than intervals in the run.
    assert!(
        samples[0].t_seconds >= interval.as_secs_f64() * 0.99,
        "first sample before one interval: {}",
        samples[0].t_seconds
    );
    assert!(
        samples
            .windows(2)
            .all(|w| w[1].t_seconds - w[0].t_seconds >= interval.as_secs_f64() * 0.9),
        "two samples closer than an interval: {:?}",
        samples.iter().map(|s| s.t_seconds).collect::<Vec<_>>()
    );
    assert!(
        samples.len() as f64 <= o.wall_seconds / interval.as_secs_f64() + 1.0,
        "{} samples in {} s",
        samples.len(),
        o.wall_seconds
    );

    // No empty file when no sample could be taken: it is made at the first sample.
    let mut s = spec(dir.path(), &["true"]);
    s.memory_path = Some(dir.path().join("m2.jsonl"));
    s.sample_interval = Duration::from_secs(10);
    let o = run(&s);
    assert_eq!(o.memory_samples, 0, "{o:?}");
    assert!(!dir.path().join("m2.jsonl").exists());
    assert!(o.sampling.unwrap().note.is_some_and(|n| !n.is_empty()));
}

#[test]
fn cancel_flag_interrupts_promptly() {
    let dir = tempfile::tempdir().unwrap();
    // Both sleeps leave a mark when they end on their own: a cancel that is not acted on shows
    // as a mark (no time bound that a loaded machine could break).
    let late = dir.path().join("late");
    let s = sh(
        dir.path(),
        &format!(
            "(sleep 30; : > {0}) & echo started > started; sleep 30; : > {0}",
            late.display()
        ),
    );
    let cancel = no_cancel();
    let c2 = cancel.clone();
    let started = dir.path().join("started");
    // The flag is set once the run is under way (its file is written), not after a fixed time.
    let setter = std::thread::spawn(move || {
        wait_for_file(&started, "started\n", Duration::from_secs(20));
        c2.store(true, Ordering::SeqCst);
        Instant::now()
    });
    let o = ProcessLauncher::new().execute(&s, &cancel);
    let returned = Instant::now();
    let cancelled = setter.join().unwrap();
    assert_eq!(o.termination, Termination::Interrupted, "{o:?}");
    let took = returned.duration_since(cancelled);
    assert!(
        !late.exists(),
        "the run ended on its own, not by the flag ({took:?} after it was set)"
    );
    assert_group_gone(o.pid.unwrap());
}

#[test]
fn wait4_reports_cpu_time_and_peak_rss() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&sh(
        dir.path(),
        "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done",
    ));
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert!(o.user_seconds.unwrap() > 0.0, "{o:?}");
    assert!(o.sys_seconds.is_some());
    assert!(o.peak_rss_bytes.unwrap() > 100 * 1024, "{o:?}");
    assert!(o.wall_seconds > 0.0 && o.ended >= o.started);
}

#[test]
fn stray_background_process_is_killed_after_leader_exits() {
    let dir = tempfile::tempdir().unwrap();
    // The stray leaves a mark when its sleep ends: a runner that waited for it would return after.
    let late = dir.path().join("late");
    let mut s = sh(
        dir.path(),
        &format!("(sleep 30; : > {}) & echo started", late.display()),
    );
    s.grace = Duration::from_millis(500);
    let o = run(&s);
    assert!(!late.exists(), "the runner waited for the stray: {o:?}");
    assert_eq!(
        (o.termination, o.exit_code),
        (Termination::Exited, Some(0)),
        "{o:?}"
    );
    assert!(o.stray_processes_killed >= 1, "{o:?}");
    assert_group_gone(o.pid.unwrap());
    assert_eq!(stdout(dir.path()), "started\n");
}

#[test]
fn stray_ignoring_sigterm_is_sigkilled() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = sh(dir.path(), "(trap '' TERM; sleep 30) & sleep 0.1");
    s.grace = Duration::from_millis(300);
    let o = run(&s);
    assert_eq!(o.termination, Termination::Exited, "{o:?}");
    assert!(o.stray_processes_killed >= 1, "{o:?}");
    assert_group_gone(o.pid.unwrap());
}

/// Mean wall time of `execute()` for `/bin/true`; run with `--ignored --nocapture`.
#[test]
#[ignore]
fn overhead_of_bin_true() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(dir.path(), &["/bin/true"]);
    s.memory_path = Some(dir.path().join("m.jsonl"));
    s.cpus = vec![hwr_exp::cpus::allowed_cpus().unwrap()[0]];
    let ex = ProcessLauncher::new();
    let n = 500;
    let t = Instant::now();
    for _ in 0..n {
        let o = ex.execute(&s, &no_cancel());
        assert_eq!(o.exit_code, Some(0));
    }
    let per = t.elapsed() / n;
    println!("execute(/bin/true): {per:?} per run over {n} runs");
}

#[test]
fn cancelled_before_start_spawns_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = no_cancel();
    cancel.store(true, Ordering::SeqCst);
    let o = ProcessLauncher::new().execute(&spec(dir.path(), &["true"]), &cancel);
    assert_eq!(o.termination, Termination::Interrupted);
    assert_eq!(o.pid, None);
}

/// Not a test by itself: the body of the runner process that `run_dies_with_its_runner` kills.
#[test]
#[ignore]
fn pdeathsig_helper() {
    let Some(pidfile) = std::env::var_os("HWR_TEST_PDEATH_PIDFILE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut s = sh(dir.path(), "echo $$ > \"$1\"; exec sleep 30");
    s.argv.push("sh".into());
    s.argv.push(pidfile.into_string().unwrap());
    run(&s);
}

#[test]
fn run_dies_with_its_runner() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut helper = rerun_this_test(module_path!(), "pdeathsig_helper")
        .env("HWR_TEST_PDEATH_PIDFILE", &pidfile)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let read_pid = || -> Option<i32> {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    wait_for("the helper to start its run", Duration::from_secs(10), || {
        read_pid().is_some()
    });
    let pid = read_pid().unwrap();
    // The run is alive while its runner is.
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    helper.kill().unwrap(); // SIGKILL: no cleanup code runs in the runner
    helper.wait().unwrap();
    // Gone, or a zombie (reparented to this test process, a subreaper) that we reap.
    wait_for("the run to die with its runner", Duration::from_secs(3), || {
        matches!(process_state(i64::from(pid)), None | Some('Z'))
    });
    // SAFETY: waitpid with a null status pointer only reaps `pid` if it is our zombie child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
}

/// An ignored signal in the runner would survive exec without the reset. The runner here is a
/// child process running [`signal_dispositions_child`], started by a shell that ignores SIGUSR1
/// (`trap '' USR1`; exec keeps ignored dispositions): this process's dispositions are never
/// changed, its other tests start processes at the same time.
#[test]
fn signal_dispositions_and_mask_are_reset() {
    let test = rerun_this_test(module_path!(), "signal_dispositions_child");
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(r#"trap '' USR1; exec "$@""#)
        .arg("sh")
        .arg(test.get_program())
        .args(test.get_args())
        .env("HWR_TEST_SIGUSR1_IGNORED", "1");
    run_child_half("signal_dispositions_child", cmd);
}

/// Not a test by itself: the body of `signal_dispositions_and_mask_are_reset`, in a process
/// whose SIGUSR1 is ignored.
#[test]
#[ignore = "child half of signal_dispositions_and_mask_are_reset"]
fn signal_dispositions_child() {
    if std::env::var_os("HWR_TEST_SIGUSR1_IGNORED").is_none() {
        return;
    }
    // The setup holds: this process ignores SIGUSR1 (signal 10, bit 9 of SigIgn).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
        .expect("SigIgn in /proc/self/status");
    assert_ne!(ignored & (1 << 9), 0, "SIGUSR1 is not ignored: {ignored:x}");
    let dir = tempfile::tempdir().unwrap();
    let o = run(&spec(
        dir.path(),
        &["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"],
    ));
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(
        stdout(dir.path()),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
}

#[test]
fn same_path_for_stdout_and_stderr_interleaves() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = sh(dir.path(), "echo one; echo two >&2; echo three");
    s.stderr_path = s.stdout_path.clone();
    let o = run(&s);
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(stdout(dir.path()), "one\ntwo\nthree\n");
}

/// The signal mask of the calling thread (`SigBlk` of /proc/thread-self/status), as hex.
fn blocked_signals_of_this_thread() -> String {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap()
        .trim()
        .to_string()
}

/// Several threads starting runs at once, some of which fail before exec (a CPU that does not
/// exist), each get their own child's result, and each thread's signal mask is what it was.
#[test]
fn concurrent_starts_from_many_threads_each_get_their_own_result() {
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let base = dir.path().join(t.to_string());
            s.spawn(move || {
                std::fs::create_dir(&base).unwrap();
                let mask = blocked_signals_of_this_thread();
                for i in 0..25 {
                    let mut sp = sh(&base, &format!("echo {t}-{i}; exit {}", i % 7));
                    let fails = i % 5 == 4;
                    if fails {
                        sp.cpus = vec![1000];
                    }
                    let o = run(&sp);
                    if fails {
                        assert_eq!(o.termination, Termination::SpawnFailed, "{o:?}");
                        let error = o.error.unwrap_or_default();
                        assert!(error.contains("setting the CPU affinity"), "{error}");
                    } else {
                        assert_eq!(o.termination, Termination::Exited, "{o:?}");
                        assert_eq!(o.exit_code, Some(i % 7), "{o:?}");
                        assert_eq!(stdout(&base), format!("{t}-{i}\n"));
                    }
                    assert_eq!(blocked_signals_of_this_thread(), mask, "run {t}-{i}");
                }
            });
        }
    });
}
