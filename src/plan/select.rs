//! Trying a manifest without copying it: `--where KEY=VALUE` (only the cells whose matrix value of
//! `KEY` is `VALUE`) and `--repetitions N` (instead of `[schedule] repetitions`), applied to a
//! validated [`Manifest`] before it is expanded ([`apply`]). Pure, like the rest of `plan`.
//!
//! Filters on the same key are alternatives (`--where mode=reuse --where mode=view`: either
//! mode), filters on different keys must all hold. A value matches a matrix value when it is the
//! value's text as the manifest spells it (`16`, `get_tensor`, `1e-5`, `true`) or, for numbers,
//! the same number (`--where scale=0.50` matches `0.5`). A key the matrix does not have, a value
//! no cell has, and filters that together leave no cell are errors naming what exists.
//!
//! The manifest's bytes are not changed (the bundle keeps them as they are): the selection drops
//! cells through `exclude` entries of the parsed matrix and removes the `include` cells that do
//! not match, so the cells kept expand exactly as they would in the whole plan (same values,
//! same order). The bundle records the selection (bundle.json `overrides`), and `resume`,
//! `rerun` and the Slurm tasks apply it again to get the same plan.

use std::collections::{BTreeMap, HashSet};

use crate::manifest::{Manifest, Value};

/// One `--where KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The matrix key.
    pub key: String,
    /// The value, as typed.
    pub value: String,
}

impl Filter {
    /// Parses `KEY=VALUE` (split at the first `=`; the value may contain `=` and may be empty).
    ///
    /// # Errors
    /// Text without `=`, or with nothing before it.
    pub fn parse(text: &str) -> Result<Filter, String> {
        match text.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok(Filter {
                key: key.trim().to_owned(),
                value: value.to_owned(),
            }),
            _ => Err(format!(
                "expected KEY=VALUE (a matrix key, `=`, one of its values), got `{text}`"
            )),
        }
    }
}

impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

impl std::str::FromStr for Filter {
    type Err = String;
    fn from_str(s: &str) -> Result<Filter, String> {
        Filter::parse(s)
    }
}

/// What `run --where` / `--repetitions` (and `plan`, `bisect`) change in a manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `--where KEY=VALUE`, in the order given.
    pub filters: Vec<Filter>,
    /// `--repetitions N`: repetitions of every cell instead of `[schedule] repetitions` (a fixed
    /// number, also in place of an adaptive rule).
    pub repetitions: Option<u32>,
}

impl Selection {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty() && self.repetitions.is_none()
    }

    /// The command-line words that give this selection: `--where mode=reuse --repetitions 3`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for f in &self.filters {
            args.push("--where".to_owned());
            args.push(f.to_string());
        }
        if let Some(n) = self.repetitions {
            args.push("--repetitions".to_owned());
            args.push(n.to_string());
        }
        args
    }
}

/// Why a selection cannot be applied; every problem, one per line. A usage error (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe_problems(.problems))]
pub struct SelectError {
    /// One sentence per problem, each naming the flag and what exists instead.
    pub problems: Vec<String>,
}

/// One problem as it is; several as a count and one indented line each.
fn describe_problems(problems: &[String]) -> String {
    match problems {
        [one] => one.clone(),
        many => format!(
            "{} problems with --where / --repetitions:\n  {}",
            many.len(),
            many.join("\n  ")
        ),
    }
}

/// Whether the matrix value `value` is what `text` names: its text as the manifest spells it, or
/// the value the word reads as names the same cell ([`Value::same_cell`], [`Value::from_word`]:
/// `16` and `16.0`, `0.5` and `0.50`, but not 9007199254740992 for 9007199254740993).
pub fn value_matches(value: &Value, text: &str) -> bool {
    value.to_string() == text || value.same_cell(&Value::from_word(text))
}

/// Whether `cell` (matrix key, value pairs) passes every filter of `filters`: for each key that
/// is filtered, its value matches one of the key's filters.
pub fn cell_matches(cell: &[(String, Value)], filters: &[Filter]) -> bool {
    filters_by_key(filters).iter().all(|(key, texts)| {
        cell.iter()
            .find(|(k, _)| k == key)
            .is_some_and(|(_, v)| texts.iter().any(|t| value_matches(v, t)))
    })
}

