//! Span-keeping manifest validator: walks the TOML document produced by `toml::de::DeTable::parse`
//! by hand, collects every problem as a located [`Diagnostic`] and, when there is none, builds the
//! validated [`Manifest`] with every default filled in.
//!
//! One file per manifest section (as cargo-nextest keeps one config element per file): each holds
//! the section's `KEYS`, its defaults and rules, a `Validator::<section>` method that reads it, and
//! tests of its own. [`validator`] holds the shared state and the readers of values (`field`,
//! `string`, `integer`, `positive`, `duration`, `template`, ...); this file lists the sections
//! ([`SECTIONS`]) and calls them in [`validate`].
//!
//! **A new key in an existing section** (say `[schedule] foo`): add `"foo"` to `KEYS` in
//! `schedule.rs` and read it in `Validator::schedule` with `self.field(t, "schedule", "foo")` and a
//! reader; add the field to the section's type in `model.rs` and to its serde mirror in `raw.rs`
//! (the JSON Schema; `manifest_schema` fails when the two disagree); document it in DESIGN 3.
//!
//! **A new section** (say `[foo]`): a file `foo.rs` with `pub(super) const KEYS` and
//! `impl Validator<'_> { pub(super) fn foo(&mut self, root: &DeTable<'_>) -> Foo }` starting with
//! `self.section(root, "foo", KEYS)`; here a `mod foo;`, a row in [`SECTIONS`] (which makes
//! `[foo]` a known top-level key and puts its keys in [`known_keys`], checked against the
//! schema) and the call in [`validate`]; the field in `model.rs` (`Manifest`) and in
//! `raw.rs` (`RawManifest`). A section that depends on another takes the validated value as an
//! argument (as `isolation` takes `schedule.jobs` and `executor` takes `isolation`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::diagnostic::{Diagnostics, Level};
use super::model::Manifest;
use super::template::BUILTINS;
use validator::{Val, Validator, did_you_mean, entries, found, is_placeholder_name, join_normalized};

pub use environments::ENVIRONMENT_KEY;
pub use validator::MAX_DURATION;

mod command;
mod environments;
mod executor;
mod executor_kubernetes;
mod experiment;
mod format;
mod isolation;
mod matrix;
mod measure;
mod provenance;
mod report;
mod schedule;
mod validator;

/// Every section, in the order the top-level "valid keys" help lists them (after `format`), with
/// its keys. `[matrix]`'s keys are its fixed ones: its axes are free-form.
const SECTIONS: &[(&str, &[&str])] = &[
    ("experiment", experiment::KEYS),
    ("command", command::KEYS),
    ("matrix", matrix::KEYS),
    ("schedule", schedule::KEYS),
    ("isolation", isolation::KEYS),
    ("measure", measure::KEYS),
    ("provenance", provenance::KEYS),
    ("report", report::KEYS),
    ("executor", executor::KEYS),
    ("environments", &[]),
];

/// The keys accepted at the top level: `format` and every section.
fn top_keys() -> Vec<&'static str> {
    std::iter::once("format")
        .chain(SECTIONS.iter().map(|(name, _)| *name))
        .collect()
}

/// Every key the validator accepts, as dotted paths (`"format"`, `"command.argv"`, ...); matrix
/// axes are free-form and not listed, `matrix.exclude` / `matrix.include` are.
pub fn known_keys() -> Vec<String> {
    let mut keys = vec!["format".to_string()];
    for (section, fields) in SECTIONS {
        keys.push(section.to_string());
        keys.extend(fields.iter().map(|f| format!("{section}.{f}")));
    }
    keys
}

