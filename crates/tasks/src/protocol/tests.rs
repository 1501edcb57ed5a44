use super::*;
use serde_json::json;
use std::fmt::Write as _;

fn spec(v: Value) -> Result<ProtocolSpec, TaskError> {
    ProtocolSpec::from_params(v.as_object().expect("a map"))
}

fn err(v: Value) -> String {
    spec(v).unwrap_err().to_string()
}

/// `n` LCQMC rows, label = i % 2, each pair distinct.
fn lcqmc_rows(n: usize, tag: &str) -> String {
    let mut s = String::new();
    for i in 0..n {
        writeln!(s, "问题{tag}{i}\t句子{tag}{i}\t{}", i % 2).unwrap();
    }
    s
}

fn nli_rows(n: usize, tag: &str) -> String {
    let mut s = String::new();
    for i in 0..n {
        writeln!(s, "前提{tag}{i}\t假设{tag}{i}\t{}", NLI[i % 3]).unwrap();
    }
    s
}
const NLI: [&str; 3] = ["contradiction", "entailment", "neutral"];

fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = d.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    d
}

#[test]
fn parses_the_lcqmc_and_xnli_shapes() {
    let s = spec(json!({
        "task": "lcqmc", "train": "d/lcqmc/dev.tsv", "dev_fraction": 0.1,
        "test": "d/lcqmc/test.tsv", "lr": 1e-4, "epochs": 3
    }))
    .unwrap();
    assert_eq!(s.dev, DevSpec::Fraction(0.1));
    assert_eq!(s.split_seed, DEFAULT_SPLIT_SEED);
    assert_eq!(s.max_bad_fraction, DEFAULT_MAX_BAD_FRACTION);
    assert_eq!(s.eval.len(), 1);
    assert_eq!(s.eval[0].name, "test");
    assert_eq!(s.paths(), ["d/lcqmc/dev.tsv", "d/lcqmc/test.tsv"]);

    let s = spec(json!({
        "task": "xnli",
        "train": [
            {"path": "d/nli_extra/cmnli/dev.tsv", "format": "cmnli"},
            {"path": "d/nli_extra/ocnli/dev.tsv", "format": "ocnli"},
            "d/more.tsv"
        ],
        "dev_fraction": 0.05, "split_seed": 7, "max_train_examples": 1000,
        "max_eval_examples": null,
        "eval": {"xnli_test": "d/xnli_zh/test.tsv", "xnli_dev": "d/xnli_zh/dev.tsv"}
    }))
    .unwrap();
    assert_eq!(s.train.len(), 3);
    assert_eq!(s.train[0].format.as_ref().unwrap().name(), "cmnli");
    assert!(s.train[2].format.is_none());
    assert_eq!(s.split_seed, 7);
    assert_eq!(s.max_train_examples, Some(1000));
    assert_eq!(s.max_eval_examples, None);
    let names: Vec<&str> = s.eval.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["xnli_dev", "xnli_test"], "a map is ordered by name");

    // The list form keeps its order; `test` comes first.
    let s = spec(json!({
        "task": "xnli", "train": "a.tsv", "dev": ["b.tsv", "c.tsv"], "test": "t.tsv",
        "eval": [{"name": "z", "path": "z.tsv", "format": "xnli"},
                 {"name": "y", "files": ["y1.tsv", {"path": "y2.tsv", "format": "cmnli"}]}]
    }))
    .unwrap();
    let names: Vec<&str> = s.eval.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["test", "z", "y"]);
    assert_eq!(s.eval[2].files.len(), 2);
    let DevSpec::Files(d) = &s.dev else { panic!() };
    assert_eq!(d.len(), 2);
    assert_eq!(
        s.paths(),
        [
            "a.tsv", "b.tsv", "c.tsv", "t.tsv", "z.tsv", "y1.tsv", "y2.tsv"
        ]
    );
}

