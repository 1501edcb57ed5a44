//! `pipeline exp show`, `pipeline diff` and `pipeline plot` through the binary, on a small
//! pipeline of `cmd` stages: `prep` copies an input file, `train` (a matrix over `lr`) writes a
//! metrics.json and a metrics.jsonl computed from its params.

mod common;

use common::*;
use serde_json::Value;

/// The display width of a line: its characters (the tables here are ASCII plus `…`).
fn width(s: &str) -> usize {
    s.chars().count()
}

const TRAIN_SH: &str = r#"lr=$1
awk -v lr="$lr" 'BEGIN {
  printf "{\"accuracy\": %.4f, \"loss\": %.4f, \"eval\": {\"f1\": %.4f}, \"device\": \"cpu\", \"history\": [1, 2]}\n", lr * 2, 1 - lr, lr
}' > "$PIPELINE_OUT/metrics.json"
awk -v lr="$lr" 'BEGIN {
  for (s = 1; s <= 5; s++) printf "{\"step\": %d, \"loss\": %.4f}\n", s, 1 / (s * lr)
  printf "{\"step\": 5, \"eval_accuracy\": %.4f}\n", lr * 2
}' > "$PIPELINE_OUT/metrics.jsonl"
cat "$PIPELINE_DEP_PREP/data.txt" > "$PIPELINE_OUT/data.txt"
"#;

fn workspace() -> Ws {
    let ws = Ws::new(
        r#"
stages:
  prep:
    cmd: cp data.txt $PIPELINE_OUT/data.txt
    inputs: [data.txt]
  train:
    cmd: sh train.sh ${params.lr}
    deps: [prep]
    params: {seed: 7}
    matrix: {lr: [0.1, 0.2, 0.3]}
"#,
    );
    ws.write("data.txt", "one\n");
    ws.write("train.sh", TRAIN_SH);
    ws.run_ok(&[]);
    ws
}

fn rows(v: &Value) -> &Vec<Value> {
    v["rows"].as_array().expect("rows")
}

fn instances_of(v: &Value) -> Vec<&str> {
    rows(v)
        .iter()
        .map(|r| r["instance"].as_str().unwrap())
        .collect()
}

#[test]
fn exp_show_has_a_row_per_instance_the_params_that_differ_and_the_scalar_metrics() {
    let ws = workspace();
    let v = ws.json(&["exp", "show", "train"], 0);
    assert_eq!(
        instances_of(&v),
        ["train@lr=0.1", "train@lr=0.2", "train@lr=0.3"]
    );
    // seed is the same everywhere: not a column; lr differs.
    assert_eq!(v["columns"]["params"], serde_json::json!(["lr"]));
    // Every scalar, those that differ first; the history list is not a column.
    assert_eq!(
        v["columns"]["metrics"],
        serde_json::json!(["accuracy", "eval.f1", "loss", "device"])
    );
    let r = &rows(&v)[2];
    assert_eq!(r["params"]["lr"], 0.3);
    assert_eq!(r["params"]["seed"], 7);
    assert_eq!(r["metrics"]["accuracy"], 0.6);
    assert_eq!(r["current"], true);
    assert_eq!(r["fingerprint"].as_str().unwrap().len(), 32);

    let text = ws.run(&["exp", "show", "train", "--width", "100"]);
    text.expect_code(0);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].starts_with("instance")
            && lines[0].contains("lr")
            && lines[0].contains("accuracy"),
        "{}",
        text.stdout
    );
    assert!(lines[0].contains("fingerprint") && lines[0].contains("when"));
    assert!(lines[3].starts_with("train@lr=0.3") && lines[3].contains("0.6"));
    assert!(lines.iter().all(|l| width(l) <= 100), "{}", text.stdout);
}

