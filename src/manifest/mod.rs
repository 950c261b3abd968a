//! The manifest: raw TOML with spans, validation, diagnostics (DESIGN 3).

pub mod diagnostic;
pub mod model;
pub mod template;

use std::path::Path;

pub use diagnostic::{Diagnostic, Diagnostics};
pub use model::*;

/// Reads and validates a manifest file.
///
/// # Errors
/// [`Diagnostics`] with every problem found (an unreadable file is one diagnostic at 1:1).
pub fn load(path: &Path) -> Result<Manifest, Diagnostics> {
    let _ = path;
    todo!("manifest::load")
}

/// Validates manifest text. `path` names the file in diagnostics; `base_dir` is the folder relative
/// paths resolve against (the manifest's folder).
///
/// # Errors
/// [`Diagnostics`] with every problem found.
pub fn parse(source: &str, path: &Path, base_dir: &Path) -> Result<Manifest, Diagnostics> {
    let _ = (source, path, base_dir);
    todo!("manifest::parse")
}

/// JSON Schema of the manifest. (stub until the manifest branch lands)
pub fn schema() -> serde_json::Value {
    serde_json::json!({})
}

impl Manifest {
    /// A one-item [`Diagnostics`] located at a dotted key (stub until the manifest branch lands).
    pub fn diagnostic(&self, key: &str, message: impl Into<String>, help: Option<String>) -> Diagnostics {
        let span = self.spans.get(key).cloned().unwrap_or(0..0);
        Diagnostics {
            file: self.path.display().to_string(),
            source: self.source.clone(),
            items: vec![Diagnostic {
                span,
                message: message.into(),
                help,
            }],
        }
    }
}
