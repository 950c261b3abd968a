//! What hwr-exp prints, on stdout and stderr, once a command has done its work: the one error
//! printer, each command's closing lines, and the two writers every line goes through. `main.rs`
//! dispatches (builds each command's options from [`crate::cli`], calls the library, maps errors
//! to exit codes) and hands the results here; the library returns data and prints nothing but a
//! running session's progress lines ([`crate::runner::progress`]).
//!
//! Two rules hold for every line:
//! - stdout goes through [`to_stdout`]: one buffered lock, flushed; a reader that closed the pipe
//!   early (`| head`) is not an error, any other write error is an environment error (exit 3);
//! - stderr goes through [`to_stderr`]: errors are ignored, since a closed stderr has no reader
//!   left to tell and the work it reports on goes on (unlike `eprintln!`, which panics).
//!
//! Sits on top of the crate, beside [`crate::cli_docs`]: nothing imports it.

use std::io::{self, BufWriter, StdoutLock, Write};
use std::path::{Path, PathBuf};

use crate::archive::engine::Cancelled;
use crate::archive::list::{self, ListEntry, ListProblem};
use crate::archive::rerun::PreparedRerun;
use crate::archive::verify::Verification;
use crate::cli::{ListFormat, PlanFormat};
use crate::exit_codes::{self, Failure};
use crate::manifest::Diagnostics;
use crate::plan::{Plan, render};
use crate::probe::RetentionDocument;
use crate::runner::progress;
use crate::runner::session::{self, SessionReport};

/// Writes one line to stderr. Errors are ignored: a closed stderr (`2>&1 | head -1`) has no
/// reader left to tell, and the work it reports on goes on (unlike `eprintln!`, which panics).
pub fn to_stderr(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Writes a command's stdout through one buffered lock and flushes it; `Ok` is exit 0. A reader
/// that closed the pipe early (`| head`) is not an error.
///
/// # Errors
/// Any other write error, as an environment failure (exit 3) `cannot write to stdout`.
pub fn to_stdout(
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
    reader_gone_in(error)
}

/// [`reader_gone`] of any error and its causes (a CSV writer's, serde_json's, an `anyhow` context).
fn reader_gone_in(error: &(dyn std::error::Error + 'static)) -> bool {
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
        // csv::Error names no source: its io::Error is in its kind.
        if let Some(csv) = e.downcast_ref::<csv::Error>()
            && let csv::ErrorKind::Io(io) = csv.kind()
        {
            cause = Some(io);
            continue;
        }
        cause = e.source();
    }
    false
}

/// A command's whole text output (`report`, `compare`, `plan --format sbatch`) on stdout.
///
/// # Errors
/// As [`to_stdout`].
pub fn text(text: &str) -> Result<i32, Failure> {
    to_stdout(|out| out.write_all(text.as_bytes()))
}

/// `hwr-exp report`: the report on stdout as it is written (CSV and JSON row by row).
///
/// # Errors
/// As [`to_stdout`]; a run of a large bundle that can no longer be read while its rows are
/// written is an environment failure too (the message names the file).
pub fn report(prepared: &crate::report::Prepared) -> Result<i32, Failure> {
    let mut failed = None;
    let code = to_stdout(|out| {
        prepared.write(out).map_err(|e| {
            // A closed pipe met by a writer inside (the CSV writer, serde_json) is the reader
            // leaving, not a failure; another write error keeps its io::Error; anything else
            // is the bundle's.
            if e.chain().any(reader_gone_in) {
                return io::Error::from(io::ErrorKind::BrokenPipe);
            }
            match e.downcast::<io::Error>() {
                Ok(io) => io,
                Err(other) => {
                    let text = format!("{other:#}");
                    failed = Some(other);
                    io::Error::other(text)
                }
            }
        })
    });
    match failed {
        Some(e) => Err(Failure::environment(e)),
        None => code,
    }
}

/// `hwr-exp schema`: the manifest's JSON Schema, pretty, on stdout.
///
/// # Errors
/// As [`to_stdout`]; a schema that does not serialize is an environment failure.
pub fn schema(schema: &serde_json::Value) -> Result<i32, Failure> {
    let schema = serde_json::to_string_pretty(schema).map_err(Failure::environment)?;
    to_stdout(|out| writeln!(out, "{schema}"))
}

/// The one error printer. A manifest's diagnostics print as they are (each with its own `error:`
/// line, file:line:col, source line and caret); anything else prints as `error: ` and its chain of
/// causes, a cause left out when the text before already contains it (errors that inline their
/// source in their message).
/// Prints a manifest's validation warnings on stderr (`warning: ...` with `file:line:col`, the
/// source line and a caret, like errors); nothing without any. They never change an exit code.
pub fn manifest_warnings(manifest: &crate::manifest::Manifest) {
    if let Some(warnings) = manifest.warnings() {
        let _ = write!(io::stderr().lock(), "{warnings}");
    }
}

/// Prints an error on stderr: a manifest's diagnostics as they render, anything else as
/// `error: ...` with its causes.
pub fn print_error(error: &anyhow::Error) {
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

/// Prints a finished session: a drift warning and the summary line on stderr (unless `quiet`),
/// the bundle path on stdout, then (unless `quiet`) the next command on stderr ([`next_command`]); returns the session's exit code. The bundle is written by now: a
/// closed stdout or stderr (`| head`, `| true`) changes nothing, the exit code is the session's.
pub fn finished(report: &SessionReport, quiet: bool) -> i32 {
    if !quiet {
        if report.drift {
            to_stderr(format_args!(
                "warning: the working tree changed while the experiment ran, or differs from the recorded one (drift recorded in provenance.json)"
            ));
        }
        print_failures(report);
        if report.failed_fast {
            to_stderr(format_args!(
                "stopped after the first run that was not ok (--fail-fast); `hwr-exp resume` runs the rest"
            ));
        }
        to_stderr(format_args!(
            "{}; bundle {}:",
            session::summarize(report),
            report.status.as_str()
        ));
    }
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{}", display_path(&report.bundle).display()).and_then(|()| out.flush());
    drop(out);
    if !quiet {
        to_stderr(format_args!("next: {}", next_command(report)));
    }
    report.exit_code
}

/// The command to run next on a session's bundle: `hwr-exp resume <path>` when runs are left
/// (interrupted, failed), else `hwr-exp report <path>`; the path quoted for a shell when needed.
pub fn next_command(report: &SessionReport) -> String {
    let path = display_path(&report.bundle).display().to_string();
    let path = crate::plan::render::sh_quote(&path);
    let program = program_name();
    match report.status {
        crate::bundle::BundleStatus::Complete => format!("{program} report {path}"),
        _ => format!("{program} resume {path}"),
    }
}

/// How to run this binary again from the same shell: the name it was started by when that was
/// looked up on PATH (`hwr-exp`), `hwr-exp` when that name on PATH is this same file; otherwise the path it was started
/// by, shell-quoted (`target/release/hwr-exp` after `cargo run --release`, where `hwr-exp` alone
/// would not be found).
fn program_name() -> String {
    let Some(argv0) = std::env::args_os().next() else {
        return "hwr-exp".into();
    };
    let argv0 = std::path::PathBuf::from(argv0);
    if argv0.components().count() <= 1 {
        // Started by a name looked up on PATH: that name (`hx` for a link named so).
        return crate::plan::render::sh_quote(&argv0.display().to_string());
    }
    let this = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("hwr-exp"))
            .find(|p| p.is_file())
    });
    if let (Some(this), Some(found)) = (&this, on_path)
        && std::fs::canonicalize(found).ok().as_ref() == Some(this)
    {
        return "hwr-exp".into();
    }
    let shown = display_path(&argv0);
    let shown = if shown.components().count() <= 1 {
        Path::new(".").join(shown)
    } else {
        shown
    };
    crate::plan::render::sh_quote(&shown.display().to_string())
}

