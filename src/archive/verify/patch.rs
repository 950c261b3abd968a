//! Whether working-tree.patch still applies to revision.txt's commit, in a temporary index of the
//! recorded repository (also used by `rerun` to rebuild the recorded tree).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Checker, Problem};
use crate::bundle::files;
use crate::bundle::read::Bundle;
use crate::provenance::{ProvenanceDoc, git_cli};

/// A repository found with the git CLI (which reads every repository git reads, reftable and
/// SHA-256 ones included, where libgit2 may not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundRepo {
    /// The git folder (absolute).
    pub git_dir: PathBuf,
    /// The working tree's root; `None` for a bare repository.
    pub workdir: Option<PathBuf>,
}

impl FoundRepo {
    /// The working tree's root, else the git folder: what a message names.
    pub fn shown(&self) -> &Path {
        self.workdir.as_deref().unwrap_or(&self.git_dir)
    }

    /// Whether the repository has `revision` as a commit (`git cat-file -e REV^{commit}`).
    pub fn has_commit(&self, revision: &str) -> bool {
        git_cli::command_for_git_dir(&self.git_dir)
            .args(["cat-file", "-e"])
            .arg(format!("{revision}^{{commit}}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// The repository to check the patch against: the recorded repository root when it still is a
/// repository, else the one holding the bundle folder (both found by `git rev-parse`).
pub(crate) fn find_repository(bundle: &Bundle, provenance: Option<&ProvenanceDoc>) -> Option<FoundRepo> {
    let at =
        |start: &Path| git_cli::repository_at(start).map(|(git_dir, workdir)| FoundRepo { git_dir, workdir });
    provenance
        .and_then(|p| p.before.repo_root())
        .filter(|root| root.is_dir())
        .and_then(at)
        .or_else(|| at(bundle.dir()))
}

/// Runs `git apply --check --cached` of the bundle's patch against `revision` in a temporary
/// index of `repo` (the real index and working tree are not touched).
///
/// # Errors
/// git's message when the patch does not apply or git cannot be run.
pub(crate) fn patch_applies(repo: &FoundRepo, revision: &str, patch: &Path) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot create a temporary index: {e}"))?;
    let index = tmp.path().join("index");
    // The repository is named explicitly and the caller's GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
    // ... are removed; the temporary index is the only one git sees.
    let git = |args: &[&std::ffi::OsStr]| -> Result<(), String> {
        run_git(
            git_cli::command_for_git_dir(&repo.git_dir)
                .args(args)
                .env("GIT_INDEX_FILE", &index),
        )
    };
    git(&["read-tree".as_ref(), revision.as_ref()])?;
    git(&[
        "apply".as_ref(),
        "--check".as_ref(),
        "--cached".as_ref(),
        patch.as_os_str(),
    ])
}

/// Runs a prepared `git` command, capturing its output.
///
/// # Errors
/// git's stderr, trimmed, when it exits non-zero; `cannot run git: ...` when it cannot be started.
pub(crate) fn run_git(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// working-tree.patch applies to the recorded revision ([`patch_applies`]), when the repository
/// ([`find_repository`]) has that commit; otherwise a note says why it was not checked.
pub(super) fn applies(c: &mut Checker<'_>, provenance: Option<&ProvenanceDoc>) {
    let (bundle, v) = (c.bundle, &mut c.v);
    let patch = bundle.path(files::PATCH);
    if let Some(p) = provenance {
        let left_out = p.before.left_out_of_patch();
        if !left_out.is_empty() {
            let limits = p.before.patch_limits().map_or_else(String::new, |l| {
                format!(
                    " (patch-limit {} bytes, patch-file-limit {} bytes, {})",
                    l.total_bytes,
                    l.file_bytes,
                    match l.set_by {
                        crate::provenance::LimitsSource::Default => "the defaults",
                        crate::provenance::LimitsSource::Manifest => "set in the manifest",
                    }
                )
            });
            v.notes.push(format!(
                "{} file(s) are recorded in provenance.json by size and sha256 only, not in {}{limits}: a tree rebuilt from the patch lacks them (a tracked one has its content at revision.txt's commit instead), and `rerun --at-recorded-revision` rebuilds them only from a working tree that still holds them: {}",
                left_out.len(),
                files::PATCH,
                left_out.join(", ")
            ));
        }
    }
    let Some(revision) = bundle.recorded_commit() else {
        v.notes
            .push("patch not checked: revision.txt records no commit".into());
        return;
    };
    if fs::metadata(&patch).map(|m| m.len() == 0).unwrap_or(true) {
        return;
    }
    let Some(repo) = find_repository(bundle, provenance) else {
        v.notes.push(format!(
            "patch not checked: no repository found for commit {revision}"
        ));
        return;
    };
    if !repo.has_commit(&revision) {
        v.notes.push(format!(
            "patch not checked: the repository at {} does not have commit {revision}",
            repo.shown().display()
        ));
        return;
    }
    if let Err(message) = patch_applies(&repo, &revision, &patch) {
        v.problems.push(Problem {
            path: patch,
            message: format!("does not apply to {revision}: {message}"),
        });
    }
}

/// Most bytes of `--include` patterns given to one `git apply` (the kernel's limit is 2 MiB for
/// all arguments; more paths take more runs).
const INCLUDE_BYTES_PER_RUN: usize = 256 * 1024;

/// Every untracked file provenance.json records `in-patch: true` is in working-tree.patch with
/// the recorded bytes: the patch's new files are applied (`git apply --include=PATH`, the
/// untracked paths only) into an empty temporary folder outside any repository, and each file
/// written there is compared with the recorded sha256 (a symlink by its target). Needs no
/// repository. A file the patch lacks or holds with other bytes is a problem on the patch.
pub(super) fn untracked_files(c: &mut Checker<'_>, provenance: Option<&ProvenanceDoc>) {
    let Some(p) = provenance else { return };
    let wanted: Vec<_> = p.before.untracked().iter().filter(|u| u.in_patch).collect();
    if wanted.is_empty() {
        return;
    }
    let patch = c.bundle.path(files::PATCH);
    match apply_new_files(
        &patch,
        wanted
            .iter()
            .map(|u| crate::names::path_of(&u.path, u.path_bytes.as_ref())),
    ) {
        Err(message) => c.problem(patch, format!("its untracked files cannot be checked: {message}")),
        Ok(dir) => {
            for u in wanted {
                let rel = crate::names::path_of(&u.path, u.path_bytes.as_ref());
                let quoted = crate::terminal::escape(&u.path);
                let got = crate::provenance::git::content_sha256(&dir.path().join("tree").join(&rel));
                match (&got, &u.sha256) {
                    (None, _) => c.problem(
                        patch.clone(),
                        format!(
                            "does not hold the untracked file {quoted} that provenance.json records `in-patch: true`"
                        ),
                    ),
                    (Some(now), Some(recorded)) if now != recorded => c.problem(
                        patch.clone(),
                        format!(
                            "holds the untracked file {quoted} with sha256 {now}, provenance.json records {recorded}"
                        ),
                    ),
                    _ => {}
                }
            }
        }
    }
}

/// Applies the new files `paths` of `patch` into a new temporary folder (see
/// [`untracked_files`]); returns the folder.
///
/// # Errors
/// git's message when the patch does not apply or git cannot be run.
fn apply_new_files(
    patch: &Path,
    paths: impl Iterator<Item = std::path::PathBuf>,
) -> Result<tempfile::TempDir, String> {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::Builder::new()
        .prefix("hwr-exp-verify-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let dir = tmp.path().join("tree");
    fs::create_dir(&dir).map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let patterns: Vec<std::ffi::OsString> = paths
        .map(|p| {
            let mut arg = b"--include=".to_vec();
            for &b in p.as_os_str().as_bytes() {
                if matches!(b, b'*' | b'?' | b'[' | b'\\') {
                    arg.push(b'\\');
                }
                arg.push(b);
            }
            std::ffi::OsStr::from_bytes(&arg).to_os_string()
        })
        .collect();
    let mut rest = &patterns[..];
    while !rest.is_empty() {
        let mut bytes = 0;
        let take = rest
            .iter()
            .take_while(|a| {
                bytes += a.len() + 1;
                bytes <= INCLUDE_BYTES_PER_RUN
            })
            .count()
            .max(1);
        let (chunk, next) = rest.split_at(take);
        // Outside any repository: git applies the patch as `patch` would, in `dir` (the ceiling
        // stops it from finding a repository above the temporary folder).
        run_git(
            git_cli::command(&dir)
                .env("GIT_CEILING_DIRECTORIES", tmp.path())
                .args(["apply", "--whitespace=nowarn"])
                .args(chunk)
                .arg(patch),
        )?;
        rest = next;
    }
    Ok(tmp)
}
