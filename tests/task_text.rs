//! Task-adaptive pretraining text and decontamination through the binary: a corpus file that
//! holds every ChnSentiCorp fixture text (`datasets/fixtures/leaky_corpus/misc/
//! chnsenticorp_reviews.txt`, laid out like the shared data's), the ChnSentiCorp protocol as
//! `task_text`; the clean artifact keeps the train texts and none of the dev and test texts, and
//! the report says what the corpus read, added and dropped.

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::{Value, json};

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

/// The fixture ChnSentiCorp texts of one split.
fn texts(split: &str) -> Vec<String> {
    read(format!(
        "{}/datasets/fixtures/chnsenticorp/{split}.tsv",
        repo()
    ))
    .lines()
    .skip(1)
    .filter_map(|l| l.split_once('\t').map(|(_, t)| t.to_string()))
    .collect()
}

const PROTOCOL: &str = "{task: chnsenticorp, train: \"${vars.data}/chnsenticorp/train.tsv\", \
                        dev: \"${vars.data}/chnsenticorp/dev.tsv\", \
                        test: \"${vars.data}/chnsenticorp/test.tsv\"}";

/// The data stages on the fixtures, the leaky file among the corpus inputs; `clean_params`
/// are added to clean's; `more` are further stages.
fn yaml(clean_params: &str, more: &str) -> String {
    format!(
        r#"vars:
  data: {repo}/datasets/fixtures
stages:
  clean:
    kind: clean
    inputs:
      - "${{vars.data}}/corpus/*/*.txt"
      - "${{vars.data}}/leaky_corpus/*/*.txt"
      - "${{vars.data}}/chnsenticorp/*.tsv"
    params:
      format: lines
      formats: {{"*/corpus/paragraphs/*": paragraphs, "*/corpus/wiki/*": wiki}}
      # The fixture reviews are short: match texts from 8 characters, keep documents from 5.
      # Near-duplicates stay
      # (the templated fixture reviews are near each other), so that which texts are kept
      # is exact.
      exclude_min_chars: 8
      near_dup: false
      min_doc_chars: 5
{clean_params}
{more}"#,
        repo = repo()
    )
}

fn json_file(path: impl AsRef<std::path::Path>) -> Value {
    serde_json::from_str(&read(path)).unwrap()
}

#[test]
fn the_corpus_takes_the_train_texts_and_none_of_the_dev_and_test_texts() {
    let ws = Ws::new(&yaml(&format!("      task_text: [{PROTOCOL}]"), ""));
    let v = ws.run_ok(&["clean"]);
    let dir = artifact(&v, "clean");
    let m = json_file(dir.join("metrics.json"));
    let corpus = read(dir.join("corpus-00000.txt"));
    let lines: BTreeSet<&str> = corpus.lines().collect();

    // The task files are inputs (a change re-runs the stage) but not corpus.
    let files: Vec<&String> = m["formats"].as_object().unwrap().keys().collect();
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(files.iter().all(|f| f.ends_with(".txt")), "{files:?}");

    let train = texts("train");
    let held_out: BTreeSet<String> = texts("dev").into_iter().chain(texts("test")).collect();
    for t in &held_out {
        assert!(
            !corpus.contains(t.as_str()),
            "a dev or test text was kept: {t}"
        );
    }
    let holds_held_out = |t: &str| held_out.iter().any(|h| t.contains(h.as_str()));
    for t in train.iter().filter(|t| !holds_held_out(t)) {
        assert!(lines.contains(t.as_str()), "a train text is missing: {t}");
    }
    let d = &m["decontamination"]["tasks"]["chnsenticorp"];
    assert_eq!(d["texts"], held_out.len());
    assert_eq!(d["too_short"], 0);
    assert!(
        d["paragraphs_dropped"].as_u64().unwrap() >= held_out.len() as u64,
        "{d}"
    );
    // The train texts were added; those the leaky file already had are its duplicates.
    let t = &m["task_text"]["chnsenticorp"];
    assert_eq!(t["examples"], train.len());
    assert_eq!(
        t["dropped"]["duplicate"].as_u64().unwrap() + t["documents_out"].as_u64().unwrap(),
        train.len() as u64,
        "{t}"
    );

    // Without the task text, the leak is still closed.
    let ws = Ws::new(&yaml(
        &format!("      task_text: [{PROTOCOL}]\n      add_task_text: false"),
        "",
    ));
    let v = ws.run_ok(&["clean"]);
    let m = json_file(artifact(&v, "clean").join("metrics.json"));
    assert!(m.get("task_text").is_none());
    assert_eq!(
        m["decontamination"]["tasks"]["chnsenticorp"]["texts"],
        json!(held_out.len())
    );
}

#[test]
fn the_report_names_the_files_the_task_text_and_what_decontamination_dropped() {
    let more = r#"  vocab:
    kind: vocab
    deps: [clean]
    inputs: ["${vars.data}/vocab/vocab.txt"]
    params: {source: file, file: "${vars.data}/vocab/vocab.txt"}
  mask:
    kind: mask
    deps: [clean, vocab]
    params: {max_seq_length: 64, max_predictions_per_seq: 10, dupe_factor: 1, eval_fraction: 0.1, pack: true}
  pretrain:
    kind: pretrain
    deps: [mask, vocab]
    params: {model: tiny, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64,
             embedding_size: 16, num_hidden_layers: 2, batch_size: 8, steps: 3}
  report:
    kind: report
    deps: [clean, mask, pretrain]
    params: {publish_dir: ""}
"#;
    let ws = Ws::new(&yaml(&format!("      task_text: [{PROTOCOL}]"), more));
    let v = ws.run_ok(&["report"]);
    let readme = read(artifact(&v, "report").join("README.md"));
    assert!(
        readme.contains("leaky_corpus/misc/chnsenticorp_reviews.txt`, which holds every ChnSentiCorp train, dev and test text; decontamination against chnsenticorp's dev and test texts dropped"),
        "{readme}"
    );
    assert!(!readme.contains("are contaminated.**"), "{readme}");
    assert!(
        readme.contains("Task text added to it (the train splits as fine-tuning loads them, never dev or test): chnsenticorp 120 train examples"),
        "{readme}"
    );
    // The mask sentence gives the padding of the packed instances.
    assert!(readme.contains("% padding)"), "{readme}");
    let pretraining = json_file(artifact(&v, "report").join("pretraining.json"));
    let ours = &pretraining["rows"][0];
    assert_eq!(ours["source"], "ours");
    assert_eq!(ours["corpus"], "clean");
    assert_eq!(ours["task_text"], "chnsenticorp");
    assert_eq!(ours["objective"], "MLM + SOP");
    assert_eq!(ours["masking"], "whole-word ≤3-gram");
    // Seconds of 2 threads: a number, rounded to hundredths of an hour.
    assert!(ours["cpu_hours"].is_f64(), "{ours}");
}
