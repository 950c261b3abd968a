//! Synthetic result bundles in the on-disk format of `hwr_exp::bundle` (DESIGN 5), written from the
//! crate's own types so they follow format.rs exactly. Shared by `benches/report.rs` (10,000 runs)
//! and the report tests (small fixtures). Numbers are deterministic.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use hwr_exp::bundle::output_summary::{OutputSource, summarize};
use hwr_exp::bundle::{
    BUNDLE_FORMAT, BundleInfo, BundleStatus, Outcome, OutputCheck, PlanFile, RunRecord, files,
};
use hwr_exp::exec::Termination;
use hwr_exp::manifest::{EnvPolicy, Order, OutputFormat, Value};
use hwr_exp::plan::{PlannedRun, RunEnv};

/// What to generate.
#[derive(Debug, Clone)]
pub struct Synth {
    /// `[experiment] name`.
    pub experiment: String,
    /// Modes (matrix key `mode`).
    pub modes: Vec<String>,
    /// Tensor sizes (matrix key `elements`).
    pub sizes: Vec<i64>,
    /// Repetitions per cell.
    pub repetitions: u32,
    /// revision.txt.
    pub revision: String,
    /// provenance.json `dirty`.
    pub dirty: bool,
    /// Plan index of a run that times out (probe stopped by SIGTERM: `completed: false`).
    pub timeout_run: Option<usize>,
    /// Runs from this plan index on have no run.json (interrupted runner).
    pub stop_at: Option<usize>,
    /// Loop samples per run.
    pub loop_samples: u64,
    /// Write memory.jsonl for each run.
    pub memory_jsonl: bool,
    /// Added to every private/anonymous growth, bytes (to make bundle B differ from A).
    pub growth_offset: i64,
}

impl Synth {
    /// A small bundle: get_tensor/reuse x 16/64 x 2 repetitions, the 7th run timed out.
    pub fn small(experiment: &str) -> Synth {
        Synth {
            experiment: experiment.into(),
            modes: vec!["get_tensor".into(), "reuse".into()],
            sizes: vec![16, 64],
            repetitions: 2,
            revision: "3f1c2a9e0d4b5c6a7e8f9012345678901234abcd".into(),
            dirty: false,
            timeout_run: Some(6),
            stop_at: None,
            loop_samples: 4,
            memory_jsonl: true,
            growth_offset: 0,
        }
    }
}

/// Manifest text with a `[report] metrics` table.
pub fn manifest_text(s: &Synth) -> String {
    let modes: Vec<String> = s.modes.iter().map(|m| format!("\"{m}\"")).collect();
    let sizes: Vec<String> = s.sizes.iter().map(|n| n.to_string()).collect();
    format!(
        r#"format = 1

[experiment]
name = "{}"

[command]
argv = ["{{hwr-exp}}", "probe", "safetensors-retention", "--mode", "{{mode}}",
        "--tensor-elements", "{{elements}}", "--iterations", "2000", "--sample-every", "500"]
output = "{{mode}}-{{elements}}-{{repetition}}.json"

[matrix]
mode = [{}]
elements = [{}]

[schedule]
repetitions = {}

[isolation]
timeout = "120s"

[report]
metrics = {{ preparation = "/preparation_seconds", completed = "/completed", absent = "/no/such/key" }}
"#,
        s.experiment,
        modes.join(", "),
        sizes.join(", "),
        s.repetitions
    )
}

fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(v)?;
    text.push('\n');
    std::fs::write(path, text)
}

