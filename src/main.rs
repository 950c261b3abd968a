//! hwr-exp entry point: parse the command line, run one command, print its error once, exit with its
//! documented code (docs/DESIGN.md 6).
//!
//! `hwr-exp run` reads as the pipeline: parse -> validate -> plan -> execute -> record; `report` and
//! `compare` analyse what was recorded; the other subcommands are short paths through the same stages.
//! Library code returns data (reports, notes, differences, errors); this file alone prints it.

use std::io::{self, BufWriter, StdoutLock, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use hwr_exp::archive::{self, ArchiveError};
use hwr_exp::cli::{
    CancelArgs, CheckArgs, Cli, Command, CompareArgs, ListArgs, ListFormat, PlanArgs, PlanFormat,
    ProbeCommand, RerunArgs, ResumeArgs, RetentionArgs, RunArgs, SlurmTaskArgs, VerifyArgs, WaitArgs,
};
use hwr_exp::exec::ProcessLauncher;
use hwr_exp::exit_codes::{self, Failure};
use hwr_exp::manifest::{self, Diagnostics};
use hwr_exp::plan::render;
use hwr_exp::runner::backend::Backend;
use hwr_exp::runner::session::{self, RunOptions, SessionError, SessionReport};
use hwr_exp::signal::{self, SecondSignal, Signals};
use hwr_exp::{probe, report};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any file is written: a file-size limit makes writes fail with a named error (exit 3)
    // instead of SIGXFSZ killing the process mid-bundle.
    if let Err(e) = signal::catch_file_size_limit() {
        print_error(&anyhow::Error::new(e));
        return exit_codes::status(exit_codes::ENVIRONMENT);
    }
    match run(cli.command) {
        Ok(code) => code,
        Err(failure) => {
            print_error(failure.error());
            exit_codes::status(failure.code())
        }
    }
}

/// Runs one subcommand; `Ok` carries the exit code of a command that did its work (a `run` whose
/// runs failed exits 1 with its bundle written), `Err` a failure to do it.
fn run(command: Command) -> Result<ExitCode, Failure> {
    let code = match command {
        Command::Run(args) => run_manifest(&args)?,
        Command::Check(args) => check(&args)?,
        Command::Plan(args) => plan(&args)?,
        Command::Schema => {
            let schema = serde_json::to_string_pretty(&manifest::schema()).map_err(Failure::environment)?;
            to_stdout(|out| writeln!(out, "{schema}"))?
        }
        Command::Probe(ProbeCommand::SafetensorsRetention(args)) => probe_retention(&args)?,
        Command::Report(args) => {
            let options = report::ReportOptions {
                bundle: args.bundle,
                format: args.format,
                plot: args.plot,
                width: table_width(args.wide),
                stderr: args.stderr,
            };
            let text = report::report_to_string(&options).map_err(Failure::usage)?;
            to_stdout(|out| out.write_all(text.as_bytes()))?
        }
        Command::Compare(CompareArgs { a, b, format, wide }) => {
            let options = report::CompareOptions {
                a,
                b,
                format,
                width: table_width(wide),
            };
            let text = report::compare_to_string(&options).map_err(Failure::usage)?;
            to_stdout(|out| out.write_all(text.as_bytes()))?
        }
        Command::List(args) => list(&args)?,
        Command::Verify(args) => verify(&args)?,
        Command::Rerun(args) => rerun(&args)?,
        Command::Resume(args) => resume(&args)?,
        Command::Completions(args) => cli_docs(|out| hwr_exp::cli_docs::completions(args.shell, out))?,
        Command::Man(args) => cli_docs(|out| hwr_exp::cli_docs::man_page(&args.command, out))?,
        Command::Wait(args) => wait(&args)?,
        Command::Cancel(args) => cancel(&args)?,
        Command::SlurmTask(args) => slurm_task(&args)?,
    };
    Ok(exit_codes::status(code))
}

