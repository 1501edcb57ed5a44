//! The baselines on small synthetic protocols written to a temporary directory and loaded by
//! `pipeline_tasks`, as the stage loads them.

use super::*;
use serde_json::json;

/// A deterministic stream of characters from a small alphabet of CJK characters.
struct Chars(u64);

impl Chars {
    fn next(&mut self) -> char {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let alphabet: Vec<char> = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏"
            .chars()
            .collect();
        alphabet[(self.0 >> 33) as usize % alphabet.len()]
    }

    fn text(&mut self, n: usize) -> String {
        (0..n).map(|_| self.next()).collect()
    }
}

fn load(dir: &std::path::Path, params: Value) -> Protocol {
    ProtocolSpec::from_params(params.as_object().unwrap())
        .unwrap()
        .load(dir)
        .unwrap()
}

fn accuracy(m: &Value, method: &str, set: &str) -> f64 {
    let b = m["baselines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == method)
        .unwrap_or_else(|| panic!("no {method} in {m:#}"));
    let block = if set == "train" || set == "dev" {
        &b[set]
    } else {
        &b["eval"][set]
    };
    block["accuracy"]
        .as_f64()
        .unwrap_or_else(|| panic!("{method} {set}: {b:#}"))
}

/// Matching pairs are a text and a copy with one character changed; the others two unrelated
/// texts; a third of the pairs match.
fn matching_tsv(seed: u64, rows: usize) -> String {
    let mut c = Chars(seed);
    let mut out = String::new();
    for i in 0..rows {
        let a = c.text(10);
        let (b, label) = if i % 3 == 0 {
            let mut b: Vec<char> = a.chars().collect();
            b[4] = c.next();
            (b.into_iter().collect::<String>(), 1)
        } else {
            (c.text(10), 0)
        };
        out.push_str(&format!("{a}\t{b}\t{label}\n"));
    }
    out
}

#[test]
fn overlap_rule_and_pair_model_learn_paraphrase_matching() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("train.tsv"), matching_tsv(1, 300)).unwrap();
    std::fs::write(dir.path().join("test.tsv"), matching_tsv(2, 90)).unwrap();
    let protocol = load(
        dir.path(),
        json!({"task": "lcqmc", "train": "train.tsv", "dev_fraction": 0.2, "test": "test.tsv"}),
    );
    let p = BaselineParams::parse(&Map::new()).unwrap();
    let m = run(&protocol, &p, &|_| {}).unwrap();
    let names: Vec<&str> = m["baselines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["majority", "overlap", "length", "ngram_lr"]);
    // Majority: class 0, two thirds of the test set.
    assert!((accuracy(&m, "majority", "test") - 60.0 / 90.0).abs() < 1e-9);
    assert!(accuracy(&m, "overlap", "test") > 0.95, "{m:#}");
    assert!(accuracy(&m, "ngram_lr", "test") > 0.8, "{m:#}");
    // Every length is 20 characters: the length rule is the majority class.
    assert!((accuracy(&m, "length", "test") - 60.0 / 90.0).abs() < 1e-9);
    // The finetune stage's metric block shape, and the protocol it ran on.
    let test = &m["baselines"][1]["eval"]["test"];
    assert_eq!(test["examples"], 90);
    assert!(test["f1"].is_number());
    assert_eq!(test["confusion"]["counts"][1][1], 30);
    assert_eq!(m["protocol"]["train"]["examples"], 240);
    assert_eq!(m["length"]["test"]["mean_chars"]["1"], 20.0);
}

#[test]
fn nli_gets_a_hypothesis_only_model_that_finds_a_giveaway_word() {
    // The hypothesis holds 不 exactly when the label is contradiction; the premise is noise.
    let mut c = Chars(7);
    let mut tsv = String::new();
    let labels = ["contradiction", "entailment", "neutral"];
    for i in 0..360 {
        let label = labels[i % 3];
        let marker = match label {
            "contradiction" => "不",
            "entailment" => "是",
            _ => "",
        };
        tsv.push_str(&format!("{}\t{}{marker}\t{label}\n", c.text(8), c.text(6)));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("train.tsv"), &tsv).unwrap();
    let protocol = load(
        dir.path(),
        json!({"task": {"name": "pair", "labels": labels, "header": false},
               "train": "train.tsv", "dev_fraction": 0.25}),
    );
    let p = BaselineParams::parse(&Map::new()).unwrap();
    let m = run(&protocol, &p, &|_| {}).unwrap();
    assert!(accuracy(&m, "hypothesis_lr", "dev") > 0.95, "{m:#}");
    assert!(accuracy(&m, "ngram_lr", "dev") > 0.9, "{m:#}");
    let majority = accuracy(&m, "majority", "dev");
    assert!((majority - 1.0 / 3.0).abs() < 0.02, "{majority}");
    let fit = &m["baselines"][3]["fit"];
    assert!(fit["features"].as_u64().unwrap() > 10, "{fit:#}");
    assert_eq!(fit["dev_accuracy_by_alpha"].as_array().unwrap().len(), 1);
}

#[test]
fn a_choice_task_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let row = r#"{"prompt": "天", "choices": ["地", "玄"], "answer": 0}"#;
    std::fs::write(
        dir.path().join("c.jsonl"),
        format!("{row}\n{row}\n{row}\n{row}\n"),
    )
    .unwrap();
    let protocol = load(
        dir.path(),
        json!({"task": "choice", "train": "c.jsonl", "dev_fraction": 0.25}),
    );
    let p = BaselineParams::parse(&Map::new()).unwrap();
    let err = run(&protocol, &p, &|_| {}).unwrap_err().to_string();
    assert!(
        err.contains("multiple-choice") && err.contains("sentence-pair"),
        "{err}"
    );
}

#[test]
fn a_regression_task_is_refused_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let rows = "手机没电了\t我想找工作\t0.7\n春天花开\t冬天下雪\t3.0\n电影太长\t晚上看书\t0.5\n天气很好\t今天晴朗\t4.5\n";
    std::fs::write(dir.path().join("s.tsv"), rows).unwrap();
    let protocol = load(
        dir.path(),
        json!({"task": "sts_b", "train": "s.tsv", "dev_fraction": 0.25}),
    );
    let p = BaselineParams::parse(&Map::new()).unwrap();
    let err = run(&protocol, &p, &|_| {}).unwrap_err().to_string();
    assert!(
        err.contains("regression") && !err.contains("multiple-choice"),
        "{err}"
    );
}
