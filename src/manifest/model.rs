//! Validated manifest types (DESIGN 3). These hold configuration only; nothing here runs anything.
//!
//! A [`Manifest`] is produced by [`crate::manifest::load`] / [`crate::manifest::parse`] after every
//! check has passed; every field has its default filled in.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The newest manifest `format` this build understands.
pub const MANIFEST_FORMAT: u32 = 1;

/// A whole, validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Path the manifest was read from, as given (used in diagnostics and recorded in the bundle).
    pub path: PathBuf,
    /// Absolute folder that relative paths (`workdir`, `provenance.repo`) are resolved against.
    pub base_dir: PathBuf,
    /// The manifest text exactly as read (stored as `manifest.toml` in the bundle).
    pub source: String,
    /// `format`: manifest format version (1).
    pub format: u32,
    /// `[experiment]`.
    pub experiment: Experiment,
    /// `[command]`.
    pub command: CommandSpec,
    /// `[matrix]`.
    pub matrix: Matrix,
    /// `[schedule]`.
    pub schedule: Schedule,
    /// `[isolation]`.
    pub isolation: Isolation,
    /// `[measure]`.
    pub measure: Measure,
    /// `[provenance]`.
    pub provenance: ProvenanceConfig,
    /// `[report]`.
    pub report: ReportConfig,
    /// `[executor]`.
    pub executor: ExecutorConfig,
    /// `[environments.<name>]`, in manifest order; selected by the matrix key `environment`.
    pub environments: Vec<(String, EnvironmentSpec)>,
    /// Byte ranges in `source` of keys and values, by dotted key path (`"command.output"`,
    /// `"matrix.mode"`, `"isolation.cpus"`), so later stages (plan expansion) can point at the source.
    pub spans: BTreeMap<String, Range<usize>>,
    /// The warnings validation found (keys read that have no effect where they are), in source
    /// order; [`crate::manifest::Manifest::warnings`] renders them.
    pub warnings: Vec<crate::manifest::Diagnostic>,
    /// Values a command-line option replaced, by dotted key path: `"schedule.repetitions"` ->
    /// `"--repetitions 3"`, `"executor.kind"` -> `"--executor slurm"`. A problem later found at
    /// such a key names the option and its value instead of the manifest line
    /// ([`crate::manifest::Manifest::diagnostic`]).
    pub overridden: BTreeMap<String, String>,
}

/// `[experiment]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Experiment {
    /// `name`: `[a-z0-9_-]+`, names the results folder `results/<name>/`.
    pub name: String,
    /// `description`: free text.
    pub description: Option<String>,
}

/// What to run: `argv` or `shell` (exactly one), each a template with placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Program {
    /// `argv = [...]`: exec'd directly; `argv[0]` is looked up in `PATH` when it has no `/`.
    Argv(Vec<String>),
    /// `shell = "..."`: run as `/bin/sh -c <text>`.
    Shell(String),
}

/// How a run's stdout is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    /// One JSON document (leading/trailing whitespace allowed); anything else is `invalid`.
    Json,
    /// Free text; never invalid.
    Text,
}

/// `[command]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// `argv` or `shell`; templates, placeholders not yet substituted.
    pub program: Program,
    /// `workdir`: template, relative to the manifest's folder; default `"."`.
    pub workdir: String,
    /// `output`: template for the file name the run's stdout is saved under.
    /// Default `"{run-id}.json"` when `output-format` is json, else `"{run-id}.txt"`.
    pub output: String,
    /// `output-format`: default json when `output` ends in `.json`, else text.
    pub output_format: OutputFormat,
}

/// One matrix value: TOML string, integer, float or boolean.
///
/// Read from TOML or JSON by its kind: a boolean, an integer that fits `i64`, any other number
/// (a float, or an integer beyond `i64`: its `f64`), a string; anything else is an error. (A
/// visitor of its own rather than `#[serde(untagged)]`, which buffers each value and builds an
/// error for every kind it tries first: most of the time spent reading a plan's cells.)
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// A TOML boolean.
    Bool(bool),
    /// A TOML integer.
    Int(i64),
    /// A TOML float, with its text as written in the manifest.
    Float(Float),
    /// A TOML string.
    Str(String),
}

