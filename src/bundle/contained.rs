//! Reading files of a bundle without leaving it and without hanging (DESIGN 5).
//!
//! A bundle is data someone else may have written or edited, so every path taken from a bundle file
//! (a `run-id` of plan.json, the `output` and `sha256` names of run.json, a line of
//! `checksums.sha256`) is checked with [`plain_name`] / [`relative_path`] before use: a plain file
//! name, or `/`-joined plain names, never `..`, `.`, an absolute path or a NUL. Files are then opened
//! with [`open_in`]: each folder on the way with `O_DIRECTORY | O_NOFOLLOW` by `openat(2)` from the
//! bundle folder, the file itself with `O_NOFOLLOW | O_NONBLOCK`, and `fstat(2)` after the open must
//! say "regular file". A symbolic link (to `/dev/zero`, to a file outside the bundle), a FIFO, a
//! device or a folder where a file is expected is an error naming what was found; nothing is read from
//! it. Readers then stream or bound what they read from the regular file they got.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use rustix::fs::{FileType, Mode, OFlags};

/// Why a name taken from a bundle file is not used as a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeName {
    /// The name is empty.
    #[error("empty file name")]
    Empty,
    /// The name would leave its folder or is not a file name (`..`, `.`, contains `/`, absolute).
    #[error("`{0}` is not a plain file name inside the bundle (no `/`, `.` or `..`)")]
    NotPlain(String),
    /// The name contains a NUL character.
    #[error("file name contains a NUL character")]
    Nul,
}

/// Checks that `name` (a `run-id`, an output name, a key of run.json `sha256`) is one plain file
/// name: not empty, not `.` or `..`, no `/`, no NUL.
///
/// # Errors
/// [`UnsafeName`] saying which rule it breaks.
pub fn plain_name(name: &str) -> Result<&str, UnsafeName> {
    if name.is_empty() {
        Err(UnsafeName::Empty)
    } else if name.contains('\0') {
        Err(UnsafeName::Nul)
    } else if name == "." || name == ".." || name.contains('/') {
        Err(UnsafeName::NotPlain(name.to_string()))
    } else {
        Ok(name)
    }
}

/// Checks that `path` (a line of `checksums.sha256`) is a relative path of plain names
/// ([`plain_name`] for each `/`-separated part), so that joined to the bundle folder it stays inside.
///
/// # Errors
/// [`UnsafeName`] for the first part that is not a plain name.
pub fn relative_path(path: &str) -> Result<&str, UnsafeName> {
    if path.is_empty() {
        return Err(UnsafeName::Empty);
    }
    for part in path.split('/') {
        plain_name(part).map_err(|e| match e {
            UnsafeName::Empty => UnsafeName::NotPlain(path.to_string()),
            UnsafeName::NotPlain(_) => UnsafeName::NotPlain(path.to_string()),
            UnsafeName::Nul => UnsafeName::Nul,
        })?;
    }
    Ok(path)
}

/// What `fstat`/`lstat` says a path is, for messages: `a symbolic link`, `a FIFO`, ...
pub fn describe(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a folder",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "not a regular file",
    }
}

fn not_regular(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{what}, not a regular file: not read (bundle readers follow no links and read only regular files)"
        ),
    )
}

