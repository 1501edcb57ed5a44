//! Hugging Face `tokenizer.json`.
//!
//! The vocab stage writes, beside `vocab.txt`, a `tokenizer.json` that the Hugging Face
//! `tokenizers` library (Rust or Python) loads as is. Both kinds split text as BERT does:
//!
//! - normaliser `BertNormalizer` {clean_text, handle_chinese_chars, strip_accents: null (follows
//!   lowercase), lowercase}; pre-tokeniser `BertPreTokenizer` (whitespace and punctuation), so
//!   every Chinese character is a word of its own;
//! - model `WordPiece` (unk `[UNK]`, `##` continuations, 100 chars a word at most) with the
//!   `WordPiece` decoder, or `Unigram` (the SentencePiece algorithm's model) without a decoder;
//! - post-processor `TemplateProcessing`: `[CLS] $A [SEP]` and `[CLS] $A [SEP] $B:1 [SEP]:1`;
//! - the five special tokens as added special tokens (matched literally in text, skipped by
//!   `decode(.., skip_special_tokens=True)`), as Hugging Face's own BERT tokenizers have them.
//!
//! [`HfTokenizer`] wraps a loaded `tokenizers::Tokenizer` as a [`TokenizeWithOffsets`]; it is
//! the reference the fast [`crate::wordpiece::WordPiece`] is tested against, and the tokenizer
//! of Unigram vocabularies.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::unigram::Unigram;
use tokenizers::models::wordpiece::WordPiece as WordPieceModel;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use crate::vocab::{SPECIAL_TOKENS, Vocab, VocabError};
use crate::wordpiece::{CONTINUING_SUBWORD_PREFIX, MAX_INPUT_CHARS_PER_WORD, TokenizeWithOffsets};

/// Why a tokenizer could not be built, written or loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The `tokenizers` library refused to build or serialise it (its message, as it gives it:
    /// its errors are boxed trait objects, kept out of the source chain as before).
    #[error("{0}")]
    Library(String),
    /// The vocabulary is unusable.
    #[error(transparent)]
    Vocab(#[from] VocabError),
    /// `tokenizer.json` could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `tokenizer.json` of a vocab-stage artifact could not be read: missing, not a
    /// regular file, or larger than [`crate::wordpiece::MAX_TOKENIZER_JSON_BYTES`].
    #[error("cannot read the tokenizer.json the vocab stage writes beside vocab.txt")]
    ReadJson {
        /// The file.
        path: PathBuf,
        /// Why (the shared bounded reader's error, which names the file and the limit).
        #[source]
        source: pipeline_bounded::ReadError,
    },
    /// `tokenizer.json` is not JSON.
    #[error("{}: not valid JSON", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        #[source]
        source: serde_json::Error,
    },
    /// `tokenizer.json` is JSON but not a tokenizer the library can load.
    #[error("{}: not a Hugging Face tokenizer.json: {message}", path.display())]
    NotTokenizer {
        /// The file.
        path: PathBuf,
        /// The library's reason.
        message: String,
    },
}

/// The library's error as its message (`tokenizers::Error` is a boxed trait object).
fn hf_err(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Library(e.to_string())
}

/// BERT's normaliser; accents are stripped exactly when lower-casing (`strip_accents: null`).
pub fn bert_normalizer(lowercase: bool) -> BertNormalizer {
    BertNormalizer::new(true, true, None, lowercase)
}

/// The BERT WordPiece tokenizer over `vocab` (see the module doc).
pub fn wordpiece_tokenizer(vocab: &Vocab, lowercase: bool) -> Result<Tokenizer, TokenizerError> {
    let map: ahash::AHashMap<String, u32> = vocab
        .tokens()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let model = WordPieceModel::builder()
        .vocab(map)
        .unk_token("[UNK]".into())
        .continuing_subword_prefix(CONTINUING_SUBWORD_PREFIX.into())
        .max_input_chars_per_word(MAX_INPUT_CHARS_PER_WORD)
        .build()
        .map_err(hf_err)?;
    let mut tok = Tokenizer::new(model);
    tok.with_decoder(Some(WordPieceDecoder::default()));
    finish(tok, vocab, lowercase)
}

