//! `hwr-exp probe safetensors-retention`: does repeated tensor materialization from a mapped
//! safetensors file retain private memory? (DESIGN 7.)
//!
//! Steps: sample `before_file`; write the f32 tensor `weight` = `0..n` with the `safetensors`
//! crate into a temporary directory, open and map it (`memmap2`), check the first read; run the
//! warm-up; sample `baseline`; run the loop, sampling `loop` every `sample_every` iterations
//! (sampling time is excluded from `loop_seconds`); drop the mapping, the file, every view and
//! owned copy, sample `closed`; print one JSON document ([`Report`]).
//!
//! Nothing here trims the allocator, drops caches or frees extra memory to make numbers smaller.

use std::fs::File;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::ValueEnum;
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

use super::report::{Arguments, Phase, Report, RuntimeFacts, SCHEMA_VERSION, Sampler};
use crate::memory::RollupError;

/// Name of the hidden environment variable that replaces `/proc/self/smaps_rollup` as the file the
/// probe samples. For tests only (an unreadable path, old-kernel fixture text); not in `--help`.
pub const SMAPS_PATH_ENV: &str = "HWR_PROBE_SMAPS_PATH";

/// Name of the tensor in the synthetic safetensors file.
pub const TENSOR_NAME: &str = "weight";

/// Iterations run between two checks of the stop flag set by the SIGTERM/SIGINT handler.
const STOP_CHECK_EVERY: u64 = 1024;

/// Largest `--tensor-elements`: 2^30 f32 values, a 4 GiB file.
const MAX_ELEMENTS: u64 = 1 << 30;

/// What one loop iteration does with the tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Mode {
    /// Parse the safetensors header from the mapping and copy the tensor into a newly allocated
    /// owned buffer (dropped at the end of the iteration).
    #[value(name = "get_tensor")]
    #[serde(rename = "get_tensor")]
    GetTensor,
    /// Parse the header and take a borrowed view of the mapped bytes (no copy).
    #[value(name = "view")]
    #[serde(rename = "view")]
    View,
    /// Read the one owned copy made by the first read (the control).
    #[value(name = "reuse")]
    #[serde(rename = "reuse")]
    Reuse,
}

/// Flags of `hwr-exp probe safetensors-retention`. Every count is a positive integer; anything
/// else is a usage error (exit 2).
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionArgs {
    /// What each iteration does: get_tensor (parse + owned copy), view (parse + borrowed view),
    /// reuse (read the cached copy; the control).
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// f32 elements of the synthetic tensor `weight` (values 0..N).
    #[arg(long, value_name = "N", default_value_t = 64, allow_negative_numbers = true,
          value_parser = parse_elements)]
    pub tensor_elements: u64,
    /// Loop iterations.
    #[arg(long, value_name = "N", default_value_t = 1_000_000, allow_negative_numbers = true,
          value_parser = parse_positive)]
    pub iterations: u64,
    /// Take a `loop` sample every N iterations.
    #[arg(long, value_name = "N", default_value_t = 100_000, allow_negative_numbers = true,
          value_parser = parse_positive)]
    pub sample_every: u64,
    /// Iterations run before the `baseline` sample.
    #[arg(long, value_name = "N", default_value_t = 1000, allow_negative_numbers = true,
          value_parser = parse_positive)]
    pub warmup: u64,
}

/// Parses a count flag: a positive integer (`1`, `200000`); the message says what is wrong.
fn parse_positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be a positive integer (1 or more), got 0".to_owned()),
        Ok(n) => Ok(n),
        Err(_) if text.trim().parse::<i128>().is_ok() => {
            Err(format!("must be a positive integer (1 or more), got {text}"))
        }
        Err(_) => Err(format!("must be a positive integer, got `{text}`")),
    }
}

/// Parses `--tensor-elements`: a positive integer up to 2^30.
fn parse_elements(text: &str) -> Result<u64, String> {
    let n = parse_positive(text)?;
    if n > MAX_ELEMENTS {
        return Err(format!(
            "at most {MAX_ELEMENTS} elements (a 4 GiB tensor), got {n}"
        ));
    }
    Ok(n)
}

