//! `[schedule]` (DESIGN 3): `repetitions`, `order`, `seed` and `jobs`.

use toml::de::{DeTable, DeValue};

use super::{Validator, did_you_mean};
use crate::manifest::model::{Adaptive, Order, Schedule, Until};

/// Every key of `[schedule]`.
pub(super) const KEYS: &[&str] = &["repetitions", "order", "seed", "jobs"];

/// Every key of an adaptive `repetitions = { ... }`.
pub(super) const ADAPTIVE_KEYS: &[&str] = &["min", "max", "until", "time-budget"];

/// Smallest `min` of an adaptive rule: with one run per side no interval exists.
pub const ADAPTIVE_MIN: u32 = 2;

impl Validator<'_> {
    pub(super) fn schedule(&mut self, root: &DeTable<'_>) -> Schedule {
        let t = self.section(root, "schedule", KEYS);
        let mut s = Schedule {
            repetitions: 1,
            adaptive: None,
            order: Order::Interleaved,
            seed: None,
            jobs: 1,
        };
        let mut adaptive_span = None;
        if let Some(v) = self.field(t, "schedule", "repetitions") {
            match v.get_ref() {
                DeValue::Table(rule) => {
                    adaptive_span = Some(v.span());
                    if let Some(a) = self.adaptive(rule, v.span()) {
                        s.repetitions = a.min;
                        s.adaptive = Some(a);
                    }
                }
                DeValue::Integer(_) => s.repetitions = self.positive(v, "repetitions").unwrap_or(1),
                _ => self.type_err(
                    v,
                    "a number of runs per cell, or a rule like { min = 4, max = 30, until = \"decided\" }",
                ),
            }
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
        if s.seed.is_some() && s.order != Order::Shuffled {
            let at = self.spans.get("schedule.seed").cloned().unwrap_or(0..0);
            self.warn(
                at,
                format!(
                    "`seed` has no effect with order = \"{}\": only \"shuffled\" uses it",
                    s.order.as_str()
                ),
                Some("add order = \"shuffled\" to the [schedule], or remove `seed`".into()),
            );
        }
        if let (Some(span), Order::Grouped) = (adaptive_span, s.order) {
            let at = self.spans.get("schedule.order").cloned().unwrap_or(span);
            self.err(
                at,
                "adaptive repetitions run in interleaved rounds; `order = \"grouped\"` cannot be used with them",
                Some("use order = \"interleaved\" (default) or \"shuffled\" (each round shuffled), or a fixed number of repetitions".into()),
            );
        }
        s
    }

    /// `repetitions = { min, max, until, time-budget }`; `None` after an error.
    fn adaptive(&mut self, rule: &DeTable<'_>, span: std::ops::Range<usize>) -> Option<Adaptive> {
        self.check_keys(rule, ADAPTIVE_KEYS, "schedule.repetitions", "in `repetitions`");
        let mut ok = true;
        let bound = |me: &mut Self, key: &str| -> Option<(u32, std::ops::Range<usize>)> {
            let Some(v) = rule.get(key) else {
                me.err(
                    span.clone(),
                    format!("adaptive `repetitions` needs `{key}`"),
                    Some("write it like repetitions = { min = 4, max = 30, until = \"decided\" }".into()),
                );
                return None;
            };
            me.spans.insert(format!("schedule.repetitions.{key}"), v.span());
            let n: u32 = me.positive(v, &format!("repetitions.{key}"))?;
            Some((n, v.span()))
        };
        let min = bound(self, "min");
        let max = bound(self, "max");
        if let Some((n, at)) = &min
            && *n < ADAPTIVE_MIN
        {
            self.err(
                at.clone(),
                format!("`repetitions.min` must be at least {ADAPTIVE_MIN}, found {n}"),
                Some("with one run per side no interval and no verdict exist; 4 runs per side are the fewest that can reach p < 0.05".into()),
            );
            ok = false;
        }
        if let (Some((lo, _)), Some((hi, at))) = (&min, &max)
            && lo > hi
        {
            self.err(
                at.clone(),
                format!("`repetitions.max` ({hi}) is below `repetitions.min` ({lo})"),
                Some("max is the most runs a cell gets; make it at least min".into()),
            );
            ok = false;
        }
        let until = match rule.get("until") {
            None => Some(Until::Decided),
            Some(v) => {
                self.spans.insert("schedule.repetitions.until".into(), v.span());
                match self.string(v) {
                    Some("decided") => Some(Until::Decided),
                    Some(other) => {
                        let help = match did_you_mean(other, ["decided"]) {
                            Some(s) => format!("did you mean \"{s}\"? "),
                            None => String::new(),
                        };
                        self.err(
                            v.span(),
                            format!("unknown `until` \"{other}\""),
                            Some(format!("{help}valid values: \"decided\" (the verdict against the control is above, below or equivalent)")),
                        );
                        None
                    }
                    None => None,
                }
            }
        };
        let time_budget = match rule.get("time-budget") {
            None => Some(None),
            Some(v) => {
                self.spans
                    .insert("schedule.repetitions.time-budget".into(), v.span());
                self.positive_duration(v, "repetitions.time-budget").map(Some)
            }
        };
        Some(Adaptive {
            min: min?.0,
            max: max?.0,
            until: until?,
            time_budget: time_budget?,
        })
        .filter(|_| ok)
    }
}
