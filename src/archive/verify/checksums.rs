//! `checksums.sha256`, the list a finished bundle keeps of every file in it
//! ([`crate::bundle::checksums`]): every listed file has its sha256, no other file is there.

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use super::{Checker, Problem, not_a_folder};
use crate::bundle::checksums::{read_checksums, unlisted, walk};
use crate::bundle::contained::sha256_in;
use crate::bundle::{BundleStatus, files};

/// Checks every file against `checksums.sha256` when bundle.json has a final status, and names
/// files the list does not have (entries that are not regular files and that a run.json records
/// as artifacts, `special`, are checked against that record instead). A file that already has a
/// problem (from its run.json or bundle.json record) gets no second one from the list.
pub(super) fn checksums(c: &mut Checker<'_>) {
    let (bundle, v, hashed, special) = (c.bundle, &mut c.v, &mut c.hashed, &c.special);
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