/// Errors of the probe.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// smaps_rollup could not be read or parsed (exit 2).
    #[error(transparent)]
    Smaps(#[from] RollupError),
    /// smaps_rollup lacks a field every kernel with the file prints (exit 2).
    #[error("{path} has no {field} line; is it a smaps_rollup file?")]
    MissingField {
        /// The file read.
        path: String,
        /// The missing field.
        field: &'static str,
    },
    /// A file or directory operation failed (exit 1).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the path.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The safetensors crate refused the file it wrote or a header it parsed (exit 1).
    #[error("safetensors: {0}")]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// The tensor in the file is not the f32 vector that was written (exit 1).
    #[error("tensor `{TENSOR_NAME}` is {found}, expected F32 of shape [{expected}]")]
    WrongTensor {
        /// Dtype and shape found.
        found: String,
        /// Elements expected.
        expected: usize,
    },
    /// The signal handler could not be installed (exit 1).
    #[error("cannot install the SIGTERM/SIGINT handler: {0}")]
    Signal(std::io::Error),
}

impl ProbeError {
    /// The exit code for this error: 2 for an unreadable or malformed smaps_rollup (DESIGN 7),
    /// 1 for anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            ProbeError::Smaps(_) | ProbeError::MissingField { .. } => crate::exit_codes::USAGE,
            _ => crate::exit_codes::RUN_FAILED,
        }
    }
}

/// The synthetic safetensors file, opened and mapped. Dropping it unmaps the file, closes it and
/// removes the temporary directory.
#[derive(Debug)]
pub struct Fixture {
    // Field order is drop order: mapping, then file (the "reader"), then the directory.
    map: Mmap,
    file: File,
    path: PathBuf,
    elements: usize,
    dir: TempDir,
}

impl Fixture {
    /// Writes `weight` (F32, shape `[elements]`, values `0..elements`) with
    /// `safetensors::serialize_to_file` to `weight.safetensors` in a new temporary directory
    /// (`tempfile`, under `$TMPDIR`), opens it and maps it read-only.
    ///
    /// # Errors
    /// [`ProbeError::Io`] when the directory, file or mapping cannot be made,
    /// [`ProbeError::Safetensors`] when serialization fails.
    pub fn create(elements: usize) -> Result<Fixture, ProbeError> {
        let dir = tempfile::Builder::new()
            .prefix("hwr-exp-probe-")
            .tempdir()
            .map_err(|source| ProbeError::Io {
                what: "cannot create a temporary directory".to_owned(),
                source,
            })?;
        let path = dir.path().join("weight.safetensors");
        let bytes: Vec<u8> = (0..elements).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let view = TensorView::new(Dtype::F32, vec![elements], &bytes)?;
        safetensors::serialize_to_file([(TENSOR_NAME, view)], None, &path)?;
        drop(bytes);
        let io_err = |what: &str, source| ProbeError::Io {
            what: format!("{what} {}", path.display()),
            source,
        };
        let file = File::open(&path).map_err(|e| io_err("cannot open", e))?;
        // SAFETY: the file lives in a private temporary directory that only this process
        // writes, and nothing modifies or truncates it while the mapping exists.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_err("cannot map", e))?;
        Ok(Fixture {
            map,
            file,
            path,
            elements,
            dir,
        })
    }

    /// The mapped file bytes (header and data).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Path of the safetensors file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Elements of `weight`.
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// Size of the file in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.map.len() as u64
    }

    /// Unmaps and closes the file but keeps the temporary directory (and the file in it) until
    /// the returned [`TempDir`] is dropped.
    pub fn close(self) -> TempDir {
        let Fixture { map, file, dir, .. } = self;
        drop(map);
        drop(file);
        dir
    }
}

/// Parses the header of `bytes` and copies `weight` into a new owned `Vec<f32>`: one `get_tensor`
/// iteration's work.
///
/// # Errors
/// [`ProbeError::Safetensors`] for a bad header or a missing tensor, [`ProbeError::WrongTensor`]
/// when the tensor is not F32 of shape `[elements]`.
pub fn materialize(bytes: &[u8], elements: usize) -> Result<Vec<f32>, ProbeError> {
    let tensors = SafeTensors::deserialize(bytes)?;
    let view = tensors.tensor(TENSOR_NAME)?;
    let data = checked_data(&view, elements)?;
    Ok(copy_f32(data))
}

/// Copies little-endian f32 bytes into a newly allocated `Vec<f32>`.
#[cfg(target_endian = "little")]
fn copy_f32(data: &[u8]) -> Vec<f32> {
    let elements = data.len() / 4;
    let mut owned = Vec::<f32>::with_capacity(elements);
    // SAFETY: `owned` has room for `elements` f32 values = `data.len()` bytes (a multiple of 4,
    // checked by `checked_data`); the regions do not overlap; on a little-endian target the file's
    // little-endian bytes are the native f32 representation, and every bit pattern is a valid f32.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), owned.as_mut_ptr().cast::<u8>(), data.len());
        owned.set_len(elements);
    }
    owned
}

