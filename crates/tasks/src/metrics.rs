//! Evaluation metrics from gold and predicted class ids: accuracy, binary F1 (positive class 1,
//! as LCQMC and AFQMC report it), macro-F1, per-class precision/recall/F1 and the confusion
//! matrix (rows = gold, columns = predicted). Everything serialises to JSON for metrics.json.
//!
//! Conventions follow scikit-learn's defaults, so numbers can be checked against it: a
//! precision or recall whose denominator is 0 counts as 0 (`zero_division=0`), and macro-F1
//! averages over the classes that occur in gold or predictions (`f1_score(average="macro")`
//! without `labels`).

use serde::{Deserialize, Serialize};

use crate::entities::EntityScores;

/// Bad metric inputs (always a bug in the caller, but reported rather than panicking).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    /// Gold and predicted ids differ in number.
    #[error("{gold} gold labels but {predicted} predictions")]
    LengthMismatch {
        /// Gold ids.
        gold: usize,
        /// Predicted ids.
        predicted: usize,
    },
    /// No example: every metric would be 0 / 0.
    #[error("no examples to evaluate")]
    Empty,
    /// A class id not below the number of classes.
    #[error(
        "{which} class id {value} at position {index} is out of range (the task has {classes} classes)"
    )]
    OutOfRange {
        /// `gold` or `predicted`: which list holds it.
        which: &'static str,
        /// Its 0-based position in that list.
        index: usize,
        /// The id.
        value: usize,
        /// The number of classes (ids must be below it).
        classes: usize,
    },
}

/// Counts of (gold, predicted) pairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfusionMatrix {
    /// Class labels in class-id order.
    pub labels: Vec<String>,
    /// `counts[gold][predicted]`.
    pub counts: Vec<Vec<usize>>,
}

fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn harmonic(p: f64, r: f64) -> f64 {
    if p + r == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    }
}

fn check(gold: &[usize], predicted: &[usize], classes: usize) -> Result<(), MetricsError> {
    if gold.len() != predicted.len() {
        return Err(MetricsError::LengthMismatch {
            gold: gold.len(),
            predicted: predicted.len(),
        });
    }
    if gold.is_empty() {
        return Err(MetricsError::Empty);
    }
    for (which, ids) in [("gold", gold), ("predicted", predicted)] {
        if let Some((index, &value)) = ids.iter().enumerate().find(|(_, v)| **v >= classes) {
            return Err(MetricsError::OutOfRange {
                which,
                index,
                value,
                classes,
            });
        }
    }
    Ok(())
}

impl ConfusionMatrix {
    /// Counts the pairs; `labels` gives the number of classes and their names.
    pub fn new(
        gold: &[usize],
        predicted: &[usize],
        labels: &[String],
    ) -> Result<ConfusionMatrix, MetricsError> {
        let k = labels.len();
        check(gold, predicted, k)?;
        let mut counts = vec![vec![0; k]; k];
        for (&g, &p) in gold.iter().zip(predicted) {
            counts[g][p] += 1;
        }
        Ok(ConfusionMatrix {
            labels: labels.to_vec(),
            counts,
        })
    }

    /// The number of classes (rows and columns).
    pub fn num_classes(&self) -> usize {
        self.counts.len()
    }

    /// Examples counted: the sum of all cells.
    pub fn total(&self) -> usize {
        self.counts.iter().flatten().sum()
    }

    /// Examples predicted as their gold class: the sum of the diagonal.
    pub fn correct(&self) -> usize {
        (0..self.num_classes()).map(|c| self.counts[c][c]).sum()
    }

    /// Gold examples of class `c`.
    pub fn support(&self, c: usize) -> usize {
        self.counts[c].iter().sum()
    }

    /// Examples predicted as class `c`.
    pub fn predicted(&self, c: usize) -> usize {
        self.counts.iter().map(|row| row[c]).sum()
    }

    /// `correct / total`, in [0, 1] (0 for an empty matrix).
    pub fn accuracy(&self) -> f64 {
        ratio(self.correct(), self.total())
    }

    /// Of the examples predicted as class `c`, the share that are `c` (0 when none is).
    pub fn precision(&self, c: usize) -> f64 {
        ratio(self.counts[c][c], self.predicted(c))
    }

    /// Of the gold examples of class `c`, the share predicted as `c` (0 when there are none).
    pub fn recall(&self, c: usize) -> f64 {
        ratio(self.counts[c][c], self.support(c))
    }

    /// The harmonic mean of class `c`'s precision and recall (0 when both are 0).
    pub fn f1(&self, c: usize) -> f64 {
        harmonic(self.precision(c), self.recall(c))
    }

    /// The mean F1 over the classes that occur in gold or predictions.
    pub fn macro_f1(&self) -> f64 {
        let present: Vec<usize> = (0..self.num_classes())
            .filter(|&c| self.support(c) + self.predicted(c) > 0)
            .collect();
        if present.is_empty() {
            return 0.0;
        }
        present.iter().map(|&c| self.f1(c)).sum::<f64>() / present.len() as f64
    }
}

