//! The runs of plan.json: each run folder against its run.json (listed sha256, artifacts, no
//! other entry), no unplanned folder in `runs/`, and bundle.json `counts` against the run.json
//! files.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::{Checker, not_a_folder};
use crate::bundle::artifacts::{self, ArtifactKind};
use crate::bundle::format::RunRecord;
use crate::bundle::read::ReadError;
use crate::bundle::{BundleStatus, Outcome, files};
use crate::digest::sha256_reader;

/// Whether plan.json's header reads (a missing one is `setup::files_present`'s problem).
pub(super) fn plan(c: &mut Checker<'_>) -> bool {
    match c.bundle.plan_header() {
        Ok(_) => true,
        Err(e) => {
            if !matches!(e, ReadError::Missing { .. }) {
                c.problem(c.bundle.path(files::PLAN), e.reason());
            }
            false
        }
    }
}

/// No unplanned folder in `runs/`, then every planned run ([`run`]). Returns how many run.json
/// files record each outcome. plan.json is streamed twice (its runs are never all in memory):
/// once to find the unplanned folders among those present, once to check each run.
pub(super) fn runs(c: &mut Checker<'_>) -> BTreeMap<Outcome, usize> {
    let runs_dir = c.bundle.path(files::RUNS);
    if let Some(what) = not_a_folder(&runs_dir) {
        c.problem(runs_dir.clone(), format!("{what}, not a folder: not entered"));
    } else if let Ok(entries) = fs::read_dir(&runs_dir) {
        let mut present: HashSet<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        // A plan.json that does not read through is reported once, below.
        for planned in c
            .bundle
            .planned_runs()
            .into_iter()
            .flatten()
            .map_while(Result::ok)
        {
            present.remove(&planned.run_id);
        }
        let mut extra: Vec<String> = present.into_iter().collect();
        extra.sort();
        for name in extra {
            c.problem(runs_dir.join(name), "not a run of plan.json".into());
        }
    }
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut ids = Vec::with_capacity(1024);
    let bundle = c.bundle;
    let mut planned = match bundle.planned_runs() {
        Ok(r) => Some(r),
        Err(e) => {
            c.problem(bundle.path(files::PLAN), e.reason());
            None
        }
    };
    // Run ids in batches of 1,024: the checks need the checker the ids' reader would borrow.
    while let Some(runs) = planned.as_mut() {
        ids.clear();
        for item in runs.by_ref().take(1024) {
            match item {
                Ok(r) => ids.push(r.run_id),
                Err(e) => {
                    c.problem(bundle.path(files::PLAN), e.reason());
                    planned = None;
                    break;
                }
            }
        }
        if ids.is_empty() {
            break;
        }
        for id in &ids {
            if let Some(outcome) = run(c, id) {
                *counts.entry(outcome).or_default() += 1;
            }
        }
    }
    counts
}

/// One run folder: run.json there when the bundle is complete, then its listed files
/// ([`listed_sha256`]), its artifacts ([`artifacts`]) and no other entry ([`unlisted_entries`]).
/// Returns the outcome run.json records, when it reads.
fn run(c: &mut Checker<'_>, run_id: &str) -> Option<Outcome> {
    let run_dir = c.bundle.run_dir(run_id);
    if let Some(what) = not_a_folder(&run_dir) {
        c.problem(run_dir, format!("{what}, not a folder: not entered"));
        return None;
    }
    let record = match c.bundle.run_record(run_id) {
        Ok(Some(r)) => r,
        Ok(None) => {
            if c.bundle.info().status == BundleStatus::Complete {
                c.problem(
                    run_dir.join(files::RUN),
                    "missing, but the bundle is complete".into(),
                );
            }
            return None;
        }
        Err(e) => {
            c.problem(run_dir.join(files::RUN), e.reason());
            return None;
        }
    };
    listed_sha256(c, run_id, &run_dir, &record);
    artifacts(c, &run_dir, &record);
    unlisted_entries(c, &run_dir, &record);
    Some(record.outcome)
}