impl std::fmt::Display for Value {
    /// The text substituted for a placeholder: strings as is, floats as written in the manifest,
    /// integers in decimal, booleans as TOML writes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => f.write_str(&x.text),
            Value::Str(s) => f.write_str(s),
        }
    }
}

impl Value {
    /// Whether `self` and `other` name one matrix cell, the one rule every place that matches a
    /// matrix value follows (duplicate axis values, `[matrix] exclude`, `[report] control`,
    /// `--where`, the report's control cell): the same text where they are substituted and
    /// labelled (`get_tensor` twice; `1` and `"1"`), or the same number exactly (`16` and `16.0`,
    /// `0.5` and `0.50`; two integers as integers, so 9007199254740993 and 9007199254740992 are
    /// two cells though one `f64`; an integer and a float only when the float is that integer).
    ///
    /// An integer and a float compare by the float as written (`9007199254740993.0` is
    /// 9007199254740993, though its `f64` is 9007199254740992); two floats by their `f64`.
    pub fn same_cell(&self, other: &Value) -> bool {
        let same_number = match (self, other) {
            (Value::Int(x), Value::Int(y)) => x == y,
            (Value::Int(i), Value::Float(f)) | (Value::Float(f), Value::Int(i)) => {
                exact_integer(&f.text).is_some_and(|n| n == i128::from(*i))
            }
            (Value::Float(x), Value::Float(y)) => x.value == y.value,
            _ => false,
        };
        same_number || self.to_string() == other.to_string()
    }

    /// Whether one name could pick out both `self` and `other` ([`Value::same_cell`] with
    /// either): they name one cell, or one is a number and the other a string that a word for that
    /// number also names (`1` and `"1.0"`: `--where n=1.0` names both). Two such values on one
    /// axis are refused, so that every name picks out at most one value.
    pub fn shares_a_name_with(&self, other: &Value) -> bool {
        let numeric_text = |s: &str, n: &Value| {
            let word = Value::from_word(s);
            matches!(word, Value::Int(_) | Value::Float(_)) && word.same_cell(n)
        };
        self.same_cell(other)
            || match (self, other) {
                (Value::Str(s), n @ (Value::Int(_) | Value::Float(_)))
                | (n @ (Value::Int(_) | Value::Float(_)), Value::Str(s)) => numeric_text(s, n),
                _ => false,
            }
    }

    /// The value a command-line word names (`--where KEY=VALUE`): an integer when it is one
    /// (`16`), else a float when Rust reads it as one and it is not NaN (`16.0`, `5e-1`; kept as
    /// written), else `true`/`false`, else the text as a string.
    pub fn from_word(word: &str) -> Value {
        if let Ok(i) = word.trim().parse::<i64>() {
            return Value::Int(i);
        }
        if let Ok(x) = word.trim().parse::<f64>()
            && !x.is_nan()
        {
            return Value::Float(Float {
                value: x,
                text: word.to_string(),
            });
        }
        match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::Str(word.to_string()),
        }
    }

    /// The matrix value of a TOML value (`[report] control` read back from a bundle's
    /// manifest.toml); `None` for arrays, tables and dates.
    pub fn from_toml(v: &toml::Value) -> Option<Value> {
        Some(match v {
            toml::Value::Boolean(b) => Value::Bool(*b),
            toml::Value::Integer(i) => Value::Int(*i),
            toml::Value::Float(x) => Value::Float(Float::from_value(*x)),
            toml::Value::String(s) => Value::Str(s.clone()),
            _ => return None,
        })
    }
}

