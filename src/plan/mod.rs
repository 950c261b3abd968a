//! Plan expansion: manifest -> ordered list of runs. Pure: no I/O, no clock, no environment reads
//! (everything host-dependent comes in through [`PlanContext`]).

pub mod render;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bundle::{EnvChanges, PlanFile, PlannedRunRecord};
use crate::manifest::template;
use crate::manifest::{Cell, CpuSelection, EnvPolicy, Manifest, Order, Program, Value};

/// Host facts and paths the plan depends on.
#[derive(Debug, Clone)]
pub struct PlanContext {
    /// Absolute path of the running hwr-exp binary (`{hwr-exp}`).
    pub hwr_exp: String,
    /// The bundle folder (`{bundle}`, `HWR_BUNDLE`); for `hwr-exp plan`, a stand-in such as `<bundle>`.
    pub bundle: PathBuf,
    /// The runner's allowed CPUs, ascending (`sched_getaffinity`), used for `cpus = "auto"`.
    pub allowed_cpus: Vec<usize>,
    /// Seed to use for `order = "shuffled"` when the manifest gives none.
    pub fallback_seed: u64,
}

/// One run of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    /// 0-based position in execution order.
    pub index: usize,
    /// Unique, file-name-safe id: zero-padded index, cell values, repetition.
    pub run_id: String,
    /// Matrix values in manifest key order.
    pub cell: Cell,
    /// 1-based repetition.
    pub repetition: u32,
    /// argv to execute (`/bin/sh -c text` for `shell`).
    pub argv: Vec<String>,
    /// Absolute working directory.
    pub workdir: PathBuf,
    /// Output file name inside the run folder (no `/`, never `..`).
    pub output: String,
    /// Environment changes: policy, variables set (in order applied), variables removed.
    pub env: EnvChanges,
    /// CPUs the run is pinned to.
    pub cpus: Vec<usize>,
    /// Which job slot (0..jobs) runs it.
    pub slot: usize,
}

/// The expanded manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Runs in execution order.
    pub runs: Vec<PlannedRun>,
    /// Order used.
    pub order: Order,
    /// Seed used when shuffled (the manifest's or the fallback).
    pub seed: Option<u64>,
    /// Number of job slots.
    pub jobs: u32,
    /// CPUs of each job slot.
    pub slots: Vec<Vec<usize>>,
    /// Whole-run timeout.
    pub timeout: Option<Duration>,
    /// SIGTERM-to-SIGKILL grace period.
    pub grace: Duration,
    /// Environment policy.
    pub env_policy: EnvPolicy,
    /// Matrix keys in manifest order.
    pub matrix_keys: Vec<String>,
}

/// A problem found only by expansion, located by dotted manifest key (see [`Manifest::spans`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    /// Dotted key path, e.g. `"command.output"`.
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// Optional hint.
    pub help: Option<String>,
}

impl PlanError {
    fn new(key: &str, message: String, help: Option<String>) -> PlanError {
        PlanError {
            key: key.to_string(),
            message,
            help,
        }
    }
}

/// File names a run folder already uses; `output` may not take them.
const RESERVED_NAMES: &[&str] = &["run.json", "stderr.log", "memory.jsonl"];