/// Copies little-endian f32 bytes into a newly allocated `Vec<f32>`.
#[cfg(not(target_endian = "little"))]
fn copy_f32(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The data of `view` when it is F32 of shape `[elements]`.
fn checked_data<'a>(view: &TensorView<'a>, elements: usize) -> Result<&'a [u8], ProbeError> {
    if view.dtype() != Dtype::F32 || view.shape() != [elements] || view.data().len() != elements * 4 {
        return Err(ProbeError::WrongTensor {
            found: format!("{:?} of shape {:?}", view.dtype(), view.shape()),
            expected: elements,
        });
    }
    Ok(view.data())
}

/// Reads element `index` of little-endian f32 `data`.
#[inline]
fn f32_at(data: &[u8], index: usize) -> f32 {
    let at = index * 4;
    f32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

/// One mode's iterations over a [`Fixture`]'s mapping, with a running checksum that keeps the
/// work observable.
///
/// Iteration `k` (counting warm-up and loop together from 0) reads element `k mod elements` of the
/// tensor it materialized (`get_tensor`), viewed (`view`) or cached (`reuse`) and adds it, as an
/// integer, to the checksum.
#[derive(Debug)]
pub struct Workload<'a> {
    mode: Mode,
    bytes: &'a [u8],
    /// The reader: the safetensors header parsed from the mapping once, on the first iteration, as
    /// `safe_open` does in the Python diagnostic; dropped with the workload before `closed`.
    reader: Option<SafeTensors<'a>>,
    elements: usize,
    cached: Option<Vec<f32>>,
    index: usize,
    done: u64,
    checksum: u64,
}

impl<'a> Workload<'a> {
    /// A workload over `fixture`'s mapping. `first_read` is the owned copy from the first read:
    /// kept as the cached copy in `reuse` mode, dropped at once in the other modes.
    pub fn new(mode: Mode, fixture: &'a Fixture, first_read: Vec<f32>) -> Workload<'a> {
        let cached = (mode == Mode::Reuse).then_some(first_read);
        Workload {
            mode,
            bytes: fixture.bytes(),
            reader: None,
            elements: fixture.elements(),
            cached,
            index: 0,
            done: 0,
            checksum: 0,
        }
    }

    /// Runs `count` iterations.
    ///
    /// # Errors
    /// As [`materialize`] (the header is parsed on the first call in `get_tensor` and `view` modes).
    pub fn run(&mut self, count: u64) -> Result<(), ProbeError> {
        let mut sum = self.checksum;
        let mut index = self.index;
        if self.reader.is_none() && self.mode != Mode::Reuse {
            self.reader = Some(SafeTensors::deserialize(self.bytes)?);
        }
        match self.mode {
            Mode::GetTensor => {
                let reader = self.reader.as_ref().expect("parsed above");
                for _ in 0..count {
                    // get_tensor on the open reader: find the tensor in the parsed header, then
                    // copy its bytes into a newly allocated owned buffer.
                    let view = black_box(reader).tensor(TENSOR_NAME)?;
                    let owned = black_box(copy_f32(checked_data(&view, self.elements)?));
                    sum = sum.wrapping_add(owned[index] as u64);
                    drop(owned);
                    index = if index + 1 == self.elements { 0 } else { index + 1 };
                }
            }
            Mode::View => {
                let reader = self.reader.as_ref().expect("parsed above");
                for _ in 0..count {
                    let view = black_box(black_box(reader).tensor(TENSOR_NAME)?);
                    let data = checked_data(&view, self.elements)?;
                    sum = sum.wrapping_add(f32_at(data, index) as u64);
                    index = if index + 1 == self.elements { 0 } else { index + 1 };
                }
            }
            Mode::Reuse => {
                let cached = self
                    .cached
                    .as_deref()
                    .expect("reuse mode always holds the cached copy");
                for _ in 0..count {
                    let tensor = black_box(cached);
                    sum = sum.wrapping_add(tensor[index] as u64);
                    index = if index + 1 == self.elements { 0 } else { index + 1 };
                }
            }
        }
        self.checksum = black_box(sum);
        self.index = index;
        self.done += count;
        Ok(())
    }

    /// Like [`Workload::run`], but checks `stop` every 1024 iterations and returns early when it
    /// is non-zero. Returns the iterations done in this call.
    ///
    /// # Errors
    /// As [`Workload::run`].
    pub fn run_until(&mut self, count: u64, stop: &AtomicUsize) -> Result<u64, ProbeError> {
        let mut done = 0;
        while done < count {
            if stop.load(Ordering::Relaxed) != 0 {
                break;
            }
            let n = (count - done).min(STOP_CHECK_EVERY);
            self.run(n)?;
            done += n;
        }
        Ok(done)
    }

    /// Iterations run so far (warm-up included).
    pub fn iterations(&self) -> u64 {
        self.done
    }

    /// The running checksum (see [`Workload`]).
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// Whether an owned copy of the tensor is held between iterations (the `reuse` cache).
    pub fn holds_tensor(&self) -> bool {
        self.cached.is_some()
    }
}

/// Signal number stored by the SIGTERM/SIGINT handler (0: none yet). The handler only stores;
/// the probe checks it between iterations and prints from normal code.
static STOP_SIGNAL: AtomicUsize = AtomicUsize::new(0);

fn install_stop_handlers() -> Result<(), ProbeError> {
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_usize(signal, &STOP_SIGNAL, signal as usize)
            .map_err(ProbeError::Signal)?;
    }
    Ok(())
}