/// `hwr-exp run MANIFEST [--results-dir DIR]`: the bundle goes under `DIR` (default `results/` in
/// the current directory).
fn run_manifest(args: &RunArgs) -> Result<i32, Failure> {
    let mut manifest = manifest::load(&args.manifest).map_err(Failure::usage)?;
    if let Some(kind) = args.executor {
        manifest.executor.kind = kind;
    }
    if args.detach && !Backend::of(manifest.executor.kind).detaches() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--detach needs the slurm executor (`[executor] kind = \"slurm\"` or `--executor slurm`)"
        )));
    }
    let signals = interrupt_handlers(SecondSignal::Exit(exit_codes::INTERRUPTED))?;
    let opts = RunOptions {
        results_dir: results_dir(args.results_dir.as_deref()),
        quiet: args.quiet,
        detach: args.detach,
        ..RunOptions::default()
    };
    let report = session::run_manifest(&manifest, &opts, &ProcessLauncher::new(), signals.cancel_flag())
        .map_err(session_failure)?;
    if args.detach {
        return Ok(detached(&report));
    }
    Ok(finished(&report, args.quiet))
}

/// `run --detach`: the bundle path on stdout, the job ids on stderr; exit 0.
fn detached(report: &SessionReport) -> i32 {
    let jobs: Vec<String> = report.slurm_jobs.iter().map(u64::to_string).collect();
    to_stderr(format_args!(
        "submitted {} runs as slurm job(s) {}; `hwr-exp wait {}` to attach, `hwr-exp cancel` to stop",
        report.planned,
        jobs.join(", "),
        display_path(&report.bundle).display()
    ));
    // A closed stdout (`| true`) is no reason to fail a submission that succeeded.
    let _ = writeln!(io::stdout().lock(), "{}", display_path(&report.bundle).display());
    exit_codes::SUCCESS
}

/// `hwr-exp wait BUNDLE`: attach to a detached Slurm bundle, then as `run`.
fn wait(args: &WaitArgs) -> Result<i32, Failure> {
    let signals = interrupt_handlers(SecondSignal::Exit(exit_codes::INTERRUPTED))?;
    let report =
        archive::slurm::wait(&args.bundle, args.quiet, signals.cancel_flag()).map_err(archive_failure)?;
    Ok(finished(&report, args.quiet))
}

/// `hwr-exp cancel BUNDLE`: cancel its Slurm arrays; the bundle ends interrupted.
fn cancel(args: &CancelArgs) -> Result<i32, Failure> {
    use archive::slurm::Cancelled;
    let text = match archive::slurm::cancel(&args.bundle).map_err(archive_failure)? {
        Cancelled::ByWaiter => "cancelled; the waiting hwr-exp marks the bundle interrupted".to_string(),
        Cancelled::Marked => "cancelled; bundle marked interrupted".to_string(),
        Cancelled::AlreadyFinished(status) => format!("bundle already {status}; its arrays were cancelled"),
    };
    to_stderr(format_args!("{}: {text}", args.bundle.display()));
    Ok(exit_codes::SUCCESS)
}

/// `hwr-exp slurm-task BUNDLE INDEX` (hidden; run by each array task): exit 0 when run.json was
/// written or was already there, 130 when stopped (scancel, time limit) before the run finished.
fn slurm_task(args: &SlurmTaskArgs) -> Result<i32, Failure> {
    let signals = interrupt_handlers(SecondSignal::SetFlag)?;
    let end = archive::slurm::task(
        &args.bundle,
        args.index,
        &ProcessLauncher::new(),
        signals.cancel_flag(),
    )
    .map_err(archive_failure)?;
    Ok(match end {
        hwr_exp::runner::slurm::TaskEnd::Stopped => exit_codes::INTERRUPTED,
        _ => exit_codes::SUCCESS,
    })
}

/// `hwr-exp check MANIFEST...`: every problem of every manifest, exit 2 when any.
fn check(args: &CheckArgs) -> Result<i32, Failure> {
    let mut code = exit_codes::SUCCESS;
    for path in &args.manifests {
        let manifest = match manifest::load(path) {
            Ok(m) => m,
            Err(diagnostics) => {
                print_error(&diagnostics.into());
                code = code.max(exit_codes::USAGE);
                continue;
            }
        };
        let ctx = session::plan_context(Path::new("<bundle>")).map_err(session_failure)?;
        match session::expand(&manifest, &ctx) {
            Ok(plan) => {
                to_stdout(|out| writeln!(out, "ok: {} ({} runs)", path.display(), plan.len()))?;
            }
            Err(e) => {
                let failure = session_failure(e);
                print_error(failure.error());
                code = code.max(failure.code());
            }
        }
    }
    Ok(code)
}

