//! One session over a bundle, whichever backend runs it: its errors and report, the plan's
//! expansion, and the finish (provenance after the runs, the final status, the exit code). The
//! start of a session from a manifest is [`super::experiment`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use crate::bundle::{BundleStatus, BundleWriter, Outcome, files};
use crate::exec::{CancelFlag, Launcher};
use crate::exit_codes;
use crate::manifest::Diagnostics;
use crate::plan::{Plan, PlanContext};

use super::SessionEnd;
use super::progress::{self, Progress};

/// Choices of one session that do not come from the manifest.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Folder holding `<experiment>/<bundle>`; relative to the current directory.
    pub results_dir: PathBuf,
    /// No progress output.
    pub quiet: bool,
    /// Bundle this session reruns (recorded as `parent`).
    pub parent: Option<String>,
    /// Notes recorded in bundle.json.
    pub notes: Vec<String>,
    /// Slurm executor: submit and return at once, without waiting (`run --detach`).
    pub detach: bool,
    /// `[environments]`: resolve with this `--exclude-newer` time (RFC 3339) instead of the
    /// session's start (`rerun`: the archived bundle's time, for the same resolution).
    pub exclude_newer: Option<String>,
    /// `[environments]`: use these locks as they are, by environment name (`resume`).
    pub locks: Option<BTreeMap<String, String>>,
    /// What the command line changed (`--where`, `--repetitions`, `--fail-fast`), recorded in
    /// bundle.json `overrides`; the manifest given has the selection applied already.
    pub overrides: Option<crate::bundle::Overrides>,
    /// `hwr-exp bisect`: the session and step this bundle is (bundle.json `bisect`).
    pub bisect: Option<crate::bundle::BisectStep>,
}

/// Why a session did not produce a bundle.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Problems found by plan expansion, located in the manifest (exit 2; nothing written).
    #[error("{0}")]
    Plan(Diagnostics),
    /// Preflight problems (exit 3; nothing written).
    #[error("preflight failed:\n  {}", .0.join("\n  "))]
    Preflight(Vec<String>),
    /// The environment could not be read (exit 3; nothing written).
    #[error("{0}")]
    Environment(String),
    /// `hwr-exp wait` stopped waiting at a stop request (exit 130): the Slurm tasks go on and the
    /// bundle stays `running`; the text says how to attach again or cancel.
    #[error("{0}")]
    Detached(String),
    /// Writing the bundle failed (a full disk, a file-size limit, too many open files ...): exit 3.
    /// The source names the file; `left` says in what state the bundle was left.
    #[error("bundle {}: {source}; {left}", .bundle.display())]
    Bundle {
        /// The bundle folder (its final name).
        bundle: PathBuf,
        /// The I/O error, naming the file ([`crate::bundle::write::FileError`]).
        source: std::io::Error,
        /// What became of the bundle.
        left: BundleLeft,
    },
}

/// The state a bundle is left in when writing it failed ([`SessionError::Bundle`]).
#[derive(Debug)]
pub enum BundleLeft {
    /// The failure came while the bundle was being set up in its staging folder: no bundle folder
    /// was created (the staging folder is removed).
    NotCreated,
    /// bundle.json was marked `failed`; `hwr-exp resume` finishes the bundle once the cause is gone.
    MarkedFailed {
        /// The bundle folder.
        bundle: PathBuf,
    },
    /// Marking bundle.json `failed` failed too: the lock is released (the process ends) so the
    /// bundle shows as `abandoned`; `hwr-exp resume` finishes it once the cause is gone.
    Abandoned {
        /// The bundle folder.
        bundle: PathBuf,
        /// Why bundle.json could not be written.
        reason: std::io::Error,
    },
}

impl std::fmt::Display for BundleLeft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BundleLeft::NotCreated => write!(f, "no bundle was created"),
            BundleLeft::MarkedFailed { bundle } => write!(
                f,
                "the bundle is marked failed; `hwr-exp resume {}` finishes it once the cause is gone",
                bundle.display()
            ),
            BundleLeft::Abandoned { bundle, reason } => write!(
                f,
                "marking it failed did not work either ({reason}): it shows as abandoned; `hwr-exp resume {}` finishes it once the cause is gone",
                bundle.display()
            ),
        }
    }
}

impl SessionError {
    /// The documented exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::Plan(_) => exit_codes::USAGE,
            SessionError::Detached(_) => exit_codes::INTERRUPTED,
            SessionError::Preflight(_) | SessionError::Environment(_) | SessionError::Bundle { .. } => {
                exit_codes::ENVIRONMENT
            }
        }
    }
}