/// A Unigram tokenizer from `(piece, log-probability)` pairs in id order (the special tokens
/// among them); the vocabulary is the pieces.
pub fn unigram_tokenizer(
    pieces: Vec<(String, f64)>,
    lowercase: bool,
) -> Result<Tokenizer, TokenizerError> {
    let vocab = Vocab::from_tokens(
        pieces.iter().map(|(p, _)| p.clone()).collect(),
        Path::new("<unigram pieces>"),
    )?;
    let model = Unigram::from(pieces, Some(vocab.unk_id() as usize), false).map_err(hf_err)?;
    finish(Tokenizer::new(model), &vocab, lowercase)
}

/// Normaliser, pre-tokeniser, post-processor and special tokens, common to both models.
fn finish(mut tok: Tokenizer, vocab: &Vocab, lowercase: bool) -> Result<Tokenizer, TokenizerError> {
    tok.with_normalizer(Some(bert_normalizer(lowercase)));
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    let post = TemplateProcessing::builder()
        .try_single("[CLS] $A [SEP]")
        .map_err(hf_err)?
        .try_pair("[CLS] $A [SEP] $B:1 [SEP]:1")
        .map_err(hf_err)?
        .special_tokens(vec![("[CLS]", vocab.cls_id()), ("[SEP]", vocab.sep_id())])
        .build()
        .map_err(hf_err)?;
    tok.with_post_processor(Some(post));
    let specials: Vec<AddedToken> = SPECIAL_TOKENS
        .iter()
        .map(|s| AddedToken::from(*s, true))
        .collect();
    tok.add_special_tokens(&specials);
    Ok(tok)
}