/// `hwr-exp plan MANIFEST [--format table|json|shell]`.
fn plan(args: &PlanArgs) -> Result<i32, Failure> {
    let mut manifest = manifest::load(&args.manifest).map_err(Failure::usage)?;
    if args.format == PlanFormat::Sbatch {
        manifest.executor.kind = Backend::Slurm.kind();
        let text = hwr_exp::runner::slurm::plan_scripts(&manifest, &results_dir(args.results_dir.as_deref()))
            .map_err(session_failure)?;
        return to_stdout(|out| out.write_all(text.as_bytes()));
    }
    let plan = session::plan_context(Path::new("<bundle>"))
        .and_then(|ctx| session::expand(&manifest, &ctx))
        .map_err(session_failure)?;
    to_stdout(|out| match args.format {
        PlanFormat::Table => render::table(&plan, out),
        PlanFormat::Json => {
            hwr_exp::bundle::plan_file::write_plan_json(&plan, &mut *out).and_then(|()| writeln!(out))
        }
        PlanFormat::Shell => plan
            .runs()
            .try_for_each(|r| writeln!(out, "{}", render::shell_line(&plan, &r))),
        PlanFormat::Sbatch => Ok(()),
    })
}

/// `hwr-exp probe safetensors-retention ...`: the JSON document on stdout; exit 0, 1 (first read
/// wrong, file or stdout error), 2 (smaps_rollup unreadable) or 128 + signal when stopped.
fn probe_retention(args: &RetentionArgs) -> Result<i32, Failure> {
    let context = "probe safetensors-retention";
    let signals = signal::install(SecondSignal::SetFlag)
        .map_err(|e| Failure::new(exit_codes::RUN_FAILED, anyhow::Error::new(e).context(context)))?;
    let options = probe::RetentionOptions {
        mode: args.mode,
        tensor_elements: args.tensor_elements,
        iterations: args.iterations,
        sample_every: args.sample_every,
        warmup: args.warmup,
    };
    let (document, code) = probe::measure(&options, &probe::Sampler::from_env(), signals.last_signal())
        .map_err(|e| Failure::new(e.exit_code(), anyhow::Error::new(e).context(context)))?;
    let written = serde_json::to_string_pretty(&document)
        .map_err(io::Error::from)
        .and_then(|text| {
            let mut out = io::stdout().lock();
            writeln!(out, "{text}").and_then(|()| out.flush())
        });
    if let Err(e) = written {
        let e = anyhow::Error::new(e).context(format!("{context}: cannot write the document"));
        return Err(Failure::new(exit_codes::RUN_FAILED, e));
    }
    if let Some(problem) = document.problem() {
        print_error(&anyhow::anyhow!("{context}: {problem}"));
    }
    Ok(code)
}

/// The results folder `given` on the command line, or the default: `results/` at the root of the
/// git working tree holding the current directory (as cargo's `target/` at the workspace root),
/// or in the current directory outside one.
fn results_dir(given: Option<&Path>) -> PathBuf {
    if let Some(dir) = given {
        return dir.to_path_buf();
    }
    let here = Path::new(".");
    match hwr_exp::provenance::work_tree_root(here) {
        Some(root) => display_path(&root.join("results")),
        None => PathBuf::from("results"),
    }
}

/// `hwr-exp list [DIR] [--format table|json]`.
fn list(args: &ListArgs) -> Result<i32, Failure> {
    let (entries, problems) =
        archive::list::scan(&results_dir(args.dir.as_deref())).map_err(archive_failure)?;
    for p in &problems {
        to_stderr(format_args!(
            "warning: skipped {}: {}",
            p.bundle.display(),
            p.message
        ));
    }
    to_stdout(|out| match args.format {
        ListFormat::Table => archive::list::write_table(&entries, out),
        ListFormat::Json => archive::list::write_json(&entries, out),
    })
}

/// `hwr-exp verify BUNDLE`: 0 when intact, 1 with the list of problems.
fn verify(args: &VerifyArgs) -> Result<i32, Failure> {
    let v = archive::verify::verify(&args.bundle).map_err(archive_failure)?;
    for note in &v.notes {
        to_stderr(format_args!("note: {note}"));
    }
    if v.problems.is_empty() {
        to_stdout(|out| {
            writeln!(
                out,
                "ok: {} ({} files match their recorded sha256)",
                args.bundle.display(),
                v.files_hashed
            )
        })?;
        Ok(exit_codes::SUCCESS)
    } else {
        to_stdout(|out| {
            writeln!(out, "{}: {} problem(s):", args.bundle.display(), v.problems.len())?;
            v.problems.iter().try_for_each(|p| writeln!(out, "  {p}"))
        })?;
        Ok(exit_codes::RUN_FAILED)
    }
}

