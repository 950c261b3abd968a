//! hwr-exp entry point. `run` reads as the pipeline: parse -> validate -> plan -> execute -> record
//! -> report; the other subcommands are short paths through the same stages.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use hwr_exp::cli::{CheckArgs, Cli, Command, PlanArgs, PlanFormat, ProbeCommand, RunArgs};
use hwr_exp::exec::{CancelFlag, ProcessExecutor};
use hwr_exp::exit_codes;
use hwr_exp::manifest::{self, Manifest};
use hwr_exp::plan::render;
use hwr_exp::runner::session::{self, RunOptions, SessionError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => run(&args),
        Command::Check(args) => check(&args),
        Command::Plan(args) => plan(&args),
        Command::Schema => schema(),
        Command::Probe(ProbeCommand::SafetensorsRetention(args)) => hwr_exp::probe::run_retention(&args),
        Command::Report(args) => edge(hwr_exp::report::report_command(&args)),
        Command::Compare(args) => edge(hwr_exp::report::compare_command(&args)),
        // Archive commands (issue 5).
        Command::List(args) => archive_cmd::list(&args),
        Command::Verify(args) => archive_cmd::verify(&args),
        Command::Rerun(args) => archive_cmd::rerun(&args),
        Command::Resume(args) => archive_cmd::resume(&args),
        Command::Completions(args) => cli_docs(|out| hwr_exp::cli_docs::completions(args.shell, out)),
        Command::Man(args) => cli_docs(|out| hwr_exp::cli_docs::man_page(&args.command, out)),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// `hwr-exp run MANIFEST`.
fn run(args: &RunArgs) -> i32 {
    let Some(manifest) = load(&args.manifest) else {
        return exit_codes::USAGE;
    };
    let cancel = match install_signal_handlers() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot install signal handlers: {e}");
            return exit_codes::ENVIRONMENT;
        }
    };
    let opts = RunOptions {
        results_dir: args.results_dir.clone().unwrap_or_else(|| "results".into()),
        quiet: args.quiet,
        ..RunOptions::default()
    };
    match session::run_manifest(&manifest, &opts, &ProcessExecutor::new(), &cancel) {
        Ok(report) => archive_cmd::finished(&report, args.quiet),
        Err(e) => {
            report_session_error(&e);
            e.exit_code()
        }
    }
}

/// `hwr-exp check MANIFEST...`: every problem of every manifest, exit 2 when any.
fn check(args: &CheckArgs) -> i32 {
    let mut code = exit_codes::SUCCESS;
    for path in &args.manifests {
        let Some(manifest) = load(path) else {
            code = exit_codes::USAGE;
            continue;
        };
        let ctx = match session::plan_context(std::path::Path::new("<bundle>")) {
            Ok(c) => c,
            Err(e) => {
                report_session_error(&e);
                return e.exit_code();
            }
        };
        match session::expand(&manifest, &ctx) {
            Ok(plan) => println!("ok: {} ({} runs)", path.display(), plan.len()),
            Err(e) => {
                report_session_error(&e);
                code = code.max(e.exit_code());
            }
        }
    }
    code
}

/// `hwr-exp plan MANIFEST [--format table|json|shell]`.
fn plan(args: &PlanArgs) -> i32 {
    let Some(manifest) = load(&args.manifest) else {
        return exit_codes::USAGE;
    };
    let plan = match session::plan_context(std::path::Path::new("<bundle>"))
        .and_then(|ctx| session::expand(&manifest, &ctx))
    {
        Ok(p) => p,
        Err(e) => {
            report_session_error(&e);
            return e.exit_code();
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let written = match args.format {
        PlanFormat::Table => render::table(&plan, &mut out),
        PlanFormat::Json => plan.write_json(&manifest, &mut out).and_then(|()| writeln!(out)),
        PlanFormat::Shell => plan
            .runs()
            .try_for_each(|r| writeln!(out, "{}", render::shell_line(&plan, &r))),
    };
    written_exit_code(written.and_then(|()| out.flush()))
}

/// Exit code once a command's stdout is written and flushed: success, also when the reader
/// closed the pipe early (`| head`); otherwise the error is printed and the exit code is
/// [`exit_codes::ENVIRONMENT`].
fn written_exit_code(written: std::io::Result<()>) -> i32 {
    match written {
        Ok(()) => exit_codes::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit_codes::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            exit_codes::ENVIRONMENT
        }
    }
}

/// `hwr-exp schema`: the manifest's JSON Schema on stdout.
fn schema() -> i32 {
    println!(
        "{}",
        serde_json::to_string_pretty(&manifest::schema()).unwrap_or_default()
    );
    exit_codes::SUCCESS
}

/// Loads and validates a manifest, printing every diagnostic on failure.
fn load(path: &std::path::Path) -> Option<Manifest> {
    manifest::load(path).map_err(|d| eprint!("{d}")).ok()
}

fn report_session_error(e: &SessionError) {
    match e {
        SessionError::Plan(d) => eprint!("{d}"),
        other => eprintln!("error: {other}"),
    }
}

/// SIGINT and SIGTERM set the cancel flag: the run in flight is stopped as on timeout and the bundle
/// is marked interrupted. A second signal while the flag is set exits at once with 130 (the runs'
/// parent-death signal then stops them).
fn install_signal_handlers() -> std::io::Result<CancelFlag> {
    let cancel: CancelFlag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, exit_codes::INTERRUPTED, Arc::clone(&cancel))?;
        signal_hook::flag::register(sig, Arc::clone(&cancel))?;
    }
    Ok(cancel)
}

/// `path` relative to the current directory when it lies below it, else as is.
fn display_path(path: &std::path::Path) -> std::path::PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(std::path::Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
}

