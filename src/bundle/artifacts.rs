//! Files a run wrote into its own folder (`{run-dir}`), listed in run.json `artifacts`, and the
//! files of earlier attempts kept under `attempts/<n>/` (DESIGN 5).
//!
//! Every entry is looked at with `lstat` and never followed: a symlink is recorded with its
//! target, a FIFO, socket or device by its kind only (never opened, so a FIFO cannot block the
//! runner or `verify`); a regular file is opened with `O_NOFOLLOW | O_NONBLOCK` and checked to
//! still be a regular file before it is hashed. Folders are recorded and descended into,
//! relative to open folder descriptors ([`walk::walk`]), so a folder of any depth is listed
//! and checked (a path longer than `PATH_MAX` is never looked up), and every error names its path.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::walk::{self, Walked};

/// The folder of a run folder that holds earlier attempts (`attempts/<n>/`), reserved for the
/// runner.
pub const ATTEMPTS: &str = "attempts";

/// What an entry of a run folder is (`lstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArtifactKind {
    /// A regular file: size and sha256 recorded.
    File,
    /// A folder: its entries are listed too.
    Directory,
    /// A symbolic link: its target recorded, never followed.
    Symlink,
    /// A named pipe: never opened.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

impl ArtifactKind {
    /// The kind of a `readdir`/`lstat` file type.
    fn of_raw(t: rustix::fs::FileType) -> ArtifactKind {
        use rustix::fs::FileType as T;
        match t {
            T::Symlink => ArtifactKind::Symlink,
            T::Directory => ArtifactKind::Directory,
            T::Fifo => ArtifactKind::Fifo,
            T::Socket => ArtifactKind::Socket,
            T::CharacterDevice => ArtifactKind::CharDevice,
            T::BlockDevice => ArtifactKind::BlockDevice,
            _ => ArtifactKind::File,
        }
    }

    fn of(t: fs::FileType) -> ArtifactKind {
        if t.is_symlink() {
            ArtifactKind::Symlink
        } else if t.is_dir() {
            ArtifactKind::Directory
        } else if t.is_fifo() {
            ArtifactKind::Fifo
        } else if t.is_socket() {
            ArtifactKind::Socket
        } else if t.is_char_device() {
            ArtifactKind::CharDevice
        } else if t.is_block_device() {
            ArtifactKind::BlockDevice
        } else {
            ArtifactKind::File
        }
    }

    /// The kebab-case word, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::File => "file",
            ArtifactKind::Directory => "directory",
            ArtifactKind::Symlink => "symlink",
            ArtifactKind::Fifo => "fifo",
            ArtifactKind::Socket => "socket",
            ArtifactKind::CharDevice => "char-device",
            ArtifactKind::BlockDevice => "block-device",
        }
    }
}

/// One entry of run.json `artifacts` (or of an earlier attempt's `files`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Artifact {
    /// Path relative to the folder listed, `/`-separated (`profile.txt`, `traces/t1.bin`);
    /// readable: a name that is not UTF-8 has its exact bytes in `name_bytes`.
    pub name: String,
    /// The exact bytes of `name` as hex (`name-bytes`, [`crate::names`]), only when they are not
    /// UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_bytes: Option<crate::names::NameBytes>,
    /// What it is.
    pub kind: ArtifactKind,
    /// Size in bytes, for a regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// sha256 (lowercase hex) of the bytes, for a regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The link's target as written (`readlink`), for a symlink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Artifact {
    /// The name's exact bytes as a relative path (`name_bytes` when present).
    pub fn path(&self) -> PathBuf {
        crate::names::path_of(&self.name, self.name_bytes.as_ref())
    }
}

/// Files of one earlier attempt of a run, kept under `attempts/<attempt>/` by `resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EarlierAttempt {
    /// 1-based attempt number (the folder's name).
    pub attempt: u32,
    /// Every entry of the folder, names relative to it (its run.json, output, stderr.log ...).
    pub files: Vec<Artifact>,
}

/// Describes the entry `path` (named `name` in the listing) without following it.
///
/// # Errors
/// I/O errors of `lstat`, `readlink`, or opening and reading a regular file.
pub fn describe(path: &Path, name: String) -> io::Result<Artifact> {
    let meta = fs::symlink_metadata(path)?;
    let kind = ArtifactKind::of(meta.file_type());
    let mut artifact = Artifact {
        name,
        name_bytes: None,
        kind,
        size: None,
        sha256: None,
        target: None,
    };
    match kind {
        ArtifactKind::File => {
            let (size, sha) = hash_regular_file(path)?;
            artifact.size = Some(size);
            artifact.sha256 = Some(sha);
        }
        ArtifactKind::Symlink => {
            artifact.target = Some(fs::read_link(path)?.to_string_lossy().into_owned());
        }
        _ => {}
    }
    Ok(artifact)
}

