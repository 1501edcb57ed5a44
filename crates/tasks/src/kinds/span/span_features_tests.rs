use super::*;
use proptest::prelude::*;
use serde_json::Value;

const SPECIALS: Specials = Specials { cls: 2, sep: 3 };

fn cfg(max_seq_length: usize, doc_stride: usize, max_query_length: usize) -> SpanConfig {
    SpanConfig {
        max_seq_length,
        doc_stride,
        max_query_length,
        ..SpanConfig::default()
    }
}

#[test]
fn the_features_are_those_of_transformers_run_qa() {
    // testdata/make_hf_qa_features.py: a fast BERT tokenizer, truncation="only_second",
    // max_length 20, stride 4, return_overflowing_tokens, and run_qa.py's labelling loop.
    let cases: Value = serde_json::from_str(include_str!("testdata/hf_qa_features.json")).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let mut windows_seen = 0;
    for case in cases.as_array().unwrap() {
        let context = case["context"].as_str().unwrap();
        let ctx = TokenizedContext::from_starts(
            context,
            ids(&case["context_ids"]),
            &ids(&case["context_starts"]),
        )
        .unwrap();
        let a = ids(&case["answer"]);
        let answer = a[0] as usize..a[1] as usize;
        let features = build_features(
            0,
            &ids(&case["question_ids"]),
            &ctx,
            Some(&answer),
            SPECIALS,
            &cfg(20, 4, 7),
        )
        .unwrap();
        let expected = case["features"].as_array().unwrap();
        assert_eq!(features.len(), expected.len(), "{context}");
        for (f, e) in features.iter().zip(expected) {
            assert_eq!(f.input_ids, ids(&e["input_ids"]));
            assert_eq!(f.token_type_ids, ids(&e["token_type_ids"]));
            assert_eq!(f.start_position as u64, e["start"].as_u64().unwrap());
            assert_eq!(f.end_position as u64, e["end"].as_u64().unwrap());
            if f.has_answer() {
                let (s, t) = (
                    f.context_token(f.start_position),
                    f.context_token(f.end_position),
                );
                let span = ctx.spans[s.unwrap()].start..ctx.spans[t.unwrap()].end;
                assert_eq!(&context[span], &context[answer.clone()]);
            }
            windows_seen += 1;
        }
    }
    assert_eq!(windows_seen, 18);
}

#[test]
fn windows_overlap_by_the_stride_and_end_with_the_context() {
    assert_eq!(windows(11, 5, 2), [0..5, 3..8, 6..11]);
    assert_eq!(windows(12, 5, 2), [0..5, 3..8, 6..11, 9..12]);
    assert_eq!(
        (windows(5, 5, 2).len(), windows(5, 5, 2)[0].clone()),
        (1, 0..5)
    );
    assert_eq!(windows(6, 5, 0), [0..5, 5..6]);
    assert_eq!(
        (windows(0, 5, 2).len(), windows(0, 5, 2)[0].clone()),
        (1, 0..0)
    );
}

#[test]
fn configs_that_cannot_make_windows_are_errors() {
    SpanConfig::default().validate().unwrap();
    // `for_length` fits the question and the stride to any window from 8 tokens up.
    assert_eq!(SpanConfig::for_length(256), SpanConfig::default());
    for n in 8..600 {
        SpanConfig::for_length(n).validate().unwrap();
    }
    let c = SpanConfig::for_length(128);
    assert_eq!((c.max_query_length, c.doc_stride), (32, 46));
    let e = cfg(128, 64, 64).validate().unwrap_err();
    assert!(matches!(e, SpanError::Config { window: 61, .. }), "{e}");
    assert!(e.to_string().contains("not more than doc_stride 64"));
    assert!(cfg(10, 0, 20).validate().is_err());
    let zero = SpanConfig {
        max_answer_length: 0,
        ..SpanConfig::default()
    };
    assert_eq!(
        zero.validate(),
        Err(SpanError::Zero {
            what: "max_answer_length"
        })
    );
}

