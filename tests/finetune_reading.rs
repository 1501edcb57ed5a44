//! Reading comprehension through the binary, on the bundled CMRC 2018- and C3-shaped fixtures
//! (written for the project): the protocol (a seeded 80 / 10 / 10 split of dev by article or
//! document), span extraction and multiple choice trained and exported in transformers' layout,
//! EM / F1 and accuracy in metrics.json, `pipeline predict` on one question and on a file, the
//! baselines on the same split, and bad input counted by question id.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// The data stages and a 2-layer pretrain on the fixtures, then `stages`.
fn yaml(stages: &str) -> String {
    fixture_pretrain_yaml(stages)
}

/// Windows of 64 tokens with a 16-token overlap: the fixture's contexts (~120 characters)
/// take two or three windows each, so decoding merges windows.
const READING: &str = r#"
  finetune_cmrc2018:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/cmrc2018/dev.json"]
    params:
      task: cmrc2018
      train: ${vars.data}/cmrc2018/dev.json
      dev_fraction: 0.1
      test_fraction: 0.1
      epochs: 2
      batch_size: 16
      learning_rate: 0.003
      max_seq_length: 64
      doc_stride: 16
      max_query_length: 16
  finetune_c3:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/c3/dev.json"]
    params:
      task: c3
      train: ${vars.data}/c3/dev.json
      dev_fraction: 0.1
      test_fraction: 0.1
      epochs: 2
      batch_size: 8
      learning_rate: 0.003
      max_seq_length: 48
  baseline_cmrc2018:
    kind: baseline
    inputs: ["${vars.data}/cmrc2018/dev.json"]
    params: {task: cmrc2018, train: "${vars.data}/cmrc2018/dev.json", dev_fraction: 0.1,
             test_fraction: 0.1}
  baseline_c3:
    kind: baseline
    inputs: ["${vars.data}/c3/dev.json"]
    params: {task: c3, train: "${vars.data}/c3/dev.json", dev_fraction: 0.1, test_fraction: 0.1}
"#;

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The fraction at `v`, in [0, 1].
fn fraction(v: &Value) -> f64 {
    let x = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!((0.0..=1.0).contains(&x), "{x}");
    x
}

