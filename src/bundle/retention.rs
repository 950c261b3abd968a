//! The retention schema (DESIGN 2, 7): run outputs with `samples` in phases `before_file`,
//! `baseline`, `loop`, `closed`, as printed by the built-in `safetensors-retention` probe and by the
//! external Python diagnostic alike.
//!
//! From one output this module keeps only a few numbers ([`Retention`]): **growth** = final `loop`
//! sample minus `baseline`, **after-close** = `closed` minus `baseline`, for private bytes
//! (`private_bytes`), anonymous bytes (`anonymous_bytes`) and RSS (`rss_bytes`), plus the fd delta.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value as Json;

/// Private, anonymous and RSS differences between two samples, in bytes (signed: memory can shrink).
/// A figure missing from either sample is `None`, never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Deltas {
    /// Difference of `private_bytes` (smaps_rollup `Private_Clean + Private_Dirty`).
    pub private_bytes: Option<i128>,
    /// Difference of `anonymous_bytes` (smaps_rollup `Anonymous`).
    pub anonymous_bytes: Option<i128>,
    /// Difference of `rss_bytes` (smaps_rollup `Rss`, file-backed pages included).
    pub rss_bytes: Option<i128>,
    /// Difference of `pss_anon_bytes` (smaps_rollup `Pss_Anon`, Linux 5.1+), where the output
    /// has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pss_anon_bytes: Option<i128>,
}

impl Deltas {
    /// File-backed private bytes: the difference of `private_bytes - anonymous_bytes` (private
    /// pages of mapped files: shared libraries, the mapped file), `None` when either is missing.
    pub fn file_backed_bytes(&self) -> Option<i128> {
        Some(self.private_bytes? - self.anonymous_bytes?)
    }
}

/// The summary numbers of one run's retention output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Retention {
    /// `arguments.mode` (`get_tensor`, `view`, `reuse`, ...), when present.
    pub mode: Option<String>,
    /// `arguments.tensor_elements`, when present.
    pub tensor_elements: Option<u64>,
    /// Loop iterations between the baseline and the final loop sample (`iterations` difference).
    pub loop_iterations: u64,
    /// Growth: final `loop` sample minus `baseline`, bytes.
    pub growth: Deltas,
    /// After-close: `closed` sample minus `baseline`, bytes; all `None` without a `closed` sample.
    pub after_close: Deltas,
    /// Open file descriptors: final `loop` sample's `fd_count` minus `baseline`'s.
    pub fd_delta: Option<i128>,
    /// `last_tensor_alive`, when the output has it: the document's, else the final `loop`
    /// sample's (the original Python diagnostic writes it in each loop sample).
    pub last_tensor_alive: Option<bool>,
    /// `completed`, when the output has it (`false` when the probe was stopped by SIGTERM).
    pub completed: Option<bool>,
    /// Theil-Sen slopes of the baseline and loop samples against loop iterations, bytes per 1000
    /// iterations (DESIGN 9); all `None` when [`Retention::rate_unusable`] says why.
    pub rate: Rates,
    /// Why the output gives no rate although its growth is usable: [`RATE_ITERATIONS_DOWN`] or
    /// [`RATE_ONE_SAMPLE`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "known_name"
    )]
    pub rate_unusable: Option<Name>,
    /// Which fields were JSON `null` where a figure is missing (to say why it is); not in a
    /// report's JSON, kept by run.json `summary` beside the figures
    /// ([`crate::bundle::summary::Summary::gaps`]).
    #[serde(skip)]
    pub gaps: Gaps,
}

/// The sample fields that were JSON `null` in the samples the figures come from, so that a report
/// can say why a figure is missing (`null for private_bytes`) instead of dropping it silently.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Gaps {
    /// Fields `null` in the baseline or the final loop sample.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "known_names"
    )]
    pub growth_null: Vec<&'static str>,
    /// Fields `null` in the closed sample.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "known_names"
    )]
    pub closed_null: Vec<&'static str>,
    /// Whether the output had a `closed` sample.
    #[serde(default)]
    pub closed: bool,
}

impl Gaps {
    /// Whether nothing was `null` and there was no `closed` sample (what run.json leaves out).
    pub fn is_empty(&self) -> bool {
        self.growth_null.is_empty() && self.closed_null.is_empty() && !self.closed
    }
}

/// A name a [`Retention`] holds (a sample field's, a rate's reason), read back from run.json
/// by `known` (a named type: serde takes a field of type `Option<&str>` as borrowed from the
/// text it reads).
pub type Name = &'static str;

