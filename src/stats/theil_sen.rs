//! The Theil-Sen slope (Sen 1968): the median of the slopes of all pairs of points with different
//! x, as `scipy.stats.theilslopes` computes it (pairs with equal x are left out; the median of an
//! even count is the mean of the two middle slopes).

/// The Theil-Sen slope of `points` (x, y), in y units per x unit; `None` when fewer than two
/// distinct x values. Differences are taken in `i128` (no wrap for 64-bit extremes) and divided
/// in f64. O(n^2) slopes: callers bound n.
pub fn theil_sen(points: &[(u64, i128)]) -> Option<f64> {
    theil_sen_in(points, &mut Vec::new())
}

/// [`theil_sen`] with the pairwise slopes kept in `slopes` (cleared first): a caller that takes
/// many slopes lends one buffer to all of them instead of an allocation each.
pub fn theil_sen_in(points: &[(u64, i128)], slopes: &mut Vec<f64>) -> Option<f64> {
    slopes.clear();
    slopes.reserve(points.len() * points.len().saturating_sub(1) / 2);
    // Where every x and y is within 2^62 of 0 (byte counts and iterations always are), every
    // difference fits in i64 and is taken there: the same values as `ratio` gives.
    const NARROW: i128 = 1 << 62;
    let narrow = points
        .iter()
        .all(|&(x, y)| i128::from(x) <= NARROW && (-NARROW..=NARROW).contains(&y));
    for (i, &(xi, yi)) in points.iter().enumerate() {
        for &(xj, yj) in &points[i + 1..] {
            if xi == xj {
                continue;
            }
            slopes.push(if narrow {
                (yj as i64 - yi as i64) as f64 / (xj as i64 - xi as i64) as f64
            } else {
                ratio(yj - yi, i128::from(xj) - i128::from(xi))
            });
        }
    }
    super::median(slopes)
}

/// `dy / dx` in `f64`, each rounded to the nearest `f64` first (as `dy as f64 / dx as f64`), by
/// the hardware's `i64` conversion where both fit (nearly always: byte counts and their
/// differences), not the much slower software `i128` one.
fn ratio(dy: i128, dx: i128) -> f64 {
    match (i64::try_from(dy), i64::try_from(dx)) {
        (Ok(dy), Ok(dx)) => dy as f64 / dx as f64,
        _ => dy as f64 / dx as f64,
    }
}

/// Theil-Sen slopes of the whole series and of its first and second halves: points sorted by x,
/// the first half those with x at most the middle of the x range, the second half those with x at
/// least it (a point exactly at the middle is in both).
pub fn halves(points: &mut [(u64, i128)]) -> (Option<f64>, Option<f64>, Option<f64>) {
    halves_in(points, &mut Vec::new())
}

/// [`halves`] with the pairwise slopes kept in `slopes` (see [`theil_sen_in`]).
pub fn halves_in(
    points: &mut [(u64, i128)],
    slopes: &mut Vec<f64>,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    points.sort_by_key(|p| p.0);
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return (None, None, None);
    };
    let mid = first.0 + (last.0 - first.0) / 2;
    let odd = (last.0 - first.0) % 2 == 1;
    // Sorted by x, each half is a run of neighbours: the points up to the middle, and those
    // from it (from past it when the range is odd, where no integer x is exactly halfway).
    let lower = points.partition_point(|p| p.0 <= mid);
    let upper = points.partition_point(|p| if odd { p.0 <= mid } else { p.0 < mid });
    (
        theil_sen_in(points, slopes),
        theil_sen_in(&points[..lower], slopes),
        theil_sen_in(&points[upper..], slopes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_no_line() {
        let line: Vec<(u64, i128)> = (0..10).map(|x| (x * 100, 7 + 3 * x as i128 * 100)).collect();
        assert_eq!(theil_sen(&line), Some(3.0));
        assert_eq!(theil_sen(&[(5, 1), (5, 9)]), None);
        assert_eq!(theil_sen(&[(5, 1)]), None);
        let mut growth_that_stops = vec![(0, 0), (100, 100), (200, 200), (300, 200), (400, 200)];
        let (all, first, second) = halves(&mut growth_that_stops);
        assert_eq!(first, Some(1.0));
        assert_eq!(second, Some(0.0));
        assert!(all.unwrap() > 0.0);
        let extreme = [(0, i128::from(u64::MAX)), (1, 0)];
        assert_eq!(theil_sen(&extreme), Some(-(u64::MAX as f64)));
    }

    /// Every pairwise slope the i128 way, median of them: what the narrow way must equal.
    fn wide(points: &[(u64, i128)]) -> Option<f64> {
        let mut slopes = Vec::new();
        for (i, &(xi, yi)) in points.iter().enumerate() {
            for &(xj, yj) in &points[i + 1..] {
                if xi != xj {
                    slopes.push(ratio(yj - yi, i128::from(xj) - i128::from(xi)));
                }
            }
        }
        crate::stats::median(&mut slopes)
    }

    proptest::proptest! {
        #[test]
        fn the_narrow_way_gives_the_slopes_of_the_wide_one(
            points in proptest::collection::vec(
                (
                    proptest::prop_oneof![0u64..10_000, (1u64 << 62) - 3..=(1u64 << 62) + 3, proptest::num::u64::ANY],
                    proptest::prop_oneof![
                        -100_000i128..100_000,
                        -(1i128 << 62) - 3..=-(1i128 << 62) + 3,
                        (1i128 << 62) - 3..=(1i128 << 62) + 3,
                        -(1i128 << 64)..(1i128 << 64),
                    ],
                ),
                0..12,
            )
        ) {
            let got = theil_sen(&points);
            let want = wide(&points);
            proptest::prop_assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits));
        }
    }
}
