//! Vocabulary training.
//!
//! Trains a WordPiece or a Unigram (SentencePiece algorithm) vocabulary of a given size on the
//! clean stage's text files with the `tokenizers` crate's trainers. Words are counted first
//! with our own BERT basic tokenizer ([`crate::wordpiece::basic_words`], the same split as the
//! `BertNormalizer` + `BertPreTokenizer` of the written tokenizer.json, so every Chinese
//! character is a word of its own), in parallel and in a deterministic order.
//!
//! Determinism (the same input gives the same vocab.txt, whatever the thread count) needs care
//! because the trainers keep their state in randomly seeded hash maps:
//!
//! - the alphabet is chosen here (characters seen at least `min_frequency` times, most
//!   frequent first, ties by code point, within the size budget) and passed as the trainer's
//!   whole initial alphabet with `limit_alphabet` equal to its size, so the trainer's own
//!   unstable, hash-ordered cut never breaks a tie;
//! - WordPiece: the `##c` continuation tokens of the alphabet are passed with the special
//!   tokens so that their ids (which break ties between equally frequent merges) do not depend
//!   on hash order; the BPE merges themselves (WordPiece training in `tokenizers` is BPE with a
//!   `##` prefix: its `WordPieceTrainer` wraps a `BpeTrainer`) run on exact counts. We call the
//!   `BpeTrainer` ourselves because only it takes word counts (`do_train`), and turn the result
//!   into a WordPiece model as `WordPieceTrainer` does;
//! - Unigram: the EM runs in a one-thread rayon pool (its floating-point sums are split by
//!   thread count otherwise) over sentences in sorted order, each alphabet character is also a
//!   one-character sentence (so no character is ever pruned and re-added in hash order), and
//!   the pieces are finally ordered by score, ties by piece.
//!
//! Special tokens `[PAD]` `[UNK]` `[CLS]` `[SEP]` `[MASK]` get ids 0–4.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read as _;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use compact_str::CompactString;
use rayon::prelude::*;
use tokenizers::models::bpe::{BPE, BpeTrainer};
use tokenizers::models::unigram::{Unigram, UnigramTrainer};
use tokenizers::models::wordpiece::WordPiece as WordPieceModel;
use tokenizers::{AddedToken, Model as _, Tokenizer};

use crate::hf::TokenizerError;
use crate::vocab::{SPECIAL_TOKENS, Vocab, VocabError};
use crate::wordpiece::{CONTINUING_SUBWORD_PREFIX, MAX_INPUT_CHARS_PER_WORD, basic_words};

/// The vocabulary model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// BERT's: greedy longest-match subwords with `##` continuations.
    WordPiece,
    /// SentencePiece's: subwords chosen by a unigram language model.
    Unigram,
}

impl ModelKind {
    /// The name params use.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::WordPiece => "wordpiece",
            ModelKind::Unigram => "unigram",
        }
    }
}

/// What to train.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// WordPiece or Unigram.
    pub model: ModelKind,
    /// Vocabulary size, the special tokens included.
    pub vocab_size: usize,
    /// Characters seen fewer times are left out (they become `[UNK]`); WordPiece merges need
    /// this many occurrences too.
    pub min_frequency: u64,
    /// Lower-case and strip accents (BERT's `do_lower_case`).
    pub lowercase: bool,
}

/// A trained vocabulary, its tokenizer, and counts for metrics.
pub struct Trained {
    /// The vocabulary, special tokens first.
    pub vocab: Vocab,
    /// Its Hugging Face tokenizer.
    pub tokenizer: Tokenizer,
    /// Counts for `metrics.json`.
    pub stats: TrainStats,
}

/// Counts about the training data and the alphabet (all deterministic).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TrainStats {
    /// Word occurrences (after BERT's basic tokenisation) counted.
    pub words: u64,
    /// Distinct words.
    pub distinct_words: u64,
    /// Distinct characters in the words.
    pub distinct_chars: u64,
    /// Characters in the alphabet (seen at least `min_frequency` times, within the budget).
    pub alphabet: u64,
    /// Distinct characters left out: too rare, or beyond the size budget.
    pub chars_below_min_frequency: u64,
    /// Distinct characters frequent enough but beyond the size budget.
    pub chars_over_budget: u64,
}

