//! The one table of metrics a report knows from the retention schema (DESIGN 2, 7, 9).
//!
//! Each metric is defined once, here: its key (JSON and model key; CSV names it with `_` for `-`),
//! its label (table headers), its unit, where it comes from, which tables show it and whether it is
//! estimated against the control and compared between bundles. Every format (table, Markdown, CSV,
//! JSON, HTML) and `compare` read this table; none keeps a list of its own.
//!
//! Adding a metric: a variant in the `metrics!` list, its [`Metric::def`] arm and its
//! [`Metric::of`] arm (both matches are exhaustive, so a missed edit does not compile), plus the
//! sample field it reads in [`crate::bundle::retention`] when it needs a new one, and a line in
//! docs/report.md.

use std::fmt;

use serde::Serialize;

use crate::bundle::retention::{Retention, SampleField};

pub use crate::bundle::summary::{EXACT_INTEGERS, INEXACT, usable};

/// Runs counted by what they gave: `2 runs gave null for private_bytes, 1 run gave a string for
/// private_bytes` (most frequent first); `None` for no runs.
pub fn runs_gave<'a>(gave: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for g in gave {
        match counts.iter_mut().find(|(x, _)| *x == g) {
            Some((_, n)) => *n += 1,
            None => counts.push((g, 1)),
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    (!counts.is_empty()).then(|| {
        counts
            .iter()
            .map(|(g, n)| format!("{n} run{} gave {g}", if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// What a metric's numbers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// Bytes (signed: memory can shrink). Shown in KiB / MiB in tables, exact in CSV and JSON.
    Bytes,
    /// Bytes per 1000 loop iterations.
    BytesPer1000,
    /// A count (file descriptors).
    Count,
}

/// Which family a metric belongs to: which equivalence margin applies to it (DESIGN 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// Growth: final `loop` sample minus `baseline` (bytes); the growth margin applies.
    Growth,
    /// Growth divided by loop iterations, or a Theil-Sen slope (bytes per 1000 iterations); the
    /// rate margin applies.
    Rate,
    /// After-close: `closed` sample minus `baseline` (bytes); the growth margin applies.
    AfterClose,
    /// Anything else (no margin).
    Other,
}

/// Which per-run table shows a metric (every metric is in CSV and JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTable {
    /// "Retention per run": growth, growth per 1000 iterations, after-close, fd delta.
    Growth,
    /// "Retention rate per run": the Theil-Sen slopes.
    Rate,
}

/// The definition of one metric (see [`Metric::def`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Def {
    /// Key in JSON (`retention` of a cell, `metric` of an estimate) and the CSV column name with
    /// `_` for `-`.
    pub key: &'static str,
    /// Column label in tables.
    pub label: &'static str,
    /// Unit of the values.
    pub unit: Unit,
    /// Family (which margin applies).
    pub family: Family,
    /// Where the value comes from, for docs/report.md and the notes under tables.
    pub source: &'static str,
    /// The per-run table that shows it.
    pub run_table: RunTable,
    /// Shown in the per-cell table (min / median / max across repetitions). Every metric is in the
    /// per-run table, CSV and JSON.
    pub per_cell: bool,
    /// Estimated against the control (Hodges-Lehmann shift with interval, verdict).
    pub vs_control: bool,
    /// Compared between two bundles by `compare` (shift B - A with interval, verdict).
    pub compared: bool,
}

macro_rules! metrics {
    ($($(#[$doc:meta])* $name:ident,)+) => {
        /// A metric read from the retention schema of one run's output (see [`Metric::def`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Metric {
            $($(#[$doc])* $name,)+
        }

        impl Metric {
            /// Every metric, in the order of every table's columns and CSV's.
            pub const ALL: &'static [Metric] = &[$(Metric::$name,)+];
        }
    };
}

metrics! {
    /// Private bytes growth.
    PrivateGrowth,
    /// Private growth per 1000 loop iterations.
    PrivateGrowthPer1000,
    /// Anonymous bytes growth.
    AnonymousGrowth,
    /// Anonymous growth per 1000 loop iterations.
    AnonymousGrowthPer1000,
    /// RSS growth.
    RssGrowth,
    /// RSS growth per 1000 loop iterations.
    RssGrowthPer1000,
    /// File-backed private bytes growth (private minus anonymous).
    FileBackedGrowth,
    /// `Pss_Anon` growth.
    PssAnonGrowth,
    /// Theil-Sen slope of private bytes.
    PrivateRate,
    /// Theil-Sen slope of private bytes, first half of the loop.
    PrivateRateFirstHalf,
    /// Theil-Sen slope of private bytes, second half of the loop.
    PrivateRateSecondHalf,
    /// Theil-Sen slope of anonymous bytes.
    AnonymousRate,
    /// Theil-Sen slope of anonymous bytes, first half.
    AnonymousRateFirstHalf,
    /// Theil-Sen slope of anonymous bytes, second half.
    AnonymousRateSecondHalf,
    /// Theil-Sen slope of RSS.
    RssRate,
    /// Theil-Sen slope of RSS, first half.
    RssRateFirstHalf,
    /// Theil-Sen slope of RSS, second half.
    RssRateSecondHalf,
    /// Theil-Sen slope of file-backed private bytes (private minus anonymous).
    FileBackedRate,
    /// Theil-Sen slope of `Pss_Anon`.
    PssAnonRate,
    /// Private bytes after close.
    PrivateAfterClose,
    /// Anonymous bytes after close.
    AnonymousAfterClose,
    /// RSS after close.
    RssAfterClose,
    /// Open file descriptors, final loop sample minus baseline.
    FdDelta,
}

impl Metric {
    /// The metric's definition: one entry per metric, grouped by family in `defs` (the match
    /// has no catch-all arm, so a new metric does not compile until its entry is written).
    pub const fn def(self) -> Def {
        match self {
            Metric::PrivateGrowth => defs::PRIVATE_GROWTH,
            Metric::AnonymousGrowth => defs::ANONYMOUS_GROWTH,
            Metric::RssGrowth => defs::RSS_GROWTH,
            Metric::FileBackedGrowth => defs::FILE_BACKED_GROWTH,
            Metric::PssAnonGrowth => defs::PSS_ANON_GROWTH,
            Metric::PrivateGrowthPer1000 => defs::PRIVATE_GROWTH_PER1000,
            Metric::AnonymousGrowthPer1000 => defs::ANONYMOUS_GROWTH_PER1000,
            Metric::RssGrowthPer1000 => defs::RSS_GROWTH_PER1000,
            Metric::PrivateRate => defs::PRIVATE_RATE,
            Metric::PrivateRateFirstHalf => defs::PRIVATE_RATE_FIRST_HALF,
            Metric::PrivateRateSecondHalf => defs::PRIVATE_RATE_SECOND_HALF,
            Metric::AnonymousRate => defs::ANONYMOUS_RATE,
            Metric::AnonymousRateFirstHalf => defs::ANONYMOUS_RATE_FIRST_HALF,
            Metric::AnonymousRateSecondHalf => defs::ANONYMOUS_RATE_SECOND_HALF,
            Metric::RssRate => defs::RSS_RATE,
            Metric::RssRateFirstHalf => defs::RSS_RATE_FIRST_HALF,
            Metric::RssRateSecondHalf => defs::RSS_RATE_SECOND_HALF,
            Metric::FileBackedRate => defs::FILE_BACKED_RATE,
            Metric::PssAnonRate => defs::PSS_ANON_RATE,
            Metric::PrivateAfterClose => defs::PRIVATE_AFTER_CLOSE,
            Metric::AnonymousAfterClose => defs::ANONYMOUS_AFTER_CLOSE,
            Metric::RssAfterClose => defs::RSS_AFTER_CLOSE,
            Metric::FdDelta => defs::FD_DELTA,
        }
    }

    /// The metric's value for one run's retention numbers; `None` when the run lacks it (a field
    /// missing from a sample, no closed sample, a loop of 0 iterations), never 0.
    pub fn of(self, r: &Retention) -> Option<f64> {
        let f = |x: Option<i128>| x.map(|v| v as f64);
        match self {
            Metric::PrivateGrowth => f(r.growth.private_bytes),
            Metric::AnonymousGrowth => f(r.growth.anonymous_bytes),
            Metric::RssGrowth => f(r.growth.rss_bytes),
            Metric::PrivateGrowthPer1000 => r.per_1000(r.growth.private_bytes),
            Metric::AnonymousGrowthPer1000 => r.per_1000(r.growth.anonymous_bytes),
            Metric::RssGrowthPer1000 => r.per_1000(r.growth.rss_bytes),
            Metric::FileBackedGrowth => f(r.growth.file_backed_bytes()),
            Metric::PssAnonGrowth => f(r.growth.pss_anon_bytes),
            Metric::PrivateRate => r.rate.private_bytes.all,
            Metric::PrivateRateFirstHalf => r.rate.private_bytes.first_half,
            Metric::PrivateRateSecondHalf => r.rate.private_bytes.second_half,
            Metric::AnonymousRate => r.rate.anonymous_bytes.all,
            Metric::AnonymousRateFirstHalf => r.rate.anonymous_bytes.first_half,
            Metric::AnonymousRateSecondHalf => r.rate.anonymous_bytes.second_half,
            Metric::RssRate => r.rate.rss_bytes.all,
            Metric::RssRateFirstHalf => r.rate.rss_bytes.first_half,
            Metric::RssRateSecondHalf => r.rate.rss_bytes.second_half,
            Metric::FileBackedRate => r.rate.file_backed_bytes.all,
            Metric::PssAnonRate => r.rate.pss_anon_bytes.all,
            Metric::PrivateAfterClose => f(r.after_close.private_bytes),
            Metric::AnonymousAfterClose => f(r.after_close.anonymous_bytes),
            Metric::RssAfterClose => f(r.after_close.rss_bytes),
            Metric::FdDelta => f(r.fd_delta),
        }
    }

    /// The sample field the metric is computed from.
    pub const fn sample_field(self) -> SampleField {
        match self {
            Metric::PrivateGrowth
            | Metric::PrivateGrowthPer1000
            | Metric::PrivateRate
            | Metric::PrivateRateFirstHalf
            | Metric::PrivateRateSecondHalf
            | Metric::PrivateAfterClose
            | Metric::FileBackedGrowth
            | Metric::FileBackedRate => SampleField::PrivateBytes,
            Metric::PssAnonGrowth | Metric::PssAnonRate => SampleField::PssAnonBytes,
            Metric::AnonymousGrowth
            | Metric::AnonymousGrowthPer1000
            | Metric::AnonymousRate
            | Metric::AnonymousRateFirstHalf
            | Metric::AnonymousRateSecondHalf
            | Metric::AnonymousAfterClose => SampleField::AnonymousBytes,
            Metric::RssGrowth
            | Metric::RssGrowthPer1000
            | Metric::RssRate
            | Metric::RssRateFirstHalf
            | Metric::RssRateSecondHalf
            | Metric::RssAfterClose => SampleField::RssBytes,
            Metric::FdDelta => SampleField::FdCount,
        }
    }

    /// What a run gave instead of a usable value of this metric (`null for private_bytes`, `no
    /// closed sample`, [`INEXACT`]), to count runs by; `None` when its value is usable.
    pub fn unusable(self, r: &Retention) -> Option<&'static str> {
        if let Some(v) = self.of(r) {
            return (!usable(v)).then_some(INEXACT);
        }
        // File-backed bytes need both private and anonymous bytes: named by the one missing.
        let field = if ByteMeasure::of_figure(self) == Some(ByteMeasure::FileBacked)
            && r.growth.private_bytes.is_some()
        {
            SampleField::AnonymousBytes
        } else {
            self.sample_field()
        };
        let null = |list: &[&str]| list.contains(&field.name());
        let text = |null: bool| -> &'static str {
            match (null, field) {
                (true, SampleField::PrivateBytes) => "null for private_bytes",
                (true, SampleField::AnonymousBytes) => "null for anonymous_bytes",
                (true, SampleField::RssBytes) => "null for rss_bytes",
                (true, SampleField::PssAnonBytes) => "null for pss_anon_bytes",
                (true, _) => "null for fd_count",
                (false, SampleField::PrivateBytes) => "no private_bytes",
                (false, SampleField::AnonymousBytes) => "no anonymous_bytes",
                (false, SampleField::RssBytes) => "no rss_bytes",
                (false, SampleField::PssAnonBytes) => "no pss_anon_bytes",
                (false, _) => "no fd_count",
            }
        };
        let growth = match field {
            SampleField::PrivateBytes => r.growth.private_bytes,
            SampleField::AnonymousBytes => r.growth.anonymous_bytes,
            SampleField::RssBytes => r.growth.rss_bytes,
            SampleField::PssAnonBytes => r.growth.pss_anon_bytes,
            _ => r.fd_delta,
        };
        Some(match self.def().family {
            Family::AfterClose if !r.gaps.closed => "no closed sample",
            Family::AfterClose => text(null(&r.gaps.closed_null) || null(&r.gaps.growth_null)),
            _ if growth.is_none() => text(null(&r.gaps.growth_null)),
            _ if r.loop_iterations == 0 => "a loop of 0 iterations",
            _ if self.def().run_table == RunTable::Rate && r.rate_unusable.is_some() => r
                .rate_unusable
                .unwrap_or(crate::bundle::retention::RATE_ONE_SAMPLE),
            _ => "too few loop samples at different iterations for a rate",
        })
    }

    /// The value as exact text for CSV and the per-run table: integers as integers (exact whatever
    /// their size), others in full precision; `None` when the run lacks it.
    pub fn exact(self, r: &Retention) -> Option<String> {
        self.exact_value(r).map(|v| v.to_string())
    }

    /// [`Metric::exact`] before it is made text: what a CSV row writes without a `String` a
    /// field.
    pub fn exact_value(self, r: &Retention) -> Option<Exact> {
        let i = |x: Option<i128>| x.map(Exact::Integer);
        let f = |x: Option<f64>| x.map(Exact::Number);
        // Bytes and counts exactly, figures per 1000 iterations in full precision (the
        // `metrics_exact_are_integers_unless_per_1000` test holds this to `Def::unit`).
        match self {
            Metric::PrivateGrowth => i(r.growth.private_bytes),
            Metric::AnonymousGrowth => i(r.growth.anonymous_bytes),
            Metric::RssGrowth => i(r.growth.rss_bytes),
            Metric::FileBackedGrowth => i(r.growth.file_backed_bytes()),
            Metric::PssAnonGrowth => i(r.growth.pss_anon_bytes),
            Metric::PrivateAfterClose => i(r.after_close.private_bytes),
            Metric::AnonymousAfterClose => i(r.after_close.anonymous_bytes),
            Metric::RssAfterClose => i(r.after_close.rss_bytes),
            Metric::FdDelta => i(r.fd_delta),
            Metric::PrivateGrowthPer1000
            | Metric::AnonymousGrowthPer1000
            | Metric::RssGrowthPer1000
            | Metric::PrivateRate
            | Metric::PrivateRateFirstHalf
            | Metric::PrivateRateSecondHalf
            | Metric::AnonymousRate
            | Metric::AnonymousRateFirstHalf
            | Metric::AnonymousRateSecondHalf
            | Metric::RssRate
            | Metric::RssRateFirstHalf
            | Metric::RssRateSecondHalf
            | Metric::FileBackedRate
            | Metric::PssAnonRate => f(self.of(r)),
        }
    }

    /// The key (see [`Def::key`]).
    pub const fn key(self) -> &'static str {
        self.def().key
    }

    /// The CSV column name: the key with `_` for `-`.
    pub fn csv_name(self) -> String {
        self.key().replace('-', "_")
    }

    /// The metric whose key is `key`.
    pub fn from_key(key: &str) -> Option<Metric> {
        Metric::ALL.iter().copied().find(|m| m.key() == key)
    }
}

/// The definition of each metric ([`Metric::def`]), grouped by family.
mod defs {
    use super::{Def, Family, Family::*, RunTable, Unit, Unit::*};

    /// A metric shown per cell and compared between bundles, not estimated against the control.
    const fn d(
        key: &'static str,
        label: &'static str,
        unit: Unit,
        family: Family,
        source: &'static str,
    ) -> Def {
        Def {
            key,
            label,
            unit,
            family,
            source,
            run_table: RunTable::Growth,
            per_cell: true,
            vs_control: false,
            compared: true,
        }
    }
    /// A rate: the whole-loop one is estimated against the control and compared, the halves
    /// only shown per run.
    const fn rate(key: &'static str, label: &'static str, whole: bool, source: &'static str) -> Def {
        Def {
            run_table: RunTable::Rate,
            per_cell: whole,
            vs_control: whole,
            compared: whole,
            ..d(key, label, Unit::BytesPer1000, Family::Rate, source)
        }
    }

    // Growth: final loop sample minus baseline (bytes).

    /// `Metric::PrivateGrowth`.
    pub(super) const PRIVATE_GROWTH: Def = Def {
        vs_control: true,
        ..d(
            "private-growth-bytes",
            "private growth",
            Bytes,
            Growth,
            "private_bytes of the final loop sample minus the baseline's",
        )
    };

    /// `Metric::AnonymousGrowth`.
    pub(super) const ANONYMOUS_GROWTH: Def = Def {
        vs_control: true,
        ..d(
            "anonymous-growth-bytes",
            "anon growth",
            Bytes,
            Growth,
            "anonymous_bytes of the final loop sample minus the baseline's",
        )
    };

    /// `Metric::RssGrowth`.
    pub(super) const RSS_GROWTH: Def = Def {
        vs_control: true,
        ..d(
            "rss-growth-bytes",
            "RSS growth",
            Bytes,
            Growth,
            "rss_bytes of the final loop sample minus the baseline's",
        )
    };

    // File-backed private residency: its own rows against the control, never the
    // headline (DESIGN 9); not in the per-cell table or `compare`.
    pub(super) const FILE_BACKED_GROWTH: Def = Def {
        vs_control: true,
        per_cell: false,
        compared: false,
        ..d(
            "file-backed-growth-bytes",
            "file-backed growth",
            Bytes,
            Growth,
            "private_bytes minus anonymous_bytes (file-backed private pages) of the final loop sample minus the baseline's",
        )
    };

    // Estimated against the control only as the verdict metric (`pss-anon`).
    pub(super) const PSS_ANON_GROWTH: Def = Def {
        per_cell: false,
        compared: false,
        ..d(
            "pss-anon-growth-bytes",
            "PSS-anon growth",
            Bytes,
            Growth,
            "pss_anon_bytes of the final loop sample minus the baseline's (where the output has it)",
        )
    };

    // Growth per 1000 loop iterations.

    /// `Metric::PrivateGrowthPer1000`.
    pub(super) const PRIVATE_GROWTH_PER1000: Def = Def {
        ..d(
            "private-growth-per-1000",
            "private /1k it",
            BytesPer1000,
            Rate,
            "private growth x 1000 / loop iterations",
        )
    };

    /// `Metric::AnonymousGrowthPer1000`.
    pub(super) const ANONYMOUS_GROWTH_PER1000: Def = Def {
        per_cell: false,
        compared: false,
        ..d(
            "anonymous-growth-per-1000",
            "anon /1k it",
            BytesPer1000,
            Rate,
            "anonymous growth x 1000 / loop iterations",
        )
    };

    /// `Metric::RssGrowthPer1000`.
    pub(super) const RSS_GROWTH_PER1000: Def = Def {
        per_cell: false,
        compared: false,
        ..d(
            "rss-growth-per-1000",
            "RSS /1k it",
            BytesPer1000,
            Rate,
            "RSS growth x 1000 / loop iterations",
        )
    };

    // Theil-Sen slopes per 1000 iterations.

    /// `Metric::PrivateRate`.
    pub(super) const PRIVATE_RATE: Def = rate(
        "private-rate-per-1000",
        "private rate",
        true,
        "Theil-Sen slope of private_bytes over the baseline and loop samples x 1000",
    );

    /// `Metric::PrivateRateFirstHalf`.
    pub(super) const PRIVATE_RATE_FIRST_HALF: Def = rate(
        "private-rate-first-half-per-1000",
        "private rate 1st half",
        false,
        "Theil-Sen slope of private_bytes over the first half of the loop x 1000",
    );

    /// `Metric::PrivateRateSecondHalf`.
    pub(super) const PRIVATE_RATE_SECOND_HALF: Def = rate(
        "private-rate-second-half-per-1000",
        "private rate 2nd half",
        false,
        "Theil-Sen slope of private_bytes over the second half of the loop x 1000",
    );

    /// `Metric::AnonymousRate`.
    pub(super) const ANONYMOUS_RATE: Def = rate(
        "anonymous-rate-per-1000",
        "anon rate",
        true,
        "Theil-Sen slope of anonymous_bytes over the baseline and loop samples x 1000",
    );

    /// `Metric::AnonymousRateFirstHalf`.
    pub(super) const ANONYMOUS_RATE_FIRST_HALF: Def = rate(
        "anonymous-rate-first-half-per-1000",
        "anon rate 1st half",
        false,
        "Theil-Sen slope of anonymous_bytes over the first half of the loop x 1000",
    );

    /// `Metric::AnonymousRateSecondHalf`.
    pub(super) const ANONYMOUS_RATE_SECOND_HALF: Def = rate(
        "anonymous-rate-second-half-per-1000",
        "anon rate 2nd half",
        false,
        "Theil-Sen slope of anonymous_bytes over the second half of the loop x 1000",
    );

    /// `Metric::RssRate`.
    pub(super) const RSS_RATE: Def = rate(
        "rss-rate-per-1000",
        "RSS rate",
        true,
        "Theil-Sen slope of rss_bytes over the baseline and loop samples x 1000",
    );

    /// `Metric::RssRateFirstHalf`.
    pub(super) const RSS_RATE_FIRST_HALF: Def = rate(
        "rss-rate-first-half-per-1000",
        "RSS rate 1st half",
        false,
        "Theil-Sen slope of rss_bytes over the first half of the loop x 1000",
    );

    /// `Metric::RssRateSecondHalf`.
    pub(super) const RSS_RATE_SECOND_HALF: Def = rate(
        "rss-rate-second-half-per-1000",
        "RSS rate 2nd half",
        false,
        "Theil-Sen slope of rss_bytes over the second half of the loop x 1000",
    );

    /// `Metric::FileBackedRate`.
    pub(super) const FILE_BACKED_RATE: Def = Def {
        per_cell: false,
        compared: false,
        ..rate(
            "file-backed-rate-per-1000",
            "file-backed rate",
            true,
            "Theil-Sen slope of private_bytes minus anonymous_bytes over the baseline and loop samples x 1000",
        )
    };

    /// `Metric::PssAnonRate`.
    pub(super) const PSS_ANON_RATE: Def = rate(
        "pss-anon-rate-per-1000",
        "PSS-anon rate",
        false,
        "Theil-Sen slope of pss_anon_bytes over the baseline and loop samples x 1000 (where the output has it)",
    );

    // After-close: closed sample minus baseline (bytes).

    /// `Metric::PrivateAfterClose`.
    pub(super) const PRIVATE_AFTER_CLOSE: Def = Def {
        vs_control: true,
        ..d(
            "private-after-close-bytes",
            "private after-close",
            Bytes,
            AfterClose,
            "private_bytes of the closed sample minus the baseline's",
        )
    };

    /// `Metric::AnonymousAfterClose`.
    pub(super) const ANONYMOUS_AFTER_CLOSE: Def = Def {
        vs_control: true,
        ..d(
            "anonymous-after-close-bytes",
            "anon after-close",
            Bytes,
            AfterClose,
            "anonymous_bytes of the closed sample minus the baseline's",
        )
    };

    /// `Metric::RssAfterClose`.
    pub(super) const RSS_AFTER_CLOSE: Def = Def {
        vs_control: true,
        per_cell: false,
        compared: false,
        ..d(
            "rss-after-close-bytes",
            "RSS after-close",
            Bytes,
            AfterClose,
            "rss_bytes of the closed sample minus the baseline's",
        )
    };

    // Other: file descriptors.

    /// `Metric::FdDelta`.
    pub(super) const FD_DELTA: Def = d(
        "fd-delta",
        "fd delta",
        Count,
        Other,
        "fd_count of the final loop sample minus the baseline's",
    );
}

/// A byte measure the verdict can judge by its growth and rate (`[report] verdict-metric`,
/// DESIGN 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteMeasure {
    /// Anonymous bytes (smaps_rollup `Anonymous`): allocator-path retention; the default.
    Anonymous,
    /// Private bytes (`Private_Clean + Private_Dirty`), file-backed private pages included.
    Private,
    /// RSS, file-backed and shared pages included.
    Rss,
    /// `Pss_Anon` (Linux 5.1+), where the outputs have `pss_anon_bytes`.
    PssAnon,
    /// File-backed private bytes: private minus anonymous.
    FileBacked,
}

