//! `hwr-exp list [DIR]`: one line per bundle under a results folder.
//!
//! Bundles are found at `DIR/<experiment>/<bundle>/bundle.json` (also `DIR/<bundle>/bundle.json`,
//! or `DIR` itself when it is a bundle). Per bundle it reads bundle.json, the first line of
//! revision.txt and `dirty` of provenance.json, and for `running` bundles probes the bundle's lock
//! (a non-blocking shared `flock` on `.lock`, [`crate::bundle::lock`]).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ArchiveError;
use crate::bundle::lock::{EffectiveStatus, effective_status};
use crate::bundle::read::read_versioned;
use crate::bundle::{Outcome, files};
use crate::table;

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
    /// Effective status (`abandoned` when no process holds the bundle's lock).
    pub status: EffectiveStatus,
    /// Recorded HEAD commit id (full), `None` when revision.txt names none.
    pub revision: Option<String>,
    /// Working tree dirty when the experiment started (`true`, `false` or `"unknown"` in JSON);
    /// `None` when provenance.json is unreadable or the experiment was not in a git repository.
    pub dirty: Option<crate::provenance::Dirty>,
    /// `false` when provenance.json says the manifest was in no git repository: no revision and
    /// no working tree were recorded (the table's dirty column says `not recorded`).
    pub provenance_recorded: bool,
    /// Finished runs with outcome `ok`.
    pub runs_ok: usize,
    /// Finished runs with any other outcome but `interrupted` (a run stopped by the user did not
    /// fail: it counts as not run).
    pub runs_failed: usize,
    /// Planned runs that are neither ok nor failed: never started, or interrupted (what `resume`
    /// runs).
    pub runs_not_run: usize,
    /// Planned runs.
    pub planned_runs: usize,
    /// The bundle this one reruns, relative to the listed folder when inside it.
    pub parent: Option<String>,
    /// Slurm executor: submitted, running and finished runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmCounts>,
    /// Why the status is `unknown` (a detached Slurm bundle whose queue could not be asked:
    /// `squeue did not answer: ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_note: Option<String>,
    /// Slurm executor: the last sbatch refusal bundle.json records (Slurm's message and the
    /// limit it names), when the bundle failed for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sbatch_refused: Option<String>,
}

/// `list`'s counts for a bundle submitted to Slurm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SlurmCounts {
    /// Runs submitted (the plan's size).
    pub submitted: usize,
    /// Tasks `squeue` shows RUNNING; `None` when the bundle is finished or Slurm did not answer.
    pub running: Option<usize>,
    /// Runs with a run.json.
    pub finished: usize,
    /// Pending tasks by Slurm's reason (`2 pending (PartitionTimeLimit)`); `None` when none is
    /// pending, the bundle is finished or Slurm did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

