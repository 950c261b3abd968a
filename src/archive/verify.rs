//! `hwr-exp verify BUNDLE`: is the archived bundle what was recorded?
//!
//! Checks, each failure a [`Problem`] naming the file:
//! - the bundle's top-level files exist (bundle.json, manifest.toml, plan.json, host.json,
//!   revision.txt, working-tree.txt, working-tree.patch, provenance.json) and their JSON reads;
//! - manifest.toml's sha256 equals bundle.json `manifest-sha256`;
//! - working-tree.patch's sha256 equals provenance.json `patch-sha256`;
//! - every run of plan.json: run.json present when the bundle is `complete`; every file listed in
//!   run.json `sha256` exists with that sha256; every entry of `artifacts` (and of
//!   `earlier-attempts`, under `attempts/<n>/`) is there with its kind, size, sha256 or symlink
//!   target, checked without following symlinks or opening anything but regular files; no other
//!   entry anywhere in the run folder;
//! - bundle.json `counts` equal the outcomes of the run.json files (unless still `running`);
//! - the patch applies to the recorded revision (`git read-tree` into a temporary index, then
//!   `git apply --check --cached`) when the repository has that commit; when it does not, a note
//!   says so and the check is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::ArchiveError;
use crate::bundle::artifacts;
use crate::bundle::read::Bundle;
use crate::bundle::write::sha256_file;
use crate::bundle::{BundleStatus, Outcome, files};

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
    /// Files whose sha256 was compared with the record.
    pub files_hashed: usize,
    /// Mismatches, missing and unexpected files; empty when the bundle is intact.
    pub problems: Vec<Problem>,
    /// Checks that could not be made and why (e.g. the repository lacks the recorded revision).
    pub notes: Vec<String>,
}

/// Verifies a bundle folder against its own records.
///
/// # Errors
/// [`ArchiveError`] when `dir` is not a bundle or bundle.json is unreadable or newer; everything
/// else found is a [`Problem`].
pub fn verify(dir: &Path) -> Result<Verification, ArchiveError> {
    let bundle = super::open(dir)?;
    let mut v = Verification::default();
    let mut problem = |path: PathBuf, message: String| v.problems.push(Problem { path, message });

    for name in [
        files::MANIFEST,
        files::PLAN,
        files::HOST,
        files::REVISION,
        files::WORKING_TREE,
        files::PATCH,
        files::PROVENANCE,
    ] {
        if !bundle.path(name).is_file() {
            problem(bundle.path(name), "missing".into());
        }
    }
    let mut hashed = 0;
    let manifest = bundle.path(files::MANIFEST);
    if let Ok(sha) = sha256_file(&manifest) {
        hashed += 1;
        if sha != bundle.info().manifest_sha256 {
            problem(
                manifest,
                format!(
                    "sha256 {sha} differs from manifest-sha256 {} recorded in bundle.json",
                    bundle.info().manifest_sha256
                ),
            );
        }
    }
    let provenance = match bundle.provenance_doc() {
        Ok(p) => Some(p),
        Err(e) => {
            if bundle.path(files::PROVENANCE).exists() {
                problem(bundle.path(files::PROVENANCE), e.reason());
            }
            None
        }
    };
    let patch = bundle.path(files::PATCH);
    if let (Some(prov), Ok(sha)) = (&provenance, sha256_file(&patch)) {
        hashed += 1;
        let recorded = serde_json::to_value(&prov.before)
            .ok()
            .and_then(|v| v.get("patch-sha256").and_then(|s| s.as_str().map(String::from)));
        if let Some(recorded) = recorded.filter(|r| *r != sha) {
            problem(
                patch.clone(),
                format!("sha256 {sha} differs from patch-sha256 {recorded} recorded in provenance.json"),
            );
        }
    }
    if bundle.path(files::HOST).exists()
        && let Err(e) = bundle.host_facts()
    {
        problem(bundle.path(files::HOST), e.reason());
    }

    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    match bundle.plan() {
        Err(e) => {
            if bundle.path(files::PLAN).exists() {
                problem(bundle.path(files::PLAN), e.reason());
            }
        }
        Ok(plan) => {
            for run in &plan.runs {
                let run_dir = bundle.run_dir(&run.run_id);
                let record = match bundle.run_record(&run.run_id) {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        if bundle.info().status == BundleStatus::Complete {
                            problem(
                                run_dir.join(files::RUN),
                                "missing, but the bundle is complete".into(),
                            );
                        }
                        continue;
                    }
                    Err(e) => {
                        problem(run_dir.join(files::RUN), e.reason());
                        continue;
                    }
                };
                *counts.entry(record.outcome).or_default() += 1;
                for (name, want) in &record.sha256 {
                    let path = run_dir.join(name);
                    match sha256_file(&path) {
                        Ok(got) => {
                            hashed += 1;
                            if got != *want {
                                problem(
                                    path,
                                    format!("sha256 {got} differs from {want} recorded in run.json"),
                                );
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            problem(path, "listed in run.json but missing".into());
                        }
                        Err(e) => problem(path, format!("cannot read: {e}")),
                    }
                }
                for (path, message) in artifacts::check(&run_dir, &record.artifacts) {
                    problem(path, message);
                }
                for earlier in &record.earlier_attempts {
                    let folder = run_dir
                        .join(artifacts::ATTEMPTS)
                        .join(earlier.attempt.to_string());
                    for (path, message) in artifacts::check(&folder, &earlier.files) {
                        problem(path, message);
                    }
                }
                hashed += record.artifacts.len()
                    + record
                        .earlier_attempts
                        .iter()
                        .map(|a| a.files.len())
                        .sum::<usize>();
                let mut expected: BTreeSet<String> = record.sha256.keys().cloned().collect();
                expected.insert(files::RUN.to_string());
                expected.extend(record.artifacts.iter().map(|a| a.name.clone()));
                if !record.earlier_attempts.is_empty() {
                    expected.insert(artifacts::ATTEMPTS.to_string());
                }
                for earlier in &record.earlier_attempts {
                    let folder = format!("{}/{}", artifacts::ATTEMPTS, earlier.attempt);
                    expected.extend(earlier.files.iter().map(|f| format!("{folder}/{}", f.name)));
                    expected.insert(folder);
                }
                if let Ok(found) = artifacts::list_tree(&run_dir, &[]) {
                    for (name, path) in found {
                        if !expected.contains(&name) {
                            problem(path, "not listed in run.json".into());
                        }
                    }
                }
            }
            let recorded: BTreeMap<Outcome, usize> = bundle
                .info()
                .counts
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(o, n)| (*o, *n))
                .collect();
            // While running, bundle.json counts are rewritten at most once a second, so a killed
            // runner may leave them behind the run.json files; only a finished status is exact.
            if recorded != counts && bundle.info().status != BundleStatus::Running {
                problem(
                    bundle.path(files::BUNDLE),
                    format!(
                        "counts {} differ from the run.json files ({})",
                        describe_counts(&recorded),
                        describe_counts(&counts)
                    ),
                );
            }
        }
    }
    v.files_hashed = hashed;
    check_patch(&bundle, provenance.as_ref(), &mut v);
    Ok(v)
}

