use super::*;
use serde_json::json;
use std::io::Write;

fn write(v: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(v.as_bytes()).unwrap();
    f
}

fn read(v: &Value) -> Result<SquadFile, SquadError> {
    let f = write(&v.to_string());
    read_squad(f.path())
}

fn qa(id: &str, q: &str, answers: Value) -> Value {
    json!({"id": id, "question": q, "answers": answers})
}

fn squad(articles: Vec<Value>) -> Value {
    json!({"version": "v1.0", "data": articles})
}

fn article(title: &str, context: &str, qas: Vec<Value>) -> Value {
    json!({"title": title, "paragraphs": [{"context": context, "qas": qas}]})
}

const CTX: &str = "《星河》是光荣和ω-force开发的游戏，2010年发行。光荣位于横滨。";

#[test]
fn reads_spans_in_characters_and_keeps_every_gold_text() {
    let f = read(&squad(vec![article(
        "星河",
        CTX,
        vec![
            qa(
                "Q0",
                "  谁开发的？",
                json!([{"text": "光荣和ω-force", "answer_start": 5},
                       {"text": "光荣", "answer_start": 5},
                       {"text": "光荣公司", "answer_start": -1}]),
            ),
            qa(
                "Q1",
                "哪年发行？",
                json!([{"text": "2010年", "answer_start": 21}]),
            ),
        ],
    )]))
    .unwrap();
    assert_eq!(f.examples.len(), 2);
    let e = &f.examples[0];
    assert_eq!(e.question, "谁开发的？");
    assert_eq!(e.gold_texts(), ["光荣和ω-force", "光荣", "光荣公司"]);
    let span = e.target().unwrap().clone();
    assert_eq!(&CTX[span.clone()], "光荣和ω-force");
    assert_eq!(char_offset(CTX, span.start), 5);
    assert_eq!(e.answers[2].span, None);
    assert_eq!(&CTX[f.examples[1].target().unwrap().clone()], "2010年");
    let r = &f.report;
    assert_eq!(
        (r.articles, r.contexts, r.questions_read, r.questions),
        (1, 1, 2, 2)
    );
    assert_eq!((r.answers, r.without_span, r.dropped.total), (4, 0, 0));
    assert_eq!(r.answer_notes.count(SquadIssue::AnswerNotInContext), 1);
    assert_eq!(r.answer_notes.total, 1);
    f.require_labels().unwrap();
    f.check_bad_fraction(0.0).unwrap();
}

#[test]
fn a_wrong_answer_start_is_repaired_to_the_nearest_occurrence() {
    // 光荣 is at characters 5 and 29.
    let at = |text: &str, given| locate(CTX, text, given).map(|s| char_offset(CTX, s.start));
    assert_eq!(at("光荣", Some(5)), Some(5));
    assert_eq!(at("光荣", Some(7)), Some(5));
    assert_eq!(at("光荣", Some(25)), Some(29));
    assert_eq!(at("光荣", Some(-1)), Some(5));
    assert_eq!(at("光荣", None), Some(5));
    assert_eq!(at("光荣", Some(999)), Some(29));
    // A tie (0 and 4 are both 2 from 2): the earlier.
    assert_eq!(locate("ab__ab", "ab", Some(2)), Some(0..2));
    assert_eq!(locate(CTX, "索尼", Some(5)), None);
    let f = read(&squad(vec![article(
        "t",
        CTX,
        vec![qa(
            "Q",
            "谁？",
            json!([{"text": "光荣", "answer_start": 27}, {"text": "横滨"}]),
        )],
    )]))
    .unwrap();
    let notes = &f.report.answer_notes;
    assert_eq!(notes.count(SquadIssue::AnswerStartRepaired), 2, "{notes:?}");
    assert_eq!(notes.samples[0].1, "Q");
    assert!(
        notes.samples[0].2.contains("27 → 29"),
        "{:?}",
        notes.samples
    );
    assert!(
        notes.samples[1].2.contains("missing → 33"),
        "{:?}",
        notes.samples
    );
}

