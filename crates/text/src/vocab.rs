//! vocab.txt loading and checks.
//!
//! A BERT vocabulary file holds one token a line; a token's id is its line index (0-based).
//! [`Vocab::load`] refuses files the rest of the pipeline could not use safely (a missing
//! special token, a duplicate token, an empty line, invalid UTF-8), and every error names the
//! file and the line so that the user can fix the file instead of guessing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The special tokens every vocabulary must have, in the order `source: train` puts them
/// (ids 0–4).
pub const SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Why a vocab.txt cannot be used. Line numbers are 1-based, as editors show them.
#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    /// The file cannot be read: missing, not a regular file (a FIFO, a device, a directory),
    /// over [`MAX_VOCAB_BYTES`] (past which it is not a vocabulary), or unreadable. The reader's
    /// error (which names the file, and the limit) is part of this text and not also a
    /// `source`: a printer of the source chain once printed its reason twice ("not a regular
    /// file (…): not a regular file (…)").
    #[error("cannot read vocabulary {0}")]
    Read(pipeline_bounded::ReadError),
    /// No token at all.
    #[error("{}: the vocabulary is empty (expected one token a line)", path.display())]
    Empty {
        /// The vocab.txt.
        path: PathBuf,
    },
    /// A line that is not UTF-8.
    #[error("{}:{line}: invalid UTF-8 (a vocab.txt must be UTF-8)", path.display())]
    InvalidUtf8 {
        /// The vocab.txt.
        path: PathBuf,
        /// The line.
        line: usize,
    },
    /// An empty line, which would be an empty token.
    #[error(
        "{}:{line}: empty line (a token cannot be empty; remove the line, and mind that ids are line indices)",
        path.display()
    )]
    EmptyLine {
        /// The vocab.txt.
        path: PathBuf,
        /// The line.
        line: usize,
    },
    /// A token listed twice.
    #[error("{}:{line}: token {token:?} duplicates line {first_line}", path.display())]
    Duplicate {
        /// The vocab.txt.
        path: PathBuf,
        /// The token.
        token: String,
        /// Where it first is.
        first_line: usize,
        /// Where it is again.
        line: usize,
    },
    /// Special tokens BERT needs are not there.
    #[error(
        "{}: missing special token(s) {} (a BERT vocabulary needs [PAD] [UNK] [CLS] [SEP] [MASK])",
        path.display(),
        missing.join(" ")
    )]
    MissingSpecial {
        /// The vocab.txt.
        path: PathBuf,
        /// The special tokens missing.
        missing: Vec<&'static str>,
    },
    /// More tokens than u32 ids.
    #[error("{}: the vocabulary has {len} tokens, more than the 2^32 ids allow", path.display())]
    TooLarge {
        /// The vocab.txt.
        path: PathBuf,
        /// Its number of tokens.
        len: usize,
    },
}

/// A checked vocabulary: tokens by id and ids by token, plus the special token ids.
#[derive(Debug, Clone)]
pub struct Vocab {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    special: [u32; 5],
}

/// The largest vocab.txt read: bert-base-chinese's is 110 KB, a 250,000-token multilingual one
/// a few MB. Past this the file is not a vocabulary, and reading it whole (say `/dev/zero`)
/// would take all memory. It is the bound of `tokenizer.json` too
/// ([`crate::wordpiece::MAX_TOKENIZER_JSON_BYTES`]), and of the pretrain stage's count of its
/// vocab dep's lines.
pub const MAX_VOCAB_BYTES: u64 = 64 << 20;

impl Vocab {
    /// Reads and checks a vocab.txt (see the module doc).
    pub fn load(path: &Path) -> Result<Vocab, VocabError> {
        // The shared reader: regular files only (a FIFO with no writer would block the open
        // forever, `/dev/zero` never ends), at most MAX_VOCAB_BYTES.
        let bytes = pipeline_bounded::read(path, MAX_VOCAB_BYTES, "a vocabulary")
            .map_err(VocabError::Read)?;
        Self::parse(&bytes, path)
    }

