//! What the test modules share, each defined once: temporary git repositories isolated from the
//! user's git configuration ([`git`]), manifest text ([`manifest`]), the `hwr-exp` binary and its
//! output ([`cli`]), bundle and fixture files ([`files`]), processes and polling ([`process`]),
//! and the probe documents' common keys ([`probe`]).
//!
//! A test module imports what it uses by name: `use crate::support::{repo, run, code, stderr};`.
//! Nothing here is allowed to be dead code: a helper no test uses any more is deleted.

pub mod cli;
pub mod files;
pub mod git;
pub mod manifest;
pub mod probe;
pub mod process;
pub mod slurm;

pub use cli::{
    bin, code, hwr, hwr_columns, hwr_command, in_terminal, printed_path, rerun_this_test, run, spawn_run,
    stderr, stdout, terminal_lines,
};
pub use files::{
    bundle_fixture, bundles, copy_dir, json, package_root, report_text, run_records, sha256_hex, source_path,
    the_bundle, write_file,
};
pub use git::{Repo, commit_all, git, init_repo, isolate_git, repo};
pub use manifest::{ManifestBuilder, write_manifest};
pub use process::{compile_c, group_members, process_state, wait_for};
pub use slurm::cluster;