/// The closing list of a session's runs that are not ok, on stderr, one entry per reason (runs
/// that failed alike are one entry with a count): the reason, the runs, and the last lines of the
/// first run's stderr.log (left out when they are just the line the reason already quotes); then
/// how many runs of other reasons there are and the command that shows all of them.
fn print_failures(report: &SessionReport) {
    let failures = &report.failures;
    if failures.is_empty() {
        return;
    }
    to_stderr(format_args!(
        "runs that are not ok (reason, then the last lines of stderr.log):"
    ));
    let groups = failures.groups();
    for g in groups.iter().take(progress::LISTED_FAILURES) {
        let f = &g.first;
        if g.count == 1 {
            to_stderr(format_args!("  {}: {}", f.run_id, f.reason));
        } else {
            to_stderr(format_args!("  {} runs: {}", g.count, f.reason));
            to_stderr(format_args!("    runs: {}", g.named_runs()));
        }
        let only_the_quoted_line = f.stderr_tail.len() == 1 && f.reason.ends_with(f.stderr_tail[0].as_str());
        if !only_the_quoted_line {
            if g.count > 1 && !f.stderr_tail.is_empty() {
                to_stderr(format_args!("    stderr.log of {}:", f.run_id));
            }
            for line in &f.stderr_tail {
                to_stderr(format_args!("    | {line}"));
            }
        }
    }
    let more: usize = groups
        .iter()
        .skip(progress::LISTED_FAILURES)
        .map(|g| g.count)
        .sum::<usize>()
        + failures.unlisted;
    if more > 0 {
        to_stderr(format_args!(
            "  ... and {} with other reasons; all of them: hwr-exp report {} --stderr",
            progress::runs(more),
            display_path(&report.bundle).display()
        ));
    }
}