/// The probe's output document for one run.
fn probe_output(s: &Synth, mode_i: usize, elements: i64, rep: u32, completed: bool) -> serde_json::Value {
    let mode = &s.modes[mode_i];
    let per_sample: i64 = match mode.as_str() {
        "reuse" => 0,
        "view" => 4096,
        _ => 4096 * (1 + elements / 32),
    } + s.growth_offset / s.loop_samples.max(1) as i64;
    let jitter = i64::from(rep % 3) * 4096;
    let base_private = 2_000_000 + elements * 4;
    let base_anon = 1_500_000;
    let base_rss = 6_000_000;
    let sample = |phase: &str, it: u64, grow: i64, fd: i64| {
        serde_json::json!({
            "phase": phase, "iterations": it, "loop_seconds": it as f64 / 100_000.0,
            "rss_bytes": base_rss + grow, "private_bytes": base_private + grow,
            "anonymous_bytes": base_anon + grow, "fd_count": fd, "pss_bytes": base_rss / 2 + grow
        })
    };
    let mut samples = vec![sample("before_file", 0, -100_000, 3), sample("baseline", 0, 0, 4)];
    let n = if completed {
        s.loop_samples
    } else {
        s.loop_samples / 2
    };
    for k in 1..=n {
        let grow = per_sample * k as i64 + if k == n { jitter } else { 0 };
        samples.push(sample("loop", 500 * k, grow, 4));
    }
    if completed {
        samples.push(sample("closed", 500 * n, per_sample * n as i64 / 2, 3));
    }
    serde_json::json!({
        "schema_version": 1,
        "arguments": {"mode": mode, "tensor_elements": elements, "iterations": 500 * s.loop_samples,
                      "sample_every": 500, "warmup": 10},
        "kernel": "6.1.0-synthetic", "hostname": "synth-host", "pid": 4242,
        "cpu_affinity": [0], "preparation_seconds": 0.0125 + f64::from(rep) * 0.001,
        "samples": samples, "completed": completed, "last_tensor_alive": mode != "reuse",
    })
}

