//! Batched prediction with a fine-tuned model: class probabilities for sentence pairs, or choice
//! probabilities for multiple-choice questions. Used by the finetune stage's evaluation and by
//! `pipeline predict`.
//!
//! On the flex backend a batch is cut into one chunk per core and the chunks run in parallel:
//! flex's element-wise kernels are single-threaded, so one forward pass leaves a core idle for
//! half its time (1.4× the sentences/s on 2 cores). libtorch threads its own kernels, so there
//! a batch runs whole.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor};
use pipeline_albert::{AlbertConfig, AlbertForMultipleChoice, AlbertForSequenceClassification, hf};
use rayon::prelude::*;

use crate::encode::{Encoded, PairEncoder, batch_input};

/// How many parallel chunks a batch is cut into on `device_name`.
pub fn chunks_for(device_name: &str) -> usize {
    if device_name == "flex" {
        rayon::current_num_threads().max(1)
    } else {
        1
    }
}

fn probs_of(logits: Tensor<2>) -> Vec<Vec<f32>> {
    let [n, k] = logits.dims();
    let flat: Vec<f32> = softmax(logits, 1)
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    (0..n).map(|i| flat[i * k..(i + 1) * k].to_vec()).collect()
}

/// Class probabilities of `rows` (in order), `batch_size` rows per forward pass.
pub fn pair_probabilities(
    model: &AlbertForSequenceClassification,
    rows: &[Encoded],
    batch_size: usize,
    chunks: usize,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(rows.len());
    for batch in rows.chunks(batch_size.max(1)) {
        let parts = split(batch, chunks);
        let probs: Vec<Vec<Vec<f32>>> = parts
            .par_iter()
            .map(|part| {
                let refs: Vec<&Encoded> = part.iter().collect();
                probs_of(model.forward(&batch_input(&refs, device)))
            })
            .collect();
        out.extend(probs.into_iter().flatten());
        progress(batch.len());
    }
    out
}

/// Choice probabilities of each question (its rows are its choices, in order).
pub fn choice_probabilities(
    model: &AlbertForMultipleChoice,
    questions: &[Vec<Encoded>],
    batch_size: usize,
    chunks: usize,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(questions.len());
    for batch in questions.chunks(batch_size.max(1)) {
        let parts = split(batch, chunks);
        let probs: Vec<Vec<Vec<f32>>> = parts
            .par_iter()
            .map(|part| {
                let n = part.first().map(Vec::len).unwrap_or(1);
                let refs: Vec<&Encoded> = part.iter().flatten().collect();
                probs_of(model.forward(&batch_input(&refs, device), n))
            })
            .collect();
        out.extend(probs.into_iter().flatten());
        progress(batch.len());
    }
    out
}

/// `items` in `n` nearly equal consecutive parts (fewer when there are fewer items).
fn split<T>(items: &[T], n: usize) -> Vec<&[T]> {
    let n = n.clamp(1, items.len().max(1));
    (0..n)
        .map(|k| &items[k * items.len() / n..(k + 1) * items.len() / n])
        .filter(|p| !p.is_empty())
        .collect()
}

/// The index of the largest probability.
pub fn argmax(p: &[f32]) -> usize {
    p.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
        .unwrap_or(0)
}

/// A fine-tuned sentence-pair classifier ready to predict: the model, its tokenizer and labels.
pub struct PairClassifier {
    pub dir: PathBuf,
    pub config: AlbertConfig,
    pub model: AlbertForSequenceClassification,
    pub encoder: PairEncoder,
    pub labels: Vec<String>,
}

impl PairClassifier {
    /// Loads a fine-tune artifact (or any `AlbertForSequenceClassification` directory with
    /// `id2label`, `vocab.txt` and `tokenizer.json`).
    pub fn load(
        dir: &Path,
        max_seq_length: usize,
        device: &Device,
    ) -> anyhow::Result<PairClassifier> {
        let raw: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config.json")).with_context(|| {
                format!(
                    "{} has no config.json: give a fine-tune artifact (`--stage finetune_lcqmc`) or its directory",
                    dir.display()
                )
            })?,
        )
        .with_context(|| format!("{}/config.json is not valid JSON", dir.display()))?;
        let arch = raw["architectures"][0].as_str().unwrap_or("");
        if arch != "AlbertForSequenceClassification" {
            bail!(
                "{} holds a {} model, not a sentence-pair classifier: `pipeline predict` needs a \
                 fine-tuned model (a `finetune` stage's artifact), e.g. --stage finetune_lcqmc",
                dir.display(),
                if arch.is_empty() {
                    "model without a classifier head".to_string()
                } else {
                    arch.to_string()
                }
            );
        }
        let (config, model) = hf::load_classifier(dir, device)?;
        let mut labels: Vec<(usize, String)> = raw["id2label"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort();
        let labels: Vec<String> = labels.into_iter().map(|(_, l)| l).collect();
        if labels.len() != model.num_labels() {
            bail!(
                "{}/config.json: id2label has {} labels but the classifier has {} outputs",
                dir.display(),
                labels.len(),
                model.num_labels()
            );
        }
        let encoder = PairEncoder::load(dir, max_seq_length.min(config.max_position_embeddings))?;
        Ok(PairClassifier {
            dir: dir.to_path_buf(),
            config,
            model,
            encoder,
            labels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_everything_in_order() {
        let v: Vec<u32> = (0..10).collect();
        let parts = split(&v, 3);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.concat(), v);
        assert_eq!(split(&v[..1], 4).len(), 1);
        assert!(split::<u32>(&[], 2).is_empty());
        assert_eq!(argmax(&[0.1, 0.7, 0.2]), 1);
    }
}
