//! Span-keeping manifest validator: walks the TOML document produced by `toml::de::DeTable::parse`
//! by hand, collects every problem as a located [`Diagnostic`] and, when there is none, builds the
//! validated [`Manifest`] with every default filled in.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use super::diagnostic::{Diagnostic, Diagnostics};
use super::model::*;
use super::template::{self, BUILTINS, Segment};
use crate::cpus;

mod executor;

type Val<'i> = Spanned<DeValue<'i>>;
type Key<'i> = Spanned<DeString<'i>>;

const TOP_KEYS: &[&str] = &[
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
];
const EXPERIMENT_KEYS: &[&str] = &["name", "description"];
const COMMAND_KEYS: &[&str] = &["argv", "shell", "workdir", "output", "output-format"];
const SCHEDULE_KEYS: &[&str] = &["repetitions", "order", "seed", "jobs"];
const ISOLATION_KEYS: &[&str] = &[
    "cpus",
    "cpus-per-run",
    "timeout",
    "grace",
    "env-policy",
    "env",
    "env-unset",
    "allocator",
];
const MEASURE_KEYS: &[&str] = &["sample-interval"];
const PROVENANCE_KEYS: &[&str] = &["repo"];
const REPORT_KEYS: &[&str] = &["metrics"];

/// Every key the validator accepts, as dotted paths (`"format"`, `"command.argv"`, ...); matrix
/// axes are free-form and not listed, `matrix.exclude` / `matrix.include` are.
pub fn known_keys() -> Vec<String> {
    let sections: [(&str, &[&str]); 9] = [
        ("experiment", EXPERIMENT_KEYS),
        ("command", COMMAND_KEYS),
        ("matrix", &["exclude", "include"]),
        ("schedule", SCHEDULE_KEYS),
        ("isolation", ISOLATION_KEYS),
        ("measure", MEASURE_KEYS),
        ("provenance", PROVENANCE_KEYS),
        ("report", REPORT_KEYS),
        ("executor", executor::EXECUTOR_KEYS),
    ];
    let mut keys = vec!["format".to_string()];
    for (section, fields) in sections {
        keys.push(section.to_string());
        keys.extend(fields.iter().map(|f| format!("{section}.{f}")));
    }
    keys
}

/// Built-in placeholders whose values are paths (they hold `/`).
const PATH_BUILTINS: &[&str] = &["hwr-exp", "bundle", "run-dir"];

