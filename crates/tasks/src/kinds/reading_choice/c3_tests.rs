use super::*;
use serde_json::json;
use std::io::Write;

fn read(v: &Value) -> Result<C3File, C3Error> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(v.to_string().as_bytes()).unwrap();
    read_c3(f.path())
}

fn q(question: &str, choices: &[&str], answer: &str) -> Value {
    json!({"question": question, "choice": choices, "answer": answer})
}

#[test]
fn joins_lines_pads_to_four_and_masks_the_padding() {
    let f = read(&json!([
        [
            ["男：去不去?", "女：不去。"],
            [
                q("女的去吗?", &["去", "不去"], "不去"),
                q("谁问的?", &["男的", "女的", "都不是"], "男的")
            ],
            "1-1"
        ],
        [
            ["一段文字。"],
            [q("说了什么?", &["文字", "图片", "声音", "视频"], "视频")],
            "1-1"
        ],
    ]))
    .unwrap();
    assert_eq!(f.examples.len(), 3);
    let e = &f.examples[0];
    assert_eq!(e.context, "男：去不去?\n女：不去。");
    assert_eq!(e.choices, ["去", "不去", "", ""].map(String::from));
    assert_eq!((e.real_choices, e.answer), (2, 1));
    assert_eq!(e.mask(), [true, true, false, false]);
    assert_eq!(f.examples[1].id, "1-1#1");
    assert_eq!(f.examples[1].mask(), [true, true, true, false]);
    assert_eq!((f.examples[2].document, f.examples[2].answer), (1, 3));
    let r = &f.report;
    assert_eq!(
        (r.documents_read, r.documents, r.questions_read, r.questions),
        (2, 2, 3, 3)
    );
    assert_eq!(r.by_choices, BTreeMap::from([(2, 1), (3, 1), (4, 1)]));
    assert_eq!(r.by_answer, [1, 1, 0, 1]);
    assert_eq!(f.groups(), [0, 0, 1], "the same id, two documents");
    f.check_bad_fraction(0.0).unwrap();
}

#[test]
fn the_padding_is_never_the_prediction() {
    assert_eq!(best_real_choice(&[0.1, 0.2, 9.0, 9.0], 2), 1);
    assert_eq!(best_real_choice(&[0.5, 0.5, 0.1, 0.0], 4), 0);
    assert_eq!(best_real_choice(&[f32::NAN, 0.1, f32::NAN, 0.0], 4), 1);
    assert_eq!(best_real_choice(&[0.3, f32::NAN, 0.1], 3), 0);
    assert_eq!(best_real_choice(&[], 4), 0);
}

#[test]
fn bad_questions_are_counted_with_their_id() {
    let ok = || q("问?", &["甲", "乙"], "甲");
    let f = read(&json!([
        [
            ["文。"],
            [
                ok(),
                q("", &["甲", "乙"], "甲"),
                q("问?", &["甲"], "甲"),
                q("问?", &["甲", "乙", "丙", "丁", "戊"], "甲"),
                q("问?", &["甲", " "], "甲"),
                q("问?", &["甲", "乙"], "丙"),
                q("问?", &["甲", "甲", "乙"], "甲"),
                q("问?", &["甲", "甲", "乙"], "乙"),
                json!({"question": "问?", "choice": ["甲", 2], "answer": "甲"}),
                json!({"choice": ["甲", "乙"], "answer": "甲"})
            ],
            "d1"
        ],
        [[" "], [ok()], "d2"],
        [["文", 3], [ok()], "d3"],
        ["not a document"],
        [["文。"], [], "d5"],
    ]))
    .unwrap();
    assert_eq!(f.examples.len(), 2);
    assert_eq!(f.examples[1].id, "d1#7");
    use C3Issue::*;
    let counts: Vec<(C3Issue, usize)> = f
        .report
        .dropped
        .by_cause
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect();
    assert_eq!(
        counts,
        [
            (MalformedDocument, 1),
            (MissingField, 3),
            (EmptyContext, 1),
            (EmptyQuestion, 1),
            (EmptyChoice, 1),
            (TooFewChoices, 1),
            (TooManyChoices, 1),
            (AnswerNotInChoices, 1),
            (AmbiguousAnswer, 1)
        ]
    );
    let ids: Vec<&str> = f
        .report
        .dropped
        .samples
        .iter()
        .map(|s| s.1.as_str())
        .collect();
    assert_eq!(ids[..3], ["d1#1", "d1#2", "d1#3"]);
    assert!(ids.contains(&"document 3"));
    assert_eq!((f.report.documents_read, f.report.documents), (5, 1));
    assert_eq!(f.report.questions_read, 13);
    let e = f.check_bad_fraction(0.1).unwrap_err().to_string();
    assert!(e.contains("11 of 13 questions are bad"), "{e}");
    assert!(
        e.contains("ambiguous_answer 1 (e.g. d1#6: `甲` is 2 choices)"),
        "{e}"
    );
}

#[test]
fn format_errors_name_the_file() {
    for (text, needle) in [("{\"a\": 1}", "expected an array"), ("[[[\"x\"]", "EOF")] {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let e = read_c3(f.path()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: not C3 JSON", f.path().display())),
            "{e}"
        );
        assert!(e.contains(needle), "{e}");
    }
    let e = read(&json!([])).unwrap_err();
    assert!(matches!(e, C3Error::NoQuestions { read: 0, .. }));
    let e = read_c3(Path::new("/nonexistent/c3.json")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/c3.json: cannot read")
    );
}

#[test]
fn the_split_is_by_document() {
    let docs: Vec<Value> = (0..20)
        .map(|i| {
            json!([
                [format!("文{i}。")],
                [
                    q("问?", &["甲", "乙"], "甲"),
                    q("又问?", &["甲", "乙"], "乙")
                ],
                "x"
            ])
        })
        .collect();
    let f = read(&Value::Array(docs)).unwrap();
    let s = f.split(C3_DEV_FRACTION, C3_TEST_FRACTION, 12345).unwrap();
    assert_eq!(s.groups, [16, 2, 2]);
    assert_eq!((s.train.len(), s.dev.len(), s.test.len()), (32, 4, 4));
    for side in [&s.dev, &s.test] {
        for pair in side.chunks(2) {
            assert_eq!(f.examples[pair[0]].document, f.examples[pair[1]].document);
        }
    }
}
