//! The verdict words of DESIGN 9, from an interval, a (corrected) p-value and an optional margin.
//! No portable threshold: the only numbers are the test level and the margin the manifest sets.

use serde::Serialize;

use super::Shift;

/// What the data allow about one cell against its control (DESIGN 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// The interval lies above 0 (and the corrected p is below the level).
    #[serde(rename = "above control")]
    AboveControl,
    /// The interval lies below 0 (and the corrected p is below the level).
    #[serde(rename = "below control")]
    BelowControl,
    /// The interval contains 0 (or the corrected p is not below the level).
    #[serde(rename = "no detectable difference")]
    NoDetectableDifference,
    /// An equivalence margin is set and the interval lies inside it.
    #[serde(rename = "equivalent")]
    Equivalent,
    /// The smallest p-value these numbers of runs can give is not below the level.
    #[serde(rename = "too few runs")]
    TooFewRuns,
}

impl Verdict {
    /// The verdict's words, as in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::AboveControl => "above control",
            Verdict::BelowControl => "below control",
            Verdict::NoDetectableDifference => "no detectable difference",
            Verdict::Equivalent => "equivalent",
            Verdict::TooFewRuns => "too few runs",
        }
    }

    /// The same call in `compare`'s words (B against A).
    pub const fn as_compare(self) -> CompareVerdict {
        match self {
            Verdict::AboveControl => CompareVerdict::HigherInB,
            Verdict::BelowControl => CompareVerdict::LowerInB,
            Verdict::NoDetectableDifference => CompareVerdict::NoDetectableChange,
            Verdict::Equivalent => CompareVerdict::Reproduced,
            Verdict::TooFewRuns => CompareVerdict::TooFewRuns,
        }
    }
}

/// What the data allow about one cell of bundle B against the same cell of bundle A (DESIGN 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CompareVerdict {
    /// The interval contains 0.
    #[serde(rename = "no detectable change")]
    NoDetectableChange,
    /// The interval lies above 0.
    #[serde(rename = "higher in B")]
    HigherInB,
    /// The interval lies below 0.
    #[serde(rename = "lower in B")]
    LowerInB,
    /// A margin is set and the interval lies inside it.
    #[serde(rename = "reproduced")]
    Reproduced,
    /// Too few runs on a side for any test to reach the level.
    #[serde(rename = "too few runs")]
    TooFewRuns,
}

impl CompareVerdict {
    /// The verdict's words, as in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            CompareVerdict::NoDetectableChange => "no detectable change",
            CompareVerdict::HigherInB => "higher in B",
            CompareVerdict::LowerInB => "lower in B",
            CompareVerdict::Reproduced => "reproduced",
            CompareVerdict::TooFewRuns => "too few runs",
        }
    }
}

/// The verdict of `shift` (`None`: a side has no runs) with `p_adjusted` its p-value after the
/// family's correction, `level` the level the smallest attainable p must be below (0.05, divided
/// by the number of comparisons under Holm), `alpha` the family's level the corrected p is
/// compared with ([`super::ALPHA`], or less at a look of a sequential design) and `margin` the
/// equivalence margin, if any.
pub fn decide(
    shift: Option<&Shift>,
    p_adjusted: f64,
    level: f64,
    alpha: f64,
    margin: Option<f64>,
) -> Verdict {
    let Some(s) = shift else {
        return Verdict::TooFewRuns;
    };
    if super::smallest_p(s.n_x, s.n_y) >= level {
        return Verdict::TooFewRuns;
    }
    if let Some(m) = margin
        && -m <= s.ci_low
        && s.ci_high <= m
    {
        return Verdict::Equivalent;
    }
    if p_adjusted < alpha && s.ci_low > 0.0 {
        Verdict::AboveControl
    } else if p_adjusted < alpha && s.ci_high < 0.0 {
        Verdict::BelowControl
    } else {
        Verdict::NoDetectableDifference
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_match_serde() {
        for v in [
            Verdict::AboveControl,
            Verdict::BelowControl,
            Verdict::NoDetectableDifference,
            Verdict::Equivalent,
            Verdict::TooFewRuns,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
            let c = v.as_compare();
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }

    #[test]
    fn decisions() {
        let up = crate::stats::shift(&[10.0, 11.0, 12.0, 13.0, 14.0], &[0.0, 1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(decide(Some(&up), up.p, 0.05, 0.05, None), Verdict::AboveControl);
        assert_eq!(
            decide(Some(&up), up.p, 0.05, 0.05, Some(100.0)),
            Verdict::Equivalent
        );
        assert_eq!(
            decide(Some(&up), 0.2, 0.05, 0.05, None),
            Verdict::NoDetectableDifference
        );
        let two = crate::stats::shift(&[10.0, 11.0], &[0.0, 1.0]).unwrap();
        assert_eq!(decide(Some(&two), two.p, 0.05, 0.05, None), Verdict::TooFewRuns);
        assert_eq!(decide(None, 1.0, 0.05, 0.05, None), Verdict::TooFewRuns);
    }
}