/// `hwr-exp rerun BUNDLE [--at-recorded-revision]`: what differs from the archived bundle on
/// stderr before the first run, then as `run`.
fn rerun(args: &RerunArgs) -> Result<i32, Failure> {
    // With a temporary worktree to remove, signals only ever set the flag so the cleanup always runs.
    let signals = interrupt_handlers(if args.at_recorded_revision {
        SecondSignal::SetFlag
    } else {
        SecondSignal::Exit(exit_codes::INTERRUPTED)
    })?;
    let opts = archive::rerun::RerunOptions {
        results_dir: args.results_dir.clone(),
        quiet: args.quiet,
        at_recorded_revision: args.at_recorded_revision,
    };
    let rerun = archive::rerun::prepare(&args.bundle, &opts).map_err(archive_failure)?;
    for note in &rerun.notes {
        to_stderr(format_args!("note: {note}"));
    }
    to_stderr(format_args!(
        "rerun of {} (archived {})",
        rerun.archived.display(),
        rerun.archived_created
    ));
    if rerun.differences.is_empty() {
        to_stderr(format_args!(
            "  same revision, working tree, host and hwr-exp version as the archived bundle"
        ));
    } else {
        to_stderr(format_args!("  differs from the archived bundle:"));
        for d in &rerun.differences {
            to_stderr(format_args!("    {d}"));
        }
    }
    let report = rerun
        .run(&ProcessLauncher::new(), signals.cancel_flag())
        .map_err(archive_failure)?;
    Ok(finished(&report, args.quiet))
}

