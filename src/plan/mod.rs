//! Plan expansion: manifest -> ordered list of runs. Pure: no I/O, no clock, no environment reads
//! (everything host-dependent comes in through [`PlanContext`]).
//!
//! The [`Plan`] carries everything later stages need from the manifest (output format, sample
//! interval, environment policy, timeouts, where provenance starts), so they take the plan alone.
//! plan.json is written by the bundle (`bundle::plan_file`), which owns the on-disk format.

pub mod render;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::manifest::template::Template;
use crate::manifest::{Cell, CpuSelection, EnvPolicy, Manifest, Order, OutputFormat, Program, Value};

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
    /// Where run folders live inside the bundle and which file names the runner writes there.
    pub layout: RunFolderLayout,
}

/// The part of the bundle's on-disk layout the plan needs, given by the bundle
/// (`bundle::plan_file::RUN_FOLDER_LAYOUT`) so that planning does not depend on the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFolderLayout {
    /// Folder of the bundle holding one folder per run: `{run-dir}` is `<bundle>/<runs>/<run-id>`.
    pub runs: &'static str,
    /// File names the runner writes into each run folder; `output` may not take them.
    pub reserved: &'static [&'static str],
}

/// Environment changes a run gets relative to its policy's base environment (only these are
/// recorded, never the whole environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunEnv {
    /// The base environment: the runner's whole one or the clean policy's few variables.
    pub policy: EnvPolicy,
    /// Variables set (manifest `env`, `CUDA_VISIBLE_DEVICES`, `HWR_*`), in the order applied.
    pub set: Vec<(String, String)>,
    /// Variables removed (`env-unset`).
    pub unset: Vec<String>,
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
    pub env: RunEnv,
    /// CPUs the run is pinned to.
    pub cpus: Vec<usize>,
}

/// The expanded manifest. Runs are kept compactly (cell index and repetition, 8 bytes a run) and
/// rendered on demand by [`Plan::run`], so the runner's memory does not grow with the plan's size.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
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
    /// Environment policy (`[isolation] env-policy`).
    pub env_policy: EnvPolicy,
    /// How each run's stdout is checked (`[command] output-format`).
    pub output_format: OutputFormat,
    /// External smaps_rollup sampling period (`[measure] sample-interval`); `None` = off.
    pub sample_interval: Option<Duration>,
    /// `[experiment] name`: the bundle goes into `<results>/<experiment>/`.
    pub experiment: String,
    /// Absolute folder the recorded repository is discovered from ([`Manifest::repo_start`]).
    pub repo_start: PathBuf,
    /// Matrix keys in manifest order.
    pub matrix_keys: Vec<String>,
    /// Every cell, in product order then includes.
    pub cells: Vec<Cell>,
    /// Execution order: (index into `cells`, repetition).
    schedule: Vec<(u32, u32)>,
    /// Width of the zero-padded index in run ids.
    width: usize,
    templates: Templates,
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

/// Most runs one plan may have (before `exclude`): a typo in `repetitions` must not exhaust memory.
pub const MAX_RUNS: u64 = 10_000_000;

/// Longest output file name, in bytes (the usual file-system limit).
const MAX_NAME_BYTES: usize = 255;

