//! Editor validation is real: the JSON Schema printed by `hwr-exp schema` (what Taplo / Even Better
//! TOML load through a `#:schema` line) is run by a real JSON Schema validator (the jsonschema
//! crate, draft 2020-12) over the manifests converted from TOML to JSON as an editor does. Every
//! manifest hwr-exp accepts must pass; every bad manifest whose fault a schema can express must be
//! rejected. Each bad manifest is listed below with the reason it is or is not schema-catchable,
//! so a new one forces a decision.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::support::{code, hwr, package_root, stderr};

/// Bad manifests the schema rejects, with the schema rule that catches each.
const CAUGHT: &[(&str, &str)] = &[
    ("executor-bad-kind.toml", "kind is \"local\" or \"slurm\""),
    (
        "executor-sbatch-args-not-strings.toml",
        "sbatch-args items are strings",
    ),
    ("executor-unknown-key.toml", "unknown key in [executor]"),
    // Unknown keys: `additionalProperties: false` on the document and every section.
    (
        "unknown-top-key.toml",
        "unknown key `formt` (and `format` missing)",
    ),
    ("unknown-top-section.toml", "unknown section [schedul]"),
    ("unknown-command-key.toml", "unknown key in [command]"),
    ("unknown-experiment-key.toml", "unknown key in [experiment]"),
    ("unknown-isolation-key.toml", "unknown key in [isolation]"),
    ("unknown-measure-key.toml", "unknown key in [measure]"),
    ("unknown-schedule-key.toml", "unknown key in [schedule]"),
    (
        "format-2.toml",
        "format maximum 1, and the unknown [future-section]",
    ),
    // Wrong types.
    ("format-string.toml", "format is an integer"),
    ("wrong-type-argv.toml", "argv is an array"),
    ("wrong-type-argv-item.toml", "argv items are strings"),
    ("wrong-type-repetitions.toml", "repetitions is an integer"),
    ("env-unset-not-strings.toml", "env-unset items are strings"),
    ("non-string-env.toml", "env values are strings"),
    ("section-not-table.toml", "[schedule] is a table"),
    ("matrix-not-list.toml", "a matrix axis is an array"),
    ("matrix-value-table.toml", "matrix values are scalars"),
    ("exclude-not-array.toml", "matrix.exclude is an array of tables"),
    // Accepted values and ranges.
    ("bad-env-policy.toml", "env-policy is inherit or clean"),
    ("bad-order.toml", "order is interleaved, grouped or shuffled"),
    ("bad-output-format.toml", "output-format is json or text"),
    ("bad-name.toml", "name pattern ^[a-z0-9_-]+$"),
    ("negative-jobs.toml", "jobs minimum 1"),
    (
        "provenance-patch-file-limit-negative.toml",
        "a size is a non-negative integer or a string",
    ),
    ("negative-seed.toml", "seed minimum 0"),
    ("zero-repetitions.toml", "repetitions minimum 1"),
    ("adaptive-min-below-two.toml", "repetitions.min minimum 2"),
    ("adaptive-unknown-until.toml", "until is \"decided\""),
    (
        "adaptive-unknown-key.toml",
        "unknown key in repetitions = { ... }",
    ),
    ("adaptive-missing-max.toml", "repetitions.max is required"),
    ("empty-argv.toml", "argv minItems 1"),
    ("empty-matrix.toml", "a matrix axis has minItems 1"),
    ("duplicate-cpus.toml", "a cpus array has uniqueItems"),
    ("matrix-duplicate-value.toml", "a matrix axis has uniqueItems"),
    // JSON Schema's equality takes 1 and 1.0 as one number.
    ("matrix-same-number-value.toml", "a matrix axis has uniqueItems"),
    (
        "bad-cpu-list.toml",
        "a cpus string is auto or a CPU list (pattern)",
    ),
    ("output-with-slash.toml", "output has no `/` (pattern)"),
    (
        "bad-metric-pointer.toml",
        "metric values are \"\" or start with `/` (pattern)",
    ),
    ("env-name-equals.toml", "env names have no `=` (propertyNames)"),
    (
        "matrix-bad-key-name.toml",
        "matrix keys are placeholder names (propertyNames)",
    ),
    (
        "matrix-builtin-key.toml",
        "matrix keys are not built-in placeholders (propertyNames)",
    ),
    // Required keys and the argv / shell choice.
    ("format-missing.toml", "format is required"),
    ("missing-command.toml", "[command] is required"),
    ("missing-name.toml", "experiment.name is required"),
    ("both-argv-and-shell.toml", "exactly one of argv / shell (oneOf)"),
    (
        "neither-argv-nor-shell.toml",
        "exactly one of argv / shell (oneOf)",
    ),
];

