//! plan.json parsed in one streamed pass: the header fields kept, each run handed to a callback
//! as it is parsed (or, without one, the reading stopped at `runs` once the header is complete).

use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::read_error::{ReadError, checked_name, io_error, json_error};
use crate::bundle::format::{BUNDLE_FORMAT, PlanHeader};
use crate::plan::PlannedRun;

/// Called with each run; `false` stops the reading (the receiver is gone).
pub(super) type OnRun<'a> = &'a mut dyn FnMut(PlannedRun) -> bool;

/// The message of the error that stops the parser on purpose.
const STOP: &str = "hwr-exp: stop reading plan.json";

struct Seed<'a, 'b, 'm> {
    path: &'b Path,
    on_run: Option<OnRun<'a>>,
    /// An error of ours (newer format, unsafe name) that stopped the parser.
    error: &'b mut Option<ReadError>,
    /// What has been read so far (kept when the parser is stopped).
    fields: &'b mut Fields,
    /// How the runs are taken and how many were handed over ([`Progress`]).
    progress: &'b mut Progress<'m>,
}

/// How one pass over plan.json takes its runs, and how far it got.
struct Progress<'m> {
    /// Runs handed to the callback so far.
    delivered: usize,
    /// Runs a pass over a document already read in part skips unseen: those the first pass
    /// handed over.
    skip: usize,
    /// The document is mapped ([`Mapped`]): each run is taken as its raw text and parsed
    /// from it, and the mapped pages before it are let go.
    mapped: Option<&'m Mapped>,
    /// The mapped pass met something it leaves to the streamed one to say (a run that does
    /// not parse): set when it stopped for that.
    retry: bool,
}

/// plan.json mapped into memory: parsed as a slice, several times faster than through a
/// reader (a 100,000-run plan is 40 MB).
struct Mapped {
    map: memmap2::Mmap,
    /// Bytes from the start whose pages were let go.
    dropped: std::cell::Cell<usize>,
}

/// Pages let go at a time, bytes.
const DROP_STEP: usize = 4 << 20;

impl Mapped {
    /// Maps `file` when it is a regular file of at least 1 MiB (a smaller one is streamed:
    /// too little to gain); `None` when it cannot be mapped.
    fn of(file: &File) -> Option<Mapped> {
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() < (1 << 20) {
            return None;
        }
        // SAFETY: plan.json is written once, under a temporary name, and renamed into place
        // (`write_atomic_with`); a new plan.json is a new file, so the mapped bytes do not
        // change under the parser. A file truncated by someone else meanwhile would fault.
        let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
        let _ = map.advise(memmap2::Advice::Sequential);
        Some(Mapped {
            map,
            dropped: std::cell::Cell::new(0),
        })
    }

    /// The run whose text starts at `at` (a pointer into the map) was parsed: the pages
    /// wholly before it are let go, a few MiB at a time, so that the pages read stay out of
    /// the report's resident memory (they stay in the page cache).
    fn parsed_up_to(&self, at: *const u8) {
        let offset = (at as usize).saturating_sub(self.map.as_ptr() as usize);
        let dropped = self.dropped.get();
        if offset < dropped + DROP_STEP {
            return;
        }
        let upto = offset & !(DROP_STEP - 1);
        // SAFETY: a shared, read-only file mapping: MADV_DONTNEED only drops this process's
        // page table entries for the range; a later read of those bytes (an error's line and
        // column are counted from the start) faults them in again from the file.
        let _ = unsafe {
            self.map
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, dropped, upto - dropped)
        };
        self.dropped.set(upto);
    }
}

#[derive(Default)]
struct Fields {
    format: Option<u64>,
    order: Option<crate::manifest::Order>,
    seed: Option<Option<u64>>,
    jobs: Option<u32>,
    matrix_keys: Option<Vec<String>>,
    output_format: Option<crate::manifest::OutputFormat>,
    sample_interval_seconds: Option<Option<f64>>,
    runs: bool,
}

