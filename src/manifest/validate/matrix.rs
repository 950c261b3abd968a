//! `[matrix]` (DESIGN 3): free-form axes (each key an array of values, each key a placeholder)
//! and the fixed keys `exclude` / `include` (arrays of cells named by matrix keys).

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use super::{Validator, did_you_mean, entries, is_placeholder_name};
use crate::manifest::model::{Matrix, Value};
use crate::manifest::template::BUILTINS;

/// The fixed keys of `[matrix]`; every other key is an axis.
pub(super) const KEYS: &[&str] = &["exclude", "include"];

impl Validator<'_> {
    pub(super) fn matrix(&mut self, root: &DeTable<'_>) -> Matrix {
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
            let mut values: Vec<Value> = Vec::with_capacity(items.len());
            for item in items {
                let Some(value) = self.scalar(item) else {
                    continue;
                };
                if let Some(earlier) = values.iter().find(|e| e.shares_a_name_with(&value)) {
                    let same = if earlier.to_string() != value.to_string() {
                        format!("`{earlier}` and `{value}`, one number")
                    } else if std::mem::discriminant(earlier) != std::mem::discriminant(&value) {
                        format!("`{value}` twice, of two types: both label one cell `{name}={value}`")
                    } else {
                        format!("`{value}` twice")
                    };
                    self.err(
                        item.span(),
                        format!("matrix key `{name}` has the value {same}"),
                        Some(
                            "each value is one cell: remove the repeat; for more runs of a cell \
                             raise [schedule] repetitions"
                                .into(),
                        ),
                    );
                    continue;
                }
                values.push(value);
            }
            axes.push((name.to_string(), values));
        }
        let keys: Vec<String> = entries(t)
            .iter()
            .map(|(k, _)| k.get_ref().to_string())
            .filter(|k| k != "exclude" && k != "include")
            .collect();
        let exclude = self.cell_filters(t, "exclude", &keys, &axes);
        let include = self.cell_filters(t, "include", &keys, &axes);
        Matrix {
            axes,
            exclude,
            include,
        }
    }

    /// `matrix.exclude` / `matrix.include`: arrays of tables whose keys are matrix keys. An
    /// `exclude` value must name one of its axis's values ([`Value::same_cell`]): one that names
    /// none would exclude nothing, silently (a typo).
    fn cell_filters(
        &mut self,
        t: &DeTable<'_>,
        which: &str,
        keys: &[String],
        axes: &[(String, Vec<Value>)],
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
                    if which == "exclude"
                        && let Some((_, values)) = axes.iter().find(|(a, _)| a == name)
                        && !values.iter().any(|x| x.same_cell(&value))
                    {
                        const LISTED: usize = 20;
                        let mut listed: Vec<String> =
                            values.iter().take(LISTED).map(|x| x.to_string()).collect();
                        if values.len() > LISTED {
                            listed.push(format!("... ({} values)", values.len()));
                        }
                        self.err(
                            val.span(),
                            format!("`exclude` names {name} = {value}, which is not one of its values: it would exclude nothing"),
                            Some(format!("{name} takes {}", listed.join(", "))),
                        );
                        continue;
                    }
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
}

#[cfg(test)]
mod same_cell_tests {
    use super::*;
    use crate::manifest::model::Float;

    fn shares(a: &Value, b: &Value) -> bool {
        a.shares_a_name_with(b)
    }

    #[test]
    fn numbers_label_one_cell_only_when_equal_exactly() {
        let int = Value::Int;
        let float = |x: f64| Value::Float(Float::from_value(x));
        assert!(shares(&int(1), &float(1.0)));
        assert!(shares(&int(1), &Value::Str("1".into())));
        assert!(shares(&float(1.5), &float(1.50)));
        assert!(shares(
            &int(9_007_199_254_740_992),
            &float(9_007_199_254_740_992.0)
        ));
        // One f64, two integers: two cells.
        assert!(!shares(&int(9_007_199_254_740_993), &int(9_007_199_254_740_992)));
        assert!(!shares(&int(i64::MAX), &int(i64::MAX - 1)));
        assert!(!shares(
            &int(9_007_199_254_740_993),
            &float(9_007_199_254_740_992.0)
        ));
        assert!(!shares(&int(i64::MAX), &float(9_223_372_036_854_775_808.0)));
        assert!(!shares(&int(2), &float(2.5)));
        // A float compares with an integer as written, not as its f64.
        let written = |text: &str| {
            Value::Float(Float {
                value: text.replace('_', "").parse().unwrap(),
                text: text.into(),
            })
        };
        assert!(int(9_007_199_254_740_993).same_cell(&written("9007199254740993.0")));
        assert!(!int(9_007_199_254_740_992).same_cell(&written("9007199254740993.0")));
        assert!(int(1000).same_cell(&written("1_000.0")));
        assert!(int(1000).same_cell(&written("1e3")));
        assert!(int(0).same_cell(&written("-0.0")));
        assert!(!int(1).same_cell(&written("1.5e0")));
        // One name (`1.0`) would pick out both: refused as one axis's values.
        assert!(!int(1).same_cell(&Value::Str("1.0".into())));
        assert!(shares(&int(1), &Value::Str("1.0".into())));
        assert!(shares(&Value::Str("1e3".into()), &float(1000.0)));
        assert!(!shares(&Value::Str("01".into()), &Value::Str("1".into())));
    }
}
