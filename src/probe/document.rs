//! The probe's JSON document ([`RetentionDocument`]) and the types in it: the flags
//! ([`Arguments`], [`Mode`]), the memory samples ([`Sample`], [`Phase`]) and the binary's
//! [`RuntimeFacts`].
//!
//! Keys follow the original Python diagnostic (snake_case, `schema_version` 1; docs/DESIGN.md 7).
//! Memory values are bytes, times are seconds. A smaps_rollup field the kernel does not print
//! (`Pss_Anon` before Linux 5.1, for example) is left out of the sample, never written as 0.
//! Data only: this file imports no other file of the probe.

use serde::{Deserialize, Serialize};

use crate::provenance::host::glibc_version;

/// `schema_version` of the probe's JSON document.
pub const SCHEMA_VERSION: u32 = 1;

/// Name of the tensor in the synthetic safetensors file.
pub const TENSOR_NAME: &str = "weight";

/// What one loop iteration does with the tensor; shared with `--mode`.
pub use crate::choices::ProbeMode as Mode;

/// When a sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the safetensors file is written.
    BeforeFile,
    /// After the file is mapped, the first read checked and the warm-up done; no loop iteration yet.
    Baseline,
    /// Every `sample_every` loop iterations (and once more at the last iteration when `iterations`
    /// is not a multiple of `sample_every`).
    Loop,
    /// After the mapping, the file (the reader), every view and every owned copy are dropped.
    Closed,
}

/// One memory sample. Byte counts come from `/proc/self/smaps_rollup`, `fd_count` from
/// `/proc/self/fd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The phase the sample belongs to.
    pub phase: Phase,
    /// Loop iterations done when the sample was taken (warm-up not counted; 0 before the loop).
    pub iterations: u64,
    /// Seconds spent in loop iterations so far, sampling excluded (0 before the loop).
    pub loop_seconds: f64,
    /// `Rss`: resident set size in bytes, file-backed pages included.
    pub rss_bytes: u64,
    /// `Private_Clean + Private_Dirty` in bytes.
    pub private_bytes: u64,
    /// `Anonymous` in bytes.
    pub anonymous_bytes: u64,
    /// `Pss` in bytes; absent when the kernel does not print it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pss_bytes: Option<u64>,
    /// `Pss_Anon` in bytes (Linux 5.1+); absent when the kernel does not print it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pss_anon_bytes: Option<u64>,
    /// `Swap` in bytes; absent when the kernel does not print it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_bytes: Option<u64>,
    /// Open file descriptors of the process, not counting the one used to list `/proc/self/fd`.
    pub fd_count: u64,
}

/// The flags the probe ran with (`arguments` in the JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arguments {
    /// `--mode`.
    pub mode: Mode,
    /// `--tensor-elements`: f32 elements of the tensor `weight`.
    pub tensor_elements: u64,
    /// `--iterations`: loop iterations asked for.
    pub iterations: u64,
    /// `--sample-every`: loop iterations between `loop` samples.
    pub sample_every: u64,
    /// `--warmup`: iterations run before the `baseline` sample.
    pub warmup: u64,
}

/// Facts about the probe binary, fixed at build time or read from the C library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeFacts {
    /// hwr-exp's package version (`CARGO_PKG_VERSION`).
    pub probe_version: String,
    /// The `safetensors` crate version resolved in Cargo.lock at build time.
    pub safetensors_version: String,
    /// `rustc --version` of the compiler that built the probe.
    pub rust_version: String,
    /// The global allocator: the probe sets none, so Rust's `System` allocator, i.e. the C
    /// library's malloc: `"system malloc (glibc 2.36)"`.
    pub allocator: String,
    /// `gnu_get_libc_version()`; absent on non-glibc targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glibc_version: Option<String>,
    /// `debug` or `release`: a debug build's loop is many times slower.
    pub build_profile: String,
}

impl RuntimeFacts {
    /// Collects the facts of this binary.
    pub fn collect() -> RuntimeFacts {
        let glibc_version = glibc_version();
        let allocator = match &glibc_version {
            Some(v) => format!("system malloc (glibc {v})"),
            None => "system malloc".to_owned(),
        };
        RuntimeFacts {
            probe_version: env!("CARGO_PKG_VERSION").to_owned(),
            safetensors_version: option_env!("HWR_BUILD_SAFETENSORS_VERSION")
                .unwrap_or("unknown")
                .to_owned(),
            rust_version: option_env!("HWR_BUILD_RUSTC_VERSION")
                .unwrap_or("unknown")
                .to_owned(),
            allocator,
            glibc_version,
            build_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_owned(),
        }
    }
}

