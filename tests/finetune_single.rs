//! Single-text classification through the binary, on the bundled ChnSentiCorp- and
//! SMP2020-EWECT-shaped fixtures (written for the project): the finetune stage's metrics,
//! predictions and export, `pipeline predict` on one text and on a TSV, the baselines, and bad
//! input.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// The data stages and a 2-layer pretrain on the fixtures, then `stages`.
fn yaml(stages: &str) -> String {
    fixture_pretrain_yaml(stages)
}

const SENTI: &str = r#"
  finetune_chnsenticorp:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/chnsenticorp/*.tsv"]
    params:
      task: chnsenticorp
      train: ${vars.data}/chnsenticorp/train.tsv
      dev: ${vars.data}/chnsenticorp/dev.tsv
      test: ${vars.data}/chnsenticorp/test.tsv
      epochs: 4
      batch_size: 16
      learning_rate: 0.002
      max_seq_length: 64
  baseline_chnsenticorp:
    kind: baseline
    inputs: ["${vars.data}/chnsenticorp/*.tsv"]
    params:
      task: chnsenticorp
      train: ${vars.data}/chnsenticorp/train.tsv
      dev: ${vars.data}/chnsenticorp/dev.tsv
      test: ${vars.data}/chnsenticorp/test.tsv
"#;

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn chnsenticorp_trains_exports_and_predicts_single_texts() {
    let ws = Ws::new(&yaml(SENTI));
    let v = ws.run_ok(&["finetune_chnsenticorp", "baseline_chnsenticorp"]);
    let dir = artifact(&v, "finetune_chnsenticorp");
    let m = json_file(dir.join("metrics.json"));
    assert_eq!(m["task"], "chnsenticorp");
    assert_eq!(m["kind"], "single");
    assert_eq!(m["labels"], json!(["negative", "positive"]));
    let test = &m["eval"]["test"];
    assert_eq!(test["examples"], 30);
    assert!(test["f1"].is_number(), "binary F1 for 2 classes");
    assert!(test["macro_f1"].is_number());
    assert_eq!(test["confusion"]["labels"], json!(["negative", "positive"]));
    assert_eq!(m["protocol"]["train"]["examples"], 120);
    assert_eq!(m["protocol"]["dev"]["examples"], 30);

    // predictions.tsv: the pair columns with text_b empty.
    let tsv = read(dir.join("predictions.tsv"));
    let mut lines = tsv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "set\tline\ttext_a\ttext_b\tgold\tpredicted\tp_negative\tp_positive"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.iter().filter(|r| r[0] == "test").count(), 30);
    assert!(rows.iter().all(|r| r[3].is_empty()));

    // The export: a sequence classifier with the label names, marked single-text.
    let config = json_file(dir.join("config.json"));
    assert_eq!(
        config["architectures"][0],
        "AlbertForSequenceClassification"
    );
    assert_eq!(config["id2label"]["1"], "positive");
    assert_eq!(config["finetuning_task"], "chnsenticorp");

    // One text.
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_chnsenticorp",
        "--json",
        "这家酒店很好",
    ]);
    out.expect_code(0).assert_no_panic();
    let p = out.json();
    assert_eq!(p["text"], "这家酒店很好");
    assert!(["negative", "positive"].contains(&p["label"].as_str().unwrap()));
    let human = ws.run(&[
        "predict",
        "--stage",
        "finetune_chnsenticorp",
        "这家酒店很好",
    ]);
    human.expect_code(0);
    assert!(
        human.stdout.contains("probabilities: negative: "),
        "{}",
        human.stdout
    );

    // A TSV of `text \t gold`: the stage's own predictions.
    ws.write(
        "texts.tsv",
        rows.iter()
            .filter(|r| r[0] == "test")
            .map(|r| format!("{}\t{}\n", r[2], r[4]))
            .collect::<String>(),
    );
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_chnsenticorp",
        "--input",
        "texts.tsv",
        "--output",
        "out.tsv",
    ]);
    out.expect_code(0).assert_no_panic();
    assert!(out.stderr.contains("accuracy"), "{}", out.stderr);
    let ours: Vec<String> = read(ws.path("out.tsv"))
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(3).unwrap().to_string())
        .collect();
    let stage: Vec<String> = rows
        .iter()
        .filter(|r| r[0] == "test")
        .map(|r| r[5].to_string())
        .collect();
    assert_eq!(
        ours, stage,
        "predict disagrees with the stage's own predictions"
    );

    // Empty texts on the command line are refused as in a TSV, before a model is loaded: a
    // mistake on the command line, exit 2 (issue 20); so are two texts (exit 1, once the
    // model says it takes one).
    let out = ws.run(&["predict", "--stage", "finetune_chnsenticorp", " "]);
    out.expect_code(2).assert_no_panic();
    assert!(out.stderr.contains("empty"), "{}", out.describe());
    let out = ws.run(&["predict", "--stage", "finetune_chnsenticorp", "好", "不好"]);
    out.expect_code(1);
    assert!(out.stderr.contains("single texts"), "{}", out.describe());

    // The baselines: majority and a character n-gram model on the same examples.
    let b = json_file(artifact(&v, "baseline_chnsenticorp").join("metrics.json"));
    let names: Vec<&str> = b["baselines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["majority", "ngram_lr"]);
    let lr = &b["baselines"][1]["eval"]["test"]["accuracy"];
    assert!(
        lr.as_f64().unwrap() > 0.8,
        "the fixture's words give the class away: {lr}"
    );
    assert_eq!(b["protocol"]["train"]["examples"], 120);
}

#[test]
fn emotion_has_six_named_classes_and_bad_rows_fail_at_their_line() {
    let ft = r#"
  ft:
    kind: finetune
    deps: [pretrain]
    params:
      task: smp2020_ewect
      train: ${vars.data}/smp2020_ewect/train.tsv
      dev: ${vars.data}/smp2020_ewect/dev.tsv
      test: TEST
      epochs: 1
      batch_size: 16
      max_seq_length: 32
"#;
    let ws = Ws::new(&yaml(
        &ft.replace("TEST", "${vars.data}/smp2020_ewect/test.tsv"),
    ));
    let v = ws.run_ok(&["ft"]);
    let m = json_file(artifact(&v, "ft").join("metrics.json"));
    assert_eq!(
        m["labels"],
        json!(["neutral", "angry", "happy", "sad", "fear", "surprise"])
    );
    assert!(
        m["eval"]["test"]["f1"].is_null(),
        "no binary F1 for 6 classes"
    );
    assert_eq!(
        m["eval"]["test"]["confusion"]["counts"]
            .as_array()
            .unwrap()
            .len(),
        6
    );

    // A label outside 0–5 and an empty text: counted with file:line, over max_bad_fraction.
    let ws = Ws::new(&yaml(&ft.replace("TEST", "bad.tsv")));
    ws.write("bad.tsv", "label\ttext_a\n1\t好气\n9\t好怕\n2\t\n");
    let out = ws.run(&["run", "ft"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("bad.tsv: 2 of 3 rows are bad")
            && out.stdout.contains("bad.tsv:3 unknown_label")
            && out.stdout.contains("bad.tsv:4 empty_text"),
        "{}",
        out.describe()
    );
    // A generic single task: its map form, checked.
    let ws = Ws::new(&yaml(&ft.replace(
        "task: smp2020_ewect",
        "task: {name: single, text: 1, label: 0, header: true, lables: [a, b]}",
    )));
    let out = ws.run(&["run", "ft"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("did you mean `labels`"),
        "{}",
        out.describe()
    );
}