/// `text` as (negative, digits without `.` and `_`, power of ten they are scaled by), when it is
/// a decimal number as TOML, JSON or a command line spells one: an optional sign, digits (TOML's
/// `_` between them allowed), an optional fraction and exponent.
fn decimal_parts(text: &str) -> Option<(bool, String, i64)> {
    let t = text.trim();
    let (negative, t) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].replace('_', "").parse::<i64>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let ok = |part: &str| part.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    if !ok(int) || !ok(frac) || (int.is_empty() && frac.is_empty()) {
        return None;
    }
    let digits: String = int.chars().chain(frac.chars()).filter(|c| *c != '_').collect();
    if digits.is_empty() {
        return None;
    }
    Some((negative, digits, exponent - frac.replace('_', "").len() as i64))
}

/// The integer `text` spells exactly (`16.0`, `1e3`, `9007199254740993.0`, `-0.0`), when it is
/// a decimal number ([`decimal_parts`]) with no fractional part that fits 128 bits (a float's
/// text always is: the manifest's spelling, or [`Float::from_value`]'s shortest one).
fn exact_integer(text: &str) -> Option<i128> {
    let (negative, digits, mut scale) = decimal_parts(text)?;
    let mut digits = digits.trim_start_matches('0').to_string();
    while scale < 0 {
        if !digits.ends_with('0') {
            return if digits.is_empty() { Some(0) } else { None };
        }
        digits.pop();
        scale += 1;
    }
    if digits.is_empty() {
        return Some(0);
    }
    if digits.len() as i64 + scale > 38 {
        return None;
    }
    let mut n: i128 = digits.parse().ok()?;
    for _ in 0..scale {
        n = n.checked_mul(10)?;
    }
    Some(if negative { -n } else { n })
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct Kind;
        impl serde::de::Visitor<'_> for Kind {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a matrix value (a string, integer, float or boolean)")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
                Ok(Value::Bool(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
                Ok(Value::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
                Ok(i64::try_from(v).map_or_else(|_| Value::Float(Float::from_value(v as f64)), Value::Int))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
                Ok(Value::Float(Float::from_value(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
                Ok(Value::Str(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
                Ok(Value::Str(v))
            }
        }
        d.deserialize_any(Kind)
    }
}

/// A float matrix value: its number and its text exactly as the manifest spells it (`1.0`,
/// `1e-5`, `3e20`), which is what reaches commands, environment, file names and run ids.
///
/// Equality compares the numbers only (`1.0` in `exclude` matches `1.00` on an axis). In JSON
/// (plan.json) the value is written with the manifest's text when that text is a JSON number,
/// else as the number; read back from JSON, the text is the number's shortest JSON spelling.
#[derive(Debug, Clone)]
pub struct Float {
    /// The number.
    pub value: f64,
    /// The manifest's spelling (TOML float syntax: may hold `_`, `+`, `inf`, `nan`).
    pub text: String,
}

impl Float {
    /// A float whose text is the number's shortest round-trip spelling (`1.0`, `1e-5`).
    pub fn from_value(value: f64) -> Float {
        let text = serde_json::Number::from_f64(value).map_or_else(|| value.to_string(), |n| n.to_string());
        Float { value, text }
    }
}

impl PartialEq for Float {
    fn eq(&self, other: &Float) -> bool {
        self.value == other.value
    }
}

/// Whether `text` is a number in JSON's grammar (RFC 8259 section 6).
fn is_json_number(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > start
    };
    if b.first() == Some(&b'-') {
        i += 1;
    }
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

impl Serialize for Float {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if is_json_number(&self.text)
            && let Ok(raw) = serde_json::value::RawValue::from_string(self.text.clone())
        {
            return raw.serialize(s);
        }
        self.value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Float, D::Error> {
        f64::deserialize(d).map(Float::from_value)
    }
}

/// One cell: a value for every matrix key, in the manifest's key order.
pub type Cell = Vec<(String, Value)>;

/// `[matrix]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    /// Keys in manifest order with their values in manifest order (every list non-empty).
    pub axes: Vec<(String, Vec<Value>)>,
    /// `exclude`: a cell is dropped when it matches every key of any entry.
    pub exclude: Vec<BTreeMap<String, Value>>,
    /// `include`: extra cells appended after the product (keys must cover every axis).
    pub include: Vec<BTreeMap<String, Value>>,
}

impl Matrix {
    /// The matrix's own value of `key` that `value` names ([`Value::same_cell`]: `32.0` names
    /// `32`), from the key's list or else an `include` cell; `None` when it has none.
    pub fn value(&self, key: &str, value: &Value) -> Option<&Value> {
        self.axes
            .iter()
            .filter(|(k, _)| k == key)
            .flat_map(|(_, values)| values)
            .find(|v| v.same_cell(value))
            .or_else(|| {
                self.include
                    .iter()
                    .find_map(|c| c.get(key).filter(|v| v.same_cell(value)))
            })
    }
}

/// `[schedule] order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// Repetition outermost: every cell once, then every cell again (default).
    Interleaved,
    /// Cell outermost: all repetitions of one cell, then the next cell.
    Grouped,
    /// Interleaved plan shuffled with `seed`.
    Shuffled,
}

impl Order {
    /// The name `[schedule] order` and plan.json use (`interleaved`, `grouped`, `shuffled`).
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Interleaved => "interleaved",
            Order::Grouped => "grouped",
            Order::Shuffled => "shuffled",
        }
    }
}

/// `[schedule]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// `repetitions`: >= 1, default 1. With an adaptive rule ([`Schedule::adaptive`]) this is the
    /// rule's `min`: the runs every cell gets before the first decision.
    pub repetitions: u32,
    /// `repetitions = { min, max, until, time-budget }`: runs go in interleaved rounds until the
    /// rule stops each cell; `None` for a plain integer.
    pub adaptive: Option<Adaptive>,
    /// `order`: default interleaved.
    pub order: Order,
    /// `seed`: for shuffled; `None` means one is chosen at plan time and recorded.
    pub seed: Option<u64>,
    /// `jobs`: runs at once, >= 1, default 1.
    pub jobs: u32,
}