/// The filters grouped by key, keys in the order first given.
fn filters_by_key(filters: &[Filter]) -> Vec<(&str, Vec<&str>)> {
    let mut by_key: Vec<(&str, Vec<&str>)> = Vec::new();
    for f in filters {
        match by_key.iter_mut().find(|(k, _)| *k == f.key) {
            Some((_, texts)) => texts.push(&f.value),
            None => by_key.push((&f.key, vec![&f.value])),
        }
    }
    by_key
}

/// Applies `selection` to the validated `manifest`: its repetitions replaced, its matrix reduced
/// to the cells every filter matches (see the module docs). Unchanged on error.
///
/// # Errors
/// [`SelectError`] naming every problem: a filter key that is not a matrix key (the keys are
/// listed), a value no cell of the plan has (the key's values in the plan are listed), filters
/// that together leave no cell, or `--repetitions 0`.
pub fn apply(manifest: &mut Manifest, selection: &Selection) -> Result<(), SelectError> {
    let mut problems = Vec::new();
    if selection.repetitions == Some(0) {
        problems.push("--repetitions must be a positive integer (1 or more), got 0".to_owned());
    }
    let mut reduced = manifest.clone();
    if !selection.filters.is_empty() {
        restrict(&mut reduced, &selection.filters, &mut problems);
    }
    if !problems.is_empty() {
        return Err(SelectError { problems });
    }
    if let Some(n) = selection.repetitions {
        // A fixed number, also in place of an adaptive rule (`{ min, max, until }`).
        reduced.schedule.repetitions = n;
        reduced.schedule.adaptive = None;
        reduced
            .overridden
            .insert("schedule.repetitions".into(), format!("--repetitions {n}"));
    }
    *manifest = reduced;
    Ok(())
}

