//! `hwr-exp rerun BUNDLE [--at-recorded-revision]`: the archived manifest bytes, run again into a
//! new bundle whose bundle.json names the old one as `parent`.
//!
//! The manifest is bundle's manifest.toml (never today's file at the recorded path); relative paths
//! in it resolve against the folder of the recorded `manifest-path`. Before the first run, what
//! differs from the archived bundle is listed ([`differences`]): revision, dirty state and patch,
//! host (CPU model, kernel, glibc) and hwr-exp version.
//!
//! With `--at-recorded-revision` the recorded tree is rebuilt in a temporary git worktree
//! ([`RecordedTree`]: `git worktree add --detach` of revision.txt, then `git apply` of
//! working-tree.patch) and the manifest's folder is taken at the same path relative to the
//! repository root inside it. The worktree is removed when the rerun ends, also on error or
//! interrupt. Submodules are checked out in the worktree at the commits provenance.json recorded
//! as checked out ([`submodules`](super::submodules)); one that cannot be is named in a note and
//! among the differences.
//!
//! Files the patch limits left out of working-tree.patch (provenance.json `tracked-left-out`
//! and `untracked` with `in-patch: false`) are rebuilt where that can be done exactly: a deleted
//! tracked file is deleted, and a file whose recorded working tree (the recorded repository root)
//! still holds the recorded content (same sha256) is copied from there. The others cannot be
//! rebuilt: the rerun names them, records the note in the new bundle and goes on without them
//! (an untracked file is absent, a tracked one has its content at the recorded revision).

use std::path::{Path, PathBuf};

use super::ArchiveError;
use super::verify::{find_repository, patch_applies, run_git};
use crate::bundle::files;
use crate::bundle::read::Bundle;
use crate::digest::sha256_bytes;
use crate::exec::{CancelFlag, Launcher};
use crate::manifest::{self, Manifest};
use crate::provenance::git_cli;
use crate::provenance::host::HostFacts;
use crate::provenance::{ProvenanceDoc, Snapshot};
use crate::runner::session::{self, RunOptions, SessionError, SessionReport};

/// Choices of one rerun.
#[derive(Debug, Clone, Default)]
pub struct RerunOptions {
    /// Folder for the new bundle; `None` = the archived bundle's results folder (its grandparent).
    pub results_dir: Option<PathBuf>,
    /// No progress output (the differences are still returned, see [`PreparedRerun`]).
    pub quiet: bool,
    /// Run in a temporary worktree holding the recorded tree.
    pub at_recorded_revision: bool,
}

/// The recorded tree, checked out in a temporary git worktree: revision.txt detached, then
/// working-tree.patch applied. Dropping it runs `git worktree remove --force` and deletes the
/// temporary folder.
#[derive(Debug)]
pub struct RecordedTree {
    /// Root of the repository the worktree belongs to (where `git worktree` runs).
    repo: PathBuf,
    /// The worktree folder.
    path: PathBuf,
    /// The commit checked out.
    revision: String,
    /// Files left out of working-tree.patch that were rebuilt ([`restore_left_out`]).
    restored: Vec<String>,
    /// Files left out of working-tree.patch that could not be rebuilt, one line each.
    not_rebuilt: Vec<String>,
    /// Submodules that are not as recorded in the tree (not checked out, or checked out without
    /// what the record says they held), one line each.
    submodule_differences: Vec<String>,
    /// Holds the temporary parent folder; removed last.
    _tmp: tempfile::TempDir,
}

