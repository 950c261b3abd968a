//! hwr-exp entry point: parse -> validate -> plan -> execute -> record -> report.

use clap::Parser;
use hwr_exp::cli::{Cli, Command, ProbeCommand};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Probe(ProbeCommand::SafetensorsRetention(args)) => hwr_exp::probe::run_retention(&args),
        _ => todo!("pipeline"),
    };
    std::process::exit(code);
}
