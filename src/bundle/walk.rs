//! Walking a folder tree relative to open folder descriptors ([`walk`]): no path is looked up
//! twice, no symbolic link is followed, and a tree of any depth is walked (a path longer than
//! `PATH_MAX` is never used). Shared by `checksums.sha256` ([`super::checksums`]) and the listing
//! of a run's artifacts ([`super::artifacts`]); it imports neither.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::contained::{open_folder, open_regular_at};

/// An entry met by [`walk`]: its path relative to the walk's root, its type (from `readdir`, or
/// `lstat` where the file system does not say; never following a link), and the open folder it
/// is in.
pub struct Walked<'a> {
    /// Path relative to the root of the walk.
    pub rel: &'a Path,
    /// The entry's own type (a symbolic link is a symbolic link).
    pub kind: FileType,
    folder: &'a OwnedFd,
    name: &'a OsStr,
}

impl Walked<'_> {
    /// Opens the entry for reading through its folder's descriptor ([`open_regular_at`]: no link
    /// followed, regular files only); returns the file and its `fstat`.
    ///
    /// # Errors
    /// As [`open_regular_at`].
    pub fn open_regular(&self) -> io::Result<(fs::File, rustix::fs::Stat)> {
        open_regular_at(self.folder, Path::new(self.name))
    }

    /// The target of the entry, a symbolic link, as written (`readlinkat` through its folder's
    /// descriptor; nothing followed).
    ///
    /// # Errors
    /// `readlinkat` errors (`EINVAL` when the entry is not a link).
    pub fn read_link(&self) -> io::Result<std::ffi::OsString> {
        let target = rustix::fs::readlinkat(self.folder, self.name, Vec::new())?;
        Ok(OsStr::from_bytes(target.to_bytes()).to_os_string())
    }
}

/// Visits every entry under `dir` (no symbolic link followed), folders before their contents,
/// siblings in byte order of their names, so relative paths come in [`Path`] order. Each folder is
/// read through a descriptor opened relative to its parent's (`O_NOFOLLOW`), so no path is looked
/// up twice; `dir` itself may be a symbolic link (the caller named it).
///
/// # Errors
/// I/O errors opening or listing a folder, naming the folder (`DIR/REL: open folder: ...`);
/// errors returned by `visit`, as they are.
pub fn walk(dir: &Path, visit: &mut dyn FnMut(&Walked<'_>) -> io::Result<()>) -> io::Result<()> {
    let named = |rel: &Path, what: &str| {
        let path = dir.join(rel);
        let what = what.to_string();
        move |e: io::Error| io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
    };
    type Listing = std::vec::IntoIter<(std::ffi::OsString, FileType)>;
    let list = |folder: &OwnedFd| -> io::Result<Listing> {
        let mut entries = Vec::new();
        for entry in rustix::fs::Dir::read_from(folder)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let kind = match entry.file_type() {
                FileType::Unknown => FileType::from_raw_mode(
                    rustix::fs::statat(folder, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?.st_mode,
                ),
                kind => kind,
            };
            entries.push((name, kind));
        }
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok(entries.into_iter())
    };
    let enter = |at: &OwnedFd, name: &OsStr| -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            at,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    };
    let root = open_folder(dir).map_err(named(Path::new(""), "open folder"))?;
    let first = list(&root).map_err(named(Path::new(""), "list folder"))?;
    let mut stack: Vec<(PathBuf, Option<OwnedFd>, Listing)> = vec![(PathBuf::new(), Some(root), first)];
    while let Some((rel, folder, entries)) = stack.last_mut() {
        let Some((name, kind)) = entries.next() else {
            stack.pop();
            continue;
        };
        let folder: &OwnedFd = match folder {
            Some(open) => open,
            None => {
                // Closed while deeper folders were walked: open it again from the top, every step
                // without following a link.
                let mut at = open_folder(dir).map_err(named(Path::new(""), "open folder"))?;
                for part in rel.iter() {
                    at = enter(&at, part).map_err(named(rel, "open folder again"))?;
                }
                folder.insert(at)
            }
        };
        let path = rel.join(&name);
        visit(&Walked {
            rel: &path,
            kind,
            folder,
            name: &name,
        })?;
        if kind == FileType::Directory {
            let inner = enter(folder, &name).map_err(named(&path, "open folder"))?;
            let entries = list(&inner).map_err(named(&path, "list folder"))?;
            // At most OPEN_FOLDERS descriptors: the one of the folder that many levels up is
            // closed (a deep tree must not exhaust the descriptor limit).
            if let Some(far) = stack.len().checked_sub(OPEN_FOLDERS) {
                stack[far].1 = None;
            }
            stack.push((path, Some(inner), entries));
        }
    }
    Ok(())
}

/// Most folder descriptors [`walk`] keeps open at once, one per level from the folder it is in
/// upwards; a folder above that is opened again when the walk comes back to it.
const OPEN_FOLDERS: usize = 32;