#[test]
fn token_spans_from_starts_end_before_whitespace_and_check_offsets() {
    let text = "ab cd\u{3000}北京 ";
    let t = TokenizedContext::from_starts(text, vec![1, 2, 3, 4], &[0, 3, 8, 11]).unwrap();
    let pieces: Vec<&str> = t.spans.iter().map(|s| &text[s.clone()]).collect();
    assert_eq!(pieces, ["ab", "cd", "北", "京"]);
    assert!(matches!(
        TokenizedContext::from_starts(text, vec![1, 2], &[0, 9]),
        Err(SpanError::Offsets {
            index: 1,
            offset: 9,
            ..
        })
    ));
    assert!(TokenizedContext::from_starts(text, vec![1, 2], &[3, 0]).is_err());
    assert!(TokenizedContext::from_starts(text, vec![1], &[0, 3]).is_err());
    assert!(TokenizedContext::from_spans(text, vec![1, 2], vec![0..2, 1..2]).is_ok());
    assert!(TokenizedContext::from_spans(text, vec![1, 2], vec![3..5, 0..2]).is_err());
    assert!(TokenizedContext::from_spans(text, vec![1, 2], vec![8..10, 11..14]).is_err());
    assert!(TokenizedContext::from_spans(text, vec![1, 2], vec![0..5, 3..4]).is_err());
    assert_eq!(char_range(text, &(8..14)), 6..8);
}

/// A context of `n` one-character tokens `一二三…` (3 bytes each).
fn cjk(n: usize) -> (String, TokenizedContext) {
    let text: String = (0..n)
        .map(|i| char::from_u32(0x4E00 + i as u32).unwrap())
        .collect();
    let starts: Vec<u32> = (0..n as u32).map(|i| 3 * i).collect();
    let ctx =
        TokenizedContext::from_starts(&text, (0..n as u32).map(|i| 100 + i).collect(), &starts)
            .unwrap();
    (text, ctx)
}

#[test]
fn decoding_takes_the_best_pair_over_all_windows_within_the_length_limit() {
    let (text, ctx) = cjk(30);
    let c = SpanConfig {
        max_answer_length: 3,
        n_best_size: 5,
        ..cfg(20, 4, 4)
    };
    // Question of 2 tokens: windows of 15 context tokens.
    let features = build_features(7, &[50, 51], &ctx, None, SPECIALS, &c).unwrap();
    assert_eq!(
        features
            .iter()
            .map(|f| f.window.clone())
            .collect::<Vec<_>>(),
        [0..15, 11..26, 22..30]
    );
    assert!(features.iter().all(|f| !f.has_answer() && f.example == 7));
    let mut logits: Vec<(Vec<f32>, Vec<f32>)> = features
        .iter()
        .map(|f| {
            (
                vec![0.0; f.input_ids.len() + 3],
                vec![0.0; f.input_ids.len() + 3],
            )
        })
        .collect();
    // The best start and end overall (question and [CLS] positions are never answers), too far
    // apart in window 0; in window 1 a start at token 12 and an end at token 13.
    logits[0].0[0] = 50.0;
    logits[0].0[5] = 5.0; // token 1
    logits[0].1[10] = 5.0; // token 6: 6 tokens from token 1, over max_answer_length
    logits[1].0[5] = 4.0; // token 12
    logits[1].1[6] = 4.0; // token 13
    logits[2].0[4] = f32::NAN; // token 22: its pairs are skipped
    let refs: Vec<(&[f32], &[f32])> = logits.iter().map(|(s, e)| (&s[..], &e[..])).collect();
    let frefs: Vec<&SpanFeature> = features.iter().collect();
    let n = decode(&frefs, &refs, &ctx, &c).unwrap();
    assert_eq!(n.len(), 5);
    assert_eq!(n[0].span, 36..42, "tokens 12 and 13 of {text}");
    assert_eq!(
        (n[0].score, n[0].start_logit, n[0].end_logit),
        (8.0, 4.0, 4.0)
    );
    // Then window 0's (token 1, ends 1..=3) and (starts 4..=6, token 6), all at 5.
    assert_eq!(n[1].span, 3..6);
    assert_eq!(n[4].span, 12..21);
    assert!(n[1..].iter().all(|c| c.score == 5.0));
    let total: f32 = n.iter().map(|c| c.probability).sum();
    assert!((total - 1.0).abs() < 1e-5);
    assert!(n.windows(2).all(|w| w[0].score >= w[1].score));
    // A span that two windows share is listed once.
    let spans: std::collections::HashSet<_> = n.iter().map(|c| c.span.clone()).collect();
    assert_eq!(spans.len(), n.len());
    let short = [(&logits[0].0[..3], &logits[0].1[..3])];
    assert!(matches!(
        decode(&frefs[..1], &short, &ctx, &c),
        Err(SpanError::Logits { feature: 0, .. })
    ));
}