impl RecordedTree {
    /// Builds the recorded tree of `bundle`. Before anything is created it checks that the
    /// repository (the recorded root, or the one holding the bundle) has the commit and that the
    /// patch applies to it (`git apply --check` on a temporary index).
    ///
    /// # Errors
    /// [`ArchiveError::Environment`] when revision.txt names no commit, no repository is found,
    /// the repository lacks the commit, the patch does not apply, or a git command fails.
    pub fn build(bundle: &Bundle, provenance: Option<&ProvenanceDoc>) -> Result<RecordedTree, ArchiveError> {
        let env = ArchiveError::Environment;
        let revision = bundle.recorded_commit().ok_or_else(|| {
            env(format!(
                "{}: records no commit, so there is no recorded tree to rebuild",
                bundle.path(files::REVISION).display()
            ))
        })?;
        let repo = find_repository(bundle, provenance).ok_or_else(|| {
            env(format!(
                "no git repository found for commit {revision} (recorded repository: {})",
                provenance
                    .and_then(|p| p.before.repo_root())
                    .map_or_else(|| "none".into(), |p| p.display().to_string())
            ))
        })?;
        let Some(root) = repo.workdir.clone() else {
            return Err(env(format!(
                "{} is a bare repository: cannot add a worktree",
                repo.git_dir.display()
            )));
        };
        if !repo.has_commit(&revision) {
            return Err(env(format!(
                "the repository at {} does not have the recorded commit {revision} (fetch it first)",
                root.display()
            )));
        }
        let patch = bundle.path(files::PATCH);
        let patch_len = std::fs::metadata(&patch)
            .map_err(|e| env(format!("{}: cannot read: {e}", patch.display())))?
            .len();
        if patch_len > 0 {
            patch_applies(&repo, &revision, &patch)
                .map_err(|m| env(format!("{} does not apply to {revision}: {m}", patch.display())))?;
        }
        let mut tree = RecordedTree::at_commit(&root, &revision, (patch_len > 0).then_some(patch.as_path()))?;
        let recorded: Vec<(String, String)> = provenance
            .map(|p| {
                p.before
                    .submodules()
                    .iter()
                    .filter_map(|s| {
                        let commit = s
                            .checked_out_commit
                            .clone()
                            .or_else(|| s.recorded_commit.clone())?;
                        Some((s.path.clone(), commit))
                    })
                    .collect()
            })
            .unwrap_or_default();
        tree.check_out_submodules(&recorded);
        if let Some(p) = provenance {
            for s in p.before.submodules().iter().filter(|s| s.dirty) {
                tree.submodule_differences.push(format!(
                    "submodule {}: had uncommitted changes when recorded; working-tree.patch does not hold them, so it is checked out clean",
                    s.path
                ));
            }
        }
        if let Some(p) = provenance {
            let recorded_root = p.before.repo_root().unwrap_or(&root).to_path_buf();
            for file in p.before.left_out_files() {
                match restore_left_out(&recorded_root, &tree.path, &file) {
                    Ok(()) => tree.restored.push(file.path.clone()),
                    Err(why) => tree.not_rebuilt.push(format!("{} [{why}]", file.describe())),
                }
            }
        }
        Ok(tree)
    }

    /// Files left out of working-tree.patch that were rebuilt anyway (deleted, or copied from the
    /// recorded working tree with the recorded sha256).
    pub fn restored(&self) -> &[String] {
        &self.restored
    }

    /// Files left out of working-tree.patch that could not be rebuilt, with why.
    pub fn not_rebuilt(&self) -> &[String] {
        &self.not_rebuilt
    }

    /// A temporary worktree of `revision` (a commit of the repository whose working tree is
    /// `root`), detached, with `patch` applied when given (`bisect` probes each commit so).
    ///
    /// # Errors
    /// [`ArchiveError::Environment`] when the temporary folder cannot be made or a git command
    /// fails (whatever was created is removed).
    pub fn at_commit(
        root: &Path,
        revision: &str,
        patch: Option<&Path>,
    ) -> Result<RecordedTree, ArchiveError> {
        let env = ArchiveError::Environment;
        let tmp = tempfile::Builder::new()
            .prefix("hwr-exp-rerun-")
            .tempdir()
            .map_err(|e| env(format!("cannot create a temporary folder: {e}")))?;
        let tree = RecordedTree {
            repo: root.to_path_buf(),
            path: tmp.path().join("tree"),
            revision: revision.to_string(),
            restored: Vec::new(),
            not_rebuilt: Vec::new(),
            submodule_differences: Vec::new(),
            _tmp: tmp,
        };
        // From here on, Drop removes whatever was created.
        git(
            &tree.repo,
            &[
                "worktree".as_ref(),
                "add".as_ref(),
                "--detach".as_ref(),
                "--quiet".as_ref(),
                tree.path.as_os_str(),
                revision.as_ref(),
            ],
        )
        .map_err(|m| env(format!("git worktree add {revision}: {m}")))?;
        if let Some(patch) = patch {
            git(
                &tree.path,
                &[
                    "apply".as_ref(),
                    "--whitespace=nowarn".as_ref(),
                    patch.as_os_str(),
                ],
            )
            .map_err(|m| env(format!("git apply {}: {m}", patch.display())))?;
        }
        Ok(tree)
    }

