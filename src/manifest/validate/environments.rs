//! `[environments.<name>]` (DESIGN 3): Python environments built with uv, selected per run by the
//! matrix key `environment`. Each has `requirements` (PEP 508 strings, at least one), and
//! optionally `python` (a version like "3.11" or an interpreter path), `find-links` (folders or
//! URLs; a relative folder starts at the manifest's folder) and `no-index`.
//!
//! Rules beyond types: names follow the placeholder rule; the `environment` matrix values (axis
//! and `include`) must name a defined environment, and environments need that axis to be used.

use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::{Validator, entries, is_placeholder_name, join_normalized};
use crate::manifest::model::{EnvironmentSpec, Matrix, Value};

/// Every key of one `[environments.<name>]` table.
pub(super) const KEYS: &[&str] = &["requirements", "python", "find-links", "no-index"];

/// The matrix key that selects an environment.
pub const ENVIRONMENT_KEY: &str = "environment";

impl Validator<'_> {
    pub(super) fn environments(
        &mut self,
        root: &DeTable<'_>,
        base_dir: &Path,
        matrix: &Matrix,
    ) -> Vec<(String, EnvironmentSpec)> {
        let mut out = Vec::new();
        if let Some(v) = root.get("environments") {
            self.spans.insert("environments".into(), v.span());
            match v.get_ref() {
                DeValue::Table(t) => {
                    for (k, env) in entries(t) {
                        let name: &str = k.get_ref();
                        let key = format!("environments.{name}");
                        self.spans.insert(key.clone(), k.span());
                        if !is_placeholder_name(name) {
                            self.err(
                                k.span(),
                                format!(
                                    "environment name `{name}` may hold only letters, digits, `-` and `_`"
                                ),
                                None,
                            );
                        }
                        let DeValue::Table(et) = env.get_ref() else {
                            self.type_err(env, "a table, like [environments.NAME] requirements = [...]");
                            continue;
                        };
                        self.check_keys(et, KEYS, &key, &format!("in [{key}]"));
                        if let Some(spec) = self.environment(et, &key, base_dir, env.span()) {
                            out.push((name.to_string(), spec));
                        }
                    }
                }
                _ => self.type_err(v, "a table of environments, like [environments.NAME]"),
            }
        }
        self.environment_selection(matrix, &out);
        out
    }

    fn environment(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        base_dir: &Path,
        span: std::ops::Range<usize>,
    ) -> Option<EnvironmentSpec> {
        let mut spec = EnvironmentSpec::default();
        let mut ok = true;
        match self.field(Some(t), key, "requirements") {
            Some(v) => match v.get_ref() {
                DeValue::Array(items) if !items.is_empty() => {
                    for item in items.iter() {
                        match self.string(item) {
                            Some("") => {
                                ok = false;
                                self.err(item.span(), "empty requirement", None);
                            }
                            Some(s) if s.contains('\n') => {
                                ok = false;
                                self.err(item.span(), "a requirement is one line", None);
                            }
                            Some(s) => spec.requirements.push(s.trim().to_string()),
                            None => ok = false,
                        }
                    }
                }
                _ => {
                    ok = false;
                    self.type_err(
                        v,
                        "a non-empty array of PEP 508 strings, like [\"safetensors==0.4.5\"]",
                    );
                }
            },
            None => {
                ok = false;
                self.err(
                    span,
                    format!("[{key}] needs `requirements`"),
                    Some("requirements = [\"safetensors==0.4.5\", \"numpy\"]".into()),
                );
            }
        }
        if let Some(v) = self.field(Some(t), key, "python") {
            match self.string(v) {
                Some("") => {
                    ok = false;
                    self.err(
                        v.span(),
                        "`python` is empty",
                        Some("a version like \"3.11\" or an interpreter path".into()),
                    );
                }
                Some(s) if s.contains('/') => {
                    spec.python = Some(join_normalized(base_dir, s).display().to_string())
                }
                Some(s) => spec.python = Some(s.to_string()),
                None => ok = false,
            }
        }
        if let Some(v) = self.field(Some(t), key, "find-links") {
            match v.get_ref() {
                DeValue::Array(items) => {
                    for item in items.iter() {
                        match self.string(item) {
                            Some(s) if s.contains("://") => spec.find_links.push(s.to_string()),
                            Some(s) if !s.is_empty() => spec
                                .find_links
                                .push(join_normalized(base_dir, s).display().to_string()),
                            Some(_) => {
                                ok = false;
                                self.err(item.span(), "empty find-links entry", None);
                            }
                            None => ok = false,
                        }
                    }
                }
                _ => {
                    ok = false;
                    self.type_err(v, "an array of folders or URLs");
                }
            }
        }
        if let Some(v) = self.field(Some(t), key, "no-index") {
            match v.get_ref() {
                DeValue::Boolean(b) => spec.no_index = *b,
                _ => {
                    ok = false;
                    self.type_err(v, "a boolean");
                }
            }
        }
        ok.then_some(spec)
    }

    /// The `environment` matrix values must name environments; environments need the axis.
    fn environment_selection(&mut self, matrix: &Matrix, envs: &[(String, EnvironmentSpec)]) {
        let names: Vec<&str> = envs.iter().map(|(n, _)| n.as_str()).collect();
        let axis = matrix.axes.iter().find(|(k, _)| k == ENVIRONMENT_KEY);
        let mut values: Vec<&Value> = axis.map(|(_, v)| v.iter().collect()).unwrap_or_default();
        values.extend(matrix.include.iter().filter_map(|c| c.get(ENVIRONMENT_KEY)));
        let span = self
            .spans
            .get(&format!("matrix.{ENVIRONMENT_KEY}"))
            .cloned()
            .unwrap_or_else(|| self.section_span("matrix"));
        for v in values {
            let ok = matches!(v, Value::Str(s) if names.contains(&s.as_str()));
            if !ok {
                self.err(
                    span.clone(),
                    format!("matrix value environment = {v} names no [environments.{v}]"),
                    Some(if names.is_empty() {
                        "define it: [environments.NAME] requirements = [...]".to_string()
                    } else {
                        format!("defined environments: {}", names.join(", "))
                    }),
                );
            }
        }
        if axis.is_none() && !envs.is_empty() {
            let span = self.section_span("environments");
            self.err(
                span,
                "environments are defined but no matrix key `environment` selects one",
                Some(format!(
                    "add to [matrix]: environment = [{}]",
                    names
                        .iter()
                        .map(|n| format!("\"{n}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
        }
    }
}