/// The name among the sample fields ([`SampleField::name`]) and the rate reasons
/// ([`RATE_ITERATIONS_DOWN`], [`RATE_ONE_SAMPLE`]) that is `text`: how a [`Retention`] read back
/// from run.json holds its names.
fn known(text: &str) -> Option<&'static str> {
    SampleField::ALL
        .map(SampleField::name)
        .into_iter()
        .chain([RATE_ITERATIONS_DOWN, RATE_ONE_SAMPLE])
        .find(|k| *k == text)
}

/// Reads an optional name that [`known`] knows.
fn known_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'static str>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|t| known(&t).ok_or_else(|| serde::de::Error::custom(format!("unknown reason {t:?}"))))
        .transpose()
}

/// Reads a list of names that [`known`] knows.
fn known_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|t| known(t).ok_or_else(|| serde::de::Error::custom(format!("unknown field {t:?}"))))
        .collect()
}

/// Theil-Sen slopes of one measure (bytes per 1000 iterations): over every baseline and loop
/// sample, and over the first and second half of the loop's iterations. `None` with fewer than
/// two samples at different iterations having the field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Slopes {
    /// Over all baseline and loop samples.
    pub all: Option<f64>,
    /// Over the samples in the first half of the iterations.
    pub first_half: Option<f64>,
    /// Over the samples in the second half of the iterations.
    pub second_half: Option<f64>,
}

/// Rates of private, anonymous and RSS bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Rates {
    /// Of `private_bytes`.
    pub private_bytes: Slopes,
    /// Of `anonymous_bytes`.
    pub anonymous_bytes: Slopes,
    /// Of `rss_bytes`.
    pub rss_bytes: Slopes,
    /// Of `pss_anon_bytes` (all `None` when the output has none).
    #[serde(default, skip_serializing_if = "Slopes::is_empty")]
    pub pss_anon_bytes: Slopes,
    /// Of file-backed private bytes, `private_bytes - anonymous_bytes` sample by sample.
    pub file_backed_bytes: Slopes,
}

impl Slopes {
    /// Whether every slope is `None`.
    pub fn is_empty(&self) -> bool {
        self.all.is_none() && self.first_half.is_none() && self.second_half.is_none()
    }
}

/// Why a run's rates are unusable (every rate `None`), as runs are counted by it ("3 runs gave
/// loop iterations that go down (no rate)"): the loop's `iterations` fell from one loop sample to
/// a later one, so bytes against iterations is no slope of the loop.
pub const RATE_ITERATIONS_DOWN: &str = "loop iterations that go down (no rate)";

/// Why a run's rates are unusable: fewer than two `loop` samples, so no slope over the loop.
pub const RATE_ONE_SAMPLE: &str = "fewer than two loop samples (no rate)";

/// Most loop samples of one run kept for its rates (thinned evenly beyond twice this): Theil-Sen
/// takes O(n^2) pairs, and a few hundred evenly spaced samples give the slope of thousands.
pub const MAX_RATE_SAMPLES: usize = 256;

/// One sample as kept for the rates: iterations and the byte counts private, anonymous, RSS
/// and `Pss_Anon`.
type RateSample = (u64, [Option<i128>; 4]);

/// The byte counts of a sample as a [`RateSample`] keeps them.
fn rate_sample(s: &SampleFields) -> RateSample {
    (
        s.iterations,
        [s.private_bytes, s.anonymous_bytes, s.rss_bytes, s.pss_anon_bytes],
    )
}

/// The slopes of one measure (`which` of a sample's byte counts) of `samples`; `points` and
/// `slopes` are buffers lent by the caller (one pair for all of a run's slopes).
fn slopes(
    samples: &[RateSample],
    which: impl Fn(&[Option<i128>; 4]) -> Option<i128>,
    points: &mut Vec<(u64, i128)>,
    slopes: &mut Vec<f64>,
) -> Slopes {
    points.clear();
    points.extend(samples.iter().filter_map(|(x, v)| Some((*x, which(v)?))));
    let (all, first_half, second_half) = crate::stats::theil_sen::halves_in(points, slopes);
    let k = |v: Option<f64>| v.map(|v| v * 1000.0);
    Slopes {
        all: k(all),
        first_half: k(first_half),
        second_half: k(second_half),
    }
}

impl Retention {
    /// Growth per 1000 loop iterations, bytes; `None` when the loop ran 0 iterations.
    pub fn per_1000(&self, bytes: Option<i128>) -> Option<f64> {
        let b = bytes?;
        (self.loop_iterations > 0).then(|| b as f64 * 1000.0 / self.loop_iterations as f64)
    }
}

