//! Memory samples of the calling process: [`Sampler`] reads `/proc/self/smaps_rollup` (or the file
//! the hidden [`SMAPS_PATH_ENV`] names) and counts `/proc/self/fd` ([`fd_count`]).

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::document::{Breakdown, Phase, Sample};
use super::error::ProbeError;
use crate::memory::Rollup;

/// Name of the hidden environment variable that replaces `/proc/self/smaps_rollup` as the file the
/// probe samples. For tests only (an unreadable path, old-kernel fixture text); not in `--help`.
pub const SMAPS_PATH_ENV: &str = "HWR_PROBE_SMAPS_PATH";

impl Sample {
    /// Builds a sample from a parsed smaps_rollup reading.
    ///
    /// `path` names the file the reading came from, for the error message.
    ///
    /// # Errors
    /// [`ProbeError::MissingField`] when `Rss`, `Private_Clean`/`Private_Dirty` or `Anonymous` is
    /// missing (every kernel with smaps_rollup prints them, so the file is not a real one).
    pub fn from_rollup(
        phase: Phase,
        iterations: u64,
        loop_seconds: f64,
        rollup: &Rollup,
        fd_count: u64,
        path: &Path,
    ) -> Result<Sample, ProbeError> {
        let need = |value: Option<u64>, field: &'static str| {
            value.ok_or_else(|| ProbeError::MissingField {
                path: path.display().to_string(),
                field,
            })
        };
        Ok(Sample {
            phase,
            iterations,
            loop_seconds,
            rss_bytes: need(rollup.rss, "Rss")?,
            private_bytes: need(rollup.private, "Private_Clean/Private_Dirty")?,
            anonymous_bytes: need(rollup.anonymous, "Anonymous")?,
            pss_bytes: rollup.pss,
            pss_anon_bytes: rollup.pss_anon,
            swap_bytes: rollup.swap,
            fd_count,
        })
    }
}

/// Takes [`Sample`]s of the calling process: smaps_rollup from [`Sampler::path`] (normally
/// `/proc/self/smaps_rollup`) and the fd count from `/proc/self/fd`.
#[derive(Debug, Clone)]
pub struct Sampler {
    path: PathBuf,
}

impl Sampler {
    /// A sampler reading `path` instead of `/proc/self/smaps_rollup` (tests use fixture files).
    pub fn new(path: impl Into<PathBuf>) -> Sampler {
        Sampler { path: path.into() }
    }

    /// The sampler the probe uses: `/proc/self/smaps_rollup`, unless the hidden environment
    /// variable [`SMAPS_PATH_ENV`] (`HWR_PROBE_SMAPS_PATH`) names another
    /// file. The override exists so tests can exercise an unreadable file and old-kernel text.
    pub fn from_env() -> Sampler {
        match std::env::var_os(SMAPS_PATH_ENV) {
            Some(p) if !p.is_empty() => Sampler::new(p),
            _ => Sampler::new("/proc/self/smaps_rollup"),
        }
    }

    /// The smaps_rollup file this sampler reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads smaps_rollup and counts fds now.
    ///
    /// # Errors
    /// [`ProbeError::Smaps`] when the file cannot be read or parsed, [`ProbeError::MissingField`]
    /// as in [`Sample::from_rollup`], [`ProbeError::Io`] when `/proc/self/fd` cannot be listed.
    pub fn sample(&self, phase: Phase, iterations: u64, loop_seconds: f64) -> Result<Sample, ProbeError> {
        let rollup = Rollup::read(&self.path)?;
        let fds = fd_count().map_err(|source| ProbeError::Io {
            what: "cannot list /proc/self/fd".to_owned(),
            source,
        })?;
        Sample::from_rollup(phase, iterations, loop_seconds, &rollup, fds, &self.path)
    }
}

/// Where [`breakdown`] reads the per-mapping figures.
pub const SMAPS_SELF: &str = "/proc/self/smaps";

/// A per-mapping breakdown of the calling process now ([`Breakdown`]): `/proc/self/smaps` read
/// into an anonymous mapping that is unmapped again (so the text leaves nothing resident
/// behind) and folded into rows by the runner's parser (`crate::memory::Mappings`).
/// `iterations` and `since` (the start of the measurement) are recorded with it. `None` when
/// smaps cannot be read.
pub fn breakdown(iterations: u64, since: std::time::Instant) -> Option<Breakdown> {
    let t0 = std::time::Instant::now();
    let (text, len) = read_unbuffered(SMAPS_SELF).ok()?;
    let rows = crate::memory::Mappings::parse(std::str::from_utf8(&text[..len]).ok()?);
    drop(text);
    Some(Breakdown {
        iterations,
        t_seconds: t0.duration_since(since).as_secs_f64(),
        cost_seconds: t0.elapsed().as_secs_f64(),
        rows,
    })
}

/// The whole of `path` in an anonymous memory mapping (grown by doubling), not the heap: once
/// dropped it is unmapped, and the process's memory is as before.
fn read_unbuffered(path: &str) -> io::Result<(memmap2::MmapMut, usize)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut buf = memmap2::MmapMut::map_anon(256 * 1024)?;
    let mut len = 0;
    loop {
        if len == buf.len() {
            let mut bigger = memmap2::MmapMut::map_anon(buf.len() * 2)?;
            bigger[..len].copy_from_slice(&buf[..len]);
            buf = bigger;
        }
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((buf, len))
}

/// Number of open file descriptors of the calling process: the entries of `/proc/self/fd`, minus
/// the descriptor opened to list that directory (identified by number, not guessed).
///
/// # Errors
/// The I/O error from opening or reading `/proc/self/fd`.
pub fn fd_count() -> io::Result<u64> {
    use rustix::fs::{Dir, Mode, OFlags, open};
    let fd = open(
        "/proc/self/fd",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let own = fd.as_raw_fd().to_string();
    let mut dir = Dir::new(fd)?;
    let mut count = 0;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." && name != own.as_bytes() {
            count += 1;
        }
    }
    Ok(count)
}
