//! `hwr-exp verify BUNDLE`: is the archived bundle what was recorded?
//!
//! [`verify`] makes these checks in this order, one function each, each failure a [`Problem`]
//! naming the file:
//! - `setup::files_present`: the bundle's top-level files exist as regular files (bundle.json,
//!   manifest.toml, plan.json, host.json, revision.txt, working-tree.txt, working-tree.patch,
//!   provenance.json);
//! - `setup::manifest_sha256`: manifest.toml's sha256 equals bundle.json `manifest-sha256`;
//! - `setup::setup_sha256`: plan.json, host.json, revision.txt, working-tree.txt and
//!   working-tree.patch have the sha256 bundle.json `setup-sha256` recorded for them when the
//!   bundle was set up (a run can reach them; the checksum list, written at the end, would take in
//!   an edit made while the runs executed);
//! - `setup::patch_sha256`: provenance.json reads and working-tree.patch's sha256 equals its
//!   `patch-sha256`; `setup::host_facts`: host.json reads;
//! - `runs::runs`: no folder in `runs/` that plan.json does not plan; every run of plan.json
//!   (`runs::run`): run.json present when the bundle is `complete`; every file listed in
//!   run.json `sha256` exists with that sha256; every entry of `artifacts` (and of
//!   `earlier-attempts`, under `attempts/<n>/`) is there with its kind, size, sha256 or symlink
//!   target, checked without following symlinks or opening anything but regular files; no other
//!   entry anywhere in the run folder; then `runs::counts`: bundle.json `counts` equal the
//!   outcomes of the run.json files (unless still `running`);
//! - `checksums::checksums`, when bundle.json has a final status: every file listed in
//!   `checksums.sha256` ([`crate::bundle::checksums`]) exists with that sha256, and no other file
//!   is in the bundle (the list itself and `.lock` aside): edits to any file, bundle.json and
//!   run.json included, are caught;
//! - when a live process holds the bundle's lock ([`crate::bundle::lock`]), a note says the bundle
//!   is still being written;
//! - `patch::applies`: the patch applies to the recorded revision (`git read-tree` into a
//!   temporary index, then `git apply --check --cached`) when the repository has that commit; when
//!   it does not, a note says so and the check is skipped;
//! - `patch::untracked_files`: every untracked file provenance.json records `in-patch: true` is
//!   in the patch with its recorded sha256 (the patch's new files applied into an empty temporary
//!   folder; no repository needed).
//!
//! A new check is a function taking the `Checker` (the bundle, the problems and notes so far, the
//! files hashed), in the file of what it reads, called from [`verify`].
//!
//! Every file is read inside the bundle only: names from bundle files are checked to be plain names,
//! nothing is opened through a symbolic link and only regular files are read
//! ([`crate::bundle::contained`]); a link, FIFO or device where a file should be is a problem, never
//! followed.

mod checksums;
mod patch;
mod runs;
mod setup;

use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use super::ArchiveError;
use crate::bundle::contained::describe;
use crate::bundle::lock::{EffectiveStatus, effective_status, recorded_pid};
use crate::bundle::read::{Bundle, ReadError};
use crate::digest::sha256_reader;

pub(crate) use patch::{find_repository, patch_applies, run_git};

/// One thing that does not match the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file concerned.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// The result of [`verify`].
#[derive(Debug, Clone, Default)]
pub struct Verification {
    /// Files whose sha256 was compared with a record (run.json, bundle.json, provenance.json or
    /// checksums.sha256), each counted once.
    pub files_hashed: usize,
    /// Mismatches, missing and unexpected files; empty when the bundle is intact.
    pub problems: Vec<Problem>,
    /// Checks that could not be made and why (e.g. the repository lacks the recorded revision).
    pub notes: Vec<String>,
}

