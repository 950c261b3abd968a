//! The JSON Schema (from the serde mirror in `manifest::raw`) and the span-keeping validator must
//! agree: every valid example deserializes into the raw types, and the schema has exactly the keys
//! the validator accepts, which include every key DESIGN section 3 lists.

use std::path::Path;

use hwr_exp::manifest::{self, raw::RawManifest};
use serde_json::Value;

use crate::support::source_path;

/// Keys DESIGN section 3 names (plus `[report] metrics` and the slurm-only keys of `[executor]`).
const DESIGN_KEYS: &[&str] = &[
    "format",
    "experiment.name",
    "experiment.description",
    "command.argv",
    "command.shell",
    "command.workdir",
    "command.output",
    "command.output-format",
    "matrix.exclude",
    "matrix.include",
    "schedule.repetitions",
    "schedule.order",
    "schedule.seed",
    "schedule.jobs",
    "isolation.cpus",
    "isolation.cpus-per-run",
    "isolation.timeout",
    "isolation.grace",
    "isolation.env-policy",
    "isolation.env",
    "isolation.env-unset",
    "measure.sample-interval",
    "provenance.repo",
    "provenance.patch-limit",
    "provenance.patch-file-limit",
    "report.metrics",
    "executor.kind",
    "executor.partition",
    "executor.account",
    "executor.qos",
    "executor.time-margin",
    "executor.sbatch-args",
    "executor.keep-sbatch-env",
];

/// Follows `$ref` and `Option`'s `anyOf [T, null]` down to an object schema.
fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    loop {
        if let Some(r) = node.get("$ref").and_then(Value::as_str) {
            let name = r.strip_prefix("#/$defs/").expect("local $ref");
            node = &root["$defs"][name];
        } else if let Some(branches) = node.get("anyOf").and_then(Value::as_array) {
            node = branches
                .iter()
                .find(|b| b.get("type") != Some(&Value::from("null")))
                .expect("a non-null branch");
        } else {
            return node;
        }
    }
}

fn property<'a>(root: &'a Value, dotted: &str) -> Option<&'a Value> {
    let mut node = root;
    for part in dotted.split('.') {
        node = resolve(root, node).get("properties")?.get(part)?;
    }
    Some(node)
}

/// Every dotted key the schema declares (top level and one level of sections).
fn schema_keys(root: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (top, sub) in root["properties"].as_object().unwrap() {
        out.push(top.clone());
        if let Some(props) = resolve(root, sub).get("properties").and_then(Value::as_object) {
            out.extend(props.keys().map(|k| format!("{top}.{k}")));
        }
    }
    out.sort();
    out
}

#[test]
fn schema_and_validator_accept_the_same_keys() {
    let schema = manifest::schema();
    let mut validator = manifest::known_keys();
    validator.sort();
    assert_eq!(schema_keys(&schema), validator);
    for key in DESIGN_KEYS {
        assert!(validator.iter().any(|k| k == key), "validator lacks {key}");
        let p = property(&schema, key).unwrap_or_else(|| panic!("schema lacks {key}"));
        let described = resolve(&schema, p).get("description").or(p.get("description"));
        assert!(described.is_some(), "{key} has no description in the schema");
    }
}

#[test]
fn schema_carries_the_accepted_values() {
    let schema = manifest::schema();
    let text = schema.to_string();
    for word in [
        "interleaved",
        "grouped",
        "shuffled",
        "inherit",
        "clean",
        "json",
        "text",
        "local",
        "slurm",
    ] {
        assert!(text.contains(&format!("\"{word}\"")), "schema lacks {word}");
    }
    assert_eq!(schema["title"], "hwr-exp manifest");
    assert_eq!(schema["additionalProperties"], false);
    assert!(
        schema["required"]
            .as_array()
            .unwrap()
            .contains(&Value::from("format"))
    );
    let name = resolve(&schema, property(&schema, "experiment.name").unwrap());
    assert_eq!(name["pattern"], "^[a-z0-9_-]+$");
}

#[test]
fn every_valid_example_also_deserializes_into_the_raw_types() {
    let dir = source_path("tests/manifests/good");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        manifest::load(&path).unwrap_or_else(|d| panic!("{d}"));
        let raw: RawManifest = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(raw.format, 1);
        count += 1;
    }
    assert!(count >= 3);
}

#[test]
fn raw_types_reject_unknown_keys_too() {
    let text = "format = 1\n[experiment]\nname = \"x\"\n[command]\nargv = [\"a\"]\nagrv = []\n";
    assert!(toml::from_str::<RawManifest>(text).is_err());
    assert!(manifest::parse(text, Path::new("x.toml"), Path::new("/")).is_err());
}

#[test]
fn schema_has_no_null_since_toml_has_none() {
    let text = manifest::schema().to_string();
    assert!(!text.contains("\"null\""), "{text}");
    let schema = manifest::schema();
    assert_eq!(schema["properties"]["matrix"]["$ref"], "#/$defs/RawMatrix");
}
