//! Serde mirror of the manifest's TOML document (DESIGN 3), used for the JSON Schema
//! ([`crate::manifest::schema`]) and as a cross-check of the hand-written validator: every manifest
//! the validator accepts also deserializes into [`RawManifest`] (tested). Parsing proper goes
//! through the span-keeping validator, which reports all problems at once with locations.
//!
//! Keys are kebab-case exactly as written in the TOML; doc comments become schema descriptions.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// An hwr-exp experiment manifest (TOML). Placeholders `{name}` in `argv`, `shell`, `workdir`,
/// `output` and `env` values are matrix keys or the built-ins `{repetition}`, `{run-id}`,
/// `{hwr-exp}`, `{bundle}`, `{run-dir}`; `{{` and `}}` are literal braces.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[schemars(title = "hwr-exp manifest")]
pub struct RawManifest {
    /// Manifest format version; this hwr-exp reads format 1.
    #[schemars(range(min = 1, max = 1))]
    pub format: u32,
    /// The experiment's identity.
    pub experiment: RawExperiment,
    /// What each run executes: exactly one of `argv` / `shell`.
    pub command: RawCommand,
    /// Cartesian product of every key's values; one run per cell and repetition. Absent = one cell.
    pub matrix: Option<RawMatrix>,
    /// Repetitions, order and concurrency.
    pub schedule: Option<RawSchedule>,
    /// CPU pinning, timeout and environment of each run.
    pub isolation: Option<RawIsolation>,
    /// External memory sampling.
    pub measure: Option<RawMeasure>,
    /// Which git repository to record.
    pub provenance: Option<RawProvenance>,
    /// What `hwr-exp report` extracts from each run's JSON output.
    pub report: Option<RawReport>,
    /// Where the runs execute: this machine (default) or Slurm job arrays.
    pub executor: Option<RawExecutor>,
    /// Python environments built with uv, by name; the matrix key `environment` selects one.
    pub environments: Option<BTreeMap<String, RawEnvironment>>,
}

/// `[environments.<name>]`: a Python environment built with uv (`uv pip compile --generate-hashes`,
/// a venv per lock in hwr-exp's cache); the run gets its `bin/` first on PATH and `VIRTUAL_ENV`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawEnvironment {
    /// PEP 508 requirement strings, like "safetensors==0.4.5".
    #[schemars(length(min = 1))]
    pub requirements: Vec<String>,
    /// Python version ("3.11") or interpreter path; default: uv's choice.
    pub python: Option<String>,
    /// Folders (relative to the manifest's folder) or URLs of wheels (`uv --find-links`).
    pub find_links: Option<Vec<String>>,
    /// Resolve from `find-links` only (`uv --no-index`).
    pub no_index: Option<bool>,
}

/// `[experiment]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawExperiment {
    /// `[a-z0-9_-]+`; names the results folder `results/<name>/`.
    #[schemars(regex(pattern = r"^[a-z0-9_-]+$"))]
    pub name: String,
    /// Free text.
    pub description: Option<String>,
}

/// `[command]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[schemars(extend("oneOf" = [{ "required": ["argv"] }, { "required": ["shell"] }]))]
pub struct RawCommand {
    /// Program and arguments, exec'd directly (`argv[0]` looked up in PATH when it has no `/`);
    /// templates. Exactly one of `argv` / `shell`.
    #[schemars(length(min = 1))]
    pub argv: Option<Vec<String>>,
    /// Command text run by `/bin/sh -c`; a template. Exactly one of `argv` / `shell`.
    pub shell: Option<String>,
    /// Working directory of each run, relative to the manifest's folder; a template. Default ".".
    pub workdir: Option<String>,
    /// File name (no `/`) the run's stdout is saved under, inside the run's folder; a template.
    /// Default "{run-id}.json" for json output, "{run-id}.txt" for text.
    #[schemars(regex(pattern = r"^[^/]+$"))]
    pub output: Option<String>,
    /// How stdout is checked. Default: json when `output` ends in ".json", else text.
    pub output_format: Option<RawOutputFormat>,
}

/// `output-format`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawOutputFormat {
    /// One JSON document; anything else makes the run's output `invalid`.
    Json,
    /// Free text; never invalid.
    Text,
}

/// One matrix value.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
}

/// `[matrix]`: every other key is an axis, a non-empty list of distinct values (strings, integers,
/// floats, booleans; mixed allowed, but no two with one label or number: `1` and `"1"`, `1` and
/// `1.0`) whose name is usable as a `{placeholder}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
// The axes' schema (from the flattened map) is replaced to require at least one value; key names
// follow the placeholder rule and avoid the built-ins (`template::BUILTINS`).
#[schemars(extend(
    "additionalProperties" = { "type": "array", "items": { "$ref": "#/$defs/RawValue" }, "minItems": 1, "uniqueItems": true },
    "propertyNames" = {
        "pattern": "^[A-Za-z0-9_-]+$",
        "not": { "enum": ["repetition", "run-id", "hwr-exp", "bundle", "run-dir"] }
    }
))]
pub struct RawMatrix {
    /// Cells to drop: a cell is dropped when it matches every key of any entry; keys are matrix keys.
    pub exclude: Option<Vec<BTreeMap<String, RawValue>>>,
    /// Cells to add after the product; each entry gives a value for every matrix key.
    pub include: Option<Vec<BTreeMap<String, RawValue>>>,
    /// The axes: key = list of values.
    #[serde(flatten)]
    pub axes: BTreeMap<String, Vec<RawValue>>,
}