/// Opens the folder `dir` given by the user or the runner (symbolic links followed: they chose
/// it), for [`open_regular_at`] and [`open_in`].
///
/// # Errors
/// The `open` error.
pub fn open_folder(dir: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens a file of a bundle with `open`, given `O_NOATIME` to add to its flags, so that reading the
/// file leaves its access time as it was: with the usual `relatime` mount, the first read of a
/// file written since it was last read would otherwise write its inode (the first report of a
/// bundle just run took 10-60% longer than the next one, in the file system's journal). Where
/// the kernel refuses it (`EPERM`: the file is another user's and this one lacks `CAP_FOWNER`),
/// `open` is called again with no flag to add, and so it is for every file after.
///
/// # Errors
/// `open`'s.
fn keeping_atime(open: impl Fn(OFlags) -> rustix::io::Result<OwnedFd>) -> rustix::io::Result<OwnedFd> {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// `O_NOATIME` was refused once: the bundle's other files are opened without it at once.
    static REFUSED: AtomicBool = AtomicBool::new(false);
    if REFUSED.load(Ordering::Relaxed) {
        return open(OFlags::empty());
    }
    match open(OFlags::NOATIME) {
        Err(rustix::io::Errno::PERM) => {
            REFUSED.store(true, Ordering::Relaxed);
            open(OFlags::empty())
        }
        other => other,
    }
}

/// Opens `name` in the folder `at` (from [`open_folder`]) for reading, following no link, and
/// checks with `fstat` that it is a regular file; returns the file and that `fstat`. Opened with
/// `O_NOATIME` (its access time left as it was) unless the kernel refuses that (`EPERM`: another
/// user's file).
///
/// # Errors
/// `InvalidInput` when `name` is a symbolic link, FIFO, device, socket or folder, the message
/// saying which; otherwise the `openat`/`fstat` error (`NotFound` when missing).
pub fn open_regular_at(at: &OwnedFd, name: &Path) -> io::Result<(File, rustix::fs::Stat)> {
    // O_NONBLOCK: opening a FIFO for reading does not wait for a writer; it is refused below.
    let fd = match keeping_atime(|noatime| {
        rustix::fs::openat(
            at,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY | noatime,
            Mode::empty(),
        )
    }) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(not_regular("a symbolic link")),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type != FileType::RegularFile {
        return Err(not_regular(describe(file_type)));
    }
    // O_NONBLOCK stays set: regular files ignore it (reads block on the disk as without it), and
    // clearing it cost one more system call per file read.
    Ok((File::from(fd), stat))
}

/// Opens the regular file `rel` inside the folder `root` for reading: every folder on the way is
/// opened with `O_NOFOLLOW`, the file with `O_NOFOLLOW | O_NONBLOCK`, then `fstat` must say regular
/// file. `root` itself may be a symbolic link (the user named it).
///
/// # Errors
/// `InvalidInput` when `rel` is not made of plain names ([`relative_path`]) or when a part of it is
/// a symbolic link, FIFO, device, socket or (for the last part) folder, the message saying which;
/// otherwise the `openat`/`fstat` error (`NotFound` when missing).
pub fn open_in(root: &Path, rel: &Path) -> io::Result<File> {
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a path inside the bundle", rel.display()),
            )),
        })
        .collect::<io::Result<_>>()?;
    let Some((last, folders)) = parts.split_last() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
    };
    let mut at = open_folder(root)?;
    for folder in folders {
        at = enter(&at, Path::new(folder))?;
    }
    open_regular_at(&at, Path::new(last)).map(|(f, _)| f)
}

/// Opens the folder `name` inside the folder `at` with `O_DIRECTORY | O_NOFOLLOW` (one step of
/// [`open_in`]).
///
/// # Errors
/// `InvalidInput` when `name` is a symbolic link or not a folder, the message saying what it is;
/// otherwise the `openat` error (`NotFound` when missing).
pub fn enter(at: &OwnedFd, name: &Path) -> io::Result<OwnedFd> {
    match rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
            let what = rustix::fs::statat(at, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .map(|s| describe(FileType::from_raw_mode(s.st_mode)))
                .unwrap_or("not a folder");
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is {what}, not a folder: not entered (bundle readers follow no links)",
                    name.display()
                ),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens the regular file at `path` for reading without following a symbolic link at its last
/// part (for files named by the user, such as a document passed to [`crate::bundle::read::read_versioned`]).
///
/// # Errors
/// As [`open_in`] for the last part.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            },
            n,
        ),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a file path", path.display()),
            ));
        }
    };
    open_regular_at(&open_folder(dir)?, Path::new(name)).map(|(f, _)| f)
}

/// Reads at most `limit` bytes of `file`.
///
/// # Errors
/// `InvalidData` when the file holds more than `limit` bytes; read errors.
pub fn read_bounded(file: File, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes: not read"),
        ));
    }
    Ok(bytes)
}