/// A warning when `selection`'s filters leave out the control cell of `manifest` (its
/// `[report] control`, or the default `mode = "reuse"` where the matrix has that value): the
/// report could then give no verdict. `None` when the control is kept or there is none.
/// `manifest` is the one before [`apply`].
pub fn control_left_out(manifest: &Manifest, selection: &Selection) -> Option<String> {
    let control: Vec<(String, Value)> = if manifest.report.control.is_empty() {
        vec![(
            "mode".into(),
            Value::Str(crate::manifest::DEFAULT_CONTROL_MODE.into()),
        )]
    } else {
        manifest.report.control.clone()
    };
    let by_key = filters_by_key(&selection.filters);
    let dropped: Vec<String> = control
        .iter()
        .filter(|(key, value)| {
            let exists = manifest.matrix.value(key, value).is_some();
            let texts = by_key.iter().find(|(k, _)| k == key).map(|(_, t)| t);
            exists && texts.is_some_and(|texts| !texts.iter().any(|t| value_matches(value, t)))
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    (!dropped.is_empty()).then(|| {
        format!(
            "--where leaves out the control cell ({}): the report can give no verdict against it; \
             add {} to keep it",
            dropped.join(", "),
            dropped
                .iter()
                .map(|d| format!("--where {d}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    })
}

/// Most values of one key an error message lists before `...`.
const LISTED_VALUES: usize = 20;

/// The values of `key` the cells of `manifest` have, in order of first appearance, as text, at
/// most `LISTED_VALUES + 1`, and whether each filter text of `wanted` is among all of them.
fn values_in_cells(manifest: &Manifest, key: usize, wanted: &[&str]) -> (Vec<String>, Vec<bool>) {
    let mut errors = Vec::new();
    let cells = super::cells(manifest, &mut errors);
    let mut shown = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut found = vec![false; wanted.len()];
    for c in 0..cells.len() {
        let (value, _) = cells.get(c).get(key);
        for (i, w) in wanted.iter().enumerate() {
            found[i] = found[i] || value_matches(value, w);
        }
        let text = value.to_string();
        if shown.len() <= LISTED_VALUES && seen.insert(text.clone()) {
            shown.push(text);
        }
        if found.iter().all(|f| *f) && shown.len() > LISTED_VALUES {
            break;
        }
    }
    (shown, found)
}

/// `a, b, c` or `a, b, ... (and more)`.
fn list(values: &[String]) -> String {
    if values.len() > LISTED_VALUES {
        format!("{}, ...", values[..LISTED_VALUES].join(", "))
    } else {
        values.join(", ")
    }
}

/// Reduces the matrix of `m` to the cells `filters` match, or says why it cannot.
fn restrict(m: &mut Manifest, filters: &[Filter], problems: &mut Vec<String>) {
    let keys: Vec<&str> = m.matrix.axes.iter().map(|(k, _)| k.as_str()).collect();
    let by_key = filters_by_key(filters);
    for (key, texts) in &by_key {
        let Some(k) = keys.iter().position(|k| k == key) else {
            problems.push(if keys.is_empty() {
                format!("--where {key}=...: the manifest has no [matrix], so there is no key to select by")
            } else {
                format!(
                    "--where {key}=...: `{key}` is not a matrix key; the keys are: {}",
                    keys.join(", ")
                )
            });
            continue;
        };
        let (values, found) = values_in_cells(m, k, texts);
        for (text, found) in texts.iter().zip(found) {
            if !found {
                problems.push(format!(
                    "--where {key}={text}: no cell has {key} = {}; its values are: {}",
                    if text.is_empty() { "\"\"" } else { text },
                    list(&values)
                ));
            }
        }
    }
    if !problems.is_empty() {
        return;
    }
    // Drop every product cell whose value of a filtered key matches none of its filters, and
    // every include cell that does not match.
    let mut exclude: Vec<BTreeMap<String, Value>> = Vec::new();
    for (key, values) in &m.matrix.axes {
        let Some((_, texts)) = by_key.iter().find(|(k, _)| k == key) else {
            continue;
        };
        for v in values {
            if !texts.iter().any(|t| value_matches(v, t)) {
                exclude.push(BTreeMap::from([(key.clone(), v.clone())]));
            }
        }
    }
    m.matrix.exclude.extend(exclude);
    let keys: Vec<String> = m.matrix.axes.iter().map(|(k, _)| k.clone()).collect();
    m.matrix.include.retain(|entry| {
        let cell: Vec<(String, Value)> = keys
            .iter()
            .filter_map(|k| entry.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        cell_matches(&cell, filters)
    });
    let mut errors = Vec::new();
    if super::cells(m, &mut errors).len() == 0 {
        let given: Vec<String> = filters.iter().map(|f| format!("--where {f}")).collect();
        problems.push(format!(
            "{}: no cell of the plan matches these together (each value exists, but not in one cell; `hwr-exp plan` lists the cells)",
            given.join(" ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Float;

    #[test]
    fn filters_parse_at_the_first_equals_sign() {
        assert_eq!(
            Filter::parse("mode=reuse").unwrap(),
            Filter {
                key: "mode".into(),
                value: "reuse".into()
            }
        );
        assert_eq!(Filter::parse("env=A=B").unwrap().value, "A=B");
        assert_eq!(Filter::parse("label=").unwrap().value, "");
        assert!(Filter::parse("mode").unwrap_err().contains("KEY=VALUE"));
        assert!(Filter::parse("=x").is_err());
    }

    #[test]
    fn values_match_by_text_or_number() {
        assert!(value_matches(&Value::Int(16), "16"));
        assert!(value_matches(&Value::Int(16), "16.0"));
        assert!(!value_matches(&Value::Int(16), "16.5"));
        let half = Value::Float(Float {
            value: 0.5,
            text: "0.5".into(),
        });
        assert!(value_matches(&half, "0.50"));
        assert!(value_matches(&half, "5e-1"));
        assert!(!value_matches(&half, "0.6"));
        assert!(value_matches(&Value::Bool(true), "true"));
        assert!(!value_matches(&Value::Bool(true), "1"));
        assert!(value_matches(&Value::Str("16".into()), "16"));
        assert!(!value_matches(&Value::Str("16".into()), "16.0"));
        // Two integers that are one f64 are two values.
        let big = Value::Int(9_007_199_254_740_993);
        assert!(value_matches(&big, "9007199254740993"));
        assert!(!value_matches(&big, "9007199254740992"));
        assert!(!value_matches(&big, "9007199254740993.5"));
        assert!(value_matches(&big, "9007199254740993.0"));
        assert!(!value_matches(
            &Value::Int(9_007_199_254_740_992),
            "9007199254740992.5"
        ));
    }

    #[test]
    fn same_key_filters_are_alternatives() {
        let cell = vec![
            ("mode".to_string(), Value::Str("view".into())),
            ("n".into(), Value::Int(1)),
        ];
        let f = |s: &str| Filter::parse(s).unwrap();
        assert!(cell_matches(&cell, &[f("mode=reuse"), f("mode=view")]));
        assert!(cell_matches(&cell, &[f("mode=view"), f("n=1")]));
        assert!(!cell_matches(&cell, &[f("mode=view"), f("n=2")]));
    }
}