#[test]
fn param_errors_name_the_param() {
    let base = |extra: Value| {
        let mut m = json!({"task": "xnli", "train": "a.tsv", "dev_fraction": 0.1});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                m.as_object_mut().unwrap().remove(k);
            } else {
                m[k] = v.clone();
            }
        }
        err(m)
    };
    let cases: &[(Value, &str)] = &[
        (json!({"task": null}), "param `task`: missing"),
        (json!({"train": null}), "param `train`: missing"),
        (
            json!({"train": []}),
            "param `train`: the list of files is empty",
        ),
        (json!({"train": [3]}), "param `train[0]`: expected a path"),
        (
            json!({"train": [{"pth": "a"}]}),
            "unknown key `pth` (did you mean `path`?)",
        ),
        (json!({"dev": "b.tsv"}), "param `dev_fraction`: give either"),
        (json!({"dev_fraction": null}), "param `dev`: missing"),
        (
            json!({"dev_fraction": 1.0}),
            "param `dev_fraction`: 1 must be in (0, 1)",
        ),
        (
            json!({"dev_fraction": "x"}),
            "param `dev_fraction`: expected a number",
        ),
        (
            json!({"max_bad_fraction": 2}),
            "param `max_bad_fraction`: 2 must be in [0, 1]",
        ),
        (
            json!({"max_train_examples": 0}),
            "param `max_train_examples`: must be at least 1",
        ),
        (
            json!({"max_eval_examples": -3}),
            "param `max_eval_examples`: expected a non-negative",
        ),
        (json!({"split_seed": "abc"}), "param `split_seed`"),
        (
            json!({"drop_eval_overlap": "yes"}),
            "param `drop_eval_overlap`: expected true or false",
        ),
        (
            json!({"train": [{"path": "a.tsv", "format": "lcqmc"}]}),
            "param `train[0].format`: format lcqmc has label `0`, which task xnli lacks",
        ),
        (
            json!({"train": [{"path": "a.tsv", "format": "choice"}]}),
            "param `train[0].format`: format choice is a choice task, but task xnli is a pair task",
        ),
        (
            json!({"test": "a.tsv"}),
            "param `test[0]`: a.tsv is also a train file",
        ),
        (
            json!({"eval": {"x": "./a.tsv"}}),
            "param `eval.x[0]`: ./a.tsv is also a train file",
        ),
        (
            json!({"eval": {"dev": "b.tsv"}}),
            "`dev` is the name of the dev split",
        ),
        (json!({"eval": {"a b": "b.tsv"}}), "must be letters, digits"),
        (
            json!({"eval": {"path": "b.tsv"}}),
            "give each evaluation set a name",
        ),
        (
            json!({"eval": "b.tsv"}),
            "param `eval`: expected a map of named",
        ),
        (
            json!({"eval": [{"path": "b.tsv"}]}),
            "param `eval[0]`: an evaluation set needs a `name`",
        ),
        (
            json!({"eval": [{"name": "x"}]}),
            "needs either `files` or `path`",
        ),
        (
            json!({"eval": [{"name": "x", "files": "b.tsv", "format": "xnli"}]}),
            "`format` goes with `path`",
        ),
        (
            json!({"eval": {"test": "c.tsv"}, "test": "b.tsv"}),
            "two evaluation sets are named `test`",
        ),
        (json!({"task": "xnil"}), "did you mean `xnli`"),
    ];
    for (extra, want) in cases {
        let got = base(extra.clone());
        assert!(got.contains(want), "{extra}: got {got:?}, want {want:?}");
    }
}