/// One sample as kept for plotting: loop iterations and private bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    /// `iterations` of the sample.
    pub iterations: u64,
    /// `private_bytes` of the sample.
    pub private_bytes: u64,
}

/// What [`parse`] found in one output document.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// The document does not follow the retention schema (no `samples` array of objects with
    /// `phase`); only generic metrics apply.
    NotRetention,
    /// Retention schema, but unusable for growth (no `baseline` or no `loop` sample, a value that
    /// is not an integer within 64 bits, ...).
    Unusable(Unusable),
    /// The summary numbers, and the `baseline` and `loop` samples' private bytes for plotting.
    Retention(Box<Retention>, Vec<PlotPoint>),
}

/// Why a retention output is unusable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unusable {
    /// The reason, for the run's line (`samples[3]: private_bytes = "x" is not an integer within
    /// 64 bits`).
    pub reason: String,
    /// What the output gave, the same for every run that gave it, to count runs by
    /// (`a string for private_bytes`, `no loop sample`): "N runs gave ...".
    pub gave: String,
}

impl Unusable {
    fn parsed(reason: impl Into<String>, gave: impl Into<String>) -> Parsed {
        Parsed::Unusable(Unusable {
            reason: reason.into(),
            gave: gave.into(),
        })
    }
}

/// The fields of a sample the retention numbers read, by name (DESIGN 7). A reader asks for
/// [`SampleField::ALL`] by [`SampleField::name`] and hands each value to [`SampleFields::set`]:
/// no field is matched by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleField {
    /// `phase`: `before_file`, `baseline`, `loop` or `closed`.
    Phase,
    /// `iterations`: loop iterations done when the sample was taken.
    Iterations,
    /// `private_bytes` (smaps_rollup `Private_Clean + Private_Dirty`).
    PrivateBytes,
    /// `anonymous_bytes` (smaps_rollup `Anonymous`).
    AnonymousBytes,
    /// `rss_bytes` (smaps_rollup `Rss`).
    RssBytes,
    /// `pss_anon_bytes` (smaps_rollup `Pss_Anon`, Linux 5.1+; optional).
    PssAnonBytes,
    /// `fd_count`: open file descriptors.
    FdCount,
    /// `last_tensor_alive`: whether the last tensor read was still held (the original Python
    /// diagnostic writes it in each loop sample; the built-in probe in the document).
    LastTensorAlive,
}

impl SampleField {
    /// Every field a sample is read for.
    pub const ALL: [SampleField; 8] = [
        SampleField::Phase,
        SampleField::Iterations,
        SampleField::PrivateBytes,
        SampleField::AnonymousBytes,
        SampleField::RssBytes,
        SampleField::PssAnonBytes,
        SampleField::FdCount,
        SampleField::LastTensorAlive,
    ];

    /// The field's name in the output's sample objects.
    pub const fn name(self) -> &'static str {
        match self {
            SampleField::Phase => "phase",
            SampleField::Iterations => "iterations",
            SampleField::PrivateBytes => "private_bytes",
            SampleField::AnonymousBytes => "anonymous_bytes",
            SampleField::RssBytes => "rss_bytes",
            SampleField::PssAnonBytes => "pss_anon_bytes",
            SampleField::FdCount => "fd_count",
            SampleField::LastTensorAlive => "last_tensor_alive",
        }
    }
}

/// A JSON value as a reader holds it (a `serde_json::Value` or a streamed
/// [`crate::bundle::output::Scalar`]), read the way `serde_json::Value`'s accessors read it.
pub trait SampleValue {
    /// The string, when a string.
    fn as_str(&self) -> Option<&str>;
    /// The integer, when an integer number within `i64` or `u64` (so every integer a 64-bit
    /// counter can hold, `u64::MAX` included, without wrapping).
    fn as_integer(&self) -> Option<i128>;
    /// The value as JSON text, to name it in a message.
    fn text(&self) -> String;
    /// Whether the value is JSON `null`.
    fn is_null(&self) -> bool;
    /// The boolean, when a boolean.
    fn as_bool(&self) -> Option<bool>;
    /// What the value is when it is not an integer within 64 bits: `null`, `a string`, `a
    /// fraction`, `a number beyond 64 bits`, `a boolean`, `an array`, `an object`.
    fn kind(&self) -> &'static str;
}