/// Precision, recall and F1 of one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassMetrics {
    /// The class's label.
    pub label: String,
    /// [`ConfusionMatrix::precision`], in [0, 1].
    pub precision: f64,
    /// [`ConfusionMatrix::recall`], in [0, 1].
    pub recall: f64,
    /// [`ConfusionMatrix::f1`], in [0, 1].
    pub f1: f64,
    /// Gold examples of the class.
    pub support: usize,
    /// Examples predicted as the class.
    pub predicted: usize,
}

/// Everything reported for one evaluation set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// Examples scored.
    pub examples: usize,
    /// The share of examples predicted right, in [0, 1].
    pub accuracy: f64,
    /// F1 of class 1 (the positive class); only for 2-class tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub f1: Option<f64>,
    /// [`ConfusionMatrix::macro_f1`], in [0, 1].
    pub macro_f1: f64,
    /// One entry per class, in class-id order.
    pub per_class: Vec<ClassMetrics>,
    /// The counts everything else is computed from.
    pub confusion: ConfusionMatrix,
}

/// One metrics block of the `metrics.json` the finetune and baseline stages write (per split:
/// `dev`, each of `eval`), and the report reads: the class metrics every kind has, and a
/// tagger's entity scores. One type for writer and reader, so that a renamed field fails to
/// compile rather than blanking a table cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsBlock {
    /// Examples scored; characters for a tagger.
    pub examples: usize,
    /// Of examples; of characters for a tagger.
    pub accuracy: f64,
    /// Binary F1 of class 1 (two-class tasks); null otherwise.
    pub f1: Option<f64>,
    /// The mean per-class F1 over the classes in gold or predictions (tags, for a tagger).
    pub macro_f1: f64,
    /// Gold × predicted counts (of tags, for a tagger).
    pub confusion: ConfusionMatrix,
    /// A tagger's entity precision, recall and F1 (overall, macro, per type) and token accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<EntityScores>,
}

impl MetricsBlock {
    /// The block of `m`, with a tagger's `entities` (`None` for the other kinds).
    pub fn new(m: &Metrics, entities: Option<EntityScores>) -> MetricsBlock {
        MetricsBlock {
            examples: m.examples,
            accuracy: m.accuracy,
            f1: m.f1,
            macro_f1: m.macro_f1,
            confusion: m.confusion.clone(),
            entities,
        }
    }

    /// The table's figure: entity F1 for a tagger, accuracy otherwise.
    pub fn headline(&self) -> f64 {
        self.entities.as_ref().map_or(self.accuracy, |e| e.micro.f1)
    }

    /// The block as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// A span-extraction metrics block (CMRC 2018, SQuAD): exact match and F1 as CMRC 2018's
/// official script computes them ([`crate::cmrc_eval`]), as fractions (the script prints
/// percentages: × 100), so that every block of metrics.json has one scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanMetricsBlock {
    /// Questions scored (those without a prediction count 0).
    pub examples: usize,
    /// The share of questions whose prediction equals a gold answer (the script's EM), in
    /// [0, 1].
    pub exact_match: f64,
    /// Mean over questions of the best token F1 against the gold answers, in [0, 1].
    pub f1: f64,
    /// Questions without a prediction (no window had a context token).
    pub unanswered: usize,
}

impl SpanMetricsBlock {
    /// From the script's percentages.
    pub fn from_scores(s: &crate::cmrc_eval::CmrcScores) -> SpanMetricsBlock {
        SpanMetricsBlock {
            examples: s.total,
            exact_match: s.em / 100.0,
            f1: s.f1 / 100.0,
            unanswered: s.skipped,
        }
    }

    /// The table's figure (and what a span model is selected by): F1.
    pub fn headline(&self) -> f64 {
        self.f1
    }

