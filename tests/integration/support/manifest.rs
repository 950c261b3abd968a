//! Manifest text for the tests: a builder for the common shapes, and the one place that writes
//! `experiment.toml`. Tests whose subject is the text itself (line and column of an error, a
//! hostile string) keep their TOML literal and write it with [`write_manifest`].

use std::path::{Path, PathBuf};

/// `format = 1` manifest text built from a name, a command and a few `section.key = value` lines,
/// in the order given (DESIGN 3: the matrix order decides the run order, so nothing is sorted).
///
/// Values are [`toml::Value`]s and are written as TOML (strings quoted and escaped), so a shell
/// line needs no TOML escaping; hwr-exp's own `{{`/`}}` escapes stay as the test writes them.
#[derive(Debug, Clone)]
pub struct ManifestBuilder {
    /// `(section, [(key, value)])` in first-use order; `experiment` and `command` come first.
    sections: Vec<(String, Vec<(String, toml::Value)>)>,
}

impl ManifestBuilder {
    /// `[experiment] name = NAME` and `[command] shell = SCRIPT`.
    pub fn shell(name: &str, script: &str) -> Self {
        Self::named(name).set("command", "shell", script)
    }

    /// `[experiment] name = NAME` and `[command] argv = ARGV`.
    pub fn argv(name: &str, argv: &[&str]) -> Self {
        Self::named(name).set("command", "argv", argv.to_vec())
    }

    fn named(name: &str) -> Self {
        Self {
            sections: vec![
                ("experiment".into(), vec![("name".into(), name.into())]),
                ("command".into(), Vec::new()),
            ],
        }
    }

    /// `[SECTION] KEY = VALUE`; a second `set` of the same key replaces the value in place.
    pub fn set(mut self, section: &str, key: &str, value: impl Into<toml::Value>) -> Self {
        let value = value.into();
        let entries = match self.sections.iter_mut().position(|(s, _)| s == section) {
            Some(i) => &mut self.sections[i].1,
            None => {
                self.sections.push((section.into(), Vec::new()));
                &mut self.sections.last_mut().expect("just pushed").1
            }
        };
        match entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => entries.push((key.into(), value)),
        }
        self
    }

    /// `[command] output-format = "text"`.
    pub fn text_output(self) -> Self {
        self.set("command", "output-format", "text")
    }

    /// `[command] output = NAME`.
    pub fn output(self, name: &str) -> Self {
        self.set("command", "output", name)
    }

    /// `[matrix] KEY = [VALUES...]`; axes vary in the order they are added, the last fastest.
    pub fn matrix<V: Into<toml::Value>>(self, key: &str, values: impl IntoIterator<Item = V>) -> Self {
        let values: Vec<toml::Value> = values.into_iter().map(Into::into).collect();
        self.set("matrix", key, values)
    }

    /// `[schedule] repetitions = N`.
    pub fn repetitions(self, n: i64) -> Self {
        self.set("schedule", "repetitions", n)
    }

    /// `[isolation] KEY = VALUE`.
    pub fn isolation(self, key: &str, value: impl Into<toml::Value>) -> Self {
        self.set("isolation", key, value)
    }

    /// The manifest text: `format = 1`, then each section with its keys in the order set.
    pub fn text(&self) -> String {
        let mut out = String::from("format = 1\n");
        for (section, entries) in &self.sections {
            out.push_str(&format!("[{section}]\n"));
            for (key, value) in entries {
                out.push_str(&format!("{} = {value}\n", toml_key(key)));
            }
        }
        out
    }

    /// Writes [`Self::text`] as `DIR/experiment.toml`; returns that path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        write_manifest(dir, &self.text())
    }
}

/// `key` as a TOML key: bare when it may be, quoted otherwise.
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if bare {
        key.to_owned()
    } else {
        toml::Value::from(key).to_string()
    }
}

/// Writes `text` as `DIR/experiment.toml`, replacing any earlier one; returns that path.
pub fn write_manifest(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("experiment.toml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// A table value for `env = { A = "x" }` from `(key, value)` pairs, in their order.
pub fn table<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> toml::Value {
    toml::Value::Table(
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), toml::Value::from(v)))
            .collect(),
    )
}

/// The builder writes TOML that parses back to the values set, sections in first-use order.
#[test]
fn builder_text_parses_to_the_values_set() {
    let text = ManifestBuilder::shell("b", r#"echo '{{"a": "{mode}"}}' "$X""#)
        .text_output()
        .matrix("mode", ["x y", "z"])
        .repetitions(2)
        .isolation("env", table([("ODD NAME", "1"), ("A", "")]))
        .set("schedule", "repetitions", 3)
        .text();
    let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        doc["command"]["shell"].as_str(),
        Some(r#"echo '{{"a": "{mode}"}}' "$X""#)
    );
    assert_eq!(doc["command"]["output-format"].as_str(), Some("text"));
    assert_eq!(doc["schedule"]["repetitions"].as_integer(), Some(3));
    assert_eq!(doc["isolation"]["env"]["ODD NAME"].as_str(), Some("1"));
    assert!(
        text.starts_with("format = 1\n[experiment]\nname = \"b\"\n[command]\n"),
        "{text}"
    );
    let matrix_at = text.find("[matrix]").unwrap();
    assert!(matrix_at < text.find("[schedule]").unwrap(), "{text}");
}
