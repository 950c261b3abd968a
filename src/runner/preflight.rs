//! Checks made before a bundle exists (DESIGN 4). A failed preflight writes nothing.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::manifest::Manifest;
use crate::plan::Plan;

/// Runs every preflight check and returns every problem found, one message each.
///
/// Checks: each distinct `argv[0]` is found (in the run's `PATH` when it has no `/`), each distinct
/// workdir exists, the plan's CPUs are in the runner's allowed set (`sched_getaffinity`),
/// `/proc/self/smaps_rollup` is readable when sampling is on, and the results folder can be created.
///
/// # Errors
/// The list of problems, when there is any.
pub fn check(
    manifest: &Manifest,
    plan: &Plan,
    results_dir: &Path,
    allowed_cpus: &[usize],
) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let mut seen_programs = HashSet::new();
    let mut seen_dirs = HashSet::new();
    for run in plan.runs() {
        // A workdir inside the bundle ({bundle}, {run-dir}) cannot exist yet; the run folder is
        // created before the run starts, anything else deeper fails that run alone (spawn-failed).
        let in_bundle = run.workdir.starts_with(plan.bundle());
        if !in_bundle && seen_dirs.insert(run.workdir.clone()) && !run.workdir.is_dir() {
            problems.push(format!(
                "workdir {} does not exist or is not a folder (run {})",
                run.workdir.display(),
                run.run_id
            ));
            continue;
        }
        let Some(program) = run.argv.first() else { continue };
        if !seen_programs.insert((program.clone(), run.workdir.clone())) {
            continue;
        }
        let env = crate::exec::build_env(plan.env_policy, &run.env.set, &run.env.unset);
        let path_var = env
            .iter()
            .find(|(k, _)| k == OsStr::new("PATH"))
            .map(|(_, v)| v.as_os_str());
        if let Err(e) = crate::exec::resolve_program(program, path_var, &run.workdir) {
            problems.push(format!("run {}: {e}", run.run_id));
        }
    }
    for slot in &plan.slots {
        for cpu in slot {
            if !allowed_cpus.contains(cpu) {
                problems.push(format!(
                    "CPU {cpu} is not in this process's allowed set ({})",
                    crate::cpus::format_cpu_list(allowed_cpus)
                ));
            }
        }
    }
    if manifest.measure.sample_interval.is_some()
        && let Err(e) = crate::memory::Rollup::read_self()
    {
        problems.push(format!(
            "{e}; set [measure] sample-interval = \"off\" to run without memory sampling"
        ));
    }
    if let Some(repo) = &manifest.provenance.repo
        && !repo.is_dir()
    {
        problems.push(format!(
            "[provenance] repo {} does not exist or is not a folder",
            repo.display()
        ));
    }
    if let Err(e) = writable(&results_dir.join(&manifest.experiment.name)) {
        problems.push(e);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Checks that `dir` exists as a writable folder or can be created: its nearest existing ancestor must
/// be a writable folder.
fn writable(dir: &Path) -> Result<(), String> {
    let mut probe: PathBuf = dir.to_path_buf();
    while !probe.exists() {
        match probe.parent() {
            Some(p) if !p.as_os_str().is_empty() => probe = p.to_path_buf(),
            _ => {
                probe = PathBuf::from(".");
                break;
            }
        }
    }
    if !probe.is_dir() {
        return Err(format!(
            "results folder {}: {} is not a folder",
            dir.display(),
            probe.display()
        ));
    }
    // A real write (a temporary folder, removed at once) rather than access(2): root passes
    // access() everywhere, /proc and /sys included.
    tempfile::Builder::new()
        .prefix(".hwr-exp-preflight-")
        .tempdir_in(&probe)
        .map(drop)
        .map_err(|e| {
            format!(
                "results folder {}: cannot write in {}: {e}",
                dir.display(),
                probe.display()
            )
        })
}