/// `[schedule] repetitions = { min = 4, max = 30, until = "decided", time-budget = "2h" }`
/// (DESIGN 3, 9): every cell runs `min` times in interleaved rounds (every cell once a round);
/// then a cell whose verdict against its control is not decided gets another round, until it is
/// decided, has `max` runs, or the time budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Adaptive {
    /// Rounds every cell gets (>= 2).
    pub min: u32,
    /// Most rounds a cell gets (>= `min`).
    pub max: u32,
    /// What stops a cell early.
    pub until: Until,
    /// Wall time after which no further round starts (the rounds' time, summed over the run and
    /// its resumes); `None` = no budget.
    #[serde(with = "humantime_serde_opt", rename = "time-budget-seconds")]
    pub time_budget: Option<Duration>,
}

/// `until` of an adaptive rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Until {
    /// The cell's verdict against its control (private-bytes growth, the verdict table's) is
    /// `above control`, `below control` or `equivalent`.
    Decided,
}

impl Until {
    /// The manifest's name of the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Until::Decided => "decided",
        }
    }
}

/// A time budget as seconds (a float) in JSON.
mod humantime_serde_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let secs = Option::<f64>::deserialize(d)?;
        Ok(secs
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64))
    }
}

/// `[isolation] cpus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuSelection {
    /// `"auto"`: the first `jobs * cpus-per-run` CPUs of the runner's allowed set.
    Auto,
    /// `[0, 2]` or `"2-3"`: the pool of CPUs to use, in this order (checked against the allowed set).
    List(Vec<usize>),
}

/// `[isolation] env-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvPolicy {
    /// Start from the runner's whole environment (default).
    Inherit,
    /// Start from PATH, HOME, LANG, LC_*, TERM, USER, TMPDIR only.
    Clean,
}

