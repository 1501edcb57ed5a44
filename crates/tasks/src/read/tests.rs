use super::*;
use crate::task::{ChoiceFormat, PairFormat, Task};
use serde_json::json;

fn fmt(name: &str) -> PairFormat {
    match Task::from_value(&json!(name), "task").unwrap() {
        Task::Pair(p) => p,
        _ => panic!(),
    }
}

fn labels(p: &PairFormat) -> Vec<String> {
    p.labels.clone()
}

fn pairs(text: &[u8], format: &PairFormat) -> Result<PairFile, TaskError> {
    read_pairs(text, "x.tsv", format, &labels(format))
}

#[test]
fn reads_lcqmc_rows_and_counts_bad_ones() {
    let f = fmt("lcqmc");
    let data = "今天天气怎么样\t今天天气如何\t1\n\n\
                去哪里买票\t今天吃什么\t0\r\n\
                只有两列\t1\n\
                \t空的\t0\n\
                甲\t乙\t2\n\
                多\t了\t一\t列\n"
        .as_bytes()
        .iter()
        .copied()
        .chain(b"\xff\xfe\t\xe4\xb8\x80\t1\n".iter().copied())
        .collect::<Vec<u8>>();
    let r = pairs(&data, &f).unwrap();
    assert_eq!(r.examples.len(), 2);
    assert_eq!(r.examples[0].text_b, "今天天气如何");
    assert_eq!(r.examples[0].label, 1);
    assert_eq!(r.examples[1].label, 0);
    assert_eq!(
        r.examples[1].line, 3,
        "blank line 2 counts in the numbering"
    );
    let rep = &r.report;
    assert_eq!(
        (rep.rows, rep.examples, rep.blank_lines, rep.bad.total),
        (7, 2, 1, 5)
    );
    assert_eq!(rep.label_counts, [1, 1]);
    let by = |r| rep.bad.by_reason.get(&r).copied().unwrap_or(0);
    assert_eq!(by(BadReason::ColumnCount), 2);
    assert_eq!(by(BadReason::EmptyText), 1);
    assert_eq!(by(BadReason::UnknownLabel), 1);
    assert_eq!(by(BadReason::InvalidUtf8), 1);
    let lines: Vec<usize> = rep.bad.samples.iter().map(|b| b.line).collect();
    assert_eq!(lines, [4, 5, 6, 7, 8]);
    assert_eq!(rep.bad.samples[0].file, "x.tsv");
    assert!(
        rep.bad.samples[2].detail.contains("\"2\""),
        "{:?}",
        rep.bad.samples[2]
    );
    assert!(rep.bad.samples[2].detail.contains("knows 0, 1"));
    assert_eq!(rep.bad.samples[4].detail, "invalid UTF-8 at byte 0");
    // 5 of 7 bad: over any sane threshold, with counts and samples in the message.
    let e = rep.check_bad_fraction(0.05).unwrap_err().to_string();
    assert!(e.starts_with("x.tsv: 5 of 7 rows are bad (71.43 %"), "{e}");
    assert!(e.contains("column_count 2") && e.contains("x.tsv:4"), "{e}");
    rep.check_bad_fraction(0.8).unwrap();
}

