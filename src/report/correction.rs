//! The multiplicity control of the estimates against the control (DESIGN 9, issue 36): each of
//! the k compared cells at its level / k (Bonferroni; the level is 0.05, or a sequential design's
//! level at the cell's planned runs), Holm within a cell over a byte measure's growth and rate
//! (one decision per cell); other figures (after-close, a `[report] metrics` pointer) are a
//! family of their own.

use super::metrics::{ByteMeasure, Family, Metric, VerdictMetric};
use super::model::RunValues;
use crate::stats::{self, Shift};

/// One figure estimated against the control: a built-in metric, or the `k`-th `[report]
/// metrics` pointer (estimated only as the verdict metric).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Figure {
    /// A built-in metric.
    Metric(Metric),
    /// The `k`-th `[report] metrics` pointer.
    Pointer(usize),
}

impl Figure {
    /// The row's `metric`: the metric's key or the pointer's name.
    pub fn key(self, data: &RunValues) -> String {
        match self {
            Figure::Metric(m) => m.key().to_string(),
            Figure::Pointer(k) => data.pointers()[k].clone(),
        }
    }

    /// Run `run`'s usable value.
    pub fn value(self, data: &RunValues, run: usize) -> Option<f64> {
        match self {
            Figure::Metric(m) => data.metric(run, m),
            Figure::Pointer(k) => data.pointer(run, k),
        }
        .filter(|v| super::metrics::usable(*v))
    }

    /// What runs gave instead of a usable value.
    pub fn unusable(self, data: &RunValues, runs: &[usize]) -> Option<String> {
        match self {
            Figure::Metric(m) => data.unusable_values(runs.iter().copied(), m),
            Figure::Pointer(k) => data.pointer_unusable_values(runs.iter().copied(), k),
        }
    }

    /// The equivalence margin that applies, of `growth` (growth and after-close, bytes) and
    /// `rate` (bytes per 1000 iterations).
    pub fn margin(self, growth: Option<f64>, rate: Option<f64>) -> Option<f64> {
        let Figure::Metric(m) = self else {
            return None;
        };
        match m.def().family {
            Family::Growth | Family::AfterClose => growth,
            Family::Rate => rate,
            Family::Other => None,
        }
    }

    /// The family Holm runs over within a cell: the byte measure whose growth or rate it is
    /// (`None`: a family of its own).
    pub fn family(self) -> Option<ByteMeasure> {
        match self {
            Figure::Metric(m) => ByteMeasure::of_figure(m),
            Figure::Pointer(_) => None,
        }
    }
}

/// The figures estimated against the control: every metric of [`super::metrics::Def::vs_control`],
/// and the verdict metric's figures when they are not among them.
pub fn figures(verdict: &VerdictMetric) -> Vec<Figure> {
    let mut out: Vec<Figure> = Metric::ALL
        .iter()
        .copied()
        .filter(|m| m.def().vs_control)
        .map(Figure::Metric)
        .collect();
    match verdict {
        VerdictMetric::Bytes(b) => {
            for m in [b.growth(), b.rate()] {
                if !m.def().vs_control {
                    out.push(Figure::Metric(m));
                }
            }
        }
        VerdictMetric::Pointer(k, _) => out.push(Figure::Pointer(*k)),
    }
    out
}

/// How one figure of a cell is judged ([`judge_cell`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    /// Holm's p within the cell's family of the figure, times the compared cells, at most 1:
    /// compared with the cell's level.
    pub p_adjusted: f64,
    /// The level the smallest p the runs allow must be below for a decision (else `too few
    /// runs`): the family's first Holm step while no figure of it can pass that, else the
    /// cell's Bonferroni level.
    pub check_level: f64,
    /// The level of the family's first Holm step (cell level / k / figures tested).
    pub first_step: f64,
}

