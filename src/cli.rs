//! Command-line types (clap): every clap type of hwr-exp and nothing else. `main` dispatches on
//! [`Command`] and turns these arguments into the plain option types of the library modules. The
//! value enums the library acts on too ([`ExecutorKind`], [`ReportFormat`], [`ProbeMode`]) are
//! [`crate::choices`]'s, re-exported here; that leaf is the only module this file imports.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::choices::{ExecutorKind, FailOn, ProbeMode, ReportFormat};

/// Declarative experiment runner: expands a TOML manifest into isolated runs and records them in a
/// result bundle with the repository's state beside the results.
#[derive(Debug, Parser)]
#[command(name = "hwr-exp", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a manifest: expand it, execute every run, write a result bundle.
    Run(RunArgs),
    /// Validate manifests; report every error with file:line:col. Writes nothing.
    Check(CheckArgs),
    /// Print the expanded runs in order.
    Plan(PlanArgs),
    /// Print the JSON Schema of the manifest format.
    Schema,
    /// Built-in probes.
    #[command(subcommand)]
    Probe(ProbeCommand),
    /// Summarise a result bundle: run table, retention growth against the reuse control, metrics.
    Report(ReportArgs),
    /// Put the cells of two result bundles side by side.
    Compare(CompareArgs),
    /// List the bundles under a results folder: experiment, created, status, revision, dirty, runs, parent.
    List(ListArgs),
    /// Check an archived bundle against its recorded sha256s, manifest and patch.
    Verify(VerifyArgs),
    /// Run an archived bundle's manifest again into a new bundle naming it as parent.
    Rerun(RerunArgs),
    /// Finish an interrupted, failed or abandoned bundle: run only its unfinished runs, into it.
    Resume(ResumeArgs),
    /// Find the first commit at which the selected cells retain memory against their control.
    Bisect(BisectArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) of hwr-exp or of one subcommand on stdout: `hwr-exp man | man -l -`.
    Man(ManArgs),
    /// Attach to a bundle submitted to Slurm (`run --detach`): wait for its runs and finish it.
    Wait(WaitArgs),
    /// Cancel the Slurm job arrays of a bundle and mark it interrupted.
    Cancel(CancelArgs),
    /// Run one planned run of a bundle on this node (what each Slurm array task executes).
    #[command(name = "slurm-task", hide = true)]
    SlurmTask(SlurmTaskArgs),
    /// Run task I of a bundle on this node: the entry point every batch engine starts (DESIGN 8).
    #[command(name = "task", hide = true)]
    Task(TaskArgs),
}

/// `hwr-exp bisect`.
#[derive(Debug, Args)]
pub struct BisectArgs {
    /// The manifest: today's file runs at each probed commit, its folder taken at the same path
    /// inside a temporary worktree of that commit.
    pub manifest: PathBuf,
    /// A revision without the retention (not run).
    #[arg(long, value_name = "REV")]
    pub good: String,
    /// A revision with it, a descendant of --good (not run).
    #[arg(long, value_name = "REV")]
    pub bad: String,
    /// Judge only the cells whose matrix value of KEY is VALUE (their control cells run too).
    /// Repeatable: values of one key are alternatives, different keys must all match.
    #[arg(long = "where", value_name = "KEY=VALUE", value_parser = parse_where)]
    pub where_: Vec<(String, String)>,
    /// Most runs per cell at each probed commit (adaptive rounds stop earlier once every selected
    /// cell is decided). Default: the manifest's adaptive `max`, else 20.
    #[arg(long, value_name = "N", value_parser = parse_repetitions, allow_negative_numbers = true)]
    pub repetitions: Option<u32>,
    /// Folder for the steps' bundles. Default: as `run`'s.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// No progress output (the evidence table and the result are still printed).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `hwr-exp completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `hwr-exp man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print, e.g. `run` or `probe safetensors-retention`; none: the
    /// page of hwr-exp itself, listing every subcommand.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `hwr-exp run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The manifest (TOML).
    pub manifest: PathBuf,
    /// Folder that holds `<experiment>/<bundle>` folders, relative to the current directory.
    /// Default: `results/` at the root of the git repository holding the current directory (as
    /// cargo's `target/` sits at the workspace root), or in the current directory outside one.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
    /// Where the runs execute; overrides the manifest's `[executor] kind`.
    #[arg(long, value_enum, value_name = "KIND")]
    pub executor: Option<ExecutorKind>,
    /// Slurm executor: submit, print the bundle path and the job ids, and return without waiting
    /// (`hwr-exp wait BUNDLE` attaches later).
    #[arg(long)]
    pub detach: bool,
    /// Stop after the first run that is not ok: no further run starts (runs already running in
    /// other job slots finish). The bundle is `interrupted` (`hwr-exp resume` runs the rest, and
    /// stops again at a run that is not ok); exit 1. Local executor only.
    #[arg(long)]
    pub fail_fast: bool,
    /// Which cells and how many repetitions, instead of the manifest's.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// `--where KEY=VALUE` and `--repetitions N`: a part of a manifest's plan without a copy of the
/// manifest (`run`, `plan`). Recorded in bundle.json `overrides`; `resume` and `rerun` apply the
/// same.
#[derive(Debug, Clone, Default, Args)]
pub struct SelectArgs {
    /// Only the cells whose matrix value of KEY is VALUE (as the manifest spells it, or the same
    /// number). Repeatable: values of one key are alternatives, different keys must all match.
    #[arg(long = "where", value_name = "KEY=VALUE", value_parser = parse_where)]
    pub where_: Vec<(String, String)>,
    /// Repetitions of every cell, instead of `[schedule] repetitions`.
    #[arg(long, value_name = "N", value_parser = parse_repetitions, allow_negative_numbers = true)]
    pub repetitions: Option<u32>,
}

/// Parses `--where KEY=VALUE`: split at the first `=`, a key before it.
fn parse_where(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_owned(), value.to_owned())),
        _ => Err(format!(
            "expected KEY=VALUE (a matrix key, `=`, one of its values), got `{text}`"
        )),
    }
}