#[test]
fn a_header_where_none_is_expected() {
    let e = pairs(
        b"text_a\ttext_b\tlabel\n\xe4\xb8\x80\t\xe4\xba\x8c\t1\n",
        &fmt("lcqmc"),
    )
    .unwrap_err();
    assert!(
        matches!(e, TaskError::UnexpectedHeader { line: 1, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("looks like a header; set header: true"),
        "{e}"
    );
    // XNLI's header read as CMNLI.
    let e = pairs(
        "text_a\ttext_b\tlabel\n一\t二\tneutral\n".as_bytes(),
        &fmt("cmnli"),
    )
    .unwrap_err();
    assert!(matches!(e, TaskError::UnexpectedHeader { .. }));
    // A first row with a merely unknown label is a bad row, not a header.
    let r = pairs("一\t二\t-\n三\t四\tneutral\n".as_bytes(), &fmt("cmnli")).unwrap();
    assert_eq!(r.report.bad.total, 1);
}

#[test]
fn header_rows_are_used_and_checked() {
    let x = fmt("xnli");
    // Columns found by name, in another order; `contradictory` is an alias.
    let r = pairs(
        "label\ttext_b\ttext_a\ncontradictory\t乙\t甲\nentailment\t丁\t丙\n".as_bytes(),
        &x,
    )
    .unwrap();
    assert_eq!(r.examples[0].text_a, "甲");
    assert_eq!(r.examples[0].label, 0);
    assert_eq!(r.examples[1].line, 3);
    assert!(r.report.header);
    // A header without the named column.
    let e = pairs(
        "sentence1\tsentence2\tlabel\n甲\t乙\tneutral\n".as_bytes(),
        &x,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no column `text_a`"), "{e}");
    // A header-less NLI file read as XNLI: its first line holds a label.
    let e = pairs("甲\t乙\tneutral\n丙\t丁\tentailment\n".as_bytes(), &x).unwrap_err();
    assert!(
        matches!(e, TaskError::HeaderLooksLikeData { line: 1, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("set header: false, or give the file its own format")
    );
    // An index past the header's columns: every row is short, never a panic.
    let wide = match Task::from_value(
        &json!({"name": "pair", "header": true, "label": 5, "labels": ["a", "b"]}),
        "t",
    )
    .unwrap()
    {
        Task::Pair(p) => p,
        _ => panic!(),
    };
    let e = read_pairs(
        "h1\th2\th3\n甲\t乙\ta\n".as_bytes(),
        "w.tsv",
        &wide,
        &wide.labels,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("w.tsv:2 column_count: 3 columns, expected at least 6"),
        "{e}"
    );
    // header: true with index columns, but the first line is data.
    let lh = match Task::from_value(&json!({"name": "lcqmc", "header": true}), "t").unwrap() {
        Task::Pair(p) => p,
        _ => panic!(),
    };
    let e = pairs("甲\t乙\t1\n丙\t丁\t0\n".as_bytes(), &lh).unwrap_err();
    assert!(e.to_string().contains("set header: false"), "{e}");
}

#[test]
fn empty_and_all_bad_files_have_no_examples() {
    let e = pairs(b"", &fmt("lcqmc")).unwrap_err();
    assert_eq!(e.to_string(), "x.tsv has no examples (0 data rows, 0 bad)");
    let e = pairs(b"\n\n", &fmt("lcqmc")).unwrap_err();
    assert!(matches!(e, TaskError::NoExamples { .. }));
    let e = pairs("甲\t乙\tneutral\n".as_bytes(), &fmt("lcqmc")).unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("has no examples (1 data rows, 1 bad: unknown_label 1"),
        "{s}"
    );
    assert!(s.contains("x.tsv:1 unknown_label"), "{s}");
    // The XNLI header alone.
    let e = pairs(b"text_a\ttext_b\tlabel\n", &fmt("xnli")).unwrap_err();
    assert!(matches!(e, TaskError::NoExamples { rows: 0, .. }));
}

#[test]
fn bom_and_sample_cap() {
    let mut data = b"\xEF\xBB\xBF\xe4\xb8\x80\t\xe4\xba\x8c\t1\n".to_vec();
    for _ in 0..30 {
        data.extend_from_slice(b"a\tb\t7\n");
    }
    let r = pairs(&data, &fmt("lcqmc")).unwrap();
    assert_eq!(r.examples[0].text_a, "一");
    assert_eq!(r.report.bad.total, 30);
    assert_eq!(r.report.bad.samples.len(), BadRows::MAX_SAMPLES);
}

#[test]
fn format_labels_must_be_task_labels() {
    let e = read_pairs(
        &b"a\tb\t1\n"[..],
        "x",
        &fmt("lcqmc"),
        &["x".into(), "y".into()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("format lcqmc has label `0`"), "{e}");
    // A format's labels map to the task's ids by name, not position.
    let task = vec![
        "neutral".to_string(),
        "entailment".into(),
        "contradiction".into(),
    ];
    let r = read_pairs(
        "甲\t乙\tcontradiction\n".as_bytes(),
        "x",
        &fmt("cmnli"),
        &task,
    )
    .unwrap();
    assert_eq!(r.examples[0].label, 2);
}

#[test]
fn missing_file_names_the_path() {
    let e = read_pair_file(
        Path::new("/nonexistent/d.tsv"),
        "data/d.tsv",
        &fmt("lcqmc"),
        &labels(&fmt("lcqmc")),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "data/d.tsv: no such file (looked for /nonexistent/d.tsv)"
    );
}

#[test]
fn a_line_past_the_limit_and_a_file_that_is_not_regular_are_errors() {
    let f = fmt("lcqmc");
    let mut data = "甲\t乙\t1\n".as_bytes().to_vec();
    data.resize(data.len() + MAX_LINE_BYTES as usize + 1, b'x');
    let e = pairs(&data, &f).unwrap_err().to_string();
    assert!(
        e.contains("x.tsv") && e.contains("line 2 is longer than 16 MiB"),
        "{e}"
    );

    let dir = tempfile::tempdir().unwrap();
    let e = read_pair_file(dir.path(), "data", &f, &labels(&f))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("data: ") && e.contains("not a regular file"),
        "{e}"
    );
}

fn choice(n: Option<usize>) -> ChoiceFormat {
    ChoiceFormat {
        name: "choice".into(),
        num_choices: n,
    }
}

#[test]
fn reads_choices_and_counts_bad_ones() {
    let data = r#"{"prompt": "下雨天带什么？", "choices": ["雨伞", "墨镜", "风筝"], "answer": 0, "id": 7}

{"prompt": "", "choices": ["a", "b", "c"], "answer": 0}
{"prompt": "p", "choices": ["a", " ", "c"], "answer": 0}
{"prompt": "p", "choices": ["a", "b", "c"], "answer": 3}
{"prompt": "p", "choices": ["a", "b", "c"], "answer": "1"}
{"prompt": "p", "choices": ["a"], "answer": 0}
not json
[1, 2]
{"prompt": "q", "choices": ["a", "b", "c"], "answer": 2}
"#;
    let r = read_choices(data.as_bytes(), "c.jsonl", &choice(None)).unwrap();
    assert_eq!(r.num_choices, 3);
    assert_eq!(r.examples.len(), 2);
    assert_eq!(r.examples[1].line, 10);
    assert_eq!(r.examples[1].answer, 2);
    assert_eq!(r.report.label_counts, [1, 0, 1]);
    let by = |x| r.report.bad.by_reason.get(&x).copied().unwrap_or(0);
    assert_eq!(by(BadReason::EmptyText), 2);
    assert_eq!(by(BadReason::BadAnswer), 1);
    assert_eq!(by(BadReason::InvalidJson), 3);
    assert_eq!(by(BadReason::TooFewChoices), 1);
    assert_eq!((r.report.rows, r.report.blank_lines), (9, 1));
}

#[test]
fn choice_count_must_not_change() {
    let data = "{\"prompt\": \"p\", \"choices\": [\"a\", \"b\"], \"answer\": 0}\n\
                {\"prompt\": \"p\", \"choices\": [\"a\", \"b\", \"c\"], \"answer\": 0}\n";
    let e = read_choices(data.as_bytes(), "c.jsonl", &choice(None)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "c.jsonl:2: 3 choices, but c.jsonl:1 has 2; every line of a choice task must have \
         the same number of choices"
    );
    let e = read_choices(data.as_bytes(), "c.jsonl", &choice(Some(4))).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("c.jsonl:1: 2 choices, but the task (num_choices) has 4"),
        "{e}"
    );
    let e = read_choices(&b""[..], "c.jsonl", &choice(None)).unwrap_err();
    assert!(matches!(e, TaskError::NoExamples { .. }));
}

fn single(name: &str) -> crate::task::SingleFormat {
    match Task::from_value(&json!(name), "task").unwrap() {
        Task::Single(s) => s,
        _ => panic!(),
    }
}

#[test]
fn reads_single_texts_by_header_with_digit_labels() {
    let f = single("chnsenticorp");
    let data = "label\ttext_a\n1\t房间很干净\n0\t太吵了\n2\t不知道\n1\t\n";
    let r = read_singles(data.as_bytes(), "s.tsv", &f, &f.labels).unwrap();
    assert_eq!(r.examples.len(), 2);
    assert_eq!(r.examples[0].text, "房间很干净");
    assert_eq!(r.examples[0].label, 1);
    assert_eq!(r.examples[1].line, 3);
    assert_eq!(r.report.label_counts, [1, 1]);
    let reasons: Vec<_> = r
        .report
        .bad
        .samples
        .iter()
        .map(|b| (b.line, b.reason))
        .collect();
    assert_eq!(
        reasons,
        [(4, BadReason::UnknownLabel), (5, BadReason::EmptyText)]
    );
    assert!(r.report.bad.samples[1].detail.contains("text is empty"));
    // A header-less file read as ChnSentiCorp: its first line holds a label.
    let e = read_singles("1\t好\n".as_bytes(), "s.tsv", &f, &f.labels).unwrap_err();
    assert!(matches!(e, TaskError::HeaderLooksLikeData { .. }), "{e}");
}

fn tagging(v: serde_json::Value) -> crate::task::TagFormat {
    match Task::from_value(&v, "task").unwrap() {
        Task::Tagging(t) => t,
        _ => panic!(),
    }
}

#[test]
fn reads_tagged_sentences_in_both_layouts() {
    let f = tagging(json!("msra_ner"));
    let data = "text_a\tlabel\n王 明 在 北 京\tB-PER I-PER O B-LOC I-LOC\n好 的\tO\n\
                在 这\tO B-XYZ\n \tO\n";
    let r = read_tags(data.as_bytes(), "n.tsv", &f, &f.labels).unwrap();
    assert_eq!(r.examples.len(), 1);
    assert_eq!(r.examples[0].text(), "王明在北京");
    assert_eq!(r.examples[0].tags, [3, 4, 0, 1, 2]);
    let reasons: Vec<_> = r
        .report
        .bad
        .samples
        .iter()
        .map(|b| (b.line, b.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (3, BadReason::TagCount),
            (4, BadReason::UnknownLabel),
            (5, BadReason::EmptyText)
        ]
    );
    assert_eq!(r.report.label_counts[0], 1);
    let e = r.report.check_bad_fraction(0.5).unwrap_err().to_string();
    assert!(
        e.contains("n.tsv:3 tag_count: 2 characters but 1 tags"),
        "{e}"
    );

    let c =
        tagging(json!({"name": "tagging", "layout": "conll", "labels": ["O", "B-PER", "I-PER"]}));
    let data = "-DOCSTART- O\n\n王 B-PER\n明 I-PER\n好 O\n\n\n他 B-PER\n们\n\n李 B-PER";
    let r = read_tags(data.as_bytes(), "c.txt", &c, &c.labels).unwrap();
    assert_eq!(r.examples.len(), 2);
    assert_eq!((r.examples[0].line, r.examples[1].line), (3, 11));
    assert_eq!(r.examples[1].chars, ["李"]);
    assert_eq!(r.report.bad.samples[0].line, 8);
    assert_eq!(r.report.bad.samples[0].reason, BadReason::ColumnCount);
    assert_eq!(r.report.rows, 3);
}

#[test]
fn tagging_task_params_are_checked() {
    let err = |v: serde_json::Value| Task::from_value(&v, "task").unwrap_err().to_string();
    assert!(err(json!("tagging")).contains("needs its tags"));
    assert!(
        err(json!({"name": "tagging", "layout": "conl", "labels": ["O", "B-X"]}))
            .contains("unknown layout")
    );
    assert!(err(json!({"name": "tagging", "labels": ["O", "O"]})).contains("listed twice"));
    assert!(err(json!({"name": "msra_ner", "lables": []})).contains("did you mean `labels`"));
    let t = tagging(json!({"name": "tagging", "label2id": "l.json"}));
    assert!(t.labels.is_empty());
    assert_eq!(
        crate::task::tags_from_label2id(r#"{"O": 0, "B-LOC": 2, "I-LOC": 1}"#, "l.json").unwrap(),
        ["O", "I-LOC", "B-LOC"]
    );
    let e = crate::task::tags_from_label2id(r#"{"O": 0, "B-LOC": 0}"#, "l.json").unwrap_err();
    assert!(e.to_string().contains("both have id 0"), "{e}");
}

#[test]
fn a_fifo_task_file_is_refused_without_blocking() {
    let f = fmt("lcqmc");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("train.tsv");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let e = read_pair_file(&fifo, "train.tsv", &f, &labels(&f))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "train.tsv: cannot read: not a regular file (it is a FIFO)"
    );
}