/// Bad manifests a schema cannot reject, and why; `hwr-exp check` reports them.
const NOT_CAUGHT: &[(&str, &str)] = &[
    // Not TOML: the editor's TOML parser reports them before any schema is applied.
    ("syntax-duplicate-key.toml", "TOML syntax"),
    ("syntax-missing-value.toml", "TOML syntax"),
    ("syntax-unclosed-header.toml", "TOML syntax"),
    ("syntax-unclosed-string.toml", "TOML syntax"),
    // Templates: placeholders must name matrix keys of the same document, a cross-reference
    // JSON Schema cannot express.
    ("unknown-placeholder-argv.toml", "placeholder vs matrix keys"),
    ("unknown-placeholder-env.toml", "placeholder vs matrix keys"),
    ("unknown-placeholder-escaped.toml", "placeholder vs matrix keys"),
    ("unknown-placeholder-multiline.toml", "placeholder vs matrix keys"),
    ("unknown-placeholder-output.toml", "placeholder vs matrix keys"),
    ("unknown-placeholder-workdir.toml", "placeholder vs matrix keys"),
    ("design-example-allocator.toml", "placeholder vs matrix keys"),
    ("empty-placeholder.toml", "template syntax inside any string"),
    ("stray-brace.toml", "template syntax inside any string"),
    ("unclosed-brace.toml", "template syntax inside any string"),
    ("exclude-unknown-key.toml", "exclude keys vs matrix keys"),
    ("exclude-value-typo.toml", "exclude values vs matrix values"),
    ("include-missing-key.toml", "include keys vs matrix keys"),
    // Durations: humantime's grammar (units, sums like \"1m 30s\", above zero) is the
    // validator's; a regex copy would drift from it.
    ("bad-duration-no-unit.toml", "humantime duration"),
    ("bad-duration-unit.toml", "humantime duration"),
    ("provenance-patch-limit-not-a-size.toml", "byte size text"),
    ("provenance-patch-limit-unit.toml", "byte size unit"),
    ("bad-sample-interval.toml", "humantime duration"),
    ("zero-timeout.toml", "humantime duration above zero"),
    // Limits and characters the validator enforces where the value is used: durations above one
    // year, NUL in any string, path placeholders in `output`.
    ("timeout-overflow.toml", "duration above the one-year cap"),
    ("grace-overflow.toml", "duration above the one-year cap"),
    ("sample-interval-overflow.toml", "duration above the one-year cap"),
    ("nul-matrix-value.toml", "NUL inside a string"),
    // 1 and "1" are distinct JSON values but one cell label `elements=1`.
    (
        "matrix-same-label-value.toml",
        "a number and a string with one label",
    ),
    ("nul-env-value.toml", "NUL inside a string"),
    ("nul-exclude-value.toml", "NUL inside a string"),
    ("output-bundle.toml", "path placeholder inside output"),
    ("output-run-dir.toml", "path placeholder inside output"),
    // [executor]: rules across keys and sections, and sbatch's own option grammar.
    ("executor-bad-time-margin.toml", "humantime duration"),
    (
        "executor-sbatch-args-reserved.toml",
        "options hwr-exp sets itself",
    ),
    (
        "executor-slurm-fixed-cpus.toml",
        "[isolation] cpus against [executor] kind",
    ),
    (
        "adaptive-min-above-max.toml",
        "repetitions.max against repetitions.min",
    ),
    ("adaptive-grouped.toml", "[schedule] order against repetitions"),
    (
        "executor-slurm-key-default-kind.toml",
        "slurm keys against the default kind",
    ),
    (
        "executor-slurm-key-with-local.toml",
        "slurm keys against kind = \"local\"",
    ),
    ("executor-empty-partition.toml", "empty partition name"),
    ("executor-kubernetes-empty-image.toml", "empty image name"),
    (
        "executor-ray-address-with-space.toml",
        "white space inside an address",
    ),
    // Editors hand TOML datetimes to the schema as strings; `1979-05-27` matches the name
    // pattern. hwr-exp's own validator sees the datetime type.
    ("wrong-type-name-datetime.toml", "datetime seen as a string"),
];