/// What the checks share: the bundle, what they found so far, and the files they hashed.
struct Checker<'b> {
    bundle: &'b Bundle,
    v: Verification,
    /// Files whose sha256 was compared with a record (becomes `files_hashed`).
    hashed: Hashed,
    /// Symlinks, FIFOs, sockets and devices a run left, recorded in its run.json `artifacts` (the
    /// checksum list holds regular files only).
    special: HashSet<PathBuf>,
}

/// The files hashed, each counted once: kept as 64-bit hashes of their paths (8 bytes a file,
/// not a path each: a bundle of 1,000,000 runs has millions of files).
#[derive(Default)]
struct Hashed(HashSet<u64>);

impl Hashed {
    fn insert(&mut self, path: impl AsRef<Path>) {
        use std::hash::BuildHasher;
        let h = std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(path.as_ref());
        self.0.insert(h);
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Extend<PathBuf> for Hashed {
    fn extend<I: IntoIterator<Item = PathBuf>>(&mut self, iter: I) {
        for p in iter {
            self.insert(p);
        }
    }
}

impl Checker<'_> {
    fn problem(&mut self, path: PathBuf, message: String) {
        self.v.problems.push(Problem { path, message });
    }
}

/// Verifies a bundle folder against its own records.
///
/// # Errors
/// [`ArchiveError`] when `dir` is not a bundle or bundle.json is unreadable or newer; everything
/// else found is a [`Problem`].
pub fn verify(dir: &Path) -> Result<Verification, ArchiveError> {
    let bundle = super::open(dir)?;
    let mut c = Checker {
        bundle: &bundle,
        v: Verification::default(),
        hashed: Hashed::default(),
        special: HashSet::new(),
    };
    live_note(&mut c);
    setup::files_present(&mut c);
    setup::manifest_sha256(&mut c);
    setup::setup_sha256(&mut c);
    let provenance = setup::patch_sha256(&mut c);
    setup::host_facts(&mut c);
    if runs::plan(&mut c) {
        let counts = runs::runs(&mut c);
        runs::counts(&mut c, &counts);
    }
    checksums::checksums(&mut c);
    if bundle.open_file(Path::new(crate::bundle::files::PATCH)).is_ok() {
        patch::applies(&mut c, provenance.as_ref());
        patch::untracked_files(&mut c, provenance.as_ref());
    }
    let mut v = c.v;
    v.files_hashed = c.hashed.len();
    Ok(v)
}

/// A note when a live process holds the bundle's lock: unfinished runs are not checked then.
fn live_note(c: &mut Checker<'_>) {
    if effective_status(c.bundle.dir(), c.bundle.info()) != EffectiveStatus::Running {
        return;
    }
    if let Err(e) = crate::bundle::lock::is_held(c.bundle.dir()) {
        c.v.notes.push(format!(
            "bundle.json says running and the bundle's lock cannot be probed ({}: {e}): it counts as held, so unfinished runs are not checked",
            crate::bundle::files::LOCK
        ));
    } else {
        c.v.notes.push(format!(
            "a live process{} holds this bundle's lock and is still writing it: unfinished runs are not checked, and files may change after this check",
            recorded_pid(c.bundle.dir())
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default()
        ));
    }
}

/// SHA-256 of the bundle file `rel` read through [`Bundle::open_file`] (no link followed, regular
/// files only).
fn sha256_of(bundle: &Bundle, rel: &Path) -> Result<String, ReadError> {
    let file = bundle.open_file(rel)?;
    sha256_reader(file).map_err(|source| ReadError::Io {
        path: bundle.dir().join(rel),
        source,
    })
}

/// What `lstat` says `path` is, when it is not a folder (`None` for a folder or when absent).
fn not_a_folder(path: &Path) -> Option<&'static str> {
    let meta = fs::symlink_metadata(path).ok()?;
    (!meta.is_dir()).then(|| {
        describe(rustix::fs::FileType::from_raw_mode(
            std::os::unix::fs::MetadataExt::mode(&meta),
        ))
    })
}