    /// Checks the submodules of the tree out (see [`super::submodules`]): at `recorded` commits
    /// where given (path, commit), else at the commits the tree's own index names.
    pub fn check_out_submodules(&mut self, recorded: &[(String, String)]) {
        let (root, path) = (self.repo.clone(), self.path.clone());
        self.submodule_differences = super::submodules::check_out(&root, &path, recorded);
    }

    /// Submodules not as recorded in the tree, one line each (empty when all are).
    pub fn submodule_differences(&self) -> &[String] {
        &self.submodule_differences
    }

    /// The worktree folder (the recorded repository root's counterpart).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The repository root the worktree belongs to.
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// The commit checked out.
    pub fn revision(&self) -> &str {
        &self.revision
    }
}

impl Drop for RecordedTree {
    fn drop(&mut self) {
        let removed = git(
            &self.repo,
            &[
                "worktree".as_ref(),
                "remove".as_ref(),
                "--force".as_ref(),
                self.path.as_os_str(),
            ],
        );
        if removed.is_err() {
            let _ = std::fs::remove_dir_all(&self.path);
            let _ = git(&self.repo, &["worktree".as_ref(), "prune".as_ref()]);
        }
    }
}

/// Rebuilds in the worktree `tree` a file working-tree.patch does not hold: a deleted tracked
/// file is removed; otherwise the file at the same path in the recorded working tree `from` is
/// copied when its content has the recorded sha256 (a symlink is made again with its target),
/// with the recorded executable bit.
///
/// # Errors
/// Why it cannot be rebuilt (no recorded sha256, missing or changed in `from`, copy failed).
fn restore_left_out(from: &Path, tree: &Path, file: &crate::provenance::LeftOutFile) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dest = tree.join(&file.path);
    if file.deleted {
        return match std::fs::remove_file(&dest) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("cannot delete it: {e}")),
        };
    }
    let Some(recorded) = file.sha256.as_deref() else {
        return Err("no sha256 recorded".into());
    };
    let source = from.join(&file.path);
    let meta =
        std::fs::symlink_metadata(&source).map_err(|_| format!("not in {} any more", from.display()))?;
    let symlink = meta.file_type().is_symlink();
    let now = if symlink {
        std::fs::read_link(&source)
            .map(|t| sha256_bytes(t.as_os_str().as_encoded_bytes()))
            .map_err(|e| e.to_string())?
    } else if meta.is_file() {
        crate::digest::sha256_file(&source).map_err(|e| e.to_string())?
    } else {
        return Err(format!("not a file in {} any more", from.display()));
    };
    if now != recorded {
        return Err(format!(
            "changed in {} since (sha256 {})",
            from.display(),
            short(&now)
        ));
    }
    let copy = || -> std::io::Result<()> {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::remove_file(&dest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        if symlink {
            return std::os::unix::fs::symlink(std::fs::read_link(&source)?, &dest);
        }
        std::fs::copy(&source, &dest)?;
        let exec = file.mode.as_deref() == Some("100755");
        std::fs::set_permissions(
            &dest,
            std::fs::Permissions::from_mode(if exec { 0o755 } else { 0o644 }),
        )
    };
    copy().map_err(|e| format!("cannot copy it from {}: {e}", from.display()))
}

/// Runs `git -C dir args...` with the caller's repository-locating variables removed
/// ([`crate::provenance::git_cli::command`]; see [`run_git`]).
fn git(dir: &Path, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    run_git(git_cli::command(dir).args(args))
}

