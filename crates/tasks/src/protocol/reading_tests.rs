use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::super::ProtocolSpec;
use crate::TaskKind;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn spec(v: Value) -> Result<ProtocolSpec, String> {
    ProtocolSpec::from_params(v.as_object().expect("a map")).map_err(|e| e.to_string())
}

/// The error of loading `s` (without printing a whole protocol when there is none).
fn load_err(s: &ProtocolSpec, root: &std::path::Path) -> String {
    match s.load(root) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

const CMRC: &str = "datasets/fixtures/cmrc2018/dev.json";
const C3: &str = "datasets/fixtures/c3/dev.json";

#[test]
fn cmrc_is_split_by_article_into_train_dev_and_test() {
    let s = spec(
        json!({"task": "cmrc2018", "train": CMRC, "dev_fraction": 0.1,
                        "test_fraction": 0.1, "split_seed": 7}),
    )
    .unwrap();
    let p = s.load(&root()).unwrap();
    assert_eq!(p.spec.task.kind(), TaskKind::Span);
    assert!(p.labels.is_empty());
    let test = &p.eval[0];
    assert_eq!(
        (test.name.as_str(), test.held_out_from_train),
        ("test", true)
    );
    let contexts = |e: &crate::Examples| -> HashSet<String> {
        e.as_spans()
            .unwrap()
            .iter()
            .map(|x| x.context.to_string())
            .collect()
    };
    let (tr, dv, te) = (
        contexts(&p.train.examples),
        contexts(&p.dev.examples),
        contexts(&test.examples),
    );
    assert!(tr.is_disjoint(&dv) && tr.is_disjoint(&te) && dv.is_disjoint(&te));
    let n = p.train.len() + p.dev.len() + test.len();
    assert_eq!(n, 76, "every fixture question is on one side");
    let g = p.group_split.as_ref().unwrap();
    assert_eq!(g.groups, [24, 3, 3]);
    assert_eq!(g.items, [p.train.len(), p.dev.len(), test.len()]);
    // The summary records the split and the reader's report.
    let v = p.to_json();
    assert_eq!(v["test_fraction"], json!(0.1));
    assert_eq!(v["group_split"]["by"], json!("group"));
    assert_eq!(v["train"]["files"][0]["reading"]["questions"], json!(76));
    // The same seed, the same split.
    let again = s.load(&root()).unwrap();
    assert_eq!(again.dev.examples, p.dev.examples);
}

#[test]
fn c3_has_four_choice_labels_and_caps() {
    let s = spec(
        json!({"task": "c3", "train": C3, "dev_fraction": 0.1, "test_fraction": 0.1,
                        "max_train_examples": 10}),
    )
    .unwrap();
    let p = s.load(&root()).unwrap();
    assert_eq!(p.labels, ["0", "1", "2", "3"]);
    assert_eq!(p.num_choices, Some(4));
    assert_eq!(p.train.len(), 10);
    assert_eq!(p.train.capped_to, Some(10));
    assert!(p.train.examples.as_reading_choices().is_some());
    assert_eq!(p.train.label_counts.iter().sum::<usize>(), 10);
}

#[test]
fn reading_params_are_checked() {
    let e = spec(
        json!({"task": "lcqmc", "train": "a.tsv", "dev_fraction": 0.1,
                        "test_fraction": 0.1}),
    )
    .unwrap_err();
    assert!(
        e.contains("test_fraction") && e.contains("reading tasks"),
        "{e}"
    );
    let e = spec(json!({"task": "cmrc2018", "train": CMRC, "dev": "other.json"})).unwrap_err();
    assert!(e.contains("dev_fraction"), "{e}");
    let e = spec(
        json!({"task": "c3", "train": C3, "dev_fraction": 0.1, "test_fraction": 0.1,
                        "test": "x.json"}),
    )
    .unwrap_err();
    assert!(e.contains("`test`"), "{e}");
    let e = spec(
        json!({"task": {"name": "squad", "labels": [1]}, "train": CMRC,
                        "dev_fraction": 0.1}),
    )
    .unwrap_err();
    assert!(e.contains("labels"), "{e}");
}

#[test]
fn an_unlabelled_file_or_a_missing_one_is_a_clear_error() {
    // CMRC 2018's test answers are FAKE_ANSWER placeholders that are not in the context.
    let dir = tempfile::tempdir().unwrap();
    let fake = json!({"data": [{"title": "t", "paragraphs": [{"context": "一段文字。",
        "qas": [{"id": "T_0", "question": "什么？",
                 "answers": [{"text": "FAKE_ANSWER_1", "answer_start": -1}]}]}]}]});
    std::fs::write(dir.path().join("test.json"), fake.to_string()).unwrap();
    let s = spec(
        json!({"task": "cmrc2018", "train": CMRC, "dev_fraction": 0.1,
                        "eval": {"hidden": "test.json"}}),
    )
    .unwrap();
    let e = load_err(&s, dir.path());
    assert!(e.contains("no such file"), "{e}");
    let s = spec(json!({"task": "cmrc2018", "train": "test.json", "dev_fraction": 0.1})).unwrap();
    let e = load_err(&s, dir.path());
    assert!(
        e.contains("test.json") && e.contains("no gold answers"),
        "{e}"
    );
    // No articles left for training.
    let s = spec(json!({"task": "squad", "train": CMRC, "dev_fraction": 0.5,
                        "test_fraction": 0.5}))
    .unwrap();
    let e = load_err(&s, &root());
    assert!(e.contains("dev fraction") && e.contains(CMRC), "{e}");
}