/// Writes `tok` as pretty-printed JSON to `path` (deterministic: the library orders the
/// vocabulary and added tokens by id).
pub fn write_tokenizer_json(tok: &Tokenizer, path: &Path) -> Result<(), TokenizerError> {
    let text = tok.to_string(true).map_err(hf_err)?;
    std::fs::write(path, text + "\n").map_err(|source| TokenizerError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The lower-casing flag of a tokenizer.json that is exactly the BERT WordPiece tokenizer
/// [`wordpiece_tokenizer`] writes for `vocab`, or `None` when it is anything else (then only
/// the Hugging Face tokenizer itself can be trusted to encode it).
pub fn bert_wordpiece_lowercase(json: &Value, vocab: &Vocab) -> Option<bool> {
    let n = &json["normalizer"];
    let lowercase = n["lowercase"].as_bool()?;
    let strip_ok = n["strip_accents"].is_null() || n["strip_accents"].as_bool() == Some(lowercase);
    if n["type"] != "BertNormalizer"
        || n["clean_text"] != true
        || n["handle_chinese_chars"] != true
        || !strip_ok
        || json["pre_tokenizer"]["type"] != "BertPreTokenizer"
    {
        return None;
    }
    let m = &json["model"];
    if m["type"] != "WordPiece"
        || m["unk_token"] != "[UNK]"
        || m["continuing_subword_prefix"] != CONTINUING_SUBWORD_PREFIX
        || m["max_input_chars_per_word"] != MAX_INPUT_CHARS_PER_WORD as u64
    {
        return None;
    }
    let model_vocab = m["vocab"].as_object()?;
    if model_vocab.len() != vocab.len()
        || !model_vocab
            .iter()
            .all(|(t, id)| id.as_u64() == vocab.id(t).map(u64::from))
    {
        return None;
    }
    // Added tokens: exactly the five special tokens, matched on the raw text.
    let added = json["added_tokens"].as_array()?;
    let mut contents: Vec<&str> = Vec::new();
    for a in added {
        let plain = a["single_word"] == false
            && a["lstrip"] == false
            && a["rstrip"] == false
            && a["normalized"] == false;
        let content = a["content"].as_str()?;
        if !plain || a["id"].as_u64() != vocab.id(content).map(u64::from) {
            return None;
        }
        contents.push(content);
    }
    contents.sort_unstable();
    let mut expected = SPECIAL_TOKENS.to_vec();
    expected.sort_unstable();
    (contents == expected).then_some(lowercase)
}

/// A Hugging Face tokenizer as a [`TokenizeWithOffsets`] (ids and byte offsets, no `[CLS]`/`[SEP]`).
pub struct HfTokenizer {
    inner: Tokenizer,
}

impl HfTokenizer {
    /// Wraps a Hugging Face tokenizer.
    pub fn new(inner: Tokenizer) -> HfTokenizer {
        HfTokenizer { inner }
    }

    /// The tokenizer whose `tokenizer.json` text is `json` (read by the caller, bounded);
    /// `path` only names the file in errors.
    pub fn from_json_text(json: &str, path: &Path) -> Result<HfTokenizer, TokenizerError> {
        let inner: Tokenizer =
            json.parse()
                .map_err(|e: tokenizers::Error| TokenizerError::NotTokenizer {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?;
        Ok(HfTokenizer { inner })
    }

    /// Loads a `tokenizer.json` (a file this process wrote: untrusted ones go through
    /// [`HfTokenizer::from_json_text`] after a bounded read).
    pub fn from_file(path: &Path) -> Result<HfTokenizer, TokenizerError> {
        let inner = Tokenizer::from_file(path).map_err(|e| TokenizerError::NotTokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(HfTokenizer { inner })
    }

    /// The wrapped tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner
    }
}

impl TokenizeWithOffsets for HfTokenizer {
    fn encode_with_offsets(&self, text: &str, ids: &mut Vec<u32>, starts: &mut Vec<u32>) {
        // Encoding cannot fail for these models (WordPiece and Unigram have an [UNK]); should a
        // future model fail, the text yields no tokens rather than aborting a whole stage.
        match self.inner.encode(text, false) {
            Ok(enc) => {
                ids.extend_from_slice(enc.get_ids());
                starts.extend(enc.get_offsets().iter().map(|o| o.0 as u32));
            }
            Err(e) => warn_once(&e.to_string()),
        }
    }
}

/// Reports an encoding failure once per process on stderr (the library has no logger).
fn warn_once(msg: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| eprintln!("warning: Hugging Face tokenizer failed to encode a text: {msg}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wordpiece::WordPiece;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn toy_vocab() -> Arc<Vocab> {
        let tokens = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "爱", "北", "京", "，", "。",
            "hello", "world", "un", "##aff", "##able", "aff", "!", "the", "##s", "e", "##x", "a",
            "1", "##2", "12", "é", "豈", "贵", "##é", "ab", "##c", "c", "-", "#", "[", "]",
        ];
        Arc::new(
            Vocab::from_tokens(
                tokens.iter().map(|s| s.to_string()).collect(),
                Path::new("toy"),
            )
            .unwrap(),
        )
    }

    type IdsStarts = (Vec<u32>, Vec<u32>);

    fn both(wp: &WordPiece, hf: &HfTokenizer, text: &str) -> (IdsStarts, IdsStarts) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        wp.encode_with_offsets(text, &mut a, &mut b);
        let (mut c, mut d) = (Vec::new(), Vec::new());
        hf.encode_with_offsets(text, &mut c, &mut d);
        ((a, b), (c, d))
    }

    const SAMPLES: &[&str] = &[
        "我爱北京，Hello World!",
        "unaffable UNAFFABLE the thes",
        "É\u{200B}x\u{0} café naïve İstanbul ǅ ﬁ",
        "\u{F900}\u{F901}贵 a[MASK]b [SEP][CLS] [mask]",
        "122 １２３ ＡＢＣ ab-c #ab## ...",
        "😀 emoji👍 \u{1F600}x 𠀀𪜀",
        "\t\r\n\u{3000}\u{00A0}\u{2028}\u{FFFD}\u{7F}\u{85}a\u{B}b",
        "e\u{301}\u{316}x \u{301}e ab\u{301}c",
        "",
    ];

    #[test]
    fn toy_vocab_matches_hf() {
        for lowercase in [true, false] {
            let v = toy_vocab();
            let wp = WordPiece::new(v.clone(), lowercase);
            let hf = HfTokenizer::new(wordpiece_tokenizer(&v, lowercase).unwrap());
            for s in SAMPLES {
                let (ours, theirs) = both(&wp, &hf, s);
                assert_eq!(ours, theirs, "lowercase={lowercase} text={s:?}");
            }
        }
    }

    #[test]
    fn json_round_trip_and_detection() {
        let v = toy_vocab();
        let dir = tempfile::tempdir().unwrap();
        for lowercase in [true, false] {
            let tok = wordpiece_tokenizer(&v, lowercase).unwrap();
            let p = dir.path().join("tokenizer.json");
            write_tokenizer_json(&tok, &p).unwrap();
            let first = std::fs::read(&p).unwrap();
            write_tokenizer_json(&wordpiece_tokenizer(&v, lowercase).unwrap(), &p).unwrap();
            assert_eq!(
                first,
                std::fs::read(&p).unwrap(),
                "tokenizer.json is deterministic"
            );
            let json: Value = serde_json::from_slice(&first).unwrap();
            assert_eq!(bert_wordpiece_lowercase(&json, &v), Some(lowercase));
            let loaded = HfTokenizer::from_file(&p).unwrap();
            let enc = loaded.tokenizer().encode("我爱北京", true).unwrap();
            assert_eq!(enc.get_ids(), &[2, 5, 6, 7, 8, 3]);
        }
        let uni = unigram_tokenizer(
            SPECIAL_TOKENS
                .iter()
                .map(|s| (s.to_string(), 0.0))
                .chain([("我".to_string(), -1.0), ("爱".to_string(), -2.0)])
                .collect(),
            true,
        )
        .unwrap();
        let json: Value = serde_json::from_str(&uni.to_string(false).unwrap()).unwrap();
        assert_eq!(bert_wordpiece_lowercase(&json, &v), None);
        let enc = uni.encode("我爱你", false).unwrap();
        assert_eq!(enc.get_ids(), &[5, 6, 1]);
    }

    /// Python's `tokenizers` loads our tokenizer.json and encodes as our Rust WordPiece does
    /// (skipped when python3 or its `tokenizers` package is absent).
    #[test]
    fn python_loads_tokenizer_json() {
        let ok = std::process::Command::new("python3")
            .args(["-c", "import tokenizers"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("note: python3 with the tokenizers package absent, skipping");
            return;
        }
        let vocab = crate::vocab::shared_bert_vocab().unwrap_or_else(toy_vocab);
        let dir = tempfile::tempdir().unwrap();
        let sentences = [
            "我爱北京天安门。",
            "ALBERT 模型在 2019 年发布，unaffable!",
            "Café naïve [MASK] １２３ 😀",
            "今天天气很好，我们去公园散步吧？",
        ];
        for lowercase in [true, false] {
            let path = dir.path().join(format!("tokenizer-{lowercase}.json"));
            write_tokenizer_json(&wordpiece_tokenizer(&vocab, lowercase).unwrap(), &path).unwrap();
            let script = format!(
                "import json, sys, tokenizers\n\
                 t = tokenizers.Tokenizer.from_file({path:?})\n\
                 s = json.load(sys.stdin)\n\
                 print(json.dumps([[t.encode(x).ids, t.encode(x, add_special_tokens=False).ids] for x in s]))",
                path = path.to_str().unwrap()
            );
            let mut child = std::process::Command::new("python3")
                .args(["-c", &script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(serde_json::to_string(&sentences).unwrap().as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            let py: Vec<(Vec<u32>, Vec<u32>)> = serde_json::from_slice(&out.stdout).unwrap();
            let wp = WordPiece::new(vocab.clone(), lowercase);
            for (s, (with_special, plain)) in sentences.iter().zip(py) {
                let ours = wp.encode(s);
                assert_eq!(plain, ours, "lowercase={lowercase} {s:?}");
                let mut framed = vec![vocab.cls_id()];
                framed.extend(&ours);
                framed.push(vocab.sep_id());
                assert_eq!(with_special, framed, "[CLS] … [SEP] for {s:?}");
            }
        }
    }

    /// Text generator mixing what Chinese corpora contain.
    fn text_strategy() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            4 => prop::sample::select(vec![
                "我", "爱", "北", "京", "天", "，", "。", "“", "”", "、", "豈", "\u{F901}", "𠀀",
            ]).prop_map(str::to_string),
            3 => "[a-zA-Z]{1,12}",
            2 => "[0-9]{1,6}",
            1 => prop::sample::select(vec![
                " ", "  ", "\t", "\n", "\u{3000}", "\u{A0}", "!", "?", "-", "#", "##", ".", "[",
                "]", "[MASK]", "[CLS]", "[UNK", "１", "２", "Ａ", "ｂ", "，", "😀", "👍🏽", "é",
                "e\u{301}", "\u{301}", "\u{316}", "İ", "ǅ", "ß", "Σ", "ﬁ", "\u{200B}", "\u{0}",
                "\u{FFFD}", "\u{7F}", "\u{B}", "\u{85}", "한", "カ", "ж", "\u{E000}", "\u{1D165}",
            ]).prop_map(str::to_string),
            1 => any::<char>().prop_map(|c| c.to_string()),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
    }

    fn prop_vocab() -> Arc<Vocab> {
        // The toy vocabulary plus some pieces of the generated letters and digits.
        let mut tokens: Vec<String> = toy_vocab().tokens().to_vec();
        for t in [
            "abc", "de", "##de", "##f", "x", "##y", "z", "##z", "q", "##q", "1", "##1", "##0", "0",
            "2", "##3", "34", "５", "ｂ", "１", "😀", "ß", "σ", "ﬁ", "##ß", "i", "##i", "天", "“",
            "”", "、", "?", ".", "𠀀", "ж", "##ж", "カ",
        ] {
            if !tokens.iter().any(|x| x == t) {
                tokens.push(t.to_string());
            }
        }
        for c in 'a'..='z' {
            for t in [c.to_string(), format!("##{c}")] {
                if !tokens.contains(&t) && c != 'k' {
                    tokens.push(t);
                }
            }
        }
        Arc::new(Vocab::from_tokens(tokens, Path::new("prop")).unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// The fast WordPiece gives exactly the ids and starts of the Hugging Face pipeline.
        #[test]
        fn fast_wordpiece_equals_hf(text in text_strategy(), lowercase in any::<bool>()) {
            thread_local! {
                static TOKS: std::cell::OnceCell<[(WordPiece, HfTokenizer); 2]> = const { std::cell::OnceCell::new() };
            }
            TOKS.with(|cell| {
                let toks = cell.get_or_init(|| {
                    let v = prop_vocab();
                    [false, true].map(|lc| {
                        (WordPiece::new(v.clone(), lc), HfTokenizer::new(wordpiece_tokenizer(&v, lc).unwrap()))
                    })
                });
                let (wp, hf) = &toks[lowercase as usize];
                let (ours, theirs) = both(wp, hf, &text);
                prop_assert_eq!(ours, theirs, "text {:?}", text);
                Ok(())
            })?;
        }
    }

    /// On the project's fixture corpus, with a vocabulary trained on it (and bert-base-chinese
    /// when present), both lower-casing settings: identical ids and starts.
    #[test]
    fn fixture_corpus_matches_hf() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/fixtures/corpus");
        // Every .txt under it, subfolders included.
        let mut files = Vec::new();
        let mut todo = vec![dir.clone()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.extension().is_some_and(|e| e == "txt") {
                    files.push(p);
                }
            }
        }
        files.sort();
        assert!(!files.is_empty(), "no fixture corpus in {}", dir.display());
        for lowercase in [true, false] {
            let cfg = crate::train::TrainConfig {
                model: crate::train::ModelKind::WordPiece,
                vocab_size: 400,
                min_frequency: 2,
                lowercase,
            };
            let trained = crate::train::train(&files, &cfg, &|_| ()).unwrap();
            let mut vocabs = vec![Arc::new(trained.vocab)];
            vocabs.extend(crate::vocab::shared_bert_vocab());
            for v in vocabs {
                let wp = WordPiece::new(v.clone(), lowercase);
                let hf = HfTokenizer::new(wordpiece_tokenizer(&v, lowercase).unwrap());
                for f in &files {
                    let text = std::fs::read_to_string(f).unwrap();
                    for line in text.lines() {
                        let (ours, theirs) = both(&wp, &hf, line);
                        assert_eq!(ours, theirs, "{}: {line:?}", f.display());
                    }
                    let (ours, theirs) = both(&wp, &hf, &text);
                    assert_eq!(ours, theirs, "{} as one text", f.display());
                }
            }
        }
    }

    /// On the bert-base-chinese vocabulary and ~1 MB of each real corpus, identical ids and
    /// starts (skipped when the shared data is absent).
    #[test]
    fn bert_chinese_corpora_match_hf() {
        let Some(v) = crate::vocab::shared_bert_vocab() else {
            return;
        };
        let Some(root) = crate::vocab::shared_data_file("corpus") else {
            return;
        };
        let wp = WordPiece::new(v.clone(), true);
        let hf = HfTokenizer::new(wordpiece_tokenizer(&v, true).unwrap());
        let mut files: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .map(|f| f.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "txt") && !p.ends_with("SOURCE.txt"))
            .collect();
        files.sort();
        // One file per corpus folder, 1 MB of it (at a line boundary).
        let mut seen = std::collections::BTreeSet::new();
        for f in files {
            if !seen.insert(f.parent().unwrap().to_path_buf()) {
                continue;
            }
            let bytes = std::fs::read(&f).unwrap();
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(1 << 20)]).into_owned();
            let mut n = 0;
            for line in text.lines() {
                let (ours, theirs) = both(&wp, &hf, line);
                assert_eq!(ours, theirs, "{}: line {line:?}", f.display());
                n += ours.0.len();
            }
            eprintln!("{}: {n} tokens identical", f.display());
        }
    }
}