/// Archive commands (issue 5): `list`, `verify`, `rerun`, `resume`.
mod archive_cmd {
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use hwr_exp::archive::{self, ArchiveError};
    use hwr_exp::cli::{ListArgs, ListFormat, RerunArgs, ResumeArgs, VerifyArgs};
    use hwr_exp::exec::{CancelFlag, ProcessExecutor};
    use hwr_exp::exit_codes;
    use hwr_exp::runner::session::{self, SessionError, SessionReport};

    /// `hwr-exp list [DIR] [--format table|json]`.
    pub fn list(args: &ListArgs) -> i32 {
        let (entries, problems) = match archive::list::scan(&args.dir) {
            Ok(found) => found,
            Err(e) => return fail(&e),
        };
        for p in &problems {
            eprintln!("warning: skipped {}: {}", p.bundle.display(), p.message);
        }
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let written = match args.format {
            ListFormat::Table => archive::list::write_table(&entries, &mut out),
            ListFormat::Json => archive::list::write_json(&entries, &mut out),
        };
        super::written_exit_code(written.and_then(|()| out.flush()))
    }

    /// `hwr-exp verify BUNDLE`: 0 when intact, 1 with the list of problems.
    pub fn verify(args: &VerifyArgs) -> i32 {
        let v = match archive::verify::verify(&args.bundle) {
            Ok(v) => v,
            Err(e) => return fail(&e),
        };
        for note in &v.notes {
            eprintln!("note: {note}");
        }
        if v.problems.is_empty() {
            println!(
                "ok: {} ({} files match their recorded sha256)",
                args.bundle.display(),
                v.files_hashed
            );
            exit_codes::SUCCESS
        } else {
            println!("{}: {} problem(s):", args.bundle.display(), v.problems.len());
            for p in &v.problems {
                println!("  {p}");
            }
            exit_codes::RUN_FAILED
        }
    }

    /// `hwr-exp rerun BUNDLE [--at-recorded-revision]`.
    pub fn rerun(args: &RerunArgs) -> i32 {
        let cancel = match cancel_flag(args.at_recorded_revision) {
            Ok(c) => c,
            Err(code) => return code,
        };
        let opts = archive::rerun::RerunOptions {
            results_dir: args.results_dir.clone(),
            quiet: args.quiet,
            at_recorded_revision: args.at_recorded_revision,
        };
        match archive::rerun::rerun(&args.bundle, &opts, &ProcessExecutor::new(), &cancel) {
            Ok(report) => finished(&report, args.quiet),
            Err(e) => fail(&e),
        }
    }

    /// `hwr-exp resume BUNDLE [--allow-drift]`.
    pub fn resume(args: &ResumeArgs) -> i32 {
        let cancel = match cancel_flag(false) {
            Ok(c) => c,
            Err(code) => return code,
        };
        let opts = archive::resume::ResumeOptions {
            allow_drift: args.allow_drift,
            quiet: args.quiet,
        };
        match archive::resume::resume(&args.bundle, &opts, &ProcessExecutor::new(), &cancel) {
            Ok(report) => finished(&report, args.quiet),
            Err(e) => fail(&e),
        }
    }

    /// SIGINT/SIGTERM set the cancel flag. Unless `cleanup_first`, a second signal exits at once
    /// (as for `run`); with it (a temporary worktree to remove), signals only ever set the flag so
    /// the cleanup always runs.
    fn cancel_flag(cleanup_first: bool) -> Result<CancelFlag, i32> {
        if !cleanup_first {
            return super::install_signal_handlers().map_err(|e| {
                eprintln!("error: cannot install signal handlers: {e}");
                exit_codes::ENVIRONMENT
            });
        }
        let cancel: CancelFlag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&cancel)) {
                eprintln!("error: cannot install signal handlers: {e}");
                return Err(exit_codes::ENVIRONMENT);
            }
        }
        Ok(cancel)
    }

    /// Prints a finished session: a drift warning, the summary line on stderr, the bundle path on
    /// stdout; returns the session's exit code.
    pub(super) fn finished(report: &SessionReport, quiet: bool) -> i32 {
        if !quiet {
            if report.drift {
                eprintln!(
                    "warning: the working tree changed while the experiment ran, or differs from the recorded one (drift recorded in provenance.json)"
                );
            }
            let status = serde_json::to_value(report.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from));
            eprintln!(
                "{}; bundle {}:",
                session::summarize(report),
                status.unwrap_or_default()
            );
        }
        println!("{}", super::display_path(&report.bundle).display());
        report.exit_code
    }

    fn fail(e: &ArchiveError) -> i32 {
        match e {
            ArchiveError::Session(SessionError::Plan(d)) => eprint!("{d}"),
            other => eprintln!("error: {other}"),
        }
        e.exit_code()
    }
}

/// `hwr-exp completions SHELL` and `hwr-exp man [COMMAND]...`: writes the generated text to
/// stdout (a reader closing the pipe early is fine); an unknown subcommand is a usage error.
fn cli_docs(write: impl FnOnce(&mut dyn Write) -> Result<(), hwr_exp::cli_docs::CliDocsError>) -> i32 {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match write(&mut out) {
        Ok(()) => written_exit_code(out.flush()),
        Err(hwr_exp::cli_docs::CliDocsError::Io(e)) => written_exit_code(Err(e)),
        Err(e) => {
            eprintln!("error: {e}");
            exit_codes::USAGE
        }
    }
}

/// Prints an error from a command that reads bundles (its text names the file) and maps it to exit 2.
fn edge(result: anyhow::Result<i32>) -> i32 {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        exit_codes::USAGE
    })
}