fn describe_counts(counts: &BTreeMap<Outcome, usize>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(o, n)| {
            let word = serde_json::to_value(o)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            format!("{n} {word}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The repository to check the patch against: the recorded repository root when it still is a
/// repository, else the one holding the bundle folder.
pub(crate) fn find_repository(
    bundle: &Bundle,
    provenance: Option<&crate::provenance::ProvenanceDoc>,
) -> Option<git2::Repository> {
    provenance
        .and_then(|p| p.before.repo_root())
        .and_then(|root| git2::Repository::open(root).ok())
        .or_else(|| git2::Repository::discover(bundle.dir()).ok())
}

/// Runs `git apply --check --cached` of the bundle's patch against `revision` in a temporary
/// index of `repo` (the real index and working tree are not touched).
///
/// # Errors
/// git's message when the patch does not apply or git cannot be run.
pub(crate) fn patch_applies(repo: &git2::Repository, revision: &str, patch: &Path) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot create a temporary index: {e}"))?;
    let index = tmp.path().join("index");
    let git = |args: &[&std::ffi::OsStr]| -> Result<(), String> {
        let mut cmd = Command::new("git");
        match repo.workdir() {
            Some(w) => cmd.arg("-C").arg(w),
            None => cmd.arg("--git-dir").arg(repo.path()),
        };
        run_git(cmd.args(args).env("GIT_INDEX_FILE", &index))
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

fn check_patch(bundle: &Bundle, provenance: Option<&crate::provenance::ProvenanceDoc>, v: &mut Verification) {
    let patch = bundle.path(files::PATCH);
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
    let has_commit = git2::Oid::from_str(&revision)
        .ok()
        .is_some_and(|oid| repo.find_commit(oid).is_ok());
    if !has_commit {
        v.notes.push(format!(
            "patch not checked: the repository at {} does not have commit {revision}",
            repo.workdir().unwrap_or(repo.path()).display()
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
