//! What the classification kinds (pairs, single texts, multiple choice) share: one feature per
//! example, the head's probabilities taken as they are, the class metrics, and the
//! `predictions.tsv` columns `set, line, text_a, text_b, gold, predicted, p_<label>…`.

use std::fmt::Write as _;

use pipeline_tasks::evaluate;

use super::{Decoded, Outputs, Scores, clean_tsv};
use crate::data::EncodedSplit;
use crate::predict::argmax;

/// Probabilities per feature are probabilities per example.
pub fn decode(outputs: Outputs) -> Decoded {
    match outputs {
        Outputs::Rows(p) => Decoded::Classes(p),
        // A classification head gives rows; anything else would be a caller's bug, and an
        // empty prediction list then fails the metrics with a clear count mismatch.
        _ => Decoded::Classes(Vec::new()),
    }
}

/// Accuracy, F1, macro-F1 and the confusion matrix.
pub fn score(split: &EncodedSplit, decoded: &Decoded, labels: &[String]) -> anyhow::Result<Scores> {
    let classes = evaluate(split.targets.classes(), &decoded.classes(), labels)
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
/// `decoded`.
pub fn rows(
    name: &str,
    rows: impl Iterator<Item = (usize, String, String, usize)>,
    decoded: &Decoded,
    labels: &[String],
    out: &mut String,
) {
    let Decoded::Classes(probs) = decoded else {
        return;
    };
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
