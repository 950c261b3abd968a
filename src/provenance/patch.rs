//! working-tree.patch as a capture holds it ([`PatchBytes`]: spooled to an unnamed temporary file,
//! never in memory whole) and the limits that keep large files out of it ([`PatchLimits`]).
//!
//! The capture writes the patch into scratch space only (a `tempfile` file in the temporary
//! folder, removed when the last clone of the capture is dropped; no descriptor stays open
//! between reads, so a session holding its capture costs no file descriptor); the bundle writer
//! copies it into the bundle. git writes its `git diff` output straight into that file (its stdout
//! is the file), so the runner's memory does not grow with the patch.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::Arc;

use tempfile::{NamedTempFile, TempPath};

use serde::{Deserialize, Serialize};

/// Default most bytes of one file in working-tree.patch (16 MiB): `[provenance] patch-file-limit`.
pub const DEFAULT_PATCH_FILE_LIMIT_BYTES: u64 = 16 * 1024 * 1024;

/// Default most bytes of all files in working-tree.patch together (64 MiB): `[provenance]
/// patch-limit`.
pub const DEFAULT_PATCH_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Which changed files go into working-tree.patch (provenance.json `patch-limits`).
///
/// A changed file counts with its size: an untracked file with its size, a changed tracked file
/// with the larger of its size in HEAD and in the working tree (the patch may hold either whole: a
/// deletion holds the old content, a binary change the new). A file over `file_bytes` is left out;
/// so are the files that would take the sum past `total_bytes`, counted in the patch's order
/// (tracked changes by path, then untracked files by path). A file left out is recorded in
/// provenance.json by path, size and sha256 only (`tracked-left-out`, or `untracked` with
/// `in-patch: false`), and said so at run time, by `verify` and by `rerun --at-recorded-revision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PatchLimits {
    /// Most bytes of all files together (`patch-limit`, default 64 MiB).
    pub total_bytes: u64,
    /// Most bytes of one file (`patch-file-limit`, default 16 MiB).
    pub file_bytes: u64,
    /// Where the limits come from: `default` or `manifest` (either key set).
    pub set_by: LimitsSource,
}

/// Where [`PatchLimits`] come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitsSource {
    /// Neither key is in the manifest.
    Default,
    /// `[provenance] patch-limit` or `patch-file-limit` is.
    Manifest,
}

impl Default for PatchLimits {
    fn default() -> Self {
        PatchLimits {
            total_bytes: DEFAULT_PATCH_LIMIT_BYTES,
            file_bytes: DEFAULT_PATCH_FILE_LIMIT_BYTES,
            set_by: LimitsSource::Default,
        }
    }
}

impl PatchLimits {
    /// The limits the manifest's `patch-limit` (`total`) and `patch-file-limit` (`file`) give,
    /// the defaults where a key is absent.
    pub fn new(total: Option<u64>, file: Option<u64>) -> PatchLimits {
        PatchLimits {
            total_bytes: total.unwrap_or(DEFAULT_PATCH_LIMIT_BYTES),
            file_bytes: file.unwrap_or(DEFAULT_PATCH_FILE_LIMIT_BYTES),
            set_by: if total.is_some() || file.is_some() {
                LimitsSource::Manifest
            } else {
                LimitsSource::Default
            },
        }
    }

    /// Counts the files' sizes against the limits in order.
    pub(super) fn counter(self) -> LimitCounter {
        LimitCounter {
            limits: self,
            used: 0,
        }
    }

    /// Why a file of `size` bytes was left out: over the per-file limit, or past the total.
    pub(super) fn why(self, size: u64) -> String {
        if size > self.file_bytes {
            format!(
                "over the {}-byte limit for one file (patch-file-limit)",
                self.file_bytes
            )
        } else {
            format!(
                "past the {}-byte limit for all files of the patch together (patch-limit)",
                self.total_bytes
            )
        }
    }
}

/// Running sum of the sizes taken into the patch ([`PatchLimits::counter`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct LimitCounter {
    limits: PatchLimits,
    used: u64,
}

impl LimitCounter {
    /// Whether a file of `size` bytes goes into the patch (then counted), in the patch's order.
    pub(super) fn take(&mut self, size: u64) -> bool {
        if size > self.limits.file_bytes || self.used.saturating_add(size) > self.limits.total_bytes {
            return false;
        }
        self.used += size;
        true
    }
}

/// The bytes of working-tree.patch: a temporary file shared by the clones of a capture (removed
/// with the last one), or nothing (an empty patch, or a capture read back from provenance.json).
#[derive(Debug, Clone, Default)]
pub struct PatchBytes {
    path: Option<Arc<TempPath>>,
    len: u64,
}

/// Two patches are equal when they have the same length; their content is compared through
/// `patch-sha256`, which every capture records next to them.
impl PartialEq for PatchBytes {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
    }
}

impl Eq for PatchBytes {}

