//! [`Predictor`]: a fine-tuned model loaded once, checking and predicting [`Input`]s of its
//! task kind with the stage's own encoding and decoding (the kinds' modules), so that what
//! `pipeline predict`, `pipeline serve` and the stage's evaluation compute is one computation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use pipeline_albert::device::{DeviceChoice, ResolvedDevice, resolve};
use pipeline_albert::parallel::DataParallel;
use pipeline_tasks::c3::{C3_CHOICES, C3Example};
use pipeline_tasks::entities::entities;
use pipeline_tasks::squad::SquadExample;
use pipeline_tasks::{ScoredPairExample, TaskKind};
use serde::Serialize;

use super::io::{
    AnswerPrediction, ChoicePrediction, ClassPrediction, FoundEntity, Input, InputError,
    Prediction, ScorePrediction, TagPrediction,
};
use crate::encode::Encoded;
use crate::kinds::Kind;
use crate::kinds::pair_regression::PairRegressions;
use crate::kinds::{reading_choice, span, tagging};
use crate::predict::{FineTuned, argmax, pair_probabilities};
use crate::task_model::TaskModel;

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
        let usage = Input::usage(kind);
        let wanted: &[&'static str] = match kind {
            TaskKind::Pair | TaskKind::PairRegression => &["text_a", "text_b"],
            TaskKind::Single | TaskKind::Tagging => &["text"],
            TaskKind::Span => &["context", "question"],
            TaskKind::ReadingChoice => &["context", "question", "choices"],
            TaskKind::Choice => &["question", "choices"],
        };
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

    /// The tokens `input` costs (an input whose shape is checked), or why it is too long.
    fn cost(&self, input: &Input) -> Result<usize, InputError> {
        let enc = &self.model.encoder;
        let tokens = |t: &Option<String>| enc.tokens(t.as_deref().unwrap_or("")).len();
        let (limit, chars) = (self.max_seq_length(), self.max_text_chars());
        let too_long = |field: &str, length, unit, limit, why| InputError::TooLong {
            field: field.into(),
            length,
            unit,
            limit,
            why,
        };
        let long_text = |field: &str, t: &Option<String>| {
            let n = t.as_deref().map_or(0, |t| t.chars().count());
            match n > chars {
                true => Err(too_long(field, n, "characters", chars, "")),
                false => Ok(n),
            }
        };
        match self.kind() {
            TaskKind::Single => {
                let n = tokens(&input.text) + 2;
                match n > limit {
                    true => Err(too_long(
                        "text",
                        n,
                        "tokens",
                        limit,
                        " with [CLS] and [SEP]",
                    )),
                    false => Ok(n),
                }
            }
            TaskKind::Pair | TaskKind::PairRegression => {
                let n = tokens(&input.text_a) + tokens(&input.text_b) + 3;
                match n > limit {
                    true => Err(too_long(
                        "text_a + text_b",
                        n,
                        "tokens",
                        limit,
                        " with [CLS] and two [SEP]s",
                    )),
                    false => Ok(n),
                }
            }
            TaskKind::Tagging => Ok(long_text("text", &input.text)? + 2),
            TaskKind::Span => {
                Ok(long_text("context", &input.context)? + tokens(&input.question) + 3)
            }
            TaskKind::ReadingChoice | TaskKind::Choice => {
                let context = long_text("context", &input.context)?;
                let n = input.choices.as_ref().map_or(0, Vec::len);
                Ok(n * (context + tokens(&input.question) + 4).min(limit))
            }
        }
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
        for (i, input) in inputs.iter().enumerate() {
            self.shape(input)
                .with_context(|| format!("input {}", i + 1))?;
        }
        match self.kind() {
            TaskKind::Pair | TaskKind::Single => self.classify(inputs, batch_size, progress),
            TaskKind::PairRegression => self.score(inputs, batch_size, progress),
            TaskKind::Tagging => self.tag(inputs, batch_size, progress),
            TaskKind::Span => self.answer(inputs, batch_size, progress),
            TaskKind::ReadingChoice | TaskKind::Choice => self.choose(inputs, batch_size, progress),
        }
    }

    fn classify(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        let TaskModel::Pair(m) = &self.model.model else {
            return Err(self.wrong_head("a sequence classifier"));
        };
        let enc = &self.model.encoder;
        let rows: Vec<Encoded> = inputs
            .iter()
            .map(|x| match (&x.text_a, &x.text_b, &x.text) {
                (Some(a), Some(b), _) => enc.encode(a, b),
                (_, _, t) => enc.encode_single(t.as_deref().unwrap_or("")),
            })
            .collect();
        let dev = &self.device.device;
        let probs = pair_probabilities(m, &rows, batch_size, &self.workers, dev, progress);
        let labels = &self.model.labels;
        drop(rows);
        Ok(inputs
            .into_iter()
            .zip(probs)
            .map(|(x, p)| {
                let k = argmax(&p);
                Prediction::Class(ClassPrediction {
                    text: x.text,
                    text_a: x.text_a,
                    text_b: x.text_b,
                    label: labels.get(k).cloned().unwrap_or_default(),
                    index: k,
                    by_label: labels.iter().cloned().zip(p.iter().copied()).collect(),
                    probabilities: p,
                })
            })
            .collect())
    }

    fn wrong_head(&self, expected: &str) -> anyhow::Error {
        anyhow!(
            "{}: a {} model, where {expected} was expected",
            self.model.dir.display(),
            self.model.model.head_name()
        )
    }

    fn score(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        let pairs: Vec<ScoredPairExample> = inputs
            .into_iter()
            .enumerate()
            .map(|(i, x)| ScoredPairExample {
                text_a: x.text_a.unwrap_or_default(),
                text_b: x.text_b.unwrap_or_default(),
                score: f32::NAN,
                file: 0,
                line: i + 1,
            })
            .collect();
        let split = PairRegressions.encode("predict", &pairs, &self.model.encoder);
        let dev = &self.device.device;
        let scores = self.model.predict(
            &PairRegressions,
            &split,
            batch_size,
            &self.workers,
            dev,
            progress,
        )?;
        Ok(pairs
            .into_iter()
            .zip(scores)
            .map(|(p, score)| {
                Prediction::Score(ScorePrediction {
                    text_a: p.text_a,
                    text_b: p.text_b,
                    score,
                })
            })
            .collect())
    }

    /// Tags of each text's characters (whitespace gets `O`, the first tag) and the entities
    /// they make.
    fn tag(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        let texts: Vec<String> = inputs
            .into_iter()
            .map(|x| x.text.unwrap_or_default())
            .collect();
        let units: Vec<(Vec<String>, Vec<usize>)> =
            texts.iter().map(|t| tagging::units(t)).collect();
        let sentences = units.iter().map(|(u, _)| (&u[..], None));
        let split = tagging::encode_sentences("predict", sentences, &self.model.encoder);
        let dev = &self.device.device;
        let tags = self.model.predict(
            &tagging::Tagging,
            &split,
            batch_size,
            &self.workers,
            dev,
            progress,
        )?;
        let labels = &self.model.labels;
        let name = |t: usize| labels.get(t).cloned().unwrap_or_default();
        Ok(texts
            .into_iter()
            .zip(&units)
            .zip(&tags)
            .map(|((text, (_, at)), ids)| {
                let chars: Vec<char> = text.chars().collect();
                let mut full = vec![name(0); chars.len()];
                for (&pos, &t) in at.iter().zip(ids) {
                    full[pos] = name(t);
                }
                let found = entities(&full)
                    .into_iter()
                    .map(|e| FoundEntity {
                        text: chars[e.start..e.end].iter().collect(),
                        kind: e.kind,
                        start: e.start,
                        end: e.end,
                    })
                    .collect();
                Prediction::Tags(TagPrediction {
                    text,
                    tags: full,
                    entities: found,
                })
            })
            .collect())
    }

    fn answer(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        let questions: Vec<SquadExample> = inputs
            .into_iter()
            .enumerate()
            .map(|(i, x)| SquadExample {
                id: format!("{}", i + 1),
                article: i,
                context: Arc::from(x.context.unwrap_or_default()),
                question: x.question.unwrap_or_default().trim().to_string(),
                answers: Vec::new(),
                file: 0,
            })
            .collect();
        let split = span::encode_questions("predict", &questions, &self.model.encoder);
        let dev = &self.device.device;
        let answers = self.model.predict(
            &span::Spans,
            &split,
            batch_size,
            &self.workers,
            dev,
            progress,
        )?;
        Ok(questions
            .into_iter()
            .zip(answers)
            .map(|(q, a)| {
                Prediction::Answer(AnswerPrediction {
                    question: q.question,
                    start: a.as_ref().map(|a| a.chars.start),
                    end: a.as_ref().map(|a| a.chars.end),
                    probability: a.as_ref().map(|a| a.probability),
                    score: a.as_ref().map(|a| a.score),
                    answer: a.map(|a| a.text),
                })
            })
            .collect())
    }

    /// Each question's choice: C3's `[CLS] context [SEP] question [SEP] choice [SEP]` rows
    /// padded to 4, or a `choice` model's `[CLS] prompt [SEP] choice [SEP]` of the real choices
    /// only, as it was trained.
    fn choose(
        &self,
        inputs: Vec<Input>,
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>> {
        let questions: Vec<C3Example> = inputs.into_iter().map(c3_question).collect();
        let enc = &self.model.encoder;
        let mut split = reading_choice::encode_questions("predict", &questions, enc);
        if self.kind() == TaskKind::Choice {
            split.rows = questions
                .iter()
                .map(|q| {
                    let real = &q.choices[..q.real_choices];
                    real.iter().map(|c| enc.encode(&q.question, c)).collect()
                })
                .collect();
        }
        let dev = &self.device.device;
        // Questions have up to 4 rows each: a batch of `batch_size` rows.
        let batch = (batch_size / C3_CHOICES).max(1);
        let probs = self.model.predict(
            &reading_choice::ReadingChoices,
            &split,
            batch,
            &self.workers,
            dev,
            progress,
        )?;
        Ok(questions
            .into_iter()
            .zip(probs)
            .map(|(q, p)| {
                let k = argmax(&p);
                let real = q.real_choices.min(p.len());
                Prediction::Choice(ChoicePrediction {
                    answer: q.choices.get(k).cloned().unwrap_or_default(),
                    choices: q.choices[..q.real_choices].to_vec(),
                    question: q.question,
                    choice: k,
                    probabilities: p[..real].to_vec(),
                })
            })
            .collect())
    }
}

/// A choice input (its shape checked) as a C3 question, the options trimmed and padded.
fn c3_question(x: Input) -> C3Example {
    let given = x.choices.unwrap_or_default();
    let real_choices = given.len().min(C3_CHOICES);
    let mut choices: [String; C3_CHOICES] = Default::default();
    for (c, g) in choices.iter_mut().zip(given) {
        *c = g.trim().to_string();
    }
    C3Example {
        id: "question".into(),
        document: 0,
        context: x.context.unwrap_or_default(),
        question: x.question.unwrap_or_default().trim().to_string(),
        choices,
        real_choices,
        answer: 0,
        file: 0,
    }
}