#[test]
fn lcqmc_protocol_holds_out_a_seeded_stratified_dev_set() {
    let d = dir(&[
        ("lcqmc/dev.tsv", &lcqmc_rows(100, "d")),
        (
            "lcqmc/test.tsv",
            &(lcqmc_rows(30, "t") + "问题d3\t句子d3\t1\n"),
        ),
    ]);
    let params = json!({"task": "lcqmc", "train": "lcqmc/dev.tsv", "dev_fraction": 0.1,
                        "test": "lcqmc/test.tsv"});
    let lines_of = |s: &Split| -> Vec<usize> {
        s.examples
            .as_pairs()
            .unwrap()
            .iter()
            .map(|e| e.line)
            .collect()
    };

    // Without dropping eval overlap: 100 = 90 + 10, stratified.
    let mut keep = params.clone();
    keep["drop_eval_overlap"] = json!(false);
    let p = spec(keep).unwrap().load(d.path()).unwrap();
    assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (90, 10, 31));
    assert_eq!(p.dev.label_counts, [5, 5]);
    assert_eq!(p.train.label_counts, [45, 45]);
    // The test row that repeats dev line 4 is counted if that row landed in train.
    let in_train = lines_of(&p.train).contains(&4);
    assert_eq!(p.eval[0].overlap_with_train, Some(usize::from(in_train)));
    assert_eq!(p.train.dropped_eval_overlap, 0);

    // By default that row leaves the train pool first: 99 = 89 + 10.
    let p = spec(params.clone()).unwrap().load(d.path()).unwrap();
    assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (89, 10, 31));
    assert_eq!(p.train.available, 99);
    assert_eq!(p.train.dropped_eval_overlap, 1);
    assert_eq!(p.files[0].dropped_eval_overlap, 1);
    assert_eq!(p.eval[0].overlap_with_train, Some(0));
    assert!(p.dev.held_out_from_train);
    assert_eq!(p.labels, ["0", "1"]);
    // Train and dev partition the rest of the file.
    let mut lines: Vec<usize> = lines_of(&p.train);
    lines.extend(lines_of(&p.dev));
    lines.sort_unstable();
    assert_eq!(lines, (1..=100).filter(|&l| l != 4).collect::<Vec<_>>());
    // Same seed, same split; another seed, another split.
    let again = spec(params.clone()).unwrap().load(d.path()).unwrap();
    assert_eq!(again.dev, p.dev);
    let mut other = params.clone();
    other["split_seed"] = json!(1);
    assert_ne!(spec(other).unwrap().load(d.path()).unwrap().dev, p.dev);
    // Files and examples point at each other.
    let test_ex = &p.eval[0].examples.as_pairs().unwrap()[0];
    assert_eq!(p.file_path(test_ex.file), "lcqmc/test.tsv");

    let j = p.to_json();
    assert_eq!(j["task"], "lcqmc");
    assert_eq!(j["kind"], "pair");
    assert_eq!(j["split_seed"], 12345);
    assert_eq!(j["dev_fraction"], 0.1);
    assert_eq!(j["drop_eval_overlap"], true);
    assert_eq!(j["train"]["examples"], 89);
    assert_eq!(j["train"]["available"], 99);
    assert_eq!(j["train"]["dropped_eval_overlap"], 1);
    assert_eq!(j["train"]["files"][0]["path"], "lcqmc/dev.tsv");
    assert_eq!(j["train"]["files"][0]["rows"], 100);
    assert_eq!(j["train"]["files"][0]["dropped_eval_overlap"], 1);
    assert_eq!(j["train"]["files"][0]["bad"]["total"], 0);
    assert_eq!(j["dev"]["held_out_from_train"], true);
    assert_eq!(j["dev"]["files"], json!([]));
    assert_eq!(j["eval"][0]["name"], "test");
    assert_eq!(j["eval"][0]["files"][0]["rows"], 31);
    assert!(
        j["eval"][0]["files"][0]
            .get("dropped_eval_overlap")
            .is_none()
    );
    assert_eq!(j["max_train_examples"], Value::Null);
}

#[test]
fn train_entirely_inside_eval_is_an_error() {
    let d = dir(&[
        ("a.tsv", &lcqmc_rows(10, "a")),
        ("b.tsv", &lcqmc_rows(12, "a")),
    ]);
    let params = json!({"task": "lcqmc", "train": "a.tsv", "dev_fraction": 0.1, "test": "b.tsv"});
    let e = spec(params).unwrap().load(d.path()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("every train example (a.tsv) is also a dev or evaluation example"),
        "{e}"
    );
}

