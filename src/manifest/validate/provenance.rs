//! `[provenance]` (DESIGN 3): `repo`, the git repository to record, relative to the manifest's
//! folder.

use std::path::Path;

use toml::de::DeTable;

use super::{Validator, join_normalized};
use crate::manifest::model::ProvenanceConfig;

/// Every key of `[provenance]`.
pub(super) const KEYS: &[&str] = &["repo"];

impl Validator<'_> {
    pub(super) fn provenance(&mut self, root: &DeTable<'_>, base_dir: &Path) -> ProvenanceConfig {
        let t = self.section(root, "provenance", KEYS);
        let repo = match self.field(t, "provenance", "repo") {
            Some(v) => match self.string(v) {
                Some("") => {
                    self.err(
                        v.span(),
                        "`repo` is empty",
                        Some("write \".\" for the manifest's folder".into()),
                    );
                    None
                }
                Some(s) => Some(join_normalized(base_dir, s)),
                None => None,
            },
            None => None,
        };
        ProvenanceConfig { repo }
    }
}
