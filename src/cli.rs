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