/// Size and sha256 of the regular file `path`, opened without following a symlink and without
/// blocking on a FIFO swapped in meanwhile.
///
/// # Errors
/// I/O errors; `InvalidData` when `path` is no longer a regular file.
pub fn hash_regular_file(path: &Path) -> io::Result<(u64, String)> {
    let file = fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a regular file"));
    }
    hash_open_file(file)
}

/// Size and sha256 of the open file `file`, read to its end in 64 KiB blocks.
///
/// # Errors
/// Read errors.
fn hash_open_file(mut file: fs::File) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((
        size,
        hasher.finalize().iter().map(|b| format!("{b:02x}")).collect(),
    ))
}

/// Every entry under `dir`, recursively, as `/`-separated relative names in sorted order;
/// top-level names in `skip` are left out (with everything under them). Symlinks to folders are
/// not descended into. Folders are read through descriptors opened relative to their parent
/// ([`walk`]), so a tree of any depth is listed (a path longer than `PATH_MAX` is never looked
/// up); the paths returned may be too long to open.
///
/// # Errors
/// I/O errors reading a folder, naming it.
pub fn list_tree(dir: &Path, skip: &[&str]) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    walk(dir, skip, &mut |name, entry| {
        out.push((name.to_string(), dir.join(entry.rel)));
        Ok(())
    })?;
    out.sort();
    Ok(out)
}

/// Visits every entry under `dir` but the top-level names in `skip` (and what is under them) with
/// its `/`-separated relative name ([`walk::walk`]: relative to open folders, no link
/// followed, any depth).
fn walk(
    dir: &Path,
    skip: &[&str],
    visit: &mut dyn FnMut(&str, &Walked<'_>) -> io::Result<()>,
) -> io::Result<()> {
    walk::walk(dir, &mut |entry| {
        let mut parts = entry.rel.components();
        let top = parts.next().map(|c| c.as_os_str().to_string_lossy());
        if top.is_some_and(|top| skip.contains(&top.as_ref())) {
            return Ok(());
        }
        let name = entry.rel.to_string_lossy();
        visit(&name, entry)
    })
}

/// Describes the entry met by the walk as `name` ([`describe`] through its folder's descriptor).
///
/// # Errors
/// I/O errors of `readlinkat`, or opening and reading a regular file.
fn describe_walked(entry: &Walked<'_>, name: String) -> io::Result<Artifact> {
    let kind = ArtifactKind::of_raw(entry.kind);
    let mut artifact = Artifact {
        name,
        name_bytes: crate::names::NameBytes::if_needed(crate::names::path_bytes(entry.rel)),
        kind,
        size: None,
        sha256: None,
        target: None,
    };
    match kind {
        ArtifactKind::File => {
            let (file, _) = entry.open_regular()?;
            let (size, sha) = hash_open_file(file)?;
            artifact.size = Some(size);
            artifact.sha256 = Some(sha);
        }
        ArtifactKind::Symlink => {
            artifact.target = Some(entry.read_link()?.to_string_lossy().into_owned());
        }
        _ => {}
    }
    Ok(artifact)
}

/// Describes every entry under `dir` but the top-level names in `skip`, in name order, each read
/// through its folder's descriptor (any depth).
///
/// # Errors
/// I/O errors reading a folder or an entry, naming its path.
pub fn scan(dir: &Path, skip: &[&str]) -> io::Result<Vec<Artifact>> {
    let mut out = Vec::new();
    walk(dir, skip, &mut |name, entry| {
        let artifact = describe_walked(entry, name.to_string())
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(name).display())))?;
        out.push(artifact);
        Ok(())
    })?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The earlier attempts kept in the run folder `run_dir` (`attempts/<n>/`, numeric names only),
/// in attempt order, with their files described.
///
/// # Errors
/// I/O errors reading `attempts/` or describing its files (a missing `attempts/` is no error).
pub fn earlier_attempts(run_dir: &Path) -> io::Result<Vec<EarlierAttempt>> {
    let folder = run_dir.join(ATTEMPTS);
    let entries = match fs::read_dir(&folder) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut attempts = Vec::new();
    for entry in entries {
        let entry = entry?;
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
            && entry.file_type()?.is_dir()
        {
            attempts.push(EarlierAttempt {
                attempt: n,
                files: scan(&entry.path(), &[])?,
            });
        }
    }
    attempts.sort_by_key(|a| a.attempt);
    Ok(attempts)
}

/// What the run folder `run_dir` holds besides the runner's own files `own` (top-level names):
/// the run's artifacts ([`scan`]) and, when there is an `attempts/` folder, the earlier attempts
/// ([`earlier_attempts`]); `attempts/` itself is then no artifact. One listing of the folder.
///
/// # Errors
/// As [`scan`] and [`earlier_attempts`].
pub fn scan_run_folder(run_dir: &Path, own: &[&str]) -> io::Result<(Vec<Artifact>, Vec<EarlierAttempt>)> {
    let mut artifacts = scan(run_dir, own)?;
    let attempts_dir = artifacts
        .iter()
        .any(|a| a.name == ATTEMPTS && a.kind == ArtifactKind::Directory);
    if !attempts_dir {
        return Ok((artifacts, Vec::new()));
    }
    let earlier = earlier_attempts(run_dir)?;
    let inside = format!("{ATTEMPTS}/");
    artifacts.retain(|a| a.name != ATTEMPTS && !a.name.starts_with(&inside));
    Ok((artifacts, earlier))
}

