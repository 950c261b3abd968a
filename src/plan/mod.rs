//! Plan expansion: manifest -> ordered list of runs. Pure: no I/O, no clock, no environment reads
//! (everything host-dependent comes in through [`PlanContext`]).
//!
//! The [`Plan`] carries everything later stages need from the manifest (output format, sample
//! interval, environment policy, timeouts, where provenance starts), so they take the plan alone.
//! plan.json is written by the bundle (`bundle::plan_file`), which owns the on-disk format.

mod cells;
mod error;
pub mod render;
mod run;
pub mod select;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::manifest::template::Template;
use crate::manifest::{
    Adaptive, Cell, CpuSelection, EnvPolicy, Manifest, Order, OutputFormat, Program, Value,
};
use cells::{CellRef, Cells, cells};
pub use cells::{describe_cell, sanitize};
pub use error::PlanError;
pub use run::{PlannedRun, RunEnv, RunEnvironment};

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
    /// The known allocators installed on this host, by name, with their library paths
    /// ([`crate::allocator::installed`]); `[isolation] allocator` names are looked up here.
    pub allocators: BTreeMap<String, PathBuf>,
    /// The built Python environments by name (`[environments]`), from the runner's preflight;
    /// empty where nothing is built (`check`, `plan`): runs then name their environment only.
    pub environments: BTreeMap<String, RunEnvironment>,
    /// Whether the plan gives each run its CPUs (job slots from `[isolation] cpus`); false where
    /// the backend decides them where a run executes (Slurm: the task's allocation, DESIGN 8),
    /// and `jobs` only bounds the runs in flight. Set by `runner::backend::Backend::plans_cpus`.
    pub plans_cpus: bool,
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

/// The allocator of one run (`[isolation] allocator` after placeholders), resolved without I/O: a
/// known name through [`PlanContext::allocators`], a path against the manifest's folder.
pub type Allocator = crate::allocator::Choice;

/// The expanded manifest. Runs are not stored: a run's cell and repetition follow from its index
/// (mixed-radix product indices, plus 4 bytes a kept cell when `exclude` drops some and 4 bytes a
/// run for `order = "shuffled"`), and runs are rendered on demand by [`Plan::run`], so memory does
/// not grow with the plan's size beyond those.
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
    /// `[report] metrics`: (name, JSON Pointer) pairs, whose values run.json `summary` keeps.
    pub metric_pointers: Vec<(String, String)>,
    /// External smaps_rollup sampling period (`[measure] sample-interval`); `None` = off.
    pub sample_interval: Option<Duration>,
    /// `[experiment] name`: the bundle goes into `<results>/<experiment>/`.
    pub experiment: String,
    /// Absolute folder the recorded repository is discovered from ([`Manifest::repo_start`]).
    pub repo_start: PathBuf,
    /// Matrix keys in manifest order.
    pub matrix_keys: Vec<String>,
    /// `[schedule] repetitions = { min, max, until, time-budget }`: the plan holds the rounds
    /// decided so far ([`Plan::add_round`]); `None` for a fixed number of repetitions.
    pub adaptive: Option<Adaptive>,
    /// The cells, kept compactly (see [`Cells`]).
    cells: Cells,
    /// Repetitions of each cell (adaptive: the rule's `min`, the first rounds).
    repetitions: u32,
    /// Adaptive plans: (cell, repetition) of every run in execution order, round after round
    /// (8 bytes a run); `None` for the regular layout computed from the index.
    rounds: Option<Vec<(u32, u32)>>,
    /// For `order = "shuffled"`: position in execution order -> position in interleaved order.
    shuffled: Option<Vec<u32>>,
    /// Width of the zero-padded index in run ids.
    width: usize,
    templates: Templates,
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
        .and_then(|cells| {
            cells.checked_mul(u64::from(
                manifest
                    .schedule
                    .adaptive
                    .map_or(manifest.schedule.repetitions, |a| a.max.max(a.min)),
            ))
        });
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
    let adaptive = manifest.schedule.adaptive;
    let total = cells.len() * reps as usize;
    // Run ids are as wide as the largest plan the rule allows, so that they do not change as
    // rounds are added.
    let most = cells.len() * adaptive.map_or(reps, |a| a.max.max(a.min)) as usize;
    let seed = match manifest.schedule.order {
        Order::Shuffled => Some(manifest.schedule.seed.unwrap_or(ctx.fallback_seed)),
        _ => None,
    };
    // The interleaved positions, shuffled: the same permutation the rng gives any list of this
    // length, so a recorded seed reproduces the recorded order.
    let shuffled = seed.filter(|_| adaptive.is_none()).map(|seed| {
        let mut order: Vec<u32> = (0..total as u32).collect();
        fastrand::Rng::with_seed(seed).shuffle(&mut order);
        order
    });

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
        metric_pointers: manifest.report.metrics.clone(),
        sample_interval: manifest.measure.sample_interval,
        experiment: manifest.experiment.name.clone(),
        repo_start: manifest.repo_start().to_path_buf(),
        matrix_keys: manifest.matrix.axes.iter().map(|(k, _)| k.clone()).collect(),
        adaptive,
        width: most.saturating_sub(1).to_string().len().max(3),
        cells,
        repetitions: reps,
        rounds: adaptive.map(|_| Vec::new()),
        shuffled,
        templates,
    };
    let mut plan = plan;
    if adaptive.is_some() {
        let all: Vec<usize> = (0..plan.cell_count()).collect();
        for _ in 0..reps {
            plan.add_round(&all);
        }
    }
    // Render every run once: template errors and duplicate or reserved output names surface here,
    // so that `Plan::run` cannot fail later.
    if let Err(e) = plan.try_run(0) {
        errors.push(e);
        return Err(errors);
    }
    check_outputs(&plan, ctx.layout.reserved, &mut errors);
    check_allocators(&plan, &mut errors);
    if errors.is_empty() { Ok(plan) } else { Err(errors) }
}