/// The probe's JSON document, printed once on stdout (also when stopped by SIGTERM, then with
/// `completed: false`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionDocument {
    /// Always [`SCHEMA_VERSION`] (1).
    pub schema_version: u32,
    /// `"safetensors-retention"`.
    pub probe: String,
    /// The flags.
    pub arguments: Arguments,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Host name (`uname -n`).
    pub hostname: String,
    /// Process id of the probe.
    pub pid: u32,
    /// CPUs the probe may run on (`sched_getaffinity`), ascending.
    pub cpu_affinity: Vec<usize>,
    /// Binary and library versions.
    #[serde(flatten)]
    pub runtime: RuntimeFacts,
    /// Size of the safetensors file in bytes (header included).
    pub file_bytes: u64,
    /// Whether the first read of `weight` equalled `0..tensor_elements`.
    pub first_read_ok: bool,
    /// Seconds to write, map and first-read the file (after `before_file`, before warm-up).
    pub preparation_seconds: f64,
    /// Seconds of the warm-up iterations.
    pub warmup_seconds: f64,
    /// The samples in the order taken: `before_file`, `baseline`, `loop`..., `closed`.
    pub samples: Vec<Sample>,
    /// Loop iterations done (equals `arguments.iterations` when `completed`).
    pub iterations_completed: u64,
    /// Wrapping sum over warm-up and loop iterations of the element read in that iteration (the
    /// element at index `k mod tensor_elements` in iteration `k`, as an integer); keeps the work
    /// observable.
    pub checksum: u64,
    /// Whether a materialized tensor was still held when `closed` was sampled (never, here).
    pub last_tensor_alive: bool,
    /// True when every phase ran; false when the probe was stopped by a signal.
    pub completed: bool,
    /// The signal that stopped the probe (`"SIGTERM"`, `"SIGINT"`); absent when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Per-mapping breakdowns of the probe's own process at its baseline, last loop and closed
    /// phases (`/proc/self/smaps`); absent where smaps cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mappings: Option<MappingBreakdowns>,
}

/// The probe's per-mapping breakdowns (`mappings` in the JSON): `/proc/self/smaps` folded into
/// the rows the runner's mappings.json uses (`crate::memory::Mappings`: heap, stack, the
/// anonymous sum, each mapped file such as the safetensors file, each shared memory object,
/// other named mappings; per row private-dirty, private-clean, file-backed, anon-huge-pages and
/// more, bytes). Each is one read outside the timed loop (`loop_seconds` never includes it):
/// `baseline` just before the baseline sample, `last_loop` just after the last loop sample,
/// `closed` just after the closed sample, so growth (last loop minus baseline) does not see the
/// breakdowns; the closed sample does see the rows of `last_loop` held in the heap (about 150
/// bytes a row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MappingBreakdowns {
    /// `"/proc/self/smaps"`.
    pub source: String,
    /// At the `baseline` phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Breakdown>,
    /// At the last `loop` sample (the loop's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_loop: Option<Breakdown>,
    /// At the `closed` phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<Breakdown>,
}

/// One per-mapping breakdown of the probe's process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// Loop iterations done when it was taken.
    pub iterations: u64,
    /// Seconds since the probe started measuring.
    pub t_seconds: f64,
    /// Seconds the read and the parse took.
    pub cost_seconds: f64,
    /// The rows, by kind then name.
    pub rows: crate::memory::Mappings,
}

impl RetentionDocument {
    /// What is wrong with a completed measurement, for the probe's stderr: the first read of
    /// `weight` was not `0..tensor_elements` (the exit code is then 1). `None` when nothing is.
    pub fn problem(&self) -> Option<String> {
        (self.completed && !self.first_read_ok).then(|| {
            format!(
                "the first read of `{}` was not 0..{}",
                TENSOR_NAME, self.arguments.tensor_elements
            )
        })
    }
}
