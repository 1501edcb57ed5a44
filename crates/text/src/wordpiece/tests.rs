//! The fast tokenizer against the Hugging Face pipeline and its own reference path.

use super::*;

fn toy_vocab() -> Arc<Vocab> {
    let tokens = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "爱", "北", "京", "，", "。", "hello",
        "world", "un", "##aff", "##able", "aff", "!", "the", "##s", "e", "##x", "a", "1", "##2",
        "12", "é", "豈", "贵",
    ];
    Arc::new(
        Vocab::from_tokens(
            tokens.iter().map(|s| s.to_string()).collect(),
            Path::new("toy"),
        )
        .unwrap(),
    )
}

fn t(toks: &[&str], starts: &[u32]) -> (Vec<String>, Vec<u32>) {
    (
        toks.iter().map(|s| s.to_string()).collect(),
        starts.to_vec(),
    )
}

fn enc(wp: &WordPiece, text: &str) -> (Vec<String>, Vec<u32>) {
    let (mut ids, mut starts) = (Vec::new(), Vec::new());
    wp.encode_with_offsets(text, &mut ids, &mut starts);
    let (mut rids, mut rstarts) = (Vec::new(), Vec::new());
    wp.encode_reference(text, &mut rids, &mut rstarts);
    assert_eq!(
        (&ids, &starts),
        (&rids, &rstarts),
        "fast vs reference on {text:?}"
    );
    let toks = ids
        .iter()
        .map(|&id| wp.vocab.token(id).to_string())
        .collect();
    (toks, starts)
}

#[test]
fn basic_cases() {
    let wp = WordPiece::new(toy_vocab(), true);
    assert_eq!(
        enc(&wp, "我爱北京，Hello World!"),
        t(
            &["我", "爱", "北", "京", "，", "hello", "world", "!"],
            &[0, 3, 6, 9, 12, 15, 21, 26]
        )
    );
    assert_eq!(
        enc(&wp, "unaffable UNAFFABLE"),
        t(
            &["un", "##aff", "##able", "un", "##aff", "##able"],
            &[0, 2, 5, 10, 12, 15]
        )
    );
    // An unmatched piece makes the whole word [UNK]; a CJK char not in the vocab is [UNK].
    assert_eq!(enc(&wp, "unaffz 天"), t(&["[UNK]", "[UNK]"], &[0, 7]));
    // Accents stripped when lower-casing; control and zero-width characters dropped.
    assert_eq!(enc(&wp, "É\u{200B}x\u{0}"), t(&["e", "##x"], &[0, 5]));
    // The compatibility ideograph U+F900 decomposes (NFD) to 豈 U+8C48.
    assert_eq!(enc(&wp, "\u{F900}"), t(&["豈"], &[0]));
    // Literal special tokens.
    assert_eq!(
        enc(&wp, "a[MASK]b [SEP]"),
        t(&["a", "[MASK]", "[UNK]", "[SEP]"], &[0, 1, 7, 9])
    );
    // Digits: greedy longest match.
    assert_eq!(enc(&wp, "122"), t(&["12", "##2"], &[0, 2]));
    // Long words are [UNK].
    let long = "a".repeat(101);
    assert_eq!(enc(&wp, &long).0, ["[UNK]"]);
}

#[test]
fn cased() {
    let wp = WordPiece::new(toy_vocab(), false);
    assert_eq!(enc(&wp, "Hello é").0, ["[UNK]", "é"]);
    assert_eq!(enc(&wp, "hello e\u{301}").0, ["hello", "[UNK]"]);
}

#[test]
fn bert_chinese_sample() {
    let Some(v) = crate::vocab::shared_bert_vocab() else {
        return;
    };
    let wp = WordPiece::new(v.clone(), true);
    let ids = wp.encode("我爱北京天安门。iPhone 12 unaffable!");
    let toks: Vec<&str> = ids.iter().map(|&i| v.token(i)).collect();
    assert_eq!(
        &toks[..10],
        [
            "我", "爱", "北", "京", "天", "安", "门", "。", "iphone", "12"
        ]
    );
    assert_eq!(
        toks.concat().replace("##", ""),
        "我爱北京天安门。iphone12unaffable!"
    );
}

/// Throughput on real Chinese text, ours and Hugging Face's (prints MB/s; skipped without
/// the data). `cargo test --release -p pipeline-text wordpiece_throughput -- --ignored
/// --nocapture`
#[test]
#[ignore]
fn wordpiece_throughput() {
    let Some(v) = crate::vocab::shared_bert_vocab() else {
        return;
    };
    let hf = crate::hf::HfTokenizer::new(crate::hf::wordpiece_tokenizer(&v, true).unwrap());
    let t = std::time::Instant::now();
    let wp = WordPiece::new(v, true);
    eprintln!("WordPiece::new: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    for f in [
        "corpus/peoples_daily_199801/peoples_daily_199801_raw.txt",
        "corpus/wiki_mrc_contexts/cmrc2018_dev_contexts.txt",
        "corpus/misc/CLUECorpusSmall_sampled.txt",
    ] {
        let Some(p) = crate::vocab::shared_data_file(f) else {
            return;
        };
        let bytes = std::fs::read(p).unwrap();
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4 << 20)]).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let time = |tok: &dyn TokenizeWithOffsets| {
            let (mut ids, mut starts) = (Vec::new(), Vec::new());
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = std::time::Instant::now();
                for line in &lines {
                    ids.clear();
                    starts.clear();
                    tok.encode_with_offsets(line, &mut ids, &mut starts);
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            text.len() as f64 / best / 1e6
        };
        eprintln!(
            "{f}: {:.1} MB of text; ours {:.1} MB/s, Hugging Face {:.1} MB/s (one thread)",
            text.len() as f64 / 1e6,
            time(&wp),
            time(&hf)
        );
    }
}