/// Parses `--repetitions N`: a positive integer that fits 32 bits.
fn parse_repetitions(text: &str) -> Result<u32, String> {
    let n = parse_positive(text)?;
    u32::try_from(n).map_err(|_| format!("at most {}, got {n}", u32::MAX))
}

/// `hwr-exp wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The bundle folder.
    pub bundle: PathBuf,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `hwr-exp cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The bundle folder.
    pub bundle: PathBuf,
}

/// `hwr-exp slurm-task` (hidden).
#[derive(Debug, Args)]
pub struct SlurmTaskArgs {
    /// The bundle folder (absolute, on a file system the node shares).
    pub bundle: PathBuf,
    /// Plan index of the run to execute.
    pub index: usize,
}

/// `hwr-exp task` (hidden): the indexed-task contract's entry point.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Plan index of the run to execute; default `HWR_TASK_INDEX`, else `JOB_COMPLETION_INDEX`.
    #[arg(long)]
    pub index: Option<usize>,
    /// The bundle folder (absolute, on a file system the node shares).
    pub bundle: PathBuf,
}

/// `hwr-exp check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Manifests to check.
    #[arg(required = true)]
    pub manifests: Vec<PathBuf>,
}

/// Output format of `hwr-exp plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// A table.
    Table,
    /// plan.json as the bundle would hold it.
    Json,
    /// One equivalent shell line per run.
    Shell,
    /// The Slurm batch script(s) `run --executor slurm` would submit (nothing is submitted).
    Sbatch,
    /// The Kubernetes Indexed Job `run --executor kubernetes` would submit, as JSON for
    /// `kubectl apply -f` (nothing is submitted).
    K8s,
}

/// `hwr-exp plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The manifest (TOML).
    pub manifest: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
    pub format: PlanFormat,
    /// `--format sbatch` / `k8s`: the results folder the bundle would go under. Default: as `run`'s.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// The plan `run` would make with the same `--where` / `--repetitions`.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// `hwr-exp probe ...`.
#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Does repeated tensor materialization from a safetensors file retain private memory?
    SafetensorsRetention(RetentionArgs),
}

/// Largest `--tensor-elements`: 2^30 f32 values, a 4 GiB file.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 30;

/// Flags of `hwr-exp probe safetensors-retention`. Every count is a positive integer; anything
/// else is a usage error (exit 2).
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// What each iteration does: get_tensor (look the tensor up in the reader, whose header was
    /// parsed once, and copy it into a new owned buffer), view (look it up, borrowed view, no
    /// copy), reuse (read the one cached copy; the control).
    #[arg(long, value_enum)]
    pub mode: ProbeMode,
    /// f32 elements of the synthetic tensor `weight` (values 0..N).
    #[arg(long, value_name = "N", default_value_t = 64, allow_negative_numbers = true,
          value_parser = parse_elements)]
    pub tensor_elements: u64,
    /// Loop iterations.
    #[arg(long, value_name = "N", default_value_t = 1_000_000, allow_negative_numbers = true,
          value_parser = parse_positive)]
    pub iterations: u64,
    /// Take a `loop` sample every N iterations.
    #[arg(long, value_name = "N", default_value_t = 100_000, allow_negative_numbers = true,
          value_parser = parse_positive)]
    pub sample_every: u64,
    /// Iterations run before the `baseline` sample.
    #[arg(long, value_name = "N", default_value_t = 1000, allow_negative_numbers = true,
          value_parser = parse_positive)]
    pub warmup: u64,
}

