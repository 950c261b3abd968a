//! What a capture leaves for the after-run shortcut of [`super::quiet`]: the start time, the
//! watched configuration files absent then, the ignored folders and the index's paths.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// What the before capture leaves for the after-run shortcut (not serialised: a snapshot read
/// back from provenance.json has none, and the after capture is then the full one).
#[derive(Debug, Clone)]
pub(super) struct Mark {
    /// When the capture started (before its `git status`).
    pub(super) start: SystemTime,
    /// The watched configuration files absent when the capture started.
    absent: Vec<PathBuf>,
    /// The directories `git status --ignored=matching` reported ignored (relative, no slash).
    pub(super) ignored_dirs: Vec<Vec<u8>>,
    /// Every path of the index, as read during the capture; `None`: not read.
    pub(super) tracked: Option<Paths>,
    /// The index holds a gitlink (a submodule).
    pub(super) gitlink: bool,
}

/// Paths as bytes, one after another in one buffer (an index's 100,000 paths are two
/// allocations, not 100,000).
#[derive(Debug, Clone, Default)]
pub(super) struct Paths {
    /// The paths' bytes, concatenated.
    bytes: Vec<u8>,
    /// Where each path ends in `bytes`.
    ends: Vec<usize>,
}

impl Paths {
    /// Adds `path` at the end.
    pub(super) fn push(&mut self, path: &[u8]) {
        self.bytes.extend_from_slice(path);
        self.ends.push(self.bytes.len());
    }

    /// The paths in the order they were pushed.
    pub(super) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.bytes[start..end])
    }
}

/// A [`Mark`] inside a [`Snapshot`]: shared by clones, and equal to every other (it is no part
/// of the recorded state).
#[derive(Debug, Clone, Default)]
pub struct Quiet(pub(super) Option<Arc<Mark>>);

impl PartialEq for Quiet {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Quiet {}

/// Margin for a ctime with sub-second digits (a nanosecond file system): the kernel's coarse
/// clock lags the one [`SystemTime::now`] reads by at most one tick (10 ms at 100 Hz).
pub(super) const FINE_MARGIN: Duration = Duration::from_millis(50);
/// Margin for a ctime of whole seconds (a file system that keeps seconds, or two seconds).
const COARSE_MARGIN: Duration = Duration::from_secs(3);

/// File systems (statfs `f_type`) whose ctimes the local kernel sets: ext2/3/4, XFS, Btrfs,
/// tmpfs, overlayfs, ZFS, F2FS, bcachefs. Network file systems take the server's clock.
const LOCAL_FILE_SYSTEMS: &[u64] = &[
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0x794C_7630,
    0x2FC1_2FC1,
    0xF2F5_2010,
    0xCA45_1A4E,
];

/// File systems whose folders' link count is 2 plus their subfolders: ext2/3/4, XFS, tmpfs, F2FS
/// (Btrfs and merged overlayfs folders say 1, and are read instead).
pub(super) const NLINK_COUNTS_SUBFOLDERS: &[u64] = &[0xEF53, 0x5846_5342, 0x0102_1994, 0xF2F5_2010];

impl Mark {
    /// Starts a mark for a capture of the repository whose git folder is `git_dir`: the time,
    /// and which watched configuration files are absent now. Call before the capture's
    /// `git status`.
    pub(super) fn start(git_dir: &Path) -> Mark {
        let start = SystemTime::now();
        let absent = watched(git_dir)
            .into_iter()
            .filter(|p| matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound))
            .collect();
        Mark {
            start,
            absent,
            ignored_dirs: Vec::new(),
            tracked: None,
            gitlink: false,
        }
    }

    /// `meta`'s ctime is older than the start of the capture by the margin.
    pub(super) fn settled(&self, meta: &std::fs::Metadata) -> bool {
        self.settled_at(meta.ctime(), meta.ctime_nsec())
    }

    /// A ctime of `secs` seconds and `nanos` nanoseconds since the epoch is older than the start
    /// of the capture by the margin.
    pub(super) fn settled_at(&self, secs: i64, nanos: i64) -> bool {
        let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
            return false;
        };
        let margin = if nanos == 0 { COARSE_MARGIN } else { FINE_MARGIN };
        UNIX_EPOCH + Duration::new(secs, nanos) + margin < self.start
    }

    /// `path` exists and is settled, or is missing now and was missing when the capture started
    /// (`absent`), on a local file system.
    pub(super) fn watched_unchanged(&self, path: &Path) -> bool {
        match self.path_settled(path) {
            Ok(settled) => settled,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.absent.iter().any(|a| a == path),
            Err(_) => false,
        }
    }

    /// `path` is settled on a local file system, and so, when it is a symbolic link, is the file
    /// it names (the one git reads; a dangling link is `NotFound`).
    ///
    /// # Errors
    /// `lstat`'s or `stat`'s.
    pub(super) fn path_settled(&self, path: &Path) -> std::io::Result<bool> {
        let meta = std::fs::symlink_metadata(path)?;
        if !(self.settled(&meta) && local(path)) {
            return Ok(false);
        }
        if meta.file_type().is_symlink() {
            return Ok(self.settled(&std::fs::metadata(path)?));
        }
        Ok(true)
    }
}

/// The file system holding `path` is one of [`LOCAL_FILE_SYSTEMS`].
pub(super) fn local(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| LOCAL_FILE_SYSTEMS.contains(&(s.f_type as u64)))
}

/// The files git reads for a status besides the working tree and the objects: the index, HEAD,
/// packed refs, replacement refs and grafts, the repository's, the global and the system
/// configuration, excludes and attributes (`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_SYSTEM`,
/// `GIT_CONFIG_NOSYSTEM`, `XDG_CONFIG_HOME` and `HOME` as git reads them). Files the
/// configuration names (`core.excludesFile`, `core.attributesFile`) are added by the check.
pub(super) fn watched(git_dir: &Path) -> Vec<PathBuf> {
    let common = std::fs::read(git_dir.join("commondir")).map_or_else(
        |_| git_dir.to_path_buf(),
        |c| git_dir.join(OsStr::from_bytes(c.trim_ascii())),
    );
    let mut files = vec![
        git_dir.join("index"),
        git_dir.join("HEAD"),
        git_dir.join("config.worktree"),
        common.join("config"),
        common.join("packed-refs"),
        common.join("refs/replace"),
        common.join("info/grafts"),
        common.join("info/exclude"),
        common.join("info/attributes"),
    ];
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let xdg = env("XDG_CONFIG_HOME").or_else(|| env("HOME").map(|h| h.join(".config")));
    if let Some(xdg) = &xdg {
        files.push(xdg.join("git/ignore"));
        files.push(xdg.join("git/attributes"));
    }
    match env("GIT_CONFIG_GLOBAL") {
        Some(global) => files.push(global),
        None => {
            files.extend(env("HOME").map(|h| h.join(".gitconfig")));
            files.extend(xdg.map(|x| x.join("git/config")));
        }
    }
    if std::env::var_os("GIT_CONFIG_NOSYSTEM").is_none() {
        files.push(env("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig")));
    }
    if std::env::var_os("GIT_ATTR_NOSYSTEM").is_none() {
        files.push(PathBuf::from("/etc/gitattributes"));
    }
    files
}