#[test]
fn an_empty_context_gives_one_window_and_no_answer() {
    let ctx = TokenizedContext::from_starts("", vec![], &[]).unwrap();
    let f = build_features(0, &[9], &ctx, None, SPECIALS, &SpanConfig::default()).unwrap();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].input_ids, [2, 9, 3, 3]);
    let logits = vec![0.0; 4];
    let n = decode(
        &[&f[0]],
        &[(&logits, &logits)],
        &ctx,
        &SpanConfig::default(),
    )
    .unwrap();
    assert!(n.is_empty());
}

/// A random context as a tokenizer would see it: words (one CJK character, or an ASCII word cut
/// into pieces of up to 3 characters, or a punctuation mark), separated by nothing or by
/// whitespace; with each token's start byte.
fn context_strategy() -> impl Strategy<Value = (String, Vec<u32>)> {
    let word = prop_oneof![
        prop::sample::select(vec!["北", "京", "光", "荣", "ω", "。", "，", "-"])
            .prop_map(String::from),
        "[a-z0-9]{1,7}",
    ];
    let sep = prop::sample::select(vec!["", "", " ", "\n", "\u{3000}", "  "]);
    prop::collection::vec((sep, word), 0..120).prop_map(|parts| {
        let (mut text, mut starts) = (String::new(), Vec::new());
        for (sep, word) in parts {
            text.push_str(sep);
            let pieces: Vec<char> = word.chars().collect();
            for piece in pieces.chunks(3) {
                starts.push(text.len() as u32);
                text.extend(piece);
            }
        }
        (text, starts)
    })
}

fn tokenized(text: &str, starts: &[u32]) -> TokenizedContext {
    TokenizedContext::from_starts(
        text,
        (0..starts.len() as u32).map(|i| 10 + i).collect(),
        starts,
    )
    .unwrap()
}

fn config_strategy() -> impl Strategy<Value = SpanConfig> {
    (1usize..12, 0usize..10, 1usize..20, 1usize..8).prop_map(|(q, stride, extra, ans)| SpanConfig {
        max_seq_length: q + 3 + stride + extra,
        doc_stride: stride,
        max_query_length: q,
        max_answer_length: ans,
        n_best_size: 5,
    })
}

