//! hwr-exp's integration tests: one test binary (`cargo test --test integration`), one module per
//! area, linked once against the library and run by one harness. Unit tests stay beside their
//! code in `src/`.
//!
//! # Layout
//!
//! - `support/`: what the modules share, each defined once: temporary git repositories isolated
//!   from the user's git configuration, a manifest builder, the `hwr-exp` binary and its output,
//!   bundle and fixture files, `/proc` process helpers, the probe document's keys.
//! - one module per file, named for what it tests (`run_e2e`, `provenance_git`, ...); test names
//!   are `MODULE::TEST`, so `cargo test --test integration provenance_git::` runs one module.
//! - data stays beside the crate root's folder: `tests/fixtures/` (bundles, smaps_rollup texts),
//!   `tests/manifests/{good,bad}/`, `tests/python/`; insta snapshots live in
//!   `tests/integration/snapshots/`, named `integration__MODULE__TEST.snap`.
//!
//! # Adding tests
//!
//! 1. Write `tests/integration/NAME.rs` (a `//!` line saying what it covers, then `#[test]`s) and
//!    add `mod NAME;` below, in alphabetical order. Do not add `tests/NAME.rs`: every such file is
//!    a separate binary that links the whole crate again (the test at the bottom of this file
//!    fails while one exists).
//! 2. Import shared helpers by name: `use crate::support::{repo, run, code, stderr};`. Before
//!    writing a helper, look in `support/`; a helper a second module needs moves there.
//! 3. Run git through `support::git`/`Repo` and the binary through `support::hwr`/`hwr_command`,
//!    never a bare `Command::new("git")` or `Command::new(bin())`: they isolate git from the
//!    user's configuration.
//! 4. A test that re-runs this binary to get a second process uses `support::rerun_this_test`
//!    with `module_path!()` (test names carry the module).
//! 5. One process runs every test of every module, many at once: a test never changes the
//!    process's umask, working directory, environment variables or signal dispositions. It sets
//!    them in a child process instead: a shell that then `exec`s (`umask 077; exec hwr-exp ...`,
//!    `trap '' USR1; exec ...`), or `rerun_this_test` with `Command::env`.

mod support;

mod adaptive;
mod allocators;
mod architecture;
mod archive_names;
mod archive_rerun;
mod archive_resume;
mod archive_verify;
mod bisect;
mod bundle_checksums;
mod bundle_containment;
mod bundle_files;
mod bundle_lock;
mod check_cli;
mod check_means_runnable;
mod cli_docs;
mod cli_front;
mod cli_pipes;
mod containment_nesting;
mod docs_links;
mod environments;
mod exec_process;
mod experiments_e2e;
mod install;
mod kubernetes_fake;
mod manifest_errors;
mod manifest_good;
mod manifest_mutants;
mod manifest_schema;
mod manifest_values;
mod manifest_warnings;
mod output_json;
mod patch_limit;
mod probe_cli;
mod probe_manifests;
mod probe_python;
mod provenance_bytes;
mod provenance_differential;
mod provenance_git;
mod ray_executor;
mod report_answers;
mod report_contrasts;
mod report_errors;
mod report_estimates;
mod report_fixtures;
mod report_html;
mod report_output;
mod report_plot;
mod report_reader;
mod report_reasons;
mod report_scale;
mod report_summary;
mod report_unusable;
mod report_verdict_metric;
mod report_width;
mod run_containment;
mod run_e2e;
mod run_faults37;
mod run_faults37b;
mod run_measure;
mod run_reasons;
mod run_records;
mod run_settings;
mod run_subsets;
mod run_terminal;
mod runner_faults;
mod schema_validation;
mod slurm_adaptive;
mod slurm_cluster;
mod slurm_e2e;
mod slurm_kills;
mod slurm_limits;
mod slurm_nodes;
mod slurm_scale;
mod slurm_submit;
mod smaps_rollup;
mod stats_fixtures;

/// `tests/` holds one test crate (this one) and data; a stray `tests/*.rs` would be a second
/// test binary that links the crate again and runs outside this harness.
#[test]
fn tests_folder_holds_only_this_test_crate() {
    let tests = support::source_path("tests");
    let mut stray: Vec<String> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            (p.is_file() && p.extension().is_some_and(|e| e == "rs"))
                || (p.is_dir() && p.join("main.rs").is_file() && !p.ends_with("integration"))
        })
        .map(|p| p.display().to_string())
        .collect();
    stray.sort();
    assert!(
        stray.is_empty(),
        "move these into tests/integration/ as modules (see tests/integration/main.rs): {stray:?}"
    );
}