/// Every file listed in run.json `sha256` exists with that sha256.
fn listed_sha256(c: &mut Checker<'_>, run_id: &str, run_dir: &Path, record: &RunRecord) {
    for (name, want) in &record.sha256 {
        let path = run_dir.join(name);
        let got = c.bundle.open_run_file(run_id, name).and_then(|f| {
            sha256_reader(f).map_err(|source| ReadError::Io {
                path: path.clone(),
                source,
            })
        });
        match got {
            Ok(got) => {
                c.hashed.insert(path.clone());
                if got != *want {
                    c.problem(
                        path,
                        format!("sha256 {got} differs from {want} recorded in run.json"),
                    );
                }
            }
            Err(ReadError::Missing { .. }) => {
                c.problem(path, "listed in run.json but missing".into());
            }
            Err(e) => c.problem(path, e.reason()),
        }
    }
}

/// Every entry of `artifacts` (and of `earlier-attempts`, under `attempts/<n>/`) is there with
/// its kind, size, sha256 or symlink target ([`artifacts::check`]); they count as hashed, and the
/// entries that are not files or folders are remembered for the checksum-list check.
fn artifacts(c: &mut Checker<'_>, run_dir: &Path, record: &RunRecord) {
    for (path, message) in artifacts::check(run_dir, &record.artifacts) {
        c.problem(path, message);
    }
    for earlier in &record.earlier_attempts {
        let folder = run_dir
            .join(artifacts::ATTEMPTS)
            .join(earlier.attempt.to_string());
        for (path, message) in artifacts::check(&folder, &earlier.files) {
            c.problem(path, message);
        }
    }
    for a in &record.artifacts {
        c.hashed.insert(run_dir.join(a.path()));
        if !matches!(a.kind, ArtifactKind::File | ArtifactKind::Directory) {
            c.special.insert(run_dir.join(a.path()));
        }
    }
    for earlier in &record.earlier_attempts {
        let folder = run_dir
            .join(artifacts::ATTEMPTS)
            .join(earlier.attempt.to_string());
        c.hashed
            .extend(earlier.files.iter().map(|f| folder.join(f.path())));
        c.special.extend(
            earlier
                .files
                .iter()
                .filter(|f| !matches!(f.kind, ArtifactKind::File | ArtifactKind::Directory))
                .map(|f| folder.join(f.path())),
        );
    }
}

/// No entry anywhere in the run folder that run.json does not record (listed files, artifacts,
/// earlier attempts, run.json itself); a link or special file is named, never followed.
fn unlisted_entries(c: &mut Checker<'_>, run_dir: &Path, record: &RunRecord) {
    // Compared as exact names (bytes): a name that is not UTF-8 is recorded with `name-bytes`.
    let mut expected: BTreeSet<PathBuf> = record.sha256.keys().map(PathBuf::from).collect();
    expected.insert(PathBuf::from(files::RUN));
    expected.extend(record.artifacts.iter().map(|a| a.path()));
    if !record.earlier_attempts.is_empty() {
        expected.insert(PathBuf::from(artifacts::ATTEMPTS));
    }
    for earlier in &record.earlier_attempts {
        let folder = Path::new(artifacts::ATTEMPTS).join(earlier.attempt.to_string());
        expected.extend(earlier.files.iter().map(|f| folder.join(f.path())));
        expected.insert(folder);
    }
    if let Ok(found) = artifacts::list_tree(run_dir, &[]) {
        for (_, path) in found {
            let rel = path.strip_prefix(run_dir).unwrap_or(&path);
            if !expected.contains(rel) {
                let message = match not_a_folder(&path) {
                    Some(what) if what != "a regular file" => {
                        format!("{what} (not followed), not listed in run.json")
                    }
                    _ => "not listed in run.json".into(),
                };
                c.problem(path, message);
            }
        }
    }
}

/// bundle.json `counts` equal `counts`, the outcomes of the run.json files. While running,
/// bundle.json counts are rewritten at most once a second, so a killed runner may leave them
/// behind the run.json files; only a finished status is exact.
pub(super) fn counts(c: &mut Checker<'_>, counts: &BTreeMap<Outcome, usize>) {
    let recorded: BTreeMap<Outcome, usize> = c
        .bundle
        .info()
        .counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(o, n)| (*o, *n))
        .collect();
    if recorded != *counts && c.bundle.info().status != BundleStatus::Running {
        c.problem(
            c.bundle.path(files::BUNDLE),
            format!(
                "counts {} differ from the run.json files ({})",
                describe_counts(&recorded),
                describe_counts(counts)
            ),
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
            let word = o.as_str();
            format!("{n} {word}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}
