//! The validator's state and its readers of values: one [`Validator`] walks the document, collects
//! every problem as a located [`Diagnostic`] and records each value's span under its dotted key.
//! The section files (`super::*`) read their keys through these readers (`section`, `field`,
//! `string`, `integer`, `positive`, `duration`, `template`, ...), so every section reports the
//! same kinds of error in the same words.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use crate::manifest::diagnostic::Diagnostic;
use crate::manifest::model::{Float, Value};
use crate::manifest::template::{self, BUILTINS, Segment};

/// A TOML value with its span in the source.
pub(super) type Val<'i> = Spanned<DeValue<'i>>;
/// A TOML key with its span in the source.
pub(super) type Key<'i> = Spanned<DeString<'i>>;

/// Longest duration any key accepts (`timeout`, `grace`, `sample-interval`, `time-margin`):
/// 1 year as humantime counts it (365.25 days, `"1y"`), so that adding it to a clock reading or
/// to another duration cannot overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);

/// The closest candidate to `word` (Damerau-Levenshtein, case-insensitive), if close enough to be a
/// plausible typo: at most one edit per three characters (at least one), and fewer edits than the
/// word has characters.
pub(super) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
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
pub(super) fn found(v: &DeValue<'_>) -> &'static str {
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
pub(super) fn entries<'a, 'i>(table: &'a DeTable<'i>) -> Vec<(&'a Key<'i>, &'a Val<'i>)> {
    let mut v: Vec<_> = table.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// Whether `name` may be used as `{name}` (same rule as [`template::parse`]).
pub(super) fn is_placeholder_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Lexically normalises `base.join(rel)`: drops `.`, applies `..` by popping (no file system access).
pub(super) fn join_normalized(base: &Path, rel: &str) -> PathBuf {
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
pub(super) struct Validator<'s> {
    pub(super) src: &'s str,
    pub(super) diags: Vec<Diagnostic>,
    pub(super) spans: BTreeMap<String, Range<usize>>,
    /// Keys some unknown key was taken for (did-you-mean), as `section.key` or `key`: a "missing"
    /// error for them would only repeat the typo's diagnostic.
    pub(super) suggested: BTreeSet<String>,
}

impl<'s> Validator<'s> {
    pub(super) fn err(&mut self, span: Range<usize>, message: impl Into<String>, help: Option<String>) {
        self.diags.push(Diagnostic {
            span,
            message: message.into(),
            help,
            ..Diagnostic::default()
        });
    }

    /// A warning: a key that is read but has no effect where it is (printed, not failing).
    /// No warning where the value is already an error.
    pub(super) fn warn(&mut self, span: Range<usize>, message: impl Into<String>, help: Option<String>) {
        if self
            .diags
            .iter()
            .any(|d| d.level == crate::manifest::diagnostic::Level::Error && d.span == span)
        {
            return;
        }
        self.diags.push(Diagnostic {
            span,
            message: message.into(),
            help,
            level: crate::manifest::diagnostic::Level::Warning,
            option: None,
        });
    }

    pub(super) fn type_err(&mut self, v: &Val<'_>, expected: &str) {
        self.err(
            v.span(),
            format!("expected {expected}, found {}", found(v.get_ref())),
            None,
        );
    }

    /// Span of a section (its `[header]`), or the start of the file when absent.
    pub(super) fn section_span(&self, section: &str) -> Range<usize> {
        self.spans.get(section).cloned().unwrap_or(0..0)
    }

    /// Reports every key of `table` not in `valid` (with did-you-mean and the valid keys).
    /// `prefix` is the section name (`""` at the top level), used to remember suggestions.
    pub(super) fn check_keys(&mut self, table: &DeTable<'_>, valid: &[&str], prefix: &str, place: &str) {
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
    pub(super) fn section<'a, 'i>(
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
    pub(super) fn field<'a, 'i>(
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
    pub(super) fn string<'a>(&mut self, v: &'a Val<'_>) -> Option<&'a str> {
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

    pub(super) fn integer(&mut self, v: &Val<'_>) -> Option<i64> {
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
    pub(super) fn positive<T: TryFrom<i64>>(&mut self, v: &Val<'_>, key: &str) -> Option<T> {
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
    pub(super) fn scalar(&mut self, v: &Val<'_>) -> Option<Value> {
        match v.get_ref() {
            DeValue::String(_) => self.string(v).map(|s| Value::Str(s.to_string())),
            DeValue::Boolean(b) => Some(Value::Bool(*b)),
            DeValue::Integer(_) => self.integer(v).map(Value::Int),
            DeValue::Float(x) => match x.as_str().parse::<f64>() {
                // plan.json and run.json record cells in JSON, which has no inf or nan (they
                // became `null`, and the bundle could not be read back); a string keeps the text.
                Ok(f) if !f.is_finite() => {
                    let text = self.src.get(v.span()).unwrap_or(x.as_str()).to_string();
                    let what = if f.is_nan() {
                        "not a number (nan)"
                    } else if text.trim_start_matches(['+', '-']).starts_with("inf") {
                        "infinite"
                    } else {
                        "out of range of a 64-bit float (infinite)"
                    };
                    self.err(
                        v.span(),
                        format!("matrix value `{text}` is {what}: plan.json and run.json are JSON, which cannot hold it"),
                        Some(format!(
                            "write it as a string, \"{text}\": commands, environment, file names and run ids get the same text"
                        )),
                    );
                    None
                }
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

    pub(super) fn duration(&mut self, v: &Val<'_>, key: &str) -> Option<Duration> {
        if let DeValue::Integer(_) | DeValue::Float(_) = v.get_ref() {
            // `timeout = 60`: a number without a unit; say how to write it.
            let number = self.src.get(v.span()).unwrap_or("60").trim().to_owned();
            self.err(
                v.span(),
                format!("expected a duration string for `{key}`, found a number ({number})"),
                Some(format!(
                    "a duration is a string with its unit: `{key} = \"{number}s\"` (or \"{number}ms\", \"{number}m\")"
                )),
            );
            return None;
        }
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

    pub(super) fn positive_duration(&mut self, v: &Val<'_>, key: &str) -> Option<Duration> {
        let d = self.duration(v, key)?;
        if d.is_zero() {
            self.err(v.span(), format!("`{key}` must be above zero"), None);
            return None;
        }
        Some(d)
    }

    /// Byte offset in the source where the text of string value `v` starts, when offsets inside
    /// `text` map one-to-one onto the source (literal strings, basic strings without escapes).
    pub(super) fn string_content_start(&self, v: &Val<'_>, text: &str) -> Option<usize> {
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
    pub(super) fn template<'t>(
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
    fn normalizes_joined_paths() {
        let base = Path::new("/a/b");
        assert_eq!(join_normalized(base, "."), PathBuf::from("/a/b"));
        assert_eq!(join_normalized(base, "../c/./d"), PathBuf::from("/a/c/d"));
        assert_eq!(join_normalized(base, "/abs"), PathBuf::from("/abs"));
    }
}
