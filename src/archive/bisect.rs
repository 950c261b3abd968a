//! `hwr-exp bisect MANIFEST --good REV --bad REV [--where KEY=VALUE]... [--repetitions N]`
//! (issue 21 item 3, DESIGN 6): the first commit between a good and a bad revision at which the
//! selected cells retain memory against their control, found with the estimates of DESIGN 9.
//!
//! 1. The manifest given is validated; the repository holding it (its `[provenance] repo`) is the
//!    one bisected. `--good` must be an ancestor of `--bad`; the candidates are the commits of
//!    `git rev-list --topo-order --reverse --ancestry-path GOOD..BAD` (BAD last). GOOD and BAD are
//!    taken as the user says (as `git bisect` does): they are not run.
//! 2. A probed commit is checked out in a temporary worktree (as `rerun --at-recorded-revision`
//!    makes them, [`RecordedTree::at_commit`]) and the manifest given (today's bytes: the
//!    experiment stays the same while the code under test changes) runs there, its folder taken
//!    at the same path relative to the repository root. `--where` keeps the selected cells (their
//!    control cells too), and the runs go in adaptive rounds ([`crate::runner::adaptive`]): the
//!    manifest's rule, or `min` 4 (the fewest runs per side that can reach p < 0.05) up to `max`
//!    `--repetitions N` (default 20; also the manifest rule's `max` when given), until every
//!    selected cell is decided.
//! 3. The commit is **bad** when any selected cell's verdict (the verdict table's: private-bytes
//!    growth, or the rate where it overrules an `equivalent` growth) is `above control`; **good**
//!    when none is and each is `below control`, `equivalent` or `no detectable difference` (at
//!    the rule's end); otherwise it is **skipped**,
//!    as `git bisect skip` does: a commit whose manifest does not expand or pass preflight there
//!    (a program missing at that commit), whose runs fail, time out or give no retention samples
//!    so that the estimates have too few runs. A timeout is a value: the runs are recorded as
//!    `timeout` and the step goes on. Each step is a bundle: bundle.json `bisect` names the
//!    session, the commit and the step, `parent` the step before.
//! 4. The next commit probed is the untested, unskipped candidate nearest the middle of the
//!    range still open. It ends when the last good and the first bad are neighbours: that bad
//!    commit is the first bad one (exit 0). When only skipped commits separate them, it is not
//!    decidable (exit 1), and the commits it could be are named.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::ArchiveError;
use super::rerun::RecordedTree;
use crate::bundle::{BisectStep, Outcome};
use crate::exec::{CancelFlag, Launcher};
use crate::manifest::{self, Adaptive, Manifest, Until};
use crate::report::estimates::Estimate;
use crate::runner::session::{RunOptions, SessionError};
use crate::stats::Verdict;

/// Runs per cell a probed commit gets at most when neither `--repetitions` nor the manifest's
/// adaptive rule says.
pub const DEFAULT_MAX_REPETITIONS: u32 = 20;

/// Runs per cell a probed commit gets at least (without an adaptive rule in the manifest): the
/// fewest per side for which a two-sided exact test can reach p < 0.05.
pub const DEFAULT_MIN_REPETITIONS: u32 = 4;

/// What `hwr-exp bisect` is asked.
#[derive(Debug, Clone, Default)]
pub struct BisectOptions {
    /// The manifest file.
    pub manifest: PathBuf,
    /// A revision without the retention.
    pub good: String,
    /// A revision with it; a descendant of `good`.
    pub bad: String,
    /// `--where KEY=VALUE`: the cells to judge (their control cells run too).
    pub filters: Vec<(String, String)>,
    /// `--repetitions N`: most runs per cell at each probed commit.
    pub repetitions: Option<u32>,
    /// Where the steps' bundles go (`<results>/<experiment>/...`).
    pub results_dir: PathBuf,
    /// No progress output.
    pub quiet: bool,
}

/// How a probed commit was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// No selected cell is above its control.
    Good,
    /// Some selected cell is above its control.
    Bad,
    /// Neither could be said (see [`Probe::why`]).
    Skipped,
}

impl Judgement {
    /// `good`, `bad`, `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Good => "good",
            Judgement::Bad => "bad",
            Judgement::Skipped => "skip",
        }
    }
}

