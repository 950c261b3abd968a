//! The batch script of one job array (DESIGN 8): `#SBATCH` lines, then a body that execs the
//! hidden task subcommand of the same hwr-exp binary for the task's plan index.
//!
//! ```text
//! #!/bin/bash
//! # hwr-exp batch script: plan index = 0 + SLURM_ARRAY_TASK_ID
//! #SBATCH --job-name=hwr-exp:size-compare
//! #SBATCH --partition=cpu
//! #SBATCH --time=00:03:05
//! #SBATCH --ntasks=1
//! #SBATCH --cpus-per-task=1
//! #SBATCH --no-requeue
//! #SBATCH --chdir=/shared/results/size-compare/20261130T185700Z-1a2b
//! #SBATCH --output=/shared/results/size-compare/20261130T185700Z-1a2b/slurm/logs/%A_%a.out
//! #SBATCH --error=/shared/results/size-compare/20261130T185700Z-1a2b/slurm/logs/%A_%a.err
//! #SBATCH --array=0-7%2
//! #SBATCH --mem=2G
//! set -eu
//! index=$((0 + SLURM_ARRAY_TASK_ID))
//! exec /opt/hwr-exp/bin/hwr-exp slurm-task /shared/results/size-compare/20261130T185700Z-1a2b "$index"
//! ```
//!
//! Two quoting dialects meet here. `#SBATCH` lines are read by sbatch's own tokenizer (Slurm's
//! `src/sbatch/opt.c`, checked against 22.05): words split at white space, `'...'` and `"..."`
//! group, a backslash escapes the next character everywhere (also inside single quotes), an
//! unquoted `#` starts a comment, a line ends the directive. [`directive_word`] writes that
//! dialect. The body is bash, quoted with `shlex`. In `--output`/`--error` file names `%` starts a
//! pattern (`%A`, `%a`) and a backslash turns every pattern off, so `%` in the bundle path is
//! written `%%` and a backslash in it is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::array::ArraySpec;

/// Name of the hidden hwr-exp subcommand a task runs: `hwr-exp slurm-task BUNDLE INDEX` executes
/// plan index INDEX of the bundle with the local executor and writes that run's folder.
pub const TASK_SUBCOMMAND: &str = "slurm-task";

/// Folder of the bundle with the batch scripts and Slurm's logs: `slurm/array-<n>.sbatch`,
/// `slurm/logs/<array job id>_<task id>.out|.err`.
pub const SLURM_DIR: &str = "slurm";

/// Everything one batch script says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptSpec {
    /// `--job-name`; `hwr-exp:<experiment>` by [`job_name`].
    pub job_name: String,
    /// `--comment`: the submission's tag ([`super::Tag::comment`]) by which hwr-exp finds an
    /// array whose id it could not record; `None` writes no comment.
    pub comment: Option<String>,
    /// `--partition`; absent = the cluster's default partition.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// `--time` (seconds, rounded up; Slurm rounds up again to whole minutes); `None` = the
    /// partition's default limit. From [`time_limit`].
    pub time_limit: Option<Duration>,
    /// `--cpus-per-task` (`cpus-per-run`), at least 1.
    pub cpus_per_task: usize,
    /// `--nodelist` (`[executor] nodes`): the tasks run only on these nodes (a Slurm host list,
    /// `n1,n2` or `n[1-2]`).
    pub nodelist: Option<String>,
    /// `--exclude` (`[executor] exclude-nodes`): the tasks never run on these nodes.
    pub exclude: Option<String>,
    /// `[executor] requeue = true`: `--requeue` and `--signal=B:USR2@<this many seconds>` (the
    /// task hears USR2 that long before Slurm's time limit, stops its run and requeues itself;
    /// [`requeue_lead`]); `None` = `--no-requeue`.
    pub requeue: Option<Duration>,
    /// `--array` with the throttle (`jobs`).
    pub array: ArraySpec,
    /// Plan index of task id 0 ([`crate::slurm::ArrayChunk::offset`]).
    pub offset: usize,
    /// `--dependency=afterany:<id>`: start only after every task of that array ended (chains
    /// the arrays of one submission so that `jobs` bounds the tasks running across all of them).
    pub after: Option<u64>,
    /// `sbatch-args` from the manifest, each one word, in order, after hwr-exp's own options.
    pub extra_args: Vec<String>,
    /// Absolute path of the hwr-exp binary the task execs (the submitting binary).
    pub binary: PathBuf,
    /// Absolute path of the bundle, on a file system the nodes share; also the task's `--chdir`.
    pub bundle: PathBuf,
}