#[test]
fn xnli_protocol_mixes_formats_and_names_eval_sets() {
    let header = "text_a\ttext_b\tlabel\n";
    let d = dir(&[
        ("nli/cmnli.tsv", &nli_rows(60, "c")),
        (
            "nli/snli.tsv",
            &(nli_rows(30, "s") + "甲\t乙\tcontradictory\n坏\t行\t-\n"),
        ),
        ("xnli/dev.tsv", &(header.to_string() + &nli_rows(12, "x"))),
        ("xnli/test.tsv", &(header.to_string() + &nli_rows(15, "y"))),
    ]);
    let p = spec(json!({
        "task": "xnli",
        "train": [{"path": "nli/cmnli.tsv", "format": "cmnli"},
                  {"path": "nli/snli.tsv", "format": "cnsd_snli"}],
        "dev_fraction": 0.05, "max_bad_fraction": 0.05, "max_train_examples": 50,
        "eval": {"xnli_dev": "xnli/dev.tsv", "xnli_test": "xnli/test.tsv"}
    }))
    .unwrap()
    .load(d.path())
    .unwrap();
    assert_eq!(p.labels, NLI);
    // 60 + 31 = 91 examples, 5 % = 5 held out, then capped to 50.
    assert_eq!(p.train.available, 91);
    assert_eq!(p.dev.len(), 5);
    assert_eq!(p.train.len(), 50);
    assert_eq!(p.train.capped_to, Some(50));
    assert_eq!(p.eval.iter().map(|s| s.len()).collect::<Vec<_>>(), [12, 15]);
    assert_eq!(p.eval[1].label_counts, [5, 5, 5]);
    assert_eq!(p.files.len(), 4);
    assert_eq!(p.files[1].bad.total, 1);
    assert_eq!(p.files[1].bad.samples[0].line, 32);
    assert_eq!(p.bad_rows(), 1);
    assert!(p.files[2].header);
    let j = p.to_json();
    assert_eq!(j["train"]["files"][1]["format"], "cnsd_snli");
    assert_eq!(
        j["train"]["files"][1]["bad"]["by_reason"]["unknown_label"],
        1
    );
    assert_eq!(j["eval"][1]["name"], "xnli_test");
    assert_eq!(j["train"]["capped_to"], 50);

    // The default threshold (1 %) rejects that file: 1 of 32 rows.
    let e = spec(json!({
        "task": "xnli", "train": {"path": "nli/snli.tsv", "format": "cnsd_snli"},
        "dev": "xnli/dev.tsv"
    }))
    .unwrap()
    .load(d.path())
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("nli/snli.tsv: 1 of 32 rows are bad (3.12 %, more than max_bad_fraction = 0.01): unknown_label 1; e.g. nli/snli.tsv:32 unknown_label"),
        "{e}"
    );

    // XNLI's file read as an NLI file without header.
    let e = spec(json!({"task": "cmnli", "train": "xnli/test.tsv", "dev_fraction": 0.1}))
        .unwrap()
        .load(d.path())
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("xnli/test.tsv:1: looks like a header; set header: true"),
        "{e}"
    );
}

#[test]
fn eval_caps_and_missing_files() {
    let d = dir(&[
        ("a.tsv", &lcqmc_rows(40, "a")),
        ("b.tsv", &lcqmc_rows(40, "b")),
    ]);
    let p = spec(json!({"task": "afqmc", "train": "a.tsv", "dev": "b.tsv",
                        "max_eval_examples": 11, "test": "b2.tsv"}))
    .unwrap();
    let e = p.load(d.path()).unwrap_err();
    assert!(
        matches!(e, TaskError::NotFound { ref path, .. } if path == "b2.tsv"),
        "{e}"
    );
    let p = spec(json!({"task": "afqmc", "train": "a.tsv", "dev": "b.tsv",
                        "max_eval_examples": 11}))
    .unwrap()
    .load(d.path())
    .unwrap();
    assert_eq!((p.train.len(), p.dev.len()), (40, 11));
    assert_eq!(p.dev.capped_to, Some(11));
    assert_eq!(p.dev.available, 40);
    assert!(!p.dev.held_out_from_train);
    assert_eq!(p.dev.overlap_with_train, Some(0));
    assert!(p.eval.is_empty());
}

#[test]
fn choice_protocol() {
    let line = |p: &str, n: usize, a: usize| {
        let choices: Vec<String> = (0..n).map(|i| format!("选项{p}{i}")).collect();
        json!({"prompt": format!("问题{p}"), "choices": choices, "answer": a}).to_string() + "\n"
    };
    let train: String = (0..20).map(|i| line(&format!("t{i}"), 3, i % 3)).collect();
    let test: String = (0..6).map(|i| line(&format!("s{i}"), 3, i % 3)).collect();
    let four: String = (0..6).map(|i| line(&format!("f{i}"), 4, i % 4)).collect();
    let d = dir(&[
        ("train.jsonl", &train),
        ("test.jsonl", &test),
        ("four.jsonl", &four),
    ]);
    let p = spec(
        json!({"task": "choice", "train": "train.jsonl", "dev_fraction": 0.2,
                        "test": "test.jsonl"}),
    )
    .unwrap()
    .load(d.path())
    .unwrap();
    assert_eq!(p.num_choices, Some(3));
    assert_eq!(p.labels, ["0", "1", "2"]);
    assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (16, 4, 6));
    assert_eq!(p.to_json()["num_choices"], 3);
    let e = spec(
        json!({"task": "choice", "train": "train.jsonl", "dev_fraction": 0.2,
                        "test": "four.jsonl"}),
    )
    .unwrap()
    .load(d.path())
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "four.jsonl:1: 4 choices, but train.jsonl:1 has 3; every line of a choice task must \
         have the same number of choices"
    );
}