/// One probed commit.
#[derive(Debug, Clone)]
pub struct Probe {
    /// 1-based step.
    pub step: u32,
    /// The commit id.
    pub commit: String,
    /// Its subject line.
    pub subject: String,
    /// The step's bundle, when one was written.
    pub bundle: Option<PathBuf>,
    /// The judgement.
    pub judgement: Judgement,
    /// The selected cells' estimates (private-bytes growth against the control).
    pub evidence: Vec<Estimate>,
    /// Why it was judged so: the verdicts, or why it was skipped.
    pub why: String,
}

/// What a bisect found.
#[derive(Debug, Clone)]
pub struct BisectOutcome {
    /// The session id (`<YYYYMMDDTHHMMSSZ>-<4 hex>`), in each step's bundle.json `bisect`.
    pub session: String,
    /// The good and bad commits as resolved.
    pub good: String,
    /// The bad commit.
    pub bad: String,
    /// Commits after good up to bad, in order, with their subjects.
    pub candidates: Vec<(String, String)>,
    /// Every probe, in order.
    pub probes: Vec<Probe>,
    /// The first bad commit and its subject, when found.
    pub first_bad: Option<(String, String)>,
    /// Why no first bad commit could be named (not decidable), when none was.
    pub undecided: Option<String>,
    /// Ctrl-C / SIGTERM stopped the bisect.
    pub interrupted: bool,
}