/// `[isolation]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// `cpus`: default auto.
    pub cpus: CpuSelection,
    /// `cpus-per-run`: >= 1, default 1.
    pub cpus_per_run: usize,
    /// `timeout`: whole-run limit; `None` = no limit (default).
    pub timeout: Option<Duration>,
    /// `grace`: time between SIGTERM and SIGKILL; default 5 s.
    pub grace: Duration,
    /// `env-policy`: default inherit.
    pub env_policy: EnvPolicy,
    /// `env`: variables to set, in manifest order; values are templates; `""` stays `""`.
    pub env: Vec<(String, String)>,
    /// `env-unset`: variables to remove.
    pub env_unset: Vec<String>,
    /// `allocator`: template of `"glibc"`, a known allocator name (`jemalloc`, `tcmalloc`,
    /// `mimalloc`) or a library path (relative to the manifest's folder); names are checked when
    /// the plan is made ([`crate::plan`]). `None` = leave `LD_PRELOAD` as the environment has it.
    pub allocator: Option<String>,
}

/// `[measure]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    /// `sample-interval`: external smaps_rollup sampling period; `None` = `"off"`. Default 100 ms.
    pub sample_interval: Option<Duration>,
}

/// `[provenance]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenanceConfig {
    /// `repo`: absolute path of the repository to record; `None` = discover from the manifest's folder.
    pub repo: Option<PathBuf>,
    /// `patch-limit`: most bytes of all changed files working-tree.patch holds together; `None` =
    /// the default (64 MiB).
    pub patch_limit: Option<u64>,
    /// `patch-file-limit`: most bytes of one changed file in working-tree.patch; `None` = the
    /// default (16 MiB).
    pub patch_file_limit: Option<u64>,
}

/// The value of matrix key `mode` that is the control when `[report] control` is not given
/// (docs/DESIGN.md 2, 9).
pub const DEFAULT_CONTROL_MODE: &str = "reuse";

/// `[report]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReportConfig {
    /// `metrics = { name = "/json/pointer" }`: RFC 6901 pointers into each run's JSON output, in
    /// manifest order.
    pub metrics: Vec<(String, String)>,
    /// `control = { KEY = VALUE }`: the control cell by matrix keys and values; empty = the
    /// default (mode = "reuse" where that cell exists).
    pub control: Vec<(String, Value)>,
    /// `equivalence-margin` (or its `growth`): for growth and after-close, bytes.
    pub growth_margin: Option<f64>,
    /// `equivalence-margin.rate`: bytes per 1000 iterations.
    pub rate_margin: Option<f64>,
    /// `verdict-metric`: what the verdict judges, one of [`VERDICT_METRICS`] or a name from
    /// `metrics`; `None` = the default, [`DEFAULT_VERDICT_METRIC`] (DESIGN 9).
    pub verdict_metric: Option<String>,
}

/// The built-in values of `[report] verdict-metric` (DESIGN 9): anonymous, private, RSS,
/// `Pss_Anon` and file-backed private (private minus anonymous) bytes, each judged by its growth
/// and rate. A name from `[report] metrics` is valid too.
pub const VERDICT_METRICS: &[&str] = &["anonymous", "private", "rss", "pss-anon", "file-backed"];

/// The verdict metric when `[report] verdict-metric` is not given: anonymous bytes
/// (allocator-path retention; private bytes move with file-backed pages other processes map).
pub const DEFAULT_VERDICT_METRIC: &str = "anonymous";

impl ReportConfig {
    /// The verdict metric in force: `verdict-metric`, else [`DEFAULT_VERDICT_METRIC`].
    pub fn verdict_metric(&self) -> &str {
        self.verdict_metric.as_deref().unwrap_or(DEFAULT_VERDICT_METRIC)
    }
}