#[test]
fn cmrc2018_and_c3_train_export_predict_and_match_their_baselines_split() {
    let ws = Ws::new(&yaml(READING));
    let v = ws.run_ok(&[
        "finetune_cmrc2018",
        "finetune_c3",
        "baseline_cmrc2018",
        "baseline_c3",
    ]);
    let cmrc = artifact(&v, "finetune_cmrc2018");
    let m = json_file(cmrc.join("metrics.json"));
    assert_eq!(
        (m["task"].as_str(), m["kind"].as_str()),
        (Some("cmrc2018"), Some("span"))
    );
    // The split: 76 questions on 30 articles, 24 / 3 / 3 articles.
    let g = &m["protocol"]["group_split"];
    assert_eq!(g["by"], "group");
    assert_eq!(g["groups"], json!([24, 3, 3]));
    let items: Vec<u64> = g["items"].as_array().unwrap().iter().map(n).collect();
    assert_eq!(items.iter().sum::<u64>(), 76);
    assert_eq!(n(&m["protocol"]["train"]["examples"]), items[0]);
    assert_eq!(n(&m["eval"]["test"]["examples"]), items[2]);
    for block in [&m["dev"], &m["eval"]["test"]] {
        assert!(
            fraction(&block["f1"]) >= fraction(&block["exact_match"]),
            "{block}"
        );
    }
    assert_eq!(m["span_features"]["doc_stride"], 16);
    assert!(m["history"][0]["dev_exact_match"].is_number());
    // The fixture's reader notes: one answer_start repaired, one answer not in its context.
    let notes = &m["protocol"]["train"]["files"][0]["reading"]["answer_notes"]["by_cause"];
    assert_eq!(
        notes,
        &json!({"answer_start_repaired": 1, "answer_not_in_context": 1})
    );

    // predictions.tsv: every dev and test question, the answer a substring of the context at
    // its character offsets.
    let tsv = read(cmrc.join("predictions.tsv"));
    let mut lines = tsv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "set\tid\tquestion\tgold\tpredicted\tstart\tend\tprobability"
    );
    assert_eq!(lines.count() as u64, items[1] + items[2]);

    // The export: transformers' AlbertForQuestionAnswering, with the task's name.
    let config = json_file(cmrc.join("config.json"));
    assert_eq!(config["architectures"][0], "AlbertForQuestionAnswering");
    assert_eq!(config["finetuning_task"], "cmrc2018");

    let context = "周杰，1982年出生于西安，是一位著名的作家。2005年，周杰毕业于浙江大学。";
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_cmrc2018",
        "--json",
        "--question",
        "周杰毕业于哪所大学？",
        "--context",
        context,
    ]);
    out.expect_code(0).assert_no_panic();
    let p = out.json();
    let (s, e) = (n(&p["start"]) as usize, n(&p["end"]) as usize);
    let at: String = context.chars().skip(s).take(e - s).collect();
    assert_eq!(p["answer"], at.as_str());
    assert!(fraction(&p["probability"]) > 0.0);
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_cmrc2018",
        "--input",
        &format!(
            "{}/datasets/fixtures/cmrc2018/dev.json",
            env!("CARGO_MANIFEST_DIR")
        ),
    ]);
    out.expect_code(0).assert_no_panic();
    assert_eq!(out.stdout.lines().count(), 77, "a header and 76 questions");
    assert!(
        out.stderr.contains("EM ") && out.stderr.contains(" F1 "),
        "{}",
        out.describe()
    );
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_cmrc2018",
        "--question",
        "谁？",
    ]);
    out.expect_code(1).assert_no_panic();
    assert!(out.stderr.contains("--context"), "{}", out.describe());

    // C3: accuracy over the answer positions, 4 choices (padded), the multiple-choice head.
    let c3 = artifact(&v, "finetune_c3");
    let m = json_file(c3.join("metrics.json"));
    assert_eq!(m["kind"], "reading_choice");
    assert_eq!(m["labels"], json!(["0", "1", "2", "3"]));
    assert_eq!(m["protocol"]["num_choices"], 4);
    fraction(&m["eval"]["test"]["accuracy"]);
    let config = json_file(c3.join("config.json"));
    assert_eq!(config["architectures"][0], "AlbertForMultipleChoice");
    assert_eq!(config["finetuning_task"], "c3");
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_c3",
        "--json",
        "--context",
        "男：你去哪儿？\n女：去医院。",
        "--question",
        "女的去哪儿？",
        "--choice",
        "医院",
        "--choice",
        "车站",
        "--choice",
        "学校",
    ]);
    out.expect_code(0).assert_no_panic();
    let p = out.json();
    assert!(n(&p["choice"]) < 3, "the padding is never chosen: {p}");
    assert_eq!(p["probabilities"].as_array().unwrap().len(), 3);
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_c3",
        "--input",
        &format!(
            "{}/datasets/fixtures/c3/dev.json",
            env!("CARGO_MANIFEST_DIR")
        ),
    ]);
    out.expect_code(0).assert_no_panic();
    assert!(
        out.stderr.contains("40 questions, accuracy"),
        "{}",
        out.describe()
    );
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_c3",
        "--context",
        "文",
        "--question",
        "问",
        "--choice",
        "甲",
    ]);
    out.expect_code(1).assert_no_panic();
    assert!(out.stderr.contains("2 to 4"), "{}", out.describe());
    // What a C3 model takes, said when it is given something else.
    let dev = format!(
        "{}/datasets/fixtures/c3/dev.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = ws.run(&["predict", "--stage", "finetune_c3", "一段文字"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stderr
            .contains("model: give --context C --question Q --choice A"),
        "{}",
        out.describe()
    );
    let out = ws.run(&[
        "predict",
        "--stage",
        "finetune_c3",
        "--input",
        &dev,
        "--question",
        "问",
    ]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stderr.contains("or --input FILE, not both"),
        "{}",
        out.describe()
    );

    // The baselines saw the same questions in the same splits.
    for (ft, base) in [(&cmrc, "baseline_cmrc2018"), (&c3, "baseline_c3")] {
        let b = json_file(artifact(&v, base).join("metrics.json"));
        let f = json_file(ft.join("metrics.json"));
        assert_eq!(b["protocol"]["group_split"], f["protocol"]["group_split"]);
        assert_eq!(b["protocol"]["eval"], f["protocol"]["eval"]);
    }
    let b = json_file(artifact(&v, "baseline_cmrc2018").join("metrics.json"));
    fraction(&b["baselines"][0]["eval"]["test"]["f1"]);
}

