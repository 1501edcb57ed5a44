//! Batched prediction with a fine-tuned model: class probabilities for sentence pairs and single
//! texts, choice probabilities for multiple-choice questions, tag probabilities at every
//! position for tagging, start and end logits at every position for span extraction. Used by
//! the finetune stage's evaluation and by `pipeline predict`.
//!
//! Examples are batched in order of length (so that a batch pads to little more than its own
//! rows; the results come back in the input's order), and on a CPU each batch is cut into one
//! chunk per core, each run by its own single-threaded worker (`pipeline_albert::parallel`).

use std::path::{Path, PathBuf};

use anyhow::bail;
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor};
use pipeline_albert::parallel::DataParallel;
use pipeline_albert::{
    AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification, hf,
};

use crate::data::EncodedSplit;
use crate::encode::{Encoded, Encoder, PairEncoder, batch_input};
pub use crate::kinds::argmax;
use crate::kinds::{Head, Kind, KindError, Model, Outputs, decode_outputs};
use crate::params::Encoding;
use crate::task_model::TaskModel;
use pipeline_tasks::{Task, TaskKind};

fn probs_of(logits: Tensor<2>) -> Vec<Vec<f32>> {
    let [n, k] = logits.dims();
    let flat: Vec<f32> = softmax(logits, 1)
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    (0..n).map(|i| flat[i * k..(i + 1) * k].to_vec()).collect()
}

/// The rows of `[n, k]` values as they are.
fn rows_of(values: Tensor<2>) -> Vec<Vec<f32>> {
    let [n, k] = values.dims();
    let flat: Vec<f32> = values
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    (0..n).map(|i| flat[i * k..(i + 1) * k].to_vec()).collect()
}

/// Tag probabilities `[rows][position][tag]` of the real positions of each row.
fn position_probs_of(logits: Tensor<3>, rows: &[&Encoded]) -> Vec<Vec<Vec<f32>>> {
    let [n, s, k] = logits.dims();
    let flat: Vec<f32> = softmax(logits, 2)
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    (0..n)
        .map(|i| {
            let len = rows.get(i).map_or(0, |r| r.ids.len()).min(s);
            (0..len)
                .map(|j| flat[(i * s + j) * k..(i * s + j + 1) * k].to_vec())
                .collect()
        })
        .collect()
}

/// Start and end logits `[rows][position]` of the real positions of each row.
fn span_logits_of(
    start: Tensor<2>,
    end: Tensor<2>,
    rows: &[&Encoded],
) -> Vec<(Vec<f32>, Vec<f32>)> {
    let [n, s] = start.dims();
    let flat = |t: Tensor<2>| -> Vec<f32> {
        t.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap_or_default()
    };
    let (start, end) = (flat(start), flat(end));
    (0..n)
        .map(|i| {
            let len = rows.get(i).map_or(0, |r| r.ids.len()).min(s);
            let row = |v: &[f32]| v.get(i * s..i * s + len).unwrap_or_default().to_vec();
            (row(&start), row(&end))
        })
        .collect()
}

/// Results for `items` in their order: batches of `batch_size` items taken in order of
/// `length`, each split over `workers`, `probs(part)` computing one part's results.
fn batched<T: Sync, R: Clone + Default + Send>(
    items: &[T],
    length: impl Fn(&T) -> usize,
    batch_size: usize,
    workers: &DataParallel,
    progress: &(dyn Fn(usize) + Sync),
    probs: impl Fn(&[&T]) -> Vec<R> + Sync,
) -> Vec<R> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| length(&items[i]));
    let mut out = vec![R::default(); items.len()];
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

