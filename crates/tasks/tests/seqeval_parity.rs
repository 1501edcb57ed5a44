//! `pipeline_tasks::entities` against seqeval itself: a few hundred random tag sequences
//! (proptest's deterministic runner, so every run draws the same ones) are scored here and by
//! seqeval's `get_entities`, `classification_report(output_dict=True)` and `accuracy_score` in
//! Python, and must agree entity for entity and to 1e-12 on every figure. Skips with a note
//! when no Python can import seqeval (`pip install seqeval`; `PIPELINE_PYTHON` picks the
//! interpreter).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pipeline_tasks::entities::{self, EntityPrf};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

/// A Python that can import seqeval: `PIPELINE_PYTHON`, the repository's `.venv-torch`, or
/// `python3`.
fn python_with_seqeval() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    [
        std::env::var_os("PIPELINE_PYTHON").map(PathBuf::from),
        Some(repo.join(".venv-torch/bin/python")),
        Some(PathBuf::from("python3")),
    ]
    .into_iter()
    .flatten()
    .find(|py| {
        Command::new(py)
            .args(["-c", "import seqeval"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Reads `{"gold": [[tags]], "predicted": [[tags]]}` on stdin; prints seqeval's entities of
/// every predicted sentence, its report (per type, micro, macro) and its token accuracy.
const SEQEVAL: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")  # zero-division and "not a NE tag" warnings
from seqeval.metrics import accuracy_score, classification_report
from seqeval.metrics.sequence_labeling import get_entities
d = json.load(sys.stdin)
gold, pred = d["gold"], d["predicted"]
report = classification_report(gold, pred, output_dict=True, zero_division=0)
print(json.dumps({
    "entities": [get_entities(s) for s in pred],
    "report": {k: {m: (int(v) if m == "support" else float(v)) for m, v in row.items()} for k, row in report.items()},
    "accuracy": accuracy_score(gold, pred),
}))
"#;

fn run_seqeval(py: &Path, gold: &[Vec<String>], predicted: &[Vec<String>]) -> Value {
    let mut child = Command::new(py)
        .args(["-c", SEQEVAL])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = json!({"gold": gold, "predicted": predicted}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "seqeval failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Random sentences over `tags`, and predictions that keep each gold tag with probability
/// 0.6 (so that entities are partly right, partly shifted, split or retyped).
fn draw(tags: &'static [&'static str], sentences: usize) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let tag = proptest::sample::select(tags).prop_map(str::to_string);
    let pair = (tag.clone(), tag, proptest::bool::weighted(0.6))
        .prop_map(|(g, other, keep)| (g.clone(), if keep { g } else { other }));
    let sentence = proptest::collection::vec(pair, 0..14);
    let strategy = proptest::collection::vec(sentence, sentences..=sentences);
    let mut runner = TestRunner::deterministic();
    let drawn = strategy.new_tree(&mut runner).unwrap().current();
    drawn
        .into_iter()
        .map(|s| s.into_iter().unzip::<_, _, Vec<_>, Vec<_>>())
        .unzip()
}

fn close(ours: f64, theirs: &Value, what: &str) {
    let theirs = theirs
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {theirs}"));
    assert!(
        (ours - theirs).abs() < 1e-12,
        "{what}: ours {ours}, seqeval {theirs}"
    );
}

fn same_prf(ours: &EntityPrf, theirs: &Value, what: &str) {
    close(
        ours.precision,
        &theirs["precision"],
        &format!("{what} precision"),
    );
    close(ours.recall, &theirs["recall"], &format!("{what} recall"));
    close(ours.f1, &theirs["f1-score"], &format!("{what} f1"));
}

fn compare(py: &Path, tags: &'static [&'static str], sentences: usize) {
    let (gold, predicted) = draw(tags, sentences);
    let theirs = run_seqeval(py, &gold, &predicted);

    for (i, s) in predicted.iter().enumerate() {
        let ours: Vec<Value> = entities::entities(s)
            .into_iter()
            .map(|e| json!([e.kind, e.start, e.end - 1]))
            .collect();
        assert_eq!(
            Value::from(ours),
            theirs["entities"][i],
            "entities of {s:?}"
        );
    }

    let ours = entities::score(&gold, &predicted).unwrap();
    let report = &theirs["report"];
    same_prf(&ours.micro, &report["micro avg"], "micro");
    same_prf(&ours.macro_avg, &report["macro avg"], "macro");
    assert_eq!(
        ours.micro.gold as u64,
        report["micro avg"]["support"].as_u64().unwrap()
    );
    let types: Vec<&String> = report
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !k.ends_with(" avg"))
        .collect();
    assert_eq!(types, ours.per_type.keys().collect::<Vec<_>>());
    for (kind, prf) in &ours.per_type {
        same_prf(prf, &report[kind], kind);
        assert_eq!(prf.gold as u64, report[kind]["support"].as_u64().unwrap());
    }
    close(ours.token_accuracy, &theirs["accuracy"], "token accuracy");
    eprintln!(
        "{} sentences over {tags:?}: {} gold and {} predicted entities, micro F1 {:.4}, \
         token accuracy {:.4}: the same as seqeval's",
        gold.len(),
        ours.micro.gold,
        ours.micro.predicted,
        ours.micro.f1,
        ours.token_accuracy
    );
}

#[test]
fn bio_tags_score_as_seqeval_scores_them() {
    let Some(py) = python_with_seqeval() else {
        eprintln!("skipped: no Python with seqeval (pip install seqeval; PIPELINE_PYTHON)");
        return;
    };
    // MSRA NER's tag set; O twice, so that entities are not wall to wall.
    const BIO: &[&str] = &[
        "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG",
    ];
    compare(&py, BIO, 400);
}

#[test]
fn odd_tags_score_as_seqeval_scores_them_too() {
    let Some(py) = python_with_seqeval() else {
        eprintln!("skipped: no Python with seqeval (pip install seqeval; PIPELINE_PYTHON)");
        return;
    };
    // IOBES prefixes, tags without a type, a dash inside a type: not what our readers accept,
    // but the chunking must still be seqeval's.
    const ODD: &[&str] = &[
        "O", "B-PER", "I-PER", "E-PER", "S-LOC", "I-LOC", "B", "I", "B-X-Y", "I-X-Y",
    ];
    compare(&py, ODD, 300);
}