/// A SQuAD file with one of each problem among plain questions.
fn bad_squad() -> Value {
    let context = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥。";
    // Article `a`'s context is `a` then the characters: its 丙丁 starts after the digits.
    let plain = |a: usize, q: usize| {
        json!({"id": format!("A{a}_Q{q}"), "question": "哪个？",
               "answers": [{"text": "丙丁", "answer_start": 2 + a.to_string().len()}]})
    };
    let mut articles: Vec<Value> = (0..12)
        .map(|a| {
            json!({"title": format!("a{a}"), "paragraphs": [{"context": format!("{a}{context}"),
                   "qas": [plain(a, 0), plain(a, 1)]}]})
        })
        .collect();
    articles.push(json!({"title": "bad", "paragraphs": [
        {"context": context, "qas": [
            // answer_start one off: repaired to where the text is.
            {"id": "OFF_BY_ONE", "question": "哪个？", "answers": [{"text": "丙丁", "answer_start": 3}]},
            // Nowhere in the context: scored, never trained on.
            {"id": "NOT_THERE", "question": "哪个？", "answers": [{"text": "上海", "answer_start": 0}]},
            // Longer than a window's context and than max_answer_length.
            {"id": "TOO_LONG", "question": "哪个？", "answers": [{"text": "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉", "answer_start": 0}]}
        ]},
        // An empty context: dropped, with its question's id.
        {"context": " ", "qas": [{"id": "EMPTY_CONTEXT", "question": "哪个？",
                                  "answers": [{"text": "甲", "answer_start": 0}]}]}
    ]}));
    json!({"version": "v1.0", "data": articles})
}

#[test]
fn bad_reading_input_is_counted_by_question_id_and_never_panics() {
    let ft = r#"
  ft:
    kind: finetune
    deps: [pretrain]
    inputs: ["bad.json"]
    params:
      task: squad
      train: bad.json
      dev_fraction: 0.2
      test_fraction: 0.2
      max_bad_fraction: 0.1
      epochs: 1
      batch_size: 8
      max_seq_length: 24
      doc_stride: 4
      max_query_length: 8
      max_answer_length: 6
"#;
    let ws = Ws::new(&yaml(ft));
    ws.write("bad.json", bad_squad().to_string());
    let v = ws.run_ok(&["ft"]);
    let m = json_file(artifact(&v, "ft").join("metrics.json"));
    let reading = &m["protocol"]["train"]["files"][0]["reading"];
    assert_eq!(reading["dropped"]["by_cause"], json!({"empty_context": 1}));
    assert_eq!(reading["dropped"]["samples"][0][1], "EMPTY_CONTEXT");
    let samples = reading["answer_notes"]["samples"].to_string();
    assert!(
        samples.contains("OFF_BY_ONE") && samples.contains("NOT_THERE"),
        "{samples}"
    );
    // Encoding: counted with the ids, in whichever split the article fell.
    let ids = |cause: &str| -> Vec<String> {
        m["encoding"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|s| s.get(cause))
            .flat_map(|c| c["ids"].as_array().unwrap().clone())
            .map(|id| id.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        ids("answer_in_no_window"),
        ["TOO_LONG"],
        "{:#}",
        m["encoding"]
    );
    assert_eq!(ids("answer_longer_than_max_answer_length"), ["TOO_LONG"]);
    assert_eq!(ids("no_answer_span"), ["NOT_THERE"]);

    // Past max_bad_fraction, or not SQuAD at all: a clear error naming the file.
    ws.set_yaml(&yaml(
        &ft.replace("max_bad_fraction: 0.1", "max_bad_fraction: 0.01"),
    ));
    let out = ws.run(&["run", "ft"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("bad.json") && out.stdout.contains("max_bad_fraction"),
        "{}",
        out.describe()
    );
    ws.write("bad.json", "{\"data\": [1, 2");
    let out = ws.run(&["run", "ft"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("bad.json") && out.stdout.contains("not SQuAD v1 JSON"),
        "{}",
        out.describe()
    );
}
