//! Holm's step-down correction of several p-values (as R's `p.adjust(p, "holm")`).

/// Holm-adjusted p-values, in the order given: the i-th smallest p times (k - i + 1), made
/// non-decreasing, at most 1.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let k = p.len();
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![0.0; k];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((k - rank) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn as_r_p_adjust() {
        // p.adjust(c(0.01, 0.04, 0.03, 0.5), "holm") = 0.04 0.09 0.09 0.50
        let adj = super::holm(&[0.01, 0.04, 0.03, 0.5]);
        let want = [0.04, 0.09, 0.09, 0.5];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
        assert!(super::holm(&[]).is_empty());
    }
}
