//! `[provenance]` (DESIGN 3): `repo`, the git repository to record, relative to the manifest's
//! folder; `patch-limit` and `patch-file-limit`, byte sizes that bound working-tree.patch (all
//! changed files together, one file).

use std::path::Path;

use toml::de::DeTable;

use super::{Validator, join_normalized};
use crate::manifest::model::ProvenanceConfig;

/// Every key of `[provenance]`.
pub(super) const KEYS: &[&str] = &["repo", "patch-limit", "patch-file-limit"];

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
        let mut limit = |key: &str| {
            let v = self.field(t, "provenance", key)?;
            // Whole bytes; "1.5KiB" rounds down.
            self.size(v, &format!("[provenance] {key}")).map(|x| x as u64)
        };
        let patch_limit = limit("patch-limit");
        let patch_file_limit = limit("patch-file-limit");
        ProvenanceConfig {
            repo,
            patch_limit,
            patch_file_limit,
        }
    }
}
