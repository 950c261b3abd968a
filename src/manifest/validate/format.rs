//! `format` (DESIGN 3): the manifest format version, a top-level key rather than a section. A
//! newer format stops validation with one diagnostic: its other keys may follow rules this build
//! does not know.

use toml::de::DeTable;

use super::Validator;
use crate::manifest::diagnostic::Diagnostic;
use crate::manifest::model::MANIFEST_FORMAT;

impl Validator<'_> {
    /// `format`; `Err(diagnostic)` for a newer format, whose other keys this build cannot judge.
    pub(super) fn format(&mut self, root: &DeTable<'_>) -> Result<u32, Diagnostic> {
        let Some(v) = root.get("format") else {
            if !self.suggested.contains("format") {
                self.err(
                    0..0,
                    "missing `format`",
                    Some(format!("start the manifest with `format = {MANIFEST_FORMAT}`")),
                );
            }
            return Ok(MANIFEST_FORMAT);
        };
        self.spans.insert("format".into(), v.span());
        match self.integer(v) {
            Some(n) if n == i64::from(MANIFEST_FORMAT) => Ok(MANIFEST_FORMAT),
            Some(n) if n > i64::from(MANIFEST_FORMAT) => Err(Diagnostic {
                span: v.span(),
                message: format!(
                    "manifest format {n} is newer than this hwr-exp understands; this hwr-exp reads format {MANIFEST_FORMAT}"
                ),
                help: Some("upgrade hwr-exp, or write the manifest in format 1".into()),
                ..Diagnostic::default()
            }),
            Some(n) => {
                self.err(
                    v.span(),
                    format!("unsupported manifest format {n}; this hwr-exp reads format {MANIFEST_FORMAT}"),
                    None,
                );
                Ok(MANIFEST_FORMAT)
            }
            None => Ok(MANIFEST_FORMAT),
        }
    }
}
