//! `[report]` (DESIGN 3): `metrics`, named JSON pointers into each run's JSON output; `control`,
//! the control cell by matrix keys and values; `equivalence-margin`, a byte size (growth and
//! after-close) or `{ growth = SIZE, rate = SIZE }` (rate: bytes per 1000 iterations);
//! `verdict-metric`, what the verdict judges (DESIGN 9).

use toml::de::{DeTable, DeValue};

use super::{Val, Validator, entries};
use crate::manifest::model::{DEFAULT_VERDICT_METRIC, Matrix, ReportConfig, VERDICT_METRICS, parse_size};

/// Every key of `[report]`.
pub(super) const KEYS: &[&str] = &["metrics", "control", "equivalence-margin", "verdict-metric"];

impl Validator<'_> {
    pub(super) fn size(&mut self, v: &Val<'_>, what: &str) -> Option<f64> {
        match v.get_ref() {
            DeValue::Integer(_) => match self.scalar(v) {
                Some(crate::manifest::Value::Int(i)) if i >= 0 => Some(i as f64),
                _ => {
                    self.err(v.span(), format!("{what}: a size cannot be negative"), None);
                    None
                }
            },
            DeValue::String(_) => {
                let text = self.string(v)?.to_string();
                match parse_size(&text) {
                    Ok(x) => Some(x),
                    Err(e) => {
                        self.err(
                            v.span(),
                            format!("{what}: {e}"),
                            Some("sizes look like \"64KiB\", \"1MiB\" or 4096 (bytes)".into()),
                        );
                        None
                    }
                }
            }
            _ => {
                self.type_err(v, "a size like \"64KiB\"");
                None
            }
        }
    }

    fn control(&mut self, v: &Val<'_>, matrix: &Matrix) -> Vec<(String, crate::manifest::Value)> {
        let DeValue::Table(t) = v.get_ref() else {
            self.type_err(v, "a table like control = { mode = \"reuse\" }");
            return Vec::new();
        };
        if t.is_empty() {
            self.err(
                v.span(),
                "[report] control is empty",
                Some("name the control cell, like control = { mode = \"reuse\" }".into()),
            );
        }
        let keys: Vec<&str> = matrix.axes.iter().map(|(k, _)| k.as_str()).collect();
        let mut out = Vec::new();
        for (k, val) in entries(t) {
            let name: &str = k.get_ref();
            let Some(value) = self.scalar(val) else { continue };
            let Some((_, values)) = matrix.axes.iter().find(|(a, _)| a == name) else {
                self.err(
                    k.span(),
                    format!("[report] control: `{name}` is not a matrix key"),
                    Some(format!(
                        "matrix keys: {}",
                        if keys.is_empty() {
                            "none".into()
                        } else {
                            keys.join(", ")
                        }
                    )),
                );
                continue;
            };
            let text = value.to_string();
            // The matrix's own value when the control names it another way (`32.0` for `32`):
            // one rule for every match of a matrix value ([`Value::same_cell`]).
            let named = matrix.value(name, &value);
            let Some(named) = named else {
                self.err(
                    val.span(),
                    format!("[report] control: {name} = {text} is not one of the matrix's values"),
                    Some(format!(
                        "{name} takes {}",
                        values
                            .iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                );
                continue;
            };
            out.push((name.to_string(), named.clone()));
        }
        out
    }

    /// `verdict-metric`: one of [`VERDICT_METRICS`] or a name from `metrics`; an error at the
    /// value listing the valid ones otherwise.
    fn verdict_metric(&mut self, t: Option<&DeTable<'_>>, metrics: &[(String, String)]) -> Option<String> {
        let v = self.field(t, "report", "verdict-metric")?;
        let name = self.string(v)?.to_string();
        if VERDICT_METRICS.contains(&name.as_str()) || metrics.iter().any(|(n, _)| *n == name) {
            return Some(name);
        }
        let valid: Vec<&str> = VERDICT_METRICS
            .iter()
            .copied()
            .chain(metrics.iter().map(|(n, _)| n.as_str()))
            .collect();
        self.err(
            v.span(),
            format!("[report] verdict-metric: unknown metric \"{name}\""),
            Some(format!(
                "valid: {} (the default is {DEFAULT_VERDICT_METRIC}; a name from [report] metrics is valid too)",
                valid.join(", ")
            )),
        );
        None
    }

    pub(super) fn report(&mut self, root: &DeTable<'_>, matrix: &Matrix) -> ReportConfig {
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
        let control = match self.field(t, "report", "control") {
            Some(v) => self.control(v, matrix),
            None => Vec::new(),
        };
        let (mut growth_margin, mut rate_margin) = (None, None);
        if let Some(v) = self.field(t, "report", "equivalence-margin") {
            match v.get_ref() {
                DeValue::Table(m) => {
                    for (k, val) in entries(m) {
                        match k.get_ref().as_ref() {
                            "growth" => growth_margin = self.size(val, "equivalence-margin.growth"),
                            "rate" => rate_margin = self.size(val, "equivalence-margin.rate"),
                            other => self.err(
                                k.span(),
                                format!("[report] equivalence-margin: unknown key `{other}`"),
                                Some(
                                    "the keys are growth (bytes) and rate (bytes per 1000 iterations)".into(),
                                ),
                            ),
                        }
                    }
                }
                _ => growth_margin = self.size(v, "equivalence-margin"),
            }
        }
        // A margin with no control to compare with: no `equivalent` verdict can be made (the
        // new-user trial of 2026-12-04 saw `check` say ok and the report say `no control`).
        let default_control = crate::manifest::Value::Str(crate::manifest::DEFAULT_CONTROL_MODE.into());
        if control.is_empty()
            && (growth_margin.is_some() || rate_margin.is_some())
            && matrix.value("mode", &default_control).is_none()
            && let Some(span) = self.spans.get("report.equivalence-margin").cloned()
        {
            self.warn(
                span,
                format!(
                    "[report] equivalence-margin has no effect: there is no control cell to compare with (no [report] control, and no matrix value mode = \"{}\" to take by default)",
                    crate::manifest::DEFAULT_CONTROL_MODE
                ),
                Some("name the control cell with [report] control = { KEY = \"VALUE\" }".into()),
            );
        }
        let verdict_metric = self.verdict_metric(t, &metrics);
        ReportConfig {
            metrics,
            control,
            growth_margin,
            rate_margin,
            verdict_metric,
        }
    }
}
