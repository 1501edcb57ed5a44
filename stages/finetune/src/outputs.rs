//! What a fine-tuning run leaves in its artifact besides the model: `predictions.tsv` (every
//! dev and evaluation example with gold and prediction, in the kind's columns) and the metric
//! blocks of `metrics.json` (docs/metrics.md).

use pipeline_tasks::{Examples, Metrics};
use serde_json::Value;

use crate::kinds::{self, AnyKind, Decoded, KindError, Scores};

/// One metrics block: accuracy, binary F1, macro-F1, confusion (and a tagger's entities).
pub fn metrics_json(m: &Metrics) -> Value {
    scores_json(&Scores::classes(m.clone(), None))
}

/// [`metrics_json`] of a kind's scores (a span kind's EM and F1).
pub fn scores_json(s: &Scores) -> Value {
    s.to_json()
}

/// `predictions.tsv`, built set by set.
pub struct Predictions {
    text: String,
    labels: Vec<String>,
    kind: &'static dyn AnyKind,
}

impl Predictions {
    /// The columns of a classification task.
    pub fn new(labels: &[String]) -> Predictions {
        Self::for_kind(&kinds::pair::Pairs, labels)
    }

    /// The columns of `kind`.
    pub fn for_kind(kind: &'static dyn AnyKind, labels: &[String]) -> Predictions {
        let mut text = kind.prediction_header(labels);
        text.push('\n');
        Predictions {
            text,
            labels: labels.to_vec(),
            kind,
        }
    }

    /// The rows of set `name`: its examples (in the protocol's order) and their probabilities.
    pub fn add(
        &mut self,
        name: &str,
        examples: &Examples,
        probs: &[Vec<f32>],
    ) -> Result<(), KindError> {
        self.add_decoded(name, examples, &Decoded::new(probs.to_vec()))
    }

    /// The rows of set `name` from the kind's predictions: as many as its examples, of the
    /// kind's shape.
    pub fn add_decoded(
        &mut self,
        name: &str,
        examples: &Examples,
        decoded: &Decoded,
    ) -> Result<(), KindError> {
        self.kind
            .prediction_rows(name, examples, decoded, &self.labels, &mut self.text)
    }

    /// The file's text: the header line, then every row added, each ending in a newline.
    pub fn into_string(self) -> String {
        self.text
    }
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
        p.add("test", &ex, &[vec![0.25, 0.75]]).unwrap();
        let text = p.into_string();
        let row = text.lines().nth(1).unwrap();
        assert_eq!(row, "test\t3\ta b\tc d\t1\t1\t0.250000\t0.750000");
        assert_eq!(text.lines().next().unwrap().split('\t').count(), 8);
    }
}
