//! A run's folder: keeping an earlier attempt, the run.json of a finished run (its output check,
//! checksums, artifacts and outcome), and the writer of a Slurm array task's run folders.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::atomic::{Durability, create_dir, on, write_json, write_json_atomic};
use super::format::*;
use super::output::check_output;
use crate::exec::{RunOutcome, Termination};
use crate::manifest::OutputFormat;
use crate::plan::PlannedRun;
use crate::provenance::host::HostFacts;
use crate::timestamp::rfc3339;

/// Keeps what an earlier attempt left in the run folder `run_dir`: every entry but `attempts/`
/// moves into `attempts/<n>/`, n one more than the highest attempt kept there (1 for the first),
/// folders made with mode [`super::atomic::DIR_MODE`] whatever the umask (DESIGN 5). The one place that keeps
/// an attempt: `resume`, a run redone in place and a Slurm task that finds its folder all call it.
/// Returns the attempt's number, or `None` when there was nothing to keep (no folder, an empty
/// one, or only `attempts/`).
///
/// # Errors
/// I/O errors reading the folder, creating `attempts/<n>/` or renaming into it (naming the path).
pub fn keep_attempt(run_dir: &Path) -> io::Result<Option<u32>> {
    let attempts_name = super::artifacts::ATTEMPTS;
    let entries = match fs::read_dir(run_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(on(run_dir, "read folder")(e)),
    };
    let mut moving = Vec::new();
    for entry in entries {
        let entry = entry.map_err(on(run_dir, "read folder"))?;
        if entry.file_name() != attempts_name {
            moving.push(entry.file_name());
        }
    }
    if moving.is_empty() {
        return Ok(None);
    }
    moving.sort();
    let attempts = run_dir.join(attempts_name);
    // Numbered folders; an empty one (a keeper killed between making it and moving into it)
    // holds no attempt: it is removed, so attempts stay numbered 1, 2, 3... without gaps.
    let numbered: Vec<(u32, bool)> = match fs::read_dir(&attempts) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let n = e.file_name().to_str()?.parse::<u32>().ok()?;
                let empty = fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_none());
                Some((n, empty))
            })
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            create_dir(&attempts)?;
            Vec::new()
        }
        Err(e) => return Err(on(&attempts, "read folder")(e)),
    };
    for &(n, empty) in &numbered {
        if empty {
            let _ = fs::remove_dir(attempts.join(n.to_string()));
        }
    }
    let last = numbered
        .iter()
        .filter(|(_, empty)| !empty)
        .map(|(n, _)| *n)
        .max()
        .unwrap_or(0);
    let n = last + 1;
    let folder = attempts.join(n.to_string());
    create_dir(&folder)?;
    for (k, name) in moving.iter().enumerate() {
        let from = run_dir.join(name);
        if let Err(e) = fs::rename(&from, folder.join(name)) {
            if k == 0 {
                let _ = fs::remove_dir(&folder);
            }
            return Err(on(&from, "move into attempts")(e));
        }
    }
    Ok(Some(n))
}

/// How a run counts, from its termination and output check.
pub fn classify(outcome: &RunOutcome, check: OutputCheck, format: OutputFormat) -> Outcome {
    match outcome.termination {
        Termination::SpawnFailed => Outcome::SpawnFailed,
        Termination::Timeout => Outcome::Timeout,
        Termination::Interrupted => Outcome::Interrupted,
        Termination::Lost => Outcome::Lost,
        Termination::Signaled => Outcome::Failed,
        Termination::Exited if outcome.exit_code != Some(0) => Outcome::Failed,
        Termination::Exited => match (format, check) {
            (_, OutputCheck::Valid) | (OutputFormat::Text, OutputCheck::Empty) => Outcome::Ok,
            _ => Outcome::InvalidOutput,
        },
    }
}

/// What a run.json records about where a run executed beyond the local executor's outcome: the
/// node's hostname and the Slurm task ids (both `None` for the local executor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeIds {
    /// `hostname` in run.json.
    pub hostname: Option<String>,
    /// `node` in run.json: the Slurm node name (`SLURMD_NODENAME`, else the hostname).
    pub node: Option<String>,
    /// `slurm` in run.json.
    pub slurm: Option<SlurmTaskIds>,
}

/// Checks a finished run's output in its folder `run_dir`, summarizes a valid JSON one for the
/// `[report] metrics` `pointers` ([`super::output_summary::summarize`]), hashes its files (giving
/// them mode [`super::atomic::FILE_MODE`]) and writes its run.json atomically; the one place a run.json of an executed
/// run is made, for the local runner (which then counts it with [`super::BundleWriter::count_run`]) and a Slurm task
/// ([`TaskRunWriter`]).
///
/// # Errors
/// I/O errors hashing the files or writing run.json.
pub fn write_run_record(
    run_dir: &Path,
    run: &PlannedRun,
    outcome: &RunOutcome,
    format: OutputFormat,
    pointers: &[(String, String)],
    node: NodeIds,
) -> io::Result<RunRecord> {
    let mut record = run_record(run_dir, run, outcome, format, node)?;
    record.summary = summary(run_dir, &record, format, pointers);
    write_json(&run_dir.join(files::RUN), Durability::Unsynced, &record)?;
    Ok(record)
}