/// The kind of a JSON number that is not an integer within `i64` or `u64`.
pub(super) fn number_kind(n: &serde_json::Number) -> &'static str {
    match n.as_f64() {
        Some(x) if x.is_finite() && x.fract() != 0.0 => "a fraction",
        // 4096.0 or 4.096e3: a whole number, but written as a float (serde_json reads it as one).
        Some(x) if x.is_finite() && x.abs() < 18_446_744_073_709_551_616.0 && !n.is_i64() && !n.is_u64() => {
            "a number written as a float"
        }
        _ => "a number beyond 64 bits",
    }
}

impl SampleValue for Json {
    fn as_str(&self) -> Option<&str> {
        Json::as_str(self)
    }
    fn as_integer(&self) -> Option<i128> {
        self.as_i64()
            .map(i128::from)
            .or_else(|| self.as_u64().map(i128::from))
    }
    fn text(&self) -> String {
        self.to_string()
    }
    fn is_null(&self) -> bool {
        Json::is_null(self)
    }
    fn as_bool(&self) -> Option<bool> {
        Json::as_bool(self)
    }
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(n) => number_kind(n),
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

/// A sample's `phase` as the summary reads it: one of the schema's phases it uses, or another
/// string (`before_file` and any unknown phase), which it passes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `baseline`: the sample the growth is measured from.
    Baseline,
    /// `loop`: a sample taken during the loop.
    Loop,
    /// `closed`: the sample after the file was closed.
    Closed,
    /// Any other string (`before_file` too).
    Other,
}

impl Phase {
    /// The phase a `phase` string names.
    pub fn of(phase: &str) -> Phase {
        match phase {
            "baseline" => Phase::Baseline,
            "loop" => Phase::Loop,
            "closed" => Phase::Closed,
            _ => Phase::Other,
        }
    }
}

/// The numbers of one sample the retention summary uses. Byte counts and counts are integers
/// within `i64` or `u64`, kept as `i128` so that differences never wrap; a field that is absent
/// (or JSON `null`) is `None`, never 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleFields {
    /// `phase`, when a string.
    pub phase: Option<Phase>,
    /// `iterations` (0 when absent).
    pub iterations: u64,
    /// `private_bytes`.
    pub private_bytes: Option<i128>,
    /// `anonymous_bytes`.
    pub anonymous_bytes: Option<i128>,
    /// `rss_bytes`.
    pub rss_bytes: Option<i128>,
    /// `pss_anon_bytes`.
    pub pss_anon_bytes: Option<i128>,
    /// `fd_count`.
    pub fd_count: Option<i128>,
    /// `last_tensor_alive`, when a boolean (anything else is left aside: no figure reads it).
    pub last_tensor_alive: Option<bool>,
    /// The first field present with a value these numbers cannot hold (a fraction, a string, a
    /// negative iteration count, a number beyond 64 bits): `field = value`, for the run's reason.
    pub unreadable: Option<String>,
    /// What that value is, `a string for private_bytes`, to count runs by.
    pub unreadable_kind: Option<String>,
    /// The fields that were JSON `null` (absent, for the figures).
    pub null: Vec<&'static str>,
}

impl SampleFields {
    /// Sets `field` from the value the output holds (`None` or JSON `null`: absent).
    pub fn set<V: SampleValue + ?Sized>(&mut self, field: SampleField, value: Option<&V>) {
        let Some(v) = value else { return };
        if field == SampleField::LastTensorAlive {
            self.last_tensor_alive = v.as_bool();
            return;
        }
        if v.is_null() {
            if field != SampleField::Phase {
                self.null.push(field.name());
            }
            return;
        }
        let bad = |me: &mut SampleFields| {
            if me.unreadable.is_none() {
                me.unreadable = Some(format!("{} = {}", field.name(), v.text()));
                me.unreadable_kind = Some(if v.as_integer().is_some() {
                    format!("a negative number for {}", field.name())
                } else {
                    format!("{} for {}", v.kind(), field.name())
                });
            }
        };
        match field {
            // A phase that is not a string is no phase (the document may not be in the schema).
            SampleField::Phase => self.phase = v.as_str().map(Phase::of),
            SampleField::Iterations => match v.as_integer().and_then(|i| u64::try_from(i).ok()) {
                Some(i) => self.iterations = i,
                None => bad(self),
            },
            SampleField::LastTensorAlive => {}
            SampleField::PrivateBytes
            | SampleField::AnonymousBytes
            | SampleField::RssBytes
            | SampleField::PssAnonBytes
            | SampleField::FdCount => {
                // Byte counts and fd counts are never negative: a negative one is no count.
                let Some(i) = v.as_integer().filter(|i| *i >= 0) else {
                    return bad(self);
                };
                let slot = match field {
                    SampleField::PrivateBytes => &mut self.private_bytes,
                    SampleField::AnonymousBytes => &mut self.anonymous_bytes,
                    SampleField::RssBytes => &mut self.rss_bytes,
                    SampleField::PssAnonBytes => &mut self.pss_anon_bytes,
                    _ => &mut self.fd_count,
                };
                *slot = Some(i);
            }
        }
    }

