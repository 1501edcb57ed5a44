//! Sentence-pair regression (STS-B style, the `sts_b` task) through the binary, on the bundled
//! `fixtures/sts_b` pairs (written for the project): a 2-layer pretrain on the fixtures, the
//! finetune stage's metrics (Pearson and Spearman), predictions and export as a one-output
//! regressor, and `pipeline predict` on one pair and on a TSV.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

const STS: &str = r#"
  finetune_sts_b:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/sts_b/*.tsv"]
    params:
      task: sts_b
      train: ${vars.data}/sts_b/train.tsv
      dev: ${vars.data}/sts_b/dev.tsv
      test: ${vars.data}/sts_b/test.tsv
      epochs: 3
      batch_size: 16
      learning_rate: 0.002
      max_seq_length: 48
"#;

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A correlation metrics.json holds: a number in [−1, 1].
fn correlation(block: &Value, name: &str) -> f64 {
    let r = block[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} is not a number: {block}"));
    assert!((-1.0..=1.0).contains(&r), "{name} {r}");
    r
}

#[test]
fn sts_b_trains_scores_exports_and_predicts_a_score() {
    let ws = Ws::new(&fixture_pretrain_yaml(STS));
    let v = ws.run_ok(&["finetune_sts_b"]);
    let dir = artifact(&v, "finetune_sts_b");

    // metrics.json: the kind, no labels, Pearson and Spearman on every evaluated split.
    let m = json_file(dir.join("metrics.json"));
    assert_eq!(m["task"], "sts_b");
    assert_eq!(m["kind"], "pair_regression");
    assert_eq!(m["protocol"]["train"]["examples"], 120);
    assert_eq!(m["protocol"]["dev"]["examples"], 30);
    let test = &m["eval"]["test"];
    assert_eq!(test["examples"], 30);
    correlation(test, "pearson");
    correlation(test, "spearman");
    assert!(test["mse"].as_f64().is_some_and(|x| x >= 0.0), "{test}");
    assert!(test.get("accuracy").is_none(), "no class metrics: {test}");

    // predictions.tsv: gold and predicted scores.
    let tsv = read(dir.join("predictions.tsv"));
    let mut lines = tsv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "set\tline\ttext_a\ttext_b\tgold\tpredicted"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    let test_rows: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == "test").collect();
    assert_eq!(test_rows.len(), 30);
    for r in &test_rows {
        assert_eq!(r.len(), 6, "{r:?}");
        let gold: f64 = r[4].parse().unwrap();
        assert!((0.0..=5.0).contains(&gold), "{r:?}");
        assert!(r[5].parse::<f64>().unwrap().is_finite(), "{r:?}");
    }

    // The export: transformers' sequence classifier with one output, as a regressor.
    let config = json_file(dir.join("config.json"));
    assert_eq!(
        config["architectures"][0],
        "AlbertForSequenceClassification"
    );
    assert_eq!(config["problem_type"], "regression");
    assert_eq!(config["id2label"]["0"], "score");
    assert_eq!(config["finetuning_task"], "sts_b");

    // One pair: a number, as JSON and as text.
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_sts_b",
        "--json",
        test_rows[0][2],
        test_rows[0][3],
    ]);
    out.expect_code(0).assert_no_panic();
    let p = out.json();
    assert_eq!(p["text_a"], test_rows[0][2]);
    let score = p["score"].as_f64().expect("a score");
    let stage: f64 = test_rows[0][5].parse().unwrap();
    assert!(
        (score - stage).abs() < 1e-3,
        "predict {score}, the stage {stage}"
    );
    let human = ws.run(&["predict", "--stage", "finetune_sts_b", "我喜欢猫", "我爱猫"]);
    human.expect_code(0);
    assert!(
        human.stdout.trim().parse::<f64>().is_ok(),
        "{}",
        human.describe()
    );

    // A TSV with gold scores: the stage's own predictions, and the correlations.
    ws.write(
        "pairs.tsv",
        test_rows
            .iter()
            .map(|r| format!("{}\t{}\t{}\n", r[2], r[3], r[4]))
            .collect::<String>(),
    );
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_sts_b",
        "--input",
        "pairs.tsv",
        "--output",
        "out.tsv",
    ]);
    out.expect_code(0).assert_no_panic();
    assert!(out.stderr.contains("Pearson"), "{}", out.describe());
    let ours: Vec<f64> = read(ws.path("out.tsv"))
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(4).unwrap().parse().unwrap())
        .collect();
    assert_eq!(ours.len(), 30);
    for (o, r) in ours.iter().zip(&test_rows) {
        let s: f64 = r[5].parse().unwrap();
        assert!((o - s).abs() < 1e-3, "predict {o}, the stage {s}");
    }

    // One text is not a pair.
    let out = ws.run(&["predict", "--stage", "finetune_sts_b", "只有一句"]);
    out.expect_code(1).assert_no_panic();
    assert!(out.stderr.contains("two texts"), "{}", out.describe());
}
