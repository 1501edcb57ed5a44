//! The scored sentence-pair format (STS-B style regression): `text_a \t text_b \t score`, no
//! header, 3 columns. The file says everything, so the format is its name alone; a map may
//! give nothing but `name` (the reader is [`crate::read::read_scored_pairs`]).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::TaskError;
use crate::params::check_keys;

/// The built-in names of the kind: `sts_b` (STS-B and its Chinese translations) and the
/// generic `pair_regression`, the same format.
pub const REGRESSION_NAMES: [&str; 2] = ["sts_b", "pair_regression"];

/// A scored sentence-pair format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScoredPairFormat {
    /// `sts_b` or `pair_regression`.
    pub name: String,
}

impl ScoredPairFormat {
    /// The format `name` if it is one of [`REGRESSION_NAMES`].
    pub(super) fn named(name: &str) -> Option<ScoredPairFormat> {
        REGRESSION_NAMES.contains(&name).then(|| ScoredPairFormat {
            name: name.to_string(),
        })
    }

    /// A task map of this format may hold only `name`: columns, header and labels are fixed.
    pub(super) fn apply(&self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, &["name"], at)
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use serde_json::json;

    use crate::{Examples, ProtocolSpec, ScoredPairExample, Task, TaskKind};

    #[test]
    fn both_names_are_the_regression_kind_and_take_only_a_name() {
        for name in super::REGRESSION_NAMES {
            let t = Task::from_value(&json!(name), "task").unwrap();
            assert_eq!(t.kind(), TaskKind::PairRegression);
            assert_eq!(t.name(), name);
            assert_eq!(t.labels(), None);
            assert_eq!(Task::kind_of_name(name), Some(TaskKind::PairRegression));
        }
        let e = Task::from_value(&json!({"name": "sts_b", "labels": [0, 1]}), "task");
        assert!(e.unwrap_err().to_string().contains("labels"));
        assert_eq!(TaskKind::PairRegression.name(), "pair_regression");
    }

    #[test]
    fn a_protocol_reads_scored_pairs_and_holds_out_dev() {
        let d = tempfile::tempdir().unwrap();
        let mut train = String::new();
        for i in 0..40 {
            writeln!(train, "句子甲{i}\t句子乙{i}\t{}", (i % 6) as f32 * 0.9).unwrap();
        }
        train.push_str("坏行\t没有分数\n");
        std::fs::write(d.path().join("train.tsv"), &train).unwrap();
        std::fs::write(d.path().join("test.tsv"), "猫在睡觉\t猫睡着了\t4.8\n").unwrap();
        let spec = ProtocolSpec::from_params(
            json!({"task": "sts_b", "train": "train.tsv", "dev_fraction": 0.25,
                   "test": "test.tsv", "max_bad_fraction": 0.1})
            .as_object()
            .unwrap(),
        )
        .unwrap();
        let p = spec.load(d.path()).unwrap();
        assert_eq!(p.train.len() + p.dev.len(), 40);
        assert_eq!(p.dev.len(), 10);
        assert_eq!(p.bad_rows(), 1);
        assert!(p.labels.is_empty());
        let test: &[ScoredPairExample] = p.eval[0].examples.of().unwrap();
        assert_eq!(test[0].score, 4.8);
        assert_eq!(p.eval[0].examples.kind(), TaskKind::PairRegression);
        assert!(matches!(p.dev.examples, Examples::PairRegression(_)));
        assert_eq!(p.summary().kind, TaskKind::PairRegression);
    }
}