/// The run.json of a finished run in its folder `dir`, not yet written: the output check (none for
/// a run that never started or never reported back), the sha256 of the runner's own files, and the
/// artifacts and earlier attempts found in the folder.
pub(super) fn run_record(
    dir: &Path,
    run: &PlannedRun,
    outcome: &RunOutcome,
    format: OutputFormat,
    node: NodeIds,
) -> io::Result<RunRecord> {
    let set_aside = set_aside_taken_names(dir, &run.output)?;
    let (output_check, output_check_reason) =
        if matches!(outcome.termination, Termination::SpawnFailed | Termination::Lost) {
            (OutputCheck::Empty, None)
        } else if let Some((_, moved)) = set_aside.iter().find(|(name, _)| *name == run.output) {
            (OutputCheck::Invalid, Some(moved.clone()))
        } else {
            check_output(&dir.join(&run.output), format)
        };
    let sha256 = super::checksums::hash_run_files(
        dir,
        &[run.output.as_str(), files::STDERR, files::MEMORY, files::MAPPINGS],
    )?;
    let own = [
        run.output.as_str(),
        files::STDERR,
        files::MEMORY,
        files::MAPPINGS,
        files::RUN,
    ];
    let (artifacts, earlier_attempts) = super::artifacts::scan_run_folder(dir, &own)?;
    let record = RunRecord {
        format: BUNDLE_FORMAT,
        run_id: run.run_id.clone(),
        index: run.index,
        cell: run.cell.iter().cloned().collect(),
        repetition: run.repetition,
        argv: run.argv.clone(),
        workdir: run.workdir.display().to_string(),
        env: run.env.clone(),
        cpus_requested: run.cpus.clone(),
        cpus_effective: outcome.cpus_effective.clone(),
        pid: outcome.pid,
        start: rfc3339(outcome.started),
        end: rfc3339(outcome.ended),
        wall_seconds: outcome.wall_seconds,
        user_seconds: outcome.user_seconds,
        sys_seconds: outcome.sys_seconds,
        peak_rss_bytes: outcome.peak_rss_bytes,
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        termination: outcome.termination,
        error: {
            let moved = set_aside.iter().map(|(_, m)| m.as_str());
            let all: Vec<&str> = outcome.error.as_deref().into_iter().chain(moved).collect();
            (!all.is_empty()).then(|| all.join("; "))
        },
        output: run.output.clone(),
        output_check,
        output_check_reason,
        outcome: classify(outcome, output_check, format),
        containment: outcome.containment,
        stray_processes_killed: outcome.stray_processes_killed,
        escaped_processes: outcome.escaped_processes.clone(),
        runner_cpus: outcome.runner_cpus.clone(),
        cgroup_memory_peak_bytes: outcome.cgroup_memory_peak_bytes,
        cgroup_memory_source: outcome.cgroup_memory_source.clone(),
        allocator: outcome.allocator.clone(),
        environment: run.environment.clone(),
        memory_samples: outcome.memory_samples,
        sampling: outcome.sampling.clone(),
        shared_memory_left: outcome.shared_memory_left.clone(),
        sha256,
        artifacts,
        attempt: earlier_attempts.iter().map(|a| a.attempt).max().unwrap_or(0) + 1,
        earlier_attempts,
        hostname: node.hostname,
        node: node.node,
        slurm: node.slurm,
        lost_reason: None,
        summary: None,
    };
    Ok(record)
}

/// run.json `summary` of the run `record` in `dir`: its output's figures for `pointers`, when
/// the output is valid JSON (`None` otherwise, and when it cannot be read again).
fn summary(
    dir: &Path,
    record: &RunRecord,
    format: OutputFormat,
    pointers: &[(String, String)],
) -> Option<super::summary::Summary> {
    use super::output_summary::{OutputInterest, OutputSource, summarize};
    if format != OutputFormat::Json || record.output_check != OutputCheck::Valid {
        return None;
    }
    let file = super::contained::open_regular(&dir.join(&record.output)).ok()?;
    let asked = OutputInterest::new(pointers);
    summarize(OutputSource::File(file), &asked, 0, true)
        .ok()
        .map(|(summary, _)| summary)
}

