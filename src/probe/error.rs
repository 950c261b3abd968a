//! What can go wrong in the probe, and the exit code each failure gives (docs/DESIGN.md 7).

use super::document::TENSOR_NAME;
use crate::memory::RollupError;

/// Errors of the probe.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// smaps_rollup could not be read or parsed (exit 2).
    #[error(transparent)]
    Smaps(#[from] RollupError),
    /// smaps_rollup lacks a field every kernel with the file prints (exit 2).
    #[error("{path} has no {field} line; is it a smaps_rollup file?")]
    MissingField {
        /// The file read.
        path: String,
        /// The missing field.
        field: &'static str,
    },
    /// A file or directory operation failed (exit 1).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the path.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The safetensors crate refused the file it wrote or a header it parsed (exit 1).
    #[error("safetensors: {0}")]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// The tensor in the file is not the f32 vector that was written (exit 1).
    #[error("tensor `{TENSOR_NAME}` is {found}, expected F32 of shape [{expected}]")]
    WrongTensor {
        /// Dtype and shape found.
        found: String,
        /// Elements expected.
        expected: usize,
    },
    /// `tensor_elements` does not fit in this machine's address space (exit 2).
    #[error("{0} tensor elements do not fit in memory on this machine")]
    TooManyElements(u64),
}

impl ProbeError {
    /// The exit code for this error: 2 for an unreadable or malformed smaps_rollup (DESIGN 7),
    /// 1 for anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            ProbeError::Smaps(_) | ProbeError::MissingField { .. } | ProbeError::TooManyElements(_) => {
                crate::exit_codes::USAGE
            }
            _ => crate::exit_codes::RUN_FAILED,
        }
    }
}
