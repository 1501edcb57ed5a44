//! Token classification (NER) through the binary, on the bundled MSRA-shaped and CoNLL-shaped
//! fixtures (written for the project): the MSRA protocol (train on dev less 10 %, report on
//! test), entity metrics, predictions of the input's length, the export, `pipeline predict` with
//! entity spans, the baselines, and bad input.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// The data stages and a 2-layer pretrain on the fixtures, then `stages`.
fn yaml(stages: &str) -> String {
    fixture_pretrain_yaml(stages)
}

/// `max_seq_length: 24` cuts the fixture's long sentences (up to ~80 characters) into windows.
const NER: &str = r#"
  finetune_msra_ner:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/msra_ner/*.tsv"]
    params:
      task: msra_ner
      train: ${vars.data}/msra_ner/dev.tsv
      dev_fraction: 0.1
      test: ${vars.data}/msra_ner/test.tsv
      epochs: 3
      batch_size: 16
      learning_rate: 0.003
      max_seq_length: 24
  baseline_msra_ner:
    kind: baseline
    inputs: ["${vars.data}/msra_ner/*.tsv"]
    params:
      task: msra_ner
      train: ${vars.data}/msra_ner/dev.tsv
      dev_fraction: 0.1
      test: ${vars.data}/msra_ner/test.tsv
"#;

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn msra_ner_tags_every_character_and_predicts_entities() {
    let ws = Ws::new(&yaml(NER));
    let v = ws.run_ok(&["finetune_msra_ner", "baseline_msra_ner"]);
    let dir = artifact(&v, "finetune_msra_ner");
    let m = json_file(dir.join("metrics.json"));
    assert_eq!(m["kind"], "tagging");
    assert_eq!(
        m["labels"],
        json!(["O", "B-LOC", "I-LOC", "B-PER", "I-PER", "B-ORG", "I-ORG"])
    );
    // The protocol: the 100 sentences of dev less those also in test (the fixture repeats
    // short sentences: `drop_eval_overlap`), 10 % of the rest held out; 40 test sentences.
    let pr = &m["protocol"];
    assert_eq!(pr["dev_fraction"], 0.1);
    let n = |v: &Value| v.as_u64().unwrap();
    let dropped = n(&pr["train"]["dropped_eval_overlap"]);
    assert!(dropped > 0);
    assert_eq!(
        n(&pr["train"]["examples"]) + n(&pr["dev"]["examples"]) + dropped,
        100
    );
    assert_eq!(n(&pr["dev"]["examples"]), (100 - dropped) / 10);
    let test = &m["eval"]["test"];
    assert_eq!(test["examples"].as_u64().unwrap(), {
        // characters of the test file
        let t = read(format!(
            "{}/datasets/fixtures/msra_ner/test.tsv",
            env!("CARGO_MANIFEST_DIR")
        ));
        t.lines()
            .skip(1)
            .map(|l| l.split('\t').next().unwrap().split(' ').count() as u64)
            .sum::<u64>()
    });
    let e = &test["entities"];
    for k in ["precision", "recall", "f1"] {
        let x = e["micro"][k].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{k} {x}");
    }
    assert!(e["per_type"]["PER"]["gold"].as_u64().unwrap() > 0, "{e:#}");
    assert!(m["history"][0]["dev_entity_f1"].is_number());

    // predictions.tsv: every test sentence, as many predicted tags as characters, windows
    // merged back.
    let tsv = read(dir.join("predictions.tsv"));
    let mut lines = tsv.lines();
    assert_eq!(lines.next().unwrap(), "set\tline\ttext\tgold\tpredicted");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.iter().filter(|r| r[0] == "test").count(), 40);
    for r in &rows {
        let n = r[2].split(' ').count();
        assert_eq!(r[3].split(' ').count(), n, "{r:?}");
        assert_eq!(r[4].split(' ').count(), n, "{r:?}");
    }
    assert!(
        rows.iter().any(|r| r[2].split(' ').count() > 40),
        "a sentence longer than a window"
    );

    let config = json_file(dir.join("config.json"));
    assert_eq!(config["architectures"][0], "AlbertForTokenClassification");
    assert_eq!(config["id2label"]["3"], "B-PER");

    // predict: the entities with character spans; the tags have the text's length.
    let text = "王明在北京工作 ，张红用iPhone打电话。";
    let out = ws.run(&["predict", "--stage", "finetune_msra_ner", "--json", text]);
    out.expect_code(0).assert_no_panic();
    let p = out.json();
    assert_eq!(p["tags"].as_array().unwrap().len(), text.chars().count());
    for ent in p["entities"].as_array().unwrap() {
        let (s, e) = (
            ent["start"].as_u64().unwrap() as usize,
            ent["end"].as_u64().unwrap() as usize,
        );
        let surface: String = text.chars().skip(s).take(e - s).collect();
        assert_eq!(ent["text"], surface.as_str());
        assert!(["PER", "LOC", "ORG"].contains(&ent["type"].as_str().unwrap()));
    }
    let out = ws.run(&["predict", "--stage", "finetune_msra_ner", text]);
    out.expect_code(0).assert_no_panic();
    ws.write("texts.txt", format!("{text}\n\n今天天气很好。\n"));
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_msra_ner",
        "--input",
        "texts.txt",
        "--json",
    ]);
    out.expect_code(0).assert_no_panic();
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    // An empty text is a command-line mistake, refused before the model loads (exit 2).
    let out = ws.run(&["predict", "--stage", "finetune_msra_ner", ""]);
    out.expect_code(2);
    assert!(out.stderr.contains("empty"), "{}", out.describe());

    // The baselines: the training entities and per-character tags score F1 on test.
    let b = json_file(artifact(&v, "baseline_msra_ner").join("metrics.json"));
    let names: Vec<&str> = b["baselines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["majority_tag", "lexicon"]);
    let lex = b["baselines"][1]["eval"]["test"]["entities"]["micro"]["f1"]
        .as_f64()
        .unwrap();
    assert!(lex > 0.5, "the fixture reuses its names: {lex}");
}

#[test]
fn conll_layout_and_bad_sentences() {
    let ft = r#"
  ft:
    kind: finetune
    deps: [pretrain]
    params:
      task: {name: tagging, layout: conll, labels: [O, B-PER, I-PER, B-LOC, I-LOC, B-ORG, I-ORG]}
      train: TRAIN
      dev_fraction: 0.2
      test: ${vars.data}/conll_ner/test.txt
      epochs: 1
      batch_size: 16
      max_seq_length: 32
"#;
    let ws = Ws::new(&yaml(
        &ft.replace("TRAIN", "${vars.data}/conll_ner/train.txt"),
    ));
    let v = ws.run_ok(&["ft"]);
    let m = json_file(artifact(&v, "ft").join("metrics.json"));
    assert_eq!(m["protocol"]["eval"][0]["examples"], 20);
    assert_eq!(m["labels"][1], "B-PER");

    // Bad sentences: a tag count mismatch, an unknown tag: each at its line, and past
    // max_bad_fraction the stage fails.
    let ws = Ws::new(&yaml(&ft.replace("TRAIN", "bad.txt")));
    ws.write(
        "bad.txt",
        "王 B-PER\n明 I-PER\n\n北 B-LOC\n京 B-XYZ\n\n好\n\n",
    );
    let out = ws.run(&["run", "ft"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("bad.txt:4 unknown_label")
            && out.stdout.contains("bad.txt:7 column_count"),
        "{}",
        out.describe()
    );
    // The TSV layout: a character/tag count mismatch and an empty sentence.
    let ws = Ws::new(&yaml(
        &ft.replace("layout: conll", "layout: tsv")
            .replace("TRAIN", "bad.tsv"),
    ));
    ws.write("bad.tsv", "王 明\tB-PER I-PER\n北 京\tB-LOC\n \tO\n");
    let out = ws.run(&["run", "ft"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("bad.tsv:2 tag_count") && out.stdout.contains("bad.tsv:3 empty_text"),
        "{}",
        out.describe()
    );
}