/// The schema as `hwr-exp schema` prints it.
fn schema() -> Json {
    let out = hwr(package_root(), &["schema"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("schema is JSON")
}

fn validator() -> jsonschema::Validator {
    let schema = schema();
    jsonschema::meta::validate(&schema).unwrap_or_else(|e| panic!("not a valid JSON Schema: {e}"));
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::validator_for(&schema).expect("the schema compiles")
}

/// A TOML value as the JSON an editor validates: tables become objects, arrays arrays, and
/// datetimes strings in their TOML spelling (as Taplo does).
fn to_json(v: &toml::Value) -> Json {
    match v {
        toml::Value::String(s) => Json::String(s.clone()),
        toml::Value::Integer(i) => Json::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        toml::Value::Boolean(b) => Json::Bool(*b),
        toml::Value::Datetime(d) => Json::String(d.to_string()),
        toml::Value::Array(a) => Json::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => Json::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

fn read_toml(path: &Path) -> Result<Json, String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse::<toml::Table>()
        .map(|t| to_json(&toml::Value::Table(t)))
        .map_err(|e| e.to_string())
}

fn tomls(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    out.sort();
    out
}

/// Every manifest hwr-exp is meant to accept: experiments/, tests/manifests/good/, the fixture
/// bundles' source manifests and the checked-in bundle's manifest.toml.
fn good_manifests() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [
        "experiments",
        "tests/manifests/good",
        "tests/fixtures/bundles/sources",
    ] {
        out.extend(tomls(&package_root().join(dir)));
    }
    for experiment in std::fs::read_dir(package_root().join("results")).unwrap() {
        for bundle in std::fs::read_dir(experiment.unwrap().path()).unwrap() {
            out.push(bundle.unwrap().path().join("manifest.toml"));
        }
    }
    out
}

fn errors(v: &jsonschema::Validator, doc: &Json) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn every_good_manifest_passes_the_schema() {
    let v = validator();
    let manifests = good_manifests();
    assert!(manifests.len() >= 9, "{manifests:?}");
    for path in manifests {
        // hwr-exp itself accepts it (the experiments are pinned to `cpus = "auto"`).
        hwr_exp::manifest::load(&path).unwrap_or_else(|d| panic!("{}: {d}", path.display()));
        let doc = read_toml(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let problems = errors(&v, &doc);
        assert!(problems.is_empty(), "{}: {problems:#?}", path.display());
    }
}

#[test]
fn every_bad_manifest_is_classified() {
    let mut listed: Vec<&str> = CAUGHT.iter().chain(NOT_CAUGHT).map(|(f, _)| *f).collect();
    listed.sort();
    let before = listed.len();
    listed.dedup();
    assert_eq!(before, listed.len(), "a file is listed twice");
    let files: Vec<String> = tomls(&package_root().join("tests/manifests/bad"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, listed, "tests/manifests/bad and the lists here differ");
}

#[test]
fn the_schema_rejects_what_a_schema_can_catch() {
    let v = validator();
    let dir = package_root().join("tests/manifests/bad");
    let passed: Vec<String> = CAUGHT
        .iter()
        .filter(|(file, _)| {
            let doc = read_toml(&dir.join(file)).unwrap_or_else(|e| panic!("{file} is TOML: {e}"));
            v.is_valid(&doc)
        })
        .map(|(file, why)| format!("{file} passes the schema, but {why}"))
        .collect();
    assert!(passed.is_empty(), "{passed:#?}");
}

#[test]
fn what_the_schema_cannot_catch_is_left_to_hwr_exp_check() {
    let v = validator();
    let dir = package_root().join("tests/manifests/bad");
    for (file, why) in NOT_CAUGHT {
        let path = dir.join(file);
        // hwr-exp rejects it (tests/integration/manifest_errors.rs checks the message and location) ...
        assert!(hwr_exp::manifest::load(&path).is_err(), "{file}");
        // ... and the schema lets it through, as the reason says; a file the schema starts to
        // catch moves to CAUGHT.
        match read_toml(&path) {
            Err(_) => assert_eq!(*why, "TOML syntax", "{file} is not TOML"),
            Ok(doc) => assert!(
                v.is_valid(&doc),
                "{file} is caught by the schema now: {:#?}",
                errors(&v, &doc)
            ),
        }
    }
}

#[test]
fn schema_errors_point_at_the_key() {
    let v = validator();
    let doc = read_toml(&package_root().join("tests/manifests/bad/unknown-isolation-key.toml")).unwrap();
    let problems = errors(&v, &doc);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("/isolation: ") && p.contains("cpu")),
        "{problems:#?}"
    );
    let doc = read_toml(&package_root().join("tests/manifests/bad/wrong-type-argv-item.toml")).unwrap();
    let problems = errors(&v, &doc);
    assert!(
        problems.iter().any(|p| p.starts_with("/command/argv/1: ")),
        "{problems:#?}"
    );
}

#[test]
fn matrix_key_rule_matches_the_validator() {
    let schema = schema();
    let names = &schema["$defs"]["RawMatrix"]["propertyNames"];
    let mut builtins: Vec<&str> = names["not"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    builtins.sort();
    let mut expected = hwr_exp::manifest::template::BUILTINS.to_vec();
    expected.sort();
    assert_eq!(
        builtins, expected,
        "the schema's built-ins drifted from the validator's"
    );
    // A few names the validator accepts or rejects (tests/manifests/bad has the rejected ones in
    // context), run through the schema's rule.
    let v = jsonschema::validator_for(names).unwrap();
    for ok in ["mode", "tensor-elements", "n_2", "A"] {
        assert!(v.is_valid(&Json::from(ok)), "{ok}");
    }
    for bad in ["tensor size", "", "a.b", "run-id", "repetition", "é"] {
        assert!(!v.is_valid(&Json::from(bad)), "{bad}");
    }
}
