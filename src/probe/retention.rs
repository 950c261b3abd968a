//! `hwr-exp probe safetensors-retention`: does repeated tensor materialization from a mapped
//! safetensors file retain private memory? (docs/DESIGN.md 7.)
//!
//! Steps: sample `before_file`; write the f32 tensor `weight` = `0..n` with the `safetensors`
//! crate into a temporary directory, open and map it (`memmap2`), check the first read; run the
//! warm-up; sample `baseline`; run the loop, sampling `loop` every `sample_every` iterations
//! (sampling time is excluded from `loop_seconds`); drop the mapping, the file, every view and
//! owned copy, sample `closed`; return the JSON document ([`RetentionDocument`]) for `main` to print.
//!
//! Nothing here trims the allocator, drops caches or frees extra memory to make numbers smaller.

use std::fs::File;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use tempfile::TempDir;

use super::document::{Arguments, Mode, Phase, RetentionDocument, RuntimeFacts, SCHEMA_VERSION, TENSOR_NAME};
use super::error::ProbeError;
use super::sampler::Sampler;

/// Iterations run between two checks of the stop flag set by the SIGTERM/SIGINT handler.
const STOP_CHECK_EVERY: u64 = 1024;

/// Settings of one `hwr-exp probe safetensors-retention` (its flags; docs/DESIGN.md 7). Counts are
/// positive; the command line refuses anything else before the probe starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionOptions {
    /// What each iteration does.
    pub mode: Mode,
    /// f32 elements of the synthetic tensor `weight` (values `0..tensor_elements`).
    pub tensor_elements: u64,
    /// Loop iterations.
    pub iterations: u64,
    /// Loop iterations between two `loop` samples.
    pub sample_every: u64,
    /// Iterations run before the `baseline` sample.
    pub warmup: u64,
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

/// Runs the probe with `args`, sampling with `sampler`, and returns its JSON [`RetentionDocument`] with the
/// process exit code: 0 when completed and the first read was right; 1 when the first read was
/// wrong ([`RetentionDocument::problem`] says so); 128 + signal number (143 for SIGTERM) when `stop` became
/// non-zero (the signal-number cell of the SIGTERM/SIGINT handlers, `crate::signal`), with the
/// samples taken so far and `completed: false`. Nothing is printed.
///
/// # Errors
/// [`ProbeError`]: smaps_rollup unreadable or malformed (exit 2), a file operation failed (exit 1).
pub fn measure(
    args: &RetentionOptions,
    sampler: &Sampler,
    stop: &AtomicUsize,
) -> Result<(RetentionDocument, i32), ProbeError> {
    let elements = usize::try_from(args.tensor_elements)
        .map_err(|_| ProbeError::TooManyElements(args.tensor_elements))?;
    let uname = rustix::system::uname();
    let mut doc = RetentionDocument {
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
        mappings: None,
    };
    let measuring = Instant::now();
    let mut breakdowns = super::document::MappingBreakdowns {
        source: super::sampler::SMAPS_SELF.to_owned(),
        baseline: None,
        last_loop: None,
        closed: None,
    };
    let stopped = |doc: &mut RetentionDocument| {
        let signal = i32::try_from(stop.load(Ordering::SeqCst)).unwrap_or(0);
        (signal != 0).then(|| {
            doc.stopped_by = Some(crate::signal::name(signal));
            128 + signal
        })
    };

    doc.samples.push(sampler.sample(Phase::BeforeFile, 0, 0.0)?);

    let started = Instant::now();
    let fixture = Fixture::create(elements)?;
    doc.file_bytes = fixture.file_bytes();
    let first_read = materialize(fixture.bytes(), elements)?;
    doc.first_read_ok = first_read.iter().enumerate().all(|(i, &v)| v == i as f32);
    doc.preparation_seconds = started.elapsed().as_secs_f64();
    let mut workload = Workload::new(args.mode, &fixture, first_read);
    if let Some(code) = stopped(&mut doc) {
        return Ok((doc, code));
    }

    let started = Instant::now();
    workload.run_until(args.warmup, stop)?;
    doc.warmup_seconds = started.elapsed().as_secs_f64();
    doc.checksum = workload.checksum();
    if let Some(code) = stopped(&mut doc) {
        return Ok((doc, code));
    }
    // Just before the baseline sample, so that what the breakdown keeps is in the baseline; read
    // twice, the first time to bring in the code and heap the reading itself uses (otherwise
    // they would show as growth of the binary's own mapping at the next breakdown).
    let _ = super::sampler::breakdown(0, measuring);
    breakdowns.baseline = super::sampler::breakdown(0, measuring);
    doc.samples.push(sampler.sample(Phase::Baseline, 0, 0.0)?);

    let mut done = 0;
    let mut loop_seconds = 0.0;
    while done < args.iterations {
        let next_sample = (done / args.sample_every + 1) * args.sample_every;
        let chunk = next_sample.min(args.iterations) - done;
        let started = Instant::now();
        let ran = workload.run_until(chunk, stop)?;
        loop_seconds += started.elapsed().as_secs_f64();
        done += ran;
        doc.iterations_completed = done;
        doc.checksum = workload.checksum();
        if let Some(code) = stopped(&mut doc) {
            doc.mappings = Some(breakdowns);
            return Ok((doc, code));
        }
        doc.samples.push(sampler.sample(Phase::Loop, done, loop_seconds)?);
    }
    // Just after the last loop sample: growth (last loop minus baseline) does not see it.
    if breakdowns.baseline.is_some() {
        breakdowns.last_loop = super::sampler::breakdown(done, measuring);
    }

    // Drop every view and owned copy, then the mapping and the file; keep the directory until
    // after the sample so that removing it is not part of `closed`.
    doc.checksum = workload.checksum();
    drop(workload);
    let dir = fixture.close();
    doc.last_tensor_alive = false;
    doc.samples
        .push(sampler.sample(Phase::Closed, done, loop_seconds)?);
    if breakdowns.baseline.is_some() {
        breakdowns.closed = super::sampler::breakdown(done, measuring);
    }
    drop(dir);
    doc.mappings = breakdowns.baseline.is_some().then_some(breakdowns);
    // Every phase ran: a signal arriving after the last loop sample changes nothing.
    doc.completed = true;
    let code = if doc.first_read_ok {
        crate::exit_codes::SUCCESS
    } else {
        crate::exit_codes::RUN_FAILED
    };
    Ok((doc, code))
}

#[cfg(test)]
mod tests {
    use super::*;

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
