//! The one atomic write of bundle files (a temporary file renamed over the final name), their one
//! file and folder mode whatever the umask, and the error naming the file: the lowest layer of
//! [`super::write`], [`super::checksums`], [`super::lock`] and [`super::live`].

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::files;

/// Mode of every file and (with the execute bits) folder of a bundle, whatever the umask: bundles
/// are shared and checked in.
pub const FILE_MODE: u32 = 0o644;

/// Mode of the bundle folder, `runs/` and each run folder, whatever the umask.
pub const DIR_MODE: u32 = 0o755;

/// An I/O error on one bundle file or folder, naming it. Carried inside an [`io::Error`] of the
/// same [`io::ErrorKind`] as the underlying error (so callers can still tell `AlreadyExists`,
/// `StorageFull`, `FileTooLarge` ... apart); its message reads `<path>: cannot <action>: <cause>`.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot {action}: {source}", .path.display())]
pub struct FileError {
    /// The file or folder the operation was on (the final name, not a temporary one).
    pub path: PathBuf,
    /// What was being done: `"write"`, `"create folder"`, `"hash"` ...
    pub action: &'static str,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

/// A closure wrapping an [`io::Error`] into a [`FileError`] naming `path`, keeping its kind.
pub(super) fn on<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(io::Error) -> io::Error + 'a {
    move |source| {
        // Already named by a lower layer (a fill callback writing another bundle file): keep it.
        if source.get_ref().is_some_and(|inner| inner.is::<FileError>()) {
            return source;
        }
        io::Error::new(
            source.kind(),
            FileError {
                path: path.to_path_buf(),
                action,
                source,
            },
        )
    }
}

/// Whether an atomic write waits for the bytes to reach the disk before the rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durability {
    /// `fsync` the temporary file before the rename: after a crash the file is the old one or the
    /// complete new one. For the documents written once or at the end (manifest.toml, plan.json,
    /// host.json, provenance files, bundle.json at creation and at the end).
    Synced,
    /// No `fsync` (one per run would cost more than a short run): after a crash of the machine the
    /// file may be empty. For run.json and the interim count updates of bundle.json, which `resume`
    /// recomputes. `resume` refuses a run.json that does not parse, naming it, and deletes nothing
    /// (moving that run's folder away has the run redone).
    Unsynced,
}

/// Writes `bytes` to `path` atomically and durably: a temporary file `.tmp-*` in the same folder
/// is written, `fsync`ed, given mode [`FILE_MODE`] with `fchmod` (so the umask plays no part) and
/// renamed over `path`. A reader sees the old file or the new one, never a partial one.
///
/// # Errors
/// I/O errors creating, writing, syncing, chmodding or renaming the temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// Like [`write_atomic`], with the content produced by `fill` through a buffered writer.
///
/// # Errors
/// As [`write_atomic`], and errors returned by `fill`.
pub fn write_atomic_with(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    replace_file(path, Durability::Synced, fill)
}

/// Serializes `value` as pretty JSON (with a trailing newline) and writes it with [`write_atomic`].
///
/// # Errors
/// As [`write_atomic`]; serialization errors as `InvalidData`.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    write_json(path, Durability::Synced, value)
}

pub(super) fn write_json<T: Serialize>(path: &Path, durability: Durability, value: &T) -> io::Result<()> {
    replace_file(path, durability, |out| {
        serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::from)?;
        out.write_all(b"\n")
    })
}

/// The one atomic-write helper of the bundle (see [`write_atomic`]).
fn replace_file(
    path: &Path,
    durability: Durability,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The temporary file is made here rather than with tempfile, whose errors name the temporary
    // path: the error names `path`, and carries the OS error as is.
    // Made with its final mode where the umask keeps it (no fchmod then), else 0600 and fchmod.
    let made_right = umask_keeps(FILE_MODE);
    let (tmp_path, file) = loop {
        let candidate = dir.join(format!("{TEMPORARY_PREFIX}{:016x}", fastrand::u64(..)));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if made_right { FILE_MODE } else { 0o600 })
            .open(&candidate)
        {
            Ok(f) => break (candidate, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(on(path, "write")(e)),
        }
    };
    let written = (|| -> io::Result<()> {
        let mut out = io::BufWriter::new(file);
        fill(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        if !made_right {
            // File::set_permissions is fchmod(2) on the open file: exact mode, no umask.
            file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        }
        if durability == Durability::Synced {
            file.sync_all()?;
        }
        drop(file);
        fs::rename(&tmp_path, path)
    })();
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp_path);
        on(path, "write")(e)
    })
}

/// Name prefix of the temporary files of atomic writes and of a bundle folder being set up
/// ([`super::BundleWriter::stage`]). A process killed mid-write leaves such a file behind; `list` skips
/// hidden folders, and [`super::BundleWriter::reopen`] removes stale temporary files.
pub const TEMPORARY_PREFIX: &str = ".tmp-";

/// Removes the temporary files ([`TEMPORARY_PREFIX`]) a killed writer left at the top level of the
/// bundle folder `dir` and in its run folders. Only for a bundle whose lock this process holds.
///
/// # Errors
/// I/O errors reading the folders or removing a file, naming the path.
pub fn remove_stale_temporaries(dir: &Path) -> io::Result<()> {
    let mut folders = vec![dir.to_path_buf()];
    let runs = dir.join(files::RUNS);
    if runs.is_dir() {
        for entry in fs::read_dir(&runs).map_err(on(&runs, "read folder"))? {
            let entry = entry.map_err(on(&runs, "read folder"))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push(entry.path());
            }
        }
    }
    for folder in folders {
        remove_temporaries_in(&folder)?;
    }
    Ok(())
}

/// Removes the temporary files ([`TEMPORARY_PREFIX`]) directly in `folder`.
pub(super) fn remove_temporaries_in(folder: &Path) -> io::Result<()> {
    for entry in fs::read_dir(folder).map_err(on(folder, "read folder"))? {
        let entry = entry.map_err(on(folder, "read folder"))?;
        let temporary = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(TEMPORARY_PREFIX));
        if temporary && entry.file_type().is_ok_and(|t| t.is_file()) {
            let path = entry.path();
            fs::remove_file(&path).map_err(on(&path, "remove stale temporary file"))?;
        }
    }
    Ok(())
}

/// Creates the folder `path` (failing when it exists) with mode [`DIR_MODE`] whatever the umask
/// (a `chmod` only where the umask takes bits of it away).
pub(super) fn create_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .mode(DIR_MODE)
        .create(path)
        .and_then(|()| {
            if umask_keeps(DIR_MODE) {
                Ok(())
            } else {
                fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
            }
        })
        .map_err(on(path, "create folder"))
}

/// Whether the process's umask leaves every bit of `mode` (then a file or folder made with
/// `mode` has it exactly, and needs no `chmod`). The umask is read once, from `/proc/self/status`
/// (`Umask:`, Linux 4.7+: reading it with `umask(2)` would change it for a moment for every
/// thread); unknown counts as "no".
pub(crate) fn umask_keeps(mode: u32) -> bool {
    static UMASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let umask = UMASK.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    });
    umask.is_some_and(|u| u & mode == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_json_atomic(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json_atomic(&p, &serde_json::json!({"a": 2})).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\n  \"a\": 2\n}\n");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, FILE_MODE, "{mode:o}");
    }
}