impl PatchBytes {
    /// A patch held by the temporary file `file` (all of it); its descriptor is closed.
    ///
    /// # Errors
    /// I/O errors reading its length.
    pub(super) fn from_temp(file: NamedTempFile) -> io::Result<PatchBytes> {
        let len = file.as_file().metadata()?.len();
        Ok(PatchBytes {
            path: Some(Arc::new(file.into_temp_path())),
            len,
        })
    }

    /// Whether a file holds the bytes: false for an empty patch and for a capture read back from
    /// provenance.json.
    pub(super) fn has_file(&self) -> bool {
        self.path.is_some()
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A reader from the first byte (opens the temporary file).
    ///
    /// # Errors
    /// I/O errors opening it.
    pub fn reader(&self) -> io::Result<PatchReader> {
        let file = match &self.path {
            Some(path) => Some(File::open(&**path)?.take(self.len)),
            None => None,
        };
        Ok(PatchReader { file })
    }

    /// Copies every byte into `out` in blocks; returns the count.
    ///
    /// # Errors
    /// Read and write errors.
    pub fn copy_to(&self, out: &mut dyn Write) -> io::Result<u64> {
        io::copy(&mut self.reader()?, out)
    }

    /// Every byte in memory: for tests and small patches only.
    ///
    /// # Errors
    /// Read errors.
    pub fn read_all(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.reader()?.read_to_end(&mut out)?;
        Ok(out)
    }
}

/// Reads a [`PatchBytes`] from the start ([`PatchBytes::reader`]).
#[derive(Debug)]
pub struct PatchReader {
    file: Option<io::Take<File>>,
}

impl Read for PatchReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.read(buf),
            None => Ok(0),
        }
    }
}

/// Name prefix of the patch files in the temporary folder; the process id follows, then `-` and
/// tempfile's random part.
const SPOOL_PREFIX: &str = "hwr-exp-patch-";

/// A new temporary file for a patch (`hwr-exp-patch-<pid>-XXXXXX` in the temporary folder). The
/// first call of a process first removes the patch files of processes that no longer exist (a
/// runner killed by SIGKILL leaves its file behind).
///
/// # Errors
/// I/O errors creating it.
pub(super) fn spool() -> io::Result<NamedTempFile> {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| sweep(&std::env::temp_dir()));
    tempfile::Builder::new()
        .prefix(&format!("{SPOOL_PREFIX}{}-", std::process::id()))
        .tempfile()
}

/// Removes the patch files in `dir` whose process is gone (`kill(pid, 0)` says no such process);
/// errors are ignored (another user's files, a race with another sweep).
fn sweep(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SPOOL_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok())
            .filter(|&pid| pid > 0)
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Appends all of `from` (from offset 0) to `to` (at its end).
///
/// # Errors
/// I/O errors.
pub(super) fn append(to: &mut File, from: &mut File) -> io::Result<u64> {
    use std::io::Seek;
    from.seek(io::SeekFrom::Start(0))?;
    to.seek(io::SeekFrom::End(0))?;
    io::copy(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_leaves_out_files_over_one_limit_or_past_the_total() {
        let mut c = PatchLimits::new(Some(10), Some(4)).counter();
        assert!(c.take(4));
        assert!(!c.take(5), "over the per-file limit");
        assert!(c.take(4));
        assert!(!c.take(3), "4 + 4 + 3 is past 10");
        assert!(c.take(2));
        assert!(c.take(0));
        assert!(!c.take(1));
        assert_eq!(PatchLimits::new(None, None), PatchLimits::default());
        assert_eq!(PatchLimits::new(None, Some(1)).set_by, LimitsSource::Manifest);
    }

    #[test]
    fn patch_bytes_read_back_what_the_file_holds() {
        let mut f = spool().unwrap();
        f.write_all(b"hello ").unwrap();
        let mut g = spool().unwrap();
        g.write_all(b"world").unwrap();
        append(f.as_file_mut(), g.as_file_mut()).unwrap();
        let path = f.path().to_path_buf();
        let p = PatchBytes::from_temp(f).unwrap();
        assert_eq!(p.len(), 11);
        assert_eq!(p.read_all().unwrap(), b"hello world");
        let clone = p.clone();
        let mut out = Vec::new();
        clone.copy_to(&mut out).unwrap();
        assert_eq!(out, b"hello world");
        assert!(PatchBytes::default().read_all().unwrap().is_empty());
        drop((p, clone));
        assert!(!path.exists(), "removed with the last clone");
    }

    #[test]
    fn the_sweep_removes_the_files_of_processes_that_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has exited and been waited for: its pid names no process (until reused).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mine = dir
            .path()
            .join(format!("{SPOOL_PREFIX}{}-abc", std::process::id()));
        let gone = dir.path().join(format!("{SPOOL_PREFIX}{dead}-abc"));
        let other = dir.path().join("hwr-exp-patch-notapid");
        for p in [&mine, &gone, &other] {
            std::fs::write(p, "x").unwrap();
        }
        sweep(dir.path());
        assert!(mine.exists() && other.exists());
        assert!(!gone.exists());
    }
}