/// Parses a byte size: a number with an optional unit `B`, `KiB`, `MiB`, `GiB`, `TiB`, `kB`,
/// `MB`, `GB` (`"64KiB"`, `"4096"`, `"1.5 MiB"`).
///
/// # Errors
/// A message naming the text when it is no size (or negative, or not finite).
pub fn parse_size(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("\"{text}\" is not a size like \"64KiB\""))?;
    let factor = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        other => {
            return Err(format!(
                "\"{text}\": unknown unit \"{other}\" (B, KiB, MiB, GiB, TiB, kB, MB, GB)"
            ));
        }
    };
    if !n.is_finite() {
        return Err(format!("\"{text}\" is not a size like \"64KiB\""));
    }
    Ok(n * factor)
}

/// `[executor] kind`: where the runs execute (DESIGN 8); shared with `run --executor`.
pub use crate::choices::ExecutorKind;

/// Default `time-margin`: 60 s added to `timeout + grace` for Slurm's `--time`.
pub const DEFAULT_TIME_MARGIN: Duration = Duration::from_secs(60);

/// The `[executor]` keys for `kind = "slurm"` (accepted only with that kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    /// `partition`: `sbatch --partition`; `None` = the cluster's default partition.
    pub partition: Option<String>,
    /// `account`: `sbatch --account`.
    pub account: Option<String>,
    /// `qos`: `sbatch --qos`.
    pub qos: Option<String>,
    /// `time-margin`: added to `timeout + grace` for `sbatch --time`; default 60 s.
    pub time_margin: Duration,
    /// `sbatch-args`: extra sbatch arguments, each one word, passed as given after hwr-exp's own.
    pub sbatch_args: Vec<String>,
    /// `keep-sbatch-env`: pass the submitting environment's `SBATCH_*` / `SLURM_*` variables on
    /// to sbatch (recorded in bundle.json `slurm.kept-env`); default false: they are removed so
    /// the recorded batch script is what runs.
    pub keep_sbatch_env: bool,
    /// `nodes`: `sbatch --nodelist`, the only nodes the tasks may run on (names joined by `,`,
    /// or a Slurm host list as written, `n[1-2]`).
    pub nodes: Option<String>,
    /// `exclude-nodes`: `sbatch --exclude`, nodes the tasks never run on.
    pub exclude_nodes: Option<String>,
    /// `requeue`: a task Slurm preempts, or that nears Slurm's time limit, is put back into the
    /// queue and runs again (`--requeue`, and `--signal=B:USR2@<grace + 30 s>`: the task stops its
    /// run as on timeout and requeues itself); its interrupted attempt is kept under `attempts/`.
    /// Default false (`--no-requeue`: `resume` re-submits lost runs).
    pub requeue: bool,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            partition: None,
            account: None,
            qos: None,
            time_margin: DEFAULT_TIME_MARGIN,
            sbatch_args: Vec::new(),
            keep_sbatch_env: false,
            nodes: None,
            exclude_nodes: None,
            requeue: false,
        }
    }
}

/// `[executor]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecutorConfig {
    /// `kind`: default local. `hwr-exp run --executor` overrides it.
    pub kind: ExecutorKind,
    /// The slurm keys (defaults when `kind` is local: they are refused there).
    pub slurm: SlurmConfig,
    /// The ray keys (defaults unless `kind = "ray"`).
    pub ray: RayConfig,
    /// The kubernetes keys (defaults unless `kind = "kubernetes"`: they are refused elsewhere).
    pub kubernetes: KubernetesConfig,
}

/// `[executor]` keys of `kind = "ray"` (DESIGN 8, docs/ray.md).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RayConfig {
    /// `address`: the Ray cluster's GCS address (`host:port`, or `ray://` for Ray Client);
    /// `None`: `RAY_ADDRESS` of the submitting shell.
    pub address: Option<String>,
}

