//! hwr-exp entry point: parse the command line, run one command, print its error once, exit with its
//! documented code (docs/DESIGN.md 6).
//!
//! `hwr-exp run` reads as the pipeline: parse -> validate -> plan -> execute -> record; `report` and
//! `compare` analyse what was recorded; the other subcommands are short paths through the same stages.
//! This file dispatches: it builds each command's options from the command line, calls the
//! library and maps errors to exit codes. Library code returns data (reports, notes, differences,
//! errors); [`hwr_exp::ui`] prints it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use hwr_exp::archive::{self, ArchiveError};
use hwr_exp::cli::{
    BisectArgs, CancelArgs, CheckArgs, Cli, Command, CompareArgs, ListArgs, PlanArgs, PlanFormat,
    ProbeCommand, RerunArgs, ResumeArgs, RetentionArgs, RunArgs, SelectArgs, TaskArgs, VerifyArgs, WaitArgs,
};
use hwr_exp::exec::ProcessLauncher;
use hwr_exp::exit_codes::{self, Failure};
use hwr_exp::manifest;
use hwr_exp::plan::select;
use hwr_exp::runner::backend::Backend;
use hwr_exp::runner::session::{self, RunOptions, SessionError};
use hwr_exp::signal::{self, SecondSignal, Signals};
use hwr_exp::ui::{self, display_path, print_error, table_width};
use hwr_exp::{probe, report};

fn main() -> ExitCode {
    // Started as the runner's spawner (exec/spawner.rs): serves and exits, never returns.
    hwr_exp::exec::spawner::serve_if_asked();
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
        Command::Schema => ui::schema(&manifest::schema())?,
        Command::Probe(ProbeCommand::SafetensorsRetention(args)) => probe_retention(&args)?,
        Command::Report(args) => {
            let options = report::ReportOptions {
                bundle: bundle_named(&args.bundle)?,
                format: args.format,
                plot: args.plot,
                width: table_width(args.wide),
                stderr: args.stderr,
                control: args.control,
            };
            let prepared = report::prepare(&options).map_err(Failure::usage)?;
            let code = ui::report(&prepared)?;
            // `--fail-on`: the answer as the exit status (DESIGN 6), after the report.
            let matches = report::contrasts::fail_on(prepared.report(), &args.fail_on);
            for m in &matches {
                ui::to_stderr(format_args!("{m}"));
            }
            if code == exit_codes::SUCCESS && !matches.is_empty() {
                exit_codes::RUN_FAILED
            } else {
                code
            }
        }
        Command::Compare(CompareArgs { a, b, format, wide }) => {
            let options = report::CompareOptions {
                a: bundle_named(&a)?,
                b: bundle_named(&b)?,
                format,
                width: table_width(wide),
            };
            let text = report::compare_to_string(&options).map_err(Failure::usage)?;
            ui::text(&text)?
        }
        Command::List(args) => list(&args)?,
        Command::Verify(args) => verify(&args)?,
        Command::Rerun(args) => rerun(&args)?,
        Command::Resume(args) => resume(&args)?,
        Command::Bisect(args) => bisect(&args)?,
        Command::Completions(args) => ui::cli_docs(|out| hwr_exp::cli_docs::completions(args.shell, out))?,
        Command::Man(args) => ui::cli_docs(|out| hwr_exp::cli_docs::man_page(&args.command, out))?,
        Command::Wait(args) => wait(&args)?,
        Command::Cancel(args) => cancel(&args)?,
        Command::SlurmTask(args) => indexed_task(&args.bundle, args.index)?,
        Command::Task(args) => task(&args)?,
    };
    Ok(exit_codes::status(code))
}

/// `hwr-exp run MANIFEST [--results-dir DIR]`: the bundle goes under `DIR` (default `results/` in
/// the current directory).
fn run_manifest(args: &RunArgs) -> Result<i32, Failure> {
    let mut manifest = manifest::load(&args.manifest).map_err(Failure::usage)?;
    ui::manifest_warnings(&manifest);
    if let Some(kind) = args.executor {
        executor_override(&mut manifest, kind);
    }
    if args.detach && !Backend::of(manifest.executor.kind).detaches() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--detach needs the slurm executor (`[executor] kind = \"slurm\"` or `--executor slurm`)"
        )));
    }
    if args.fail_fast && Backend::of(manifest.executor.kind) != Backend::Local {
        return Err(Failure::usage(anyhow::anyhow!(
            "--fail-fast needs the local executor: the {} executor submits every run at once",
            manifest.executor.kind.as_str()
        )));
    }
    let selection = selection(&args.select);
    let control_warning = select::control_left_out(&manifest, &selection);
    select::apply(&mut manifest, &selection).map_err(Failure::usage)?;
    // A selection without the control: that warning says it all (no verdicts at all).
    match control_warning {
        Some(w) => ui::to_stderr(format_args!("warning: {w}")),
        None => warn_too_few_runs_before_running(&manifest),
    }
    let signals = interrupt_handlers(SecondSignal::Exit(exit_codes::INTERRUPTED))?;
    let opts = RunOptions {
        results_dir: results_dir(args.results_dir.as_deref()),
        quiet: args.quiet,
        detach: args.detach,
        overrides: hwr_exp::bundle::Overrides::of(&selection, args.fail_fast),
        ..RunOptions::default()
    };
    let report = hwr_exp::runner::experiment::run_manifest(
        &manifest,
        &opts,
        &ProcessLauncher::new(),
        signals.cancel_flag(),
    )
    .map_err(session_failure)?;
    if args.detach {
        return Ok(ui::detached(&report));
    }
    Ok(ui::finished(&report, args.quiet))
}