impl ByteMeasure {
    /// Every byte measure, in the order of [`crate::manifest::VERDICT_METRICS`].
    pub const ALL: [ByteMeasure; 5] = [
        ByteMeasure::Anonymous,
        ByteMeasure::Private,
        ByteMeasure::Rss,
        ByteMeasure::PssAnon,
        ByteMeasure::FileBacked,
    ];

    /// The name `[report] verdict-metric` gives it.
    pub const fn name(self) -> &'static str {
        match self {
            ByteMeasure::Anonymous => "anonymous",
            ByteMeasure::Private => "private",
            ByteMeasure::Rss => "rss",
            ByteMeasure::PssAnon => "pss-anon",
            ByteMeasure::FileBacked => "file-backed",
        }
    }

    /// What it is, for a title: `anonymous bytes`.
    pub const fn text(self) -> &'static str {
        match self {
            ByteMeasure::Anonymous => "anonymous bytes",
            ByteMeasure::Private => "private bytes",
            ByteMeasure::Rss => "RSS",
            ByteMeasure::PssAnon => "PSS of anonymous pages",
            ByteMeasure::FileBacked => "file-backed private bytes (private minus anonymous)",
        }
    }

    /// Its growth (final loop sample minus baseline, bytes).
    pub const fn growth(self) -> Metric {
        match self {
            ByteMeasure::Anonymous => Metric::AnonymousGrowth,
            ByteMeasure::Private => Metric::PrivateGrowth,
            ByteMeasure::Rss => Metric::RssGrowth,
            ByteMeasure::PssAnon => Metric::PssAnonGrowth,
            ByteMeasure::FileBacked => Metric::FileBackedGrowth,
        }
    }

    /// Its rate (Theil-Sen slope over the loop, bytes per 1000 iterations).
    pub const fn rate(self) -> Metric {
        match self {
            ByteMeasure::Anonymous => Metric::AnonymousRate,
            ByteMeasure::Private => Metric::PrivateRate,
            ByteMeasure::Rss => Metric::RssRate,
            ByteMeasure::PssAnon => Metric::PssAnonRate,
            ByteMeasure::FileBacked => Metric::FileBackedRate,
        }
    }

    /// The measure whose growth or rate `m` is; `None` for any other metric.
    pub fn of_figure(m: Metric) -> Option<ByteMeasure> {
        ByteMeasure::ALL
            .into_iter()
            .find(|b| b.growth() == m || b.rate() == m)
    }

    /// The measure `[report] verdict-metric` names `name`.
    pub fn from_name(name: &str) -> Option<ByteMeasure> {
        ByteMeasure::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// What the verdict judges (`[report] verdict-metric`, DESIGN 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerdictMetric {
    /// A byte measure, by its growth and rate together.
    Bytes(ByteMeasure),
    /// A `[report] metrics` name (index into the pointers, name): its value per run, one figure.
    Pointer(usize, String),
}