    fn of_object(obj: &serde_json::Map<String, Json>) -> SampleFields {
        let mut s = SampleFields::default();
        for field in SampleField::ALL {
            s.set(field, obj.get(field.name()));
        }
        s
    }
}

/// `b - a`; both are within `i64` or `u64`, so the difference fits `i128` (no wrap, no sign flip).
fn delta(a: Option<i128>, b: Option<i128>) -> Option<i128> {
    b?.checked_sub(a?)
}

fn deltas(a: &SampleFields, b: &SampleFields) -> Deltas {
    Deltas {
        private_bytes: delta(a.private_bytes, b.private_bytes),
        anonymous_bytes: delta(a.anonymous_bytes, b.anonymous_bytes),
        rss_bytes: delta(a.rss_bytes, b.rss_bytes),
        pss_anon_bytes: delta(a.pss_anon_bytes, b.pss_anon_bytes),
    }
}

/// The document-level values of the retention schema besides `samples`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocFields {
    /// `arguments.mode`, when a string.
    pub mode: Option<String>,
    /// `arguments.tensor_elements`, when a non-negative integer.
    pub tensor_elements: Option<u64>,
    /// `last_tensor_alive`, when a boolean.
    pub last_tensor_alive: Option<bool>,
    /// `completed`, when a boolean.
    pub completed: Option<bool>,
}

/// The retention numbers computed one sample at a time, so a reader can stream `samples` without
/// keeping them: the last `baseline`, the `loop` sample with the most `iterations` (the last one
/// on ties), the last `closed`, and the plot points, kept to at most `2 * max_points` by dropping
/// every other one when full (the caller thins them to `max_points` at the end).
#[derive(Debug, Clone)]
pub struct Accumulator {
    seen: usize,
    problem: Option<Parsed>,
    baseline: Option<SampleFields>,
    last_loop: Option<SampleFields>,
    closed: Option<SampleFields>,
    max_points: usize,
    stride: usize,
    points: Vec<PlotPoint>,
    /// Baseline and loop samples with private bytes seen, for the stride.
    plotted: usize,
    last_point: Option<PlotPoint>,
    /// Loop samples kept for the rates (every `rate_stride`-th), and how many were seen.
    rate_samples: Vec<RateSample>,
    rate_stride: usize,
    rate_seen: usize,
    /// `iterations` of the latest loop sample in document order, to see them go down.
    loop_iterations_last: Option<u64>,
    /// Whether a loop sample had fewer `iterations` than the one before it.
    iterations_went_down: bool,
}

/// The reason of a retention document without a baseline sample: what is missing, and the
/// phases the schema has (DESIGN 7), for an output that named them otherwise (`base`).
const NO_BASELINE: &str = "no baseline sample (no sample has \"phase\": \"baseline\"; the retention schema's phases: before_file, baseline, loop, closed)";

/// The reason of a retention document without a loop sample (see [`NO_BASELINE`]).
const NO_LOOP: &str = "no loop sample (no sample has \"phase\": \"loop\"; the retention schema's phases: before_file, baseline, loop, closed)";

impl Accumulator {
    /// An accumulator keeping at most about `2 * max_points` plot points (0: none).
    pub fn new(max_points: usize) -> Accumulator {
        Accumulator {
            seen: 0,
            problem: None,
            baseline: None,
            last_loop: None,
            closed: None,
            max_points,
            stride: 1,
            points: Vec::new(),
            plotted: 0,
            last_point: None,
            rate_samples: Vec::new(),
            rate_stride: 1,
            rate_seen: 0,
            loop_iterations_last: None,
            iterations_went_down: false,
        }
    }

