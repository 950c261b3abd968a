//! Ownership of a bundle by an OS lock, and the effective status derived from it (DESIGN 5).
//!
//! The process that writes a bundle (`run`, `rerun`, `resume`) holds an exclusive `flock(2)` on
//! the bundle's lock file ([`files::LOCK`], `.lock`) for its whole life: from the creation of the
//! folder (or the start of a resume) until [`BundleLock::release`] after the final bundle.json.
//! The kernel drops the lock when the process dies, however it dies, so "alive" means "the lock is
//! held": no program name, no pid, no `/proc`, and it works across pid namespaces and for a binary
//! started through a symlink or a copy under another name. The pid written into the lock file is
//! information for people only.
//!
//! Readers (`list`, `report`, `verify`) probe the lock with a non-blocking shared `flock` that they
//! drop at once; they never create or write the lock file. A writer that finds the lock taken
//! tells a reader's momentary shared lock from a writer's exclusive one and retries in the first
//! case ([`BundleLock::acquire`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};
use rustix::io::Errno;
use serde::Serialize;

use super::atomic::FILE_MODE;
use super::format::{BundleInfo, BundleStatus, files};

/// How many times [`BundleLock::acquire`] retries while only readers' shared locks (or a lock file
/// being removed by a finishing writer) stand in the way, [`RETRY_PAUSE`] apart.
const RETRIES: u32 = 100;

/// Pause between two attempts of [`BundleLock::acquire`].
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// Why a bundle's lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds the exclusive lock: a runner is writing the bundle.
    #[error("{}: a live runner{} holds this bundle's lock ({}) and is writing it",
        .dir.display(),
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        files::LOCK)]
    Held {
        /// The bundle folder.
        dir: PathBuf,
        /// The pid the holder wrote into the lock file (information only; `None` when unreadable).
        pid: Option<u32>,
    },
    /// The lock file could not be opened, created or locked.
    #[error("{}: cannot lock: {source}", .path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// The exclusive lock of one bundle, held by the process writing it. Dropping it releases the
/// lock and leaves the lock file (as a killed writer does); [`BundleLock::release`] removes the
/// file first.
#[derive(Debug)]
pub struct BundleLock {
    /// The open lock file; the `flock` lives as long as this descriptor (opened `O_CLOEXEC`, so the
    /// runs do not inherit it).
    file: File,
    /// `<bundle>/.lock`.
    path: PathBuf,
    /// What the lock file held before this lock wrote its pid (`None`: this lock created it), for
    /// [`BundleLock::abandon`].
    previous: Option<Vec<u8>>,
}

