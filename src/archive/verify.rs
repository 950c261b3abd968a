//! `hwr-exp verify BUNDLE`: is the archived bundle what was recorded?
//!
//! Checks, each failure a [`Problem`] naming the file:
//! - the bundle's top-level files exist as regular files (bundle.json, manifest.toml, plan.json,
//!   host.json, revision.txt, working-tree.txt, working-tree.patch, provenance.json) and their JSON
//!   reads;
//! - manifest.toml's sha256 equals bundle.json `manifest-sha256`, and plan.json, host.json,
//!   revision.txt, working-tree.txt and working-tree.patch have the sha256 bundle.json
//!   `setup-sha256` recorded for them when the bundle was set up (a run can reach them; the
//!   checksum list, written at the end, would take in an edit made while the runs executed);
//! - working-tree.patch's sha256 equals provenance.json `patch-sha256`;
//! - every run of plan.json: run.json present when the bundle is `complete`; every file listed in
//!   run.json `sha256` exists with that sha256; every entry of `artifacts` (and of
//!   `earlier-attempts`, under `attempts/<n>/`) is there with its kind, size, sha256 or symlink
//!   target, checked without following symlinks or opening anything but regular files; no other
//!   entry anywhere in the run folder;
//!   no folder in `runs/` that plan.json does not plan;
//! - bundle.json `counts` equal the outcomes of the run.json files (unless still `running`);
//! - when bundle.json has a final status: every file listed in `checksums.sha256`
//!   ([`crate::bundle::checksums`]) exists with that sha256, and no other file is in the bundle
//!   (the list itself and `.lock` aside): edits to any file, bundle.json and run.json included,
//!   are caught;
//! - when a live process holds the bundle's lock ([`crate::bundle::lock`]), a note says the bundle
//!   is still being written.
//! - the patch applies to the recorded revision (`git read-tree` into a temporary index, then
//!   `git apply --check --cached`) when the repository has that commit; when it does not, a note
//!   says so and the check is skipped.
//!
//! Every file is read inside the bundle only: names from bundle files are checked to be plain names,
//! nothing is opened through a symbolic link and only regular files are read
//! ([`crate::bundle::contained`]); a link, FIFO or device where a file should be is a problem, never
//! followed.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::ArchiveError;
use crate::bundle::artifacts::{self, ArtifactKind};
use crate::bundle::checksums::{read_checksums, unlisted, walk};
use crate::bundle::contained::{describe, sha256_in};
use crate::bundle::lock::{EffectiveStatus, effective_status, recorded_pid};
use crate::bundle::read::{Bundle, ReadError};
use crate::bundle::write::SETUP_FILES;
use crate::bundle::{BundleStatus, Outcome, files};
use crate::digest::sha256_reader;
use crate::provenance::git_cli;

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