    /// The block as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Every metric of one evaluation set.
pub fn evaluate(
    gold: &[usize],
    predicted: &[usize],
    labels: &[String],
) -> Result<Metrics, MetricsError> {
    let m = ConfusionMatrix::new(gold, predicted, labels)?;
    Ok(Metrics {
        examples: m.total(),
        accuracy: m.accuracy(),
        f1: (m.num_classes() == 2).then(|| m.f1(1)),
        macro_f1: m.macro_f1(),
        per_class: (0..m.num_classes())
            .map(|c| ClassMetrics {
                label: labels[c].clone(),
                precision: m.precision(c),
                recall: m.recall(c),
                f1: m.f1(c),
                support: m.support(c),
                predicted: m.predicted(c),
            })
            .collect(),
        confusion: m,
    })
}

fn classes(gold: &[usize], predicted: &[usize]) -> usize {
    gold.iter().chain(predicted).max().map_or(0, |m| m + 1)
}

fn unnamed(k: usize) -> Vec<String> {
    (0..k).map(|c| c.to_string()).collect()
}

/// The share of predictions equal to the gold label.
pub fn accuracy(gold: &[usize], predicted: &[usize]) -> Result<f64, MetricsError> {
    let k = classes(gold, predicted);
    Ok(ConfusionMatrix::new(gold, predicted, &unnamed(k))?.accuracy())
}

/// F1 of class 1 in a binary task (ids must be 0 or 1).
pub fn binary_f1(gold: &[usize], predicted: &[usize]) -> Result<f64, MetricsError> {
    Ok(ConfusionMatrix::new(gold, predicted, &unnamed(2))?.f1(1))
}

/// Macro-F1 over `num_classes` classes (see the module docs for absent classes).
pub fn macro_f1(
    gold: &[usize],
    predicted: &[usize],
    num_classes: usize,
) -> Result<f64, MetricsError> {
    Ok(ConfusionMatrix::new(gold, predicted, &unnamed(num_classes))?.macro_f1())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn binary_by_hand() {
        // gold:  1 1 1 1 0 0 0 0 0 0
        // pred:  1 1 1 0 1 1 0 0 0 0
        // TP 3, FN 1, FP 2, TN 4: acc 0.7, P 3/5, R 3/4, F1 2PR/(P+R) = 2/3.
        let gold = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0];
        let pred = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0];
        let labels = vec!["0".to_string(), "1".into()];
        let m = evaluate(&gold, &pred, &labels).unwrap();
        assert!(close(m.accuracy, 0.7));
        assert!(close(m.f1.unwrap(), 2.0 / 3.0));
        assert_eq!(m.confusion.counts, [[4, 2], [1, 3]]);
        // Class 0: P 4/5, R 4/6, F1 = 2·0.8·(2/3)/(0.8+2/3) = 8/11.
        assert!(close(m.per_class[0].f1, 8.0 / 11.0));
        assert!(close(m.macro_f1, (8.0 / 11.0 + 2.0 / 3.0) / 2.0));
        assert_eq!((m.per_class[1].support, m.per_class[1].predicted), (4, 5));
        assert!(close(binary_f1(&gold, &pred).unwrap(), 2.0 / 3.0));
        assert!(close(accuracy(&gold, &pred).unwrap(), 0.7));
    }

    #[test]
    fn three_classes_by_hand() {
        // gold 0 0 0 1 1 2, pred 0 0 1 1 2 2
        // class 0: P 2/2 R 2/3 F1 0.8; class 1: P 1/2 R 1/2 F1 0.5; class 2: P 1/2 R 1/1 F1 2/3
        let gold = [0, 0, 0, 1, 1, 2];
        let pred = [0, 0, 1, 1, 2, 2];
        let labels: Vec<String> = ["contradiction", "entailment", "neutral"]
            .map(String::from)
            .to_vec();
        let m = evaluate(&gold, &pred, &labels).unwrap();
        assert!(m.f1.is_none(), "no binary F1 for 3 classes");
        assert!(close(m.accuracy, 4.0 / 6.0));
        assert!(close(m.macro_f1, (0.8 + 0.5 + 2.0 / 3.0) / 3.0));
        assert_eq!(m.confusion.counts, [[2, 1, 0], [0, 1, 1], [0, 0, 1]]);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["confusion"]["labels"][2], "neutral");
        assert_eq!(json["confusion"]["counts"][0][1], 1);
        assert!(json.get("f1").is_none());
        assert_eq!(json["per_class"][1]["label"], "entailment");
    }

    #[test]
    fn degenerate_cases() {
        // Never predicting the positive class: F1 0, not NaN.
        assert_eq!(binary_f1(&[1, 0], &[0, 0]).unwrap(), 0.0);
        // A class absent from gold and predictions does not drag macro-F1 down.
        assert!(close(macro_f1(&[0, 1], &[0, 1], 3).unwrap(), 1.0));
        assert_eq!(
            evaluate(&[0], &[0, 1], &["a".into(), "b".into()]).unwrap_err(),
            MetricsError::LengthMismatch {
                gold: 1,
                predicted: 2
            }
        );
        assert_eq!(accuracy(&[], &[]).unwrap_err(), MetricsError::Empty);
        let e = binary_f1(&[0, 2], &[0, 1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gold class id 2 at position 1 is out of range (the task has 2 classes)"
        );
    }

    proptest! {
        #[test]
        fn consistent_with_counting(pairs in prop::collection::vec((0usize..4, 0usize..4), 1..200)) {
            let (gold, pred): (Vec<usize>, Vec<usize>) = pairs.into_iter().unzip();
            let labels: Vec<String> = (0..4).map(|c| c.to_string()).collect();
            let m = evaluate(&gold, &pred, &labels).unwrap();
            let correct = gold.iter().zip(&pred).filter(|(g, p)| g == p).count();
            prop_assert!(close(m.accuracy, correct as f64 / gold.len() as f64));
            prop_assert_eq!(m.confusion.total(), gold.len());
            for c in 0..4 {
                prop_assert_eq!(m.per_class[c].support, gold.iter().filter(|&&g| g == c).count());
                prop_assert!((0.0..=1.0).contains(&m.per_class[c].f1));
            }
            prop_assert!((0.0..=1.0).contains(&m.macro_f1));
            // Perfect predictions score 1 everywhere.
            let p = evaluate(&gold, &gold, &labels).unwrap();
            prop_assert!(close(p.accuracy, 1.0) && close(p.macro_f1, 1.0));
        }
    }
}
