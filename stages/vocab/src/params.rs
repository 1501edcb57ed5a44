//! The `vocab` stage's params: parsing with errors that name the param, and range checks.

pub use pipeline_params::ParamError;
use pipeline_params::{from_params, struct_fields};
use pipeline_text::train::ModelKind;
use pipeline_text::vocab::SPECIAL_TOKENS;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Every param the kind takes (see the crate documentation for what each does): the fields
/// of [`VocabParams`].
pub fn known_params() -> &'static [&'static str] {
    struct_fields::<VocabParams>()
}

/// Where the vocabulary comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Adopt an existing vocab.txt (`file`).
    File,
    /// Train one on the clean dep's corpus.
    Train,
}

/// The params as given (defaults for those left out).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct VocabParams {
    /// Adopt a file or train.
    pub source: Source,
    /// A vocab.txt, relative to the workspace root (also declared in `inputs:`).
    pub file: Option<String>,
    /// WordPiece or Unigram (`source: train` only).
    pub model: ModelKind,
    /// Vocabulary size for `source: train`, special tokens included.
    pub size: usize,
    /// Characters seen fewer times are left out; WordPiece merges need as many.
    pub min_frequency: u64,
    /// Lower-case and strip accents (BERT's `do_lower_case`).
    pub lowercase: bool,
    /// Coverage statistics over the first this many MB of the corpus (0: all of it).
    pub coverage_sample_mb: u64,
}

impl Default for VocabParams {
    fn default() -> Self {
        VocabParams {
            source: Source::File,
            file: None,
            model: ModelKind::WordPiece,
            size: 8000,
            min_frequency: 2,
            lowercase: true,
            coverage_sample_mb: 64,
        }
    }
}

/// Largest `size` we accept: far beyond any BERT vocabulary, and it keeps ids in u32.
pub const MAX_SIZE: usize = 1 << 22;

impl VocabParams {
    /// Parses and checks the params; the error names the param and what it allows.
    pub fn parse(params: &Map<String, Value>) -> Result<VocabParams, ParamError> {
        let p: VocabParams = from_params(params, |name| match name {
            "source" => " (file or train)",
            "model" => " (wordpiece or unigram)",
            "file" => " (a path to a vocab.txt, relative to the workspace root)",
            "lowercase" => " (true or false)",
            _ => " (a whole number ≥ 0)",
        })?;
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), ParamError> {
        match self.source {
            Source::File => {
                if self.model != ModelKind::WordPiece {
                    return Err(
                        "param `model: unigram` needs `source: train`: a vocab.txt file is a WordPiece vocabulary (it has no Unigram scores)"
                            .into(),
                    );
                }
                if self.file.as_deref().is_some_and(str::is_empty) {
                    return Err("param `file` is empty: give the path of a vocab.txt, relative to the workspace root".into());
                }
            }
            Source::Train => {
                let n = SPECIAL_TOKENS.len();
                if self.size <= n || self.size > MAX_SIZE {
                    return Err(format!(
                        "param `size` is {}; it must be in [{}, {MAX_SIZE}] (the vocabulary includes the {n} special tokens [PAD] [UNK] [CLS] [SEP] [MASK])",
                        self.size,
                        n + 1
                    )
                    .into());
                }
                if self.file.is_some() {
                    return Err(
                        "param `file` is only for `source: file`; with `source: train` the vocabulary is trained on the clean dep's corpus"
                            .into(),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<VocabParams, String> {
        VocabParams::parse(v.as_object().unwrap()).map_err(|e| e.0)
    }

    #[test]
    fn defaults_and_matrix_coordinates() {
        let p = parse(json!({"lowercase": false, "share_type": "all"})).unwrap();
        assert_eq!(p.source, Source::File);
        assert_eq!(p.model, ModelKind::WordPiece);
        assert!(!p.lowercase);
        assert_eq!(
            (p.size, p.min_frequency, p.coverage_sample_mb),
            (8000, 2, 64)
        );
    }

    #[test]
    fn errors_name_the_param() {
        let e = parse(json!({"source": "download"})).unwrap_err();
        assert!(e.contains("`source`") && e.contains("file or train"), "{e}");
        let e = parse(json!({"model": "bpe", "source": "train"})).unwrap_err();
        assert!(e.contains("`model`"), "{e}");
        let e = parse(json!({"size": -3, "source": "train"})).unwrap_err();
        assert!(e.contains("`size`"), "{e}");
        let e = parse(json!({"size": 5, "source": "train"})).unwrap_err();
        assert!(e.contains("`size` is 5") && e.contains("[6,"), "{e}");
        let e = parse(json!({"model": "unigram"})).unwrap_err();
        assert!(e.contains("source: train"), "{e}");
        let e = parse(json!({"source": "train", "file": "v.txt"})).unwrap_err();
        assert!(e.contains("`file`"), "{e}");
        let e = parse(json!({"lowercase": "yes"})).unwrap_err();
        assert!(e.contains("`lowercase`"), "{e}");
    }
}
