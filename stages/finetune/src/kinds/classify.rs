//! What the classification kinds (pairs, single texts, multiple choice) share: one feature per
//! example, the head's probabilities taken as they are, the class metrics, and the
//! `predictions.tsv` columns `set, line, text_a, text_b, gold, predicted, p_<label>…`.

use std::fmt::Write as _;

use pipeline_tasks::evaluate;

use super::{Scores, clean_tsv};
use crate::data::EncodedSplit;
use crate::predict::argmax;

/// Probabilities per feature are probabilities per example.
pub fn decode(probs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
    probs
}

/// Accuracy, F1, macro-F1 and the confusion matrix of `probs` (one row per example) against
/// the split's classes.
pub fn score(
    split: &EncodedSplit,
    probs: &[Vec<f32>],
    labels: &[String],
) -> anyhow::Result<Scores> {
    let predicted: Vec<usize> = probs.iter().map(|p| argmax(p)).collect();
    let gold = split.targets.classes(&split.name)?;
    let classes = evaluate(gold, &predicted, labels)
        .map_err(|e| anyhow::anyhow!("{} metrics: {e}", split.name))?;
    Ok(Scores::classes(classes, None))
}

/// `set line text_a text_b gold predicted p_…`.
pub fn header(labels: &[String]) -> String {
    let mut text = String::from("set\tline\ttext_a\ttext_b\tgold\tpredicted");
    for l in labels {
        text.push_str("\tp_");
        text.push_str(l);
    }
    text
}

/// One row per example: `(line, text_a, text_b, gold)` from `rows`, the probabilities from
/// `probs`.
pub fn rows(
    name: &str,
    rows: impl Iterator<Item = (usize, String, String, usize)>,
    probs: &[Vec<f32>],
    labels: &[String],
    out: &mut String,
) {
    for ((line, a, b, gold), q) in rows.zip(probs) {
        let _ = write!(
            out,
            "{name}\t{line}\t{}\t{}\t{}\t{}",
            clean_tsv(&a),
            clean_tsv(&b),
            labels[gold],
            labels[argmax(q)]
        );
        for x in q {
            let _ = write!(out, "\t{x:.6}");
        }
        out.push('\n');
    }
}
