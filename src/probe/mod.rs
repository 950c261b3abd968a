//! Built-in probes (DESIGN 7).
//!
//! `hwr-exp probe safetensors-retention` ([`measure`]) is the Rust port of the memory-retention
//! diagnostic: it writes a synthetic f32 tensor to a safetensors file, maps it, materializes (or
//! views, or reuses) the tensor many times and samples `/proc/self/smaps_rollup` at each phase.
//!
//! The pieces are public so that the benchmark (`benches/probe.rs`) times the very loop the probe
//! runs: [`Fixture`] (the file and its mapping), [`Workload`] (one mode's iteration),
//! [`Sampler`] (one memory sample) and [`Report`] (the JSON document).

pub mod report;
pub mod retention;

pub use report::{Arguments, Phase, Report, RuntimeFacts, Sample, Sampler, fd_count};
pub use retention::{
    Fixture, Mode, ProbeError, RetentionOptions, SMAPS_PATH_ENV, TENSOR_NAME, Workload, materialize, measure,
};
