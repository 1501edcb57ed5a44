//! Sentence pairs to token ids, and encoded examples to padded batches: `[CLS] a [SEP] b [SEP]`
//! with BERT's longest-first truncation, as albert_zh's `run_classifier.py` builds its inputs.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use burn::tensor::Device;
use pipeline_albert::AlbertInput;
use pipeline_text::vocab::Vocab;
use pipeline_text::wordpiece::{TokenizeWithOffsets, load_tokenizer};

/// The tokenizer of a model directory and the special ids.
pub struct PairEncoder {
    tokenizer: Box<dyn TokenizeWithOffsets>,
    pub vocab: Arc<Vocab>,
    pub max_seq_length: usize,
}

/// One encoded row: ids and segment ids, unpadded.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub types: Vec<u8>,
}

impl PairEncoder {
    /// The tokenizer in `dir` (`vocab.txt` + `tokenizer.json`, as the vocab and pretrain stages
    /// write them).
    pub fn load(dir: &Path, max_seq_length: usize) -> anyhow::Result<PairEncoder> {
        if max_seq_length < 5 {
            anyhow::bail!(
                "max_seq_length = {max_seq_length} is too small: [CLS] a [SEP] b [SEP] needs at least 5"
            );
        }
        let (vocab, tokenizer) = load_tokenizer(dir)
            .with_context(|| format!("loading the tokenizer of {}", dir.display()))?;
        Ok(PairEncoder {
            tokenizer,
            vocab,
            max_seq_length,
        })
    }

    fn tokens(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut starts = Vec::new();
        self.tokenizer
            .encode_with_offsets(text, &mut ids, &mut starts);
        ids
    }

    /// `[CLS] a [SEP] b [SEP]`, the longer of a and b trimmed from its end until the pair fits.
    pub fn encode(&self, a: &str, b: &str) -> Encoded {
        let mut ta = self.tokens(a);
        let mut tb = self.tokens(b);
        let budget = self.max_seq_length - 3;
        while ta.len() + tb.len() > budget {
            if ta.len() > tb.len() {
                ta.pop();
            } else {
                tb.pop();
            }
        }
        let mut ids = Vec::with_capacity(ta.len() + tb.len() + 3);
        let mut types = Vec::with_capacity(ids.capacity());
        ids.push(self.vocab.cls_id());
        ids.extend_from_slice(&ta);
        ids.push(self.vocab.sep_id());
        types.resize(ids.len(), 0);
        ids.extend_from_slice(&tb);
        ids.push(self.vocab.sep_id());
        types.resize(ids.len(), 1);
        Encoded { ids, types }
    }
}

/// Rows padded to the longest in the batch (rounded up to 8) as model input.
pub fn batch_input(rows: &[&Encoded], device: &Device) -> AlbertInput {
    let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(1);
    let seq = longest.div_ceil(8) * 8;
    let n = rows.len();
    let mut ids = vec![0i64; n * seq];
    let mut types = vec![0i64; n * seq];
    let mut mask = vec![0i64; n * seq];
    for (r, row) in rows.iter().enumerate() {
        for (j, (&id, &t)) in row.ids.iter().zip(&row.types).enumerate() {
            ids[r * seq + j] = id as i64;
            types[r * seq + j] = t as i64;
            mask[r * seq + j] = 1;
        }
    }
    AlbertInput::from_rows(n, seq, ids, types, mask, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoder(max: usize) -> PairEncoder {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/fixtures/vocab");
        let tmp = tempfile::tempdir().unwrap();
        std::fs::copy(dir.join("vocab.txt"), tmp.path().join("vocab.txt")).unwrap();
        let vocab = Vocab::load(&tmp.path().join("vocab.txt")).unwrap();
        let tok = pipeline_text::hf::wordpiece_tokenizer(&vocab, true).unwrap();
        pipeline_text::hf::write_tokenizer_json(&tok, &tmp.path().join("tokenizer.json")).unwrap();
        PairEncoder::load(tmp.path(), max).unwrap()
    }

    #[test]
    fn pairs_have_the_bert_layout_and_fit() {
        let e = encoder(12);
        let x = e.encode("我喜欢妈妈做的汤", "妈妈做的汤我很喜欢喝");
        assert_eq!(x.ids.len(), 12);
        assert_eq!(x.ids[0], e.vocab.cls_id());
        assert_eq!(*x.ids.last().unwrap(), e.vocab.sep_id());
        let sep = x.ids.iter().position(|&t| t == e.vocab.sep_id()).unwrap();
        // Longest-first: the two segments end up within one token of each other.
        let (a, b) = (sep - 1, x.ids.len() - sep - 2);
        assert!(a.abs_diff(b) <= 1, "{a} vs {b}");
        assert!(x.types[..=sep].iter().all(|&t| t == 0));
        assert!(x.types[sep + 1..].iter().all(|&t| t == 1));
        let short = e.encode("汤", "喝");
        assert_eq!(short.ids.len(), 5);
    }
}