/// Marks the bundle of `writer` `failed` after the write error `source` and builds the error
/// saying so; when even that write fails, the writer is dropped (its lock released, so the bundle
/// shows as abandoned) and the error says that instead.
pub(crate) fn failed_bundle(mut writer: BundleWriter, source: std::io::Error) -> SessionError {
    let bundle = writer.dir().to_path_buf();
    let left = match writer.fail(&source.to_string(), SystemTime::now()) {
        Ok(()) => BundleLeft::MarkedFailed {
            bundle: bundle.clone(),
        },
        Err(reason) => BundleLeft::Abandoned {
            bundle: bundle.clone(),
            reason,
        },
    };
    drop(writer);
    SessionError::Bundle { bundle, source, left }
}

/// What a finished session produced.
#[derive(Debug, Clone)]
pub struct SessionReport {
    /// The bundle folder.
    pub bundle: PathBuf,
    /// Final status.
    pub status: BundleStatus,
    /// Finished runs by outcome.
    pub counts: BTreeMap<Outcome, usize>,
    /// Planned runs.
    pub planned: usize,
    /// Whether the working tree changed during the session.
    pub drift: bool,
    /// Exit code: 0 all ok, 1 some run not ok, 130 interrupted.
    pub exit_code: i32,
    /// The runs of this session that are not ok (the first few with reason and stderr tail).
    pub failures: progress::Failures,
    /// Slurm executor: the job ids of the arrays submitted by this session, in order.
    pub slurm_jobs: Vec<u64>,
    /// Slurm executor, `run --detach`: runs not submitted yet for want of room under the
    /// cluster's limits (MaxJobCount, per-user limits); `hwr-exp wait` submits them.
    pub slurm_unsubmitted: usize,
    /// `--fail-fast` stopped the session after a run that was not ok, before every run started.
    pub failed_fast: bool,
}

/// Plan context for a bundle folder: the running binary, the allowed CPUs, a fresh fallback seed,
/// the bundle's run-folder layout.
///
/// # Errors
/// When the binary's path or the allowed CPU set cannot be read.
pub fn plan_context(bundle: &Path) -> Result<PlanContext, SessionError> {
    let hwr_exp = std::env::current_exe()
        .map_err(|e| SessionError::Environment(format!("cannot find the hwr-exp binary's path: {e}")))?;
    let allowed_cpus = crate::cpus::allowed_cpus()
        .map_err(|e| SessionError::Environment(format!("sched_getaffinity: {e}")))?;
    Ok(PlanContext {
        hwr_exp: hwr_exp.display().to_string(),
        bundle: bundle.to_path_buf(),
        allowed_cpus,
        fallback_seed: fastrand::u64(..1 << 53),
        layout: crate::bundle::plan_file::RUN_FOLDER_LAYOUT,
        allocators: crate::allocator::installed().clone(),
        environments: Default::default(),
        plans_cpus: true,
    })
}

/// working-tree.patch's limits as the manifest's `[provenance] patch-limit` and
/// `patch-file-limit` set them (the defaults where absent).
pub fn patch_limits(config: &crate::manifest::ProvenanceConfig) -> crate::provenance::PatchLimits {
    crate::provenance::PatchLimits::new(config.patch_limit, config.patch_file_limit)
}

/// What finishing a session needs besides its runs: which folder to leave out of the repository
/// check after the runs, the capture to compare with, and whether to be quiet.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    /// The results folder, left out of the working-tree record.
    pub results_dir: &'a Path,
    /// The capture recorded when the bundle was created.
    pub before: &'a crate::provenance::Snapshot,
    /// No progress output.
    pub quiet: bool,
}

/// One session's context, from a created or reopened bundle to its end: the plan, which of its
/// runs this session does, the bundle's writer (it holds the bundle's lock), the launcher, the
/// cancel flag, the progress display and what finishing needs. Made by `run`, `rerun`, `resume`
/// and `wait` (a struct literal: `writer: Mutex::new(writer)`, `progress:
/// progress::Collect::deferred(quiet)`); a backend ([`super::experiment::execute`]) executes or
/// submits its runs and finishes it ([`Session::finish`]).
pub struct Session<'a> {
    /// The plan of the bundle (owned once an adaptive round is added to it).
    pub plan: std::borrow::Cow<'a, Plan>,
    /// Plan indices of the runs of this session, ascending.
    pub indices: Vec<usize>,
    /// The bundle's only writer (behind a mutex: the local job slots share it).
    pub writer: Mutex<BundleWriter>,
    /// Starts and supervises each run's process on this host.
    pub launcher: &'a dyn Launcher,
    /// Set on Ctrl-C / SIGTERM.
    pub cancel: &'a CancelFlag,
    /// The progress display ([`progress::Collect::deferred`]: started when the runs are).
    pub progress: progress::Collect,
    /// `--fail-fast` (bundle.json `overrides`): no run starts after one that is not ok.
    pub fail_fast: bool,
    /// What [`Session::finish`] needs.
    pub finish: Finish<'a>,
    /// plan.json being written while the first runs execute (the local `run`): its sha256 (or the
    /// write error) arrives here, and [`Session::finish`] waits for it. `None`: already written.
    pub plan_json: Option<std::sync::mpsc::Receiver<std::io::Result<String>>>,
}

