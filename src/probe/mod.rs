//! Built-in probes (DESIGN 7).

/// Flags of `hwr-exp probe safetensors-retention`.
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionArgs {}

/// Runs the probe; returns the process exit code.
pub fn run_retention(args: &RetentionArgs) -> i32 {
    let _ = args;
    todo!("probe")
}
