//! Provenance: the repository state through git2 (revision, working tree, patch, submodules) and
//! host facts ([`host`]). Pure data producers: nothing here writes a bundle file (the patch is
//! spooled to an unnamed temporary file, [`patch`]).
//!
//! A [`Snapshot`] is taken with [`capture`] (or [`capture_excluding`], to leave out an untracked
//! results directory inside the repository, and [`capture_limited`], with the manifest's
//! [`PatchLimits`]) before the first run ([`git`]); the bundle writer turns it into
//! `revision.txt`, `working-tree.txt`, `working-tree.patch` and `provenance.json`
//! ([`ProvenanceDoc::before_run`], DESIGN section 5). After the last run a second snapshot is
//! taken and [`ProvenanceDoc::after_run`] ([`drift`]) adds the after-run check and `drift`.
//!
//! The patch is meant to be replayed: `git apply working-tree.patch` on a clean checkout of the
//! commit in `revision.txt` rebuilds the working tree byte for byte (staged and unstaged changes,
//! deleted files, mode changes, untracked files as new files, binary files as `GIT binary patch`
//! literal/delta hunks), except the files [`PatchLimits`] leave out, recorded by size and sha256
//! only ([`Snapshot::left_out_files`]). Ignored files are not recorded; submodules are listed in
//! `provenance.json` but not diffed into.

mod discover;
pub mod doc;
pub mod drift;
pub mod git;
pub mod git_cli;
mod git_lib;
pub mod host;
mod mark;
mod new_files;
pub mod patch;
mod quiet;
mod worktree;

pub use doc::{
    AfterCheck, CaptureMethod, Dirty, LeftOutFile, NestedRepository, PROVENANCE_FORMAT, ProvenanceDoc,
    Snapshot, StatusLine, SubmoduleState, TrackedLeftOut, UncheckedPath, UnknownPath, UntrackedFile,
};
pub use drift::differences;
pub use git::{capture, capture_after, capture_excluding, capture_limited, is_bundle_folder, work_tree_root};
pub use patch::{
    DEFAULT_PATCH_FILE_LIMIT_BYTES, DEFAULT_PATCH_LIMIT_BYTES, LimitsSource, PatchBytes, PatchLimits,
    PatchReader,
};