/// Validates a parsed document; see [`crate::manifest::parse`].
pub(crate) fn validate(source: &str, path: &Path, base_dir: &Path) -> Result<Manifest, Diagnostics> {
    let file = path.display().to_string();
    let root = match DeTable::parse(source) {
        Ok(t) => t.into_inner(),
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let mut message = format!("TOML syntax error: {}", e.message().trim_end());
            if e.message().trim_end() == "duplicate key"
                && let Some(key) = source.get(span.clone()).filter(|k| !k.is_empty())
            {
                message = format!("TOML syntax error: duplicate key `{key}`");
            }
            return Err(Diagnostics::single(file, source, span, message, None));
        }
    };
    let mut v = Validator {
        src: source,
        diags: Vec::new(),
        spans: BTreeMap::new(),
        suggested: BTreeSet::new(),
    };
    v.check_keys(&root, &top_keys(), "", "at the top level");
    let format = match v.format(&root) {
        Ok(f) => f,
        // A newer format may have keys and rules this build does not know: say only that.
        Err(newer) => {
            return Err(Diagnostics {
                file,
                source: source.to_string(),
                items: vec![newer],
            });
        }
    };
    let experiment = v.experiment(&root);
    let matrix = v.matrix(&root);
    let mut known: Vec<String> = match root.get("matrix").map(|m| m.get_ref()) {
        Some(DeValue::Table(t)) => entries(t)
            .iter()
            .map(|(k, _)| k.get_ref().to_string())
            .filter(|k| k != "exclude" && k != "include")
            .collect(),
        _ => Vec::new(),
    };
    known.extend(BUILTINS.iter().map(|b| b.to_string()));
    let command = v.command(&root, &known);
    let schedule = v.schedule(&root);
    let isolation = v.isolation(&root, &known, schedule.jobs);
    let measure = v.measure(&root);
    let provenance = v.provenance(&root, base_dir);
    let report = v.report(&root, &matrix);
    let executor = v.executor(&root, &isolation, schedule.adaptive.is_some());
    let environments = v.environments(&root, base_dir, &matrix);

    v.unused_combinations(command.as_ref(), &isolation, &executor);
    let mut items = v.diags;
    items.sort_by_key(|d| (d.span.start, d.span.end));
    items.dedup();
    if items.iter().any(|d| d.level == Level::Error) {
        // Warnings stay with the errors, in source order: the whole picture at once.
        return Err(Diagnostics {
            file,
            source: source.to_string(),
            items,
        });
    }
    let command = command.expect("command is present when no diagnostic was reported");
    Ok(Manifest {
        path: path.to_path_buf(),
        base_dir: base_dir.to_path_buf(),
        source: source.to_string(),
        format,
        experiment,
        command,
        matrix,
        schedule,
        isolation,
        measure,
        provenance,
        report,
        executor,
        environments,
        spans: v.spans,
        warnings: items,
        overridden: BTreeMap::new(),
    })
}

impl Validator<'_> {
    /// Warnings for keys that are valid on their own but have no effect with the rest of the
    /// manifest (a section's own combinations are warned about in its file, like `seed` without
    /// `order = "shuffled"` in `schedule.rs`).
    fn unused_combinations(
        &mut self,
        command: Option<&super::model::CommandSpec>,
        isolation: &super::model::Isolation,
        executor: &super::model::ExecutorConfig,
    ) {
        if command.is_some_and(|c| c.output_format == super::model::OutputFormat::Text) {
            for (key, what) in [
                ("metrics", "its values are never read"),
                ("control", "no verdict against a control is made"),
                ("equivalence-margin", "no `equivalent` verdict is made"),
                ("verdict-metric", "no verdict is made"),
            ] {
                if let Some(span) = self.spans.get(&format!("report.{key}")).cloned() {
                    self.warn(
                        span,
                        format!(
                            "[report] {key} has no effect with output-format = \"text\": the report reads values only from JSON outputs, so {what}"
                        ),
                        Some("set output-format = \"json\" in [command] (the default), or remove the key".into()),
                    );
                }
            }
        }
        if executor.kind == super::model::ExecutorKind::Slurm
            && isolation.timeout.is_none()
            && let Some(span) = self.spans.get("executor.time-margin").cloned()
        {
            self.warn(
                span,
                "`time-margin` has no effect without `timeout` in [isolation]: Slurm's --time is timeout + grace + time-margin, and without a timeout no --time is given",
                Some("set timeout in [isolation], or remove `time-margin`".into()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_cover_every_section() {
        let keys = known_keys();
        for top in top_keys() {
            assert!(keys.iter().any(|k| k == top), "{top}");
        }
        let tops: Vec<&String> = keys.iter().filter(|k| !k.contains('.')).collect();
        assert_eq!(tops.len(), top_keys().len());
        assert_eq!(
            top_keys(),
            [
                "format",
                "experiment",
                "command",
                "matrix",
                "schedule",
                "isolation",
                "measure",
                "provenance",
                "report",
                "executor",
                "environments"
            ]
        );
    }
}
