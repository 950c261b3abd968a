//! hwr-exp: a declarative experiment runner driven by TOML manifests.
//!
//! Pipeline: [`manifest`] (parse, validate) -> [`plan`] (expand) -> [`exec`] (run) ->
//! [`bundle`] (record) -> [`report`] (analyse). [`provenance`] records the repository and host.

pub mod archive;
pub mod bundle;
pub mod cli;
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
