//! `[schedule]` (DESIGN 3): `repetitions`, `order`, `seed` and `jobs`.

use toml::de::DeTable;

use super::{Validator, did_you_mean};
use crate::manifest::model::{Order, Schedule};

/// Every key of `[schedule]`.
pub(super) const KEYS: &[&str] = &["repetitions", "order", "seed", "jobs"];

impl Validator<'_> {
    pub(super) fn schedule(&mut self, root: &DeTable<'_>) -> Schedule {
        let t = self.section(root, "schedule", KEYS);
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
}