/// The [`SlurmCounts`] of a Slurm bundle, and whether some task of it is still active in `squeue`
/// (a detached bundle has no lock holder but is alive while its tasks are queued or running):
/// `Err(why)` when that is unknown (no cluster configured, or `squeue` failed or timed out).
/// `squeue` is asked only while `ask_queue`.
fn slurm_counts(
    bundle: &crate::bundle::read::Bundle,
    ask_queue: bool,
) -> (SlurmCounts, Result<bool, String>) {
    let info = bundle.info();
    let finished = bundle
        .planned_runs()
        .map(|runs| {
            runs.map_while(Result::ok)
                .filter(|r| bundle.run_dir(&r.run_id).join(files::RUN).exists())
                .count()
        })
        .unwrap_or(0);
    let mut running = None;
    let mut active = Ok(false);
    let mut pending = None;
    if ask_queue {
        let arrays = info.slurm.as_ref().map(|s| s.arrays.clone()).unwrap_or_default();
        let snapshot = crate::slurm::TaskMap::new(&arrays)
            .map_err(|e| format!("the recorded arrays cannot be read: {e}"))
            .and_then(|map| {
                crate::slurm::SlurmClient::new()
                    .with_retry(crate::slurm::RetryPolicy::once())
                    .queue(&map.job_ids())
                    .map(|snapshot| (map, snapshot))
                    .map_err(|e| format!("squeue did not answer: {e}"))
            });
        if let Err(why) = &snapshot {
            active = Err(why.clone());
        }
        if let Ok((map, snapshot)) = snapshot {
            let current = snapshot.tasks.iter().filter(|(k, _)| map.index(**k).is_some());
            let states: Vec<_> = current.map(|(_, e)| e.state.clone()).collect();
            running = Some(
                states
                    .iter()
                    .filter(|s| **s == crate::slurm::TaskState::Running)
                    .count(),
            );
            active = Ok(states.iter().any(|s| !s.is_finished()));
            pending =
                crate::slurm::queue::pending_text(&snapshot.pending_reasons(|k| map.index(k).is_some()));
        }
    }
    (
        SlurmCounts {
            submitted: info.planned_runs,
            running,
            finished,
            pending,
        },
        active,
    )
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
struct DirtyState {
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
    if has_bundle_json(dir) {
        bundles.push(dir.to_path_buf());
    } else {
        for child in sorted_subdirs(dir).map_err(|e| bad(format!("cannot read folder: {e}")))? {
            if has_bundle_json(&child) {
                bundles.push(child);
            } else if let Ok(grandchildren) = sorted_subdirs(&child) {
                bundles.extend(grandchildren.into_iter().filter(|g| has_bundle_json(g)));
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

/// Whether `dir` holds an entry named bundle.json of any kind: a FIFO, a link or a folder of that
/// name makes the folder a bundle that cannot be read, reported with a warning naming the file
/// (never skipped silently, never opened in a way that blocks: [`crate::bundle::contained`]).
fn has_bundle_json(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(files::BUNDLE)).is_ok()
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
    let state = read_versioned::<DirtyState>(
        &bundle.path(files::PROVENANCE),
        "format",
        crate::provenance::PROVENANCE_FORMAT,
    )
    .ok();
    // Unknown is shown even when no repository root was recorded (a repository that could not
    // be opened): never as clean. No root and no unknown state: nothing was recorded.
    let recorded = |d: &DirtyState| d.repo.is_some() || d.dirty == crate::provenance::Dirty::Unknown;
    let provenance_recorded = state.as_ref().is_none_or(recorded);
    let dirty = state.filter(recorded).map(|d| d.dirty);
    let runs_ok = info.counts.get(&Outcome::Ok).copied().unwrap_or(0);
    let runs_failed = info
        .counts
        .iter()
        .filter(|(o, _)| !matches!(**o, Outcome::Ok | Outcome::Interrupted))
        .map(|(_, n)| n)
        .sum();
    let runs_not_run = info.planned_runs.saturating_sub(runs_ok + runs_failed);
    let mut status = effective_status(bundle.dir(), info);
    let mut status_note = None;
    let slurm = info.is_slurm().then(|| {
        let unfinished = matches!(status, EffectiveStatus::Running | EffectiveStatus::Abandoned);
        let (counts, active) = slurm_counts(&bundle, unfinished);
        match active {
            // Detached: no waiter holds the lock, but Slurm still runs the bundle's tasks.
            Ok(true) if status == EffectiveStatus::Abandoned => status = EffectiveStatus::Running,
            // Whether its tasks still run is not known: never call it abandoned.
            Err(why) if status == EffectiveStatus::Abandoned => {
                status = EffectiveStatus::Unknown;
                status_note = Some(why);
            }
            _ => {}
        }
        counts
    });
    // Ray, detached: no waiter holds the lock, but the bundle's driver still runs its tasks (on
    // this host; a driver on another host cannot be seen from here: never called abandoned).
    if status == EffectiveStatus::Abandoned && info.executor.as_deref() == Some("ray") {
        match crate::runner::backend::ray::DriverRecord::latest(bundle.dir()) {
            Ok(Some(d)) if d.on_this_host() && d.alive() => status = EffectiveStatus::Running,
            Ok(Some(d)) if !d.on_this_host() => {
                status = EffectiveStatus::Unknown;
                status_note = Some(format!(
                    "its ray driver runs on {}: `hwr-exp list` there tells whether it still runs",
                    d.host
                ));
            }
            _ => {}
        }
    }
    Ok(ListEntry {
        bundle: relative_to(dir, base),
        experiment: info.experiment.clone(),
        created: info.created.clone(),
        status,
        revision: bundle.recorded_commit(),
        dirty,
        provenance_recorded,
        runs_ok,
        runs_failed,
        runs_not_run,
        planned_runs: info.planned_runs,
        parent: info.parent.as_deref().map(|p| relative_to(Path::new(p), base)),
        slurm,
        status_note,
        sbatch_refused: (status == EffectiveStatus::Failed)
            .then(|| info.slurm.as_ref()?.refusals.last().map(|r| r.describe()))
            .flatten(),
    })
}

/// Writes the entries as a plain table ([`crate::table::Style::Plain`]) with a header line;
/// revisions are shortened to 10 hex digits; `OK`, `FAILED` and `PLANNED` count runs (`FAILED`:
/// finished runs with any outcome but `ok`).
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
        "OK",
        "FAILED",
        "NOT-RUN",
        "PLANNED",
        "PARENT",
    ];
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.bundle.clone(),
                e.experiment.clone(),
                e.created.clone(),
                match &e.slurm {
                    // `running (slurm: 2 running, 3/8 finished)`; `?` when Slurm did not answer.
                    // With pending tasks: `running (slurm: 0 running, 2 pending (PartitionTimeLimit), 0/2 finished)`.
                    Some(c) if e.status == EffectiveStatus::Running => format!(
                        "{} (slurm: {} running, {}{}/{} finished)",
                        e.status.as_str(),
                        c.running.map_or_else(|| "?".to_string(), |n| n.to_string()),
                        c.pending.as_ref().map(|p| format!("{p}, ")).unwrap_or_default(),
                        c.finished,
                        c.submitted
                    ),
                    _ => match (&e.sbatch_refused, &e.status_note) {
                        (Some(r), _) => format!("{} (sbatch refused: {r})", e.status.as_str()),
                        (None, Some(why)) => format!("{} ({why})", e.status.as_str()),
                        (None, None) => e.status.as_str().to_string(),
                    },
                },
                e.revision
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |r| r[..r.len().min(10)].to_string()),
                match e.dirty {
                    Some(d) => d.as_str().to_string(),
                    None if !e.provenance_recorded => "not recorded".into(),
                    None => "-".into(),
                },
                e.runs_ok.to_string(),
                e.runs_failed.to_string(),
                e.runs_not_run.to_string(),
                e.planned_runs.to_string(),
                e.parent.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = header.map(String::from).to_vec();
    let numeric = [
        false, false, false, false, false, false, true, true, true, true, false,
    ];
    writeln!(
        out,
        "{}",
        table::render(table::Style::Plain, header, rows, &numeric)
    )
}

/// Writes the entries as one pretty JSON array.
///
/// # Errors
/// Write errors.
pub fn write_json(entries: &[ListEntry], out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, entries).map_err(io::Error::from)?;
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
            status_note: None,
            status,
            revision: Some("0123456789abcdef0123456789abcdef01234567".into()),
            dirty: Some(crate::provenance::Dirty::Clean),
            provenance_recorded: true,
            runs_ok: 7,
            runs_failed: 1,
            runs_not_run: 0,
            planned_runs: 8,
            parent: parent.map(String::from),
            slurm: None,
            sbatch_refused: None,
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
        assert!(lines[2].ends_with("exp/a"));
        let counts =
            |l: &str| -> Vec<String> { l.split_whitespace().skip(6).take(4).map(String::from).collect() };
        assert_eq!(counts(lines[0]), ["OK", "FAILED", "NOT-RUN", "PLANNED"]);
        assert_eq!(counts(lines[2]), ["7", "1", "0", "8"]);
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