/// `run --detach`: the bundle path on stdout, the job ids on stderr; exit 0.
pub fn detached(report: &SessionReport) -> i32 {
    let jobs: Vec<String> = report.slurm_jobs.iter().map(u64::to_string).collect();
    let as_jobs = if jobs.is_empty() {
        "no slurm job yet".to_owned()
    } else {
        format!("slurm job(s) {}", jobs.join(", "))
    };
    let submitted = if report.slurm_unsubmitted == 0 {
        format!("submitted {} runs as {as_jobs}", report.planned)
    } else {
        format!(
            "submitted {} of {} runs as {as_jobs} ({} wait for room under the cluster's limits; `hwr-exp wait` submits them)",
            report.planned.saturating_sub(report.slurm_unsubmitted),
            report.planned,
            report.slurm_unsubmitted
        )
    };
    to_stderr(format_args!(
        "{submitted}; `hwr-exp wait {}` to attach, `hwr-exp cancel` to stop",
        display_path(&report.bundle).display()
    ));
    // A closed stdout (`| true`) is no reason to fail a submission that succeeded.
    let _ = writeln!(io::stdout().lock(), "{}", display_path(&report.bundle).display());
    exit_codes::SUCCESS
}

/// `hwr-exp cancel BUNDLE`: what was cancelled, on stderr.
pub fn cancelled(bundle: &Path, cancelled: &Cancelled) {
    let text = match cancelled {
        Cancelled::ByWaiter => "cancelled; the waiting hwr-exp marks the bundle interrupted".to_string(),
        Cancelled::Marked => "cancelled; bundle marked interrupted".to_string(),
        Cancelled::AlreadyFinished(status) => format!("bundle already {status}; its arrays were cancelled"),
    };
    to_stderr(format_args!("{}: {text}", bundle.display()));
}

/// `hwr-exp check`: the line of a manifest that would run, on stdout.
///
/// # Errors
/// As [`to_stdout`].
pub fn checked(path: &Path, plan: &Plan) -> Result<i32, Failure> {
    let runs = match plan.len() {
        1 => "1 run".to_string(),
        n => format!("{n} runs"),
    };
    to_stdout(|out| match plan.adaptive_text() {
        Some(text) => writeln!(out, "ok: {} ({runs}; {text})", path.display()),
        None => writeln!(out, "ok: {} ({runs})", path.display()),
    })
}

/// `check`'s statement of the verdict metric in force (`[report] verdict-metric`, DESIGN 9):
/// `verdict metric: anonymous (anonymous bytes, growth and rate; the default: [report]
/// verdict-metric picks another)`.
///
/// # Errors
/// As [`to_stdout`].
pub fn verdict_metric(report: &crate::manifest::ReportConfig) -> Result<i32, Failure> {
    let name = report.verdict_metric();
    let pointers: Vec<String> = report.metrics.iter().map(|(n, _)| n.clone()).collect();
    let what = crate::report::metrics::VerdictMetric::parse(name, &pointers)
        .map_or_else(|| name.to_string(), |m| m.text());
    let source = if report.verdict_metric.is_some() {
        "[report] verdict-metric"
    } else {
        "the default; [report] verdict-metric picks another"
    };
    to_stdout(|out| writeln!(out, "verdict metric: {name} ({what}; {source})"))
}

/// `hwr-exp plan --format table|json|shell`: the plan on stdout (`sbatch` is written by the
/// caller: it needs no expanded plan).
///
/// # Errors
/// As [`to_stdout`].
pub fn plan(plan: &Plan, format: PlanFormat) -> Result<i32, Failure> {
    to_stdout(|out| match format {
        PlanFormat::Table => render::table(plan, out),
        PlanFormat::Json => crate::bundle::plan_file::write_plan_json(plan, &mut *out),
        PlanFormat::Shell => plan
            .runs()
            .try_for_each(|r| writeln!(out, "{}", render::shell_line(plan, &r))),
        PlanFormat::Sbatch | PlanFormat::K8s => Ok(()),
    })
}

/// `hwr-exp list`: a warning on stderr per folder skipped, the bundles on stdout.
///
/// # Errors
/// As [`to_stdout`].
pub fn list(entries: &[ListEntry], problems: &[ListProblem], format: ListFormat) -> Result<i32, Failure> {
    for p in problems {
        to_stderr(format_args!(
            "warning: skipped {}: {}",
            p.bundle.display(),
            p.message
        ));
    }
    to_stdout(|out| match format {
        ListFormat::Table => list::write_table(entries, out),
        ListFormat::Json => list::write_json(entries, out),
    })
}