impl BundleLock {
    /// Takes the exclusive lock of the bundle folder `dir`, creating its lock file when missing,
    /// and writes this process's pid into it (mode [`FILE_MODE`] whatever the umask). Never blocks
    /// on a writer: when another process holds the exclusive lock the answer is
    /// [`LockError::Held`] at once. Shared locks of readers probing liveness, a lock file a
    /// finishing writer is removing, and the lock of a writer that died (its pid gone) while a
    /// child it was starting still holds a copy of the descriptor, are waited out (up to 100
    /// attempts, 10 ms apart).
    ///
    /// # Errors
    /// [`LockError::Held`] when a live process holds the bundle; [`LockError::Io`] when the lock
    /// file cannot be opened (for example a read-only folder) or `flock` fails otherwise.
    pub fn acquire(dir: &Path) -> Result<BundleLock, LockError> {
        let path = dir.join(files::LOCK);
        let io_err = |source: io::Error| LockError::Io {
            path: path.clone(),
            source,
        };
        for _ in 0..RETRIES {
            let existed = path.exists();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(FILE_MODE)
                .open(&path)
                .map_err(io_err)?;
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => {
                    // Exclusive refused: a writer's exclusive lock, or readers' shared ones. A
                    // shared lock is granted only when no exclusive lock is held.
                    match flock(&file, FlockOperation::NonBlockingLockShared) {
                        Ok(()) => {
                            drop(file);
                            std::thread::sleep(RETRY_PAUSE);
                            continue;
                        }
                        Err(Errno::WOULDBLOCK) => {
                            let pid = recorded_pid(dir);
                            if pid.is_some_and(process_is_gone) {
                                // The writer is dead, but a child it was starting holds a copy
                                // of the lock's descriptor until its exec or its death (it gets
                                // SIGKILL with its parent): wait for it to let go.
                                drop(file);
                                std::thread::sleep(RETRY_PAUSE);
                                continue;
                            }
                            return Err(LockError::Held {
                                dir: dir.to_path_buf(),
                                pid,
                            });
                        }
                        Err(e) => return Err(io_err(e.into())),
                    }
                }
                Err(e) => return Err(io_err(e.into())),
            }
            // A finishing writer unlinks the file while holding the lock: the lock we got may be
            // on a file that no longer has this name. Only the file at the path counts.
            let ours = file.metadata().map_err(io_err)?;
            match fs::metadata(&path) {
                Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => {}
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(e)),
            }
            let previous = if existed {
                let mut bytes = Vec::new();
                (&file).read_to_end(&mut bytes).map_err(io_err)?;
                Some(bytes)
            } else {
                None
            };
            let mut lock = BundleLock {
                file,
                path: path.clone(),
                previous,
            };
            lock.write_pid().map_err(io_err)?;
            return Ok(lock);
        }
        Err(LockError::Held {
            dir: dir.to_path_buf(),
            pid: recorded_pid(dir),
        })
    }

    /// Replaces the lock file's content with `<pid>\n` of this process and sets its mode.
    fn write_pid(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        // File::set_permissions is fchmod(2): exact mode, no umask.
        self.file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        let text = format!("{}\n", std::process::id());
        std::os::unix::fs::FileExt::write_all_at(&self.file, text.as_bytes(), 0)?;
        self.file.flush()
    }

    /// Records that the bundle folder holding the lock file was renamed to `dir` (a staged bundle
    /// published, [`super::write::BundleWriter::publish`]): the open file and its `flock` moved
    /// with it; [`BundleLock::release`] now removes `<dir>/.lock`.
    pub fn moved_to(&mut self, dir: &Path) {
        self.path = dir.join(files::LOCK);
    }

    /// The lock file, `<bundle>/.lock`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Gives the lock up leaving the bundle as it was found (a command that refused to change
    /// it, like a refused `resume`): a lock file this lock created is removed, one that was
    /// there gets its old content (the pid of an earlier holder) back.
    ///
    /// # Errors
    /// I/O errors removing or rewriting the file (the lock is released all the same).
    pub fn abandon(self) -> io::Result<()> {
        match &self.previous {
            None => self.release(),
            Some(bytes) => {
                self.file.set_len(0)?;
                std::os::unix::fs::FileExt::write_all_at(&self.file, bytes, 0)
            }
        }
    }

    /// Removes the lock file, then releases the lock (closing the descriptor). Called after the
    /// final bundle.json is written, so a reader that finds the lock free reads the final status.
    ///
    /// # Errors
    /// I/O errors removing the file (the lock is released all the same).
    pub fn release(self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Whether a live process holds the bundle folder `dir`: its lock file exists and a non-blocking
/// shared `flock` on it is refused. A missing lock file means no holder. Opens the file read-only
/// as every bundle file is read ([`super::contained::open_in`]: no link followed, a FIFO or device
/// refused, not waited on) and never creates it.
///
/// # Errors
/// I/O errors opening the lock file (other than "not found"), what it is when it is no regular
/// file, or from `flock`.
pub fn is_held(dir: &Path) -> io::Result<bool> {
    let file = match super::contained::open_in(dir, Path::new(files::LOCK)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(false),
        Err(Errno::WOULDBLOCK) => Ok(true),
        Err(e) => Err(e.into()),
    }
    // The shared lock, when granted, goes with the descriptor here.
}

/// The pid written into the bundle's lock file by the process that took the lock last;
/// information only (it says nothing about liveness). `None` when the file is missing or does
/// not hold a number.
pub fn recorded_pid(dir: &Path) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    super::contained::open_in(dir, Path::new(files::LOCK))
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

/// Whether no process has the pid `pid` here (`kill(pid, 0)` fails with `ESRCH`). A pid recorded
/// in another pid namespace may be gone here while its writer lives: the caller only waits then.
fn process_is_gone(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|p| rustix::process::test_kill_process(p) == Err(Errno::SRCH))
}

/// Status as `list` and `report` show it: bundle.json's `status`, with `running` split by the lock
/// into live and abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectiveStatus {
    /// A live process holds the bundle's lock.
    Running,
    /// Every planned run finished.
    Complete,
    /// Stopped by SIGINT/SIGTERM; `resume` can finish it.
    Interrupted,
    /// The runner hit an error it could not record per run (it could not write the bundle: a full
    /// disk, a file-size limit); `resume` can finish it once the cause is gone.
    Failed,
    /// bundle.json says `running` but no process holds the lock (the runner was killed, the machine
    /// rebooted); `resume` can finish it.
    Abandoned,
    /// `list` only: bundle.json says `running`, no process holds the lock, and whether the bundle's
    /// Slurm tasks still run could not be learned (`squeue` failed or timed out): neither running
    /// nor abandoned can be said.
    Unknown,
}