fn signal_name(signal: usize) -> String {
    match signal as i32 {
        signal_hook::consts::SIGTERM => "SIGTERM".to_owned(),
        signal_hook::consts::SIGINT => "SIGINT".to_owned(),
        other => format!("signal {other}"),
    }
}

/// Runs the probe with `args`: prints the JSON [`Report`] on stdout and returns the process exit
/// code: 0 when completed and the first read was right; 1 when the first read was wrong or a
/// file operation failed; 2 when smaps_rollup cannot be read (the message names the file);
/// 128 + signal number (143 for SIGTERM) when stopped by SIGTERM or SIGINT, after printing the
/// samples taken so far with `completed: false`.
///
/// It installs process-wide SIGTERM and SIGINT handlers (they only store the signal number), so
/// it is meant to be the whole process: `main` calls it for the `probe` subcommand.
pub fn run_retention(args: &RetentionArgs) -> i32 {
    match run(args, &Sampler::from_env()) {
        Ok((report, code)) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let written = serde_json::to_writer_pretty(&mut out, &report)
                .map_err(std::io::Error::from)
                .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
                .and_then(|()| std::io::Write::flush(&mut out));
            if let Err(e) = written {
                eprintln!("hwr-exp probe safetensors-retention: cannot write the report: {e}");
                return crate::exit_codes::RUN_FAILED;
            }
            code
        }
        Err(e) => {
            eprintln!("hwr-exp probe safetensors-retention: error: {e}");
            e.exit_code()
        }
    }
}