/// Parses a count flag: a positive integer (`1`, `200000`); the message says what is wrong.
fn parse_positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be a positive integer (1 or more), got 0".to_owned()),
        Ok(n) => Ok(n),
        Err(_) if text.trim().parse::<i128>().is_ok() => {
            Err(format!("must be a positive integer (1 or more), got {text}"))
        }
        Err(_) => Err(format!("must be a positive integer, got `{text}`")),
    }
}

/// Parses `--tensor-elements`: a positive integer up to [`MAX_TENSOR_ELEMENTS`].
fn parse_elements(text: &str) -> Result<u64, String> {
    let n = parse_positive(text)?;
    if n > MAX_TENSOR_ELEMENTS {
        return Err(format!(
            "at most {MAX_TENSOR_ELEMENTS} elements (a 4 GiB tensor), got {n}"
        ));
    }
    Ok(n)
}

/// `hwr-exp report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The bundle folder (`results/<experiment>/<timestamp>-<hex>`).
    pub bundle: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// Also write an SVG plot: the probe's private bytes against loop iterations per run, one panel
    /// per size, plus the run's tree PSS (memory.jsonl, summed over its processes) over time where
    /// present.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// After the tables, print the last lines of stderr.log of every run that is not ok (table
    /// and md; json always has them as `stderr-tail`).
    #[arg(long)]
    pub stderr: bool,
    /// Terminal tables one line per row, every column side by side, however wide. Default: fit
    /// the width of the terminal ($COLUMNS, else the terminal's, else 100 columns).
    #[arg(long)]
    pub wide: bool,
    /// The control cell instead of the manifest's `[report] control`: every compared cell and
    /// every contrast is pivoted on it, from the runs the bundle has (nothing runs again).
    /// Repeatable, one matrix key each: `--control allocator=glibc --control mode=reuse`.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_where)]
    pub control: Vec<(String, String)>,
    /// Exit 1, naming the matching cells or contrasts on stderr, when a verdict is `above
    /// control` (`above-control`) or a contrast `changes retention` (`changes`); else 0. The
    /// report is printed as usual. Repeatable or comma separated.
    #[arg(long, value_enum, value_name = "WHAT", value_delimiter = ',')]
    pub fail_on: Vec<FailOn>,
}

/// `hwr-exp compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The first (baseline) bundle folder.
    pub a: PathBuf,
    /// The second bundle folder; differences are B minus A.
    pub b: PathBuf,
    /// Output format (`csv`: one row per cell and metric).
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// Terminal tables one line per row, however wide (default: fit the terminal's width).
    #[arg(long)]
    pub wide: bool,
}

/// Output format of `hwr-exp list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    /// Aligned columns.
    Table,
    /// One JSON array of objects.
    Json,
}

/// `hwr-exp list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Results folder holding `<experiment>/<bundle>` folders. Default: as `run`'s (`results/` at
    /// the root of the git repository holding the current directory, else in the current
    /// directory).
    pub dir: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

/// `hwr-exp verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle folder.
    pub bundle: PathBuf,
}

/// `hwr-exp rerun`.
#[derive(Debug, Args)]
pub struct RerunArgs {
    /// The archived bundle folder.
    pub bundle: PathBuf,
    /// Build the recorded tree (revision.txt + working-tree.patch) in a temporary git worktree and run there.
    #[arg(long)]
    pub at_recorded_revision: bool,
    /// Folder for the new bundle. Default: the archived bundle's results folder.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `hwr-exp resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The interrupted, failed or abandoned bundle folder.
    pub bundle: PathBuf,
    /// Resume even when the working tree differs from the recorded provenance; the drift is recorded.
    #[arg(long)]
    pub allow_drift: bool,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn counts_must_be_positive_integers() {
        assert_eq!(parse_positive("1"), Ok(1));
        assert_eq!(parse_positive("200000"), Ok(200_000));
        assert!(parse_positive("0").unwrap_err().contains("1 or more"));
        assert!(parse_positive("-4").unwrap_err().contains("1 or more"));
        assert!(parse_positive("1e3").unwrap_err().contains("`1e3`"));
        assert!(parse_positive("").is_err());
        assert_eq!(parse_elements("1073741824"), Ok(MAX_TENSOR_ELEMENTS));
        assert!(parse_elements("1073741825").is_err());
    }

    #[test]
    fn where_takes_key_equals_value() {
        assert_eq!(parse_where("mode=reuse"), Ok(("mode".into(), "reuse".into())));
        assert_eq!(parse_where("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_where("mode").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_where("=reuse").is_err());
        assert_eq!(parse_repetitions("3"), Ok(3));
        assert!(parse_repetitions("0").is_err());
        assert!(parse_repetitions("4294967296").is_err());
    }
}
