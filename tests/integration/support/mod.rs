//! What the test modules share, each defined once: temporary git repositories isolated from the
//! user's git configuration ([`git`]), manifest text ([`manifest`]), the `hwr-exp` binary and its
//! output ([`cli`]), bundle and fixture files ([`files`]), processes, signals and waiting for
//! what they do ([`process`]), optional tools a test needs ([`need`]: a missing one skips the
//! test with a reason, or fails it under CI), cgroups ([`cgroup`]), the Slurm test cluster
//! ([`slurm`]), and the probe documents' common keys ([`probe`]).
//!
//! Tests wait for events, never for a fixed time: a line the process prints
//! ([`process::Lines`]), a file it writes ([`wait_for_file`]), a state polled with a deadline
//! ([`wait_for`], [`eventually`]), its exit ([`wait_child`], [`output_within`]).
//!
//! A test module imports what it uses by name: `use crate::support::{repo, run, code, stderr};`.
//! Nothing here is allowed to be dead code: a helper no test uses any more is deleted.

pub mod cgroup;
pub mod cli;
pub mod files;
pub mod git;
pub mod manifest;
pub mod need;
pub mod probe;
pub mod process;
pub mod ray;
pub mod slurm;

pub use cgroup::{CallerCgroup, Cgroup, cgroup_of, run_cgroups_of};
pub use cli::{
    bin, code, hwr, hwr_columns, hwr_command, in_terminal, limited, printed_path, rerun_this_test, run,
    spawn_run, stderr, stdout, terminal_lines, wrapped,
};
pub use files::{
    binary_bytes, bundle_fixture, bundles, copy_dir, json, package_root, report_text, run_records,
    sha256_hex, source_path, strip_summary, the_bundle, write_file,
};
pub use git::{Repo, commit_all, git, git_file_protocol, init_repo, isolate_git, repo};
pub use manifest::{ManifestBuilder, write_manifest};
pub use need::{Check, Chromium, Cpus, Program, Python, Requirement, need};
pub use process::{
    KillOnDrop, Lines, Signal, catches, compile_c, cpu_time, eventually, group_exists, group_members,
    holders_of, output_within, poll, process_state, processes_with_env, run_marker, signal, try_signal,
    wait_child, wait_for, wait_for_file, wait_for_value,
};
pub use slurm::cluster;