/// `run --executor KIND`: the manifest's `[executor] kind` replaced (problems the kind causes then
/// name the option), with a warning for the `[executor]` keys of the other kind that it leaves
/// without effect (the slurm keys under `--executor local`).
fn executor_override(manifest: &mut manifest::Manifest, kind: hwr_exp::choices::ExecutorKind) {
    if manifest.executor.kind == kind {
        return;
    }
    let option = format!("--executor {}", kind.as_str());
    if kind == hwr_exp::choices::ExecutorKind::Local {
        let unused: Vec<(String, std::ops::Range<usize>)> = manifest
            .spans
            .iter()
            .filter_map(|(k, span)| {
                let key = k.strip_prefix("executor.")?;
                (key != "kind" && !key.contains('.')).then(|| (key.to_string(), span.clone()))
            })
            .collect();
        for (key, span) in unused {
            let mut d = manifest::Diagnostics::single(
                manifest.path.display().to_string(),
                manifest.source.clone(),
                span,
                format!(
                    "{option}: [executor] {key} has no effect: it applies only to the {} executor",
                    manifest.executor.kind.as_str()
                ),
                Some(format!(
                    "leave out --executor local to run on {}",
                    manifest.executor.kind.as_str()
                )),
            );
            d.items[0].level = manifest::Level::Warning;
            ui::to_stderr(format_args!("{}", d.to_string().trim_end()));
        }
    }
    manifest.executor.kind = kind;
    manifest.overridden.insert("executor.kind".into(), option);
}

/// `hwr-exp wait BUNDLE`: attach to a detached Slurm bundle, then as `run`.
fn wait(args: &WaitArgs) -> Result<i32, Failure> {
    let signals = interrupt_handlers(SecondSignal::Exit(exit_codes::INTERRUPTED))?;
    let report = archive::engines::of_dir(&args.bundle)
        .and_then(|engine| engine.wait(&args.bundle, args.quiet, signals.cancel_flag()))
        .map_err(archive_failure)?;
    Ok(ui::finished(&report, args.quiet))
}

/// `hwr-exp cancel BUNDLE`: cancel its Slurm arrays; the bundle ends interrupted.
fn cancel(args: &CancelArgs) -> Result<i32, Failure> {
    let cancelled = archive::engines::of_dir(&args.bundle)
        .and_then(|engine| engine.cancel(&args.bundle))
        .map_err(archive_failure)?;
    ui::cancelled(&args.bundle, &cancelled);
    Ok(exit_codes::SUCCESS)
}

/// `hwr-exp task [--index I] BUNDLE` (hidden; what every batch engine starts on a node): the
/// index from `--index`, `HWR_TASK_INDEX` or `JOB_COMPLETION_INDEX`, then as [`indexed_task`].
fn task(args: &TaskArgs) -> Result<i32, Failure> {
    let index =
        hwr_exp::runner::task::task_index(args.index, |v| std::env::var(v).ok()).map_err(Failure::usage)?;
    indexed_task(&args.bundle, index)
}

/// Task `index` of the bundle on this node, through the engine the bundle records (`hwr-exp
/// slurm-task BUNDLE INDEX`, run by each Slurm array task, and `hwr-exp task`): exit 0 when
/// run.json was written or was already there, 130 when stopped (scancel, time limit, a cancelled
/// Ray task) before the run finished.
fn indexed_task(bundle: &Path, index: usize) -> Result<i32, Failure> {
    let signals = interrupt_handlers(SecondSignal::SetFlag)?;
    let end = archive::engines::task(bundle, index, &ProcessLauncher::new(), signals.cancel_flag())
        .map_err(archive_failure)?;
    Ok(match end {
        hwr_exp::runner::backend::slurm::task::TaskEnd::Stopped
        | hwr_exp::runner::backend::slurm::task::TaskEnd::Requeued => exit_codes::INTERRUPTED,
        _ => exit_codes::SUCCESS,
    })
}