/// The probe proper: everything but printing. Returns the report and the exit code.
fn run(args: &RetentionArgs, sampler: &Sampler) -> Result<(Report, i32), ProbeError> {
    install_stop_handlers()?;
    let elements = usize::try_from(args.tensor_elements).expect("at most 2^30 elements");
    let uname = rustix::system::uname();
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        probe: "safetensors-retention".to_owned(),
        arguments: Arguments {
            mode: args.mode,
            tensor_elements: args.tensor_elements,
            iterations: args.iterations,
            sample_every: args.sample_every,
            warmup: args.warmup,
        },
        kernel: uname.release().to_string_lossy().into_owned(),
        hostname: uname.nodename().to_string_lossy().into_owned(),
        pid: std::process::id(),
        cpu_affinity: crate::cpus::allowed_cpus().unwrap_or_default(),
        runtime: RuntimeFacts::collect(),
        file_bytes: 0,
        first_read_ok: false,
        preparation_seconds: 0.0,
        warmup_seconds: 0.0,
        samples: Vec::new(),
        iterations_completed: 0,
        checksum: 0,
        last_tensor_alive: false,
        completed: false,
        stopped_by: None,
    };
    let stopped = |report: &mut Report| {
        let signal = STOP_SIGNAL.load(Ordering::SeqCst);
        (signal != 0).then(|| {
            report.stopped_by = Some(signal_name(signal));
            128 + signal as i32
        })
    };

    report.samples.push(sampler.sample(Phase::BeforeFile, 0, 0.0)?);

    let started = Instant::now();
    let fixture = Fixture::create(elements)?;
    report.file_bytes = fixture.file_bytes();
    let first_read = materialize(fixture.bytes(), elements)?;
    report.first_read_ok = first_read.iter().enumerate().all(|(i, &v)| v == i as f32);
    report.preparation_seconds = started.elapsed().as_secs_f64();
    let mut workload = Workload::new(args.mode, &fixture, first_read);
    if let Some(code) = stopped(&mut report) {
        return Ok((report, code));
    }

    let started = Instant::now();
    workload.run_until(args.warmup, &STOP_SIGNAL)?;
    report.warmup_seconds = started.elapsed().as_secs_f64();
    report.checksum = workload.checksum();
    if let Some(code) = stopped(&mut report) {
        return Ok((report, code));
    }
    report.samples.push(sampler.sample(Phase::Baseline, 0, 0.0)?);

    let mut done = 0;
    let mut loop_seconds = 0.0;
    while done < args.iterations {
        let next_sample = (done / args.sample_every + 1) * args.sample_every;
        let chunk = next_sample.min(args.iterations) - done;
        let started = Instant::now();
        let ran = workload.run_until(chunk, &STOP_SIGNAL)?;
        loop_seconds += started.elapsed().as_secs_f64();
        done += ran;
        report.iterations_completed = done;
        report.checksum = workload.checksum();
        if let Some(code) = stopped(&mut report) {
            return Ok((report, code));
        }
        report
            .samples
            .push(sampler.sample(Phase::Loop, done, loop_seconds)?);
    }

    // Drop every view and owned copy, then the mapping and the file; keep the directory until
    // after the sample so that removing it is not part of `closed`.
    report.checksum = workload.checksum();
    drop(workload);
    let dir = fixture.close();
    report.last_tensor_alive = false;
    report
        .samples
        .push(sampler.sample(Phase::Closed, done, loop_seconds)?);
    drop(dir);
    // Every phase ran: a signal arriving after the last loop sample changes nothing.
    report.completed = true;
    let code = if report.first_read_ok {
        crate::exit_codes::SUCCESS
    } else {
        eprintln!(
            "hwr-exp probe safetensors-retention: the first read of `{TENSOR_NAME}` was not 0..{elements}"
        );
        crate::exit_codes::RUN_FAILED
    };
    Ok((report, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_must_be_positive_integers() {
        assert_eq!(parse_positive("1"), Ok(1));
        assert_eq!(parse_positive("200000"), Ok(200_000));
        assert!(parse_positive("0").unwrap_err().contains("1 or more"));
        assert!(parse_positive("-4").unwrap_err().contains("1 or more"));
        assert!(parse_positive("1e3").unwrap_err().contains("`1e3`"));
        assert!(parse_positive("").is_err());
        assert_eq!(parse_elements("1073741824"), Ok(MAX_ELEMENTS));
        assert!(parse_elements("1073741825").is_err());
    }

    #[test]
    fn every_mode_reads_the_same_elements() {
        let fixture = Fixture::create(5).unwrap();
        let first = materialize(fixture.bytes(), 5).unwrap();
        assert_eq!(first, [0.0, 1.0, 2.0, 3.0, 4.0]);
        // 12 iterations read elements 0,1,2,3,4,0,1,2,3,4,0,1.
        let expected: u64 = (0..12).map(|k| k % 5).sum();
        for mode in [Mode::GetTensor, Mode::View, Mode::Reuse] {
            let mut workload = Workload::new(mode, &fixture, first.clone());
            assert_eq!(workload.holds_tensor(), mode == Mode::Reuse);
            workload.run(7).unwrap();
            workload.run(5).unwrap();
            assert_eq!(workload.iterations(), 12);
            assert_eq!(workload.checksum(), expected, "{mode:?}");
        }
    }

    #[test]
    fn a_set_stop_flag_ends_the_loop_at_a_check() {
        let fixture = Fixture::create(3).unwrap();
        let first = materialize(fixture.bytes(), 3).unwrap();
        let mut workload = Workload::new(Mode::View, &fixture, first);
        let stop = AtomicUsize::new(15);
        assert_eq!(workload.run_until(10_000, &stop).unwrap(), 0);
        let go = AtomicUsize::new(0);
        assert_eq!(workload.run_until(3000, &go).unwrap(), 3000);
    }

    #[test]
    fn a_header_naming_another_shape_is_refused() {
        let fixture = Fixture::create(4).unwrap();
        let err = materialize(fixture.bytes(), 8).unwrap_err();
        assert!(
            matches!(err, ProbeError::WrongTensor { expected: 8, .. }),
            "{err}"
        );
        assert_eq!(err.exit_code(), crate::exit_codes::RUN_FAILED);
    }

    #[test]
    fn closing_unmaps_but_keeps_the_file_until_the_directory_goes() {
        let fixture = Fixture::create(2).unwrap();
        let path = fixture.path().to_path_buf();
        assert_eq!(fixture.file_bytes(), std::fs::metadata(&path).unwrap().len());
        let dir = fixture.close();
        assert!(path.exists());
        drop(dir);
        assert!(!path.exists());
    }
}