/// Expands a validated manifest into its runs.
///
/// # Errors
/// Every [`PlanError`] found: every cell excluded, an include duplicating a cell, a template that does
/// not render, two runs with the same output name, an output name that is reserved, too few CPUs.
pub fn expand(manifest: &Manifest, ctx: &PlanContext) -> Result<Plan, Vec<PlanError>> {
    let mut errors = Vec::new();
    let cells = cells(manifest, &mut errors);
    let slots = cpu_slots(manifest, ctx, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }

    let reps = manifest.schedule.repetitions;
    let mut order: Vec<(usize, u32)> = Vec::with_capacity(cells.len() * reps as usize);
    match manifest.schedule.order {
        Order::Grouped => {
            for c in 0..cells.len() {
                order.extend((1..=reps).map(|r| (c, r)));
            }
        }
        Order::Interleaved | Order::Shuffled => {
            for r in 1..=reps {
                order.extend((0..cells.len()).map(|c| (c, r)));
            }
        }
    }
    let seed = match manifest.schedule.order {
        Order::Shuffled => {
            let seed = manifest.schedule.seed.unwrap_or(ctx.fallback_seed);
            fastrand::Rng::with_seed(seed).shuffle(&mut order);
            Some(seed)
        }
        _ => None,
    };

    let templates = Templates::new(manifest);
    let width = order.len().saturating_sub(1).to_string().len().max(3);
    let mut runs = Vec::with_capacity(order.len());
    let mut outputs: HashMap<String, usize> = HashMap::with_capacity(order.len());
    let jobs = slots.len();
    for (index, (c, repetition)) in order.into_iter().enumerate() {
        let cell = &cells[c];
        let run_id = run_id(index, width, cell, repetition);
        match templates.render_run(manifest, ctx, cell, repetition, &run_id) {
            Ok((argv, workdir, output, env)) => {
                if RESERVED_NAMES.contains(&output.as_str()) {
                    errors.push(PlanError::new(
                        "command.output",
                        format!(
                            "output name `{output}` is reserved for the runner's own file in the run folder"
                        ),
                        None,
                    ));
                } else if let Some(first) = outputs.insert(output.clone(), index) {
                    if errors.iter().filter(|e| e.key == "command.output").count() < 3 {
                        errors.push(PlanError::new(
                            "command.output",
                            format!("runs {first} and {index} both save their output as `{output}`"),
                            Some(
                                "use every matrix key that varies and {repetition} in `output`, or {run-id}"
                                    .into(),
                            ),
                        ));
                    }
                }
                let slot = index % jobs;
                runs.push(PlannedRun {
                    index,
                    run_id,
                    cell: cell.clone(),
                    repetition,
                    argv,
                    workdir,
                    output,
                    env,
                    cpus: slots[slot].clone(),
                    slot,
                });
            }
            Err(e) => {
                errors.push(e);
                break;
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Plan {
        runs,
        order: manifest.schedule.order,
        seed,
        jobs: manifest.schedule.jobs,
        slots,
        timeout: manifest.isolation.timeout,
        grace: manifest.isolation.grace,
        env_policy: manifest.isolation.env_policy,
        matrix_keys: manifest.matrix.axes.iter().map(|(k, _)| k.clone()).collect(),
    })
}

/// The cells: the cartesian product of the axes in manifest order (last key varies fastest), minus
/// `exclude` matches, plus `include` entries.
fn cells(manifest: &Manifest, errors: &mut Vec<PlanError>) -> Vec<Cell> {
    let axes = &manifest.matrix.axes;
    let mut out: Vec<Cell> = vec![Vec::new()];
    for (key, values) in axes {
        let mut next = Vec::with_capacity(out.len() * values.len());
        for prefix in &out {
            for v in values {
                let mut cell = prefix.clone();
                cell.push((key.clone(), v.clone()));
                next.push(cell);
            }
        }
        out = next;
    }
    let matches = |cell: &Cell, entry: &BTreeMap<String, Value>| {
        entry
            .iter()
            .all(|(k, v)| cell.iter().any(|(ck, cv)| ck == k && cv == v))
    };
    out.retain(|cell| !manifest.matrix.exclude.iter().any(|e| matches(cell, e)));
    for entry in &manifest.matrix.include {
        let mut cell = Vec::with_capacity(axes.len());
        for (key, _) in axes {
            match entry.get(key) {
                Some(v) => cell.push((key.clone(), v.clone())),
                None => {
                    errors.push(PlanError::new(
                        "matrix.include",
                        format!("an include entry gives no value for `{key}`"),
                        None,
                    ));
                    return out;
                }
            }
        }
        if out.contains(&cell) {
            errors.push(PlanError::new(
                "matrix.include",
                format!(
                    "include entry {} duplicates a cell already in the matrix",
                    describe_cell(&cell)
                ),
                Some("remove it, or exclude the cell first".into()),
            ));
        } else {
            out.push(cell);
        }
    }
    if out.is_empty() {
        errors.push(PlanError::new(
            "matrix.exclude",
            "every cell is excluded: the matrix is empty".into(),
            Some("loosen `exclude` or add `include` entries".into()),
        ));
    }
    out
}

/// Splits the CPU pool into `jobs` disjoint slots of `cpus-per-run` CPUs.
fn cpu_slots(manifest: &Manifest, ctx: &PlanContext, errors: &mut Vec<PlanError>) -> Vec<Vec<usize>> {
    let jobs = manifest.schedule.jobs.max(1) as usize;
    let per = manifest.isolation.cpus_per_run.max(1);
    let pool: Vec<usize> = match &manifest.isolation.cpus {
        CpuSelection::Auto => ctx.allowed_cpus.clone(),
        CpuSelection::List(list) => list.clone(),
    };
    if pool.len() < jobs * per {
        errors.push(PlanError::new(
            "isolation.cpus",
            format!(
                "{jobs} job(s) x {per} CPU(s) per run need {} CPUs, but only {} are available ({})",
                jobs * per,
                pool.len(),
                crate::exec::affinity::format_cpu_list(&pool)
            ),
            Some("lower `jobs` or `cpus-per-run`, or list more CPUs".into()),
        ));
        return Vec::new();
    }
    (0..jobs).map(|k| pool[k * per..(k + 1) * per].to_vec()).collect()
}

/// `a=1, b=x` for messages.
pub fn describe_cell(cell: &Cell) -> String {
    if cell.is_empty() {
        return "(no matrix)".into();
    }
    cell.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Makes text safe as one file-name component: keeps `[A-Za-z0-9._+=-]`, maps everything else
/// (including `/`) to `_`, and breaks up `..`.
pub fn sanitize(text: &str) -> String {
    let mut s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+=-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    while s.contains("..") {
        s = s.replace("..", "_.");
    }
    s
}

/// `007-get_tensor-64-r2`: zero-padded index, sanitized cell values (at most ~120 bytes), repetition.
fn run_id(index: usize, width: usize, cell: &Cell, repetition: u32) -> String {
    let mut id = format!("{index:0width$}");
    for (_, v) in cell {
        if id.len() > 120 {
            break;
        }
        id.push('-');
        id.push_str(&sanitize(&v.to_string()));
    }
    id.truncate(id.char_indices().nth(130).map_or(id.len(), |(i, _)| i));
    id.push_str(&format!("-r{repetition}"));
    id
}

/// Templates of the manifest, checked once.
struct Templates<'m> {
    argv: Vec<&'m str>,
    shell: bool,
}

impl<'m> Templates<'m> {
    fn new(manifest: &'m Manifest) -> Templates<'m> {
        match &manifest.command.program {
            Program::Argv(a) => Templates {
                argv: a.iter().map(String::as_str).collect(),
                shell: false,
            },
            Program::Shell(s) => Templates {
                argv: vec![s.as_str()],
                shell: true,
            },
        }
    }

    #[allow(clippy::type_complexity)]
    fn render_run(
        &self,
        manifest: &Manifest,
        ctx: &PlanContext,
        cell: &Cell,
        repetition: u32,
        run_id: &str,
    ) -> Result<(Vec<String>, PathBuf, String, EnvChanges), PlanError> {
        let run_dir = ctx.bundle.join(crate::bundle::files::RUNS).join(run_id);
        let bundle = ctx.bundle.display().to_string();
        let run_dir = run_dir.display().to_string();
        let rep = repetition.to_string();
        let lookup = |name: &str, sanitize_values: bool| -> Option<String> {
            match name {
                "repetition" => Some(rep.clone()),
                "run-id" => Some(run_id.to_string()),
                "hwr-exp" => Some(ctx.hwr_exp.clone()),
                "bundle" => Some(bundle.clone()),
                "run-dir" => Some(run_dir.clone()),
                _ => cell.iter().find(|(k, _)| k == name).map(|(_, v)| {
                    if sanitize_values {
                        sanitize(&v.to_string())
                    } else {
                        v.to_string()
                    }
                }),
            }
        };
        let render = |key: &str, t: &str, sanitize_values: bool| {
            template::render(t, |n| lookup(n, sanitize_values))
                .map_err(|e| PlanError::new(key, e.message, None))
        };
        let mut argv = Vec::with_capacity(self.argv.len() + 2);
        if self.shell {
            argv.push("/bin/sh".to_string());
            argv.push("-c".to_string());
            argv.push(render("command.shell", self.argv[0], false)?);
        } else {
            for t in &self.argv {
                argv.push(render("command.argv", t, false)?);
            }
        }
        let workdir = render("command.workdir", &manifest.command.workdir, false)?;
        let workdir = normalize(&manifest.base_dir.join(workdir));
        let output = render("command.output", &manifest.command.output, true)?;
        if output.is_empty() || output == "." || output.contains('/') || output.contains("..") {
            return Err(PlanError::new(
                "command.output",
                format!("output name `{output}` is not a plain file name"),
                None,
            ));
        }
        let iso = &manifest.isolation;
        let mut set = Vec::with_capacity(iso.env.len() + 4);
        let mentions_cuda = iso.env.iter().any(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            || iso.env_unset.iter().any(|k| k == "CUDA_VISIBLE_DEVICES");
        if !mentions_cuda {
            set.push(("CUDA_VISIBLE_DEVICES".to_string(), String::new()));
        }
        for (k, v) in &iso.env {
            set.push((k.clone(), render(&format!("isolation.env.{k}"), v, false)?));
        }
        set.push(("HWR_RUN_ID".to_string(), run_id.to_string()));
        set.push(("HWR_REPETITION".to_string(), rep.clone()));
        set.push(("HWR_BUNDLE".to_string(), bundle.clone()));
        let env = EnvChanges {
            policy: match iso.env_policy {
                EnvPolicy::Inherit => "inherit".into(),
                EnvPolicy::Clean => "clean".into(),
            },
            set,
            unset: iso.env_unset.clone(),
        };
        Ok((argv, workdir, output, env))
    }
}

/// Removes `.` components and folds `..` lexically (no file-system access).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Plan {
    /// plan.json contents.
    pub fn to_file(&self, manifest: &Manifest) -> PlanFile {
        PlanFile {
            format: crate::bundle::BUNDLE_FORMAT,
            order: self.order,
            seed: self.seed,
            jobs: self.jobs,
            matrix_keys: self.matrix_keys.clone(),
            output_format: manifest.command.output_format,
            sample_interval_seconds: manifest.measure.sample_interval.map(|d| d.as_secs_f64()),
            runs: self.runs.iter().map(|r| r.to_record(self)).collect(),
        }
    }
}

impl PlannedRun {
    /// The plan.json entry of this run.
    pub fn to_record(&self, plan: &Plan) -> PlannedRunRecord {
        PlannedRunRecord {
            run_id: self.run_id.clone(),
            index: self.index,
            cell: self.cell.iter().cloned().collect(),
            repetition: self.repetition,
            argv: self.argv.clone(),
            workdir: self.workdir.display().to_string(),
            output: self.output.clone(),
            env: self.env.clone(),
            cpus: self.cpus.clone(),
            timeout_seconds: plan.timeout.map(|d| d.as_secs_f64()),
            grace_seconds: plan.grace.as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests;