/// `hwr-exp resume BUNDLE [--allow-drift]`.
fn resume(args: &ResumeArgs) -> Result<i32, Failure> {
    let signals = interrupt_handlers(SecondSignal::Exit(exit_codes::INTERRUPTED))?;
    let opts = archive::resume::ResumeOptions {
        allow_drift: args.allow_drift,
        quiet: args.quiet,
    };
    let report = archive::resume::resume(
        &args.bundle,
        &opts,
        &ProcessLauncher::new(),
        signals.cancel_flag(),
    )
    .map_err(archive_failure)?;
    Ok(finished(&report, args.quiet))
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT set the cancel flag: the run in flight is stopped as on timeout and the
/// bundle is marked interrupted; `second` says what a signal does once the flag is set.
fn interrupt_handlers(second: SecondSignal) -> Result<Signals, Failure> {
    signal::install(second).map_err(Failure::environment)
}

/// Prints a finished session: a drift warning and the summary line on stderr (unless `quiet`),
/// the bundle path on stdout; returns the session's exit code. The bundle is written by now: a
/// closed stdout or stderr (`| head`, `| true`) changes nothing, the exit code is the session's.
fn finished(report: &SessionReport, quiet: bool) -> i32 {
    if !quiet {
        if report.drift {
            to_stderr(format_args!(
                "warning: the working tree changed while the experiment ran, or differs from the recorded one (drift recorded in provenance.json)"
            ));
        }
        print_failures(report);
        to_stderr(format_args!(
            "{}; bundle {}:",
            session::summarize(report),
            report.status.as_str()
        ));
    }
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{}", display_path(&report.bundle).display()).and_then(|()| out.flush());
    report.exit_code
}

/// The closing list of a session's runs that are not ok, on stderr: each run's reason and the last
/// lines of its stderr.log (left out when they are just the line the reason already quotes), then
/// how many more failed runs there are and the command that shows all of them.
fn print_failures(report: &SessionReport) {
    let failures = &report.failures;
    if failures.listed.is_empty() {
        return;
    }
    to_stderr(format_args!(
        "runs that are not ok (reason, then the last lines of stderr.log):"
    ));
    for f in &failures.listed {
        to_stderr(format_args!("  {}: {}", f.run_id, f.reason));
        let only_the_quoted_line = f.stderr_tail.len() == 1 && f.reason.ends_with(f.stderr_tail[0].as_str());
        if !only_the_quoted_line {
            for line in &f.stderr_tail {
                to_stderr(format_args!("    | {line}"));
            }
        }
    }
    if failures.unlisted > 0 {
        to_stderr(format_args!(
            "  ... and {} more; all of them: hwr-exp report {} --stderr",
            failures.unlisted,
            display_path(&report.bundle).display()
        ));
    }
}

/// Writes one line to stderr. Errors are ignored: a closed stderr (`2>&1 | head -1`) has no
/// reader left to tell, and the work it reports on goes on (unlike `eprintln!`, which panics).
fn to_stderr(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Writes a command's stdout through one buffered lock and flushes it. A reader that closed the
/// pipe early (`| head`) is not an error; any other write error is an environment error (exit 3).
fn to_stdout(
    write: impl FnOnce(&mut BufWriter<StdoutLock<'static>>) -> io::Result<()>,
) -> Result<i32, Failure> {
    let mut out = BufWriter::new(io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Ok(()) => Ok(exit_codes::SUCCESS),
        Err(e) if reader_gone(&e) => Ok(exit_codes::SUCCESS),
        Err(e) => Err(Failure::environment(
            anyhow::Error::new(e).context("cannot write to stdout"),
        )),
    }
}

/// Whether a write error says the reader closed the pipe: an `EPIPE` anywhere in its chain of
/// causes (a serializer or a formatter may wrap the `io::Error` it met).
fn reader_gone(error: &io::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::BrokenPipe {
                return true;
            }
            // `io::Error::source` skips the error it wraps (it returns that error's source).
            if let Some(inner) = io.get_ref() {
                cause = Some(inner);
                continue;
            }
        }
        if let Some(json) = e.downcast_ref::<serde_json::Error>()
            && json.io_error_kind() == Some(io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The one error printer. A manifest's diagnostics print as they are (each with its own `error:`
/// line, file:line:col, source line and caret); anything else prints as `error: ` and its chain of
/// causes, a cause left out when the text before already contains it (errors that inline their
/// source in their message).
fn print_error(error: &anyhow::Error) {
    if let Some(diagnostics) = error.downcast_ref::<Diagnostics>() {
        // A closed stderr is ignored: the exit code still tells.
        let _ = write!(io::stderr().lock(), "{diagnostics}");
        return;
    }
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    to_stderr(format_args!("error: {text}"));
}

/// A session error with its documented code; plan problems keep their located diagnostics.
fn session_failure(error: SessionError) -> Failure {
    let code = error.exit_code();
    match error {
        SessionError::Plan(diagnostics) => Failure::new(code, diagnostics),
        other => Failure::new(code, other),
    }
}

/// An archive command's error with its documented code.
fn archive_failure(error: ArchiveError) -> Failure {
    match error {
        ArchiveError::Session(e) => session_failure(e),
        other => Failure::new(other.exit_code(), other),
    }
}

/// Columns assumed when stdout is not a terminal and `COLUMNS` is unset.
const DEFAULT_WIDTH: usize = 100;

/// The width terminal tables must fit, in columns: `None` with `--wide`; else `COLUMNS` when it
/// is a positive number (as clap and most tools read it), else the width of the terminal on
/// stdout (`terminal_size`, TIOCGWINSZ), else [`DEFAULT_WIDTH`].
fn table_width(wide: bool) -> Option<usize> {
    if wide {
        return None;
    }
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0);
    let terminal = || terminal_size::terminal_size().map(|(terminal_size::Width(w), _)| usize::from(w));
    Some(columns.or_else(terminal).unwrap_or(DEFAULT_WIDTH))
}

/// `hwr-exp completions` and `hwr-exp man`: the generated text on stdout; an unknown subcommand
/// name is a usage error (exit 2), a closed stdout is success.
fn cli_docs(
    write: impl FnOnce(&mut dyn Write) -> Result<(), hwr_exp::cli_docs::CliDocsError>,
) -> Result<i32, Failure> {
    let mut refused = None;
    let code = to_stdout(|out| match write(out) {
        Ok(()) => Ok(()),
        Err(hwr_exp::cli_docs::CliDocsError::Io(e)) => Err(e),
        Err(e) => {
            refused = Some(e);
            Ok(())
        }
    })?;
    match refused {
        Some(e) => Err(Failure::usage(e)),
        None => Ok(code),
    }
}

/// `path` relative to the current directory when it lies below it, else as is.
fn display_path(path: &Path) -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
}