/// `hwr-exp check MANIFEST...`: every problem of every manifest, exit 2 when any.
fn check(args: &CheckArgs) -> Result<i32, Failure> {
    let mut code = exit_codes::SUCCESS;
    for path in &args.manifests {
        let manifest = match manifest::load(path) {
            Ok(m) => {
                ui::manifest_warnings(&m);
                m
            }
            Err(diagnostics) => {
                print_error(&diagnostics.into());
                code = code.max(exit_codes::USAGE);
                continue;
            }
        };
        let ctx = session::plan_context(Path::new("<bundle>")).map_err(session_failure)?;
        match hwr_exp::runner::planning::expand(&manifest, &ctx) {
            Ok(plan) => {
                warn_too_few_runs(&manifest, &plan);
                match hwr_exp::runner::planning::missing_here(&manifest, &plan) {
                    Ok(()) => {
                        ui::checked(path, &plan)?;
                        ui::verdict_metric(&manifest.report)?;
                    }
                    Err(e) => {
                        let failure = session_failure(e);
                        print_error(failure.error());
                        code = code.max(failure.code());
                    }
                }
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

/// Prints a warning on stderr when the plan can give only `too few runs` against the control,
/// and when no contrast can be decided. Counted from the matrix's structure (a full product's
/// axes), else from its cells once each: never from the runs.
fn warn_too_few_runs(manifest: &manifest::Manifest, plan: &hwr_exp::plan::Plan) {
    use report::plan_check::{PlanCells, plan_warnings};
    let cells = match plan.product_axes() {
        Some(axes) => PlanCells::Product(axes),
        None => PlanCells::Listed(Box::new((0..plan.cell_count()).map(|c| plan.cell(c)))),
    };
    // Adaptive repetitions: what the most rounds could give.
    for w in plan_warnings(&manifest.report, cells, plan.runs_per_cell()) {
        // Repetitions given on the command line: the fix is there, not in the manifest.
        let given = manifest
            .option_for("schedule.repetitions")
            .map(|o| format!(" (planned with {o} from the command line)"))
            .unwrap_or_default();
        ui::to_stderr(format_args!("warning: {}: {w}{given}", manifest.path.display()));
    }
}

/// Most planned runs for which `run` checks, before its first run, whether every verdict will be
/// `too few runs` (the check walks every run; `check` and `plan` make it whatever the size).
const RUN_WARNING_MAX_RUNS: usize = 100_000;

/// `run`: the warning of `check` and `plan` when the plan can give only `too few runs` against
/// the control, before the first run (a plan it cannot expand is left to the run to report).
fn warn_too_few_runs_before_running(manifest: &manifest::Manifest) {
    let plan = session::plan_context(Path::new("<bundle>"))
        .and_then(|ctx| hwr_exp::runner::planning::expand(manifest, &ctx));
    if let Ok(plan) = plan
        && plan.len() <= RUN_WARNING_MAX_RUNS
    {
        warn_too_few_runs(manifest, &plan);
    }
}

/// `hwr-exp plan MANIFEST [--format table|json|shell]`.
fn plan(args: &PlanArgs) -> Result<i32, Failure> {
    let mut manifest = manifest::load(&args.manifest).map_err(Failure::usage)?;
    ui::manifest_warnings(&manifest);
    let control_warning = select::control_left_out(&manifest, &selection(&args.select));
    select::apply(&mut manifest, &selection(&args.select)).map_err(Failure::usage)?;
    let control_left_out = control_warning.is_some();
    if let Some(w) = control_warning {
        ui::to_stderr(format_args!("warning: {w}"));
    }
    if args.format == PlanFormat::Sbatch {
        manifest.executor.kind = Backend::Slurm.kind();
        let text = hwr_exp::runner::backend::slurm::arrays::plan_scripts(
            &manifest,
            &results_dir(args.results_dir.as_deref()),
        )
        .map_err(session_failure)?;
        return ui::text(&text);
    }
    if args.format == PlanFormat::K8s {
        manifest.executor.kind = Backend::Kubernetes.kind();
        let text = hwr_exp::runner::backend::kubernetes::plan_job(
            &manifest,
            &results_dir(args.results_dir.as_deref()),
        )
        .map_err(session_failure)?;
        return ui::text(&text);
    }
    let plan = session::plan_context(Path::new("<bundle>"))
        .and_then(|ctx| hwr_exp::runner::planning::expand(&manifest, &ctx))
        .map_err(session_failure)?;
    if !control_left_out {
        warn_too_few_runs(&manifest, &plan);
    }
    ui::plan(&plan, args.format)
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
    ui::probe_document(&document, context)?;
    Ok(code)
}

/// The plan selection of `--where` / `--repetitions` ([`select::apply`] checks it against a
/// manifest).
fn selection(args: &SelectArgs) -> select::Selection {
    select::Selection {
        filters: args
            .where_
            .iter()
            .map(|(key, value)| select::Filter {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        repetitions: args.repetitions,
    }
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

/// The bundle folder a command-line name stands for ([`archive::locate`]: the folder itself, an
/// experiment or results folder's newest bundle, `latest`, `latest~N`); which one, on stderr
/// when the name was a shorter one.
fn bundle_named(name: &Path) -> Result<PathBuf, Failure> {
    let located = archive::locate::locate(name, &results_dir(None)).map_err(archive_failure)?;
    if let Some(note) = &located.note {
        ui::to_stderr(format_args!("note: {note}"));
    }
    Ok(located.bundle)
}

/// `hwr-exp list [DIR] [--format table|json]`.
fn list(args: &ListArgs) -> Result<i32, Failure> {
    let dir = results_dir(args.dir.as_deref());
    // The default folder before any run: no bundles yet, said as such (a folder given by name
    // that does not exist stays an error).
    if args.dir.is_none() && !dir.exists() {
        ui::to_stderr(format_args!(
            "no bundles yet: {} does not exist (`hwr-exp run MANIFEST` writes bundles there; `hwr-exp list DIR` lists another folder)",
            std::path::absolute(&dir).unwrap_or(dir.clone()).display()
        ));
        return ui::list(&[], &[], args.format);
    }
    let (entries, problems) = archive::list::scan(&dir).map_err(archive_failure)?;
    ui::list(&entries, &problems, args.format)
}

/// `hwr-exp verify BUNDLE`: 0 when intact, 1 with the list of problems.
fn verify(args: &VerifyArgs) -> Result<i32, Failure> {
    let bundle = bundle_named(&args.bundle)?;
    let v = archive::verify::verify(&bundle).map_err(archive_failure)?;
    ui::verification(&bundle, &v)
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
    let rerun = archive::rerun::prepare(&bundle_named(&args.bundle)?, &opts).map_err(archive_failure)?;
    ui::rerun_header(&rerun);
    let report = rerun
        .run(&ProcessLauncher::new(), signals.cancel_flag())
        .map_err(archive_failure)?;
    Ok(ui::finished(&report, args.quiet))
}

/// `hwr-exp resume BUNDLE [--allow-drift]`.
fn resume(args: &ResumeArgs) -> Result<i32, Failure> {
    let signals = interrupt_handlers(SecondSignal::Exit(exit_codes::INTERRUPTED))?;
    let opts = archive::resume::ResumeOptions {
        allow_drift: args.allow_drift,
        quiet: args.quiet,
    };
    let report = archive::resume::resume(
        &bundle_named(&args.bundle)?,
        &opts,
        &ProcessLauncher::new(),
        signals.cancel_flag(),
    )
    .map_err(archive_failure)?;
    Ok(ui::finished(&report, args.quiet))
}

/// `hwr-exp bisect MANIFEST --good REV --bad REV [--where KEY=VALUE]... [--repetitions N]`: exit
/// 0 when the first bad commit is found, 1 when it is not decidable (DESIGN 6), 130 interrupted.
fn bisect(args: &BisectArgs) -> Result<i32, Failure> {
    // Temporary worktrees to remove: signals only ever set the flag so the cleanup always runs.
    let signals = interrupt_handlers(SecondSignal::SetFlag)?;
    let opts = archive::bisect::BisectOptions {
        manifest: args.manifest.clone(),
        good: args.good.clone(),
        bad: args.bad.clone(),
        filters: args.where_.clone(),
        repetitions: args.repetitions,
        results_dir: results_dir(args.results_dir.as_deref()),
        quiet: args.quiet,
    };
    let outcome = archive::bisect::bisect(&opts, &ProcessLauncher::new(), signals.cancel_flag())
        .map_err(archive_failure)?;
    ui::bisected(&outcome)
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT set the cancel flag: the run in flight is stopped as on timeout and the
/// bundle is marked interrupted; `second` says what a signal does once the flag is set.
fn interrupt_handlers(second: SecondSignal) -> Result<Signals, Failure> {
    // A forced exit (a second request) marks the bundle being written `interrupted` first.
    signal::before_forced_exit(hwr_exp::bundle::live::interrupt_live_bundle);
    signal::install(second).map_err(Failure::environment)
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