impl VerdictMetric {
    /// The verdict metric `name` names, given the `[report] metrics` names `pointers`; `None`
    /// when it names none of them.
    pub fn parse(name: &str, pointers: &[String]) -> Option<VerdictMetric> {
        ByteMeasure::from_name(name)
            .map(VerdictMetric::Bytes)
            .or_else(|| {
                pointers
                    .iter()
                    .position(|p| p == name)
                    .map(|k| VerdictMetric::Pointer(k, name.to_string()))
            })
    }

    /// Its name, as `[report] verdict-metric` gives it.
    pub fn name(&self) -> &str {
        match self {
            VerdictMetric::Bytes(b) => b.name(),
            VerdictMetric::Pointer(_, n) => n,
        }
    }

    /// What the verdict judges, for a title: `anonymous bytes, growth and rate`.
    pub fn text(&self) -> String {
        match self {
            VerdictMetric::Bytes(b) => format!("{}, growth and rate", b.text()),
            VerdictMetric::Pointer(_, n) => format!("{n} ([report] metrics)"),
        }
    }
}

/// A metric's value as [`Metric::exact`] writes it: an integer exactly, a number in full
/// precision (Rust's shortest text that reads back as the same `f64`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exact {
    /// Bytes or a count.
    Integer(i128),
    /// A rate or a per-1000 figure.
    Number(f64),
}

