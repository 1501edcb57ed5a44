//! The metrics of sentence-pair regression (STS-B style): Pearson's and Spearman's correlation
//! of predicted against gold scores, as GLUE reports STS-B (`scipy.stats.pearsonr` and
//! `spearmanr`: Spearman is Pearson on ranks, tied values sharing their mean rank).

use serde::Serialize;

/// Pearson's r of `x` and `y` (as many each); `None` with fewer than 2 pairs or where either
/// side is constant (r is then undefined: scipy returns NaN, which JSON cannot hold).
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let n = x.len() as f64;
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    // Rounding can put |r| a hair above 1.
    Some((sxy / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0))
}

/// The 1-based ranks of `v`, ties given the mean of the ranks they span.
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        // Positions i..=j (0-based) hold ranks i+1..=j+1; their mean.
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = mean;
        }
        i = j + 1;
    }
    out
}

/// Spearman's ρ: Pearson's r of the ranks.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() {
        return None;
    }
    pearson(&ranks(x), &ranks(y))
}

/// A split's regression metrics, as metrics.json writes them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegressionMetrics {
    /// Pearson's r (the test metric); `null` where undefined (a constant side).
    pub pearson: Option<f64>,
    /// Spearman's ρ; `null` where undefined.
    pub spearman: Option<f64>,
    /// Mean squared error of the predictions.
    pub mse: f64,
    /// How many pairs.
    pub examples: usize,
}

impl RegressionMetrics {
    /// The metrics of `predicted` against `gold` (as many each).
    pub fn of(gold: &[f64], predicted: &[f64]) -> RegressionMetrics {
        let n = gold.len().min(predicted.len());
        let mse = if n == 0 {
            0.0
        } else {
            gold.iter()
                .zip(predicted)
                .map(|(g, p)| (g - p) * (g - p))
                .sum::<f64>()
                / n as f64
        };
        RegressionMetrics {
            pearson: pearson(gold, predicted),
            spearman: spearman(gold, predicted),
            mse,
            examples: n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("defined");
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }

    #[test]
    fn pearson_by_hand() {
        // x = 1,2,3,4, y = 2,4,5,4: means 2.5 and 3.75; sxy = 3.5, sxx = 5, syy = 4.75.
        close(
            pearson(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 5.0, 4.0]),
            3.5 / (5f64.sqrt() * 4.75f64.sqrt()),
        );
        close(pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        close(pearson(&[0.0, 1.0], &[10.0, 30.0]), 1.0);
    }

    #[test]
    fn undefined_correlations_are_none() {
        assert_eq!(pearson(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(pearson(&[1.0], &[2.0]), None);
        assert_eq!(pearson(&[1.0, 2.0], &[2.0]), None);
        assert_eq!(spearman(&[], &[]), None);
    }

    #[test]
    fn ties_share_their_mean_rank() {
        assert_eq!(ranks(&[10.0, 20.0, 10.0, 5.0]), vec![2.5, 4.0, 2.5, 1.0]);
    }

    #[test]
    fn spearman_by_hand() {
        // A monotone but not linear relation: ρ = 1 where r < 1.
        let x = [1.0, 2.0, 3.0, 4.0];
        let y = [1.0, 4.0, 9.0, 100.0];
        close(spearman(&x, &y), 1.0);
        assert!(pearson(&x, &y).unwrap() < 0.99);
        // Ranks of y = 2,4,5,4 are 1, 2.5, 4, 2.5: r of (1,2,3,4) and those.
        // Deviations from 2.5: x −1.5, −0.5, 0.5, 1.5 and y −1.5, 0, 1.5, 0, so
        // sxy = 2.25 + 0.75 = 3, sxx = 5, syy = 4.5.
        close(
            spearman(&x, &[2.0, 4.0, 5.0, 4.0]),
            3.0 / (5f64.sqrt() * 4.5f64.sqrt()),
        );
    }

    #[test]
    fn mse_and_counts() {
        let m = RegressionMetrics::of(&[1.0, 2.0, 3.0], &[1.0, 2.0, 5.0]);
        assert!((m.mse - 4.0 / 3.0).abs() < 1e-12);
        assert_eq!(m.examples, 3);
        assert!(m.pearson.unwrap() > 0.9);
    }
}
