//! The `kubectl` calls of the kubernetes executor: which context answers, apply a Job, list its
//! pods, delete it. Each call is one `kubectl` process found on `PATH`, with `--context` and
//! `--namespace` from the manifest when it names them and `--request-timeout` so that an API
//! server that does not answer fails the call instead of hanging the waiter.

use std::io::Write as _;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Pod;

/// How long one `kubectl` request may take (`--request-timeout`).
pub const REQUEST_TIMEOUT: &str = "30s";

/// A failed `kubectl` call.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    /// kubectl could not be started (not on `PATH`, not executable).
    #[error("could not start `kubectl` ({source}): install kubectl and put it on PATH")]
    Spawn {
        /// Why.
        source: std::io::Error,
    },
    /// kubectl ran and exited with an error.
    #[error("`kubectl {args}` failed ({status}): {stderr}")]
    Failed {
        /// The arguments, joined by spaces.
        args: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The last lines of its standard error.
        stderr: String,
    },
    /// kubectl's answer was not what was asked for.
    #[error("`kubectl {args}` answered something else than asked for: {error}")]
    Answer {
        /// The arguments, joined by spaces.
        args: String,
        /// serde_json's account.
        error: serde_json::Error,
    },
}

/// `kubectl get ... -o json`: a list of pods (kind `List` or `PodList`; only `items` is read).
#[derive(Debug, serde::Deserialize)]
struct PodList {
    #[serde(default)]
    items: Vec<Pod>,
}

/// A kubectl bound to a context and a namespace (each `None` = kubectl's own choice).
#[derive(Debug, Clone, Default)]
pub struct Kubectl {
    /// `--context`.
    pub context: Option<String>,
    /// `--namespace`.
    pub namespace: Option<String>,
}

impl Kubectl {
    /// The command `kubectl [--context C] [--namespace N] --request-timeout T ARGS`.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        if let Some(ctx) = &self.context {
            c.arg(format!("--context={ctx}"));
        }
        if let Some(ns) = &self.namespace {
            c.arg(format!("--namespace={ns}"));
        }
        c.arg(format!("--request-timeout={REQUEST_TIMEOUT}"));
        c.args(args);
        c.stdin(Stdio::null());
        c
    }

    /// Runs `args` (with `input` on standard input when given); its standard output.
    fn run(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, KubectlError> {
        let mut c = self.command(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        if input.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().map_err(|source| KubectlError::Spawn { source })?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            // A kubectl that exits early closes its end: its exit status tells why.
            let _ = stdin.write_all(bytes);
        }
        let out = child
            .wait_with_output()
            .map_err(|source| KubectlError::Spawn { source })?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        Err(KubectlError::Failed {
            args: args.join(" "),
            status: out.status,
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        })
    }

    /// The context kubectl uses: the manifest's, else `kubectl config current-context` (fails
    /// when none is configured).
    ///
    /// # Errors
    /// [`KubectlError`] when kubectl cannot be started or has no current context.
    pub fn context_in_use(&self) -> Result<String, KubectlError> {
        if let Some(c) = &self.context {
            return Ok(c.clone());
        }
        let out = self.run(&["config", "current-context"], None)?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// `kubectl apply -f -` with the Job document `json`; kubectl's one-line answer
    /// (`job.batch/NAME created`).
    ///
    /// # Errors
    /// [`KubectlError`] when kubectl fails (the API server refused the Job, no access, ...).
    pub fn apply(&self, json: &str) -> Result<String, KubectlError> {
        let out = self.run(&["apply", "-f", "-"], Some(json.as_bytes()))?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// The pods of Job `job`: `kubectl get pods -l job-name=JOB -o json`.
    ///
    /// # Errors
    /// [`KubectlError`] when kubectl fails or answers something other than a pod list.
    pub fn pods(&self, job: &str) -> Result<Vec<Pod>, KubectlError> {
        let selector = format!("{}={job}", super::job::JOB_NAME_LABEL);
        let args = ["get", "pods", "-l", selector.as_str(), "-o", "json"];
        let out = self.run(&args, None)?;
        serde_json::from_slice::<PodList>(&out)
            .map(|l| l.items)
            .map_err(|error| KubectlError::Answer {
                args: args.join(" "),
                error,
            })
    }

    /// Job `job` as the API server has it (`kubectl get job JOB -o json --ignore-not-found`);
    /// `None` when there is no such Job.
    ///
    /// # Errors
    /// [`KubectlError`] when kubectl fails or answers something other than a Job.
    pub fn job(&self, job: &str) -> Result<Option<k8s_openapi::api::batch::v1::Job>, KubectlError> {
        let args = ["get", "job", job, "-o", "json", "--ignore-not-found"];
        let out = self.run(&args, None)?;
        if out.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(&out)
            .map(Some)
            .map_err(|error| KubectlError::Answer {
                args: args.join(" "),
                error,
            })
    }

    /// `kubectl delete job JOB --ignore-not-found --wait=false` (its pods go with it: kubectl
    /// deletes with background propagation).
    ///
    /// # Errors
    /// [`KubectlError`] when kubectl fails.
    pub fn delete_job(&self, job: &str) -> Result<(), KubectlError> {
        self.run(
            &["delete", "job", job, "--ignore-not-found", "--wait=false"],
            None,
        )
        .map(|_| ())
    }
}