#[test]
fn known_params_cover_the_parser() {
    // Every key the parser reads is listed, so the stage's typo check accepts it.
    for k in [
        "task",
        "train",
        "dev",
        "dev_fraction",
        "test",
        "eval",
        "split_seed",
        "max_train_examples",
        "max_eval_examples",
        "max_bad_fraction",
        "drop_eval_overlap",
        "test_fraction",
    ] {
        assert!(crate::known_params().contains(&k), "{k}");
    }
    assert_eq!(crate::known_params().len(), 12);
}

#[test]
fn tagging_protocol_reads_label2id_and_holds_out_sentences() {
    let mut rows = String::from("text_a\tlabel\n");
    for i in 0..40 {
        if i % 4 == 0 {
            let _ = writeln!(rows, "今 天 {i}\tO O O");
        } else {
            let _ = writeln!(rows, "王 明 {i}\tB-PER I-PER O");
        }
    }
    let d = dir(&[
        ("ner/dev.tsv", &rows),
        ("ner/test.tsv", "text_a\tlabel\n北 京\tB-LOC I-LOC\n"),
        (
            "ner/label2id.json",
            r#"{"O": 0, "B-PER": 1, "I-PER": 2, "B-LOC": 3, "I-LOC": 4}"#,
        ),
    ]);
    let p = spec(json!({
        "task": {"name": "tagging", "header": true, "text": "text_a", "label": "label",
                 "label2id": "ner/label2id.json"},
        "train": "ner/dev.tsv", "dev_fraction": 0.1, "test": "ner/test.tsv"
    }))
    .unwrap()
    .load(d.path())
    .unwrap();
    assert_eq!(p.labels, ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]);
    assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (36, 4, 1));
    // Stratified on "holds an entity": 1 of the 4 held out has none, as in train.
    let dev = p.dev.examples.as_tagged().unwrap();
    assert_eq!(
        dev.iter()
            .filter(|e| e.tags.iter().all(|&t| t == 0))
            .count(),
        1
    );
    // Label counts are characters per tag.
    assert_eq!(p.eval[0].label_counts, [0, 0, 0, 1, 1]);
    assert_eq!(p.to_json()["kind"], "tagging");
    // A missing label2id.json names its path.
    let e = spec(json!({"task": {"name": "tagging", "label2id": "nope.json"},
                        "train": "ner/dev.tsv", "dev_fraction": 0.1}))
    .unwrap()
    .load(d.path())
    .unwrap_err();
    assert!(e.to_string().starts_with("nope.json: no such file"), "{e}");
}

#[test]
fn a_label2id_that_is_a_fifo_or_over_1_mib_is_refused_naming_it() {
    let d = dir(&[("ner/dev.tsv", "text_a\tlabel\n今 天\tO O\n")]);
    let load = |label2id: &str| {
        spec(
            json!({"task": {"name": "tagging", "header": true, "label2id": label2id},
                    "train": "ner/dev.tsv", "dev_fraction": 0.1}),
        )
        .unwrap()
        .load(d.path())
        .unwrap_err()
        .to_string()
    };
    let fifo = d.path().join("ner/fifo.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    // Read at once, not blocked on a writer that never comes.
    let e = load("ner/fifo.json");
    assert_eq!(
        e,
        "ner/fifo.json: cannot read: not a regular file (it is a FIFO)"
    );
    std::fs::File::create(d.path().join("ner/big.json"))
        .unwrap()
        .set_len((1 << 20) + 1)
        .unwrap();
    let e = load("ner/big.json");
    assert_eq!(
        e,
        "ner/big.json: cannot read: larger than 1 MiB, the limit for a label2id.json"
    );
}

#[test]
fn examples_are_read_by_their_type_or_refused_with_both_kinds() {
    use crate::read::{PairExample, TagExample};
    use crate::task::TaskKind;
    let pair = PairExample {
        line: 1,
        text_a: "a".into(),
        text_b: "b".into(),
        label: 0,
        file: 0,
    };
    let ex = <PairExample as KindExample>::wrap(vec![pair.clone()]);
    assert_eq!(ex.kind(), TaskKind::Pair);
    assert_eq!(ex.of::<PairExample>(), Ok(&[pair][..]));
    let err = ex.of::<TagExample>().unwrap_err();
    assert_eq!(
        err,
        WrongKind {
            expected: TaskKind::Tagging,
            found: TaskKind::Pair
        }
    );
    assert_eq!(
        err.to_string(),
        "the examples are of a pair task, not of a tagging task"
    );
    for kind in [TaskKind::Choice, TaskKind::Span, TaskKind::ReadingChoice] {
        assert_eq!(Examples::empty(kind).kind(), kind);
    }
}