/// Runs `git -C dir args...`, returning stdout (trimmed) or an environment error naming it.
fn git_out(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = crate::provenance::git_cli::command(dir)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The commit `rev` names in the repository at `root`.
fn resolve(root: &Path, rev: &str, flag: &str) -> Result<String, ArchiveError> {
    git_out(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .ok()
    .filter(|s| !s.is_empty())
    .ok_or_else(|| ArchiveError::Refused(format!("{flag} {rev}: no such commit in {}", root.display())))
}

/// The validated manifest at `path`, with its source text and the root of the repository
/// holding it.
fn load(path: &Path) -> Result<(Manifest, PathBuf), ArchiveError> {
    let manifest = manifest::load(path).map_err(|d| ArchiveError::Session(SessionError::Plan(d)))?;
    let start = manifest.repo_start().to_path_buf();
    // Located as the capture locates it: the path's bytes as they are.
    let root = match crate::provenance::git_cli::repository_at(&start) {
        Some((_, Some(root))) => Ok(root),
        Some((git_dir, None)) => Err(format!("{} has no working tree", git_dir.display())),
        None => Err("git finds no repository there, or refuses it (`git status` there says why)".to_owned()),
    }
    .map_err(|e| {
        ArchiveError::Environment(format!(
            "bisect needs the git repository holding {}: {e}",
            start.display()
        ))
    })?;
    Ok((manifest, root))
}

/// The manifest of one probe: today's text, its folder and `[provenance] repo` moved into the
/// worktree `tree`, the selection and the adaptive rule applied.
fn probe_manifest(
    given: &Manifest,
    root: &Path,
    tree: &Path,
    opts: &BisectOptions,
) -> Result<Manifest, String> {
    let rel = given.base_dir.strip_prefix(root).map_err(|_| {
        format!(
            "the manifest's folder {} is outside the repository {}",
            given.base_dir.display(),
            root.display()
        )
    })?;
    let base = tree.join(rel);
    if !base.is_dir() {
        return Err(format!(
            "the manifest's folder {} does not exist at this commit",
            rel.display()
        ));
    }
    // Recorded as the manifest's path inside the worktree, so that `rerun --at-recorded-revision`
    // of a step finds its folder in the recorded repository (plain `rerun` maps it to the
    // repository holding the bundle); the bytes run are today's, kept in the bundle.
    let name = given.path.file_name().unwrap_or_default();
    let mut m = manifest::parse(&given.source, &base.join(name), &base).map_err(|d| d.to_string())?;
    if let Some(repo) = m.provenance.repo.as_mut()
        && let Ok(inner) = repo.strip_prefix(root)
    {
        *repo = tree.join(inner);
    }
    select(&mut m, &opts.filters)?;
    m.schedule.adaptive = Some(rule(given.schedule.adaptive, opts.repetitions));
    m.schedule.repetitions = m.schedule.adaptive.map_or(1, |a| a.min);
    if m.schedule.order == manifest::Order::Grouped {
        m.schedule.order = manifest::Order::Interleaved;
    }
    Ok(m)
}

/// The adaptive rule of each probe: the manifest's (its `max` replaced by `--repetitions`), or
/// `min` [`DEFAULT_MIN_REPETITIONS`] to `max` `--repetitions` (default
/// [`DEFAULT_MAX_REPETITIONS`]) until decided. `min` never exceeds `max`.
pub fn rule(manifest: Option<Adaptive>, repetitions: Option<u32>) -> Adaptive {
    let mut a = manifest.unwrap_or(Adaptive {
        min: DEFAULT_MIN_REPETITIONS,
        max: DEFAULT_MAX_REPETITIONS,
        until: Until::Decided,
        time_budget: None,
    });
    if let Some(n) = repetitions {
        a.max = n;
    }
    a.min = a.min.min(a.max);
    a
}

/// `--where KEY=VALUE`: keeps the cells that match (values of one key are alternatives, keys
/// must all match) and the control cells of their groups.
fn select(m: &mut Manifest, filters: &[(String, String)]) -> Result<(), String> {
    if filters.is_empty() {
        return Ok(());
    }
    let selection = crate::plan::select::Selection {
        filters: filters
            .iter()
            .map(|(key, value)| crate::plan::select::Filter {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        repetitions: None,
    };
    // The control cells must run too: a filter on a control key also admits the control's value.
    let control: Vec<(String, String)> = if m.report.control.is_empty() {
        vec![("mode".to_string(), crate::report::model::CONTROL_MODE.to_string())]
    } else {
        m.report
            .control
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    };
    let mut with_control = selection.clone();
    for (k, v) in &control {
        if with_control.filters.iter().any(|f| &f.key == k)
            && !with_control.filters.iter().any(|f| &f.key == k && &f.value == v)
        {
            with_control.filters.push(crate::plan::select::Filter {
                key: k.clone(),
                value: v.clone(),
            });
        }
    }
    crate::plan::select::apply(m, &with_control).map_err(|e| e.to_string())
}

/// The id of a session: like a bundle's folder name.
fn session_id() -> String {
    crate::bundle::write::bundle_path(Path::new(""), "", SystemTime::now())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Judges a step's bundle: the selected cells' private-growth verdicts (see the module docs).
fn judge(bundle: &Path, filters: &[(String, String)]) -> (Judgement, Vec<Estimate>, String) {
    let report = match crate::report::collect(bundle, false) {
        Ok(r) => r,
        Err(e) => {
            return (
                Judgement::Skipped,
                Vec::new(),
                format!("the bundle cannot be read: {e}"),
            );
        }
    };
    let wanted: Vec<crate::plan::select::Filter> = filters
        .iter()
        .map(|(key, value)| crate::plan::select::Filter {
            key: key.clone(),
            value: value.clone(),
        })
        .collect();
    let selected = |label: &str| {
        wanted.is_empty()
            || report
                .runs
                .iter()
                .find(|r| r.cell_label == label)
                .is_some_and(|r| {
                    let cell: Vec<(String, crate::manifest::Value)> =
                        r.cell.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    crate::plan::select::cell_matches(&cell, &wanted)
                })
    };
    let growth_key = report.estimates.verdict_growth_key();
    let evidence: Vec<Estimate> = report
        .estimates
        .rows
        .iter()
        .filter(|e| e.metric == growth_key && selected(&e.cell))
        .cloned()
        .collect();
    // Judged by each cell's verdict (the verdict table's: the growth's, or the rate's where it
    // overrules an `equivalent` growth), the growth rows kept as the evidence.
    let verdicts: Vec<(&str, Verdict)> = evidence
        .iter()
        .map(|e| {
            let cell = report.estimates.cell_verdict(&e.cell);
            (e.cell.as_str(), cell.map_or(e.verdict, |c| c.verdict))
        })
        .collect();
    let not_ok: Vec<String> = report
        .counts
        .iter()
        .filter(|(o, _)| **o != Outcome::Ok)
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect();
    let not_ok = if not_ok.is_empty() {
        String::new()
    } else {
        let reason = report
            .runs
            .iter()
            .find(|r| r.outcome.is_some_and(|o| o != Outcome::Ok))
            .map(|r| r.reason_text().to_string())
            .filter(|r| !r.is_empty())
            .map_or(String::new(), |r| format!(": {r}"));
        format!("runs not ok: {}{reason}", not_ok.join(", "))
    };
    if evidence.is_empty() {
        let why = report
            .estimates
            .no_control
            .clone()
            .or_else(|| (!report.has_retention).then(|| "no run gave retention samples".to_string()))
            .unwrap_or_else(|| "no selected cell is compared with a control".into());
        let why = if not_ok.is_empty() {
            why
        } else {
            format!("{not_ok}; {why}")
        };
        return (Judgement::Skipped, evidence, why);
    }
    let words = verdicts
        .iter()
        .map(|(cell, v)| format!("{cell}: {}", v.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let with_runs = |w: String| {
        if not_ok.is_empty() {
            w
        } else {
            format!("{w} ({not_ok})")
        }
    };
    if verdicts.iter().any(|(_, v)| *v == Verdict::AboveControl) {
        return (Judgement::Bad, evidence, with_runs(words));
    }
    if verdicts.iter().all(|(_, v)| {
        matches!(
            v,
            Verdict::BelowControl | Verdict::Equivalent | Verdict::NoDetectableDifference
        )
    }) {
        return (Judgement::Good, evidence, with_runs(words));
    }
    let why = if not_ok.is_empty() {
        words
    } else {
        format!("{not_ok}; {words}")
    };
    (Judgement::Skipped, evidence, why)
}

/// The commits after `good` up to `bad` on the ancestry path, oldest first, each with its
/// subject; `bad` last whatever the topological order gave.
///
/// # Errors
/// [`ArchiveError::Environment`] when `git rev-list` fails.
fn candidates(root: &Path, good: &str, bad: &str) -> Result<Vec<(String, String)>, ArchiveError> {
    let list = git_out(
        root,
        &[
            "rev-list",
            "--topo-order",
            "--reverse",
            "--ancestry-path",
            &format!("{good}..{bad}"),
        ],
    )
    .map_err(ArchiveError::Environment)?;
    let mut candidates: Vec<(String, String)> = Vec::new();
    for id in list.lines().filter(|l| !l.is_empty()) {
        let subject = git_out(root, &["log", "-1", "--format=%s", id]).unwrap_or_default();
        candidates.push((id.to_string(), subject));
    }
    if candidates.last().map(|(c, _)| c.as_str()) != Some(bad) {
        // Keep BAD last whatever the topological order gave.
        candidates.retain(|(c, _)| c != bad);
        let subject = git_out(root, &["log", "-1", "--format=%s", bad]).unwrap_or_default();
        candidates.push((bad.to_string(), subject));
    }
    Ok(candidates)
}

/// Bisects (see the module docs). Progress goes to stderr unless `quiet`.
///
/// # Errors
/// [`ArchiveError::Session`] with the manifest's diagnostics (exit 2); [`ArchiveError::Refused`]
/// for a revision that names no commit or a good that is no ancestor of bad (exit 2);
/// [`ArchiveError::Environment`] without a repository or when git fails (exit 3); a bundle that
/// cannot be written (exit 3).
pub fn bisect(
    opts: &BisectOptions,
    launcher: &dyn Launcher,
    cancel: &CancelFlag,
) -> Result<BisectOutcome, ArchiveError> {
    if opts.repetitions.is_some_and(|n| n < 2) {
        return Err(ArchiveError::Refused(
            "--repetitions must be at least 2 for bisect: with one run per side there is no interval".into(),
        ));
    }
    let (given, root) = load(&opts.manifest)?;
    if given.executor.kind != crate::manifest::ExecutorKind::Local {
        return Err(ArchiveError::Refused(format!(
            "{}: bisect runs each probed commit locally in adaptive rounds, which the {} executor cannot run; use a manifest with the local executor",
            opts.manifest.display(),
            given.executor.kind.as_str()
        )));
    }
    // The selection is checked once, against the manifest given (a key or value it lacks).
    select(&mut given.clone(), &opts.filters).map_err(ArchiveError::Refused)?;
    let good = resolve(&root, &opts.good, "--good")?;
    let bad = resolve(&root, &opts.bad, "--bad")?;
    if good == bad {
        return Err(ArchiveError::Refused(format!(
            "--good {} and --bad {} are the same commit",
            opts.good, opts.bad
        )));
    }
    if git_out(&root, &["merge-base", "--is-ancestor", &good, &bad]).is_err() {
        return Err(ArchiveError::Refused(format!(
            "--good {} is not an ancestor of --bad {}: bisect looks for the first bad commit after a good one",
            opts.good, opts.bad
        )));
    }
    let candidates = candidates(&root, &good, &bad)?;
    let session = session_id();
    let mut outcome = BisectOutcome {
        session: session.clone(),
        good: good.clone(),
        bad: bad.clone(),
        candidates: candidates.clone(),
        probes: Vec::new(),
        first_bad: None,
        undecided: None,
        interrupted: false,
    };
    // Positions: 0 = good, 1..=n the candidates (n = bad).
    let n = candidates.len();
    let (mut lo, mut hi) = (0usize, n);
    let mut skipped: Vec<usize> = Vec::new();
    let mut parent: Option<String> = None;
    let say = |line: String| {
        if !opts.quiet {
            crate::runner::progress::say(format_args!("{line}"));
        }
    };
    say(format!(
        "bisect {session}: {} commits after {} up to {}",
        n,
        short(&good),
        short(&bad)
    ));
    loop {
        if cancel.load(std::sync::atomic::Ordering::SeqCst) {
            outcome.interrupted = true;
            return Ok(outcome);
        }
        let mid = (lo + hi) / 2;
        let next = (lo + 1..hi)
            .filter(|p| !skipped.contains(p))
            .min_by_key(|&p| (p.abs_diff(mid), p));
        let Some(p) = next else { break };
        let (commit, subject) = candidates[p - 1].clone();
        let step = outcome.probes.len() as u32 + 1;
        say(format!(
            "bisect step {step}: {} {subject} ({} commits left between good {} and bad {})",
            short(&commit),
            hi - lo - 1,
            short(if lo == 0 { &good } else { &candidates[lo - 1].0 }),
            short(&candidates[hi - 1].0),
        ));
        let probe = Prober {
            opts,
            given: &given,
            root: &root,
            session_id: &session,
            launcher,
            cancel,
        }
        .probe(&commit, &subject, step, parent.as_deref())?;
        say(format!(
            "bisect step {step}: {} {} ({})",
            short(&commit),
            match probe.judgement {
                Judgement::Good => "is good",
                Judgement::Bad => "is bad",
                Judgement::Skipped => "is skipped",
            },
            probe.why
        ));
        if let Some(b) = &probe.bundle {
            parent = Some(b.display().to_string());
        }
        let judgement = probe.judgement;
        let stopped = probe.why == INTERRUPTED;
        outcome.probes.push(probe);
        if stopped {
            outcome.interrupted = true;
            return Ok(outcome);
        }
        match judgement {
            Judgement::Bad => hi = p,
            Judgement::Good => lo = p,
            Judgement::Skipped => skipped.push(p),
        }
    }
    if hi == lo + 1 {
        outcome.first_bad = Some(candidates[hi - 1].clone());
    } else {
        let could: Vec<String> = (lo + 1..=hi).map(|p| short(&candidates[p - 1].0)).collect();
        outcome.undecided = Some(format!(
            "the first bad commit is one of {} ({} skipped: {}); probe with another manifest or --repetitions, or fix the skipped commits' runs",
            could.join(", "),
            if hi - lo - 1 == 1 { "1 commit" } else { "commits" },
            (lo + 1..hi)
                .map(|p| short(&candidates[p - 1].0))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(outcome)
}

/// The `why` of a probe stopped by Ctrl-C / SIGTERM.
const INTERRUPTED: &str = "interrupted";

/// What every probe of one bisect session shares: its options, the manifest given, the
/// repository root, the session id, the launcher and the cancel flag.
struct Prober<'a> {
    opts: &'a BisectOptions,
    given: &'a Manifest,
    root: &'a Path,
    session_id: &'a str,
    launcher: &'a dyn Launcher,
    cancel: &'a CancelFlag,
}

impl Prober<'_> {
    /// Probes one commit: a worktree, the manifest there, a session, the judgement.
    fn probe(
        &self,
        commit: &str,
        subject: &str,
        step: u32,
        parent: Option<&str>,
    ) -> Result<Probe, ArchiveError> {
        let Prober {
            opts,
            given,
            root,
            session_id,
            launcher,
            cancel,
        } = *self;
        let skip = |why: String| Probe {
            step,
            commit: commit.to_string(),
            subject: subject.to_string(),
            bundle: None,
            judgement: Judgement::Skipped,
            evidence: Vec::new(),
            why,
        };
        let mut tree = RecordedTree::at_commit(root, commit, None)?;
        // Submodules at the commits this commit's tree names (an empty folder otherwise).
        tree.check_out_submodules(&[]);
        let m = match probe_manifest(given, root, tree.path(), opts) {
            Ok(m) => m,
            Err(why) => return Ok(skip(format!("the manifest does not apply at this commit: {why}"))),
        };
        let run_opts = RunOptions {
            results_dir: opts.results_dir.clone(),
            quiet: opts.quiet,
            parent: parent.map(str::to_string),
            notes: std::iter::once(format!(
                "bisect {session_id} step {step}: commit {commit}, in a temporary git worktree (removed afterwards)"
            ))
            .chain(tree.submodule_differences().iter().cloned())
            .collect(),
            bisect: Some(BisectStep {
                session: session_id.to_string(),
                commit: commit.to_string(),
                step,
            }),
            ..RunOptions::default()
        };
        let report = match crate::runner::experiment::run_manifest(&m, &run_opts, launcher, cancel) {
            Ok(r) => r,
            // Does not build or run at this commit: skipped, like `git bisect skip`.
            Err(e @ (SessionError::Plan(_) | SessionError::Preflight(_))) => {
                return Ok(skip(format!(
                    "does not run at this commit: {}",
                    first_line(&e.to_string())
                )));
            }
            Err(e) => return Err(ArchiveError::Session(e)),
        };
        drop(tree);
        if report.exit_code == crate::exit_codes::INTERRUPTED {
            return Ok(Probe {
                bundle: Some(report.bundle),
                ..skip(INTERRUPTED.into())
            });
        }
        let (judgement, evidence, why) = judge(&report.bundle, &opts.filters);
        Ok(Probe {
            step,
            commit: commit.to_string(),
            subject: subject.to_string(),
            bundle: Some(report.bundle),
            judgement,
            evidence,
            why,
        })
    }
}

/// The first line of a message.
fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or(text).trim()
}

/// The first 10 hex digits of a commit id.
pub fn short(id: &str) -> String {
    id.chars().take(10).collect()
}

/// The evidence table: one row per probed commit and selected cell (step, commit, subject,
/// cell, n, shift [95% interval] of private growth, verdict, judgement), rendered with
/// [`crate::table`].
pub fn evidence_table(outcome: &BisectOutcome) -> String {
    let header: Vec<String> = [
        "step",
        "commit",
        "subject",
        "cell",
        "n",
        "shift [95% CI]",
        "verdict",
        "judged",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut rows = Vec::new();
    for p in &outcome.probes {
        let base = |cell: String, n: String, shift: String, verdict: String| {
            vec![
                p.step.to_string(),
                short(&p.commit),
                p.subject.clone(),
                cell,
                n,
                shift,
                verdict,
                p.judgement.as_str().to_string(),
            ]
        };
        if p.evidence.is_empty() {
            rows.push(base("-".into(), "-".into(), "-".into(), p.why.clone()));
        }
        for e in &p.evidence {
            rows.push(base(
                e.cell.clone(),
                format!("{}/{}", e.n_cell, e.n_control),
                crate::report::render::interval_text(e),
                e.verdict.as_str().to_string(),
            ));
        }
    }
    crate::table::render(
        crate::table::Style::Plain,
        header,
        rows,
        &[true, false, false, false, true, true, false, false],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_of_a_probe() {
        let default = rule(None, None);
        assert_eq!((default.min, default.max), (4, 20));
        assert_eq!(default.until, Until::Decided);
        let capped = rule(None, Some(3));
        assert_eq!((capped.min, capped.max), (3, 3), "min never above max");
        let manifest = Adaptive {
            min: 6,
            max: 30,
            until: Until::Decided,
            time_budget: Some(std::time::Duration::from_secs(60)),
        };
        let r = rule(Some(manifest), Some(10));
        assert_eq!((r.min, r.max, r.time_budget), (6, 10, manifest.time_budget));
        assert_eq!(rule(Some(manifest), None), manifest);
    }
}