impl EffectiveStatus {
    /// The kebab-case word, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectiveStatus::Running => "running",
            EffectiveStatus::Complete => "complete",
            EffectiveStatus::Interrupted => "interrupted",
            EffectiveStatus::Failed => "failed",
            EffectiveStatus::Abandoned => "abandoned",
            EffectiveStatus::Unknown => "unknown",
        }
    }

    /// The recorded status as is (`running` stays `running`).
    pub fn recorded(status: BundleStatus) -> EffectiveStatus {
        match status {
            BundleStatus::Running => EffectiveStatus::Running,
            BundleStatus::Complete => EffectiveStatus::Complete,
            BundleStatus::Interrupted => EffectiveStatus::Interrupted,
            BundleStatus::Failed => EffectiveStatus::Failed,
        }
    }
}

/// The effective status of the bundle folder `dir` whose bundle.json reads `info`. Asks the lock
/// ([`is_held`]) only when the status is `running`; when the lock is free, bundle.json is read
/// again (the writer may have finished between the two reads) and `running` becomes `abandoned`.
/// A lock that cannot be probed (unreadable lock file) counts as held: `running`.
pub fn effective_status(dir: &Path, info: &BundleInfo) -> EffectiveStatus {
    if info.status != BundleStatus::Running {
        return EffectiveStatus::recorded(info.status);
    }
    match is_held(dir) {
        Ok(true) | Err(_) => EffectiveStatus::Running,
        Ok(false) => match super::read::Bundle::open(dir).map(|b| b.info().status) {
            Ok(BundleStatus::Running) | Err(_) => EffectiveStatus::Abandoned,
            Ok(finished) => EffectiveStatus::recorded(finished),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_while_held_and_free_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_held(dir.path()).unwrap(), "no lock file: free");
        let lock = BundleLock::acquire(dir.path()).unwrap();
        assert!(is_held(dir.path()).unwrap());
        assert_eq!(recorded_pid(dir.path()), Some(std::process::id()));
        let mode = fs::metadata(lock.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, FILE_MODE, "{mode:o}");
        match BundleLock::acquire(dir.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("second acquire: {other:?}"),
        }
        drop(lock);
        assert!(!is_held(dir.path()).unwrap(), "released on drop");
        assert!(
            dir.path().join(files::LOCK).exists(),
            "the file stays after a drop"
        );
        let lock = BundleLock::acquire(dir.path()).unwrap();
        lock.release().unwrap();
        assert!(!dir.path().join(files::LOCK).exists(), "release removes the file");
        assert!(!is_held(dir.path()).unwrap());
    }

    /// A lock file that is a FIFO or a link is refused, not opened (a FIFO opened for reading
    /// waited for a writer: report, verify and list hung on it, the breaking pass of
    /// 2026-12-04); the bundle then counts as held, as with any lock that cannot be probed.
    #[test]
    fn a_lock_file_that_is_no_regular_file_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(files::LOCK);
        crate::bundle::contained::testing::fifo(&lock);
        let at = dir.path().to_path_buf();
        let (held, pid) = crate::bundle::contained::testing::returns("probing a FIFO lock", move || {
            (is_held(&at).map_err(|e| e.to_string()), recorded_pid(&at))
        });
        assert!(held.unwrap_err().contains("FIFO"));
        assert_eq!(pid, None);
        fs::remove_file(&lock).unwrap();
        let outside = dir.path().join("elsewhere");
        fs::write(&outside, "4242").unwrap();
        std::os::unix::fs::symlink(&outside, &lock).unwrap();
        assert!(
            is_held(dir.path())
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        assert_eq!(recorded_pid(dir.path()), None, "a link's target is not read");
    }

    #[test]
    fn a_reader_probe_does_not_refuse_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        BundleLock::acquire(dir.path()).unwrap().release().unwrap();
        File::create(dir.path().join(files::LOCK)).unwrap();
        // A reader's shared lock held across the writer's first attempt.
        let reader = File::open(dir.path().join(files::LOCK)).unwrap();
        flock(&reader, FlockOperation::NonBlockingLockShared).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(reader);
        });
        let lock = BundleLock::acquire(dir.path()).expect("the writer gets the lock after the reader");
        release.join().unwrap();
        lock.release().unwrap();
    }
}
