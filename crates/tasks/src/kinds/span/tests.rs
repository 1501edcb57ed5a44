use std::sync::Arc;

use crate::squad::{SquadAnswer, SquadExample, locate};

use super::*;
use crate::Examples;
use crate::kinds::encode::tests::encoder;
use crate::kinds::{AnyKind, Outputs};

const CONTEXT: &str =
    "周杰，1982年出生于西安，是一位著名的作家。2005年，周杰毕业于浙江大学，随后回到西安工作。";

fn question(id: &str, question: &str, answer: &str) -> SquadExample {
    SquadExample {
        id: id.into(),
        article: 0,
        context: Arc::from(CONTEXT),
        question: question.into(),
        answers: vec![SquadAnswer {
            text: answer.into(),
            span: locate(CONTEXT, answer, None),
        }],
        file: 0,
    }
}

/// Logits that put the start at input position `s` and the end at `e` of every window.
fn pointing(split: &EncodedSplit, at: &dyn Fn(&SpanFeature) -> (usize, usize)) -> Outputs {
    let s = split.features::<SpanSplit>().unwrap();
    Outputs::Spans(
        s.features
            .iter()
            .map(|f| {
                let n = f.input_ids.len();
                let (a, b) = at(f);
                let one_hot = |k: usize| (0..n).map(|j| if j == k { 5.0 } else { 0.0 }).collect();
                (one_hot(a), one_hot(b))
            })
            .collect(),
    )
}

#[test]
fn gold_targets_decode_back_to_the_exact_answer_and_score_100() {
    let mut e = encoder(64);
    e.span = SpanConfig::for_length(64);
    let ex = vec![
        question("q0", "周杰毕业于哪所大学？", "浙江大学"),
        question("q1", "周杰出生于哪里？", "西安"),
    ];
    let split = encode_questions("dev", &ex, &e);
    assert_eq!(split.examples, 2);
    assert!(split.notes.is_empty(), "{:?}", split.notes);
    // Point every window at its own training labels: windows without the answer point at
    // [CLS], which is no context token, so the answer comes from a window that has it.
    let out = pointing(&split, &|f| (f.start_position, f.end_position));
    let decoded = AnyKind::decode(&Spans, &split, out).unwrap();
    let answers = decoded.get::<Option<SpanAnswer>>("dev").unwrap();
    let texts: Vec<&str> = answers
        .iter()
        .map(|a| a.as_ref().unwrap().text.as_str())
        .collect();
    assert_eq!(texts, ["浙江大学", "西安"]);
    let a = answers[0].as_ref().unwrap();
    assert_eq!(&CONTEXT[a.bytes.clone()], "浙江大学");
    let chars: String = CONTEXT
        .chars()
        .skip(a.chars.start)
        .take(a.chars.len())
        .collect();
    assert_eq!(chars, "浙江大学");
    let s = AnyKind::score(&Spans, &split, &decoded, &[]).unwrap();
    let m = s.spans.as_ref().unwrap();
    assert_eq!((m.exact_match, m.f1, m.examples), (1.0, 1.0, 2));
    assert_eq!(s.selection(), 1.0);
}

#[test]
fn a_wrong_span_scores_partial_f1_and_every_question_is_answered() {
    let mut e = encoder(64);
    e.span = SpanConfig::for_length(64);
    let ex = vec![question("q0", "周杰毕业于哪所大学？", "浙江大学")];
    let split = encode_questions("dev", &ex, &e);
    // The first two context tokens of the first window: "周杰".
    let out = pointing(&split, &|f| (f.context_start, f.context_start + 1));
    let decoded = AnyKind::decode(&Spans, &split, out).unwrap();
    let m = AnyKind::score(&Spans, &split, &decoded, &[])
        .unwrap()
        .spans
        .unwrap();
    assert_eq!((m.exact_match, m.f1, m.unanswered), (0.0, 0.0, 0));
    let mut rows = String::new();
    AnyKind::prediction_rows(&Spans, "dev", &Examples::Span(ex), &decoded, &[], &mut rows).unwrap();
    assert!(
        rows.starts_with("dev\tq0\t周杰毕业于哪所大学？\t浙江大学\t周杰\t0\t2\t0."),
        "{rows}"
    );
}

#[test]
fn answers_no_window_can_hold_or_too_long_to_decode_are_counted_by_id() {
    // Windows of 8 context tokens: a 9-character answer is in none of them.
    let mut e = encoder(16);
    e.span = SpanConfig {
        max_seq_length: 16,
        max_query_length: 4,
        doc_stride: 2,
        max_answer_length: 3,
        n_best_size: 5,
    };
    let long = question("long", "周杰？", "2005年，周杰毕业于");
    let short = question("short", "周杰？", "西安");
    let mut none = question("none", "周杰？", "上海");
    none.answers[0].span = None;
    let split = encode_questions("train", &[long, short, none], &e);
    assert_eq!(split.notes.0["answer_in_no_window"], ["long"]);
    assert_eq!(
        split.notes.0["answer_longer_than_max_answer_length"],
        ["long"]
    );
    assert_eq!(split.notes.0["no_answer_span"], ["none"]);
    let Targets::Spans(t) = &split.targets else {
        panic!()
    };
    assert!(
        t.iter().any(|&(s, _)| s > 0),
        "the short answer is a target"
    );
    // Decoding still answers every question (never with more than max_answer_length tokens).
    let out = pointing(&split, &|f| (f.context_start, f.context_start + 6));
    let decoded = AnyKind::decode(&Spans, &split, out).unwrap();
    let answers = decoded.get::<Option<SpanAnswer>>("train").unwrap();
    assert!(answers.iter().all(Option::is_some));
}
