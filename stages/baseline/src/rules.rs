//! The rules without a model: the majority class, and a threshold rule on one number per pair
//! (character overlap, pair length) fitted on the training split.
//!
//! The threshold rule cuts the number's axis into as many intervals as the task has classes
//! (one threshold for LCQMC, two for NLI) and predicts each interval's majority class; the
//! thresholds are the ones that maximise training accuracy, found exactly by dynamic
//! programming over the sorted values. Written here because it is a dozen lines of counting
//! that no library offers in this form (a depth-limited decision tree would be the nearest).

/// The most frequent class (the lowest class id on a tie).
pub fn majority(labels: &[usize], num_classes: usize) -> usize {
    let mut counts = vec![0usize; num_classes.max(1)];
    for &l in labels {
        if l < counts.len() {
            counts[l] += 1;
        }
    }
    let mut best = 0;
    for (c, &n) in counts.iter().enumerate() {
        if n > counts[best] {
            best = c;
        }
    }
    best
}

/// Thresholds on one number and the class of each interval between them.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalRule {
    /// Ascending; a value `v` falls in interval `i` = the number of thresholds ≤ `v`.
    pub thresholds: Vec<f64>,
    /// One class per interval (`thresholds.len() + 1`).
    pub classes: Vec<usize>,
    /// Accuracy on the data it was fitted on.
    pub train_accuracy: f64,
}

/// At most this many candidate cut points (quantiles of the distinct values): the fit is
/// quadratic in them, and finer cuts only fit the training noise.
const MAX_CANDIDATES: usize = 400;

impl IntervalRule {
    /// The rule with at most `intervals` intervals that classifies `(values, labels)` best.
    pub fn fit(
        values: &[f64],
        labels: &[usize],
        num_classes: usize,
        intervals: usize,
    ) -> IntervalRule {
        let k = num_classes.max(1);
        let mut pairs: Vec<(f64, usize)> = values
            .iter()
            .zip(labels)
            .filter(|(v, l)| v.is_finite() && **l < k)
            .map(|(v, l)| (*v, *l))
            .collect();
        pairs.sort_by(|x, y| x.0.total_cmp(&y.0));
        if pairs.is_empty() {
            return IntervalRule {
                thresholds: vec![],
                classes: vec![0],
                train_accuracy: 0.0,
            };
        }
        let cuts = candidate_cuts(&pairs);
        let bins = cuts.len() + 1;
        let prefix = bin_prefix_counts(&pairs, &cuts, k);
        let m_max = intervals.max(1).min(bins);
        let (score, from) = best_partitions(&prefix, bins, m_max);
        let starts = interval_starts(&from, m_max, bins);
        let mut ends: Vec<usize> = starts.iter().skip(1).copied().collect();
        ends.push(bins);
        let classes: Vec<usize> = starts
            .iter()
            .zip(&ends)
            .map(|(&i, &j)| bins_majority(&prefix, i, j).0)
            .collect();
        let thresholds: Vec<f64> = starts.iter().skip(1).map(|&i| cuts[i - 1]).collect();
        IntervalRule {
            thresholds,
            classes,
            train_accuracy: score[m_max - 1][bins] as f64 / pairs.len() as f64,
        }
    }

    /// The class of the interval `v` falls in.
    pub fn predict(&self, v: f64) -> usize {
        let i = self.thresholds.iter().filter(|t| **t <= v).count();
        self.classes[i.min(self.classes.len() - 1)]
    }
}

/// Cut points: midpoints between consecutive distinct values (of sorted pairs), thinned to
/// quantiles.
fn candidate_cuts(pairs: &[(f64, usize)]) -> Vec<f64> {
    let mut cuts: Vec<f64> = pairs
        .windows(2)
        .filter(|w| w[0].0 < w[1].0)
        .map(|w| (w[0].0 + w[1].0) / 2.0)
        .collect();
    if cuts.len() > MAX_CANDIDATES {
        let step = cuts.len() as f64 / MAX_CANDIDATES as f64;
        cuts = (0..MAX_CANDIDATES)
            .map(|i| cuts[(i as f64 * step) as usize])
            .collect();
        cuts.dedup();
    }
    cuts
}