/// Moves aside what a run put at a name hwr-exp writes in its run folder (DESIGN 5): anything at
/// `run.json` (not written yet: it is the run's), and a folder, link, FIFO or device at the output,
/// `stderr.log`, `memory.jsonl` or `mappings.json`. Each goes to `<name>.from-run` (`-2`, `-3`,
/// ... when taken), where it is an artifact of the run like any other; what was moved is returned
/// as (name, message) for run.json `error` (and the output check, when the output was moved). A folder named `run.json` made the bundle fail (run.json could
/// not be written) and `resume` refuse it; a folder at `stderr.log` made `verify` fail.
///
/// # Errors
/// `lstat` or `rename` errors in the run folder.
fn set_aside_taken_names(dir: &Path, output: &str) -> io::Result<Vec<(String, String)>> {
    let mut moved = Vec::new();
    for name in [files::RUN, output, files::STDERR, files::MEMORY, files::MAPPINGS] {
        let path = dir.join(name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if name != files::RUN && meta.file_type().is_file() {
            continue;
        }
        let what = if meta.is_dir() {
            "a folder"
        } else if meta.file_type().is_symlink() {
            "a symbolic link"
        } else if meta.is_file() {
            "a file"
        } else {
            "a FIFO, socket or device"
        };
        let to = (1..)
            .map(|n| {
                if n == 1 {
                    format!("{name}.from-run")
                } else {
                    format!("{name}.from-run-{n}")
                }
            })
            .find(|to| std::fs::symlink_metadata(dir.join(to)).is_err())
            .expect("an unused name");
        std::fs::rename(&path, dir.join(&to))?;
        moved.push((
            name.to_string(),
            format!("the run put {what} at {name}, a name hwr-exp writes in the run folder: moved to {to}"),
        ));
    }
    Ok(moved)
}

/// The writer of a Slurm array task: one run folder of a bundle another process (the submitting
/// or waiting hwr-exp) owns and locks. It takes no lock and writes only `runs/<run-id>/` (moving a
/// previous attempt's folder without run.json aside first) and `hosts/<hostname>.json`.
#[derive(Debug)]
pub struct TaskRunWriter {
    dir: PathBuf,
    node: NodeIds,
}

impl TaskRunWriter {
    /// A writer for the bundle folder `dir`; every run.json it writes carries `node`.
    pub fn new(dir: &Path, node: NodeIds) -> TaskRunWriter {
        TaskRunWriter {
            dir: dir.to_path_buf(),
            node,
        }
    }

    /// The folder of one run, `runs/<run-id>`.
    pub fn run_dir(&self, run: &PlannedRun) -> PathBuf {
        self.dir.join(files::RUNS).join(&run.run_id)
    }

    /// Whether the run already has a run.json (a task started twice does nothing the second time).
    pub fn finished(&self, run: &PlannedRun) -> bool {
        self.run_dir(run).join(files::RUN).exists()
    }

    /// Creates the run folder. A folder left by an earlier attempt without run.json (a task that
    /// was killed) is kept as `runs/<run-id>/attempts/<n>/` (DESIGN 5, [`keep_attempt`]).
    ///
    /// # Errors
    /// I/O errors renaming or creating folders.
    pub fn prepare_run_dir(&self, run: &PlannedRun) -> io::Result<PathBuf> {
        let dir = self.run_dir(run);
        match create_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                keep_attempt(&dir)?;
            }
            other => other?,
        }
        Ok(dir)
    }

    /// Writes the run's run.json ([`write_run_record`]) with this task's node ids.
    ///
    /// # Errors
    /// As [`write_run_record`].
    pub fn record_run(
        &self,
        run: &PlannedRun,
        outcome: &RunOutcome,
        format: OutputFormat,
        pointers: &[(String, String)],
    ) -> io::Result<RunRecord> {
        write_run_record(
            &self.run_dir(run),
            run,
            outcome,
            format,
            pointers,
            self.node.clone(),
        )
    }

    /// Writes `hosts/<node>.json` with the facts `host` collects, unless the file exists (one
    /// file per node, keyed by the Slurm node name; tasks on the same node race harmlessly, each
    /// file is written atomically).
    ///
    /// # Errors
    /// I/O errors creating the folder or writing the file.
    pub fn write_node_host(&self, node: &str, host: impl FnOnce() -> HostFacts) -> io::Result<()> {
        let hosts = self.dir.join(files::HOSTS);
        match create_dir(&hosts) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let name: String = node
            .chars()
            .map(|c| if c == '/' || c == '\0' { '_' } else { c })
            .collect();
        let path = hosts.join(format!("{name}.json"));
        if path.exists() {
            return Ok(());
        }
        write_json_atomic(&path, &host())
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_numbered_without_gaps_and_no_empty_folder_stays() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        fs::write(run.join("run.json"), "{}").unwrap();
        assert_eq!(keep_attempt(run).unwrap(), Some(1));
        // A keeper killed between making attempts/2 and moving into it left it empty.
        fs::create_dir(run.join("attempts/2")).unwrap();
        fs::create_dir(run.join("attempts/5")).unwrap();
        assert_eq!(
            keep_attempt(run).unwrap(),
            None,
            "only attempts/: nothing to keep"
        );
        fs::write(run.join("stderr.log"), "x").unwrap();
        assert_eq!(keep_attempt(run).unwrap(), Some(2));
        let mut names: Vec<String> = fs::read_dir(run.join("attempts"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["1", "2"]);
        assert!(run.join("attempts/2/stderr.log").is_file());
        assert!(run.join("attempts/1/run.json").is_file());
    }
}
