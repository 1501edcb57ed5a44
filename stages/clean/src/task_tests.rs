//! Stage-level tests of `task_text` and `exclude_texts_of`: a corpus that holds a task's test
//! and dev texts, the task's files among the inputs.

use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::*;

const TRAIN: &str = "label\ttext_a\n1\t这家餐厅的菜很好吃，服务员也很热情。\n0\t快递太慢了，等了整整一个星期才到。\n1\t这家餐厅的菜很好吃，服务员也很热情。\n";
const DEV: &str = "label\ttext_a\n1\t房间很大，窗外就是海，早上能看日出。\n";
const TEST: &str = "label\ttext_a\n0\t耳机戴久了耳朵疼，音质也一般般。\n1\t好评\n";

/// A corpus line with the dev text inside it, one with the test text in Traditional script and
/// full-width punctuation, one clean line, and the first train text.
const CORPUS: &str = "我去年夏天住过这里：房间很大，窗外就是海，早上能看日出。推荐给大家。\n\
                      耳機戴久了耳朵疼，音質也一般般。\n\
                      今天下午社区图书馆举办了读书会，来了很多小朋友。\n\
                      这家餐厅的菜很好吃，服务员也很热情。\n";

/// A workspace with the task files and the corpus; the stage run with `params`.
fn run_with(params: Value) -> (Value, String, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    let write = |name: &str, text: &str| -> PathBuf {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        p
    };
    // The task files are inputs too (so that a change re-runs the stage), not corpus.
    let inputs = vec![
        write("corpus/misc/reviews.txt", CORPUS),
        write("task/train.tsv", TRAIN),
        write("task/dev.tsv", DEV),
        write("task/test.tsv", TEST),
    ];
    let (metrics, text) = run_in(root, &inputs, params);
    (metrics, text, ws)
}

fn run_in(root: &Path, inputs: &[PathBuf], params: Value) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, work, log) = (
        dir.path().join("out"),
        dir.path().join("work"),
        dir.path().join("log"),
    );
    for d in [&out, &work, &log] {
        fs::create_dir_all(d).unwrap();
    }
    let mut params = params.as_object().cloned().unwrap_or_default();
    params.insert("format".into(), json!("lines"));
    params.insert("min_doc_chars".into(), json!(5));
    let progress = ProgressBar::hidden();
    let ctx = StageContext {
        instance: "clean",
        stage: "clean",
        params: &params,
        spec: &Value::Null,
        root,
        out_dir: &out,
        work_dir: &work,
        log_dir: &log,
        inputs,
        deps: &[],
        progress: &progress,
    };
    CleanStage.run(&ctx).unwrap();
    let metrics = serde_json::from_str(&fs::read_to_string(out.join("metrics.json")).unwrap());
    let text = fs::read_to_string(out.join("corpus-00000.txt")).unwrap();
    (metrics.unwrap(), text)
}

fn protocol() -> Value {
    json!({"task": "chnsenticorp", "train": "task/train.tsv", "dev": "task/dev.tsv",
           "test": "task/test.tsv"})
}