/// The multiplicity control of one cell at level `alpha` among `k` compared cells: for each of
/// `figures` (its shift by index from `shift`), Holm's adjusted p within its family (a byte
/// measure's growth and rate; other figures alone) times `k` (Bonferroni across cells).
pub fn judge_cell(
    figures: &[Figure],
    shift: impl Fn(usize) -> (usize, usize, Option<Shift>),
    alpha: f64,
    k: f64,
) -> Vec<Judged> {
    let cell_level = alpha / k;
    let mut out = vec![
        Judged {
            p_adjusted: 1.0,
            check_level: cell_level,
            first_step: cell_level,
        };
        figures.len()
    ];
    let mut done = vec![false; figures.len()];
    for i in 0..figures.len() {
        if done[i] {
            continue;
        }
        let members: Vec<usize> = match figures[i].family() {
            None => vec![i],
            Some(fam) => (0..figures.len())
                .filter(|&j| figures[j].family() == Some(fam))
                .collect(),
        };
        let tested: Vec<(usize, Shift)> = members
            .iter()
            .filter_map(|&j| shift(j).2.map(|s| (j, s)))
            .collect();
        let m = tested.len().max(1) as f64;
        let first_step = cell_level / m;
        let adjusted = stats::holm(&tested.iter().map(|(_, s)| s.p).collect::<Vec<_>>());
        let can_start = tested
            .iter()
            .any(|(_, s)| stats::smallest_p(s.n_x, s.n_y) < first_step);
        for &j in &members {
            done[j] = true;
            out[j].first_step = first_step;
            out[j].check_level = if can_start { cell_level } else { first_step };
        }
        for ((j, _), p) in tested.iter().zip(adjusted) {
            out[*j].p_adjusted = (p * k).min(1.0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Verdict;

    fn shift_of(p: f64, n: usize) -> Shift {
        Shift {
            n_x: n,
            n_y: n,
            shift: 1.0,
            ci_low: 0.5,
            ci_high: 1.5,
            confidence: 0.95,
            p,
            exact: true,
        }
    }

    #[test]
    fn bonferroni_across_cells_and_holm_within() {
        let figures = [
            Figure::Metric(Metric::AnonymousGrowth),
            Figure::Metric(Metric::AnonymousRate),
            Figure::Metric(Metric::AnonymousAfterClose),
        ];
        // Growth p 0.01, rate p 0.02, after-close p 0.03; 2 cells at 0.05.
        let ps = [0.01, 0.02, 0.03];
        let j = judge_cell(&figures, |f| (8, 8, Some(shift_of(ps[f], 8))), 0.05, 2.0);
        // Holm within (growth, rate): 0.02 and max(0.02, 0.02) = 0.02; times 2 cells.
        assert!((j[0].p_adjusted - 0.04).abs() < 1e-12, "{j:?}");
        assert!((j[1].p_adjusted - 0.04).abs() < 1e-12, "{j:?}");
        // After-close is a family of its own: Bonferroni only.
        assert!((j[2].p_adjusted - 0.06).abs() < 1e-12, "{j:?}");
        assert_eq!((j[0].first_step, j[2].first_step), (0.0125, 0.025));
        // 4 runs a side: the smallest p (2/70 = 0.029) cannot pass Holm's first step (0.025)
        // for one cell: too few runs for growth and rate alike.
        let j = judge_cell(
            &figures[..2],
            |f| (4, 4, Some(shift_of([0.029, 0.029][f], 4))),
            0.05,
            1.0,
        );
        assert_eq!(j[0].check_level, 0.025);
        let s = shift_of(0.0286, 4);
        assert_eq!(
            stats::verdict::decide(Some(&s), j[0].p_adjusted, j[0].check_level, 0.05, None),
            Verdict::TooFewRuns
        );
        assert_eq!(stats::repetitions_needed(j[0].first_step), 5);
        // Without a rate (unusable in every run): the growth alone, at the cell's level.
        let j = judge_cell(
            &figures[..2],
            |f| (4, 4, (f == 0).then(|| shift_of(0.0286, 4))),
            0.05,
            1.0,
        );
        assert_eq!((j[0].check_level, j[0].p_adjusted), (0.05, 0.0286));
    }
}