/// `hwr-exp verify BUNDLE`: notes on stderr, `ok` or the problems on stdout; exit 0 when intact,
/// 1 with problems.
///
/// # Errors
/// As [`to_stdout`].
pub fn verification(bundle: &Path, v: &Verification) -> Result<i32, Failure> {
    for note in &v.notes {
        to_stderr(format_args!("note: {note}"));
    }
    if v.problems.is_empty() {
        to_stdout(|out| {
            writeln!(
                out,
                "ok: {} ({} files match their recorded sha256)",
                bundle.display(),
                v.files_hashed
            )
        })?;
        Ok(exit_codes::SUCCESS)
    } else {
        to_stdout(|out| {
            writeln!(out, "{}: {} problem(s):", bundle.display(), v.problems.len())?;
            v.problems.iter().try_for_each(|p| writeln!(out, "  {p}"))
        })?;
        Ok(exit_codes::RUN_FAILED)
    }
}

/// `hwr-exp rerun`: its notes and what differs from the archived bundle, on stderr, before the
/// first run.
pub fn rerun_header(rerun: &PreparedRerun) {
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
}

/// `hwr-exp bisect`: the evidence table, then the first bad commit (exit 0) or why there is none
/// (exit 1), on stdout; interrupted: 130.
///
/// # Errors
/// As [`to_stdout`].
pub fn bisected(outcome: &crate::archive::bisect::BisectOutcome) -> Result<i32, Failure> {
    use crate::archive::bisect::{evidence_table, short};
    to_stdout(|out| {
        writeln!(
            out,
            "bisect {}: good {}, bad {} (both taken as given, not run, as git bisect does), {} commit{} after good; {} probed",
            outcome.session,
            short(&outcome.good),
            short(&outcome.bad),
            outcome.candidates.len(),
            if outcome.candidates.len() == 1 { "" } else { "s" },
            outcome.probes.len()
        )?;
        if !outcome.probes.is_empty() {
            writeln!(out, "{}", evidence_table(outcome))?;
        } else if outcome.first_bad.is_some() {
            writeln!(
                out,
                "no commit was probed: --bad {} follows --good {} directly, so the answer rests only \
                 on both being what they were said to be; bisect from an older --good to measure",
                short(&outcome.bad),
                short(&outcome.good)
            )?;
        }
        if outcome.interrupted {
            writeln!(out, "interrupted: no first bad commit named")
        } else if let Some((commit, subject)) = &outcome.first_bad {
            writeln!(out, "first bad commit: {commit} {subject}")
        } else {
            writeln!(
                out,
                "not decidable: {}",
                outcome
                    .undecided
                    .as_deref()
                    .unwrap_or("no commit could be judged")
            )
        }
    })?;
    Ok(if outcome.interrupted {
        exit_codes::INTERRUPTED
    } else if outcome.first_bad.is_some() {
        exit_codes::SUCCESS
    } else {
        exit_codes::RUN_FAILED
    })
}

/// `hwr-exp probe safetensors-retention`: the JSON document on stdout (pretty, flushed), then its
/// problem, if any, as an error on stderr. `context` names the command in messages.
///
/// # Errors
/// A write error of any kind (a closed stdout included: the document is the probe's result), as
/// exit 1 `<context>: cannot write the document`.
pub fn probe_document(document: &RetentionDocument, context: &str) -> Result<(), Failure> {
    let written = serde_json::to_string_pretty(document)
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
    Ok(())
}

/// `hwr-exp completions` and `hwr-exp man`: the generated text on stdout; an unknown subcommand
/// name is a usage error (exit 2), a closed stdout is success.
///
/// # Errors
/// The refusal of `write` (exit 2), or as [`to_stdout`].
pub fn cli_docs(
    write: impl FnOnce(&mut dyn Write) -> Result<(), crate::cli_docs::CliDocsError>,
) -> Result<i32, Failure> {
    let mut refused = None;
    let code = to_stdout(|out| match write(out) {
        Ok(()) => Ok(()),
        Err(crate::cli_docs::CliDocsError::Io(e)) => Err(e),
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

/// Columns assumed when stdout is not a terminal and `COLUMNS` is unset.
pub const DEFAULT_WIDTH: usize = 100;

/// The width terminal tables must fit, in columns: `None` with `--wide`; else `COLUMNS` when it
/// is a positive number (as clap and most tools read it), else the width of the terminal on
/// stdout (`terminal_size`, TIOCGWINSZ), else [`DEFAULT_WIDTH`].
pub fn table_width(wide: bool) -> Option<usize> {
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

/// `path` relative to the current directory when it lies below it, else as is.
pub fn display_path(path: &Path) -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
}