#[test]
fn bad_questions_are_counted_with_their_id_and_dropped() {
    let ok = || json!([{"text": "光荣", "answer_start": 5}]);
    let f = read(&squad(vec![
        article(
            "empty",
            "  \n ",
            vec![qa("E1", "谁？", ok()), qa("E2", "谁？", ok())],
        ),
        article(
            "t",
            CTX,
            vec![
                qa("A", "谁？", ok()),
                qa("B", " ", ok()),
                json!({"question": "谁？", "answers": ok()}),
                json!({"id": "C", "question": 7, "answers": ok()}),
                json!({"id": "D", "question": "谁？"}),
                qa("A", "又是谁？", ok()),
                qa("F", "谁？", json!([])),
                qa("G", "谁？", json!([{"text": " "}, {"answer_start": 3}])),
                qa("H", "谁？", json!([{"text": "索尼", "answer_start": 0}])),
            ],
        ),
        json!({"title": "no paragraphs"}),
        json!({"title": "no context", "paragraphs": [{"qas": [qa("I", "谁？", ok())]}]}),
    ]))
    .unwrap();
    let ids: Vec<&str> = f.examples.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["A", "H"]);
    let d = &f.report.dropped;
    let counts: Vec<(SquadIssue, usize)> = d.by_cause.iter().map(|(k, v)| (*k, *v)).collect();
    use SquadIssue::*;
    assert_eq!(
        counts,
        [
            (MissingField, 5),
            (EmptyContext, 2),
            (EmptyQuestion, 1),
            (DuplicateId, 1),
            (NoAnswers, 2)
        ]
    );
    let sample_ids: Vec<&str> = d.samples.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(
        sample_ids,
        [
            "E1",
            "E2",
            "B",
            "t.paragraphs[0].qas[2]",
            "C",
            "D",
            "A",
            "F",
            "G",
            "no paragraphs.paragraphs",
            "I"
        ]
    );
    assert_eq!(f.report.questions_read, 13);
    assert_eq!(f.report.without_span, 1);
    assert_eq!(f.report.answer_notes.count(EmptyAnswer), 1);
    assert_eq!(f.report.answer_notes.count(MissingField), 1);
    assert_eq!(
        f.articles.len(),
        3,
        "the article without paragraphs is not one"
    );
    assert!(
        f.report
            .dropped
            .summary()
            .contains("empty_context 2 (e.g. E1: empty context)")
    );
    let err = f.check_bad_fraction(0.5).unwrap_err().to_string();
    assert!(err.contains("11 of 13 questions are bad"), "{err}");
}

#[test]
fn unreadable_and_unlabelled_files_are_errors_naming_the_file() {
    let missing = read_squad(Path::new("/nonexistent/dev.json")).unwrap_err();
    assert!(matches!(missing, SquadError::Io { .. }));
    assert!(
        missing
            .to_string()
            .starts_with("/nonexistent/dev.json: cannot read")
    );
    for (text, needle) in [
        ("{\"data\": [", "EOF"),
        ("[1, 2]", "an object with a `data` array"),
        ("{\"version\": 1}", "no `data` array"),
        ("{\"data\": {}}", "an array"),
        ("{\"data\": []} x", "trailing"),
    ] {
        let f = write(text);
        let e = read_squad(f.path()).unwrap_err().to_string();
        let name = f.path().display().to_string();
        assert!(e.starts_with(&format!("{name}: not SQuAD v1 JSON")), "{e}");
        assert!(e.contains(needle), "{text}: {e}");
    }
    let f = write("{\"data\": [{\"paragraphs\": []}]}");
    let e = read_squad(f.path()).unwrap_err();
    assert!(matches!(e, SquadError::NoQuestions { read: 0, .. }), "{e}");
    let fake = read(&squad(vec![article(
        "t",
        CTX,
        vec![qa(
            "T0",
            "谁？",
            json!([{"text": "FAKE_ANSWER_1", "answer_start": -1}]),
        )],
    )]))
    .unwrap();
    assert_eq!(fake.report.without_span, 1);
    let e = fake.require_labels().unwrap_err().to_string();
    assert!(e.contains("none of its 1 questions"), "{e}");
}

#[test]
fn groups_merge_articles_that_share_a_context_and_the_split_keeps_them_whole() {
    let ok = || json!([{"text": "光荣", "answer_start": 5}]);
    let mut arts: Vec<Value> = (0..10)
        .map(|i| {
            let ctx = format!("{CTX}第{i}篇。");
            article(
                &format!("a{i}"),
                &ctx,
                vec![
                    qa(&format!("{i}a"), "谁？", ok()),
                    qa(&format!("{i}b"), "谁？", ok()),
                ],
            )
        })
        .collect();
    arts.push(article(
        "a0 again",
        &format!("{CTX}第0篇。"),
        vec![qa("x", "谁？", ok())],
    ));
    let f = read(&squad(arts)).unwrap();
    let groups = f.groups();
    assert_eq!(groups[20], groups[0]);
    assert_eq!(groups[..4], [0, 0, 1, 1]);
    let s = f.split(0.2, 0.2, 12345).unwrap();
    assert_eq!(s.groups, [6, 2, 2]);
    let side = |i: usize| {
        [&s.train, &s.dev, &s.test]
            .iter()
            .position(|v| v.contains(&i))
    };
    assert_eq!(side(0), side(20));
    assert!(f.split(0.5, 0.5, 1).is_err());
}

#[test]
fn a_directory_is_no_squad_or_c3_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = read_squad(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let e = crate::c3::read_c3(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
}