/// Checks every run's program (argv[0] not empty) and output name (a plain file name, not
/// reserved, unique) without keeping the names. Other templates cannot fail differently from one
/// run to the next (the first run was rendered whole).
///
/// Uniqueness is structural when `output` has `{run-id}` as its only placeholder (run ids start
/// with the unique zero-padded index and a `-`); otherwise a 64-bit hash of each name is kept
/// (8 bytes a run), sorted, and the names of equal hashes are rendered again and compared, so a
/// hash collision is never reported as a duplicate.
fn check_outputs(plan: &Plan, reserved: &[&str], errors: &mut Vec<PlanError>) {
    let duplicate = |first: usize, index: usize, output: &str| {
        PlanError::new(
            "command.output",
            format!("runs {first} and {index} both save their output as `{output}`"),
            Some("use every matrix key that varies and {repetition} in `output`, or {run-id}".into()),
        )
    };
    let unique = plan.templates.output.placeholders().all(|p| p == "run-id")
        && plan.templates.output.placeholders().any(|p| p == "run-id");
    let mut hashes: Vec<u64> = Vec::with_capacity(if unique { 0 } else { plan.len() });
    // A program taken from a matrix value may be empty for some runs only.
    let program = (!plan.templates.shell)
        .then(|| &plan.templates.argv[0])
        .filter(|t| !t.is_constant());
    // Names made of the run id alone differ and are never reserved (a run id starts with digits)
    // and a constant program cannot be empty for some runs only: the first run says it all.
    let checked = if unique && program.is_none() {
        plan.len().min(1)
    } else {
        plan.len()
    };
    for index in 0..checked {
        let vars = plan.vars(index);
        if let Some(t) = program
            && vars
                .render("command.argv", t, Spell::Plain)
                .is_ok_and(|p| p.is_empty())
        {
            errors.push(PlanError::new(
                "command.argv",
                format!("run {index} ({}) has an empty program, argv[0]", vars.run_id),
                Some("argv[0] is the program to run; give every matrix value it uses a program name".into()),
            ));
            return;
        }
        match plan.output_of(&vars) {
            Ok(output) if reserved.contains(&output.as_str()) => {
                errors.push(PlanError::new(
                    "command.output",
                    format!("output name `{output}` is reserved for the runner's own file in the run folder"),
                    None,
                ));
                return;
            }
            Ok(output) => {
                if !unique {
                    hashes.push(hash_name(&output));
                }
            }
            Err(e) => {
                errors.push(e);
                return;
            }
        }
    }
    if unique {
        return;
    }
    hashes.sort_unstable();
    let twice: std::collections::HashSet<u64> =
        hashes.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
    drop(hashes);
    if twice.is_empty() {
        return;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for index in 0..plan.len() {
        let Ok(output) = plan.output_of(&plan.vars(index)) else {
            continue;
        };
        if !twice.contains(&hash_name(&output)) {
            continue;
        }
        if let Some(&first) = seen.get(&output) {
            errors.push(duplicate(first, index, &output));
            return;
        }
        seen.insert(output, index);
    }
}

/// A 64-bit hash of an output name (std's SipHash with fixed keys: the same in every process).
fn hash_name(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// Splits the CPU pool into `jobs` disjoint slots of `cpus-per-run` CPUs.
///
/// A listed pool too small is already a manifest error; here it is found for `"auto"`, whose
/// pool is the allowed CPU set. The problem is located at the first of `cpus-per-run`, `jobs`,
/// `cpus` and `[isolation]` the manifest has.
fn cpu_slots(manifest: &Manifest, ctx: &PlanContext, errors: &mut Vec<PlanError>) -> Vec<Vec<usize>> {
    let jobs = manifest.schedule.jobs.max(1) as usize;
    let per = manifest.isolation.cpus_per_run.max(1);
    if !ctx.plans_cpus {
        // The backend gives runs their CPUs where they execute: no run is given CPUs here.
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

/// `007-get_tensor-64-r2`: zero-padded index, sanitized cell values (at most ~120 bytes), repetition.
fn run_id(index: usize, width: usize, cell: CellRef<'_>, repetition: u32) -> String {
    use std::fmt::Write as _;
    let mut id = String::with_capacity(48);
    let _ = write!(id, "{index:0width$}");
    for k in 0..cell.len() {
        if id.len() > 120 {
            break;
        }
        id.push('-');
        match cell.get(k) {
            (_, Some(text)) => id.push_str(text),
            (v, None) => id.push_str(&sanitize(&v.to_string())),
        }
    }
    id.truncate(id.char_indices().nth(130).map_or(id.len(), |(i, _)| i));
    let _ = write!(id, "-r{repetition}");
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
    allocator: Option<Template>,
    allocators: BTreeMap<String, PathBuf>,
    has_environments: bool,
    environments: BTreeMap<String, RunEnvironment>,
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
            allocator: iso
                .allocator
                .as_deref()
                .map(|a| compile("isolation.allocator", a))
                .transpose()?,
            allocators: ctx.allocators.clone(),
            has_environments: !manifest.environments.is_empty(),
            environments: ctx.environments.clone(),
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
    cell: CellRef<'p>,
    repetition: u32,
    run_id: String,
}

/// How placeholder values are spelled in a rendered template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spell {
    /// As written (argv, workdir, env values).
    Plain,
    /// Matrix values through [`sanitize`] (file names).
    FileName,
    /// Every value quoted for POSIX sh when it needs it ([`render::sh_quote`]), so that each
    /// placeholder stays one word of the `shell` command whatever it holds.
    Shell,
}

impl Vars<'_> {
    fn get(&self, name: &str, spell: Spell) -> Option<String> {
        let value = match name {
            "repetition" => Some(self.repetition.to_string()),
            "run-id" => Some(self.run_id.clone()),
            "hwr-exp" => Some(self.t.hwr_exp.clone()),
            "bundle" => Some(self.t.bundle_text.clone()),
            "run-dir" => Some(self.t.runs_dir.join(&self.run_id).display().to_string()),
            _ => self.cell.value_of(name).map(|(v, text)| match (spell, text) {
                (Spell::FileName, Some(text)) => text.to_string(),
                (Spell::FileName, None) => sanitize(&v.to_string()),
                _ => v.to_string(),
            }),
        }?;
        Some(match spell {
            Spell::Shell => render::sh_quote(&value),
            _ => value,
        })
    }

    fn render(&self, key: &str, tpl: &Template, spell: Spell) -> Result<String, PlanError> {
        tpl.render(|n| self.get(n, spell))
            .map_err(|e| PlanError::new(key, e.message, None))
    }
}

impl Plan {
    /// Number of runs.
    pub fn len(&self) -> usize {
        match &self.rounds {
            Some(r) => r.len(),
            None => self.cells.len() * self.repetitions as usize,
        }
    }

    /// Adaptive plans: the range, for `check` and `plan`: `adaptive repetitions: 4 to 30 per cell
    /// until decided, time budget 2h: 8 to 60 runs (the first 4 rounds planned)`.
    pub fn adaptive_text(&self) -> Option<String> {
        let a = self.adaptive?;
        let n = self.cells.len();
        Some(format!(
            "adaptive repetitions: {} to {} per cell until {}{}: {} to {} runs (the first {} round{} planned; then a round for each cell not yet decided)",
            a.min,
            a.max,
            a.until.as_str(),
            a.time_budget.map_or(String::new(), |b| format!(
                ", time budget {}",
                humantime::format_duration(b)
            )),
            n * a.min as usize,
            n * a.max as usize,
            a.min,
            if a.min == 1 { "" } else { "s" },
        ))
    }

    /// Number of cells (the matrix after `exclude` and `include`).
    pub fn cell_count(&self) -> usize {
        self.cells.len()
    }

    /// The matrix axes (keys and values, manifest order) when the cells are their whole
    /// cartesian product (no `exclude` dropped one, no `include` added one): the plan's cells
    /// then follow from these without listing them. `None` otherwise.
    pub fn product_axes(&self) -> Option<&[(String, Vec<Value>)]> {
        (self.cells.kept.is_none() && self.cells.include.is_empty()).then_some(self.cells.axes.as_slice())
    }

    /// Runs every cell has in the whole plan: the repetitions, or an adaptive rule's `max`
    /// (the most rounds could give).
    pub fn runs_per_cell(&self) -> usize {
        self.adaptive.map_or(self.repetitions, |a| a.max.max(a.min)) as usize
    }

    /// The matrix values of cell `c` (0-based, plan order of first appearance).
    pub fn cell(&self, c: usize) -> Cell {
        self.cells.get(c).to_cell()
    }

    /// The cell (0-based) of run `index`.
    pub fn cell_of(&self, index: usize) -> usize {
        self.position(index).0
    }

    /// Runs of cell `c` in the plan.
    pub fn runs_of_cell(&self, c: usize) -> u32 {
        match &self.rounds {
            Some(r) => r.iter().filter(|(x, _)| *x as usize == c).count() as u32,
            None => self.repetitions,
        }
    }

    /// Adaptive plans: appends one interleaved round of `cells` (each once, in plan order;
    /// shuffled with the plan's seed and the round's number for `order = "shuffled"`) and returns
    /// the plan indices of its runs. A fixed plan is left as it is (no indices).
    pub fn add_round(&mut self, cells: &[usize]) -> Vec<usize> {
        let seed = self.seed;
        let Some(rounds) = self.rounds.as_mut() else {
            return Vec::new();
        };
        let mut counts = vec![0u32; self.cells.len()];
        for (c, _) in rounds.iter() {
            counts[*c as usize] += 1;
        }
        let number = counts.iter().copied().max().unwrap_or(0) as u64 + 1;
        let mut round: Vec<usize> = cells.iter().copied().filter(|&c| c < counts.len()).collect();
        round.sort_unstable();
        round.dedup();
        if let Some(seed) = seed {
            fastrand::Rng::with_seed(seed ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15)).shuffle(&mut round);
        }
        let start = rounds.len();
        rounds.extend(round.iter().map(|&c| (c as u32, counts[c] + 1)));
        (start..rounds.len()).collect()
    }

    /// Adaptive plans: the runs as recorded (cell, repetition), in execution order (`resume`
    /// re-expands a manifest to the rounds its bundle ran). A fixed plan is left as it is.
    pub fn set_runs(&mut self, runs: Vec<(usize, u32)>) {
        if let Some(rounds) = self.rounds.as_mut() {
            *rounds = runs.into_iter().map(|(c, r)| (c as u32, r)).collect();
        }
    }

    /// Whether the plan has no runs (never true for a plan returned by [`expand`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bundle folder the plan was expanded for (`{bundle}`).
    pub fn bundle(&self) -> &Path {
        &self.templates.bundle
    }

    /// Job slot of run `index` (`index % jobs`).
    pub fn slot_of(&self, index: usize) -> usize {
        index % self.slots.len().max(1)
    }

    /// Whether every run has the same program, workdir and `PATH`: `argv[0]` (or `/bin/sh` for
    /// `shell`) and the workdir without placeholders, no `[environments]` and no `PATH` in `env`
    /// with placeholders. The preflight then checks the first run's program alone.
    pub fn same_program_everywhere(&self) -> bool {
        let t = &self.templates;
        (t.shell || t.argv.first().is_some_and(Template::is_constant))
            && t.fixed_workdir.is_some()
            && !t.has_environments
            && t.env.iter().all(|(k, v)| k != "PATH" || v.is_constant())
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

    /// (cell, repetition) of run `index`.
    fn position(&self, index: usize) -> (usize, u32) {
        if let Some(rounds) = &self.rounds {
            let (c, r) = rounds[index];
            return (c as usize, r);
        }
        let n = self.cells.len();
        let reps = self.repetitions as usize;
        match (&self.shuffled, self.order) {
            (_, Order::Grouped) => (index / reps, (index % reps) as u32 + 1),
            (Some(order), _) => {
                let i = order[index] as usize;
                (i % n, (i / n) as u32 + 1)
            }
            (None, _) => (index % n, (index / n) as u32 + 1),
        }
    }

    /// Placeholder values of run `index`.
    fn vars(&self, index: usize) -> Vars<'_> {
        let (c, repetition) = self.position(index);
        let cell = self.cells.get(c);
        Vars {
            t: &self.templates,
            cell,
            repetition,
            run_id: run_id(index, self.width, cell, repetition),
        }
    }

    /// The output file name of run `index`, checked to be a plain file name.
    fn output_of(&self, vars: &Vars<'_>) -> Result<String, PlanError> {
        let output = vars.render("command.output", &self.templates.output, Spell::FileName)?;
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
        let render = |key: &str, tpl: &Template, spell: Spell| vars.render(key, tpl, spell);
        let (cell, repetition) = (vars.cell, vars.repetition);
        let rep = repetition.to_string();
        let mut argv = Vec::with_capacity(t.argv.len() + 2);
        if t.shell {
            argv.push("/bin/sh".to_string());
            argv.push("-c".to_string());
            argv.push(render("command.shell", &t.argv[0], Spell::Shell)?);
        } else {
            for a in &t.argv {
                argv.push(render("command.argv", a, Spell::Plain)?);
            }
        }
        let workdir = match &t.fixed_workdir {
            Some(w) => w.clone(),
            None => normalize(
                &t.base_dir
                    .join(render("command.workdir", &t.workdir, Spell::Plain)?),
            ),
        };
        let output = self.output_of(&vars)?;
        let mut set = Vec::with_capacity(t.env.len() + 4);
        if t.cuda_default {
            set.push(("CUDA_VISIBLE_DEVICES".to_string(), String::new()));
        }
        for (k, v) in &t.env {
            set.push((k.clone(), render(&format!("isolation.env.{k}"), v, Spell::Plain)?));
        }
        let mut unset = t.env_unset.clone();
        let allocator = match &t.allocator {
            Some(tpl) => {
                let choice = self.allocator_of(&render("isolation.allocator", tpl, Spell::Plain)?)?;
                // The allocator decides LD_PRELOAD whatever `env-unset` says of the inherited one.
                unset.retain(|u| u != PRELOAD);
                match &choice.path {
                    Some(path) => set.push((PRELOAD.to_string(), path.display().to_string())),
                    None => unset.push(PRELOAD.to_string()),
                }
                Some(choice)
            }
            None => None,
        };
        let environment = t
            .has_environments
            .then(|| cell.value_of(crate::manifest::ENVIRONMENT_KEY))
            .flatten()
            .map(|(v, _)| {
                let name = v.to_string();
                t.environments.get(&name).cloned().unwrap_or(RunEnvironment {
                    name,
                    lock_sha256: None,
                    venv: None,
                })
            });
        if let Some(venv) = environment.as_ref().and_then(|e| e.venv.as_ref()) {
            set.push(("VIRTUAL_ENV".to_string(), venv.display().to_string()));
        }
        set.push(("HWR_RUN_ID".to_string(), vars.run_id.clone()));
        set.push(("HWR_REPETITION".to_string(), rep));
        set.push(("HWR_BUNDLE".to_string(), t.bundle_text.clone()));
        let env = RunEnv {
            policy: self.env_policy,
            set,
            unset,
        };
        let slot = self.slot_of(index);
        Ok(PlannedRun {
            index,
            run_id: vars.run_id.clone(),
            cell: cell.to_cell(),
            repetition,
            argv,
            workdir,
            output,
            env,
            cpus: self.slots.get(slot).cloned().unwrap_or_default(),
            timeout: self.timeout,
            grace: self.grace,
            allocator,
            environment,
        })
    }

    /// Resolves an `allocator` value: `glibc`, a known name installed on this host, or a path
    /// (relative to the manifest's folder).
    fn allocator_of(&self, value: &str) -> Result<Allocator, PlanError> {
        use crate::allocator;
        let t = &self.templates;
        if value == allocator::GLIBC {
            return Ok(Allocator {
                name: value.to_string(),
                path: None,
                sha256: None,
            });
        }
        if allocator::is_path(value) {
            return Ok(Allocator {
                name: value.to_string(),
                path: Some(normalize(&t.base_dir.join(value))),
                sha256: None,
            });
        }
        let Some(known) = allocator::known(value) else {
            return Err(PlanError::new(
                "isolation.allocator",
                format!("unknown allocator `{value}`"),
                Some(format!(
                    "write one of {}, or a library path (it holds a `/`)",
                    allocator::NAMES.join(", ")
                )),
            ));
        };
        match t.allocators.get(known.name) {
            Some(path) => Ok(Allocator {
                name: value.to_string(),
                path: Some(path.clone()),
                sha256: None,
            }),
            None => {
                let (message, help) = allocator::not_installed(known);
                Err(PlanError::new("isolation.allocator", message, Some(help)))
            }
        }
    }
}

/// The variable an allocator is preloaded with.
const PRELOAD: &str = "LD_PRELOAD";

/// Checks the `allocator` of every run when its template has placeholders (the first run was
/// resolved whole): one problem per distinct value that does not resolve.
fn check_allocators(plan: &Plan, errors: &mut Vec<PlanError>) {
    let Some(tpl) = plan.templates.allocator.as_ref().filter(|t| !t.is_constant()) else {
        return;
    };
    let mut seen = std::collections::HashSet::new();
    for index in 0..plan.len() {
        let Ok(value) = plan.vars(index).render("isolation.allocator", tpl, Spell::Plain) else {
            continue;
        };
        if seen.insert(value.clone())
            && let Err(e) = plan.allocator_of(&value)
        {
            errors.push(e);
        }
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