/// Class counts of the bins between consecutive cuts, as prefix sums: `prefix[j][c]` is how
/// many of bins 0..j have class `c`.
fn bin_prefix_counts(pairs: &[(f64, usize)], cuts: &[f64], k: usize) -> Vec<Vec<usize>> {
    let bins = cuts.len() + 1;
    let mut prefix = vec![vec![0usize; k]; bins + 1];
    let mut b = 0;
    let mut counts = vec![0usize; k];
    for &(v, l) in pairs {
        while b < cuts.len() && v > cuts[b] {
            prefix[b + 1] = counts.clone();
            b += 1;
        }
        counts[l] += 1;
    }
    for p in prefix.iter_mut().skip(b + 1) {
        *p = counts.clone();
    }
    prefix
}

/// The majority class of bins i..j and how many it gets right.
fn bins_majority(prefix: &[Vec<usize>], i: usize, j: usize) -> (usize, usize) {
    let mut best = (0, 0);
    for (c, (hi, lo)) in prefix[j].iter().zip(&prefix[i]).enumerate() {
        if hi - lo > best.1 {
            best = (c, hi - lo);
        }
    }
    best
}

/// Dynamic programming over the bins: `score[m][j]` is the most correct with bins 0..j in at
/// most m+1 intervals; `from[m][j]` is where the last interval starts.
fn best_partitions(
    prefix: &[Vec<usize>],
    bins: usize,
    m_max: usize,
) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut score = vec![vec![0usize; bins + 1]; m_max];
    let mut from = vec![vec![0usize; bins + 1]; m_max];
    for (j, s) in score[0].iter_mut().enumerate().skip(1) {
        *s = bins_majority(prefix, 0, j).1;
    }
    for m in 1..m_max {
        for j in 1..=bins {
            score[m][j] = score[m - 1][j];
            from[m][j] = from[m - 1][j];
            for i in 1..j {
                let s = score[m - 1][i] + bins_majority(prefix, i, j).1;
                if s > score[m][j] {
                    score[m][j] = s;
                    from[m][j] = i;
                }
            }
        }
    }
    (score, from)
}

/// Walks back from the last bin to the bins where the best partition's intervals start.
fn interval_starts(from: &[Vec<usize>], m_max: usize, bins: usize) -> Vec<usize> {
    let mut starts = Vec::new();
    let (mut m, mut j) = (m_max - 1, bins);
    loop {
        let i = if m == 0 { 0 } else { from[m][j] };
        starts.push(i);
        if i == 0 {
            break;
        }
        j = i;
        m -= 1;
    }
    starts.reverse();
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_is_the_most_frequent_class() {
        assert_eq!(majority(&[1, 0, 1, 2, 1], 3), 1);
        assert_eq!(majority(&[0, 1], 2), 0, "a tie goes to the lowest id");
        assert_eq!(majority(&[], 2), 0);
    }

    #[test]
    fn one_threshold_separates_two_classes() {
        // Overlap above 0.5 means a match, with one noisy example.
        let v = [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 0.15];
        let y = [0, 0, 0, 0, 1, 1, 1, 1, 1];
        let r = IntervalRule::fit(&v, &y, 2, 2);
        assert_eq!(r.classes, vec![0, 1]);
        assert_eq!(r.thresholds.len(), 1);
        assert!((r.thresholds[0] - 0.5).abs() < 1e-12, "{r:?}");
        assert!((r.train_accuracy - 8.0 / 9.0).abs() < 1e-12);
        assert_eq!(r.predict(0.45), 0);
        assert_eq!(r.predict(0.55), 1);
    }

    #[test]
    fn two_thresholds_for_three_classes() {
        // Low overlap: contradiction (0); middle: neutral (2); high: entailment (1).
        let v: Vec<f64> = (0..30).map(|i| i as f64 / 30.0).collect();
        let y: Vec<usize> = (0..30)
            .map(|i| match i {
                0..10 => 0,
                10..20 => 2,
                _ => 1,
            })
            .collect();
        let r = IntervalRule::fit(&v, &y, 3, 3);
        assert_eq!(r.classes, vec![0, 2, 1]);
        assert_eq!(r.train_accuracy, 1.0);
        assert_eq!(r.predict(0.0), 0);
        assert_eq!(r.predict(0.5), 2);
        assert_eq!(r.predict(0.99), 1);
    }

    #[test]
    fn constant_values_give_the_majority() {
        let r = IntervalRule::fit(&[1.0, 1.0, 1.0], &[1, 1, 0], 2, 2);
        assert!(r.thresholds.is_empty());
        assert_eq!(r.classes, vec![1]);
        assert_eq!(r.predict(5.0), 1);
    }
}