/// Default `grace`: 5 s between SIGTERM and SIGKILL.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// Longest duration any key accepts (`timeout`, `grace`, `sample-interval`, `time-margin`):
/// 1 year as humantime counts it (365.25 days, `"1y"`), so that adding it to a clock reading or
/// to another duration cannot overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);
/// Default `sample-interval`: 100 ms.
const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// The closest candidate to `word` (Damerau-Levenshtein, case-insensitive), if close enough to be a
/// plausible typo: at most one edit per three characters (at least one), and fewer edits than the
/// word has characters.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_lowercase();
    let len = word.chars().count();
    let limit = (len / 3).max(1).min(len.saturating_sub(1));
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// "a string", "an integer", ... for "expected X, found Y" messages.
fn found(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// `(key, value)` pairs of a TOML table in source order (the parser's map is sorted by name).
fn entries<'a, 'i>(table: &'a DeTable<'i>) -> Vec<(&'a Key<'i>, &'a Val<'i>)> {
    let mut v: Vec<_> = table.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// Whether `name` may be used as `{name}` (same rule as [`template::parse`]).
fn is_placeholder_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Lexically normalises `base.join(rel)`: drops `.`, applies `..` by popping (no file system access).
fn join_normalized(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in base.join(rel).components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Collects diagnostics and value spans while walking the document.
struct Validator<'s> {
    src: &'s str,
    diags: Vec<Diagnostic>,
    spans: BTreeMap<String, Range<usize>>,
    /// Keys some unknown key was taken for (did-you-mean), as `section.key` or `key`: a "missing"
    /// error for them would only repeat the typo's diagnostic.
    suggested: BTreeSet<String>,
}

impl<'s> Validator<'s> {
    fn err(&mut self, span: Range<usize>, message: impl Into<String>, help: Option<String>) {
        self.diags.push(Diagnostic {
            span,
            message: message.into(),
            help,
        });
    }

    fn type_err(&mut self, v: &Val<'_>, expected: &str) {
        self.err(
            v.span(),
            format!("expected {expected}, found {}", found(v.get_ref())),
            None,
        );
    }

    /// Span of a section (its `[header]`), or the start of the file when absent.
    fn section_span(&self, section: &str) -> Range<usize> {
        self.spans.get(section).cloned().unwrap_or(0..0)
    }

    /// Reports every key of `table` not in `valid` (with did-you-mean and the valid keys).
    /// `prefix` is the section name (`""` at the top level), used to remember suggestions.
    fn check_keys(&mut self, table: &DeTable<'_>, valid: &[&str], prefix: &str, place: &str) {
        for (k, _) in entries(table) {
            let name: &str = k.get_ref();
            if !valid.contains(&name) {
                let mut help = String::new();
                if let Some(s) = did_you_mean(name, valid.iter().copied()) {
                    help.push_str(&format!("did you mean `{s}`? "));
                    self.suggested.insert(if prefix.is_empty() {
                        s.to_string()
                    } else {
                        format!("{prefix}.{s}")
                    });
                }
                help.push_str(&format!("valid keys: {}", valid.join(", ")));
                self.err(k.span(), format!("unknown key `{name}` {place}"), Some(help));
            }
        }
    }

    /// A top-level section: checks it is a table with known keys, records its span.
    fn section<'a, 'i>(
        &mut self,
        root: &'a DeTable<'i>,
        name: &str,
        valid: &[&str],
    ) -> Option<&'a DeTable<'i>> {
        let v = root.get(name)?;
        self.spans.insert(name.to_string(), v.span());
        match v.get_ref() {
            DeValue::Table(t) => {
                self.check_keys(t, valid, name, &format!("in [{name}]"));
                Some(t)
            }
            _ => {
                self.type_err(v, &format!("a table ([{name}])"));
                None
            }
        }
    }

    /// A key of a section; records its value span under `section.key`.
    fn field<'a, 'i>(
        &mut self,
        table: Option<&'a DeTable<'i>>,
        section: &str,
        key: &str,
    ) -> Option<&'a Val<'i>> {
        let v = table?.get(key)?;
        self.spans.insert(format!("{section}.{key}"), v.span());
        Some(v)
    }

    /// A string value. Strings holding NUL are refused everywhere: NUL cannot reach argv, the
    /// environment or a file name, so a run could never start.
    fn string<'a>(&mut self, v: &'a Val<'_>) -> Option<&'a str> {
        match v.get_ref() {
            DeValue::String(s) if s.contains('\0') => {
                self.err(
                    v.span(),
                    "strings cannot contain NUL (U+0000)",
                    Some(
                        "NUL cannot be passed in a command line, an environment variable or a file name"
                            .into(),
                    ),
                );
                None
            }
            DeValue::String(s) => Some(s),
            _ => {
                self.type_err(v, "a string");
                None
            }
        }
    }

    fn integer(&mut self, v: &Val<'_>) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.err(v.span(), "integer out of range (64-bit signed)", None);
                    None
                }
            },
            _ => {
                self.type_err(v, "an integer");
                None
            }
        }
    }

    /// A positive integer that fits `T` (`repetitions`, `jobs`, `cpus-per-run`).
    fn positive<T: TryFrom<i64>>(&mut self, v: &Val<'_>, key: &str) -> Option<T> {
        let n = self.integer(v)?;
        if n < 1 {
            self.err(v.span(), format!("`{key}` must be at least 1, found {n}"), None);
            return None;
        }
        match T::try_from(n) {
            Ok(t) => Some(t),
            Err(_) => {
                self.err(v.span(), format!("`{key}` = {n} is too large"), None);
                None
            }
        }
    }

    /// A matrix value (string, integer, float, boolean).
    fn scalar(&mut self, v: &Val<'_>) -> Option<Value> {
        match v.get_ref() {
            DeValue::String(_) => self.string(v).map(|s| Value::Str(s.to_string())),
            DeValue::Boolean(b) => Some(Value::Bool(*b)),
            DeValue::Integer(_) => self.integer(v).map(Value::Int),
            DeValue::Float(x) => match x.as_str().parse::<f64>() {
                Ok(f) => Some(Value::Float(Float {
                    value: f,
                    // The source text, not the parser's normalised form: values reach commands
                    // and file names as the manifest spells them.
                    text: self.src.get(v.span()).unwrap_or(x.as_str()).to_string(),
                })),
                Err(_) => {
                    self.err(v.span(), format!("invalid float `{}`", x.as_str()), None);
                    None
                }
            },
            _ => {
                self.type_err(v, "a string, integer, float or boolean");
                None
            }
        }
    }

    fn duration(&mut self, v: &Val<'_>, key: &str) -> Option<Duration> {
        let s = self.string(v)?;
        match humantime::parse_duration(s) {
            Ok(d) if d > MAX_DURATION => {
                self.err(
                    v.span(),
                    format!("duration \"{s}\" for `{key}` is longer than the limit of 1 year"),
                    Some("durations are at most \"1y\" (365.25 days)".into()),
                );
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.err(
                    v.span(),
                    format!("invalid duration \"{s}\" for `{key}`: {e}"),
                    Some("write a duration with units, like \"120s\", \"1m 30s\" or \"500ms\"".into()),
                );
                None
            }
        }
    }

    fn positive_duration(&mut self, v: &Val<'_>, key: &str) -> Option<Duration> {
        let d = self.duration(v, key)?;
        if d.is_zero() {
            self.err(v.span(), format!("`{key}` must be above zero"), None);
            return None;
        }
        Some(d)
    }

    /// Byte offset in the source where the text of string value `v` starts, when offsets inside
    /// `text` map one-to-one onto the source (literal strings, basic strings without escapes).
    fn string_content_start(&self, v: &Val<'_>, text: &str) -> Option<usize> {
        let span = v.span();
        let raw = self.src.get(span.clone())?;
        let (delim, literal) = if raw.starts_with("\"\"\"") {
            (3, false)
        } else if raw.starts_with("'''") {
            (3, true)
        } else if raw.starts_with('"') {
            (1, false)
        } else if raw.starts_with('\'') {
            (1, true)
        } else {
            return None;
        };
        if !literal && raw.contains('\\') {
            return None;
        }
        let mut start = span.start + delim;
        if delim == 3 {
            let rest = self.src.get(start..)?;
            if rest.starts_with("\r\n") {
                start += 2;
            } else if rest.starts_with('\n') {
                start += 1;
            }
        }
        let end = start + text.len();
        (end <= span.end && self.src.get(start..end) == Some(text)).then_some(start)
    }

    /// Checks a template's syntax and that each placeholder is a matrix key or a built-in.
    /// Problems point at the placeholder inside the string when offsets are exact, else at the
    /// string. Returns the parsed segments when the template is valid.
    fn template<'t>(
        &mut self,
        v: &Val<'_>,
        text: &'t str,
        known: &[String],
        key: &str,
    ) -> Option<Vec<Segment<'t>>> {
        let base = self.string_content_start(v, text);
        let locate = |r: Range<usize>| match base {
            Some(b) => b + r.start..b + r.end,
            None => v.span(),
        };
        let segments = match template::parse(text) {
            Ok(s) => s,
            Err(e) => {
                self.err(
                    locate(e.span.clone()),
                    format!("bad placeholder in `{key}`: {}", e.message),
                    None,
                );
                return None;
            }
        };
        let mut ok = true;
        for seg in &segments {
            if let Segment::Placeholder { name, span } = seg
                && !known.iter().any(|k| k == name)
            {
                ok = false;
                let mut help = String::new();
                if let Some(s) = did_you_mean(name, known.iter().map(String::as_str)) {
                    help.push_str(&format!("did you mean `{{{s}}}`? "));
                }
                let matrix: Vec<&str> = known
                    .iter()
                    .map(String::as_str)
                    .filter(|k| !BUILTINS.contains(k))
                    .collect();
                help.push_str(&format!(
                    "placeholders are the matrix keys ({}) and the built-ins ({}); write `{{{{` for a literal brace",
                    if matrix.is_empty() { "none".to_string() } else { matrix.join(", ") },
                    BUILTINS.join(", ")
                ));
                self.err(
                    locate(span.clone()),
                    format!("unknown placeholder `{{{name}}}` in `{key}`"),
                    Some(help),
                );
            }
        }
        ok.then_some(segments)
    }

    // ---- sections -------------------------------------------------------------------------

    /// `format`; `Err(diagnostic)` for a newer format, whose other keys this build cannot judge.
    fn format(&mut self, root: &DeTable<'_>) -> Result<u32, Diagnostic> {
        let Some(v) = root.get("format") else {
            if !self.suggested.contains("format") {
                self.err(
                    0..0,
                    "missing `format`",
                    Some(format!("start the manifest with `format = {MANIFEST_FORMAT}`")),
                );
            }
            return Ok(MANIFEST_FORMAT);
        };
        self.spans.insert("format".into(), v.span());
        match self.integer(v) {
            Some(n) if n == i64::from(MANIFEST_FORMAT) => Ok(MANIFEST_FORMAT),
            Some(n) if n > i64::from(MANIFEST_FORMAT) => Err(Diagnostic {
                span: v.span(),
                message: format!(
                    "manifest format {n} is newer than this hwr-exp understands; this hwr-exp reads format {MANIFEST_FORMAT}"
                ),
                help: Some("upgrade hwr-exp, or write the manifest in format 1".into()),
            }),
            Some(n) => {
                self.err(
                    v.span(),
                    format!("unsupported manifest format {n}; this hwr-exp reads format {MANIFEST_FORMAT}"),
                    None,
                );
                Ok(MANIFEST_FORMAT)
            }
            None => Ok(MANIFEST_FORMAT),
        }
    }

    fn experiment(&mut self, root: &DeTable<'_>) -> Experiment {
        let t = self.section(root, "experiment", EXPERIMENT_KEYS);
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

    fn matrix(&mut self, root: &DeTable<'_>) -> Matrix {
        let Some(v) = root.get("matrix") else {
            return Matrix::default();
        };
        self.spans.insert("matrix".into(), v.span());
        let DeValue::Table(t) = v.get_ref() else {
            self.type_err(v, "a table ([matrix])");
            return Matrix::default();
        };
        let mut axes = Vec::new();
        for (k, v) in entries(t) {
            let name: &str = k.get_ref();
            if name == "exclude" || name == "include" {
                continue;
            }
            self.spans.insert(format!("matrix.{name}"), v.span());
            if !is_placeholder_name(name) {
                self.err(
                    k.span(),
                    format!("matrix key `{name}` cannot be used as a placeholder"),
                    Some("matrix keys may contain only letters, digits, `-` and `_`".into()),
                );
            } else if BUILTINS.contains(&name) {
                self.err(
                    k.span(),
                    format!("matrix key `{name}` is a built-in placeholder"),
                    Some(format!("rename it; the built-ins are {}", BUILTINS.join(", "))),
                );
            }
            let DeValue::Array(items) = v.get_ref() else {
                self.type_err(v, "an array of values");
                continue;
            };
            if items.is_empty() {
                self.err(
                    v.span(),
                    format!("empty matrix: `{name}` has no values"),
                    Some("give at least one value, or remove the key".into()),
                );
                continue;
            }
            let values: Vec<Value> = items.iter().filter_map(|i| self.scalar(i)).collect();
            axes.push((name.to_string(), values));
        }
        let keys: Vec<String> = entries(t)
            .iter()
            .map(|(k, _)| k.get_ref().to_string())
            .filter(|k| k != "exclude" && k != "include")
            .collect();
        let exclude = self.cell_filters(t, "exclude", &keys);
        let include = self.cell_filters(t, "include", &keys);
        Matrix {
            axes,
            exclude,
            include,
        }
    }

    /// `matrix.exclude` / `matrix.include`: arrays of tables whose keys are matrix keys.
    fn cell_filters(
        &mut self,
        t: &DeTable<'_>,
        which: &str,
        keys: &[String],
    ) -> Vec<BTreeMap<String, Value>> {
        let mut out = Vec::new();
        let Some(v) = self.field(Some(t), "matrix", which) else {
            return out;
        };
        let DeValue::Array(items) = v.get_ref() else {
            self.type_err(
                v,
                &format!("an array of tables, like {which} = [{{ key = \"value\" }}]"),
            );
            return out;
        };
        for (n, item) in items.iter().enumerate() {
            self.spans.insert(format!("matrix.{which}.{n}"), item.span());
            let DeValue::Table(entry) = item.get_ref() else {
                self.type_err(item, "a table like { key = \"value\" }");
                continue;
            };
            let mut cell = BTreeMap::new();
            for (k, val) in entries(entry) {
                let name: &str = k.get_ref();
                if !keys.iter().any(|m| m == name) {
                    let mut help = String::new();
                    if let Some(s) = did_you_mean(name, keys.iter().map(String::as_str)) {
                        help.push_str(&format!("did you mean `{s}`? "));
                    }
                    help.push_str(&format!(
                        "matrix keys: {}",
                        if keys.is_empty() {
                            "none".into()
                        } else {
                            keys.join(", ")
                        }
                    ));
                    self.err(
                        k.span(),
                        format!("`{which}` names `{name}`, which is not a matrix key"),
                        Some(help),
                    );
                    continue;
                }
                if let Some(value) = self.scalar(val) {
                    cell.insert(name.to_string(), value);
                }
            }
            if which == "include" {
                let missing: Vec<&str> = keys
                    .iter()
                    .filter(|k| !entry.contains_key(k.as_str()))
                    .map(String::as_str)
                    .collect();
                if !missing.is_empty() {
                    self.err(
                        item.span(),
                        format!(
                            "include entry is missing matrix key{} {}",
                            if missing.len() > 1 { "s" } else { "" },
                            missing
                                .iter()
                                .map(|m| format!("`{m}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        Some("an included cell must give a value for every matrix key".into()),
                    );
                }
            }
            out.push(cell);
        }
        out
    }

    fn command(&mut self, root: &DeTable<'_>, known: &[String]) -> Option<CommandSpec> {
        let t = self.section(root, "command", COMMAND_KEYS);
        let argv_v = self.field(t, "command", "argv");
        let shell_v = self.field(t, "command", "shell");
        let mut program = None;
        match (argv_v, shell_v) {
            (Some(_), Some(s)) => self.err(
                s.span(),
                "both `argv` and `shell` are set",
                Some("give exactly one: argv = [\"prog\", \"arg\"] runs directly, shell = \"...\" runs under /bin/sh -c".into()),
            ),
            (None, None)
                if ["command", "command.argv", "command.shell"]
                    .iter()
                    .any(|k| self.suggested.contains(*k)) => {}
            (None, None) => {
                let span = self.section_span("command");
                self.err(
                    span,
                    if t.is_some() {
                        "missing `argv` or `shell` in [command]"
                    } else {
                        "missing [command] with `argv` or `shell`"
                    },
                    Some("give exactly one: argv = [\"prog\", \"arg\"] or shell = \"...\"".into()),
                );
            }
            _ => {}
        }
        if let Some(v) = argv_v {
            match v.get_ref() {
                DeValue::Array(items) if items.is_empty() => {
                    self.err(
                        v.span(),
                        "`argv` is empty",
                        Some("argv[0] is the program to run".into()),
                    );
                }
                DeValue::Array(items) => {
                    let mut args = Vec::new();
                    for item in items.iter() {
                        if let Some(s) = self.string(item) {
                            self.template(item, s, known, "command.argv");
                            args.push(s.to_string());
                        }
                    }
                    if matches!(items[0].get_ref(), DeValue::String(s) if s.is_empty()) {
                        self.err(items[0].span(), "`argv[0]` is empty", None);
                    }
                    program = Some(Program::Argv(args));
                }
                _ => self.type_err(v, "an array of strings"),
            }
        }
        if let Some(v) = shell_v
            && let Some(s) = self.string(v)
        {
            if s.trim().is_empty() {
                self.err(v.span(), "`shell` is empty", None);
            }
            self.template(v, s, known, "command.shell");
            program = Some(Program::Shell(s.to_string()));
        }
        let workdir = match self.field(t, "command", "workdir") {
            Some(v) => match self.string(v) {
                Some(s) => {
                    if s.is_empty() {
                        self.err(
                            v.span(),
                            "`workdir` is empty",
                            Some("write \".\" for the manifest's folder".into()),
                        );
                    }
                    self.template(v, s, known, "command.workdir");
                    s.to_string()
                }
                None => String::new(),
            },
            None => ".".to_string(),
        };
        let format = match self.field(t, "command", "output-format") {
            Some(v) => match self.string(v) {
                Some("json") => Some(OutputFormat::Json),
                Some("text") => Some(OutputFormat::Text),
                Some(other) => {
                    let help = match did_you_mean(other, ["json", "text"]) {
                        Some(s) => format!("did you mean \"{s}\"? "),
                        None => String::new(),
                    };
                    self.err(
                        v.span(),
                        format!("unknown output-format \"{other}\""),
                        Some(format!("{help}valid values: \"json\", \"text\"")),
                    );
                    None
                }
                None => None,
            },
            None => None,
        };
        let output = match self.field(t, "command", "output") {
            Some(v) => match self.string(v) {
                Some(s) => {
                    if s.is_empty() {
                        self.err(
                            v.span(),
                            "`output` is empty",
                            Some("default: \"{run-id}.json\"".into()),
                        );
                    } else if let Some(segments) = self.template(v, s, known, "command.output") {
                        self.output_placeholders(v, s, &segments);
                        if let Some(i) = s.find('/') {
                            let span = match self.string_content_start(v, s) {
                                Some(b) => b + i..b + i + 1,
                                None => v.span(),
                            };
                            self.err(
                            span,
                            "`output` must be a file name, not a path: `/` is not allowed",
                            Some("the output is saved inside the run's own folder runs/<run-id>/; use a name like \"{mode}-{repetition}.json\"".into()),
                        );
                        }
                    }
                    Some(s.to_string())
                }
                None => None,
            },
            None => None,
        };
        let output_format = format.unwrap_or(match &output {
            Some(o) if !o.ends_with(".json") => OutputFormat::Text,
            _ => OutputFormat::Json,
        });
        let output = output.unwrap_or_else(|| {
            match output_format {
                OutputFormat::Json => "{run-id}.json",
                OutputFormat::Text => "{run-id}.txt",
            }
            .to_string()
        });
        Some(CommandSpec {
            program: program?,
            workdir,
            output,
            output_format,
        })
    }

    /// `output` is a file name: the path-valued built-ins (`{bundle}`, `{run-dir}`, `{hwr-exp}`)
    /// would put a `/` into it when the run starts, whatever `check` and `plan` saw.
    fn output_placeholders(&mut self, v: &Val<'_>, text: &str, segments: &[Segment<'_>]) {
        let base = self.string_content_start(v, text);
        for seg in segments {
            if let Segment::Placeholder { name, span } = seg
                && PATH_BUILTINS.contains(name)
            {
                let at = match base {
                    Some(b) => b + span.start..b + span.end,
                    None => v.span(),
                };
                self.err(
                    at,
                    format!("`{{{name}}}` is a path and cannot be part of `output`, a file name"),
                    Some("the output is saved inside the run's own folder runs/<run-id>/; use {run-id}, {repetition} and matrix keys".into()),
                );
            }
        }
    }

    fn schedule(&mut self, root: &DeTable<'_>) -> Schedule {
        let t = self.section(root, "schedule", SCHEDULE_KEYS);
        let mut s = Schedule {
            repetitions: 1,
            order: Order::Interleaved,
            seed: None,
            jobs: 1,
        };
        if let Some(v) = self.field(t, "schedule", "repetitions") {
            s.repetitions = self.positive(v, "repetitions").unwrap_or(1);
        }
        if let Some(v) = self.field(t, "schedule", "jobs") {
            s.jobs = self.positive(v, "jobs").unwrap_or(1);
        }
        if let Some(v) = self.field(t, "schedule", "order")
            && let Some(o) = self.string(v)
        {
            s.order = match o {
                "interleaved" => Order::Interleaved,
                "grouped" => Order::Grouped,
                "shuffled" => Order::Shuffled,
                other => {
                    let valid = ["interleaved", "grouped", "shuffled"];
                    let help = match did_you_mean(other, valid) {
                        Some(s) => format!("did you mean \"{s}\"? "),
                        None => String::new(),
                    };
                    self.err(
                        v.span(),
                        format!("unknown order \"{other}\""),
                        Some(format!(
                            "{help}valid values: \"interleaved\", \"grouped\", \"shuffled\""
                        )),
                    );
                    Order::Interleaved
                }
            };
        }
        if let Some(v) = self.field(t, "schedule", "seed")
            && let Some(n) = self.integer(v)
        {
            match u64::try_from(n) {
                Ok(n) => s.seed = Some(n),
                Err(_) => self.err(v.span(), format!("`seed` must be non-negative, found {n}"), None),
            }
        }
        s
    }

    fn isolation(&mut self, root: &DeTable<'_>, known: &[String], jobs: u32) -> Isolation {
        let t = self.section(root, "isolation", ISOLATION_KEYS);
        let mut iso = Isolation {
            cpus: CpuSelection::Auto,
            cpus_per_run: 1,
            timeout: None,
            grace: DEFAULT_GRACE,
            env_policy: EnvPolicy::Inherit,
            env: Vec::new(),
            env_unset: Vec::new(),
            allocator: None,
        };
        let cpus_per_run_v = self.field(t, "isolation", "cpus-per-run");
        let mut cpus_per_run_ok = true;
        if let Some(v) = cpus_per_run_v {
            match self.positive::<usize>(v, "cpus-per-run") {
                Some(n) => iso.cpus_per_run = n,
                None => cpus_per_run_ok = false,
            }
        }
        let cpus_v = self.field(t, "isolation", "cpus");
        let mut pool_ok = true;
        if let Some(v) = cpus_v {
            // (cpu, span of the value that named it)
            let mut listed: Vec<(usize, Range<usize>)> = Vec::new();
            match v.get_ref() {
                DeValue::String(s) if s.as_ref() == "auto" => {}
                DeValue::String(s) => match cpus::parse_cpu_list(s) {
                    Ok(list) if list.is_empty() => {
                        pool_ok = false;
                        self.err(
                            v.span(),
                            "empty CPU list",
                            Some("write \"auto\", a list like [0, 2] or a range like \"2-3\"".into()),
                        );
                    }
                    Ok(list) => listed.extend(list.into_iter().map(|c| (c, v.span()))),
                    Err(e) => {
                        pool_ok = false;
                        self.err(
                            v.span(),
                            format!("invalid CPU list \"{s}\": {e}"),
                            Some("write \"auto\", a list like [0, 2] or a range like \"2-3,5\"".into()),
                        );
                    }
                },
                DeValue::Array(items) if items.is_empty() => {
                    pool_ok = false;
                    self.err(
                        v.span(),
                        "empty CPU list",
                        Some("write \"auto\" or list at least one CPU".into()),
                    );
                }
                DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        // Later stages point at one CPU of the list (the allowed-set check).
                        self.spans.insert(format!("isolation.cpus.{i}"), item.span());
                        match self.integer(item) {
                            Some(n) if n >= 0 => listed.push((n as usize, item.span())),
                            Some(n) => {
                                pool_ok = false;
                                self.err(
                                    item.span(),
                                    format!("CPU numbers are non-negative, found {n}"),
                                    None,
                                );
                            }
                            None => pool_ok = false,
                        }
                    }
                }
                _ => {
                    pool_ok = false;
                    self.err(
                        v.span(),
                        format!(
                            "expected \"auto\", a CPU list string or an array of CPU numbers, found {}",
                            found(v.get_ref())
                        ),
                        None,
                    );
                }
            }
            let mut seen = BTreeSet::new();
            let mut pool = Vec::new();
            for (cpu, span) in listed {
                if !seen.insert(cpu) {
                    pool_ok = false;
                    self.err(span, format!("CPU {cpu} is listed more than once"), None);
                    continue;
                }
                pool.push(cpu);
            }
            if !matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == "auto") {
                iso.cpus = CpuSelection::List(pool);
            }
        }
        // Only a listed pool is checked here: the size of "auto" (the allowed CPU set) and
        // whether listed CPUs are allowed are host facts, checked when the plan is made.
        if let CpuSelection::List(pool) = &iso.cpus
            && pool_ok
            && cpus_per_run_ok
        {
            let need = (jobs as usize).saturating_mul(iso.cpus_per_run);
            if need > pool.len() {
                let span = cpus_per_run_v
                    .map(|v| v.span())
                    .or_else(|| self.spans.get("schedule.jobs").cloned())
                    .or_else(|| cpus_v.map(|v| v.span()))
                    .unwrap_or_else(|| self.section_span("isolation"));
                self.err(
                    span,
                    format!(
                        "jobs ({jobs}) x cpus-per-run ({}) needs {need} CPUs, but `cpus` ({}) has {}",
                        iso.cpus_per_run,
                        cpus::format_cpu_list(pool),
                        pool.len()
                    ),
                    Some("each concurrent run gets its own CPUs; lower `jobs` or `cpus-per-run`, or list more CPUs".into()),
                );
            }
        }
        if let Some(v) = self.field(t, "isolation", "timeout") {
            iso.timeout = self.positive_duration(v, "timeout");
        }
        if let Some(v) = self.field(t, "isolation", "grace") {
            iso.grace = self.positive_duration(v, "grace").unwrap_or(DEFAULT_GRACE);
        }
        if let Some(v) = self.field(t, "isolation", "env-policy")
            && let Some(p) = self.string(v)
        {
            iso.env_policy = match p {
                "inherit" => EnvPolicy::Inherit,
                "clean" => EnvPolicy::Clean,
                other => {
                    let help = match did_you_mean(other, ["inherit", "clean"]) {
                        Some(s) => format!("did you mean \"{s}\"? "),
                        None => String::new(),
                    };
                    self.err(
                        v.span(),
                        format!("unknown env-policy \"{other}\""),
                        Some(format!("{help}valid values: \"inherit\", \"clean\"")),
                    );
                    EnvPolicy::Inherit
                }
            };
        }
        if let Some(v) = self.field(t, "isolation", "env") {
            match v.get_ref() {
                DeValue::Table(env) => {
                    for (k, val) in entries(env) {
                        let name: &str = k.get_ref();
                        self.spans.insert(format!("isolation.env.{name}"), val.span());
                        self.env_name(name, k.span());
                        if let Some(s) = self.string(val) {
                            self.template(val, s, known, &format!("isolation.env.{name}"));
                            iso.env.push((name.to_string(), s.to_string()));
                        }
                    }
                }
                _ => self.type_err(v, "a table of strings, like env = { NAME = \"value\" }"),
            }
        }
        if let Some(v) = self.field(t, "isolation", "env-unset") {
            match v.get_ref() {
                DeValue::Array(items) => {
                    for item in items.iter() {
                        if let Some(s) = self.string(item) {
                            self.env_name(s, item.span());
                            if iso.env.iter().any(|(n, _)| n == s) {
                                self.err(
                                    item.span(),
                                    format!("`{s}` is both set in `env` and removed in `env-unset`"),
                                    Some("keep it in one of the two".into()),
                                );
                            }
                            iso.env_unset.push(s.to_string());
                        }
                    }
                }
                _ => self.type_err(v, "an array of strings"),
            }
        }
        if let Some(v) = self.field(t, "isolation", "allocator")
            && let Some(s) = self.string(v)
        {
            if s.is_empty() {
                self.err(
                    v.span(),
                    "allocator is empty",
                    Some("write \"glibc\", \"jemalloc\", \"tcmalloc\", \"mimalloc\", a library path or a placeholder".into()),
                );
            } else if self.template(v, s, known, "isolation.allocator").is_some() {
                iso.allocator = Some(s.to_string());
            }
            if iso.env.iter().any(|(n, _)| n == "LD_PRELOAD") {
                let span = self
                    .spans
                    .get("isolation.env.LD_PRELOAD")
                    .cloned()
                    .unwrap_or(v.span());
                self.err(
                    span,
                    "`LD_PRELOAD` is set in `env` and `allocator` is given: the allocator sets it",
                    Some("keep one of the two".into()),
                );
            }
        }
        iso
    }

    fn env_name(&mut self, name: &str, span: Range<usize>) {
        if name.is_empty() {
            self.err(span, "environment variable name is empty", None);
        } else if name.contains('=') || name.contains('\0') {
            self.err(
                span,
                format!(
                    "environment variable name `{}` contains `=` or NUL",
                    name.escape_debug()
                ),
                None,
            );
        }
    }

    fn measure(&mut self, root: &DeTable<'_>) -> Measure {
        let t = self.section(root, "measure", MEASURE_KEYS);
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

    fn provenance(&mut self, root: &DeTable<'_>, base_dir: &Path) -> ProvenanceConfig {
        let t = self.section(root, "provenance", PROVENANCE_KEYS);
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

    fn report(&mut self, root: &DeTable<'_>) -> ReportConfig {
        let t = self.section(root, "report", REPORT_KEYS);
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
    v.check_keys(&root, TOP_KEYS, "", "at the top level");
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
    let report = v.report(&root);
    let executor = v.executor(&root, &isolation);

    if !v.diags.is_empty() {
        let mut items = v.diags;
        items.sort_by_key(|d| (d.span.start, d.span.end));
        items.dedup();
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
        spans: v.spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let keys = ["repetitions", "order", "seed", "jobs"];
        assert_eq!(did_you_mean("repetiton", keys), Some("repetitions"));
        assert_eq!(did_you_mean("Jobs", keys), Some("jobs"));
        assert_eq!(did_you_mean("odrer", keys), Some("order"));
        assert_eq!(did_you_mean("timeout", keys), None);
        assert_eq!(did_you_mean("x", ["y"]), None);
        assert_eq!(did_you_mean("cpu", ["cpus", "grace"]), Some("cpus"));
        assert_eq!(did_you_mean("ab", ["xy"]), None);
    }

    #[test]
    fn known_keys_cover_every_section() {
        let keys = known_keys();
        for top in TOP_KEYS {
            assert!(keys.iter().any(|k| k == top), "{top}");
        }
        let tops: Vec<&String> = keys.iter().filter(|k| !k.contains('.')).collect();
        assert_eq!(tops.len(), TOP_KEYS.len());
    }

    #[test]
    fn normalizes_joined_paths() {
        let base = Path::new("/a/b");
        assert_eq!(join_normalized(base, "."), PathBuf::from("/a/b"));
        assert_eq!(join_normalized(base, "../c/./d"), PathBuf::from("/a/c/d"));
        assert_eq!(join_normalized(base, "/abs"), PathBuf::from("/abs"));
    }
}
