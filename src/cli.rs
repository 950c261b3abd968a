//! Command-line types (clap). No behaviour here: `main` dispatches on [`Command`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    Report(crate::report::ReportArgs),
    /// Put the cells of two result bundles side by side.
    Compare(crate::report::CompareArgs),
    // Archive commands (issue 5).
    /// List the bundles under a results folder: experiment, created, status, revision, dirty, runs, parent.
    List(ListArgs),
    /// Check an archived bundle against its recorded sha256s, manifest and patch.
    Verify(VerifyArgs),
    /// Run an archived bundle's manifest again into a new bundle naming it as parent.
    Rerun(RerunArgs),
    /// Finish an interrupted or abandoned bundle: run only its unfinished runs, into it.
    Resume(ResumeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) of hwr-exp or of one subcommand on stdout: `hwr-exp man | man -l -`.
    Man(ManArgs),
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
    /// Folder that holds `<experiment>/<bundle>` folders. Default: `results/` beside the manifest's repository root, or beside the manifest when it is not in a repository.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
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
}

/// `hwr-exp plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The manifest (TOML).
    pub manifest: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
    pub format: PlanFormat,
}

/// `hwr-exp probe ...`.
#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Does repeated tensor materialization from a safetensors file retain private memory?
    SafetensorsRetention(crate::probe::RetentionArgs),
}

// Archive commands (issue 5).

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
    /// Results folder holding `<experiment>/<bundle>` folders.
    #[arg(default_value = "results")]
    pub dir: PathBuf,
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
    /// The interrupted or abandoned bundle folder.
    pub bundle: PathBuf,
    /// Resume even when the working tree differs from the recorded provenance; the drift is recorded.
    #[arg(long)]
    pub allow_drift: bool,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}
