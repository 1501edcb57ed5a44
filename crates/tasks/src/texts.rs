//! The unlabelled texts of a loaded protocol, by split, for the pretraining corpus: the train
//! split's texts as task-adaptive pretraining text (Gururangan et al. 2020, "Don't Stop
//! Pretraining"), and the dev and evaluation texts that pretraining must never read
//! (decontamination). The `clean` stage takes both from the same [`ProtocolSpec`] the finetune
//! stage loads, so the texts added are exactly those fine-tuning trains on: after
//! `drop_eval_overlap`, the held-out `dev_fraction` and the `max_train_examples` cap.
//!
//! One example gives one or more *fields* (labels left out): a single text; a pair's two texts;
//! a tagged sentence's characters joined; a choice question's prompt and choices; a reading
//! question's context and question (and C3's real choices).

use std::collections::HashSet;

use crate::error::TaskError;
use crate::protocol::{Examples, Protocol, ProtocolSpec};

/// The spec with the evaluation caps removed: every dev and evaluation text is then held out,
/// not only a smoke run's sample of them. The train split does not change (the caps on dev and
/// evaluation sets draw from their own random stream, after dev is held out).
pub fn uncapped(spec: &ProtocolSpec) -> ProtocolSpec {
    ProtocolSpec {
        max_eval_examples: None,
        ..spec.clone()
    }
}

/// Each example's text fields, in order: as its kind gives them
/// ([`crate::protocol::SplitExample::corpus_texts`]).
pub fn example_texts(examples: &Examples) -> Result<Vec<Vec<String>>, TaskError> {
    examples.corpus_texts().ok_or_else(|| {
        TaskError::param(
            "task",
            "this kind of task has no texts for the pretraining corpus",
        )
    })
}

/// The train split's examples as fields: what fine-tuning trains on, one entry per example.
pub fn train_texts(p: &Protocol) -> Result<Vec<Vec<String>>, TaskError> {
    example_texts(&p.train.examples)
}

/// The dev split's and every evaluation set's text fields, each once, in order of first
/// appearance: the texts a model is selected or reported on.
pub fn held_out_texts(p: &Protocol) -> Result<Vec<String>, TaskError> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for split in std::iter::once(&p.dev).chain(&p.eval) {
        for fields in example_texts(&split.examples)? {
            for f in fields {
                if seen.insert(f.clone()) {
                    out.push(f);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &std::path::Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn load(dir: &std::path::Path, params: serde_json::Value) -> Protocol {
        let spec = ProtocolSpec::from_params(params.as_object().unwrap()).unwrap();
        uncapped(&spec).load(dir).unwrap()
    }

    #[test]
    fn single_text_splits_keep_train_apart_from_dev_and_test() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "train.tsv",
            "label\ttext_a\n1\t好评一\n0\t差评二\n1\t好评三\n",
        );
        write(d, "dev.tsv", "label\ttext_a\n1\t开发一\n");
        write(d, "test.tsv", "label\ttext_a\n0\t测试一\n0\t差评二\n");
        let p = load(
            d,
            json!({"task": "chnsenticorp", "train": "train.tsv", "dev": "dev.tsv",
                   "test": "test.tsv", "max_eval_examples": 1}),
        );
        // 差评二 is also a test text: drop_eval_overlap keeps it out of train.
        assert_eq!(
            train_texts(&p).unwrap(),
            vec![vec!["好评一".to_string()], vec!["好评三".to_string()]]
        );
        // The eval cap is lifted: both test texts are held out.
        assert_eq!(held_out_texts(&p).unwrap(), ["开发一", "测试一", "差评二"]);
    }

    #[test]
    fn a_dev_trained_protocol_adds_only_the_part_of_dev_it_trains_on() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let rows: String = (0..40)
            .map(|i| format!("问题甲{i}\t问题乙{i}\t{}\n", i % 2))
            .collect();
        write(d, "dev.tsv", &rows);
        write(d, "test.tsv", "测试甲\t测试乙\t1\n");
        let p = load(
            d,
            json!({"task": "lcqmc", "train": "dev.tsv", "dev_fraction": 0.25,
                   "test": "test.tsv"}),
        );
        let train = train_texts(&p).unwrap();
        let held = held_out_texts(&p).unwrap();
        assert_eq!(train.len(), 30);
        assert_eq!(train[0].len(), 2, "a pair gives its two texts");
        // The held-out quarter of dev and the test pair, never in train.
        assert_eq!(held.len(), 2 * 10 + 2);
        for fields in &train {
            for f in fields {
                assert!(!held.contains(f), "{f} is both trained on and held out");
            }
        }
    }

    #[test]
    fn tagged_sentences_are_their_characters_joined() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "dev.tsv",
            "text_a\tlabel\n我 在 北 京\tO O B-LOC I-LOC\n他 去 上 海\tO O B-LOC I-LOC\n",
        );
        write(d, "test.tsv", "text_a\tlabel\n你 好\tO O\n");
        let p = load(
            d,
            json!({"task": "msra_ner", "train": "dev.tsv", "dev_fraction": 0.5,
                   "test": "test.tsv"}),
        );
        let mut all: Vec<String> = train_texts(&p).unwrap().concat();
        all.extend(held_out_texts(&p).unwrap());
        all.sort();
        assert_eq!(all, ["他去上海", "你好", "我在北京"]);
    }

    /// CMRC 2018 and C3 split by article / document: the held-out contexts (dev and test) are
    /// never among the train texts, so decontamination drops no context fine-tuning trains on.
    #[test]
    fn reading_tasks_give_contexts_and_questions_by_split() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/fixtures");
        for (task, file) in [("cmrc2018", "cmrc2018/dev.json"), ("c3", "c3/dev.json")] {
            let p = load(
                &fixtures,
                json!({"task": task, "train": file, "dev_fraction": 0.2, "test_fraction": 0.2}),
            );
            let train = train_texts(&p).unwrap();
            let held = held_out_texts(&p).unwrap();
            assert!(!train.is_empty() && !held.is_empty(), "{task}");
            assert!(train.iter().all(|f| f.len() >= 2), "{task}");
            let contexts: HashSet<&String> = train.iter().map(|f| &f[0]).collect();
            assert!(
                held.iter().all(|h| !contexts.contains(h)),
                "{task}: a held-out context is also trained on"
            );
        }
    }
}
