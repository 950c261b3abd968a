//! Built-in probes (docs/DESIGN.md 7).
//!
//! `hwr-exp probe safetensors-retention` ([`measure`]) is the Rust port of the memory-retention
//! diagnostic: it writes a synthetic f32 tensor to a safetensors file, maps it, materializes (or
//! views, or reuses) the tensor many times and samples `/proc/self/smaps_rollup` at each phase.
//!
//! The pieces are public so that the benchmark (`benches/probe.rs`) times the very loop the probe
//! runs: [`Fixture`] (the file and its mapping), [`Workload`] (one mode's iteration),
//! [`Sampler`] (one memory sample) and [`RetentionDocument`] (the JSON document).
//!
//! Files import one way: `document` (the JSON types) <- `error` <- `sampler` <- `retention`
//! (fixture, workload and the measurement loop). This file only declares and re-exports them.

pub mod document;
pub mod error;
pub mod retention;
pub mod sampler;

pub use document::{
    Arguments, Mode, Phase, RetentionDocument, RuntimeFacts, SCHEMA_VERSION, Sample, TENSOR_NAME,
};
pub use error::ProbeError;
pub use retention::{Fixture, RetentionOptions, Workload, materialize, measure};
pub use sampler::{SMAPS_PATH_ENV, Sampler, fd_count};

#[cfg(test)]
mod tests {
    /// The files of this folder in import order: each may use only files before it, and none uses
    /// this file (`super::Item`), so the folder has no import loop.
    const FILES: [(&str, &str); 4] = [
        ("document", include_str!("document.rs")),
        ("error", include_str!("error.rs")),
        ("sampler", include_str!("sampler.rs")),
        ("retention", include_str!("retention.rs")),
    ];

    #[test]
    fn files_import_one_way() {
        for (i, (name, text)) in FILES.iter().enumerate() {
            for line in text.lines().filter(|l| l.trim() != "use super::*;") {
                for (_, rest) in line.match_indices("super::").map(|(at, _)| line.split_at(at + 7)) {
                    let target: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let before = FILES[..i].iter().any(|(earlier, _)| *earlier == target);
                    assert!(
                        before,
                        "{name}.rs uses super::{target}, not a file before it: {line}"
                    );
                }
            }
        }
    }
}