    /// Adds sample number `index` (0-based): `None` when it is not an object.
    pub fn push(&mut self, index: usize, sample: Option<SampleFields>) {
        self.seen = index + 1;
        if self.problem.is_some() {
            return;
        }
        let Some(s) = sample else {
            self.problem = Some(Unusable::parsed(
                format!("samples[{index}] is not an object"),
                "a sample that is not an object",
            ));
            return;
        };
        if let Some(what) = &s.unreadable {
            let negative = s
                .unreadable_kind
                .as_deref()
                .is_some_and(|k| k.starts_with("a negative"));
            self.problem = Some(Unusable::parsed(
                if negative {
                    format!("samples[{index}]: {what} is not a count (negative)")
                } else {
                    format!("samples[{index}]: {what} is not an integer within 64 bits")
                },
                s.unreadable_kind.clone().unwrap_or_else(|| what.clone()),
            ));
            return;
        }
        let Some(phase) = s.phase else {
            self.problem = Some(if index == 0 {
                Parsed::NotRetention
            } else {
                Unusable::parsed(format!("samples[{index}] has no phase"), "a sample without phase")
            });
            return;
        };
        if self.max_points > 0
            && matches!(phase, Phase::Baseline | Phase::Loop)
            && let Some(private_bytes) = s.private_bytes.and_then(|b| u64::try_from(b).ok())
        {
            let point = PlotPoint {
                iterations: s.iterations,
                private_bytes,
            };
            if self.plotted.is_multiple_of(self.stride) {
                self.points.push(point);
                self.last_point = None;
                if self.points.len() >= 2 * self.max_points {
                    // points[j] is plotted sample j * stride: keep the even ones, double the stride.
                    self.points = self.points.iter().copied().step_by(2).collect();
                    self.stride *= 2;
                    if self.points.last() != Some(&point) {
                        self.last_point = Some(point);
                    }
                }
            } else {
                self.last_point = Some(point);
            }
            self.plotted += 1;
        }
        if phase == Phase::Loop {
            self.iterations_went_down |= self.loop_iterations_last.is_some_and(|l| s.iterations < l);
            self.loop_iterations_last = Some(s.iterations);
            if self.rate_seen.is_multiple_of(self.rate_stride) {
                self.rate_samples.push(rate_sample(&s));
                if self.rate_samples.len() >= 2 * MAX_RATE_SAMPLES {
                    self.rate_samples = self.rate_samples.iter().copied().step_by(2).collect();
                    self.rate_stride *= 2;
                }
            }
            self.rate_seen += 1;
        }
        match phase {
            Phase::Baseline => self.baseline = Some(s),
            Phase::Loop
                if self
                    .last_loop
                    .as_ref()
                    .is_none_or(|l| s.iterations >= l.iterations) =>
            {
                self.last_loop = Some(s)
            }
            Phase::Closed => self.closed = Some(s),
            Phase::Loop | Phase::Other => {}
        }
    }

    /// How many samples were pushed.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The summary, given the document's other values.
    pub fn finish(mut self, doc: DocFields) -> Parsed {
        if let Some(problem) = self.problem {
            return problem;
        }
        if self.seen == 0 {
            return Unusable::parsed("no samples", "no samples");
        }
        let Some(baseline) = self.baseline else {
            return Unusable::parsed(NO_BASELINE, "no baseline sample");
        };
        let Some(last_loop) = self.last_loop else {
            return Unusable::parsed(NO_LOOP, "no loop sample");
        };
        // The rates: the baseline, the kept loop samples from it on, and the final loop sample.
        let mut rate_samples: Vec<RateSample> = vec![rate_sample(&baseline)];
        rate_samples.extend(
            self.rate_samples
                .iter()
                .filter(|(x, _)| *x >= baseline.iterations),
        );
        let last = rate_sample(&last_loop);
        if !rate_samples.contains(&last) {
            rate_samples.push(last);
        }
        // A loop whose iterations go down, or of one sample, has no slope over the loop: its
        // rates are unusable, by name (its growth still is the final loop sample's).
        let rate_unusable = if self.iterations_went_down {
            Some(RATE_ITERATIONS_DOWN)
        } else if self.rate_seen < 2 {
            Some(RATE_ONE_SAMPLE)
        } else {
            None
        };
        if rate_unusable.is_some() {
            rate_samples.clear();
        }
        let (mut points, mut pairs) = (Vec::with_capacity(rate_samples.len()), Vec::new());
        let rate = Rates {
            private_bytes: slopes(&rate_samples, |v| v[0], &mut points, &mut pairs),
            anonymous_bytes: slopes(&rate_samples, |v| v[1], &mut points, &mut pairs),
            rss_bytes: slopes(&rate_samples, |v| v[2], &mut points, &mut pairs),
            pss_anon_bytes: slopes(&rate_samples, |v| v[3], &mut points, &mut pairs),
            file_backed_bytes: slopes(&rate_samples, |v| Some(v[0]? - v[1]?), &mut points, &mut pairs),
        };
        let mut growth_null: Vec<&'static str> =
            baseline.null.iter().chain(&last_loop.null).copied().collect();
        growth_null.sort_unstable();
        growth_null.dedup();
        let gaps = Gaps {
            growth_null,
            closed_null: self.closed.as_ref().map(|c| c.null.clone()).unwrap_or_default(),
            closed: self.closed.is_some(),
        };
        let retention = Retention {
            gaps,
            rate,
            rate_unusable,
            mode: doc.mode,
            tensor_elements: doc.tensor_elements,
            loop_iterations: last_loop.iterations.saturating_sub(baseline.iterations),
            growth: deltas(&baseline, &last_loop),
            after_close: self.closed.map(|c| deltas(&baseline, &c)).unwrap_or_default(),
            fd_delta: delta(baseline.fd_count, last_loop.fd_count),
            last_tensor_alive: doc.last_tensor_alive.or(last_loop.last_tensor_alive),
            completed: doc.completed,
        };
        self.points.extend(self.last_point);
        Parsed::Retention(Box::new(retention), self.points)
    }
}

