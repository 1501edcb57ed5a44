//! [`Predictor`]: a fine-tuned model loaded once, checking and predicting [`Input`]s of its
//! task kind with the stage's own encoding and decoding (the kinds' modules), so that what
//! `pipeline predict`, `pipeline serve` and the stage's evaluation compute is one computation.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use pipeline_albert::device::{DeviceChoice, ResolvedDevice, resolve};
use pipeline_albert::parallel::DataParallel;
use pipeline_tasks::TaskKind;
use pipeline_tasks::c3::C3_CHOICES;
use serde::Serialize;

use super::{Input, InputError, Prediction, PredictionShape};
use crate::kinds::{AnyKind, InputSpec, Limits, Run};
use crate::predict::{FineTuned, Serving};

/// Tagged texts and span contexts are cut into overlapping windows, so they may be longer
/// than a row; this many rows' worth of characters bounds the work one input can ask for.
pub const MAX_WINDOWS: usize = 64;

/// A fine-tuned model on a device, ready to predict.
pub struct Predictor {
    model: FineTuned,
    device: ResolvedDevice,
    /// One worker thread per core, started once: a server predicts thousands of batches, and
    /// starting them per batch cost 4 thread starts a batch and let the allocator's memory of
    /// the exited threads pile up (a server's RSS grew 215 → 705 MB over six rounds of load).
    workers: DataParallel,
}

/// What a [`Predictor`] is: `pipeline serve`'s `/info`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// The task kind (`pair`, `single`, `tagging`, `span`, `choice`, `reading_choice`,
    /// `pair_regression`).
    pub task: &'static str,
    /// config.json's `finetuning_task`, the task the model was fine-tuned on.
    pub finetuning_task: Option<String>,
    /// The model directory.
    pub model: PathBuf,
    /// Class or tag names in id order (none for a span extractor or a regressor).
    pub labels: Vec<String>,
    /// The fields an input takes.
    pub input: &'static str,
    /// Tokens per row, `[CLS]` and `[SEP]`s included.
    pub max_seq_length: usize,
    /// The longest text a tagger, a span extractor or a C3 model takes, in characters (a
    /// classifier's limit is `max_seq_length` tokens).
    pub max_text_chars: usize,
    /// The device it runs on.
    pub device: String,
}

impl Predictor {
    /// Loads a fine-tune artifact (or any directory `pipeline predict --model` takes) onto
    /// `device` (`auto`, `cpu`, `flex`, `tch-cpu`, `cuda:N`), rows of `max_seq_length` tokens
    /// (`None`: 128, or 256 for a span extractor).
    pub fn load(dir: &Path, device: &str, max_seq_length: Option<usize>) -> Result<Predictor> {
        let device = resolve(DeviceChoice::parse(device)?)?;
        let model = FineTuned::load(dir, max_seq_length, &device.device)?;
        let workers = DataParallel::for_device(&device.device);
        Ok(Predictor {
            model,
            device,
            workers,
        })
    }

    /// The task kind it predicts.
    pub fn kind(&self) -> TaskKind {
        self.model.kind
    }

