//! `[measure]` (DESIGN 3): `sample-interval` of external memory sampling, or `"off"`.

use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::Validator;
use crate::manifest::model::Measure;

/// Every key of `[measure]`.
pub(super) const KEYS: &[&str] = &["sample-interval"];

/// Default `sample-interval`: 100 ms.
const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

impl Validator<'_> {
    pub(super) fn measure(&mut self, root: &DeTable<'_>) -> Measure {
        let t = self.section(root, "measure", KEYS);
        let mut sample_interval = Some(DEFAULT_SAMPLE_INTERVAL);
        if let Some(v) = self.field(t, "measure", "sample-interval") {
            if matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == "off") {
                sample_interval = None;
            } else if let Some(d) = self.duration(v, "sample-interval") {
                if d.is_zero() {
                    self.err(
                        v.span(),
                        "`sample-interval` must be above zero",
                        Some("write \"off\" to disable external sampling".into()),
                    );
                } else {
                    sample_interval = Some(d);
                }
            }
        }
        Measure { sample_interval }
    }
}
