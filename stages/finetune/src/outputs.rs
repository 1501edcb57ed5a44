//! What a fine-tuning run leaves in its artifact besides the model: `predictions.tsv` (every
//! dev and evaluation example with gold, prediction and probabilities) and the metric blocks
//! of `metrics.json` (docs/metrics.md).

use std::fmt::Write as _;

use pipeline_tasks::{Examples, Metrics};
use serde_json::{Value, json};

use crate::predict::argmax;

/// One metrics block: accuracy, binary F1, macro-F1, confusion.
pub fn metrics_json(m: &Metrics) -> Value {
    json!({
        "examples": m.examples,
        "accuracy": m.accuracy,
        "f1": m.f1,
        "macro_f1": m.macro_f1,
        "confusion": {"labels": m.confusion.labels, "counts": m.confusion.counts},
    })
}

/// `predictions.tsv`, built set by set.
pub struct Predictions {
    text: String,
    labels: Vec<String>,
}

impl Predictions {
    pub fn new(labels: &[String]) -> Predictions {
        let mut text = String::from("set\tline\ttext_a\ttext_b\tgold\tpredicted");
        for l in labels {
            text.push_str("\tp_");
            text.push_str(l);
        }
        text.push('\n');
        Predictions {
            text,
            labels: labels.to_vec(),
        }
    }

    /// The rows of set `name`: its examples (in the protocol's order) and their probabilities.
    pub fn add(&mut self, name: &str, examples: &Examples, probs: &[Vec<f32>]) {
        for (i, q) in probs.iter().enumerate() {
            let (line, a, b, gold) = match examples {
                Examples::Pair(v) => (
                    v[i].line,
                    v[i].text_a.clone(),
                    v[i].text_b.clone(),
                    v[i].label,
                ),
                Examples::Choice(v) => (
                    v[i].line,
                    v[i].prompt.clone(),
                    v[i].choices.join(" | "),
                    v[i].answer,
                ),
            };
            let _ = write!(
                self.text,
                "{name}\t{line}\t{}\t{}\t{}\t{}",
                clean_tsv(&a),
                clean_tsv(&b),
                self.labels[gold],
                self.labels[argmax(q)]
            );
            for x in q {
                let _ = write!(self.text, "\t{x:.6}");
            }
            self.text.push('\n');
        }
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

/// Tabs and newlines inside a text would break predictions.tsv's columns.
fn clean_tsv(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline_tasks::PairExample;

    #[test]
    fn rows_keep_their_columns() {
        let labels = vec!["0".to_string(), "1".to_string()];
        let mut p = Predictions::new(&labels);
        let ex = Examples::Pair(vec![PairExample {
            line: 3,
            text_a: "a\tb".into(),
            text_b: "c\nd".into(),
            label: 1,
            file: 0,
        }]);
        p.add("test", &ex, &[vec![0.25, 0.75]]);
        let text = p.into_string();
        let row = text.lines().nth(1).unwrap();
        assert_eq!(row, "test\t3\ta b\tc d\t1\t1\t0.250000\t0.750000");
        assert_eq!(text.lines().next().unwrap().split('\t').count(), 8);
    }
}