impl Fields {
    fn complete(&self) -> bool {
        self.format.is_some()
            && self.order.is_some()
            && self.seed.is_some()
            && self.jobs.is_some()
            && self.matrix_keys.is_some()
            && self.output_format.is_some()
            && self.sample_interval_seconds.is_some()
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a plan.json object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let f = &mut *self.fields;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => {
                    let v: u64 = map.next_value()?;
                    if v > u64::from(BUNDLE_FORMAT) {
                        *self.error = Some(newer(self.path, v));
                        return Err(de::Error::custom(STOP));
                    }
                    f.format = Some(v);
                }
                "order" => f.order = Some(map.next_value()?),
                "seed" => f.seed = Some(map.next_value()?),
                "jobs" => f.jobs = Some(map.next_value()?),
                "matrix-keys" => f.matrix_keys = Some(map.next_value()?),
                "output-format" => f.output_format = Some(map.next_value()?),
                "sample-interval-seconds" => f.sample_interval_seconds = Some(map.next_value()?),
                "runs" => {
                    f.runs = true;
                    match self.on_run.as_mut() {
                        None if f.complete() => return Err(de::Error::custom(STOP)),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        Some(on_run) => map.next_value_seed(RunsSeed {
                            path: self.path,
                            on_run: &mut **on_run,
                            error: &mut *self.error,
                            progress: &mut *self.progress,
                        })?,
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct RunsSeed<'a, 'b, 'm> {
    path: &'b Path,
    on_run: &'a mut dyn FnMut(PlannedRun) -> bool,
    error: &'b mut Option<ReadError>,
    progress: &'b mut Progress<'m>,
}

impl<'de> DeserializeSeed<'de> for RunsSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RunsSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of planned runs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let run = match self.progress.mapped {
                Some(mapped) => {
                    let Some(text) = seq.next_element::<&'de serde_json::value::RawValue>()? else {
                        break;
                    };
                    let Ok(run) = serde_json::from_str::<PlannedRun>(text.get()) else {
                        // The streamed pass says what is wrong, where, in the file's terms.
                        self.progress.retry = true;
                        return Err(de::Error::custom(STOP));
                    };
                    mapped.parsed_up_to(text.get().as_ptr());
                    run
                }
                None => match seq.next_element::<PlannedRun>()? {
                    Some(run) => run,
                    None => break,
                },
            };
            if i < self.progress.skip {
                // Handed over (and checked) by the mapped pass before this one.
                i += 1;
                continue;
            }
            let checked = checked_name(self.path, &run.run_id, || format!("runs[{i}].run-id"))
                .and_then(|()| checked_name(self.path, &run.output, || format!("runs[{i}].output")))
                .and_then(|()| {
                    // A run's index is its place in the plan: a repeated or moved entry
                    // would be reported twice, or as another run.
                    (run.index == i)
                        .then_some(())
                        .ok_or_else(|| ReadError::NotAsPlanned {
                            path: self.path.to_path_buf(),
                            what: format!(
                                "runs[{i}] ({}) has index {}: a run's index is its place in runs",
                                &run.run_id, run.index
                            ),
                        })
                });
            if let Err(e) = checked {
                *self.error = Some(e);
                return Err(de::Error::custom(STOP));
            }
            if !(self.on_run)(run) {
                return Err(de::Error::custom(STOP));
            }
            self.progress.delivered += 1;
            i += 1;
        }
        Ok(())
    }
}

fn newer(path: &Path, found: u64) -> ReadError {
    ReadError::NewerFormat {
        path: path.to_path_buf(),
        found,
        supported: BUNDLE_FORMAT,
        version: env!("CARGO_PKG_VERSION"),
    }
}

