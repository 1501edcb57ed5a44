//! Batched prediction with a fine-tuned model: class probabilities for sentence pairs, or choice
//! probabilities for multiple-choice questions. Used by the finetune stage's evaluation and by
//! `pipeline predict`.
//!
//! Examples are batched in order of length (so that a batch pads to little more than its own
//! rows; the results come back in the input's order), and on a CPU each batch is cut into one
//! chunk per core, each run by its own single-threaded worker (`pipeline_albert::parallel`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor};
use pipeline_albert::parallel::DataParallel;
use pipeline_albert::{AlbertConfig, AlbertForMultipleChoice, AlbertForSequenceClassification, hf};

use crate::encode::{Encoded, PairEncoder, batch_input};

fn probs_of(logits: Tensor<2>) -> Vec<Vec<f32>> {
    let [n, k] = logits.dims();
    let flat: Vec<f32> = softmax(logits, 1)
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    (0..n).map(|i| flat[i * k..(i + 1) * k].to_vec()).collect()
}

/// Probabilities of `items` in their order: batches of `batch_size` items taken in order of
/// `length`, each split over `workers`, `probs(part)` computing one part's probabilities.
fn batched<T: Sync>(
    items: &[T],
    length: impl Fn(&T) -> usize,
    batch_size: usize,
    workers: &DataParallel,
    progress: &(dyn Fn(usize) + Sync),
    probs: impl Fn(&[&T]) -> Vec<Vec<f32>> + Sync,
) -> Vec<Vec<f32>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| length(&items[i]));
    let mut out = vec![Vec::new(); items.len()];
    for batch in order.chunks(batch_size.max(1)) {
        let ranges = workers.split(batch.len());
        let parts = workers.map(ranges.len(), |k| {
            let part: Vec<&T> = batch[ranges[k].clone()]
                .iter()
                .map(|&i| &items[i])
                .collect();
            probs(&part)
        });
        for (&i, p) in batch.iter().zip(parts.into_iter().flatten()) {
            out[i] = p;
        }
        progress(batch.len());
    }
    out
}

/// Class probabilities of `rows` (in order), `batch_size` rows per forward pass.
pub fn pair_probabilities(
    model: &AlbertForSequenceClassification,
    rows: &[Encoded],
    batch_size: usize,
    workers: &DataParallel,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<f32>> {
    batched(
        rows,
        |r| r.ids.len(),
        batch_size,
        workers,
        progress,
        |part| probs_of(model.forward(&batch_input(part, device))),
    )
}

/// Choice probabilities of each question (its rows are its choices, in order).
pub fn choice_probabilities(
    model: &AlbertForMultipleChoice,
    questions: &[Vec<Encoded>],
    batch_size: usize,
    workers: &DataParallel,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<f32>> {
    let longest = |q: &Vec<Encoded>| q.iter().map(|r| r.ids.len()).max().unwrap_or(0);
    batched(questions, longest, batch_size, workers, progress, |part| {
        let n = part.first().map_or(1, |q| q.len());
        let rows: Vec<&Encoded> = part.iter().flat_map(|q| q.iter()).collect();
        probs_of(model.forward(&batch_input(&rows, device), n))
    })
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

    /// Batching by length must not change which result belongs to which input.
    #[test]
    fn results_come_back_in_input_order() {
        let items: Vec<usize> = vec![7, 3, 9, 1, 3, 8, 2, 5, 5, 0, 4];
        for workers in [1, 2, 3] {
            let dp = DataParallel::new(workers);
            let probs = batched(
                &items,
                |&x| x,
                4,
                &dp,
                &|_| {},
                |part| part.iter().map(|&&x| vec![x as f32]).collect(),
            );
            let back: Vec<usize> = probs.iter().map(|p| p[0] as usize).collect();
            assert_eq!(back, items, "{workers} workers");
        }
        assert_eq!(argmax(&[0.1, 0.7, 0.2]), 1);
    }
}
