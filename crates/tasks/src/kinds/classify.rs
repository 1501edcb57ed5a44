//! What the classification kinds (pairs, single texts, multiple choice) share: one feature per
//! example, the head's probabilities taken as they are, the class metrics, and the
//! `predictions.tsv` columns `set, line, text_a, text_b, gold, predicted, p_<label>…`; and
//! the sequence classifiers' (pairs, single texts) predictions for requests.

use std::fmt::Write as _;

use crate::evaluate;

use super::{Head, Outputs, Run, Scores, argmax, clean_tsv};
use crate::kinds::encode::Encoded;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{ClassPrediction, Input, Prediction};

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

/// A sequence classifier's classes of `inputs` (pairs, or single texts), in order.
pub fn predict(inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
    // A regressor has the same architecture but not classes: only a classes head will do.
    let Head::Classes(_) = run.model.head() else {
        return Err(run.wrong_head("a sequence classifier"));
    };
    let enc = run.model.encoder();
    let rows: Vec<Vec<Encoded>> = inputs
        .iter()
        .map(|x| match (&x.text_a, &x.text_b, &x.text) {
            (Some(a), Some(b), _) => vec![enc.encode(a, b)],
            (_, _, t) => vec![enc.encode_single(t.as_deref().unwrap_or(""))],
        })
        .collect();
    let n = rows.len();
    let split = EncodedSplit::classes("predict", rows, vec![0; n]);
    let Outputs::Rows(probs) = run.model.outputs(&split, run.batch_size) else {
        return Err(run.wrong_head("a sequence classifier"));
    };
    drop(split);
    let labels = run.model.labels();
    Ok(inputs
        .into_iter()
        .zip(probs)
        .map(|(x, p)| {
            let k = argmax(&p);
            Prediction::Class(ClassPrediction {
                text: x.text,
                text_a: x.text_a,
                text_b: x.text_b,
                label: labels.get(k).cloned().unwrap_or_default(),
                index: k,
                by_label: labels.iter().cloned().zip(p.iter().copied()).collect(),
                probabilities: p,
            })
        })
        .collect())
}