/// Reads plan.json at `path` from `file` in one pass, handing each run to `on_run` (none:
/// stop at `runs` once the header is complete) and returning the header.
///
/// A plan.json of 1 MiB or more is mapped and parsed from memory ([`Mapped`]); when that pass
/// meets an error it does not say itself (anything but a newer format or a name or index of
/// ours), the file is read again streamed, as a smaller one is, the runs already handed over
/// skipped, so that every error is the streamed parser's, with its line and column.
pub(super) fn read(path: &Path, file: File, mut on_run: Option<OnRun<'_>>) -> Result<PlanHeader, ReadError> {
    let path: PathBuf = path.to_path_buf();
    let mut skip = 0;
    if let Some(mapped) = Mapped::of(&file) {
        let mut progress = Progress {
            delivered: 0,
            skip: 0,
            mapped: Some(&mapped),
            retry: false,
        };
        let mut de = serde_json::Deserializer::from_slice(&mapped.map);
        let again = on_run.as_mut().map(|f| &mut **f as OnRun<'_>);
        match pass(&path, &mut de, again, &mut progress) {
            Err(Pass::Retry) => skip = progress.delivered,
            Err(Pass::Failed(e)) => return Err(e),
            Ok(fields) => return header(&path, fields),
        }
    }
    let mut file = file;
    std::io::Seek::rewind(&mut file).map_err(|e| io_error(&path, e))?;
    let mut progress = Progress {
        delivered: 0,
        skip,
        mapped: None,
        retry: false,
    };
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(256 * 1024, file));
    match pass(&path, &mut de, on_run, &mut progress) {
        Ok(fields) => header(&path, fields),
        Err(Pass::Failed(e)) => Err(e),
        Err(Pass::Retry) => unreachable!("only a mapped pass retries"),
    }
}

/// How a pass over plan.json failed.
enum Pass {
    /// With this error, to be returned.
    Failed(ReadError),
    /// The mapped pass leaves the error to the streamed one ([`read`]).
    Retry,
}

/// One pass of [`read`] through `de`: the header fields read, the runs handed to `on_run`.
fn pass<'de, R: serde_json::de::Read<'de>>(
    path: &Path,
    de: &mut serde_json::Deserializer<R>,
    on_run: Option<OnRun<'_>>,
    progress: &mut Progress<'_>,
) -> Result<Fields, Pass> {
    let mut error = None;
    let mut fields = Fields::default();
    let header_only = on_run.is_none();
    let mapped = progress.mapped.is_some();
    let parsed = Seed {
        path,
        on_run,
        error: &mut error,
        fields: &mut fields,
        progress,
    }
    .deserialize(&mut *de)
    .and_then(|()| de.end());
    if let Err(e) = parsed {
        if let Some(ours) = error {
            return Err(Pass::Failed(ours));
        }
        let stopped = e.to_string().starts_with(STOP);
        if mapped && (progress.retry || !stopped) {
            return Err(Pass::Retry);
        }
        if !stopped {
            return Err(Pass::Failed(json_error(path, e)));
        }
        if !header_only {
            // The receiver is gone: nobody reads what follows.
            return Err(Pass::Failed(ReadError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other("reading stopped"),
            }));
        }
    }
    Ok(fields)
}

/// The header of plan.json at `path` from the `fields` a pass read.
fn header(path: &Path, fields: Fields) -> Result<PlanHeader, ReadError> {
    let path = path.to_path_buf();
    let missing = |key: &'static str| json_error(&path, <serde_json::Error as de::Error>::missing_field(key));
    if !fields.runs {
        return Err(missing("runs"));
    }
    Ok(PlanHeader {
        format: fields
            .format
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| ReadError::NoFormat {
                path: path.clone(),
                key: "format",
            })?,
        order: fields.order.ok_or_else(|| missing("order"))?,
        seed: fields.seed.flatten(),
        jobs: fields.jobs.ok_or_else(|| missing("jobs"))?,
        matrix_keys: fields.matrix_keys.ok_or_else(|| missing("matrix-keys"))?,
        output_format: fields.output_format.ok_or_else(|| missing("output-format"))?,
        sample_interval_seconds: fields.sample_interval_seconds.flatten(),
    })
}
