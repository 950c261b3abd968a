//! `[experiment]` (DESIGN 3): `name` (required, `[a-z0-9_-]+`, the results folder) and
//! `description`.

use toml::de::DeTable;

use super::Validator;
use crate::manifest::model::Experiment;

/// Every key of `[experiment]`.
pub(super) const KEYS: &[&str] = &["name", "description"];

impl Validator<'_> {
    pub(super) fn experiment(&mut self, root: &DeTable<'_>) -> Experiment {
        let t = self.section(root, "experiment", KEYS);
        let mut name = String::new();
        match self.field(t, "experiment", "name") {
            Some(v) => {
                if let Some(s) = self.string(v) {
                    if s.is_empty()
                        || !s
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
                    {
                        self.err(
                            v.span(),
                            format!("experiment name \"{s}\" must match [a-z0-9_-]+"),
                            Some("the name becomes the results folder results/<name>/; use lowercase letters, digits, `_` and `-`".into()),
                        );
                    }
                    name = s.to_string();
                }
            }
            None if self.suggested.contains("experiment.name") || self.suggested.contains("experiment") => {}
            None => {
                let span = self.section_span("experiment");
                self.err(
                    span,
                    if t.is_some() {
                        "missing `name` in [experiment]"
                    } else {
                        "missing [experiment] with `name`"
                    },
                    Some("add [experiment] with name = \"my-experiment\"".into()),
                );
            }
        }
        let description = self
            .field(t, "experiment", "description")
            .and_then(|v| self.string(v))
            .map(str::to_string);
        Experiment { name, description }
    }
}