    /// Parses the bytes of a vocab.txt; `path` only names the file in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Vocab, VocabError> {
        let path_buf = || path.to_path_buf();
        if bytes.is_empty() {
            return Err(VocabError::Empty { path: path_buf() });
        }
        // A final newline ends the last line rather than starting an empty one.
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let mut tokens = Vec::new();
        for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
            let line = i + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let token = std::str::from_utf8(raw).map_err(|_| VocabError::InvalidUtf8 {
                path: path_buf(),
                line,
            })?;
            if token.is_empty() {
                return Err(VocabError::EmptyLine {
                    path: path_buf(),
                    line,
                });
            }
            tokens.push(token.to_string());
        }
        Self::build(tokens, path)
    }

    /// Builds a vocabulary from tokens in id order, with the same checks as [`Vocab::load`];
    /// `origin` names where the tokens came from in errors.
    pub fn from_tokens(tokens: Vec<String>, origin: &Path) -> Result<Vocab, VocabError> {
        if tokens.is_empty() {
            return Err(VocabError::Empty {
                path: origin.to_path_buf(),
            });
        }
        for (i, t) in tokens.iter().enumerate() {
            if t.is_empty() || t.contains('\n') {
                return Err(VocabError::EmptyLine {
                    path: origin.to_path_buf(),
                    line: i + 1,
                });
            }
        }
        Self::build(tokens, origin)
    }

    fn build(tokens: Vec<String>, path: &Path) -> Result<Vocab, VocabError> {
        if u32::try_from(tokens.len()).is_err() {
            return Err(VocabError::TooLarge {
                path: path.to_path_buf(),
                len: tokens.len(),
            });
        }
        let mut ids: HashMap<String, u32> = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            if let Some(&first) = ids.get(t.as_str()) {
                return Err(VocabError::Duplicate {
                    path: path.to_path_buf(),
                    token: t.clone(),
                    first_line: first as usize + 1,
                    line: i + 1,
                });
            }
            ids.insert(t.clone(), i as u32);
        }
        let missing: Vec<&'static str> = SPECIAL_TOKENS
            .iter()
            .copied()
            .filter(|s| !ids.contains_key(*s))
            .collect();
        if !missing.is_empty() {
            return Err(VocabError::MissingSpecial {
                path: path.to_path_buf(),
                missing,
            });
        }
        let special = SPECIAL_TOKENS.map(|s| ids[s]);
        Ok(Vocab {
            tokens,
            ids,
            special,
        })
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Always false: a loaded vocabulary has at least the special tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// The token with id `id`. Panics if `id >= len()` (ids come from this vocabulary).
    pub fn token(&self, id: u32) -> &str {
        &self.tokens[id as usize]
    }

    /// Tokens in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The id of `[PAD]`.
    pub fn pad_id(&self) -> u32 {
        self.special[0]
    }

    /// The id of `[UNK]`.
    pub fn unk_id(&self) -> u32 {
        self.special[1]
    }

    /// The id of `[CLS]`.
    pub fn cls_id(&self) -> u32 {
        self.special[2]
    }

    /// The id of `[SEP]`.
    pub fn sep_id(&self) -> u32 {
        self.special[3]
    }

    /// The id of `[MASK]`.
    pub fn mask_id(&self) -> u32 {
        self.special[4]
    }

    /// The ids of `[PAD]` `[UNK]` `[CLS]` `[SEP]` `[MASK]`, in that order.
    pub fn special_ids(&self) -> [u32; 5] {
        self.special
    }

    /// The vocab.txt text: one token a line, each line ending with `\n`.
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(self.tokens.iter().map(|t| t.len() + 1).sum());
        for t in &self.tokens {
            let _ = writeln!(s, "{t}");
        }
        s
    }

    /// Writes vocab.txt to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        f.write_all(self.to_text().as_bytes())?;
        f.flush()
    }
}

/// A file of the shared data root (`PIPELINE_DATA_ROOT`, else `<repo>/../shared/datasets`), or
/// `None` with a note when it is absent so that tests using real data skip cleanly.
#[cfg(test)]
pub(crate) fn shared_data_file(rel: &str) -> Option<PathBuf> {
    let root = std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets"));
    let p = root.join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("note: {} absent, skipping", p.display());
        None
    }
}

