//! The real executor: a fresh process per run.

use super::{CancelFlag, Executor, RunOutcome, RunSpec};

/// Runs each [`RunSpec`] as a child process in its own process group.
#[derive(Debug, Default, Clone)]
pub struct ProcessExecutor;

impl ProcessExecutor {
    /// A new executor (stub).
    pub fn new() -> ProcessExecutor {
        ProcessExecutor
    }
}

impl Executor for ProcessExecutor {
    fn execute(&self, spec: &RunSpec, cancel: &CancelFlag) -> RunOutcome {
        let _ = (spec, cancel);
        todo!("ProcessExecutor::execute")
    }
}