/// A script that cannot be written faithfully.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// A value holds a line break or NUL, which would end an `#SBATCH` line or a shell word.
    #[error("{what} {value:?} contains a line break or NUL, which a batch script cannot carry")]
    LineBreak {
        /// Which value (`partition`, `sbatch-args`, `bundle path`, ...).
        what: String,
        /// The value.
        value: String,
    },
    /// The binary or bundle path is relative; tasks run in another folder, on another host.
    #[error("{what} {path:?} must be an absolute path")]
    Relative {
        /// `hwr-exp binary` or `bundle path`.
        what: String,
        /// The path.
        path: PathBuf,
    },
    /// A path is not UTF-8.
    #[error("{what} {path:?} is not valid UTF-8")]
    NotUtf8 {
        /// `hwr-exp binary` or `bundle path`.
        what: String,
        /// The path.
        path: PathBuf,
    },
    /// The bundle path holds a backslash, which turns off Slurm's `%A_%a` log file patterns.
    #[error(
        "bundle path {path:?} contains a backslash, which Slurm's --output/--error patterns cannot express"
    )]
    Backslash {
        /// The path.
        path: PathBuf,
    },
}

/// `hwr-exp:<experiment>`: the job name hwr-exp gives its arrays (experiment names are
/// `[a-z0-9_-]+`, so the name has no space and `scontrol -o` output stays word-separated).
pub fn job_name(experiment: &str) -> String {
    format!("hwr-exp:{experiment}")
}

/// Slurm's `--time` for a run: `timeout + grace + margin`; `None` without a timeout (the task
/// then gets the partition's default time limit).
pub fn time_limit(timeout: Option<Duration>, grace: Duration, margin: Duration) -> Option<Duration> {
    timeout.map(|t| t.saturating_add(grace).saturating_add(margin))
}

/// How long before Slurm's time limit a requeueing task hears its USR2: the run's `grace` (SIGTERM,
/// then SIGKILL after grace, as on timeout) plus 30 s to record and requeue. Slurm may send the
/// signal up to 60 s earlier than asked (its event resolution), never later: the task then asks how
/// long is left and waits (`runner::slurm::watch_pre_timeout`).
pub fn requeue_lead(grace: Duration) -> Duration {
    grace.saturating_add(Duration::from_secs(30))
}

/// The signal a requeueing task hears before Slurm's time limit (`--signal=B:USR2@...`: the batch
/// shell only, which `exec`s `hwr-exp slurm-task`).
pub const PRE_TIMEOUT_SIGNAL: &str = "USR2";

/// A duration in Slurm's time syntax, seconds rounded up: `HH:MM:SS`, or `D-HH:MM:SS` from one day.
pub fn format_slurm_time(d: Duration) -> String {
    let mut secs = d.as_secs();
    if d.subsec_nanos() > 0 {
        secs += 1;
    }
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// One word in sbatch's `#SBATCH` dialect: bare when it has only characters the tokenizer takes
/// literally, else in double quotes with `\` and `"` escaped by a backslash.
///
/// # Errors
/// [`ScriptError::LineBreak`] for `\n`, `\r` or NUL (they would end the directive line).
pub fn directive_word(what: &str, word: &str) -> Result<String, ScriptError> {
    if word.contains(['\n', '\r', '\0']) {
        return Err(ScriptError::LineBreak {
            what: what.to_string(),
            value: word.to_string(),
        });
    }
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.,/:=+@%^".contains(&b));
    if plain {
        return Ok(word.to_string());
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('"');
    for c in word.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The path as UTF-8, absolute, without line breaks.
fn checked_path<'p>(what: &str, path: &'p Path) -> Result<&'p str, ScriptError> {
    let text = path.to_str().ok_or_else(|| ScriptError::NotUtf8 {
        what: what.to_string(),
        path: path.to_path_buf(),
    })?;
    if !path.is_absolute() {
        return Err(ScriptError::Relative {
            what: what.to_string(),
            path: path.to_path_buf(),
        });
    }
    if text.contains(['\n', '\r', '\0']) {
        return Err(ScriptError::LineBreak {
            what: what.to_string(),
            value: text.to_string(),
        });
    }
    Ok(text)
}

/// A word quoted for bash (`shlex`); the caller has ruled out NUL.
fn sh(word: &str) -> String {
    shlex::try_quote(word)
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| format!("'{}'", word.replace('\'', "'\\''")))
}