#[test]
fn exp_show_sorts_filters_and_writes_csv_and_markdown() {
    let ws = workspace();
    let v = ws.json(&["exp", "show", "--sort", "accuracy", "--desc"], 0);
    // `prep` has no metrics and comes last in a descending sort by a metric.
    assert_eq!(
        instances_of(&v),
        ["train@lr=0.3", "train@lr=0.2", "train@lr=0.1", "prep"]
    );
    let v = ws.json(&["exp", "show", "train", "--where", "lr>=0.2"], 0);
    assert_eq!(instances_of(&v), ["train@lr=0.2", "train@lr=0.3"]);
    let v = ws.json(
        &[
            "exp",
            "show",
            "--where",
            "eval.f1<0.25",
            "--where",
            "device=cpu",
        ],
        0,
    );
    assert_eq!(instances_of(&v), ["train@lr=0.1", "train@lr=0.2"]);
    let v = ws.json(&["exp", "show", "train", "--metrics", "acc*,eval.*"], 0);
    assert_eq!(
        v["columns"]["metrics"],
        serde_json::json!(["accuracy", "eval.f1"])
    );
    assert!(rows(&v)[0]["metrics"].get("loss").is_none());

    let csv = ws.run(&["exp", "show", "train", "--metrics", "accuracy", "--csv"]);
    csv.expect_code(0);
    let lines: Vec<&str> = csv.stdout.lines().collect();
    assert_eq!(lines[0], "instance,lr,accuracy,fingerprint,when");
    assert_eq!(lines.len(), 4);
    assert!(
        lines[1].starts_with("train@lr=0.1,0.1,0.2,"),
        "{}",
        csv.stdout
    );

    let md = ws.run(&["exp", "show", "train", "--metrics", "accuracy", "--md"]);
    md.expect_code(0);
    let lines: Vec<&str> = md.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "| instance | lr | accuracy | fingerprint | when |"
    );
    assert_eq!(lines[1], "|---|---:|---:|---|---|");
    assert!(lines[2].starts_with("| train@lr=0.1 | 0.1 | 0.2 | "));
}

#[test]
fn exp_show_fits_a_narrow_terminal_with_ellipses_and_says_what_it_left_out() {
    let ws = workspace();
    let out = ws.run(&["exp", "show", "train", "--width", "60"]);
    out.expect_code(0);
    let table: Vec<&str> = out.stdout.lines().take(4).collect();
    assert!(table.iter().all(|l| width(l) <= 60), "{}", out.stdout);
    assert!(out.stdout.contains("more column"), "{}", out.stdout);
    let narrow = ws.run(&["exp", "show", "train", "--width", "20"]);
    assert!(narrow.stdout.contains("train@lr…"), "{}", narrow.stdout);
    assert!(
        narrow.stdout.lines().take(4).all(|l| width(l) <= 20),
        "{}",
        narrow.stdout
    );
    // Not a terminal and no --width: $COLUMNS is the limit.
    let mut cmd = ws.command(&["exp", "show", "train"]);
    let o = cmd.env("COLUMNS", "50").output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.lines().take(4).all(|l| width(l) <= 50), "{s}");
    // --width 0: nothing is cut.
    let wide = ws.run(&["exp", "show", "train", "--width", "0"]);
    assert!(!wide.stdout.contains('…') && wide.stdout.contains("device"));
}

#[test]
fn exp_show_all_runs_has_a_row_per_artifact_and_marks_the_latest() {
    let ws = workspace();
    ws.run_ok(&["--set", "train.seed=8"]);
    let v = ws.json(&["exp", "show", "train"], 0);
    assert_eq!(rows(&v).len(), 3);
    assert_eq!(v["columns"]["params"], serde_json::json!(["lr"]));
    let v = ws.json(&["exp", "show", "train", "--all-runs"], 0);
    assert_eq!(rows(&v).len(), 6);
    assert_eq!(v["columns"]["params"], serde_json::json!(["lr", "seed"]));
    let current: Vec<i64> = rows(&v)
        .iter()
        .filter(|r| r["current"] == true)
        .map(|r| r["params"]["seed"].as_i64().unwrap())
        .collect();
    assert_eq!(current, [8, 8, 8]);
    let text = ws.run(&["exp", "show", "train", "--all-runs", "--width", "100"]);
    assert!(text.stdout.contains("train@lr=0.1*"), "{}", text.stdout);
    assert!(text.stdout.contains("(* = the instance's latest artifact)"));
}