/// Expands a validated manifest into its runs.
///
/// # Errors
/// Every [`PlanError`] found: every cell excluded, an include duplicating a cell, a template that does
/// not render, two runs with the same output name, an output name that is reserved, too few CPUs.
pub fn expand(manifest: &Manifest, ctx: &PlanContext) -> Result<Plan, Vec<PlanError>> {
    let mut errors = Vec::new();
    let planned = manifest
        .matrix
        .axes
        .iter()
        .try_fold(1u64, |n, (_, values)| n.checked_mul(values.len() as u64))
        .and_then(|cells| cells.checked_add(manifest.matrix.include.len() as u64))
        .and_then(|cells| cells.checked_mul(u64::from(manifest.schedule.repetitions)));
    if planned.is_none_or(|n| n > MAX_RUNS) {
        return Err(vec![PlanError::new(
            "schedule.repetitions",
            format!(
                "the matrix times the repetitions makes {} runs; hwr-exp plans at most {MAX_RUNS}",
                planned.map_or("more than 2^64".to_string(), |n| n.to_string())
            ),
            Some("split the experiment into several manifests".into()),
        )]);
    }
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

    let templates = Templates::new(manifest, ctx).map_err(|e| vec![e])?;
    let plan = Plan {
        order: manifest.schedule.order,
        seed,
        jobs: manifest.schedule.jobs,
        slots,
        timeout: manifest.isolation.timeout,
        grace: manifest.isolation.grace,
        env_policy: manifest.isolation.env_policy,
        output_format: manifest.command.output_format,
        sample_interval: manifest.measure.sample_interval,
        experiment: manifest.experiment.name.clone(),
        repo_start: manifest.repo_start().to_path_buf(),
        matrix_keys: manifest.matrix.axes.iter().map(|(k, _)| k.clone()).collect(),
        width: order.len().saturating_sub(1).to_string().len().max(3),
        schedule: order.into_iter().map(|(c, r)| (c as u32, r)).collect(),
        cells,
        templates,
    };
    // Render every run once: template errors and duplicate or reserved output names surface here,
    // so that `Plan::run` cannot fail later.
    let mut outputs: HashMap<String, usize> = HashMap::with_capacity(plan.len());
    // Templates cannot fail differently from one run to the next except through the output name
    // (a value can turn it into `..`), so the first run is rendered whole and the rest only as far
    // as their output names.
    if let Err(e) = plan.try_run(0) {
        errors.push(e);
    }
    for index in 0..plan.len() {
        if !errors.is_empty() {
            break;
        }
        match plan.output_of(&plan.vars(index)) {
            Ok(output) => {
                if ctx.layout.reserved.contains(&output.as_str()) {
                    errors.push(PlanError::new(
                        "command.output",
                        format!(
                            "output name `{output}` is reserved for the runner's own file in the run folder"
                        ),
                        None,
                    ));
                } else if let Some(first) = outputs.insert(output.clone(), index) {
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
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(plan) } else { Err(errors) }
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
///
/// A listed pool too small is already a manifest error; here it is found for `"auto"`, whose
/// pool is the allowed CPU set. The problem is located at the first of `cpus-per-run`, `jobs`,
/// `cpus` and `[isolation]` the manifest has.
fn cpu_slots(manifest: &Manifest, ctx: &PlanContext, errors: &mut Vec<PlanError>) -> Vec<Vec<usize>> {
    let jobs = manifest.schedule.jobs.max(1) as usize;
    let per = manifest.isolation.cpus_per_run.max(1);
    if manifest.executor.kind == crate::manifest::ExecutorKind::Slurm {
        // Slurm executor: `jobs` is the array throttle and each task's CPUs are its allocation on
        // the node (DESIGN 8), so no run is given CPUs here.
        return vec![Vec::new(); jobs];
    }
    let (pool, pool_desc): (&[usize], &str) = match &manifest.isolation.cpus {
        CpuSelection::Auto => (&ctx.allowed_cpus, "the allowed CPU set"),
        CpuSelection::List(list) => (list, "`cpus`"),
    };
    let need = jobs * per;
    if pool.len() < need {
        let key = [
            "isolation.cpus-per-run",
            "schedule.jobs",
            "isolation.cpus",
            "isolation",
        ]
        .into_iter()
        .find(|k| manifest.spans.contains_key(*k))
        .unwrap_or("isolation.cpus");
        errors.push(PlanError::new(
            key,
            format!(
                "jobs ({jobs}) x cpus-per-run ({per}) needs {need} CPUs, but {pool_desc} ({}) has {}",
                crate::cpus::format_cpu_list(pool),
                pool.len()
            ),
            Some(
                "each concurrent run gets its own CPUs; lower `jobs` or `cpus-per-run`, or list more CPUs"
                    .into(),
            ),
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

/// Everything needed to render one run, owned so the plan stands alone.
#[derive(Debug, Clone, PartialEq)]
struct Templates {
    argv: Vec<Template>,
    shell: bool,
    workdir: Template,
    output: Template,
    env: Vec<(String, Template)>,
    env_unset: Vec<String>,
    cuda_default: bool,
    base_dir: PathBuf,
    hwr_exp: String,
    bundle: PathBuf,
    bundle_text: String,
    /// `{run-dir}` is this folder joined with the run id.
    runs_dir: PathBuf,
    /// The workdir when its template has no placeholders.
    fixed_workdir: Option<PathBuf>,
}

impl Templates {
    fn new(manifest: &Manifest, ctx: &PlanContext) -> Result<Templates, PlanError> {
        let compile =
            |key: &str, text: &str| Template::compile(text).map_err(|e| PlanError::new(key, e.message, None));
        let (argv, shell) = match &manifest.command.program {
            Program::Argv(a) => (
                a.iter()
                    .map(|t| compile("command.argv", t))
                    .collect::<Result<_, _>>()?,
                false,
            ),
            Program::Shell(s) => (vec![compile("command.shell", s)?], true),
        };
        let iso = &manifest.isolation;
        Ok(Templates {
            argv,
            shell,
            workdir: compile("command.workdir", &manifest.command.workdir)?,
            output: compile("command.output", &manifest.command.output)?,
            env: iso
                .env
                .iter()
                .map(|(k, v)| Ok((k.clone(), compile(&format!("isolation.env.{k}"), v)?)))
                .collect::<Result<_, PlanError>>()?,
            env_unset: iso.env_unset.clone(),
            cuda_default: !(iso.env.iter().any(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
                || iso.env_unset.iter().any(|k| k == "CUDA_VISIBLE_DEVICES")),
            base_dir: manifest.base_dir.clone(),
            hwr_exp: ctx.hwr_exp.clone(),
            bundle: ctx.bundle.clone(),
            bundle_text: ctx.bundle.display().to_string(),
            runs_dir: ctx.bundle.join(ctx.layout.runs),
            fixed_workdir: None,
        }
        .with_fixed_workdir())
    }
}

impl Templates {
    fn with_fixed_workdir(mut self) -> Templates {
        if self.workdir.is_constant() {
            let text = self.workdir.render(|_| None).unwrap_or_default();
            self.fixed_workdir = Some(normalize(&self.base_dir.join(text)));
        }
        self
    }
}

/// Placeholder values of one run.
struct Vars<'p> {
    t: &'p Templates,
    cell: &'p Cell,
    repetition: u32,
    run_id: String,
}

impl Vars<'_> {
    fn get(&self, name: &str, sanitize_values: bool) -> Option<String> {
        match name {
            "repetition" => Some(self.repetition.to_string()),
            "run-id" => Some(self.run_id.clone()),
            "hwr-exp" => Some(self.t.hwr_exp.clone()),
            "bundle" => Some(self.t.bundle_text.clone()),
            "run-dir" => Some(self.t.runs_dir.join(&self.run_id).display().to_string()),
            _ => self.cell.iter().find(|(k, _)| k == name).map(|(_, v)| {
                if sanitize_values {
                    sanitize(&v.to_string())
                } else {
                    v.to_string()
                }
            }),
        }
    }

    fn render(&self, key: &str, tpl: &Template, sanitize_values: bool) -> Result<String, PlanError> {
        tpl.render(|n| self.get(n, sanitize_values))
            .map_err(|e| PlanError::new(key, e.message, None))
    }
}

impl Plan {
    /// Number of runs.
    pub fn len(&self) -> usize {
        self.schedule.len()
    }

    /// Whether the plan has no runs (never true for a plan returned by [`expand`]).
    pub fn is_empty(&self) -> bool {
        self.schedule.is_empty()
    }

    /// The bundle folder the plan was expanded for (`{bundle}`).
    pub fn bundle(&self) -> &Path {
        &self.templates.bundle
    }

    /// Job slot of run `index` (`index % jobs`).
    pub fn slot_of(&self, index: usize) -> usize {
        index % self.slots.len().max(1)
    }

    /// Renders run `index` (0-based, execution order).
    ///
    /// # Panics
    /// When `index >= self.len()`. Rendering itself cannot fail: [`expand`] rendered every run once.
    pub fn run(&self, index: usize) -> PlannedRun {
        self.try_run(index)
            .expect("every run was rendered once by expand")
    }

    /// Every run in execution order, rendered one at a time.
    pub fn runs(&self) -> impl Iterator<Item = PlannedRun> + '_ {
        (0..self.len()).map(|i| self.run(i))
    }

    /// Placeholder values of run `index`.
    fn vars(&self, index: usize) -> Vars<'_> {
        let (c, repetition) = self.schedule[index];
        let cell = &self.cells[c as usize];
        Vars {
            t: &self.templates,
            cell,
            repetition,
            run_id: run_id(index, self.width, cell, repetition),
        }
    }

    /// The output file name of run `index`, checked to be a plain file name.
    fn output_of(&self, vars: &Vars<'_>) -> Result<String, PlanError> {
        let output = vars.render("command.output", &self.templates.output, true)?;
        if output.len() > MAX_NAME_BYTES {
            let mut cut = 40;
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            return Err(PlanError::new(
                "command.output",
                format!(
                    "output name `{}...` is {} bytes long; file names are limited to {MAX_NAME_BYTES}",
                    &output[..cut],
                    output.len()
                ),
                Some("use {run-id} or fewer values in `output`".into()),
            ));
        }
        if output.is_empty() || output == "." || output == ".." || output.contains('/') {
            return Err(PlanError::new(
                "command.output",
                format!("output name `{output}` is not a plain file name"),
                None,
            ));
        }
        Ok(output)
    }

    fn try_run(&self, index: usize) -> Result<PlannedRun, PlanError> {
        let vars = self.vars(index);
        let t = &self.templates;
        let render =
            |key: &str, tpl: &Template, sanitize_values: bool| vars.render(key, tpl, sanitize_values);
        let (cell, repetition) = (vars.cell, vars.repetition);
        let rep = repetition.to_string();
        let mut argv = Vec::with_capacity(t.argv.len() + 2);
        if t.shell {
            argv.push("/bin/sh".to_string());
            argv.push("-c".to_string());
            argv.push(render("command.shell", &t.argv[0], false)?);
        } else {
            for a in &t.argv {
                argv.push(render("command.argv", a, false)?);
            }
        }
        let workdir = match &t.fixed_workdir {
            Some(w) => w.clone(),
            None => normalize(&t.base_dir.join(render("command.workdir", &t.workdir, false)?)),
        };
        let output = self.output_of(&vars)?;
        let mut set = Vec::with_capacity(t.env.len() + 4);
        if t.cuda_default {
            set.push(("CUDA_VISIBLE_DEVICES".to_string(), String::new()));
        }
        for (k, v) in &t.env {
            set.push((k.clone(), render(&format!("isolation.env.{k}"), v, false)?));
        }
        set.push(("HWR_RUN_ID".to_string(), vars.run_id.clone()));
        set.push(("HWR_REPETITION".to_string(), rep));
        set.push(("HWR_BUNDLE".to_string(), t.bundle_text.clone()));
        let env = RunEnv {
            policy: self.env_policy,
            set,
            unset: t.env_unset.clone(),
        };
        let slot = self.slot_of(index);
        Ok(PlannedRun {
            index,
            run_id: vars.run_id.clone(),
            cell: cell.clone(),
            repetition,
            argv,
            workdir,
            output,
            env,
            cpus: self.slots.get(slot).cloned().unwrap_or_default(),
        })
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

#[cfg(test)]
pub(crate) mod tests;
