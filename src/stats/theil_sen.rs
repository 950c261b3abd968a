//! The Theil-Sen slope (Sen 1968): the median of the slopes of all pairs of points with different
//! x, as `scipy.stats.theilslopes` computes it (pairs with equal x are left out; the median of an
//! even count is the mean of the two middle slopes).

/// The Theil-Sen slope of `points` (x, y), in y units per x unit; `None` when fewer than two
/// distinct x values. Differences are taken in `i128` (no wrap for 64-bit extremes) and divided
/// in f64. O(n^2) slopes: callers bound n.
pub fn theil_sen(points: &[(u64, i128)]) -> Option<f64> {
    let mut slopes = Vec::with_capacity(points.len() * points.len().saturating_sub(1) / 2);
    for (i, &(xi, yi)) in points.iter().enumerate() {
        for &(xj, yj) in &points[i + 1..] {
            if xi == xj {
                continue;
            }
            let dx = i128::from(xj) - i128::from(xi);
            slopes.push((yj - yi) as f64 / dx as f64);
        }
    }
    super::median(&mut slopes)
}

/// Theil-Sen slopes of the whole series and of its first and second halves: points sorted by x,
/// the first half those with x at most the middle of the x range, the second half those with x at
/// least it (a point exactly at the middle is in both).
pub fn halves(points: &mut [(u64, i128)]) -> (Option<f64>, Option<f64>, Option<f64>) {
    points.sort_by_key(|p| p.0);
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return (None, None, None);
    };
    let mid = first.0 + (last.0 - first.0) / 2;
    let odd = (last.0 - first.0) % 2 == 1;
    let lower: Vec<(u64, i128)> = points.iter().copied().filter(|p| p.0 <= mid).collect();
    let upper: Vec<(u64, i128)> = points
        .iter()
        .copied()
        .filter(|p| p.0 > mid || (p.0 == mid && !odd))
        .collect();
    (theil_sen(points), theil_sen(&lower), theil_sen(&upper))
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
}
