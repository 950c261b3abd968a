//! hwr-exp: a declarative experiment runner driven by TOML manifests.
//!
//! Pipeline: [`manifest`] (parse, validate) -> [`plan`] (expand) -> [`exec`] (run) ->
//! [`bundle`] (record) -> [`report`] (analyse). [`provenance`] records the repository and host.
//!
//! # Layering (DESIGN 10)
//!
//! Dependencies point one way; no module imports a module that imports it back
//! (`tests/architecture.rs` fails on any cycle between the top-level modules):
//!
//! - leaves, importing no other module: [`exit_codes`], [`memory`], [`cpus`];
//! - [`manifest`] -> `cpus` (CPU list syntax only; it reads no host facts);
//! - [`exec`] -> `memory`, `cpus` (takes an [`exec::RunSpec`], nothing from manifest or plan);
//! - [`plan`] -> `manifest`, `cpus`, and `exec` for one constant: `plan::render` writes the clean
//!   policy's kept variables ([`exec::CLEAN_KEPT`]) into shell lines;
//! - [`bundle`] -> `manifest`, `plan`, `exec`, `provenance` (value types; it builds plan.json
//!   from the plan, `bundle::plan_file`);
//! - [`runner`] -> `manifest`, `plan`, `exec`, `provenance`, `bundle` (one session: plan,
//!   preflight, execute, record);
//! - [`report`], [`archive`], [`probe`] and [`cli`] sit on top.

pub mod archive;
pub mod bundle;
pub mod cli;
pub mod cli_docs;
pub mod cpus;
pub mod digest;
pub mod exec;
pub mod exit_codes;
pub mod manifest;
pub mod memory;
pub mod plan;
pub mod probe;
pub mod provenance;
pub mod report;
pub mod runner;
pub mod signal;
pub mod slurm;
pub mod table;
pub mod timestamp;