/// Compares the entries `listed` with what is under `dir` now. Returns `(path, problem)` for
/// each listed entry that is missing, of another kind, or has other bytes or another target.
/// Nothing is followed or opened but regular files; the folder is walked once, relative to open
/// folders, so entries at any depth are checked. A folder that cannot be read is one problem
/// naming it (the entries under it are then not called missing).
pub fn check(dir: &Path, listed: &[Artifact]) -> Vec<(PathBuf, String)> {
    let mut problems = Vec::new();
    // Matched by exact name (bytes): a name that is not UTF-8 is recorded with `name-bytes`.
    let wanted: std::collections::HashMap<PathBuf, &Artifact> =
        listed.iter().map(|a| (a.path(), a)).collect();
    let mut seen = std::collections::HashSet::new();
    let walked = walk(dir, &[], &mut |_, entry| {
        let Some(want) = wanted.get(entry.rel) else {
            return Ok(());
        };
        seen.insert(entry.rel.to_path_buf());
        let path = dir.join(entry.rel);
        match describe_walked(entry, want.name.clone()) {
            Ok(got) => {
                if let Some(p) = difference(&got, want) {
                    problems.push((path, p));
                }
            }
            Err(e) => problems.push((path, format!("cannot read: {e}"))),
        }
        Ok(())
    });
    match walked {
        Ok(()) => {
            for rel in listed.iter().map(Artifact::path) {
                if !seen.contains(&rel) {
                    problems.push((dir.join(rel), "listed in run.json but missing".to_string()));
                }
            }
        }
        Err(e) => problems.push((dir.to_path_buf(), format!("cannot read: {e}"))),
    }
    problems
}

/// How the entry found, `got`, differs from the one recorded, `want`, if it does.
fn difference(got: &Artifact, want: &Artifact) -> Option<String> {
    if got.kind != want.kind {
        Some(format!(
            "is a {}, run.json records a {}",
            got.kind.as_str(),
            want.kind.as_str()
        ))
    } else if got.size != want.size {
        Some(format!(
            "size {} bytes differs from {} recorded in run.json",
            got.size.unwrap_or(0),
            want.size.unwrap_or(0)
        ))
    } else if got.sha256 != want.sha256 {
        Some(format!(
            "sha256 {} differs from {} recorded in run.json",
            got.sha256.clone().unwrap_or_default(),
            want.sha256.clone().unwrap_or_default()
        ))
    } else if got.target != want.target {
        Some(format!(
            "points to {} instead of {} recorded in run.json",
            got.target.clone().unwrap_or_default(),
            want.target.clone().unwrap_or_default()
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_without_following_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("a.txt"), "data\n").unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        fs::write(d.join("sub/b"), "x").unwrap();
        std::os::unix::fs::symlink("/nonexistent", d.join("dangling")).unwrap();
        std::os::unix::fs::symlink(d.join("sub"), d.join("to-sub")).unwrap();
        crate::bundle::contained::testing::fifo(&d.join("fifo"));
        fs::write(d.join("skipped"), "").unwrap();
        let listed = scan(d, &["skipped"]).unwrap();
        let names: Vec<&str> = listed.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["a.txt", "dangling", "fifo", "sub", "sub/b", "to-sub"]);
        assert_eq!(listed[0].size, Some(5));
        assert_eq!(listed[1].kind, ArtifactKind::Symlink);
        assert_eq!(listed[1].target.as_deref(), Some("/nonexistent"));
        assert_eq!(listed[2].kind, ArtifactKind::Fifo);
        assert_eq!(listed[3].kind, ArtifactKind::Directory);
        assert_eq!(
            listed[5].kind,
            ArtifactKind::Symlink,
            "not followed into the folder"
        );
        assert!(check(d, &listed).is_empty());

        fs::write(d.join("sub/b"), "y").unwrap();
        fs::remove_file(d.join("fifo")).unwrap();
        fs::write(d.join("fifo"), "").unwrap();
        let problems = check(d, &listed);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].1.contains("is a file, run.json records a fifo"),
            "{problems:?}"
        );
        assert!(problems[1].1.contains("sha256"), "{problems:?}");
    }

    #[test]
    fn earlier_attempts_in_order() {
        let dir = tempfile::tempdir().unwrap();
        assert!(earlier_attempts(dir.path()).unwrap().is_empty());
        for n in ["2", "1", "notes"] {
            fs::create_dir_all(dir.path().join(ATTEMPTS).join(n)).unwrap();
        }
        fs::write(dir.path().join("attempts/1/out.json"), "{}").unwrap();
        let a = earlier_attempts(dir.path()).unwrap();
        assert_eq!(a.iter().map(|a| a.attempt).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(a[0].files[0].name, "out.json");
    }
}