/// Reads the retention numbers out of one run's output document (the same computation as a
/// streaming reader feeding an [`Accumulator`]).
///
/// The baseline is the last `baseline` sample, the final loop sample the `loop` sample with the most
/// `iterations` (the last one on ties), the closed sample the last `closed` sample.
/// `keep_points` keeps the baseline and loop samples' private bytes for the plot.
pub fn parse(doc: &Json, keep_points: bool) -> Parsed {
    let Some(samples) = doc.get("samples").and_then(Json::as_array) else {
        return Parsed::NotRetention;
    };
    let mut acc = Accumulator::new(if keep_points { usize::MAX / 2 } else { 0 });
    for (i, s) in samples.iter().enumerate() {
        acc.push(i, s.as_object().map(SampleFields::of_object));
    }
    let args = doc.get("arguments");
    acc.finish(DocFields {
        mode: args
            .and_then(|a| a.get("mode"))
            .and_then(Json::as_str)
            .map(str::to_string),
        tensor_elements: args.and_then(|a| a.get("tensor_elements")).and_then(Json::as_u64),
        last_tensor_alive: doc.get("last_tensor_alive").and_then(Json::as_bool),
        completed: doc.get("completed").and_then(Json::as_bool),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(phase: &str, it: u64, private: i64, anon: i64, rss: i64, fd: i64) -> Json {
        serde_json::json!({"phase": phase, "iterations": it, "loop_seconds": 0.1,
            "rss_bytes": rss, "private_bytes": private, "anonymous_bytes": anon, "fd_count": fd})
    }

    #[test]
    fn growth_and_after_close() {
        let doc = serde_json::json!({
            "schema_version": 1,
            "arguments": {"mode": "get_tensor", "tensor_elements": 64},
            "samples": [
                sample("before_file", 0, 100, 50, 1000, 3),
                sample("baseline", 0, 200, 80, 2000, 4),
                sample("loop", 500, 300, 150, 2100, 4),
                sample("loop", 1000, 4296, 4176, 6096, 5),
                sample("closed", 1000, 4000, 4000, 5000, 3),
            ],
            "completed": true,
            "last_tensor_alive": false,
        });
        let Parsed::Retention(r, points) = parse(&doc, true) else {
            panic!()
        };
        assert_eq!(r.loop_iterations, 1000);
        assert_eq!(r.growth.private_bytes, Some(4096));
        assert_eq!(r.growth.anonymous_bytes, Some(4096));
        assert_eq!(r.growth.rss_bytes, Some(4096));
        assert_eq!(r.after_close.private_bytes, Some(3800));
        assert_eq!(r.fd_delta, Some(1));
        assert_eq!(r.per_1000(r.growth.private_bytes), Some(4096.0));
        assert_eq!(r.mode.as_deref(), Some("get_tensor"));
        assert_eq!(r.last_tensor_alive, Some(false));
        assert_eq!(points.len(), 3);
    }

    #[test]
    fn missing_field_stays_none_and_missing_phase_is_unusable() {
        let mut b = sample("baseline", 0, 200, 80, 2000, 4);
        b.as_object_mut().unwrap().remove("anonymous_bytes");
        let doc = serde_json::json!({"samples": [b, sample("loop", 10, 210, 90, 2000, 4)]});
        let Parsed::Retention(r, _) = parse(&doc, false) else {
            panic!()
        };
        assert_eq!(r.growth.anonymous_bytes, None);
        assert_eq!(r.after_close, Deltas::default());
        let doc = serde_json::json!({"samples": [sample("baseline", 0, 1, 1, 1, 1)]});
        assert_eq!(parse(&doc, false), Unusable::parsed(NO_LOOP, "no loop sample"));
        // A baseline under another name (the new-user trial of 2026-12-04 wrote `base`): the
        // reason names the phase wanted and the schema's phases.
        let doc =
            serde_json::json!({"samples": [sample("base", 0, 1, 1, 1, 1), sample("loop", 10, 2, 2, 2, 2)]});
        let Parsed::Unusable(u) = parse(&doc, false) else {
            panic!()
        };
        assert!(
            u.reason.contains("no sample has \"phase\": \"baseline\"")
                && u.reason.contains("phases: before_file, baseline, loop, closed"),
            "{u:?}"
        );
        assert_eq!(parse(&serde_json::json!({"x": 1}), false), Parsed::NotRetention);
    }

    #[test]
    fn streamed_points_are_thinned_keeping_first_and_last() {
        let mut acc = Accumulator::new(100);
        let sample = |phase: &str, it: u64| SampleFields {
            phase: Some(Phase::of(phase)),
            iterations: it,
            private_bytes: Some(i128::from(it)),
            ..SampleFields::default()
        };
        acc.push(0, Some(sample("baseline", 0)));
        for i in 1..=10_000 {
            acc.push(i as usize, Some(sample("loop", i)));
        }
        let Parsed::Retention(r, points) = acc.finish(DocFields::default()) else {
            panic!()
        };
        assert_eq!(r.loop_iterations, 10_000);
        assert!(points.len() <= 201 && points.len() >= 100, "{}", points.len());
        assert_eq!(points.first().map(|p| p.iterations), Some(0));
        assert_eq!(points.last().map(|p| p.iterations), Some(10_000));
        assert!(points.windows(2).all(|w| w[0].iterations < w[1].iterations));
    }

    #[test]
    fn extremes_do_not_wrap_and_unreadable_values_are_named() {
        let doc = serde_json::json!({"samples": [
            {"phase": "baseline", "iterations": 0, "private_bytes": u64::MAX,
             "anonymous_bytes": 0, "rss_bytes": 0, "fd_count": i64::MAX},
            {"phase": "loop", "iterations": 1000, "private_bytes": 0,
             "anonymous_bytes": i64::MAX, "rss_bytes": u64::MAX, "fd_count": 0},
        ]});
        let Parsed::Retention(r, _) = parse(&doc, false) else {
            panic!()
        };
        assert_eq!(r.growth.private_bytes, Some(-i128::from(u64::MAX)));
        assert_eq!(r.growth.anonymous_bytes, Some(i128::from(i64::MAX)));
        assert_eq!(r.growth.rss_bytes, Some(i128::from(u64::MAX)));
        assert_eq!(r.fd_delta, Some(-i128::from(i64::MAX)));
        let text = serde_json::to_string(&r.growth).unwrap();
        assert!(text.contains("-18446744073709551615"), "{text}");
        for bad in [
            serde_json::json!(1.5),
            serde_json::json!("4096"),
            serde_json::json!(1e300),
            serde_json::json!(-5000),
            serde_json::json!(i64::MIN),
        ] {
            let doc = serde_json::json!({"samples": [
                {"phase": "baseline", "iterations": 0, "private_bytes": 1},
                {"phase": "loop", "iterations": 10, "private_bytes": bad},
            ]});
            let Parsed::Unusable(Unusable { reason, gave }) = parse(&doc, false) else {
                panic!("{bad}")
            };
            assert!(reason.starts_with("samples[1]: private_bytes = "), "{reason}");
            assert!(
                reason.ends_with("is not an integer within 64 bits")
                    || reason.ends_with("is not a count (negative)"),
                "{reason}"
            );
            assert!(gave.ends_with(" for private_bytes"), "{gave}");
        }
        let null = serde_json::json!({"samples": [
            {"phase": "baseline", "iterations": 0, "private_bytes": 1, "rss_bytes": 1},
            {"phase": "loop", "iterations": 10, "private_bytes": null, "rss_bytes": 2},
        ]});
        let Parsed::Retention(r, _) = parse(&null, false) else {
            panic!()
        };
        assert_eq!(r.growth.private_bytes, None);
        assert_eq!(r.gaps.growth_null, ["private_bytes"]);
        assert!(!r.gaps.closed);
    }
}