/// Why a vocabulary could not be trained.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A corpus file could not be opened: missing, or not a regular file (a FIFO would block
    /// the open, a device never ends). The reader's error names the file; it is part of this
    /// text, not a source printed again after it.
    #[error("cannot open the corpus file {0}")]
    Open(pipeline_bounded::ReadError),
    /// A corpus line longer than [`crate::corpus::MAX_LINE_BYTES`]: a block is cut at a line
    /// break, so without this bound one endless line would be held whole.
    #[error(
        "{}: a line longer than {} MiB (is this a corpus file?)",
        path.display(),
        crate::corpus::MAX_LINE_BYTES >> 20
    )]
    LineTooLong {
        /// The file.
        path: PathBuf,
    },
    /// A corpus file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The vocabulary size leaves no room for a single learnt token.
    #[error(
        "vocab size {vocab_size} leaves no room beyond the {special} special tokens (use at least \
         {})",
        special + 1
    )]
    TooSmall {
        /// The size asked for.
        vocab_size: usize,
        /// How many special tokens there are.
        special: usize,
    },
    /// The size does not fit the Unigram trainer's `u32`.
    #[error("vocab size {vocab_size} is too large")]
    TooLarge {
        /// The size asked for.
        vocab_size: usize,
    },
    /// The corpus holds no word.
    #[error("no text to train on: the corpus files hold no words")]
    NoText,
    /// The `tokenizers` trainer failed; its message says how (it is a boxed trait object, kept
    /// in the message as before).
    #[error("{what}: {message}")]
    Trainer {
        /// Which step: "WordPiece training failed", "Unigram trainer", …
        what: &'static str,
        /// The library's message.
        message: String,
    },
    /// The one-thread pool of Unigram training could not start.
    #[error("cannot start a thread for Unigram training")]
    ThreadPool(#[source] rayon::ThreadPoolBuildError),
    /// The trained tokens do not make a vocabulary.
    #[error(transparent)]
    Vocab(#[from] VocabError),
    /// The trained vocabulary's tokenizer could not be built.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

/// Word counts in byte order of the word (so any use of them is deterministic).
pub type WordCounts = Vec<(String, u64)>;

/// Bytes of text handed to the threads at a time (bounded memory whatever the file size).
const BLOCK_BYTES: usize = 8 << 20;

/// Counts the words (BERT basic tokenisation, lower-cased if asked) of text files, one
/// sentence a line. Invalid UTF-8 is replaced (the clean stage writes valid UTF-8).
/// `progress` is called with the bytes of each block read.
pub fn count_words(
    files: &[PathBuf],
    lowercase: bool,
    progress: &dyn Fn(u64),
) -> Result<WordCounts, TrainError> {
    let mut total: HashMap<String, u64> = HashMap::new();
    for path in files {
        for_each_block(path, |block| {
            progress(block.len() as u64);
            let lines: Vec<&str> = block.lines().collect();
            let maps: Vec<HashMap<String, u64>> = lines
                .par_chunks(4096)
                .map(|chunk| {
                    let mut m: HashMap<String, u64> = HashMap::new();
                    for line in chunk {
                        basic_words(line, lowercase, |w| {
                            if let Some(c) = m.get_mut(w) {
                                *c += 1;
                            } else {
                                m.insert(w.to_string(), 1);
                            }
                        });
                    }
                    m
                })
                .collect();
            for m in maps {
                for (w, c) in m {
                    *total.entry(w).or_default() += c;
                }
            }
            ControlFlow::Continue(())
        })?;
    }
    let mut counts: WordCounts = total.into_iter().collect();
    counts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(counts)
}

/// Reads `path` in blocks of about 8 MiB that end at a line break and calls `f` on
/// each (as text, invalid UTF-8 replaced) until it returns `ControlFlow::Break`.
pub fn for_each_block(
    path: &Path,
    mut f: impl FnMut(&str) -> ControlFlow<()>,
) -> Result<(), TrainError> {
    let mut file = pipeline_bounded::open(path).map_err(TrainError::Open)?;
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK_BYTES + 4096);
    let mut chunk = vec![0u8; BLOCK_BYTES];
    loop {
        let n = file.read(&mut chunk).map_err(|source| TrainError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() >= BLOCK_BYTES {
            let Some(nl) = memchr::memrchr(b'\n', &buf) else {
                // No line break in all of `buf`: it is one line, still growing.
                if buf.len() > crate::corpus::MAX_LINE_BYTES {
                    return Err(TrainError::LineTooLong {
                        path: path.to_path_buf(),
                    });
                }
                continue;
            };
            let rest = buf.split_off(nl + 1);
            if f(&String::from_utf8_lossy(&buf)).is_break() {
                return Ok(());
            }
            buf = rest;
        }
    }
    if !buf.is_empty() {
        let _ = f(&String::from_utf8_lossy(&buf));
    }
    Ok(())
}

/// The alphabet: characters seen at least `min_frequency` times, most frequent first (ties by
/// code point), as many as `budget` allows when each also costs one `##c` token if it occurs
/// inside words (`with_continuations`). Returns the chosen characters with whether each occurs
/// inside a word, and the stats.
fn choose_alphabet(
    counts: &WordCounts,
    min_frequency: u64,
    budget: usize,
    with_continuations: bool,
    stats: &mut TrainStats,
) -> Vec<(char, bool)> {
    // char -> (occurrences, occurrences inside a word)
    let mut chars: BTreeMap<char, (u64, u64)> = BTreeMap::new();
    for (w, n) in counts {
        for (i, c) in w.chars().enumerate() {
            let e = chars.entry(c).or_default();
            e.0 += n;
            if i > 0 {
                e.1 += n;
            }
        }
    }
    stats.distinct_chars = chars.len() as u64;
    let mut ranked: Vec<(char, u64, bool)> = chars
        .into_iter()
        .filter(|(_, (n, _))| {
            let keep = *n >= min_frequency;
            if !keep {
                stats.chars_below_min_frequency += 1;
            }
            keep
        })
        .map(|(c, (n, inside))| (c, n, inside > 0))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen = Vec::new();
    let mut used = 0;
    for (c, _, inside) in ranked {
        let cost = 1 + usize::from(with_continuations && inside);
        if used + cost > budget {
            stats.chars_over_budget += 1;
            continue;
        }
        used += cost;
        chosen.push((c, inside));
    }
    stats.alphabet = chosen.len() as u64;
    chosen
}

/// Trains a vocabulary on text files (one sentence a line); see the module doc. `progress`
/// is called with the bytes of each block of text counted.
pub fn train(
    files: &[PathBuf],
    cfg: &TrainConfig,
    progress: &dyn Fn(u64),
) -> Result<Trained, TrainError> {
    let counts = count_words(files, cfg.lowercase, progress)?;
    train_on_counts(&counts, cfg)
}

/// Trains a vocabulary on word counts (as [`count_words`] gives them).
pub fn train_on_counts(counts: &WordCounts, cfg: &TrainConfig) -> Result<Trained, TrainError> {
    let n_special = SPECIAL_TOKENS.len();
    if cfg.vocab_size <= n_special {
        return Err(TrainError::TooSmall {
            vocab_size: cfg.vocab_size,
            special: n_special,
        });
    }
    if counts.is_empty() {
        return Err(TrainError::NoText);
    }
    let mut stats = TrainStats {
        words: counts.iter().map(|(_, n)| n).sum(),
        distinct_words: counts.len() as u64,
        ..TrainStats::default()
    };
    let budget = cfg.vocab_size - n_special;
    match cfg.model {
        ModelKind::WordPiece => {
            let alphabet = choose_alphabet(counts, cfg.min_frequency, budget, true, &mut stats);
            let tokens = train_wordpiece(counts, cfg, &alphabet)?;
            let vocab = Vocab::from_tokens(tokens, Path::new("<trained WordPiece vocabulary>"))?;
            let tokenizer = crate::hf::wordpiece_tokenizer(&vocab, cfg.lowercase)?;
            Ok(Trained {
                vocab,
                tokenizer,
                stats,
            })
        }
        ModelKind::Unigram => {
            let alphabet = choose_alphabet(counts, cfg.min_frequency, budget, false, &mut stats);
            let pieces = train_unigram(counts, cfg, &alphabet)?;
            let vocab = Vocab::from_tokens(
                pieces.iter().map(|(p, _)| p.clone()).collect(),
                Path::new("<trained Unigram vocabulary>"),
            )?;
            let tokenizer = crate::hf::unigram_tokenizer(pieces, cfg.lowercase)?;
            Ok(Trained {
                vocab,
                tokenizer,
                stats,
            })
        }
    }
}

/// A failure of the `tokenizers` trainers, with the step it happened in.
fn trainer_error(what: &'static str, e: impl std::fmt::Display) -> TrainError {
    TrainError::Trainer {
        what,
        message: e.to_string(),
    }
}

fn special_added_tokens() -> Vec<AddedToken> {
    SPECIAL_TOKENS
        .iter()
        .map(|s| AddedToken::from(*s, true))
        .collect()
}

/// WordPiece tokens in id order: specials, the alphabet (by code point), its `##`
/// continuations, then the learnt pieces in the order they were merged.
fn train_wordpiece(
    counts: &WordCounts,
    cfg: &TrainConfig,
    alphabet: &[(char, bool)],
) -> Result<Vec<String>, TrainError> {
    let mut chars: Vec<char> = alphabet.iter().map(|(c, _)| *c).collect();
    chars.sort_unstable();
    let mut conts: Vec<String> = alphabet
        .iter()
        .filter(|(_, inside)| *inside)
        .map(|(c, _)| format!("{CONTINUING_SUBWORD_PREFIX}{c}"))
        .collect();
    conts.sort_unstable();
    // Pre-assigned ids for the continuations (see the module doc); they are not special in
    // the tokenizer we write, which is built from the vocabulary alone.
    let mut specials = special_added_tokens();
    specials.extend(conts.iter().map(|t| AddedToken::from(t.as_str(), true)));
    let trainer = BpeTrainer::builder()
        .vocab_size(cfg.vocab_size)
        .min_frequency(cfg.min_frequency.max(1))
        .special_tokens(specials)
        .initial_alphabet(chars.iter().copied().collect::<HashSet<char>>())
        .limit_alphabet(chars.len())
        .continuing_subword_prefix(CONTINUING_SUBWORD_PREFIX.to_string())
        .show_progress(false)
        .build();
    let word_counts: ahash::AHashMap<CompactString, u64> = counts
        .iter()
        .filter(|(w, _)| w.chars().count() <= MAX_INPUT_CHARS_PER_WORD)
        .map(|(w, n)| (CompactString::from(w.as_str()), *n))
        .collect();
    let mut bpe = BPE::default();
    trainer
        .do_train(&word_counts, &mut bpe)
        .map_err(|e| trainer_error("WordPiece training failed", e))?;
    // What WordPieceTrainer does with the BPE result.
    let wp = WordPieceModel::from_bpe(&bpe);
    let mut by_id: Vec<(u32, String)> = wp.get_vocab().into_iter().map(|(t, i)| (i, t)).collect();
    by_id.sort_unstable();
    let fixed: HashSet<String> = SPECIAL_TOKENS
        .iter()
        .map(|s| s.to_string())
        .chain(chars.iter().map(|c| c.to_string()))
        .chain(conts.iter().cloned())
        .collect();
    let mut tokens: Vec<String> = SPECIAL_TOKENS.iter().map(|s| s.to_string()).collect();
    tokens.extend(chars.iter().map(|c| c.to_string()));
    tokens.extend(conts.iter().cloned());
    tokens.extend(
        by_id
            .into_iter()
            .map(|(_, t)| t)
            .filter(|t| !fixed.contains(t)),
    );
    Ok(tokens)
}

/// Unigram pieces with their log-probabilities in id order: specials (score 0), then by score
/// (descending), ties by piece.
fn train_unigram(
    counts: &WordCounts,
    cfg: &TrainConfig,
    alphabet: &[(char, bool)],
) -> Result<Vec<(String, f64)>, TrainError> {
    let keep: HashSet<char> = alphabet.iter().map(|(c, _)| *c).collect();
    // Words with a character outside the alphabet are left out (they would make the trainer
    // require that character); each alphabet character is also a one-character sentence.
    let mut sentences: BTreeMap<String, u64> = counts
        .iter()
        .filter(|(w, _)| {
            w.chars().count() <= MAX_INPUT_CHARS_PER_WORD && w.chars().all(|c| keep.contains(&c))
        })
        .map(|(w, n)| (w.clone(), *n))
        .collect();
    for (c, _) in alphabet {
        *sentences.entry(c.to_string()).or_default() += 1;
    }
    let sentences: Vec<(String, u32)> = sentences
        .into_iter()
        .map(|(w, n)| (w, u32::try_from(n).unwrap_or(u32::MAX)))
        .collect();
    let vocab_size = u32::try_from(cfg.vocab_size).map_err(|_| TrainError::TooLarge {
        vocab_size: cfg.vocab_size,
    })?;
    let trainer = UnigramTrainer::builder()
        .vocab_size(vocab_size)
        .special_tokens(special_added_tokens())
        .unk_token(Some("[UNK]".to_string()))
        .show_progress(false)
        .build()
        .map_err(|e| trainer_error("Unigram trainer", e))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map_err(TrainError::ThreadPool)?;
    let mut model = Unigram::default();
    pool.install(|| trainer.do_train(sentences, &mut model))
        .map_err(|e| trainer_error("Unigram training failed", e))?;
    let mut pieces: Vec<(String, f64)> = model
        .iter()
        .filter(|(p, _)| !SPECIAL_TOKENS.contains(&p.as_str()))
        .map(|(p, s)| (p.clone(), if s.is_nan() { 0.0 } else { *s }))
        .collect();
    pieces.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out: Vec<(String, f64)> = SPECIAL_TOKENS
        .iter()
        .map(|s| (s.to_string(), 0.0))
        .collect();
    out.extend(pieces);
    Ok(out)
}

#[cfg(test)]
#[path = "train_tests.rs"]
mod tests;