/// Reads the archived manifest, checks its bytes against bundle.json `manifest-sha256` and
/// validates it with relative paths resolving against `base_dir`; `path` is the recorded
/// `manifest-path` (kept as the new bundle's `manifest-path`).
///
/// # Errors
/// [`ArchiveError::Refused`] when manifest.toml was modified; [`ArchiveError::Environment`] when
/// `base_dir` does not exist; [`SessionError::Plan`] (inside [`ArchiveError::Session`]) with the
/// manifest's diagnostics.
pub fn archived_manifest(bundle: &Bundle, base_dir: &Path) -> Result<Manifest, ArchiveError> {
    let source = bundle.manifest_text()?;
    let sha = sha256_bytes(source.as_bytes());
    if sha != bundle.info().manifest_sha256 {
        return Err(ArchiveError::Refused(format!(
            "{}: sha256 {sha} differs from manifest-sha256 {} in bundle.json: the archived manifest was modified",
            bundle.path(files::MANIFEST).display(),
            bundle.info().manifest_sha256
        )));
    }
    if !base_dir.is_dir() {
        return Err(ArchiveError::Environment(format!(
            "{} (the folder of the recorded manifest-path, which relative paths in the manifest resolve against) does not exist",
            base_dir.display()
        )));
    }
    manifest::parse(&source, Path::new(&bundle.info().manifest_path), base_dir)
        .map_err(|d| ArchiveError::Session(SessionError::Plan(d)))
}