#[test]
fn exp_show_mistakes_are_user_errors() {
    let ws = workspace();
    for (args, says) in [
        (vec!["exp", "show", "trian"], "did you mean `train`"),
        (
            vec!["exp", "show", "--metrics", "acuracy"],
            "did you mean `accuracy`",
        ),
        (vec!["exp", "show", "--sort", "lrr"], "did you mean `lr`"),
        (
            vec!["exp", "show", "--where", "lr"],
            "expected COL OP VALUE",
        ),
        (
            vec!["exp", "show", "--where", "=3"],
            "expected COL OP VALUE",
        ),
    ] {
        let out = ws.run(&args);
        out.expect_code(2).assert_no_panic();
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn exp_show_before_any_run_says_so() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo a > $PIPELINE_OUT/a\n");
    let out = ws.run(&["exp", "show"]);
    out.expect_code(0);
    assert!(out.stdout.contains("no artifacts yet"), "{}", out.stdout);
    assert_eq!(ws.json(&["exp", "show"], 0)["rows"], serde_json::json!([]));
}

#[test]
fn diff_of_two_instances_shows_params_and_metric_deltas() {
    let ws = workspace();
    let v = ws.json(&["diff", "train@lr=0.1", "train@lr=0.3"], 0);
    assert_eq!(v["a"]["instance"], "train@lr=0.1");
    assert_eq!(v["same_fingerprint"], false);
    let params = v["params"].as_array().unwrap();
    assert_eq!(params.len(), 1);
    assert_eq!(params[0]["key"], "lr");
    assert_eq!(
        (params[0]["a"].clone(), params[0]["b"].clone()),
        (0.1.into(), 0.3.into())
    );
    assert_eq!(v["inputs"], serde_json::json!([]));
    assert_eq!(v["deps"], serde_json::json!([]), "both read the same prep");
    assert_eq!(v["code_version"], Value::Null);
    let acc = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == "accuracy")
        .unwrap();
    assert!((acc["delta"].as_f64().unwrap() - 0.4).abs() < 1e-9, "{acc}");
    assert!(
        (acc["relative"].as_f64().unwrap() - 2.0).abs() < 1e-9,
        "{acc}"
    );
    assert!(
        v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["key"] != "device")
    );
    // metrics.json and metrics.jsonl differ; data.txt does not.
    let outputs: Vec<&str> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, ["metrics.json", "metrics.jsonl"]);

    let text = ws.run(&["diff", "train@lr=0.1", "train@lr=0.3"]);
    text.expect_code(0);
    let s = &text.stdout;
    assert!(s.contains("lr  0.1 → 0.3"), "{s}");
    assert!(
        s.contains("accuracy") && s.contains("+0.4") && s.contains("(+200.0 %)"),
        "{s}"
    );
    assert!(s.contains("inputs        same (0 files)"), "{s}");
}

#[test]
fn diff_of_one_instance_at_two_runs_shows_the_input_and_dep_that_changed() {
    let ws = workspace();
    ws.write("data.txt", "two\n");
    ws.run_ok(&[]);
    // One argument: the instance's latest against the artifact before it.
    let v = ws.json(&["diff", "train@lr=0.2"], 0);
    assert_eq!(v["params"], serde_json::json!([]));
    let deps = v["deps"].as_array().unwrap();
    assert_eq!(deps.len(), 1);
    assert_eq!(deps[0]["key"], "prep");
    assert_ne!(deps[0]["a"]["output_digest"], deps[0]["b"]["output_digest"]);
    let prep = ws.json(&["diff", "prep~1", "prep"], 0);
    let inputs = prep["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1);
    assert!(inputs[0]["key"].as_str().unwrap().ends_with("data.txt"));
    // A fingerprint prefix names the same artifact as the instance name.
    let fp = v["a"]["fingerprint"].as_str().unwrap()[..8].to_string();
    let by_fp = ws.json(&["diff", &fp, "train@lr=0.2"], 0);
    assert_eq!(by_fp["a"]["fingerprint"], v["a"]["fingerprint"]);
    let same = ws.run(&["diff", "train@lr=0.2", "train@lr=0.2"]);
    assert!(
        same.stdout.contains("the same fingerprint"),
        "{}",
        same.stdout
    );
}

#[test]
fn diff_mistakes_are_user_errors() {
    let ws = workspace();
    for (args, says) in [
        (vec!["diff", "trian@lr=0.1", "prep"], "did you mean"),
        (vec!["diff", "train", "prep"], "several instances"),
        (vec!["diff", "prep~5", "prep"], "has 1 artifact"),
        (vec!["diff", "prep"], "has 1 artifact"),
    ] {
        let out = ws.run(&args);
        out.expect_code(2).assert_no_panic();
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn plot_overlays_the_instances_curves_in_one_svg() {
    let ws = workspace();
    let out = ws.run(&["plot", "train", "--metric", "loss", "-o", "loss.svg"]);
    out.expect_code(0);
    assert!(out.stdout.contains("5 points"), "{}", out.stdout);
    let svg = read(ws.path("loss.svg"));
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    for i in ["train@lr=0.1", "train@lr=0.2", "train@lr=0.3"] {
        assert!(svg.contains(i), "the legend has no {i}");
    }
    assert!(
        svg.matches("<polyline").count() >= 3,
        "one curve per instance"
    );
    // The default file name is the metric's; one instance; an evaluation metric.
    let out = ws.run(&["plot", "train@lr=0.2", "--metric", "eval_accuracy"]);
    out.expect_code(0);
    assert!(ws.path("eval_accuracy.svg").is_file());

    for (args, says) in [
        (
            vec!["plot", "train", "--metric", "los"],
            "did you mean `loss`",
        ),
        (
            vec!["plot", "prep", "--metric", "loss"],
            "has a metrics.jsonl",
        ),
        (
            vec!["plot", "trian", "--metric", "loss"],
            "did you mean `train`",
        ),
    ] {
        let out = ws.run(&args);
        out.expect_code(2).assert_no_panic();
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}