proptest! {
    #[test]
    fn every_context_character_is_in_some_window(
        (text, starts) in context_strategy(),
        c in config_strategy(),
        qlen in 0usize..30,
    ) {
        let ctx = tokenized(&text, &starts);
        let f = build_features(0, &vec![5; qlen], &ctx, None, SPECIALS, &c).unwrap();
        let mut covered = vec![false; text.len()];
        for feat in &f {
            prop_assert!(feat.input_ids.len() <= c.max_seq_length);
            prop_assert_eq!(feat.input_ids.len(), feat.token_type_ids.len());
            for t in feat.window.clone() {
                covered[ctx.spans[t].clone()].iter_mut().for_each(|b| *b = true);
            }
        }
        for w in f.windows(2) {
            prop_assert_eq!(w[1].window.start, w[0].window.end - c.doc_stride);
        }
        prop_assert_eq!(f.last().unwrap().window.end, starts.len());
        for (b, ch) in text.char_indices() {
            prop_assert!(ch.is_whitespace() || covered[b], "{:?} at {} of {:?}", ch, b, text);
        }
    }

    #[test]
    fn a_gold_answer_maps_back_to_itself(
        (text, starts) in context_strategy(),
        c in config_strategy(),
        qlen in 0usize..30,
        pick in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        prop_assume!(!starts.is_empty());
        let ctx = tokenized(&text, &starts);
        let (i, j) = (pick.0.index(starts.len()), pick.1.index(starts.len()));
        let (i, j) = (i.min(j), i.max(j));
        let answer = ctx.spans[i].start..ctx.spans[j].end;
        let f = build_features(0, &vec![5; qlen], &ctx, Some(&answer), SPECIALS, &c).unwrap();
        for feat in f.iter().filter(|f| f.has_answer()) {
            let s = feat.context_token(feat.start_position).unwrap();
            let e = feat.context_token(feat.end_position).unwrap();
            prop_assert_eq!((s, e), (i, j));
            prop_assert_eq!(&text[ctx.spans[s].start..ctx.spans[e].end], &text[answer.clone()]);
        }
        // An answer no longer than the overlap + 1 is whole in some window, and decodes to
        // itself when the logits point at it.
        if j - i < c.doc_stride + 1 {
            let feat = f.iter().find(|f| f.has_answer());
            prop_assert!(feat.is_some(), "{} tokens, windows {:?}", j - i + 1,
                f.iter().map(|f| f.window.clone()).collect::<Vec<_>>());
            let feat = feat.unwrap();
            if j - i < c.max_answer_length {
                let mut s = vec![0.0f32; feat.input_ids.len()];
                let mut e = s.clone();
                s[feat.start_position] = 10.0;
                e[feat.end_position] = 10.0;
                let n = decode(&[feat], &[(&s, &e)], &ctx, &c).unwrap();
                prop_assert_eq!(&text[n[0].span.clone()], &text[answer.clone()]);
            }
        }
    }

    #[test]
    fn the_decoded_answer_is_always_a_substring_within_the_limits(
        (text, starts) in context_strategy(),
        c in config_strategy(),
        seed in any::<u64>(),
    ) {
        let ctx = tokenized(&text, &starts);
        let f = build_features(0, &[5, 6], &ctx, None, SPECIALS, &c).unwrap();
        // Deterministic pseudo-random logits from the seed (SplitMix64 steps).
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0
        };
        let logits: Vec<(Vec<f32>, Vec<f32>)> = f
            .iter()
            .map(|x| ((0..x.input_ids.len()).map(|_| next()).collect(), (0..x.input_ids.len()).map(|_| next()).collect()))
            .collect();
        let refs: Vec<(&[f32], &[f32])> = logits.iter().map(|(s, e)| (&s[..], &e[..])).collect();
        let frefs: Vec<&SpanFeature> = f.iter().collect();
        let n = decode(&frefs, &refs, &ctx, &c).unwrap();
        prop_assert_eq!(n.is_empty(), starts.is_empty());
        prop_assert!(n.len() <= c.n_best_size);
        for cand in &n {
            let answer = text.get(cand.span.clone());
            prop_assert!(answer.is_some());
            let first = ctx.spans.iter().position(|s| s.start == cand.span.start).unwrap();
            let last = ctx.spans.iter().rposition(|s| s.end == cand.span.end).unwrap();
            prop_assert!(first <= last && last - first < c.max_answer_length);
        }
        // The best is the best valid pair of any window.
        let mut best = f32::NEG_INFINITY;
        for (x, (s, e)) in f.iter().zip(&logits) {
            let end = x.context_start + x.window.len();
            for (a, &sa) in s.iter().enumerate().take(end).skip(x.context_start) {
                let ends = &e[a..end.min(a + c.max_answer_length)];
                best = ends.iter().fold(best, |m, &eb| m.max(sa + eb));
            }
        }
        if let Some(top) = n.first() {
            prop_assert_eq!(top.score, best);
        }
    }
}

#[test]
fn encode_with_a_tokenizer_closure() {
    // One token per non-space character, as a BERT tokenizer on Chinese.
    let tokenize = |text: &str, ids: &mut Vec<u32>, starts: &mut Vec<u32>| {
        for (b, c) in text.char_indices().filter(|(_, c)| !c.is_whitespace()) {
            ids.push(c as u32 % 1000 + 10);
            starts.push(b as u32);
        }
    };
    let context = "光荣 开发了它。";
    let answer = 0..6;
    let (ctx, f) = encode_with(
        tokenize,
        3,
        " 谁开发的？",
        context,
        Some(&answer),
        SPECIALS,
        &cfg(16, 2, 8),
    )
    .unwrap();
    assert_eq!(ctx.spans.len(), 7);
    assert_eq!(
        ctx.spans[1],
        3..6,
        "the token before the space ends before it"
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].input_ids.len(), 1 + 5 + 1 + 7 + 1);
    assert_eq!(
        (f[0].start_position, f[0].end_position, f[0].example),
        (7, 8, 3)
    );
}