/// Folder of the recorded `manifest-path`.
pub fn recorded_base_dir(bundle: &Bundle) -> PathBuf {
    Path::new(&bundle.info().manifest_path)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The folder relative paths of the archived manifest resolve against today: the recorded
/// `manifest-path`'s folder when it exists; otherwise, when the repository was moved or cloned
/// elsewhere, the same path relative to the recorded repository root inside the repository that
/// holds the bundle folder (git2 discover from the bundle). Returns the folder and, when it was
/// mapped, a note saying so.
pub fn base_dir_now(bundle: &Bundle, provenance: Option<&ProvenanceDoc>) -> (PathBuf, Option<String>) {
    let recorded = recorded_base_dir(bundle);
    if recorded.is_dir() {
        return (recorded, None);
    }
    let mapped = provenance
        .and_then(|p| p.before.repo_root())
        .and_then(|root| recorded.strip_prefix(root).ok())
        .and_then(|rel| {
            let (_, workdir) = git_cli::repository_at(bundle.dir())?;
            Some(workdir?.join(rel))
        })
        .filter(|p| p.is_dir());
    match mapped {
        Some(m) => {
            let note = format!(
                "the recorded manifest folder {} does not exist; used {} (same path in the repository holding the bundle)",
                recorded.display(),
                m.display()
            );
            (m, Some(note))
        }
        None => (recorded, None),
    }
}

/// What differs between the archived bundle and now, one line each: `revision`, `dirty`,
/// `working-tree.patch` (with the changed paths), `cpu-model`, `kernel`, `glibc`, `hwr-exp`.
/// Empty when nothing differs. A missing record is reported as such.
pub fn differences(
    bundle: &Bundle,
    recorded: Option<&ProvenanceDoc>,
    recorded_host: Option<&HostFacts>,
    now: &Snapshot,
    now_host: &HostFacts,
) -> Vec<String> {
    let mut lines = Vec::new();
    let text = |s: Option<&str>| s.unwrap_or("none").to_string();
    match recorded {
        None => lines.push("provenance: no readable provenance.json in the archived bundle".into()),
        Some(p) => {
            let before = &p.before;
            if before.head() != now.head() {
                lines.push(format!(
                    "revision: {} -> {}",
                    text(before.head()),
                    text(now.head())
                ));
            }
            if before.dirty() != now.dirty() {
                lines.push(format!(
                    "dirty: {} -> {}",
                    before.dirty().as_str(),
                    now.dirty().as_str()
                ));
            }
            let (a, b) = (before.patch_sha256(), now.patch_sha256());
            if a != b {
                let mut paths: Vec<String> = crate::provenance::differences(before, now)
                    .into_iter()
                    .filter(|p| p != "HEAD")
                    .collect();
                let more = paths.len().saturating_sub(10);
                paths.truncate(10);
                let mut line = format!("working-tree.patch: sha256 {} -> {}", short(a), short(b));
                if !paths.is_empty() {
                    line.push_str(&format!("; changed: {}", paths.join(", ")));
                    if more > 0 {
                        line.push_str(&format!(" and {more} more"));
                    }
                }
                lines.push(line);
            }
        }
    }
    match recorded_host {
        None => lines.push("host: no readable host.json in the archived bundle".into()),
        Some(h) => {
            if h.cpu_model != now_host.cpu_model {
                lines.push(format!(
                    "cpu-model: {} -> {}",
                    text(h.cpu_model.as_deref()),
                    text(now_host.cpu_model.as_deref())
                ));
            }
            let release = |h: &HostFacts| h.kernel.as_ref().map(|k| k.release.clone());
            if release(h) != release(now_host) {
                lines.push(format!(
                    "kernel: {} -> {}",
                    text(release(h).as_deref()),
                    text(release(now_host).as_deref())
                ));
            }
            if h.glibc_version != now_host.glibc_version {
                lines.push(format!(
                    "glibc: {} -> {}",
                    text(h.glibc_version.as_deref()),
                    text(now_host.glibc_version.as_deref())
                ));
            }
        }
    }
    if bundle.info().hwr_exp_version != now_host.hwr_exp_version {
        lines.push(format!(
            "hwr-exp: {} -> {}",
            bundle.info().hwr_exp_version,
            now_host.hwr_exp_version
        ));
    }
    if let Some(line) = binary_difference(bundle, crate::runner::binary::running()) {
        lines.push(line);
    }
    lines
}

/// `hwr-exp binary: sha256 A -> B`, when the binary that wrote `bundle` (bundle.json
/// `hwr-exp-sha256`) is not `now`; a bundle that records none says so.
pub fn binary_difference(bundle: &Bundle, now: &crate::runner::binary::Binary) -> Option<String> {
    let now_sum = now.sha256.as_deref().unwrap_or("unreadable");
    match bundle.info().hwr_exp_sha256.as_deref() {
        Some(recorded) if Some(recorded) == now.sha256.as_deref() => None,
        Some(recorded) => Some(format!(
            "hwr-exp binary: sha256 {} -> {} ({})",
            short(recorded),
            short(now_sum),
            now.path.display()
        )),
        None => Some(format!(
            "hwr-exp binary: not recorded -> sha256 {} ({})",
            short(now_sum),
            now.path.display()
        )),
    }
}

/// What `{hwr-exp}` means in a rerun at the recorded revision: the running binary, not one built
/// from the recorded tree (hwr-exp never builds the recorded revision: DESIGN 5, docs/archive.md "Archived
/// bundles"). `None` when the manifest does not use `{hwr-exp}`.
pub fn hwr_exp_note(manifest: &Manifest, bundle: &Bundle) -> Option<String> {
    if !uses_hwr_exp(manifest) {
        return None;
    }
    let now = crate::runner::binary::running();
    let same = bundle.info().hwr_exp_sha256.is_some() && bundle.info().hwr_exp_sha256 == now.sha256;
    Some(format!(
        "{{hwr-exp}} is this binary, {} (hwr-exp {}, sha256 {}), not one built from the recorded revision; {}",
        now.path.display(),
        now.version,
        short(now.sha256.as_deref().unwrap_or("unreadable")),
        if same {
            "it is the binary that wrote the archived bundle".to_string()
        } else {
            match bundle.info().hwr_exp_sha256.as_deref() {
                Some(sum) => format!(
                    "the archived bundle was written by hwr-exp {} with sha256 {}: the built-in probe may differ",
                    bundle.info().hwr_exp_version,
                    short(sum)
                ),
                None => format!(
                    "the archived bundle (hwr-exp {}) records no binary sha256: the built-in probe may differ",
                    bundle.info().hwr_exp_version
                ),
            }
        }
    ))
}

/// Whether the manifest's command, workdir, output or env use the `{hwr-exp}` placeholder.
fn uses_hwr_exp(manifest: &Manifest) -> bool {
    use crate::manifest::Program;
    let mut texts: Vec<&str> = match &manifest.command.program {
        Program::Argv(a) => a.iter().map(String::as_str).collect(),
        Program::Shell(s) => vec![s.as_str()],
    };
    texts.push(&manifest.command.workdir);
    texts.extend(manifest.isolation.env.iter().map(|(_, v)| v.as_str()));
    texts.iter().any(|t| {
        crate::manifest::template::parse(t).is_ok_and(|segments| {
            segments.iter().any(|s| {
                matches!(s, crate::manifest::template::Segment::Placeholder { name, .. } if *name == "hwr-exp")
            })
        })
    })
}

fn short(sha: &str) -> String {
    sha.chars().take(12).collect()
}

/// A rerun ready to start: the archived manifest checked and validated, the recorded tree built when
/// asked for, and what differs from the archived bundle, for the caller to show before the first
/// run ([`prepare`], then [`PreparedRerun::run`]).
#[derive(Debug)]
pub struct PreparedRerun {
    /// The archived bundle folder (absolute).
    pub archived: PathBuf,
    /// bundle.json `created` of the archived bundle (RFC 3339 UTC).
    pub archived_created: String,
    /// Notes for the user that are not differences, e.g. that the recorded manifest folder moved
    /// and which folder was used instead.
    pub notes: Vec<String>,
    /// What differs from the archived bundle, one line each (see [`differences`]); empty when
    /// nothing does.
    pub differences: Vec<String>,
    manifest: Manifest,
    run_opts: RunOptions,
    /// Removed (the worktree and its temporary folder) when the rerun is dropped.
    tree: Option<RecordedTree>,
}

/// Prepares a rerun of the archived bundle `dir` into a new bundle (see the module docs): nothing
/// is run and nothing is printed.
///
/// # Errors
/// See [`ArchiveError`]; with `at_recorded_revision`, a revision the repository lacks or a patch
/// that does not apply is an error before any run.
pub fn prepare(dir: &Path, opts: &RerunOptions) -> Result<PreparedRerun, ArchiveError> {
    let bundle = super::open(dir)?;
    let provenance = bundle.provenance_doc().ok();
    let recorded_host = bundle.host_facts().ok();
    let results_dir = opts.results_dir.clone().unwrap_or_else(|| bundle.results_dir());
    let recorded_base = recorded_base_dir(&bundle);
    let mut bundle_notes = vec![format!("rerun of {}", bundle.dir().display())];
    let mut user_notes = Vec::new();

    let (base_dir, moved) = base_dir_now(&bundle, provenance.as_ref());
    if let Some(note) = moved {
        user_notes.push(note.clone());
        bundle_notes.push(note);
    }
    let tree = if opts.at_recorded_revision {
        Some(RecordedTree::build(&bundle, provenance.as_ref())?)
    } else {
        None
    };
    let mut manifest = match &tree {
        None => archived_manifest(&bundle, &base_dir)?,
        Some(tree) => {
            let root = provenance
                .as_ref()
                .and_then(|p| p.before.repo_root())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| tree.repo().to_path_buf());
            let rel = recorded_base.strip_prefix(&root).map_err(|_| {
                ArchiveError::Environment(format!(
                    "the recorded manifest-path {} is outside the recorded repository {}",
                    bundle.info().manifest_path,
                    root.display()
                ))
            })?;
            let mut m = archived_manifest(&bundle, &tree.path().join(rel))?;
            if let Some(repo) = m.provenance.repo.as_mut()
                && let Ok(inner) = repo.strip_prefix(&root)
            {
                *repo = tree.path().join(inner);
            }
            bundle_notes.push(format!(
                "ran at the recorded revision {} in a temporary git worktree with working-tree.patch applied (worktree removed afterwards)",
                tree.revision()
            ));
            let from = provenance
                .as_ref()
                .and_then(|p| p.before.repo_root())
                .map_or_else(|| tree.repo().display().to_string(), |r| r.display().to_string());
            if !tree.restored().is_empty() {
                let note = format!(
                    "{} file(s) left out of working-tree.patch by its size limits were rebuilt from the recorded working tree {from} (same sha256) or deleted as recorded: {}",
                    tree.restored().len(),
                    tree.restored().join(", ")
                );
                user_notes.push(note.clone());
                bundle_notes.push(note);
            }
            if !tree.not_rebuilt().is_empty() {
                let note = format!(
                    "the recorded tree cannot be rebuilt whole: {} file(s) were recorded by size and sha256 only, not in working-tree.patch, and {from} no longer holds them as recorded; the rerun goes on without them (untracked ones are missing from the rebuilt tree, tracked ones have their content at the recorded revision): {}",
                    tree.not_rebuilt().len(),
                    tree.not_rebuilt().join(", ")
                );
                user_notes.push(note.clone());
                bundle_notes.push(note);
            }
            for d in tree.submodule_differences() {
                user_notes.push(d.clone());
                bundle_notes.push(d.clone());
            }
            if let Some(note) = hwr_exp_note(&m, &bundle) {
                user_notes.push(note.clone());
                bundle_notes.push(note);
            }
            m
        }
    };
    // Paths inside the manifest resolve against base_dir already; keep the recorded path.
    manifest.path = PathBuf::from(&bundle.info().manifest_path);
    // The same selection as the archived bundle's run (`--where`, `--repetitions`,
    // `--fail-fast`), recorded again in the new bundle.
    let overrides = super::apply_recorded(bundle.info(), &mut manifest)?;
    if let Some(o) = &overrides {
        user_notes.push(format!(
            "the archived bundle ran with {}: so does this rerun",
            o.to_args().join(" ")
        ));
    }

    let abs_results = std::path::absolute(&results_dir).unwrap_or_else(|_| results_dir.clone());
    // The limits the archived bundle recorded (else the manifest's): an unchanged tree then gives
    // the same patch.
    let limits = provenance
        .as_ref()
        .and_then(|p| p.before.patch_limits())
        .unwrap_or_else(|| session::patch_limits(&manifest.provenance));
    let now = crate::provenance::capture_limited(manifest.repo_start(), &[&abs_results], limits);
    let now_host = crate::provenance::host::collect();
    let mut differences = differences(
        &bundle,
        provenance.as_ref(),
        recorded_host.as_ref(),
        &now,
        &now_host,
    );
    if let Some(tree) = &tree {
        differences.extend(tree.submodule_differences().iter().cloned());
    }
    Ok(PreparedRerun {
        archived: bundle.dir().to_path_buf(),
        archived_created: bundle.info().created.clone(),
        notes: user_notes,
        differences,
        run_opts: RunOptions {
            results_dir,
            quiet: opts.quiet,
            parent: Some(bundle.dir().display().to_string()),
            notes: bundle_notes,
            // The same resolution of [environments] as the archived bundle's, newer releases aside.
            exclude_newer: bundle
                .info()
                .environments
                .values()
                .find_map(|e| e.exclude_newer.clone()),
            overrides,
            ..RunOptions::default()
        },
        manifest,
        tree,
    })
}

impl PreparedRerun {
    /// Runs the archived manifest into a new bundle naming the archived one as `parent`, then
    /// removes the recorded tree when there is one (also on error or interrupt).
    ///
    /// # Errors
    /// [`ArchiveError::Session`] as the run session fails.
    pub fn run(self, launcher: &dyn Launcher, cancel: &CancelFlag) -> Result<SessionReport, ArchiveError> {
        let PreparedRerun {
            manifest,
            run_opts,
            tree,
            ..
        } = self;
        let report = crate::runner::experiment::run_manifest(&manifest, &run_opts, launcher, cancel);
        drop(tree);
        Ok(report?)
    }
}