    /// The task kind as the stage holds it: what decides the fields, limits and predictions.
    fn model_kind(&self) -> &'static dyn AnyKind {
        crate::kinds::of(self.kind())
    }

    /// The [`Input`] fields its kind takes, all required (`["text_a", "text_b"]`).
    pub fn input_fields(&self) -> &'static [&'static str] {
        self.model_kind().input().fields
    }

    /// The shape of the [`Prediction`]s it gives.
    pub fn predicts(&self) -> PredictionShape {
        self.model_kind().input().predicts
    }

    /// Class or tag names in id order.
    pub fn labels(&self) -> &[String] {
        &self.model.labels
    }

    /// The device's name (`cpu (flex, 2 threads)`, `cuda:0`, …).
    pub fn device_name(&self) -> &str {
        &self.device.name
    }

    /// What it is and what it takes.
    pub fn info(&self) -> ModelInfo {
        let raw = pipeline_albert::hf::read_config_json(&self.model.dir).ok();
        ModelInfo {
            task: self.kind().name(),
            finetuning_task: raw.and_then(|r| r["finetuning_task"].as_str().map(str::to_string)),
            model: self.model.dir.clone(),
            labels: self.model.labels.clone(),
            input: Input::usage(self.kind()),
            max_seq_length: self.max_seq_length(),
            max_text_chars: self.max_text_chars(),
            device: self.device.name.clone(),
        }
    }

    fn max_seq_length(&self) -> usize {
        self.model.encoder.max_seq_length
    }

    fn max_text_chars(&self) -> usize {
        MAX_WINDOWS * self.max_seq_length()
    }

    /// Checks `input` against the model: the fields its kind takes and no other, no empty
    /// text, 2 to 4 choices, and a length it takes: a classifier's or regressor's row must fit
    /// `max_seq_length` tokens (cutting it would change the answer unseen), a tagger's text, a
    /// span extractor's or C3 model's context at most [`ModelInfo::max_text_chars`]. Returns
    /// the input's cost in tokens (its rows' tokens), what a server batches by.
    pub fn check(&self, input: &Input) -> Result<usize, InputError> {
        self.shape(input)?;
        self.cost(input)
    }

    /// The fields of `input` are those its kind takes, none empty.
    fn shape(&self, input: &Input) -> Result<(), InputError> {
        let kind = self.kind();
        let InputSpec {
            fields: wanted,
            usage,
            ..
        } = self.model_kind().input();
        let given = input.given();
        if let Some(field) = given.iter().find(|f| !wanted.contains(f)) {
            return Err(InputError::Unexpected { field, kind, usage });
        }
        if let Some(field) = wanted.iter().find(|f| !given.contains(f)) {
            return Err(InputError::Missing { field, kind, usage });
        }
        let texts = [
            ("text", &input.text),
            ("text_a", &input.text_a),
            ("text_b", &input.text_b),
            ("context", &input.context),
            ("question", &input.question),
        ];
        for (field, text) in texts {
            if text.as_deref().is_some_and(|t| t.trim().is_empty()) {
                return Err(InputError::Empty {
                    field: field.into(),
                });
            }
        }
        let choices = input.choices.as_deref().unwrap_or_default();
        if input.choices.is_some() && !(2..=C3_CHOICES).contains(&choices.len()) {
            return Err(InputError::Choices {
                given: choices.len(),
            });
        }
        match choices.iter().position(|c| c.trim().is_empty()) {
            Some(i) => Err(InputError::Empty {
                field: format!("choices[{i}]"),
            }),
            None => Ok(()),
        }
    }

    /// The tokens `input` costs (an input whose shape is checked), or why it is too long: as
    /// its kind measures it.
    fn cost(&self, input: &Input) -> Result<usize, InputError> {
        let limits = Limits {
            encoder: &self.model.encoder,
            max_seq_length: self.max_seq_length(),
            max_text_chars: self.max_text_chars(),
        };
        self.model_kind().input_cost(input, &limits)
    }

    /// Predictions for `inputs`, in order, as one batch.
    pub fn predict(&self, inputs: &[Input]) -> Result<Vec<Prediction>> {
        self.predict_with(inputs.to_vec(), inputs.len().max(1), &|_| {})
    }

    /// Predictions for `inputs`, in order, `batch_size` rows a forward pass (in order of
    /// length), `progress` told of each batch's inputs. An input of the wrong shape is an
    /// error naming it (1-based); the length limits of [`Predictor::check`] are not applied:
    /// a row too long is cut as the stage cuts it in training (longest text first). The
    /// inputs' texts move into the predictions that echo them: a large file's texts are held
    /// once.
    pub fn predict_with(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        self.predict_split(inputs, batch_size, &self.workers, progress)
    }

    /// How many batches [`Predictor::predict_on_worker`] can run at once: one per core on a
    /// CPU, one on a GPU.
    pub fn worker_count(&self) -> usize {
        self.workers.workers()
    }

    /// Predictions for `inputs` as one batch, the whole batch on worker `worker`'s core
    /// (`worker < worker_count()`) instead of split across every core: a server with a batch
    /// in flight per core keeps each core busy, where one batch split in two leaves a core
    /// idle whenever the halves differ or the batch is a single input.
    pub fn predict_on_worker(&self, worker: usize, inputs: &[Input]) -> Result<Vec<Prediction>> {
        let inputs = inputs.to_vec();
        let batch_size = inputs.len().max(1);
        let whole = DataParallel::new(1);
        self.workers.run_on(worker, || {
            self.predict_split(inputs, batch_size, &whole, &|_| {})
        })
    }

    /// [`Predictor::predict_with`], each forward pass split across `workers`.
    fn predict_split(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        workers: &DataParallel,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        for (i, input) in inputs.iter().enumerate() {
            self.shape(input)
                .with_context(|| format!("input {}", i + 1))?;
        }
        let model = Serving {
            model: &self.model,
            workers,
            device: &self.device.device,
            progress,
        };
        let run = Run {
            model: &model,
            batch_size,
        };
        self.model_kind().predict_inputs(inputs, &run)
    }
}