/// `[schedule]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawSchedule {
    /// Runs per cell (default 1), or an adaptive rule.
    pub repetitions: Option<RawRepetitions>,
    /// Run order; default "interleaved".
    pub order: Option<RawOrder>,
    /// Seed for "shuffled"; chosen and recorded when absent.
    pub seed: Option<u64>,
    /// Runs at once, each on its own CPUs; default 1.
    #[schemars(range(min = 1))]
    pub jobs: Option<u32>,
}

/// `repetitions`: a count, or `{ min, max, until, time-budget }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawRepetitions {
    /// Runs per cell.
    Count(#[schemars(range(min = 1))] u32),
    /// Interleaved rounds until each cell's verdict against its control is decided.
    Adaptive(RawAdaptive),
}

/// `repetitions = { min = 4, max = 30, until = "decided", time-budget = "2h" }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawAdaptive {
    /// Rounds every cell gets; at least 2.
    #[schemars(range(min = 2))]
    pub min: u32,
    /// Most rounds a cell gets; at least `min`.
    #[schemars(range(min = 2))]
    pub max: u32,
    /// What stops a cell early: "decided" (its verdict against the control is above, below or
    /// equivalent); default "decided".
    pub until: Option<RawUntil>,
    /// No round starts once the rounds took this long, humantime ("2h"); default none.
    pub time_budget: Option<String>,
}

/// `until`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawUntil {
    /// The verdict against the control is `above control`, `below control` or `equivalent`.
    Decided,
}

/// `order`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawOrder {
    /// Repetition outermost: every cell once, then every cell again.
    Interleaved,
    /// Cell outermost: all repetitions of a cell, then the next cell.
    Grouped,
    /// The interleaved plan shuffled with `seed`.
    Shuffled,
}

/// `cpus`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawCpus {
    /// CPU numbers, each in the runner's allowed set, no duplicates.
    #[schemars(extend("uniqueItems" = true))]
    List(Vec<u64>),
    /// "auto" (the first allowed CPUs) or a CPU list like "2-3,5".
    #[schemars(extend("pattern" = r"^(auto|[0-9 ,\t-]*[0-9][0-9 ,\t-]*)$"))]
    Text(String),
}

/// `[isolation]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawIsolation {
    /// CPU pool runs are pinned to; default "auto". jobs x cpus-per-run must fit in it.
    pub cpus: Option<RawCpus>,
    /// CPUs given to each run; default 1.
    #[schemars(range(min = 1))]
    pub cpus_per_run: Option<u32>,
    /// Whole-run time limit, humantime ("120s", "1m 30s"); default none.
    pub timeout: Option<String>,
    /// Time between SIGTERM and SIGKILL to the run's process group, humantime; default "5s".
    pub grace: Option<String>,
    /// Starting environment; default "inherit".
    pub env_policy: Option<RawEnvPolicy>,
    /// Variables to set (values are templates; "" stays ""). CUDA_VISIBLE_DEVICES is set to ""
    /// unless given here.
    #[schemars(extend("propertyNames" = { "pattern": "^[^=]+$" }))]
    pub env: Option<BTreeMap<String, String>>,
    /// Variables to remove.
    pub env_unset: Option<Vec<String>>,
    /// Memory allocator of each run (a template): "glibc" (nothing preloaded, LD_PRELOAD removed),
    /// "jemalloc", "tcmalloc", "mimalloc" (found through the dynamic linker's cache, `ldconfig -p`)
    /// or a library path; preloaded with LD_PRELOAD and verified loaded in `/proc/<pid>/maps`.
    pub allocator: Option<String>,
}

/// `env-policy`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawEnvPolicy {
    /// Start from the runner's whole environment.
    Inherit,
    /// Start from PATH, HOME, LANG, LC_*, TERM, USER, TMPDIR only.
    Clean,
}

/// `[measure]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawMeasure {
    /// Period of external smaps_rollup samples of the run's process, humantime; "off" disables;
    /// default "100ms".
    pub sample_interval: Option<String>,
}

/// `[provenance]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawProvenance {
    /// Git repository to record, relative to the manifest's folder; default: the one holding it.
    pub repo: Option<String>,
    /// Most bytes of all changed files working-tree.patch holds together, a byte size like
    /// "64MiB" (the default); files past it are recorded by size and sha256 only.
    pub patch_limit: Option<RawSize>,
    /// Most bytes of one changed file in working-tree.patch, a byte size like "16MiB" (the
    /// default); larger files are recorded by size and sha256 only.
    pub patch_file_limit: Option<RawSize>,
}