impl fmt::Display for Exact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exact::Integer(v) => fmt::Display::fmt(v, f),
            Exact::Number(v) => fmt::Display::fmt(v, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_kebab_case() {
        let mut keys: Vec<&str> = Metric::ALL.iter().map(|m| m.key()).collect();
        assert!(keys.iter().all(|k| {
            k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        }));
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n);
        for m in Metric::ALL {
            assert_eq!(Metric::from_key(m.key()), Some(*m));
        }
    }

    #[test]
    fn verdict_metrics_are_the_manifests() {
        let names: Vec<&str> = ByteMeasure::ALL.iter().map(|b| b.name()).collect();
        assert_eq!(names, crate::manifest::VERDICT_METRICS);
        assert_eq!(
            crate::manifest::DEFAULT_VERDICT_METRIC,
            ByteMeasure::Anonymous.name()
        );
        for b in ByteMeasure::ALL {
            assert_eq!(ByteMeasure::of_figure(b.growth()), Some(b));
            assert_eq!(ByteMeasure::of_figure(b.rate()), Some(b));
            assert_eq!(b.growth().def().family, Family::Growth);
            assert_eq!(b.rate().def().family, Family::Rate);
        }
        let pointers = ["load".to_string()];
        assert_eq!(
            VerdictMetric::parse("load", &pointers),
            Some(VerdictMetric::Pointer(0, "load".into()))
        );
        assert_eq!(VerdictMetric::parse("nope", &pointers), None);
    }

    #[test]
    fn file_backed_is_private_minus_anonymous_and_rates_say_why_unusable() {
        let sample = |it: u64, private: i64, anon: i64| {
            serde_json::json!({"phase": if it == 0 { "baseline" } else { "loop" }, "iterations": it,
                "private_bytes": private, "anonymous_bytes": anon, "rss_bytes": private, "fd_count": 3})
        };
        let doc = serde_json::json!({"samples": [
            sample(0, 1000, 100), sample(1000, 3000, 1100), sample(2000, 5000, 2100)]});
        let crate::bundle::retention::Parsed::Retention(r, _) = crate::bundle::retention::parse(&doc, false)
        else {
            panic!()
        };
        assert_eq!(Metric::FileBackedGrowth.of(&r), Some(2000.0));
        assert_eq!(Metric::FileBackedRate.of(&r), Some(1000.0));
        assert_eq!(Metric::AnonymousRate.of(&r), Some(1000.0));
        assert_eq!(Metric::PssAnonGrowth.unusable(&r), Some("no pss_anon_bytes"));
        // Iterations that go down: no rate, by name; the growth stays.
        let down = serde_json::json!({"samples": [
            sample(0, 1000, 100), sample(2000, 3000, 1100), sample(1000, 5000, 2100)]});
        let crate::bundle::retention::Parsed::Retention(r, _) = crate::bundle::retention::parse(&down, false)
        else {
            panic!()
        };
        assert_eq!(Metric::AnonymousRate.of(&r), None);
        assert_eq!(
            Metric::AnonymousRate.unusable(&r),
            Some(crate::bundle::retention::RATE_ITERATIONS_DOWN)
        );
        assert_eq!(Metric::AnonymousGrowth.unusable(&r), None);
        // One loop sample: no rate either.
        let one = serde_json::json!({"samples": [sample(0, 1000, 100), sample(2000, 3000, 1100)]});
        let crate::bundle::retention::Parsed::Retention(r, _) = crate::bundle::retention::parse(&one, false)
        else {
            panic!()
        };
        assert_eq!(
            Metric::PrivateRate.unusable(&r),
            Some(crate::bundle::retention::RATE_ONE_SAMPLE)
        );
    }

    /// [`Metric::exact_value`] matches every metric by name: a byte or count figure is an
    /// integer, a figure per 1000 iterations a number, as [`Def::unit`] says.
    #[test]
    fn metrics_exact_are_integers_unless_per_1000() {
        let sample = |phase: &str, it: u64, bytes: i64| {
            serde_json::json!({"phase": phase, "iterations": it, "private_bytes": bytes,
                "anonymous_bytes": bytes / 2, "rss_bytes": bytes, "pss_anon_bytes": bytes / 4, "fd_count": 3})
        };
        let doc = serde_json::json!({"samples": [
            sample("baseline", 0, 1000), sample("loop", 1000, 3000), sample("loop", 2000, 5000),
            sample("loop", 3000, 7000), sample("loop", 4000, 9000), sample("closed", 4000, 2000)]});
        let crate::bundle::retention::Parsed::Retention(r, _) = crate::bundle::retention::parse(&doc, false)
        else {
            panic!()
        };
        for m in Metric::ALL {
            let exact = m.exact_value(&r);
            assert!(exact.is_some(), "{m:?} has no value");
            assert_eq!(
                matches!(exact, Some(Exact::Integer(_))),
                m.def().unit != Unit::BytesPer1000,
                "{m:?}"
            );
        }
    }
}