/// Reads the regular file `rel` (plain names joined by `/`, checked by the caller) beneath the
/// folder `at` whole when it is shorter than `limit` bytes, the quick way: one `openat2(2)` with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` (no link followed anywhere on
/// the way, nothing outside `at` reached), `fstat`, a `read` of the size `fstat` gave (and a byte
/// more, to see a file that grew), `close`: four system calls where [`open_in`] makes one `openat` per folder on the way and a `close` for
/// each. A report of 100,000 runs reads 200,000 files this way.
///
/// The file is opened with `O_NOATIME`, so that reading it leaves its access time as it was (with
/// `relatime`, the first read of a file written since it was last read writes its inode); where
/// the kernel refuses that (`EPERM`: another user's file, no `CAP_FOWNER`), without it.
///
/// `Ok(None)` when the quick way cannot answer: the kernel has no `openat2` (before Linux 5.6),
/// the file is missing, a link or something not a regular file is on the way, or the file is
/// `limit` bytes or longer. The caller then goes the careful way ([`open_in`],
/// [`open_regular_at`]), which says what is wrong in its own words.
///
/// # Errors
/// A read error of the opened regular file.
pub fn read_small_beneath(at: &OwnedFd, rel: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    use rustix::fs::ResolveFlags;
    let opened = keeping_atime(|noatime| {
        rustix::fs::openat2(
            at,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY | noatime,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
    });
    let fd = match opened {
        Ok(fd) => fd,
        Err(_) => return Ok(None),
    };
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_size as u64 >= limit {
        return Ok(None);
    }
    // One byte more than fstat said, so that a file that grew since is seen to have grown.
    let mut bytes = vec![0; stat.st_size as usize + 1];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::io::read(&fd, &mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                // All fstat said is there: no further read to see the end (a finished run's
                // files no longer change).
                if filled == stat.st_size as usize {
                    break;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if filled > stat.st_size as usize {
        // It grew while being read: the careful way reads it to its end.
        return Ok(None);
    }
    bytes.truncate(filled);
    Ok(Some(bytes))
}

/// SHA-256 (64 lowercase hex digits) of the regular file `rel` inside `root`, opened with
/// [`open_in`] and streamed in 64 KiB blocks.
///
/// # Errors
/// As [`open_in`]; read errors.
pub fn sha256_in(root: &Path, rel: &Path) -> io::Result<String> {
    crate::digest::sha256_reader(open_in(root, rel)?)
}

/// Helpers for tests of what reads bundle files: files that are no regular files, and calls
/// that must return rather than block.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    /// Makes a FIFO at `path` (mode 0644).
    pub fn fifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }

    /// `f()` run on a thread of its own; panics saying `what` when it has not returned within
    /// 20 seconds (a FIFO opened for reading waits for a writer).
    pub fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{what} did not return within 20 s"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn names() {
        assert!(plain_name("0000-a-r1").is_ok());
        assert!(plain_name("..").is_err());
        assert!(plain_name(".").is_err());
        assert!(plain_name("").is_err());
        assert!(plain_name("a/b").is_err());
        assert!(plain_name("/etc").is_err());
        assert!(plain_name("a\0").is_err());
        assert!(relative_path("runs/x/run.json").is_ok());
        assert!(relative_path("runs/../x").is_err());
        assert!(relative_path("/abs").is_err());
        assert!(relative_path("a//b").is_err());
    }

    #[test]
    fn links_fifos_and_devices_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("runs")).unwrap();
        std::fs::write(root.join("runs/f"), "x").unwrap();
        assert_eq!(
            sha256_in(root, Path::new("runs/f")).unwrap(),
            crate::digest::sha256_bytes(b"x")
        );
        symlink("/dev/zero", root.join("runs/zero")).unwrap();
        let e = open_in(root, Path::new("runs/zero")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        crate::bundle::contained::testing::fifo(&root.join("runs/fifo"));
        let e = open_in(root, Path::new("runs/fifo")).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        symlink("/etc", root.join("up")).unwrap();
        let e = open_in(root, Path::new("up/hostname")).unwrap_err();
        assert!(e.to_string().contains("symbolic link, not a folder"), "{e}");
        assert!(open_in(root, Path::new("../x")).is_err());
        assert!(
            open_in(root, Path::new("runs"))
                .unwrap_err()
                .to_string()
                .contains("a folder")
        );
        assert_eq!(
            open_in(root, Path::new("runs/none")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(open_regular(&root.join("runs/zero")).is_err());
        assert!(open_regular(&root.join("runs/f")).is_ok());
        let big = read_bounded(open_regular(&root.join("runs/f")).unwrap(), 0).unwrap_err();
        assert_eq!(big.kind(), io::ErrorKind::InvalidData);
    }

    /// The quick whole-file read answers only for a regular file reached without a link and
    /// shorter than the limit; everything else is left to the careful way (`None`).
    #[test]
    fn the_quick_read_leaves_links_fifos_and_large_files_to_the_careful_way() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("runs/a")).unwrap();
        std::fs::write(root.join("runs/a/run.json"), "{\"format\": 1}\n").unwrap();
        std::fs::write(root.join("runs/a/empty"), "").unwrap();
        let runs = enter(&open_folder(root).unwrap(), Path::new("runs")).unwrap();
        let quick = |rel: &str, limit| read_small_beneath(&runs, Path::new(rel), limit).unwrap();
        assert_eq!(quick("a/run.json", 1 << 20).unwrap(), b"{\"format\": 1}\n");
        assert_eq!(quick("a/empty", 1 << 20).unwrap(), b"");
        // Exactly the limit is too long; one byte under is read.
        assert_eq!(quick("a/run.json", 14), None);
        assert_eq!(quick("a/run.json", 15).unwrap().len(), 14);
        // A link anywhere on the way, to a file or to a folder, inside the bundle or out of it.
        symlink(root.join("runs/a"), root.join("runs/b")).unwrap();
        symlink("/etc/hostname", root.join("runs/a/out.json")).unwrap();
        symlink("run.json", root.join("runs/a/again.json")).unwrap();
        assert_eq!(quick("b/run.json", 1 << 20), None);
        assert_eq!(quick("a/out.json", 1 << 20), None);
        assert_eq!(quick("a/again.json", 1 << 20), None);
        // Not a regular file, missing, or leaving the folder.
        crate::bundle::contained::testing::fifo(&root.join("runs/a/fifo"));
        assert_eq!(quick("a/fifo", 1 << 20), None);
        assert_eq!(quick("a", 1 << 20), None);
        assert_eq!(quick("a/none", 1 << 20), None);
        assert_eq!(quick("../runs/a/run.json", 1 << 20), None);
    }

    /// The quick and the careful read leave a file's access time as it was (`O_NOATIME`), and
    /// still read a file of another user, which the kernel does not let be opened so, each its
    /// own way (run as root, the test reads it on a thread of an unprivileged user: uids are per
    /// thread).
    #[test]
    fn reading_leaves_access_times_and_reads_other_users_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("runs/a")).unwrap();
        let file = root.join("runs/a/run.json");
        std::fs::write(&file, "{}\n").unwrap();
        // Accessed before it was modified: a relatime mount updates that at the next read.
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_accessed(long_ago))
            .unwrap();
        let runs = enter(&open_folder(root).unwrap(), Path::new("runs")).unwrap();
        let rel = Path::new("a/run.json");
        assert_eq!(read_small_beneath(&runs, rel, 1 << 20).unwrap().unwrap(), b"{}\n");
        assert_eq!(std::fs::metadata(&file).unwrap().accessed().unwrap(), long_ago);
        // The careful way too (what `verify` hashes every file with).
        let careful = read_bounded(open_in(root, Path::new("runs/a/run.json")).unwrap(), 1 << 20).unwrap();
        assert_eq!(careful, b"{}\n");
        assert_eq!(std::fs::metadata(&file).unwrap().accessed().unwrap(), long_ago);

        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped the other user's file: needs root, to read as another user");
            return;
        }
        for d in [root, &root.join("runs"), &root.join("runs/a")] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let read = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let nobody = rustix::process::Gid::from_raw(65534);
                    rustix::thread::set_thread_res_gid(nobody, nobody, nobody).unwrap();
                    let nobody = rustix::process::Uid::from_raw(65534);
                    rustix::thread::set_thread_res_uid(nobody, nobody, nobody).unwrap();
                    let quick = read_small_beneath(&runs, rel, 1 << 20).unwrap();
                    let careful =
                        open_in(root, Path::new("runs/a/run.json")).map(|f| read_bounded(f, 1 << 20));
                    assert_eq!(careful.unwrap().unwrap(), b"{}\n");
                    quick
                })
                .join()
                .unwrap()
        });
        assert_eq!(read.as_deref(), Some(&b"{}\n"[..]));
    }
}