/// The shared bert-base-chinese vocabulary, when present.
#[cfg(test)]
pub(crate) fn shared_bert_vocab() -> Option<std::sync::Arc<Vocab>> {
    let p = shared_data_file("vocab/vocab.txt")?;
    Some(std::sync::Arc::new(Vocab::load(&p).unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<Vocab, VocabError> {
        Vocab::parse(s, Path::new("v.txt"))
    }

    const OK: &str = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n的\n##s\n";

    #[test]
    fn a_directory_or_device_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let e = Vocab::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        if Path::new("/dev/zero").exists() {
            let e = Vocab::load(Path::new("/dev/zero")).unwrap_err().to_string();
            assert!(
                e.contains("/dev/zero") && e.contains("not a regular file"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_read_error_says_its_reason_once_whatever_prints_it() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("vocab.txt");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = Vocab::load(&link).unwrap_err();
        // No source: a printer of the chain (anyhow's `{:#}`) prints the text alone.
        assert!(std::error::Error::source(&e).is_none());
        let text = anyhow_like(&e);
        assert_eq!(text.matches("not a regular file").count(), 1, "{text}");
        assert!(
            text.contains("vocab.txt: not a regular file (it is a character device)"),
            "{text}"
        );
        // Sparse: 65 MiB that would be read whole before being found not to be a vocabulary.
        let big = dir.path().join("big.txt");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_VOCAB_BYTES + 1)
            .unwrap();
        let e = Vocab::load(&big).unwrap_err().to_string();
        assert!(
            e.contains("big.txt: larger than 64 MiB, the limit for a vocabulary"),
            "{e}"
        );
    }

    /// The error and its sources joined by ": ", as anyhow's `{:#}` prints a chain.
    fn anyhow_like(e: &VocabError) -> String {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        text
    }

    #[test]
    fn loads_and_indexes() {
        let v = parse(OK.as_bytes()).unwrap();
        assert_eq!(v.len(), 7);
        assert_eq!(
            (v.pad_id(), v.unk_id(), v.cls_id(), v.sep_id(), v.mask_id()),
            (0, 1, 2, 3, 4)
        );
        assert_eq!(v.id("的"), Some(5));
        assert_eq!(v.token(6), "##s");
        assert_eq!(v.id("x"), None);
        assert_eq!(v.to_text(), OK);
    }

    #[test]
    fn crlf_and_no_final_newline() {
        let v = parse(b"[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]").unwrap();
        assert_eq!(v.len(), 5);
        assert_eq!(v.mask_id(), 4);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse(b"").unwrap_err().to_string();
        assert!(e.contains("v.txt") && e.contains("empty"), "{e}");

        let e = parse(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing special token(s) [MASK] ("), "{e}");

        let e = parse(b"[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("v.txt:3") && e.contains("empty line"), "{e}");

        let e = parse(b"[PAD]\n[UNK]\na\n[CLS]\n[SEP]\na\n[MASK]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("v.txt:6") && e.contains("line 3"), "{e}");

        let e = parse(b"[PAD]\n[UNK]\n\xff\xfe\n").unwrap_err().to_string();
        assert!(e.contains("v.txt:3") && e.contains("UTF-8"), "{e}");

        let e = Vocab::load(Path::new("/nonexistent/vocab.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/vocab.txt"), "{e}");
    }

    #[test]
    fn write_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let v = parse(OK.as_bytes()).unwrap();
        let p = dir.path().join("vocab.txt");
        v.write(&p).unwrap();
        let w = Vocab::load(&p).unwrap();
        assert_eq!(v.tokens(), w.tokens());
    }

    /// The bert-base-chinese vocabulary of the shared data loads with the documented ids.
    #[test]
    fn bert_base_chinese_loads() {
        let Some(path) = shared_data_file("vocab/vocab.txt") else {
            return;
        };
        let v = Vocab::load(&path).unwrap();
        assert_eq!(v.len(), 21_128);
        assert_eq!(
            (v.pad_id(), v.unk_id(), v.cls_id(), v.sep_id(), v.mask_id()),
            (0, 100, 101, 102, 103)
        );
    }
}
