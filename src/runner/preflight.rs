//! Checks made before a bundle exists (DESIGN 4). A failed preflight writes nothing.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::manifest::{CpuSelection, Manifest};
use crate::plan::{Plan, PlanError};

/// The CPU-in-allowed-set check (DESIGN 3): every CPU `[isolation] cpus` lists must be in the
/// runner's allowed set `allowed` (`sched_getaffinity`, ascending). `"auto"` takes its CPUs from
/// that set and always passes.
///
/// Run by `runner::planning::expand`, so `check`, `plan`, `run`, `rerun` and `resume` all apply
/// it. Returns one problem per CPU outside the set located at that CPU in an array
/// (`isolation.cpus.N`), and one problem naming every outside CPU of a list string (`"0-999"`)
/// located at the whole `cpus` value.
pub fn cpus_outside_allowed_set(manifest: &Manifest, allowed: &[usize]) -> Vec<PlanError> {
    let CpuSelection::List(list) = &manifest.isolation.cpus else {
        return Vec::new();
    };
    let allowed_text = crate::cpus::format_cpu_list(allowed);
    let problem = |key: String, message: String| {
        PlanError {
        key,
        message,
        help: Some("the allowed set comes from sched_getaffinity (see `taskset -cp $$`); pick CPUs from it or write cpus = \"auto\"".into()),
    }
    };
    let mut problems = Vec::new();
    // CPUs of a list string ("0-999") share one location: one problem names them all.
    let mut unlocated = Vec::new();
    for (i, &cpu) in list.iter().enumerate() {
        if allowed.contains(&cpu) {
            continue;
        }
        let item = format!("isolation.cpus.{i}");
        if manifest.spans.contains_key(&item) {
            problems.push(problem(
                item,
                format!("CPU {cpu} is not in this process's allowed CPU set ({allowed_text})"),
            ));
        } else {
            unlocated.push(cpu);
        }
    }
    match unlocated.as_slice() {
        [] => {}
        [cpu] => problems.push(problem(
            "isolation.cpus".into(),
            format!("CPU {cpu} is not in this process's allowed CPU set ({allowed_text})"),
        )),
        cpus => problems.push(problem(
            "isolation.cpus".into(),
            format!(
                "CPUs {} are not in this process's allowed CPU set ({allowed_text})",
                crate::cpus::format_cpu_list(cpus)
            ),
        )),
    }
    problems
}

/// The allocator-path check (`[isolation] allocator`): every library a run preloads must be a
/// readable file (a known name was found in the linker cache when the plan was made). Run by
/// `runner::planning::expand` like [`cpus_outside_allowed_set`], so `check` refuses it too. One
/// problem per distinct path, located at `isolation.allocator`.
pub fn allocator_paths(plan: &Plan) -> Vec<PlanError> {
    let mut seen = HashSet::new();
    let mut problems = Vec::new();
    for run in plan.runs() {
        let Some(path) = run.allocator.as_ref().and_then(|a| a.path.clone()) else {
            // No allocator in the first run: none in any (the template is the same).
            if run.allocator.is_none() {
                break;
            }
            continue;
        };
        if !seen.insert(path.clone()) {
            continue;
        }
        let problem = match std::fs::File::open(&path).and_then(|f| f.metadata()) {
            Ok(m) if m.is_file() => continue,
            Ok(_) => format!("allocator library {} is not a file", path.display()),
            Err(e) => format!("allocator library {}: {e}", path.display()),
        };
        problems.push(PlanError {
            key: "isolation.allocator".into(),
            message: problem,
            help: Some("give the path of a shared library (relative paths start at the manifest's folder), or a name: glibc, jemalloc, tcmalloc, mimalloc".into()),
        });
    }
    problems
}

/// [`programs_and_workdirs`] as problems at the manifest's keys: a workdir at `command.workdir`,
/// a program at `command.argv.0` (else `command.argv`, `command.shell`), each with a help line.
/// For `hwr-exp check` (`runner::planning::missing_here`), which `run`'s preflight agrees with.
pub fn missing_here(manifest: &Manifest, plan: &Plan) -> Vec<PlanError> {
    programs_and_workdirs(plan)
        .into_iter()
        .map(|(missing, message)| {
            let (keys, help): (&[&str], &str) = match missing {
                Missing::Workdir => (
                    &["command.workdir", "command"],
                    "create the folder, or change `workdir`",
                ),
                Missing::Program => (
                    &["command.argv.0", "command.argv", "command.shell", "command"],
                    "install it or put it on PATH; it is looked up as the run would (the run's PATH, relative to its workdir)",
                ),
            };
            let key = keys
                .iter()
                .find(|k| manifest.spans.contains_key(**k))
                .copied()
                .unwrap_or("command");
            PlanError {
                key: key.to_string(),
                message,
                help: Some(help.to_string()),
            }
        })
        .collect()
}

