//! The one error of plan expansion: a problem located by dotted manifest key.

/// A problem found only by expansion, located by dotted manifest key (see [`crate::manifest::Manifest::spans`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    /// Dotted key path, e.g. `"command.output"`.
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// Optional hint.
    pub help: Option<String>,
}

impl PlanError {
    pub(super) fn new(key: &str, message: String, help: Option<String>) -> PlanError {
        PlanError {
            key: key.to_string(),
            message,
            help,
        }
    }
}