/// The `[executor]` keys for `kind = "kubernetes"` (accepted only with that kind; docs/kubernetes.md).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KubernetesConfig {
    /// `image`: the container image each run's pod starts; it must hold `hwr-exp` on its `PATH`
    /// and what the command needs. Required to submit (`plan --format k8s` writes a placeholder).
    pub image: Option<String>,
    /// `namespace`: the Job's namespace; `None` = kubectl's (the context's) namespace.
    pub namespace: Option<String>,
    /// `context`: the kubectl context to submit with; `None` = the current context.
    pub context: Option<String>,
    /// `volume`: the PersistentVolumeClaim holding the results folder, mounted in every pod.
    pub volume: Option<String>,
    /// `mount-path`: where the pods mount `volume` (absolute); `None` = the results folder's own
    /// absolute path, so the bundle has the same path in the pods as here.
    pub mount_path: Option<std::path::PathBuf>,
    /// `memory`: bytes each run's pod requests and is limited to; `None` = no memory request or
    /// limit (the pod is then not in the Guaranteed QoS class).
    pub memory: Option<u64>,
    /// `time-margin`: added to `timeout + grace` per run slot for `activeDeadlineSeconds`;
    /// default 60 s (pod start, image pull).
    pub time_margin: Option<Duration>,
}

/// One `[environments.<name>]`: a Python environment built with uv (DESIGN 3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EnvironmentSpec {
    /// `requirements`: PEP 508 strings, at least one.
    pub requirements: Vec<String>,
    /// `python`: a version ("3.11") or an absolute interpreter path; `None` = uv's default.
    pub python: Option<String>,
    /// `find-links`: absolute folders or URLs.
    pub find_links: Vec<String>,
    /// `no-index`: resolve from `find-links` only.
    pub no_index: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` is the serde name, both ways, of every variant.
    #[test]
    fn names_are_the_serde_names() {
        for v in [Order::Interleaved, Order::Grouped, Order::Shuffled] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{v:?}");
            assert_eq!(serde_json::from_value::<Order>(v.as_str().into()).unwrap(), v);
        }
    }
    /// Values read from JSON by kind, as `#[serde(untagged)]` over Bool, Int, Float, Str read them.
    #[test]
    fn values_are_read_by_their_kind() {
        let read = |text: &str| serde_json::from_str::<Value>(text);
        assert_eq!(read("true").unwrap(), Value::Bool(true));
        assert_eq!(read("16").unwrap(), Value::Int(16));
        assert_eq!(read("-3").unwrap(), Value::Int(-3));
        assert_eq!(read("9223372036854775807").unwrap(), Value::Int(i64::MAX));
        // Beyond i64: its f64, with that number's text.
        let Value::Float(big) = read("18446744073709551615").unwrap() else {
            panic!("not a float")
        };
        assert_eq!(big.value, u64::MAX as f64);
        assert_eq!(big.text, "1.8446744073709552e+19");
        let Value::Float(x) = read("1.5").unwrap() else {
            panic!("not a float")
        };
        assert_eq!((x.value, x.text.as_str()), (1.5, "1.5"));
        assert_eq!(read("\"reuse\"").unwrap(), Value::Str("reuse".into()));
        assert_eq!(read("\"caf\\u00e9\"").unwrap(), Value::Str("café".into()));
        for bad in ["null", "[1]", "{\"a\": 1}"] {
            let e = read(bad).unwrap_err().to_string();
            assert!(
                e.contains("a matrix value (a string, integer, float or boolean)"),
                "{bad}: {e}"
            );
        }
        // From TOML as well (the manifest's `exclude` and `include` tables).
        let t: BTreeMap<String, Value> = toml::from_str("a = 1\nb = 2.5\nc = \"x\"\nd = false\n").unwrap();
        assert_eq!(t["a"], Value::Int(1));
        assert_eq!(t["c"], Value::Str("x".into()));
        assert_eq!(t["d"], Value::Bool(false));
        assert!(matches!(&t["b"], Value::Float(f) if f.value == 2.5));
    }
}