#[test]
fn task_text_adds_the_train_texts_and_keeps_dev_and_test_out() {
    let (m, text, _ws) = run_with(json!({"task_text": [protocol()]}));
    // The task files were not read as corpus.
    assert_eq!(m["files"], 1);
    assert_eq!(m["formats"], json!({"corpus/misc/reviews.txt": "lines"}));
    // The dev text (inside a longer line) and the test text (Traditional, normalised first)
    // are gone; the clean line stays.
    assert!(!text.contains("窗外就是海"), "{text}");
    assert!(!text.contains("耳朵疼"), "{text}");
    assert!(text.contains("读书会"));
    // The train texts are in, each once: the first was already in the corpus (a duplicate).
    assert_eq!(text.matches("这家餐厅的菜很好吃").count(), 1, "{text}");
    assert!(text.contains("快递太慢了"));
    let t = &m["task_text"]["chnsenticorp"];
    assert_eq!(
        t["files"],
        json!(["task/train.tsv", "task/dev.tsv", "task/test.tsv"])
    );
    assert_eq!(t["examples"], 3);
    assert_eq!(t["texts"], 3);
    assert_eq!(t["documents_out"], 1);
    assert_eq!(t["dropped"], json!({"duplicate": 2}));
    assert_eq!(t["chars_out"], 17);
    let d = &m["decontamination"];
    assert_eq!(d["paragraphs_dropped"], 2);
    assert_eq!(
        (d["min_chars"].clone(), d["window"].clone()),
        (json!(12), json!(32))
    );
    let c = &d["tasks"]["chnsenticorp"];
    // Three held-out texts; 好评 is too short to match.
    assert_eq!(
        (c["texts"].clone(), c["too_short"].clone()),
        (json!(3), json!(1))
    );
    assert_eq!(c["paragraphs_dropped"], 2);
    assert_eq!(m["drops"]["contaminated"], 2);
}

#[test]
fn without_add_task_text_only_the_exclusion_applies() {
    let (m, text, _ws) = run_with(json!({"task_text": [protocol()], "add_task_text": false}));
    assert!(m.get("task_text").is_none(), "{m}");
    assert!(
        !text.contains("快递太慢了"),
        "the train texts are not added"
    );
    assert!(!text.contains("耳朵疼") && !text.contains("窗外就是海"));
    assert_eq!(
        m["decontamination"]["tasks"]["chnsenticorp"]["paragraphs_dropped"],
        2
    );
}

#[test]
fn exclude_texts_of_alone_drops_paragraphs_not_documents() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    for (name, text) in [
        ("task/train.tsv", TRAIN),
        ("task/dev.tsv", DEV),
        ("task/test.tsv", TEST),
    ] {
        fs::create_dir_all(root.join("task")).unwrap();
        fs::write(root.join(name), text).unwrap();
    }
    // A two-paragraph document; its second paragraph quotes the test text.
    let corpus = root.join("corpus/wiki/a.txt");
    fs::create_dir_all(corpus.parent().unwrap()).unwrap();
    fs::write(
        &corpus,
        "城市公园今年春天新种了一百棵樱花树。\n有人在留言板上写：耳机戴久了耳朵疼，音质也一般般。\n",
    )
    .unwrap();
    let mut params = json!({"exclude_texts_of": [protocol()]});
    params["formats"] = json!({"*/wiki/*": "paragraphs"});
    let (m, text) = run_in(root, &[corpus], params);
    assert_eq!(text, "城市公园今年春天新种了一百棵樱花树。\n");
    assert_eq!(m["documents_out"], 1);
    assert_eq!(m["drops"]["contaminated"], 0);
    assert_eq!(m["decontamination"]["paragraphs_dropped"], 1);
}

#[test]
fn a_missing_task_file_is_a_clear_error() {
    let ws = tempfile::tempdir().unwrap();
    let corpus = ws.path().join("c.txt");
    fs::write(
        &corpus,
        "今天下午社区图书馆举办了读书会，来了很多小朋友。\n",
    )
    .unwrap();
    let params = json!({"task_text": [protocol()], "format": "lines"});
    let params = params.as_object().cloned().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let progress = ProgressBar::hidden();
    let inputs = [corpus];
    let ctx = StageContext {
        instance: "clean",
        stage: "clean",
        params: &params,
        spec: &Value::Null,
        root: ws.path(),
        out_dir: dir.path(),
        work_dir: dir.path(),
        log_dir: dir.path(),
        inputs: &inputs,
        deps: &[],
        progress: &progress,
    };
    let e = format!("{:#}", CleanStage.run(&ctx).unwrap_err());
    assert!(
        e.contains("task `chnsenticorp`") && e.contains("task/train.tsv"),
        "{e}"
    );
}
