//! The `finetune` stage and `pipeline predict` through the binary, on the bundled fixtures
//! (LCQMC-, XNLI- and choice-shaped files the project wrote) with a very small pretrained model:
//! metrics and predictions, the Hugging Face classifier export, initialisation from random
//! weights and from a checkpoint directory, prediction of one pair and of a TSV, bad input.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

/// The data stages and a 2-layer pretrain on the fixtures, then `stages`.
fn yaml(stages: &str) -> String {
    fixture_pretrain_yaml(stages)
}

const LCQMC: &str = r#"
  finetune_lcqmc:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/lcqmc/*.tsv"]
    params:
      task: lcqmc
      train: ${vars.data}/lcqmc/dev.tsv
      dev_fraction: 0.1
      test: ${vars.data}/lcqmc/test.tsv
      epochs: 3
      batch_size: 16
      learning_rate: 0.002
      max_seq_length: 64
"#;

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn finetune_lcqmc_trains_reports_and_exports_a_classifier_predict_uses() {
    let ws = Ws::new(&yaml(LCQMC));
    let v = ws.run_ok(&["finetune_lcqmc"]);
    let dir = artifact(&v, "finetune_lcqmc");
    let m = json_file(dir.join("metrics.json"));
    assert_eq!(m["task"], "lcqmc");
    assert_eq!(m["init"], "pretrained");
    assert_eq!(m["pretrain_instance"], "pretrain");
    assert_eq!(m["labels"], serde_json::json!(["0", "1"]));
    let history = m["history"].as_array().unwrap();
    assert_eq!(history.len(), 3);
    let best = m["best_epoch"].as_u64().unwrap() as usize;
    assert_eq!(
        m["dev"]["accuracy"],
        history[best - 1]["dev_accuracy"],
        "the artifact is the best epoch's"
    );
    let test = &m["eval"]["test"];
    assert_eq!(test["examples"], 80);
    assert!(test["f1"].is_number(), "binary F1 for a 2-class task");
    let counts = test["confusion"]["counts"].as_array().unwrap();
    let total: u64 = counts
        .iter()
        .flat_map(|r| r.as_array().unwrap())
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(total, 80);
    assert_eq!(m["protocol"]["dev_fraction"], 0.1);

    // predictions.tsv: dev and test rows, probabilities that sum to one.
    let tsv = read(dir.join("predictions.tsv"));
    let mut lines = tsv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "set\tline\ttext_a\ttext_b\tgold\tpredicted\tp_0\tp_1"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.iter().filter(|r| r[0] == "test").count(), 80);
    assert_eq!(rows.iter().filter(|r| r[0] == "dev").count(), 10);
    for r in &rows {
        let s: f64 = r[6..].iter().map(|x| x.parse::<f64>().unwrap()).sum();
        assert!((s - 1.0).abs() < 1e-4, "{r:?}");
    }
    let config = json_file(dir.join("config.json"));
    assert_eq!(
        config["architectures"][0],
        "AlbertForSequenceClassification"
    );
    assert_eq!(config["id2label"]["1"], "1");

    // One pair.
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_lcqmc",
        "--json",
        "我喜欢妈妈做的汤",
        "妈妈做的汤我很喜欢喝",
    ]);
    out.expect_code(0).assert_no_panic();
    let p = out.json();
    let probs = p["probabilities"].as_object().unwrap();
    assert_eq!(probs.len(), 2);
    assert!(["0", "1"].contains(&p["label"].as_str().unwrap()));
    let human = ws.run(&["predict", "--stage", "finetune_lcqmc", "好", "不好"]);
    human.expect_code(0);
    assert!(
        human.stdout.contains("probabilities: 0: "),
        "{}",
        human.stdout
    );

    // A TSV with gold labels: the same predictions as the stage's, and an accuracy.
    let test_file = format!("{}/datasets/fixtures/lcqmc/test.tsv", repo());
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_lcqmc",
        "--input",
        &test_file,
        "--output",
        "out.tsv",
    ]);
    out.expect_code(0).assert_no_panic();
    assert!(out.stderr.contains("accuracy"), "{}", out.stderr);
    let ours: Vec<String> = read(ws.path("out.tsv"))
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(4).unwrap().to_string())
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
}

/// A pair task a small model must learn quickly (the label is the first character of text_b):
/// the model, the loss, the optimiser and the evaluation are wired together.
#[test]
fn finetuning_learns_a_learnable_task() {
    let mut train = String::new();
    let mut test = String::new();
    let subjects = [
        "今天",
        "我们",
        "妈妈",
        "老师",
        "小明",
        "城市",
        "图书馆",
        "火车",
    ];
    let tails = [
        "很好",
        "去公园",
        "做饭",
        "上课",
        "看书",
        "下雨",
        "开门",
        "出发",
    ];
    for (i, s) in subjects.iter().enumerate() {
        for (j, t) in tails.iter().enumerate() {
            let label = (i + j) % 2;
            let b = if label == 1 {
                format!("是{t}")
            } else {
                format!("否{t}")
            };
            let line = format!("{s}{t}\t{b}\t{label}\n");
            if (i * 8 + j) % 4 == 0 {
                test.push_str(&line)
            } else {
                train.push_str(&line)
            }
        }
    }
    let stage = r#"
  toy:
    kind: finetune
    deps: [pretrain]
    inputs: [toy/train.tsv, toy/test.tsv]
    params:
      task: lcqmc
      train: toy/train.tsv
      dev_fraction: 0.2
      test: toy/test.tsv
      epochs: 15
      batch_size: 8
      learning_rate: 0.002
      max_seq_length: 32
"#;
    let ws = Ws::new(&yaml(stage));
    ws.write("toy/train.tsv", train);
    ws.write("toy/test.tsv", test);
    let v = ws.run_ok(&["toy"]);
    let m = json_file(artifact(&v, "toy").join("metrics.json"));
    let history = m["history"].as_array().unwrap();
    assert!(
        history.last().unwrap()["train_loss"].as_f64().unwrap()
            < history[0]["train_loss"].as_f64().unwrap(),
        "the training loss did not go down: {history:?}"
    );
    let acc = m["eval"]["test"]["accuracy"].as_f64().unwrap();
    assert!(
        acc >= 0.9,
        "test accuracy {acc} on a task decided by one character: {history:?}"
    );
}

#[test]
fn random_init_and_checkpoint_init_and_xnli_and_choice() {
    let stages = r#"
  finetune_xnli:
    kind: finetune
    deps: [pretrain]
    matrix: {init: [pretrained, random]}
    params:
      task: xnli
      train:
        - {path: "${vars.data}/nli_extra/cmnli/dev.tsv", format: cmnli}
        - {path: "${vars.data}/nli_extra/ocnli/dev.tsv", format: ocnli}
      dev_fraction: 0.1
      eval: {xnli_dev: "${vars.data}/xnli_zh/dev.tsv", xnli_test: "${vars.data}/xnli_zh/test.tsv"}
      epochs: 2
      max_seq_length: 64
  choice:
    kind: finetune
    deps: [pretrain]
    params:
      task: choice
      train: ${vars.data}/choice/train.jsonl
      dev_fraction: 0.2
      test: ${vars.data}/choice/test.jsonl
      epochs: 2
      max_seq_length: 48
"#;
    let ws = Ws::new(&yaml(stages));
    let v = ws.run_ok(&[]);
    for init in ["pretrained", "random"] {
        let inst = format!("finetune_xnli@init={init}");
        let m = json_file(artifact(&v, &inst).join("metrics.json"));
        assert_eq!(m["init"], init);
        assert_eq!(m["labels"].as_array().unwrap().len(), 3);
        assert_eq!(m["eval"]["xnli_dev"]["examples"], 60);
        assert_eq!(m["eval"]["xnli_test"]["examples"], 60);
        assert!(
            m["eval"]["xnli_dev"]["f1"].is_null(),
            "no binary F1 for 3 classes"
        );
    }
    let c = json_file(artifact(&v, "choice").join("metrics.json"));
    assert_eq!(c["kind"], "choice");
    assert_eq!(c["eval"]["test"]["examples"], 24);
    let config = json_file(artifact(&v, "choice").join("config.json"));
    assert_eq!(config["architectures"][0], "AlbertForMultipleChoice");

    // Starting from a checkpoint directory (here: the pretrain artifact, which holds a
    // tokenizer too), without a pretrain dep.
    let pretrained = artifact(&v, "pretrain");
    let ws2 = Ws::new(&format!(
        r#"
vars:
  data: {repo}/datasets/fixtures
stages:
  ft:
    kind: finetune
    params:
      init_from: {dir}
      task: lcqmc
      train: ${{vars.data}}/lcqmc/dev.tsv
      dev_fraction: 0.1
      test: ${{vars.data}}/lcqmc/test.tsv
      epochs: 1
      max_seq_length: 64
"#,
        repo = repo(),
        dir = pretrained.display()
    ));
    let v2 = ws2.run_ok(&[]);
    let m = json_file(artifact(&v2, "ft").join("metrics.json"));
    assert_eq!(m["init"], "checkpoint");
}

#[test]
fn bad_finetune_and_predict_input_are_clear_errors() {
    // init: random without anything to take the architecture from.
    let ws = Ws::new(&format!(
        "vars: {{data: {repo}/datasets/fixtures}}\nstages:\n  ft:\n    kind: finetune\n    params: {{init: random, task: lcqmc, train: \"${{vars.data}}/lcqmc/dev.tsv\", dev_fraction: 0.1}}\n",
        repo = repo()
    ));
    let out = ws.run(&["run"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("needs a `pretrain` dep"),
        "{}",
        out.describe()
    );

    // An empty test file, and a header where none is expected.
    let ws = Ws::new(&yaml(
        &LCQMC.replace("test: ${vars.data}/lcqmc/test.tsv", "test: empty.tsv"),
    ));
    ws.write("empty.tsv", "");
    let out = ws.run(&["run", "finetune_lcqmc"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("empty.tsv") && out.stdout.contains("no examples"),
        "{}",
        out.describe()
    );
    let ws = Ws::new(&yaml(
        &LCQMC.replace("test: ${vars.data}/lcqmc/test.tsv", "test: header.tsv"),
    ));
    ws.write("header.tsv", "text_a\ttext_b\tlabel\n今天好\t今天不错\t1\n");
    let out = ws.run(&["run", "finetune_lcqmc"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("header.tsv:1") && out.stdout.contains("header"),
        "{}",
        out.describe()
    );

    // predict with a model that has no classifier head (a pretrain artifact).
    let ws = Ws::new(&yaml(LCQMC.replace("epochs: 3", "epochs: 1").as_str()));
    ws.run_ok(&["finetune_lcqmc"]);
    let out = ws.run(&["predict", "--stage", "pretrain", "a", "b"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stderr.contains("not a sentence-pair classifier"),
        "{}",
        out.describe()
    );

    // A label the model does not know, at its line; a header without --header.
    ws.write("pairs.tsv", "好\t不好\t1\n好吃\t难吃\tmaybe\n");
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_lcqmc",
        "--input",
        "pairs.tsv",
    ]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stderr.contains("pairs.tsv:2") && out.stderr.contains("\"maybe\""),
        "{}",
        out.describe()
    );
    ws.write("headed.tsv", "text_a\ttext_b\tlabel\n好\t不好\t1\n");
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_lcqmc",
        "--input",
        "headed.tsv",
    ]);
    out.expect_code(1);
    assert!(out.stderr.contains("--header"), "{}", out.describe());
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_lcqmc",
        "--input",
        "headed.tsv",
        "--header",
    ]);
    out.expect_code(0);
    ws.write("none.tsv", "\n\n");
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_lcqmc",
        "--input",
        "none.tsv",
    ]);
    out.expect_code(1);
    assert!(out.stderr.contains("no pairs"), "{}", out.describe());

    // bf16 where the device has no bf16 products: refused, not trained in float32 under a
    // bf16 label (the pretrain dep is cached from above).
    ws.set_yaml(&yaml(&LCQMC.replace(
        "epochs: 3",
        "epochs: 1\n      device: flex\n      precision: bf16",
    )));
    let out = ws.run(&["run", "finetune_lcqmc"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout
            .contains("param `precision`: bf16 needs a libtorch device")
            && out.stdout.contains("device flex has no bf16 products"),
        "{}",
        out.describe()
    );

    // Bad training params, at their line.
    let ws = Ws::new(&yaml(&LCQMC.replace("epochs: 3", "epochs: 0")));
    let out = ws.run(&["run"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("epochs must be at least 1"),
        "{}",
        out.describe()
    );
    let ws = Ws::new(&yaml(&LCQMC.replace("task: lcqmc", "task: lcqnc")));
    let out = ws.run(&["run"]);
    out.expect_code(2);
    assert!(out.stderr.contains("lcqmc"), "{}", out.describe());
}

#[test]
fn intermediate_pretraining_steps_are_fine_tuned_and_plotted_against_tokens() {
    // One fine-tuning setup, run from the final model and random init (`ft`) and from the
    // models saved at steps 4 and 7 (`ft_curve`).
    let finetune = |name: &str, axis: &str| {
        format!(
            r#"
  {name}:
    kind: finetune
    deps: [pretrain]
    matrix: {{{axis}}}
    inputs: ["${{vars.data}}/lcqmc/*.tsv"]
    params:
      task: lcqmc
      train: ${{vars.data}}/lcqmc/dev.tsv
      dev_fraction: 0.1
      test: ${{vars.data}}/lcqmc/test.tsv
      epochs: 1
      max_seq_length: 64"#
        )
    };
    let stages = format!(
        "{}{}\n  report:\n    kind: report\n    deps: [pretrain, ft, ft_curve]\n    params: {{publish_dir: out, bench_dir: \"\"}}\n",
        finetune("ft", "init: [pretrained, random]"),
        finetune("ft_curve", "pretrain_step: [4, 7]"),
    );
    // The pretrain stage of `yaml` (10 steps), saving two intermediate models.
    let ws = Ws::new(&yaml(&stages).replace(
        "learning_rate: 0.005}",
        "learning_rate: 0.005, save_steps: [7, 4]}",
    ));
    let v = ws.run_ok(&[]);

    // The pretrain artifact holds each saved step as a loadable export with its tokens.
    let pre = artifact(&v, "pretrain");
    let final_tokens = json_file(pre.join("metrics.json"))["tokens_seen"]
        .as_u64()
        .unwrap();
    assert_eq!(
        json_file(pre.join("metrics.json"))["save_steps"],
        serde_json::json!([4, 7])
    );
    let mut saved = Vec::new();
    for step in [4u64, 7] {
        let dir = pre.join("steps").join(step.to_string());
        assert!(dir.join("model.safetensors").is_file() && dir.join("vocab.txt").is_file());
        let s = json_file(dir.join("snapshot.json"));
        assert_eq!(s["step"], step);
        saved.push(s["tokens_seen"].as_u64().unwrap());
    }
    assert!(
        0 < saved[0] && saved[0] < saved[1] && saved[1] < final_tokens,
        "{saved:?}"
    );

    // Each fine-tuning run says how far its backbone was pretrained.
    for (inst, step, tokens) in [
        ("ft_curve@pretrain_step=4", 4, saved[0]),
        ("ft_curve@pretrain_step=7", 7, saved[1]),
        ("ft@init=pretrained", 10, final_tokens),
        ("ft@init=random", 0, 0),
    ] {
        let m = json_file(artifact(&v, inst).join("metrics.json"));
        assert_eq!(m["pretraining"]["step"], step, "{inst}");
        assert_eq!(m["pretraining"]["tokens_seen"], tokens, "{inst}");
    }

    // The report's curve: four budgets of one line, in token order.
    let curve = json_file(ws.path("out/lcqmc_curve.json"));
    let rows = curve["rows"].as_array().unwrap();
    let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [0, 4, 7, 10]);
    assert!(ws.path("out/plots/lcqmc_curve.svg").is_file());
    let readme = read(ws.path("out/README.md"));
    assert!(
        readme.contains("test accuracy against pretraining tokens"),
        "{readme}"
    );
    assert!(
        readme.contains("points per doubling of pretraining tokens"),
        "{readme}"
    );

    // A step that was not saved is refused, naming the ones that were.
    ws.set_yaml(&ws_yaml_with_curve_step(&read(ws.file()), 5));
    let out = ws.run(&["run", "ft_curve"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("saved no model at step 5") && out.stdout.contains("steps 4, 7"),
        "{}",
        out.describe()
    );
    // And so is pretrain_step beside init: random, before anything runs.
    ws.set_yaml(
        &read(ws.file()).replace("pretrain_step: [5]", "pretrain_step: [4], init: [random]"),
    );
    let out = ws.run(&["run", "ft_curve"]);
    out.expect_code(2).assert_no_panic();
    assert!(
        out.stderr.contains("does not go with init: random")
            && out.stderr.contains("pipeline.yaml:"),
        "{}",
        out.describe()
    );
}

fn ws_yaml_with_curve_step(yaml: &str, step: u64) -> String {
    yaml.replace("pretrain_step: [4, 7]", &format!("pretrain_step: [{step}]"))
}