/// Writes a complete (or interrupted) bundle into the empty folder `dir`.
pub fn write_bundle(dir: &Path, s: &Synth) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join(files::RUNS))?;
    let manifest = manifest_text(s);
    std::fs::write(dir.join(files::MANIFEST), &manifest)?;
    let mut planned = Vec::new();
    for rep in 1..=s.repetitions {
        for (mi, mode) in s.modes.iter().enumerate() {
            for &el in &s.sizes {
                let index = planned.len();
                let cell = vec![
                    ("mode".to_string(), Value::Str(mode.clone())),
                    ("elements".to_string(), Value::Int(el)),
                ];
                planned.push((
                    mi,
                    el,
                    PlannedRun {
                        run_id: format!("{index:04}-{mode}-{el}-r{rep}"),
                        index,
                        cell,
                        repetition: rep,
                        argv: vec![
                            "/usr/bin/hwr-exp".into(),
                            "probe".into(),
                            "safetensors-retention".into(),
                            "--mode".into(),
                            mode.clone(),
                            "--tensor-elements".into(),
                            el.to_string(),
                        ],
                        workdir: "/work/exp".into(),
                        output: format!("{mode}-{el}-{rep}.json"),
                        env: RunEnv {
                            policy: EnvPolicy::Inherit,
                            set: vec![("CUDA_VISIBLE_DEVICES".into(), String::new())],
                            unset: vec![],
                        },
                        cpus: vec![0],
                        timeout: Some(Duration::from_secs(120)),
                        grace: Duration::from_secs(5),
                        allocator: None,
                        environment: None,
                    },
                ));
            }
        }
    }
    let plan = PlanFile {
        format: BUNDLE_FORMAT,
        order: Order::Interleaved,
        seed: None,
        jobs: 1,
        matrix_keys: vec!["mode".into(), "elements".into()],
        output_format: OutputFormat::Json,
        sample_interval_seconds: Some(0.1),
        runs: planned.iter().map(|p| p.2.clone()).collect(),
    };
    // As the runner writes it (bundle::plan_file::write_plan_json): compact, one run a line.
    let mut text = serde_json::to_string(&plan)?;
    let runs_at = text.find("\"runs\":[").expect("runs") + "\"runs\":[".len();
    text.truncate(runs_at);
    for (i, run) in plan.runs.iter().enumerate() {
        text.push_str(if i == 0 { "\n" } else { ",\n" });
        text.push_str(&serde_json::to_string(run)?);
    }
    text.push_str("]}\n");
    std::fs::write(dir.join(files::PLAN), text)?;
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    // run.json `summary`, made by the function the recorder calls.
    let pointers =
        hwr_exp::report::read::metric_pointers(&manifest_text(s)).map_err(std::io::Error::other)?;
    let asked = hwr_exp::bundle::output_summary::OutputInterest::new(&pointers);
    for (mi, el, p) in &planned {
        if s.stop_at.is_some_and(|stop| p.index >= stop) {
            continue;
        }
        let run_dir = dir.join(files::RUNS).join(&p.run_id);
        std::fs::create_dir_all(&run_dir)?;
        let timed_out = s.timeout_run == Some(p.index);
        let doc = probe_output(s, *mi, *el, p.repetition, !timed_out);
        let output = serde_json::to_string(&doc)? + "\n";
        std::fs::write(run_dir.join(&p.output), &output)?;
        let summary = summarize(OutputSource::Whole(output.into_bytes()), &asked, 0, true)
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .0;
        std::fs::write(run_dir.join(files::STDERR), "")?;
        let mut memory_samples = 0;
        if s.memory_jsonl {
            let mut f = std::io::BufWriter::new(std::fs::File::create(run_dir.join(files::MEMORY))?);
            for k in 0..5u32 {
                let private = 2_000_000 + i64::from(k) * 8192 * (*mi as i64 + 1);
                writeln!(
                    f,
                    r#"{{"t-seconds":{},"rss":{},"pss":{},"private":{},"anonymous":{},"swap":0}}"#,
                    f64::from(k) * 0.1,
                    private + 4_000_000,
                    private + 1_000_000,
                    private,
                    private - 500_000
                )?;
                memory_samples += 1;
            }
        }
        let outcome = if timed_out { Outcome::Timeout } else { Outcome::Ok };
        *counts.entry(outcome).or_default() += 1;
        let wall = 0.25 + p.index as f64 * 0.001;
        let rec = RunRecord {
            format: BUNDLE_FORMAT,
            run_id: p.run_id.clone(),
            index: p.index,
            cell: p.cell.iter().cloned().collect(),
            repetition: p.repetition,
            argv: p.argv.clone(),
            workdir: p.workdir.display().to_string(),
            env: p.env.clone(),
            cpus_requested: vec![0],
            cpus_effective: Some(vec![0]),
            pid: Some(10_000 + p.index as u32),
            start: "2026-01-01T00:00:00Z".into(),
            end: "2026-01-01T00:00:01Z".into(),
            wall_seconds: if timed_out { 120.0 } else { wall },
            user_seconds: Some(wall * 0.8),
            sys_seconds: Some(wall * 0.1),
            peak_rss_bytes: Some(8_000_000 + p.index as u64 * 4096),
            exit_code: if timed_out { None } else { Some(0) },
            signal: if timed_out { Some(15) } else { None },
            termination: if timed_out {
                Termination::Timeout
            } else {
                Termination::Exited
            },
            error: None,
            output: p.output.clone(),
            output_check: OutputCheck::Valid,
            output_check_reason: None,
            outcome,
            containment: None,
            stray_processes_killed: 0,
            escaped_processes: Vec::new(),
            runner_cpus: None,
            cgroup_memory_peak_bytes: None,
            cgroup_memory_source: None,
            sampling: None,
            shared_memory_left: Vec::new(),
            allocator: None,
            environment: None,
            memory_samples,
            sha256: BTreeMap::new(),
            hostname: None,
            node: None,
            slurm: None,
            lost_reason: None,
            artifacts: Vec::new(),
            attempt: 1,
            earlier_attempts: Vec::new(),
            summary: Some(summary),
        };
        write_json(&run_dir.join(files::RUN), &rec)?;
    }
    let interrupted = s.stop_at.is_some_and(|stop| stop < planned.len());
    let info = BundleInfo {
        bundle_format: BUNDLE_FORMAT,
        hwr_exp_version: "0.1.0".into(),
        hwr_exp_path: None,
        hwr_exp_sha256: None,
        experiment: s.experiment.clone(),
        description: None,
        status: if interrupted {
            BundleStatus::Interrupted
        } else {
            BundleStatus::Complete
        },
        created: "2026-01-01T00:00:00Z".into(),
        finished: Some("2026-01-01T00:01:00Z".into()),
        planned_runs: planned.len(),
        counts,
        manifest_sha256: format!("{:064x}", manifest.len()),
        setup_sha256: Default::default(),
        manifest_path: "/work/exp/manifest.toml".into(),
        parent: None,
        runner_pid: 4000,
        seed: None,
        notes: vec![],
        executor: None,
        environments: Default::default(),
        slurm: None,
        overrides: None,
        adaptive: None,
        bisect: None,
    };
    write_json(&dir.join(files::BUNDLE), &info)?;
    std::fs::write(dir.join(files::REVISION), format!("{}\n", s.revision))?;
    write_json(
        &dir.join(files::HOST),
        &serde_json::json!({"format": 1, "hostname": "synth-host", "cpu-model": "Synthetic CPU @ 3.0GHz",
            "kernel": {"sysname": "Linux", "release": "6.1.0-synthetic"}, "hwr-exp-version": "0.1.0"}),
    )?;
    write_json(
        &dir.join(files::PROVENANCE),
        &serde_json::json!({"format": 1, "repo": "/work/exp", "head": s.revision, "dirty": s.dirty, "drift": false}),
    )?;
    Ok(())
}