/// Verifies a bundle folder against its own records.
///
/// # Errors
/// [`ArchiveError`] when `dir` is not a bundle or bundle.json is unreadable or newer; everything
/// else found is a [`Problem`].
pub fn verify(dir: &Path) -> Result<Verification, ArchiveError> {
    let bundle = super::open(dir)?;
    let mut v = Verification::default();
    let live = effective_status(bundle.dir(), bundle.info()) == EffectiveStatus::Running;
    if live {
        v.notes.push(format!(
            "a live process{} holds this bundle's lock and is still writing it: unfinished runs are not checked, and files may change after this check",
            recorded_pid(bundle.dir())
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default()
        ));
    }
    let mut problems = Vec::new();
    let mut problem = |path: PathBuf, message: String| problems.push(Problem { path, message });

    for name in [
        files::MANIFEST,
        files::PLAN,
        files::HOST,
        files::REVISION,
        files::WORKING_TREE,
        files::PATCH,
        files::PROVENANCE,
    ] {
        match bundle.open_file(Path::new(name)) {
            Ok(_) => {}
            Err(ReadError::Missing { path }) => problem(path, "missing".into()),
            Err(e) => problem(e.path().to_path_buf(), e.reason()),
        }
    }
    let mut hashed: HashSet<PathBuf> = HashSet::new();
    // Symlinks, FIFOs, sockets and devices a run left, recorded in its run.json `artifacts` (the
    // checksum list holds regular files only).
    let mut special: HashSet<PathBuf> = HashSet::new();
    let manifest = bundle.path(files::MANIFEST);
    if let Ok(sha) = sha256_of(&bundle, Path::new(files::MANIFEST)) {
        hashed.insert(manifest.clone());
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
    // Only the known setup files: names in bundle.json are not trusted.
    for (name, recorded) in SETUP_FILES
        .iter()
        .filter_map(|name| Some((*name, bundle.info().setup_sha256.get(*name)?)))
    {
        let path = bundle.path(name);
        if let Ok(sha) = sha256_of(&bundle, Path::new(name))
            && &sha != recorded
        {
            problem(
                path,
                format!(
                    "sha256 {sha} differs from setup-sha256 {recorded} recorded in bundle.json: changed after the bundle was set up"
                ),
            );
        }
    }
    let provenance = match bundle.provenance_doc() {
        Ok(p) => Some(p),
        Err(e) => {
            if !matches!(e, ReadError::Missing { .. }) {
                problem(bundle.path(files::PROVENANCE), e.reason());
            }
            None
        }
    };
    let patch = bundle.path(files::PATCH);
    if let (Some(prov), Ok(sha)) = (&provenance, sha256_of(&bundle, Path::new(files::PATCH))) {
        hashed.insert(patch.clone());
        let recorded = prov.before.patch_sha256();
        if recorded != sha {
            problem(
                patch.clone(),
                format!("sha256 {sha} differs from patch-sha256 {recorded} recorded in provenance.json"),
            );
        }
    }
    if let Err(e) = bundle.host_facts()
        && !matches!(e, ReadError::Missing { .. })
    {
        problem(bundle.path(files::HOST), e.reason());
    }

    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    match bundle.plan() {
        Err(e) => {
            if !matches!(e, ReadError::Missing { .. }) {
                problem(bundle.path(files::PLAN), e.reason());
            }
        }
        Ok(plan) => {
            let planned: HashSet<&str> = plan.runs.iter().map(|r| r.run_id.as_str()).collect();
            let runs_dir = bundle.path(files::RUNS);
            if let Some(what) = not_a_folder(&runs_dir) {
                problem(runs_dir.clone(), format!("{what}, not a folder: not entered"));
            } else if let Ok(entries) = fs::read_dir(&runs_dir) {
                let mut extra: Vec<String> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !planned.contains(n.as_str()))
                    .collect();
                extra.sort();
                for name in extra {
                    problem(runs_dir.join(name), "not a run of plan.json".into());
                }
            }
            for run in &plan.runs {
                let run_dir = bundle.run_dir(&run.run_id);
                if let Some(what) = not_a_folder(&run_dir) {
                    problem(run_dir, format!("{what}, not a folder: not entered"));
                    continue;
                }
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
                    let got = bundle.open_run_file(&run.run_id, name).and_then(|f| {
                        sha256_reader(f).map_err(|source| ReadError::Io {
                            path: path.clone(),
                            source,
                        })
                    });
                    match got {
                        Ok(got) => {
                            hashed.insert(path.clone());
                            if got != *want {
                                problem(
                                    path,
                                    format!("sha256 {got} differs from {want} recorded in run.json"),
                                );
                            }
                        }
                        Err(ReadError::Missing { .. }) => {
                            problem(path, "listed in run.json but missing".into());
                        }
                        Err(e) => problem(path, e.reason()),
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
                for a in &record.artifacts {
                    hashed.insert(run_dir.join(&a.name));
                    if !matches!(a.kind, ArtifactKind::File | ArtifactKind::Directory) {
                        special.insert(run_dir.join(&a.name));
                    }
                }
                for earlier in &record.earlier_attempts {
                    let folder = run_dir
                        .join(artifacts::ATTEMPTS)
                        .join(earlier.attempt.to_string());
                    hashed.extend(earlier.files.iter().map(|f| folder.join(&f.name)));
                    special.extend(
                        earlier
                            .files
                            .iter()
                            .filter(|f| !matches!(f.kind, ArtifactKind::File | ArtifactKind::Directory))
                            .map(|f| folder.join(&f.name)),
                    );
                }
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
                            let message = match not_a_folder(&path) {
                                Some(what) if what != "a regular file" => {
                                    format!("{what} (not followed), not listed in run.json")
                                }
                                _ => "not listed in run.json".into(),
                            };
                            problem(path, message);
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
    v.problems = problems;
    check_checksums(&bundle, &mut v, &mut hashed, &special);
    v.files_hashed = hashed.len();
    if bundle.open_file(Path::new(files::PATCH)).is_ok() {
        check_patch(&bundle, provenance.as_ref(), &mut v);
    }
    Ok(v)
}

/// Checks every file against `checksums.sha256` when bundle.json has a final status, and names
/// files the list does not have (entries that are not regular files and that a run.json records
/// as artifacts, `special`, are checked against that record instead). A file that already has a problem (from its run.json or
/// bundle.json record) gets no second one from the list.
fn check_checksums(
    bundle: &Bundle,
    v: &mut Verification,
    hashed: &mut HashSet<PathBuf>,
    special: &HashSet<PathBuf>,
) {
    let already: HashSet<PathBuf> = v.problems.iter().map(|p| p.path.clone()).collect();
    let list = bundle.path(files::CHECKSUMS);
    if bundle.info().status == BundleStatus::Running {
        let why = match crate::bundle::lock::effective_status(bundle.dir(), bundle.info()) {
            crate::bundle::lock::EffectiveStatus::Abandoned => {
                "the bundle was abandoned (its runner is gone without finishing it; `hwr-exp resume` finishes it)"
            }
            _ => "the bundle is still running",
        };
        v.notes.push(format!(
            "{} not checked: {why}; the list is written when the bundle is finished",
            files::CHECKSUMS
        ));
        return;
    }
    let mut problem = |path: PathBuf, message: String| {
        if !already.contains(&path) {
            v.problems.push(Problem { path, message });
        }
    };
    let checksums = match read_checksums(bundle.dir()) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            problem(
                list,
                "missing: a finished bundle records the sha256 of every file in it here".into(),
            );
            return;
        }
        Err(e) => {
            problem(list, format!("cannot read: {e}"));
            return;
        }
    };
    if !checksums.bad_lines.is_empty() {
        let shown: Vec<&str> = checksums.bad_lines.iter().take(5).map(String::as_str).collect();
        let more = checksums.bad_lines.len() - shown.len();
        problem(
            list.clone(),
            format!(
                "{} unusable line(s): {}{}",
                checksums.bad_lines.len(),
                shown.join("; "),
                if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                }
            ),
        );
    }
    for (rel, want) in &checksums.entries {
        let path = bundle.dir().join(rel);
        match sha256_in(bundle.dir(), rel) {
            Ok(got) => {
                hashed.insert(path.clone());
                if got != *want {
                    problem(
                        path,
                        format!(
                            "sha256 {got} differs from {want} recorded in {}",
                            files::CHECKSUMS
                        ),
                    );
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                problem(path, format!("listed in {} but missing", files::CHECKSUMS));
            }
            Err(e) => problem(path, format!("cannot read: {e}")),
        }
    }
    let listed: BTreeSet<&Path> = checksums.entries.keys().map(PathBuf::as_path).collect();
    let walked = walk(bundle.dir(), &mut |entry| {
        let (rel, is_file) = (entry.rel, entry.kind == rustix::fs::FileType::RegularFile);
        if entry.kind == rustix::fs::FileType::Directory || unlisted(rel) || listed.contains(rel) {
            return Ok(());
        }
        if !is_file && special.contains(&bundle.dir().join(rel)) {
            return Ok(());
        }
        let message = if is_file {
            format!("not listed in {}", files::CHECKSUMS)
        } else {
            let what = not_a_folder(&bundle.dir().join(rel)).unwrap_or("not a regular file");
            format!("{what} (not followed), not listed in {}", files::CHECKSUMS)
        };
        problem(bundle.dir().join(rel), message);
        Ok(())
    });
    if let Err(e) = walked {
        problem(
            bundle.dir().to_path_buf(),
            format!("cannot list the bundle's files: {e}"),
        );
    }
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
    // The repository is named explicitly and the caller's GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
    // ... are removed; the temporary index is the only one git sees.
    let git = |args: &[&std::ffi::OsStr]| -> Result<(), String> {
        run_git(
            git_cli::command_for_git_dir(repo.path())
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