impl ScriptSpec {
    /// Slurm's log file patterns for this bundle: `(<bundle>/slurm/logs/%A_%a.out, ... .err)`,
    /// with `%` of the bundle path doubled.
    fn log_patterns(bundle: &str) -> (String, String) {
        let dir = format!(
            "{}/{SLURM_DIR}/logs",
            bundle.trim_end_matches('/').replace('%', "%%")
        );
        (format!("{dir}/%A_%a.out"), format!("{dir}/%A_%a.err"))
    }

    /// The log folder Slurm writes into (create it before submitting: Slurm does not).
    pub fn log_dir(&self) -> PathBuf {
        self.bundle.join(SLURM_DIR).join("logs")
    }

    /// Renders the whole script (see the module documentation for its shape).
    ///
    /// # Errors
    /// [`ScriptError`] for a relative, non-UTF-8 or line-breaking path, a backslash in the bundle
    /// path, or a value with a line break.
    pub fn render(&self) -> Result<String, ScriptError> {
        let binary = checked_path("hwr-exp binary", &self.binary)?;
        let bundle = checked_path("bundle path", &self.bundle)?;
        if bundle.contains('\\') {
            return Err(ScriptError::Backslash {
                path: self.bundle.clone(),
            });
        }
        let mut lines = vec![
            "#!/bin/bash".to_string(),
            format!(
                "# hwr-exp {} batch script: plan index = {} + SLURM_ARRAY_TASK_ID",
                env!("CARGO_PKG_VERSION"),
                self.offset
            ),
        ];
        // (option, value) pairs, each written as one `#SBATCH --option=value` line.
        let mut options: Vec<(&str, &str, String)> = vec![("--job-name", "job name", self.job_name.clone())];
        if let Some(c) = &self.comment {
            options.push(("--comment", "comment", c.clone()));
        }
        if let Some(p) = &self.partition {
            options.push(("--partition", "partition", p.clone()));
        }
        if let Some(a) = &self.account {
            options.push(("--account", "account", a.clone()));
        }
        if let Some(q) = &self.qos {
            options.push(("--qos", "qos", q.clone()));
        }
        if let Some(t) = self.time_limit {
            options.push(("--time", "time limit", format_slurm_time(t)));
        }
        if let Some(n) = &self.nodelist {
            options.push(("--nodelist", "nodes", n.clone()));
        }
        if let Some(n) = &self.exclude {
            options.push(("--exclude", "exclude-nodes", n.clone()));
        }
        options.push(("--ntasks", "ntasks", "1".into()));
        options.push((
            "--cpus-per-task",
            "cpus-per-task",
            self.cpus_per_task.max(1).to_string(),
        ));
        for (option, what, value) in options {
            lines.push(format!(
                "#SBATCH {}",
                directive_word(what, &format!("{option}={value}"))?
            ));
        }
        match self.requeue {
            // A preempted task runs again; one near its time limit hears USR2, stops its run and
            // requeues itself (`scontrol requeue`). Its attempt is kept under attempts/.
            Some(lead) => {
                lines.push("#SBATCH --requeue".to_string());
                let secs = lead.as_secs() + u64::from(lead.subsec_nanos() > 0);
                lines.push(format!("#SBATCH --signal=B:{PRE_TIMEOUT_SIGNAL}@{secs}"));
            }
            // A lost task is re-submitted by `resume`, not rerun by Slurm into a finished folder.
            None => lines.push("#SBATCH --no-requeue".to_string()),
        }
        let (out, err) = Self::log_patterns(bundle);
        let mut options = vec![
            ("--chdir", bundle.to_string()),
            ("--output", out),
            ("--error", err),
            ("--array", self.array.to_string()),
        ];
        if let Some(id) = self.after {
            options.push(("--dependency", format!("afterany:{id}")));
        }
        for (option, value) in options {
            lines.push(format!(
                "#SBATCH {}",
                directive_word("bundle path", &format!("{option}={value}"))?
            ));
        }
        if !self.extra_args.is_empty() {
            let words = self
                .extra_args
                .iter()
                .map(|a| directive_word("sbatch-args", a))
                .collect::<Result<Vec<_>, _>>()?;
            // One line: an option and its value given as two words stay together.
            lines.push(format!("#SBATCH {}", words.join(" ")));
        }
        lines.push("set -eu".to_string());
        if self.requeue.is_some() {
            // A USR2 before `exec` would end bash (the default action); ignored, it stays so until
            // hwr-exp slurm-task installs its handler (runs get the default back at their exec).
            lines.push(format!("trap '' {PRE_TIMEOUT_SIGNAL}"));
        }
        lines.push(format!("index=$(({} + SLURM_ARRAY_TASK_ID))", self.offset));
        lines.push(format!(
            "exec {} {TASK_SUBCOMMAND} {} \"$index\"",
            sh(binary),
            sh(bundle)
        ));
        let mut text = lines.join("\n");
        text.push('\n');
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ScriptSpec {
        ScriptSpec {
            job_name: job_name("size-compare"),
            comment: None,
            partition: Some("cpu".into()),
            account: None,
            qos: Some("normal".into()),
            time_limit: time_limit(
                Some(Duration::from_secs(120)),
                Duration::from_secs(5),
                Duration::from_secs(60),
            ),
            cpus_per_task: 2,
            nodelist: None,
            exclude: None,
            requeue: None,
            array: ArraySpec::new([0, 1, 2, 3, 7], Some(2)).unwrap(),
            offset: 0,
            after: None,
            extra_args: vec![],
            binary: "/opt/hwr exp/hwr-exp".into(),
            bundle: "/shared/results/t/20261130T185700Z-1a2b".into(),
        }
    }

    #[test]
    fn requeue_asks_for_the_pre_timeout_signal_instead_of_no_requeue() {
        let mut s = spec();
        s.requeue = Some(requeue_lead(Duration::from_millis(5500)));
        let text = s.render().unwrap();
        assert!(
            text.contains("\n#SBATCH --requeue\n#SBATCH --signal=B:USR2@36\n"),
            "{text}"
        );
        assert!(!text.contains("--no-requeue"), "{text}");
        assert!(text.contains("\nset -eu\ntrap '' USR2\nindex="), "{text}");
        assert!(spec().render().unwrap().contains("\n#SBATCH --no-requeue\n"));
    }

    #[test]
    fn renders_the_whole_script() {
        let text = spec().render().unwrap();
        let b = "/shared/results/t/20261130T185700Z-1a2b";
        let expected = format!(
            "#!/bin/bash
# hwr-exp {v} batch script: plan index = 0 + SLURM_ARRAY_TASK_ID
#SBATCH --job-name=hwr-exp:size-compare
#SBATCH --partition=cpu
#SBATCH --qos=normal
#SBATCH --time=00:03:05
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --no-requeue
#SBATCH --chdir={b}
#SBATCH --output={b}/slurm/logs/%A_%a.out
#SBATCH --error={b}/slurm/logs/%A_%a.err
#SBATCH --array=0-3,7%2
set -eu
index=$((0 + SLURM_ARRAY_TASK_ID))
exec '/opt/hwr exp/hwr-exp' slurm-task {b} \"$index\"
",
            v = env!("CARGO_PKG_VERSION")
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn nodelist_and_exclude() {
        let mut s = spec();
        s.nodelist = Some("n[1-2]".into());
        s.exclude = Some("n3,n4".into());
        let text = s.render().unwrap();
        assert!(
            text.contains("#SBATCH \"--nodelist=n[1-2]\"\n#SBATCH --exclude=n3,n4\n#SBATCH --ntasks=1\n"),
            "{text}"
        );
    }

    #[test]
    fn offset_dependency_and_extra_args() {
        let mut s = spec();
        s.offset = 1001;
        s.after = Some(42);
        s.time_limit = None;
        s.extra_args = vec!["--mem".into(), "4G".into(), "--comment=two words".into()];
        let text = s.render().unwrap();
        assert!(text.contains("\n#SBATCH --dependency=afterany:42\n"), "{text}");
        assert!(
            text.contains("\n#SBATCH --mem 4G \"--comment=two words\"\nset -eu\n"),
            "{text}"
        );
        assert!(text.contains("index=$((1001 + SLURM_ARRAY_TASK_ID))"), "{text}");
        assert!(!text.contains("--time"), "{text}");
        s.comment = Some("hwr-exp bundle=/r/x y script=slurm/array-0.sbatch offset=0".into());
        let text = s.render().unwrap();
        assert!(
            text.contains(
                "#SBATCH --job-name=hwr-exp:size-compare\n#SBATCH \"--comment=hwr-exp bundle=/r/x y script=slurm/array-0.sbatch offset=0\"\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn quotes_for_sbatch_and_bash_and_doubles_percent_in_log_patterns() {
        let mut s = spec();
        s.bundle = "/shared/we ird's $dir%x".into();
        s.job_name = "it's a \"job\"".into();
        let text = s.render().unwrap();
        // sbatch's tokenizer: double quotes, backslash before `"` and `\`.
        assert!(
            text.contains("#SBATCH \"--job-name=it's a \\\"job\\\"\"\n"),
            "{text}"
        );
        assert!(
            text.contains("#SBATCH \"--output=/shared/we ird's $dir%%x/slurm/logs/%A_%a.out\"\n"),
            "{text}"
        );
        assert!(
            text.contains("#SBATCH \"--chdir=/shared/we ird's $dir%x\"\n"),
            "{text}"
        );
        // bash: shlex quoting.
        let last = text.lines().last().unwrap();
        let words = shlex::split(last).unwrap();
        assert_eq!(
            words,
            [
                "exec",
                "/opt/hwr exp/hwr-exp",
                "slurm-task",
                "/shared/we ird's $dir%x",
                "$index"
            ]
        );
        assert!(last.ends_with(" \"$index\""));
    }

    #[test]
    fn refuses_what_a_script_cannot_carry() {
        let mut s = spec();
        s.partition = Some("cpu\n#SBATCH --qos=high".into());
        assert!(matches!(s.render(), Err(ScriptError::LineBreak { what, .. }) if what == "partition"));
        let mut s = spec();
        s.extra_args = vec!["--x=\r".into()];
        assert!(matches!(s.render(), Err(ScriptError::LineBreak { .. })));
        let mut s = spec();
        s.bundle = "results/x".into();
        assert!(matches!(s.render(), Err(ScriptError::Relative { .. })));
        let mut s = spec();
        s.bundle = "/a\\b".into();
        assert!(matches!(s.render(), Err(ScriptError::Backslash { .. })));
        let mut s = spec();
        s.binary = "hwr-exp".into();
        assert!(matches!(s.render(), Err(ScriptError::Relative { what, .. }) if what == "hwr-exp binary"));
    }

    #[test]
    fn directive_words() {
        assert_eq!(directive_word("x", "--mem=4G").unwrap(), "--mem=4G");
        assert_eq!(directive_word("x", "").unwrap(), "\"\"");
        assert_eq!(directive_word("x", "a#b").unwrap(), "\"a#b\"");
        assert_eq!(directive_word("x", "a\\b").unwrap(), "\"a\\\\b\"");
        assert_eq!(directive_word("x", "it's").unwrap(), "\"it's\"");
    }

    #[test]
    fn slurm_time_rounds_seconds_up() {
        assert_eq!(format_slurm_time(Duration::from_secs(185)), "00:03:05");
        assert_eq!(format_slurm_time(Duration::from_millis(59_001)), "00:01:00");
        assert_eq!(
            format_slurm_time(Duration::from_secs(86_400 + 3661)),
            "1-01:01:01"
        );
        assert_eq!(
            time_limit(None, Duration::from_secs(5), Duration::from_secs(60)),
            None
        );
        assert_eq!(
            time_limit(Some(Duration::MAX), Duration::from_secs(5), Duration::ZERO),
            Some(Duration::MAX)
        );
    }
}