/// A regressor's scores of `rows` (in order): its raw outputs, one per row, not a softmax
/// (which of one output is always 1).
pub fn pair_scores(
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
        |part| rows_of(model.forward(&batch_input(part, device))),
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

/// Tag probabilities at every real position of each row.
pub fn tag_probabilities(
    model: &AlbertForTokenClassification,
    rows: &[Encoded],
    batch_size: usize,
    workers: &DataParallel,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<Vec<f32>>> {
    batched(
        rows,
        |r| r.ids.len(),
        batch_size,
        workers,
        progress,
        |part| position_probs_of(model.forward(&batch_input(part, device)), part),
    )
}

/// Start and end logits at every real position of each row.
pub fn span_logits(
    model: &AlbertForQuestionAnswering,
    rows: &[Encoded],
    batch_size: usize,
    workers: &DataParallel,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<(Vec<f32>, Vec<f32>)> {
    batched(
        rows,
        |r| r.ids.len(),
        batch_size,
        workers,
        progress,
        |part| {
            let out = model.forward(&batch_input(part, device));
            span_logits_of(out.start_logits, out.end_logits, part)
        },
    )
}

/// The head's outputs on every feature of `split`, in order.
pub fn outputs(
    model: &TaskModel,
    split: &EncodedSplit,
    batch_size: usize,
    workers: &DataParallel,
    device: &Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Outputs {
    let first = || -> Vec<Encoded> { split.rows.iter().map(|r| r[0].clone()).collect() };
    match model {
        TaskModel::Pair(m) => Outputs::Rows(pair_probabilities(
            m,
            &first(),
            batch_size,
            workers,
            device,
            progress,
        )),
        TaskModel::Choice(m) => Outputs::Rows(choice_probabilities(
            m,
            &split.rows,
            (batch_size / 4).max(1),
            workers,
            device,
            progress,
        )),
        TaskModel::Tags(m) => Outputs::Positions(tag_probabilities(
            m,
            &first(),
            batch_size,
            workers,
            device,
            progress,
        )),
        TaskModel::Span(m) => Outputs::Spans(span_logits(
            m,
            &first(),
            batch_size,
            workers,
            device,
            progress,
        )),
        TaskModel::Score(m) => Outputs::Rows(pair_scores(
            m,
            &first(),
            batch_size,
            workers,
            device,
            progress,
        )),
    }
}

/// A fine-tuned model ready to predict: a sequence classifier (pairs or single texts), a token
/// classifier, a multiple-choice model (C3) or a span extractor (CMRC 2018), with its tokenizer
/// and labels (tags; none for a span extractor).
pub struct FineTuned {
    /// The model directory it was loaded from.
    pub dir: PathBuf,
    /// What it was fine-tuned for (the kind of config.json's `finetuning_task`; a sequence
    /// classifier without it is a pair classifier, as every one was before single texts).
    pub kind: TaskKind,
    /// The model's config.json.
    pub config: AlbertConfig,
    /// The model, its head as config.json's `architectures` names it.
    pub model: TaskModel,
    /// The directory's tokenizer, for rows of the `max_seq_length` it was loaded with (at
    /// most the model's positions).
    pub encoder: Encoder,
    /// The class or tag names in id order (config.json's `id2label`); a multiple-choice
    /// model's are the answer positions `0`–`3`, a span extractor has none.
    pub labels: Vec<String>,
}

/// The name `pipeline predict` knew the classifier by.
pub type PairClassifier = FineTuned;

impl FineTuned {
    /// Loads a fine-tune artifact (or any `AlbertForSequenceClassification` or
    /// `AlbertForTokenClassification` directory with `id2label`, or `AlbertForMultipleChoice`
    /// or `AlbertForQuestionAnswering` directory, with `vocab.txt` and `tokenizer.json`).
    /// `max_seq_length`: tokens per row; `None`: 128, or 256 for a span model (the window,
    /// with [`pipeline_tasks::span_features::SpanConfig::for_length`]'s question cut and
    /// stride).
    pub fn load(
        dir: &Path,
        max_seq_length: Option<usize>,
        device: &Device,
    ) -> anyhow::Result<FineTuned> {
        // Read bounded: a config.json that is a FIFO, `/dev/zero` or 20 MB is refused unread.
        // Its sizes are checked by `load_head`'s loader (`hf::read_config`: a config of 10^6
        // shared layers would predict without end) before the model is allocated.
        // A directory that is no model is a mistake in what was asked (exit 2).
        let raw = hf::read_config_json(dir).map_err(|e| match e {
            hf::HfError::NoConfig { .. } => {
                anyhow::Error::new(pipeline_engine::UserError::new(format!(
                    "{} has no config.json: give a fine-tune artifact (`--stage finetune_lcqmc`) \
                     or its directory",
                    dir.display()
                )))
            }
            e => e.into(),
        })?;
        let arch = raw["architectures"][0].as_str().unwrap_or("");
        let kind = kind_of(&raw, arch);
        let (config, model, outputs) = load_head(dir, arch, kind, device)?;
        let labels = labels_of(&raw, dir, kind, outputs)?;
        let encoding =
            Encoding::for_prediction(kind, max_seq_length, config.max_position_embeddings);
        let encoder = PairEncoder::load(dir, encoding)?;
        Ok(FineTuned {
            dir: dir.to_path_buf(),
            kind,
            config,
            model,
            encoder,
            labels,
        })
    }

    /// The predictions of kind `kind`, one per example of `split` (encoded by `kind` with
    /// [`FineTuned::encoder`]), `batch_size` features a forward pass on `workers`; a model
    /// whose head gives another kind's outputs is a [`KindError`].
    pub fn predict<K: Kind>(
        &self,
        kind: &K,
        split: &EncodedSplit,
        batch_size: usize,
        workers: &DataParallel,
        device: &Device,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<K::Prediction>, KindError> {
        let out = outputs(&self.model, split, batch_size, workers, device, progress);
        decode_outputs(kind, split, out)
    }

    /// Whether it tags characters (a token classifier) rather than classifying texts.
    pub fn is_tagger(&self) -> bool {
        matches!(self.model, TaskModel::Tags(_))
    }

    /// The span features' parameters a span model predicts with: the defaults, the window no
    /// longer than the encoder's `max_seq_length`.
    pub fn span_config(&self) -> pipeline_tasks::span_features::SpanConfig {
        self.encoder.span
    }
}

/// A fine-tuned model with the workers, device and progress its predictions run on: what the
/// kinds' serving asks for outputs ([`crate::kinds::Run`]).
pub struct Serving<'a> {
    /// The model, its tokenizer and labels.
    pub model: &'a FineTuned,
    /// The worker threads a batch is split over.
    pub workers: &'a DataParallel,
    /// The device the model is on.
    pub device: &'a Device,
    /// Told of each batch's inputs.
    pub progress: &'a (dyn Fn(usize) + Sync),
}

impl Model for Serving<'_> {
    fn dir(&self) -> &Path {
        &self.model.dir
    }

    fn head(&self) -> Head {
        self.model.model.head()
    }

    fn head_name(&self) -> &'static str {
        self.model.model.head_name()
    }

    fn encoder(&self) -> &Encoder {
        &self.model.encoder
    }

    fn labels(&self) -> &[String] {
        &self.model.labels
    }

    fn outputs(&self, split: &EncodedSplit, batch_size: usize) -> Outputs {
        let (workers, device, progress) = (self.workers, self.device, self.progress);
        outputs(
            &self.model.model,
            split,
            batch_size,
            workers,
            device,
            progress,
        )
    }
}

/// The task kind of a fine-tuned model: the kind that recognises its architecture and the
/// `finetuning_task` it names ([`crate::kinds::from_config`]).
fn kind_of(raw: &serde_json::Value, arch: &str) -> TaskKind {
    let named = raw["finetuning_task"].as_str().and_then(Task::kind_of_name);
    crate::kinds::from_config(arch, named)
}

/// The model of the architecture `config.json` names, and its classifier's outputs (none for
/// a choice or span model).
fn load_head(
    dir: &Path,
    arch: &str,
    kind: TaskKind,
    device: &Device,
) -> anyhow::Result<(AlbertConfig, TaskModel, Option<usize>)> {
    Ok(match arch {
        "AlbertForQuestionAnswering" => {
            let (c, m) = hf::load_question_answering(dir, device)?;
            (c, TaskModel::Span(m), None)
        }
        "AlbertForMultipleChoice" => {
            let (c, m) = hf::load_multiple_choice(dir, device)?;
            (c, TaskModel::Choice(m), None)
        }
        "AlbertForSequenceClassification" => {
            let (c, m) = hf::load_classifier(dir, device)?;
            let n = m.num_labels();
            // A regressor is the same head, its one output the score (config.json's
            // `finetuning_task` names a task of a kind that trains a score head).
            if crate::kinds::of(kind).head(&[]) == Head::Score {
                (c, TaskModel::Score(m), Some(n))
            } else {
                (c, TaskModel::Pair(m), Some(n))
            }
        }
        "AlbertForTokenClassification" => {
            let (c, m) = hf::load_token_classifier(dir, device)?;
            let n = m.num_labels();
            (c, TaskModel::Tags(m), Some(n))
        }
        _ => bail!(
            "{} holds a {} model, not a sentence-pair classifier: `pipeline predict` needs a \
             fine-tuned model (a `finetune` stage's artifact), e.g. --stage finetune_lcqmc",
            dir.display(),
            if arch.is_empty() {
                "model without a classifier head".to_string()
            } else {
                arch.to_string()
            }
        ),
    })
}

/// The labels in `id2label` order, checked against the classifier's outputs; a choice model's
/// are the answer positions, a span model has none.
fn labels_of(
    raw: &serde_json::Value,
    dir: &Path,
    kind: TaskKind,
    outputs: Option<usize>,
) -> anyhow::Result<Vec<String>> {
    let mut labels: Vec<(usize, String)> = raw["id2label"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    labels.sort();
    let mut labels: Vec<String> = labels.into_iter().map(|(_, l)| l).collect();
    match outputs {
        Some(n) if labels.len() != n => bail!(
            "{}/config.json: id2label has {} labels but the classifier has {} outputs",
            dir.display(),
            labels.len(),
            n
        ),
        Some(_) => {}
        // A choice model's classes are the answer positions; a span model has none (its
        // `id2label`, if any, names transformers' two outputs, start and end).
        None if crate::kinds::of(kind).head(&[]) == Head::Span => labels.clear(),
        None => labels = pipeline_tasks::task::choice_labels(4),
    }
    Ok(labels)
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
        assert_eq!(argmax(&[0.4, 0.2, 0.4]), 0, "the first on a tie");
        assert_eq!(argmax(&[]), 0);
    }
}
