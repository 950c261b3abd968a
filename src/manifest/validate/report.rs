//! `[report]` (DESIGN 3): `metrics`, named JSON pointers into each run's JSON output.

use toml::de::{DeTable, DeValue};

use super::{Validator, entries};
use crate::manifest::model::ReportConfig;

/// Every key of `[report]`.
pub(super) const KEYS: &[&str] = &["metrics"];

impl Validator<'_> {
    pub(super) fn report(&mut self, root: &DeTable<'_>) -> ReportConfig {
        let t = self.section(root, "report", KEYS);
        let mut metrics = Vec::new();
        if let Some(v) = self.field(t, "report", "metrics") {
            match v.get_ref() {
                DeValue::Table(m) => {
                    for (k, val) in entries(m) {
                        let name: &str = k.get_ref();
                        self.spans.insert(format!("report.metrics.{name}"), val.span());
                        if name.is_empty() {
                            self.err(k.span(), "metric name is empty", None);
                        }
                        if let Some(p) = self.string(val) {
                            if !p.is_empty() && !p.starts_with('/') {
                                self.err(
                                    val.span(),
                                    format!("metric `{name}`: \"{p}\" is not a JSON pointer"),
                                    Some(format!("JSON pointers (RFC 6901) start with `/`, like \"/{p}\"; \"\" is the whole document")),
                                );
                            } else if p.split('/').count() - 1 > crate::manifest::MAX_POINTER_TOKENS {
                                self.err(
                                    val.span(),
                                    format!(
                                        "metric `{name}`: the JSON pointer has {} tokens, more than {}",
                                        p.split('/').count() - 1,
                                        crate::manifest::MAX_POINTER_TOKENS
                                    ),
                                    None,
                                );
                            }
                            metrics.push((name.to_string(), p.to_string()));
                        }
                    }
                }
                _ => self.type_err(v, "a table like metrics = { name = \"/json/pointer\" }"),
            }
        }
        ReportConfig { metrics }
    }
}