impl<'a> Session<'a> {
    /// The bundle's writer, for the one thread using it.
    pub fn writer_mut(&mut self) -> &mut BundleWriter {
        self.writer
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The bundle folder.
    pub fn dir(&mut self) -> PathBuf {
        self.writer_mut().dir().to_path_buf()
    }

    /// What executing runs needs ([`super::Runs`]).
    pub fn runs(&self) -> super::Runs<'_> {
        super::Runs {
            plan: &self.plan,
            launcher: self.launcher,
            cancel: self.cancel,
            progress: &self.progress,
            fail_fast: self.fail_fast,
        }
    }

    /// Ends the session whose runs were executed (`end`): the after-run provenance check (drift,
    /// from `plan.repo_start`), the final status, the counts and the exit code (DESIGN 6). Shared
    /// by every backend; `slurm_jobs` go into the report, with the runs that are not ok (for the
    /// closing list) from the progress display.
    ///
    /// # Errors
    /// [`SessionError::Bundle`] when `end` is an error or the bundle cannot be written; the bundle is
    /// then marked `failed`.
    pub fn finish(
        self,
        end: std::io::Result<SessionEnd>,
        slurm_jobs: Vec<u64>,
    ) -> Result<SessionReport, SessionError> {
        let Session {
            plan,
            writer,
            cancel,
            progress,
            finish,
            plan_json,
            ..
        } = self;
        progress.finish();
        let failures = progress.into_failures();
        let mut writer = match writer.into_inner() {
            Ok(w) => w,
            // A job thread panicked while holding the writer: its lock goes with the process.
            Err(poisoned) => {
                return Err(failed_bundle(
                    poisoned.into_inner(),
                    std::io::Error::other("bundle writer poisoned"),
                ));
            }
        };
        let dir = writer.dir().to_path_buf();
        if let Some(rx) = plan_json {
            let written = rx
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("the plan.json writer stopped")));
            match written {
                Ok(sha) => writer.record_setup_sha256(files::PLAN, sha),
                Err(source) => return Err(failed_bundle(writer, source)),
            }
        }
        let result = end.and_then(|end| {
            // The before capture still holds its patch (in a temporary file: no memory, no open
            // descriptor): it spares the after-run capture a second diff when the tree did not
            // change.
            let after =
                crate::provenance::capture_after(&plan.repo_start, &[finish.results_dir], finish.before);
            let drift = crate::bundle::write::write_provenance_after(&dir, finish.before, &after)?;
            Ok((end, drift))
        });
        let (end, drift) = match result {
            Ok(r) => r,
            Err(source) => return Err(failed_bundle(writer, source)),
        };
        let status = match end {
            SessionEnd::Complete => BundleStatus::Complete,
            SessionEnd::Interrupted | SessionEnd::FailedFast => BundleStatus::Interrupted,
        };
        if let Err(source) = writer.finish(status, SystemTime::now()) {
            return Err(failed_bundle(writer, source));
        }
        let counts = writer.info().counts.clone();
        // --fail-fast stopped the session because a run failed: that failure is the exit code
        // (1), not an interruption (130), though the bundle is `interrupted` (resumable).
        let exit_code = if end == SessionEnd::FailedFast && !cancel.load(Ordering::SeqCst) {
            exit_codes::RUN_FAILED
        } else if status == BundleStatus::Interrupted || cancel.load(Ordering::SeqCst) {
            exit_codes::INTERRUPTED
        } else if counts.keys().all(|o| *o == Outcome::Ok) {
            exit_codes::SUCCESS
        } else {
            exit_codes::RUN_FAILED
        };
        Ok(SessionReport {
            bundle: dir,
            status,
            counts,
            planned: plan.len(),
            drift,
            exit_code,
            failures,
            slurm_jobs,
            slurm_unsubmitted: 0,
            failed_fast: end == SessionEnd::FailedFast,
        })
    }
}

/// `8 runs: 6 ok, 1 failed, 1 timeout` (outcomes in a fixed order; runs not started listed as such).
pub fn summarize(report: &SessionReport) -> String {
    let finished: usize = report.counts.values().sum();
    let mut parts: Vec<String> = report
        .counts
        .iter()
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect();
    if finished < report.planned {
        parts.push(format!("{} not run", report.planned - finished));
    }
    format!("{}: {}", progress::runs(report.planned), parts.join(", "))
}