/// What a run's command needs from this machine that [`programs_and_workdirs`] found missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The run's workdir (`[command] workdir`) is not a folder.
    Workdir,
    /// The run's program (`argv[0]`, or the shell of `[command] shell`) is not found.
    Program,
}

/// The runs' workdirs that are not folders and programs that cannot be found (resolved as the
/// run would: its `PATH`, relative to its workdir), each with its message
/// (`workdir /x does not exist or is not a folder (run 000-r1)`, `run 000-r1: ...`). Only the
/// first run is looked at when every run has the same program and workdir; each distinct
/// workdir and (program, workdir) once. A workdir inside the bundle ({bundle}, {run-dir})
/// cannot exist yet and is not checked. Part of [`check`]; `hwr-exp check` reports the same at
/// the manifest's `workdir` and `argv` (or `shell`).
pub fn programs_and_workdirs(plan: &Plan) -> Vec<(Missing, String)> {
    let mut problems = Vec::new();
    let mut seen_programs = HashSet::new();
    let mut seen_dirs = HashSet::new();
    let checked = if plan.same_program_everywhere() {
        1
    } else {
        plan.len()
    };
    for run in plan.runs().take(checked) {
        // A workdir inside the bundle ({bundle}, {run-dir}) cannot exist yet; the run folder is
        // created before the run starts, anything else deeper fails that run alone (spawn-failed).
        // (`check` plans with a relative stand-in for the bundle, which the manifest's folder
        // then prefixes.)
        let bundle = plan.bundle();
        let in_bundle = run.workdir.starts_with(bundle)
            || (bundle.is_relative() && run.workdir.ancestors().any(|a| a.ends_with(bundle)));
        if !in_bundle && seen_dirs.insert(run.workdir.clone()) && !run.workdir.is_dir() {
            problems.push((
                Missing::Workdir,
                format!(
                    "workdir {} does not exist or is not a folder (run {})",
                    run.workdir.display(),
                    run.run_id
                ),
            ));
            continue;
        }
        let Some(program) = run.argv.first() else { continue };
        if !seen_programs.insert((program.clone(), run.workdir.clone())) {
            continue;
        }
        let env = super::run_env(&run);
        let path_var = env
            .iter()
            .find(|(k, _)| k == OsStr::new("PATH"))
            .map(|(_, v)| v.as_os_str());
        if let Err(e) = crate::exec::resolve_program(program, path_var, &run.workdir) {
            problems.push((Missing::Program, format!("run {}: {e}", run.run_id)));
        }
    }
    problems
}

/// Runs every preflight check and returns every problem found, one message each.
///
/// Checks: the environment settings (`HWR_CONTAINMENT`, the test hook `HWR_TEST_PAUSE_AT`), each distinct `argv[0]` is found (in the run's `PATH` when it has no `/`), each distinct
/// workdir exists, `/proc/self/smaps_rollup` is readable when sampling is on, the folder the
/// repository is discovered from exists, and `<results_dir>/<experiment>` can be created. (The
/// plan's CPUs were checked against the allowed set when it was made:
/// [`cpus_outside_allowed_set`].)
///
/// # Errors
/// The list of problems, when there is any.
pub fn check(plan: &Plan, results_dir: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if let Err(e) = crate::exec::check_containment_setting() {
        problems.push(e);
    }
    if let Err(e) = crate::bundle::write::check_test_pause_setting() {
        problems.push(e);
    }
    problems.extend(
        programs_and_workdirs(plan)
            .into_iter()
            .map(|(_, message)| message),
    );
    if plan.sample_interval.is_some()
        && let Err(e) = crate::memory::Rollup::read_self()
    {
        problems.push(format!(
            "{e}; set [measure] sample-interval = \"off\" to run without memory sampling"
        ));
    }
    if !plan.repo_start.is_dir() {
        problems.push(format!(
            "repository folder {} (`[provenance] repo`, else the manifest's folder) does not exist or is not a folder",
            plan.repo_start.display()
        ));
    }
    if let Err(e) = writable(&results_dir.join(&plan.experiment)) {
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
