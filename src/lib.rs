//! hwr-exp: a declarative experiment runner driven by TOML manifests.
//!
//! Pipeline: [`manifest`] (parse, validate) -> [`plan`] (expand) -> [`exec`] (run) ->
//! [`bundle`] (record) -> [`report`] (analyse). [`provenance`] records the repository and host.
//!
//! # Layering (DESIGN 10)
//!
//! Dependencies point one way; no module imports a module that imports it back
//! (`tests/integration/architecture.rs` fails on any cycle between the top-level modules). The
//! whole map, each module's job and where the on-disk format and its versions live:
//! `docs/architecture.md`.
//!
//! - leaves, importing no other module: [`exit_codes`], [`signal`], [`cpus`], [`memory`],
//!   [`digest`], [`names`], [`timestamp`], [`terminal`], [`slurm`], [`choices`] (the value enums the command
//!   line and the library share);
//! - [`table`] -> `terminal` (every cell escaped and cut there);
//! - [`cli`] -> `choices` (clap types only);
//! - [`allocator`] -> `digest` (allocator names, the linker cache, `/proc/<pid>/maps` checks);
//! - [`manifest`] -> `cpus` (CPU list syntax only; it reads no host facts);
//! - [`exec`] -> `memory`, `cpus`, `allocator` (takes an [`exec::RunSpec`], nothing from manifest or plan);
//! - [`plan`] -> `manifest`, `cpus`, `allocator` (names), and `exec` for one constant: `plan::render` writes the clean
//!   policy's kept variables ([`exec::CLEAN_KEPT`]) into shell lines;
//! - [`provenance`] -> `cpus`, `digest`, `names`, `timestamp` (data producers: it writes no file);
//! - [`bundle`] -> `manifest`, `plan`, `exec`, `provenance` (value types; it alone writes bundle
//!   files, and builds plan.json from the plan, `bundle::plan_file`);
//! - [`runner`] -> `manifest`, `plan`, `exec`, `provenance`, `bundle` (one session: plan,
//!   preflight, execute, record);
//! - [`report`], [`archive`], [`probe`], [`cli_docs`] and [`ui`] (what `main.rs` prints) sit on
//!   top.

pub mod allocator;
pub mod archive;
pub mod bundle;
pub mod choices;
pub mod cli;
pub mod cli_docs;
pub mod cpus;
pub mod digest;
pub mod exec;
pub mod exit_codes;
pub mod kubernetes;
pub mod manifest;
pub mod memory;
pub mod names;
pub mod plan;
pub mod probe;
pub mod provenance;
pub mod report;
pub mod runner;
pub mod signal;
pub mod slurm;
pub mod stats;
pub mod table;
pub mod terminal;
pub mod timestamp;
pub mod ui;
