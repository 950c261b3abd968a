//! `hwr-exp list [DIR]`: one line per bundle under a results folder.
//!
//! Bundles are found at `DIR/<experiment>/<bundle>/bundle.json` (also `DIR/<bundle>/bundle.json`,
//! or `DIR` itself when it is a bundle). Per bundle it reads bundle.json, the first line of
//! revision.txt and `dirty` of provenance.json, and for `running` bundles the `.lock` file and
//! `/proc/<pid>/cmdline` of its runner.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ArchiveError;
use super::liveness::{EffectiveStatus, effective_status};
use crate::bundle::read::read_versioned;
use crate::bundle::{Outcome, files};

/// One bundle as `list` shows it (kebab-case keys in `--format json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ListEntry {
    /// Bundle folder, relative to the listed folder when inside it.
    pub bundle: String,
    /// `[experiment] name`.
    pub experiment: String,
    /// RFC 3339 UTC creation time.
    pub created: String,
    /// Effective status (`abandoned` when the runner is gone).
    pub status: EffectiveStatus,
    /// Recorded HEAD commit id (full), `None` when revision.txt names none.
    pub revision: Option<String>,
    /// Working tree dirty when the experiment started (`true`, `false` or `"unknown"` in JSON);
    /// `None` when provenance.json is unreadable or the experiment was not in a git repository.
    pub dirty: Option<crate::provenance::Dirty>,
    /// Finished runs with outcome `ok`.
    pub runs_ok: usize,
    /// Finished runs with any other outcome.
    pub runs_failed: usize,
    /// Planned runs.
    pub planned_runs: usize,
    /// The bundle this one reruns, relative to the listed folder when inside it.
    pub parent: Option<String>,
}

/// A bundle that could not be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListProblem {
    /// The bundle folder.
    pub bundle: PathBuf,
    /// What went wrong (names the file).
    pub message: String,
}

#[derive(Deserialize)]
struct Dirty {
    dirty: crate::provenance::Dirty,
    /// `null` when the manifest was not in a git repository: then there is no dirty state to show.
    #[serde(default)]
    repo: Option<String>,
}

/// Finds and reads every bundle under `dir`, sorted by creation time then path.
///
/// # Errors
/// [`ArchiveError::BadPath`] when `dir` is not a readable folder. Bundles that cannot be read are
/// returned as [`ListProblem`]s beside the entries.
pub fn scan(dir: &Path) -> Result<(Vec<ListEntry>, Vec<ListProblem>), ArchiveError> {
    let bad = |message: String| ArchiveError::BadPath {
        path: dir.to_path_buf(),
        message,
    };
    if !dir.is_dir() {
        return Err(bad("no such folder".into()));
    }
    let mut bundles = Vec::new();
    if dir.join(files::BUNDLE).is_file() {
        bundles.push(dir.to_path_buf());
    } else {
        for child in sorted_subdirs(dir).map_err(|e| bad(format!("cannot read folder: {e}")))? {
            if child.join(files::BUNDLE).is_file() {
                bundles.push(child);
            } else if let Ok(grandchildren) = sorted_subdirs(&child) {
                bundles.extend(
                    grandchildren
                        .into_iter()
                        .filter(|g| g.join(files::BUNDLE).is_file()),
                );
            }
        }
    }
    let base = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut entries = Vec::with_capacity(bundles.len());
    let mut problems = Vec::new();
    for b in bundles {
        match entry(&b, &base) {
            Ok(e) => entries.push(e),
            Err(e) => problems.push(ListProblem {
                bundle: b,
                message: e.to_string(),
            }),
        }
    }
    entries.sort_by(|a, b| (&a.created, &a.bundle).cmp(&(&b.created, &b.bundle)));
    Ok((entries, problems))
}

fn sorted_subdirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

fn relative_to(path: &Path, base: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match abs.strip_prefix(base) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => path.display().to_string(),
    }
}