/// `[report]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawReport {
    /// Named values to extract: name = RFC 6901 JSON pointer into each run's output ("/a/b", or
    /// "" for the whole document).
    #[schemars(extend("additionalProperties" = { "type": "string", "pattern": "^$|^/" }))]
    pub metrics: Option<BTreeMap<String, String>>,
    /// The control cell by matrix keys and values, like { mode = "reuse" }; default: mode =
    /// "reuse" where that cell exists.
    pub control: Option<BTreeMap<String, RawValue>>,
    /// Equivalence margin: a byte size like "64KiB" (growth and after-close), or { growth =
    /// SIZE, rate = SIZE } (rate in bytes per 1000 iterations). Enables the `equivalent` and
    /// `reproduced` verdicts.
    pub equivalence_margin: Option<RawMargin>,
    /// What the verdict judges (DESIGN 9): "anonymous" (the default: anonymous growth and
    /// rate, allocator-path retention), "private", "rss", "pss-anon" (where the outputs have
    /// `pss_anon_bytes`), "file-backed" (private minus anonymous), or a name from `metrics`.
    pub verdict_metric: Option<String>,
}

/// `[report] equivalence-margin`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawMargin {
    /// A byte size for growth and after-close ("64KiB", or an integer of bytes).
    Size(RawSize),
    /// Separate margins.
    Split {
        /// Growth and after-close, bytes.
        growth: Option<RawSize>,
        /// Rate, bytes per 1000 iterations.
        rate: Option<RawSize>,
    },
}

/// A byte size: "64KiB" or an integer of bytes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawSize {
    /// Bytes.
    Bytes(u64),
    /// A number with a unit (B, KiB, MiB, GiB, TiB, kB, MB, GB).
    Text(String),
}

/// `[executor]`. `partition`, `account`, `qos`, `time-margin`, `sbatch-args`, `nodes` and
/// `exclude-nodes` are accepted only
/// with `kind = "slurm"`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawExecutor {
    /// Where runs execute; default "local". `hwr-exp run --executor` overrides it.
    pub kind: Option<RawExecutorKind>,
    /// Slurm partition (`sbatch --partition`); default: the cluster's default partition.
    pub partition: Option<String>,
    /// Slurm account (`sbatch --account`).
    pub account: Option<String>,
    /// Slurm quality of service (`sbatch --qos`).
    pub qos: Option<String>,
    /// Added to timeout + grace for Slurm's `--time`, humantime; default "60s".
    pub time_margin: Option<String>,
    /// Extra sbatch arguments, one word each, passed as given (not --array, --output, --error,
    /// --job-name, --chdir, --wrap, nor the options other keys set).
    pub sbatch_args: Option<Vec<String>>,
    /// Pass the submitting shell's SBATCH_* / SLURM_* variables on to sbatch (recorded in
    /// bundle.json); default false: they are removed so the recorded batch script is what runs.
    pub keep_sbatch_env: Option<bool>,
    /// Run only on these nodes (`sbatch --nodelist`): a Slurm host list (`"n[1-2]"`) or an array
    /// of node names.
    pub nodes: Option<RawNodeList>,
    /// Never run on these nodes (`sbatch --exclude`): a host list or an array of node names.
    pub exclude_nodes: Option<RawNodeList>,
    /// Requeue a task Slurm preempts or that nears Slurm's time limit (`--requeue` with a
    /// pre-timeout USR2), keeping the interrupted attempt under attempts/; default false.
    pub requeue: Option<bool>,
    /// Ray only: the cluster's address (`host:port`); default: `RAY_ADDRESS`.
    pub address: Option<String>,
    /// kubernetes only: the container image of the runs' pods (holds `hwr-exp` on its PATH).
    pub image: Option<String>,
    /// kubernetes only: the Job's namespace; default: the context's.
    pub namespace: Option<String>,
    /// kubernetes only: the kubectl context; default: the current context.
    pub context: Option<String>,
    /// kubernetes only: the PersistentVolumeClaim holding the results folder.
    pub volume: Option<String>,
    /// kubernetes only: where the pods mount `volume` (absolute); default: the results folder's path.
    pub mount_path: Option<String>,
    /// kubernetes only: memory request and limit of each run's pod, like "4GiB".
    pub memory: Option<RawSize>,
}

/// `[executor] nodes` / `exclude-nodes`: a Slurm host list or node names.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawNodeList {
    /// A Slurm host list, `"n1,n2"` or `"n[1-2]"`.
    List(String),
    /// Node names, one each.
    Names(Vec<String>),
}

/// `[executor] kind`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawExecutorKind {
    /// Run on this machine.
    Local,
    /// Submit the plan as Slurm job arrays: `jobs` is the array throttle, `cpus-per-run` is
    /// `--cpus-per-task`, `cpus` must be "auto" (the CPUs Slurm gives the task).
    Slurm,
    /// Submit each run as a Ray task to an existing cluster (`address` or `RAY_ADDRESS`).
    Ray,
    /// Submit the plan as one Kubernetes Indexed Job with kubectl: `jobs` is `parallelism`,
    /// `cpus-per-run` the pod's CPU request and limit, `cpus` must be "auto".
    Kubernetes,
}