fn entry(dir: &Path, base: &Path) -> Result<ListEntry, ArchiveError> {
    let bundle = super::open(dir)?;
    let info = bundle.info();
    let dirty = read_versioned::<Dirty>(
        &bundle.path(files::PROVENANCE),
        "format",
        crate::provenance::PROVENANCE_FORMAT,
    )
    .ok()
    .and_then(|d| {
        // Unknown is shown even when no repository root was recorded (a repository that could
        // not be opened): never as clean.
        (d.repo.is_some() || d.dirty == crate::provenance::Dirty::Unknown).then_some(d.dirty)
    });
    let runs_ok = info.counts.get(&Outcome::Ok).copied().unwrap_or(0);
    let runs_failed = info
        .counts
        .iter()
        .filter(|(o, _)| **o != Outcome::Ok)
        .map(|(_, n)| n)
        .sum();
    Ok(ListEntry {
        bundle: relative_to(dir, base),
        experiment: info.experiment.clone(),
        created: info.created.clone(),
        status: effective_status(bundle.dir(), info),
        revision: bundle.recorded_commit(),
        dirty,
        runs_ok,
        runs_failed,
        planned_runs: info.planned_runs,
        parent: info.parent.as_deref().map(|p| relative_to(Path::new(p), base)),
    })
}

/// Writes the entries as an aligned table with a header line; revisions are shortened to 10 hex
/// digits, `runs` is `ok/failed of planned`.
///
/// # Errors
/// Write errors.
pub fn write_table(entries: &[ListEntry], out: &mut impl Write) -> io::Result<()> {
    let header = [
        "BUNDLE",
        "EXPERIMENT",
        "CREATED",
        "STATUS",
        "REVISION",
        "DIRTY",
        "OK/FAILED",
        "PARENT",
    ];
    let rows: Vec<[String; 8]> = entries
        .iter()
        .map(|e| {
            [
                e.bundle.clone(),
                e.experiment.clone(),
                e.created.clone(),
                e.status.as_str().to_string(),
                e.revision
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |r| r[..r.len().min(10)].to_string()),
                e.dirty.map_or_else(|| "-".into(), |d| d.as_str().to_string()),
                format!("{}/{} of {}", e.runs_ok, e.runs_failed, e.planned_runs),
                e.parent.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[&str]| -> io::Result<()> {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(&header)?;
    for row in &rows {
        line(&row.each_ref().map(String::as_str))?;
    }
    Ok(())
}

/// Writes the entries as one pretty JSON array.
///
/// # Errors
/// Write errors.
pub fn write_json(entries: &[ListEntry], out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, entries).map_err(io::Error::other)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bundle: &str, status: EffectiveStatus, parent: Option<&str>) -> ListEntry {
        ListEntry {
            bundle: bundle.into(),
            experiment: "exp".into(),
            created: "2026-11-30T01:02:03.456Z".into(),
            status,
            revision: Some("0123456789abcdef0123456789abcdef01234567".into()),
            dirty: Some(crate::provenance::Dirty::Clean),
            runs_ok: 7,
            runs_failed: 1,
            planned_runs: 8,
            parent: parent.map(String::from),
        }
    }

    #[test]
    fn table_columns_align() {
        let rows = [
            entry("exp/a", EffectiveStatus::Complete, None),
            entry("exp/bbbbbbbb", EffectiveStatus::Abandoned, Some("exp/a")),
        ];
        let mut out = Vec::new();
        write_table(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(col(lines[0], "STATUS"), col(lines[1], "complete"));
        assert_eq!(col(lines[0], "STATUS"), col(lines[2], "abandoned"));
        assert!(lines[1].contains("0123456789 ") && !lines[1].contains("0123456789a"));
        assert!(lines[2].contains("7/1 of 8") && lines[2].ends_with("exp/a"));
        let mut json = Vec::new();
        write_json(&rows, &mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v[1]["status"], "abandoned");
        assert_eq!(v[1]["runs-failed"], 1);
    }

    #[test]
    fn scan_of_a_missing_folder_is_a_bad_path() {
        let e = scan(Path::new("/nonexistent/results")).unwrap_err();
        assert!(matches!(e, ArchiveError::BadPath { .. }));
    }
}
