//! The model being fine-tuned: a sequence classifier (pairs, single texts), a multiple-choice
//! head, a token classifier (tagging), a span extractor (question answering) or a sequence
//! classifier with one output trained as a regressor (scored pairs) on an ALBERT
//! backbone taken from the `pretrain` dep (its weights, or its architecture with fresh
//! weights) or from a checkpoint directory, with the dropout the params ask for. Its loss
//! against a batch's gold ([`TaskModel::loss`]) is the head's own, so the training loop is the
//! same for every kind.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use burn::module::Module;
use burn::nn::DropoutConfig;
use burn::tensor::{Device, Distribution, Int, Tensor};
use pipeline_albert::model::{MatmulPrecision, weighted_cross_entropy};
use pipeline_albert::{
    Albert, AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification, AlbertInput, hf,
};
use pipeline_engine::stage::StageContext;
use pipeline_metrics::{PretrainRecord, PretrainingPoint, records};

use crate::kinds::Head;
use crate::params::{Init, TrainParams};

/// A sequence classifier, a multiple-choice model, a token classifier or a span extractor.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum TaskModel {
    /// A sequence classifier: sentence pairs and single texts.
    Pair(AlbertForSequenceClassification),
    /// A multiple-choice model: one score per choice row of a question.
    Choice(AlbertForMultipleChoice),
    /// A token classifier: a tag at every position (tagging, NER).
    Tags(AlbertForTokenClassification),
    /// A span extractor: a start and an end score at every position.
    Span(AlbertForQuestionAnswering),
    /// A regressor: transformers' `AlbertForSequenceClassification` with one output and
    /// `problem_type: regression` (its loss the mean squared error), as transformers trains
    /// STS-B; the same head, so the export loads in transformers unchanged.
    Score(AlbertForSequenceClassification),
}

/// A batch's gold as tensors: class ids with a weight each (for tags, every position, weight
/// 0 where ignored), or the answers' start and end positions.
#[derive(Debug, Clone)]
pub enum GoldTensors {
    /// The gold of a classifier, a choice model or a token classifier.
    Classes {
        /// One class (choice, tag) id per example, or per position of the padded batch for
        /// tags (0 where ignored).
        ids: Tensor<1, Int>,
        /// The weight of each id in the loss: 1, or 0 where it is ignored.
        weights: Tensor<1>,
    },
    /// The gold of a span extractor.
    Spans {
        /// The answer's first token in each row (0, `[CLS]`, where the row does not hold it).
        start: Tensor<1, Int>,
        /// The answer's last token in each row (0 with `start`).
        end: Tensor<1, Int>,
    },
    /// The gold score of each example, for a regressor.
    Scores(Tensor<1>),
}

/// Gold of one head's shape given to another head: a class or tag id per row (or position)
/// to a span extractor, or answer spans to a classifier. The model is left untrained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadMismatch {
    /// The model's head ([`TaskModel::head_name`]).
    pub head: &'static str,
    /// The gold given (`classes`, `tags`, `answer spans`).
    pub gold: &'static str,
}

impl std::fmt::Display for HeadMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a {} cannot be trained on gold {}: the task's kind and the model's head disagree",
            self.head, self.gold
        )
    }
}

impl std::error::Error for HeadMismatch {}

/// The classifier's dropout as a mask: on the pooled `[rows, H]` output of the sequence and
/// choice heads, or on the `[rows, seq, H]` hidden states of the token head.
#[derive(Debug, Clone)]
pub enum DropoutMask {
    /// `[rows, H]`, for the sequence and choice heads.
    Pooled(Tensor<2>),
    /// `[rows, seq, H]`, for the token head.
    Hidden(Tensor<3>),
}

/// Where the backbone came from.
pub struct Source {
    /// The model directory (weights, config, vocabulary and tokenizer).
    pub dir: PathBuf,
    /// The `pretrain` instance, for `init: pretrained` or `random`.
    pub pretrain_instance: Option<String>,
    /// A TensorFlow `init_from` imported into a temporary `dir` (kept while this lives).
    pub imported: Option<pipeline_albert::tf::ModelDir>,
    /// How far the backbone was pretrained: `{step, tokens_seen}` of the `pretrain` dep at the
    /// weights used (0 for `init: random`), for the accuracy-versus-pretraining curve.
    pub pretraining: Option<PretrainingPoint>,
}

impl Source {
    /// The directory the params point at: the model dep's artifact (the dep named `pretrain`,
    /// or the stage's only dep whatever its name), or `init_from`.
    pub fn of(ctx: &StageContext, p: &TrainParams) -> anyhow::Result<Source> {
        match &p.init {
            Init::Checkpoint(dir) => {
                // A TensorFlow checkpoint (with albert_config.json and vocab.txt beside it).
                let imported = pipeline_albert::tf::ModelDir::open(dir)
                    .with_context(|| format!("param `init_from`: {}", dir.display()))?;
                Ok(Source {
                    dir: imported.path().to_path_buf(),
                    pretrain_instance: None,
                    imported: imported.imported.is_some().then_some(imported),
                    pretraining: None,
                })
            }
            Init::Pretrained | Init::Random => {
                let only = (ctx.deps.len() == 1).then(|| &ctx.deps[0]);
                let dep = ctx.dep("pretrain").or(only).with_context(|| {
                    format!(
                        "init: {} needs a `pretrain` dep (deps: [pretrain], or one dep of kind \
                         pretrain) for its weights, architecture and vocabulary; or set \
                         init_from: DIR (this stage has {} deps)",
                        p.init.name(),
                        ctx.deps.len()
                    )
                })?;
                let (dir, pretraining) = match (&p.init, p.pretrain_step) {
                    (Init::Random, _) => (
                        dep.dir.clone(),
                        PretrainingPoint {
                            step: Some(0),
                            tokens_seen: Some(0),
                        },
                    ),
                    (_, None) => (dep.dir.clone(), final_point(&dep.dir)),
                    (_, Some(step)) => saved_step(&dep.dir, &dep.instance, step)?,
                };
                Ok(Source {
                    dir,
                    pretrain_instance: Some(dep.instance.clone()),
                    imported: None,
                    pretraining: Some(pretraining),
                })
            }
        }
    }
}

/// The `{step, tokens_seen}` of a pretrain artifact's final model, from its metrics.json (read
/// bounded; an unreadable record is "not known", as a missing one always was).
fn final_point(dir: &Path) -> PretrainingPoint {
    pipeline_metrics::read_record::<PretrainRecord>(&dir.join(pipeline_metrics::METRICS))
        .map(|r| r.final_point())
        .unwrap_or_default()
}

/// The directory and `{step, tokens_seen}` of the model the pretrain artifact `dir` saved at
/// `step` (its `save_steps`), or an error naming the steps it has.
fn saved_step(
    dir: &Path,
    instance: &str,
    step: u64,
) -> anyhow::Result<(PathBuf, PretrainingPoint)> {
    let snapshot = dir.join("steps").join(step.to_string());
    let about = snapshot.join(records::SNAPSHOT_FILE);
    match pipeline_metrics::read_record::<PretrainingPoint>(&about) {
        Ok(v) => Ok((snapshot, v)),
        // A record that is there but not one (too large, a FIFO, not JSON) says so; its error
        // names the file.
        Err(e) if !e.is_not_found() => Err(e.into()),
        Err(_) => {
            let mut saved: Vec<u64> = std::fs::read_dir(dir.join("steps"))
                .map(|d| {
                    d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            saved.sort_unstable();
            bail!(
                "param `pretrain_step: {step}`: {instance} saved no model at step {step} ({}); add \
                 {step} to its `save_steps` param, or pick one of those",
                if saved.is_empty() {
                    "it has no save_steps".to_string()
                } else {
                    format!(
                        "it saved steps {}",
                        saved
                            .iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            )
        }
    }
}

impl TaskModel {
    /// The backbone of `source` (its weights, or fresh ones for `init: random`) with a new
    /// head: `labels` classes, or a choice head when `choices` is set. Returns the config the
    /// model was built from (its dropout set from the params).
    pub fn build(
        source: &Source,
        p: &TrainParams,
        labels: usize,
        choices: bool,
        device: &Device,
    ) -> anyhow::Result<(AlbertConfig, TaskModel)> {
        let head = if choices {
            Head::Choice
        } else {
            Head::Classes(labels)
        };
        Self::with_head(source, p, head, device)
    }

    /// [`TaskModel::build`] for any head.
    pub fn with_head(
        source: &Source,
        p: &TrainParams,
        head: Head,
        device: &Device,
    ) -> anyhow::Result<(AlbertConfig, TaskModel)> {
        let (config, backbone) = match &p.init {
            Init::Random => {
                let c = with_dropout(&hf::read_config(&source.dir)?, p.hidden_dropout);
                let b = Albert::new(&c, device);
                (c, b)
            }
            _ => {
                let (c, b) = hf::load_backbone(&source.dir, device)
                    .with_context(|| format!("loading the backbone of {}", source.dir.display()))?;
                (c, b)
            }
        };
        let config = with_dropout(&config, p.hidden_dropout);
        let backbone = set_hidden_dropout(backbone, p.hidden_dropout);
        let model = match head {
            Head::Choice => TaskModel::Choice(AlbertForMultipleChoice::from_backbone(
                backbone, &config, p.dropout, device,
            )),
            Head::Classes(n) => TaskModel::Pair(AlbertForSequenceClassification::from_backbone(
                backbone, &config, n, p.dropout, device,
            )),
            Head::Tags(n) => TaskModel::Tags(AlbertForTokenClassification::from_backbone(
                backbone, &config, n, p.dropout, device,
            )),
            // transformers' AlbertForQuestionAnswering has no dropout before its head.
            Head::Span => TaskModel::Span(AlbertForQuestionAnswering::from_backbone(
                backbone, &config, device,
            )),
            Head::Score => TaskModel::Score(AlbertForSequenceClassification::from_backbone(
                backbone, &config, 1, p.dropout, device,
            )),
        };
        Ok((config, model.with_precision(p.precision)))
    }

    /// The model with its products in `precision`: the backbone's, and the head's, which
    /// follows the backbone it sits on (as `torch.autocast` runs every `nn.Linear` in bf16).
    pub fn with_precision(mut self, precision: MatmulPrecision) -> TaskModel {
        let albert = match &mut self {
            TaskModel::Pair(m) | TaskModel::Score(m) => &mut m.albert,
            TaskModel::Choice(m) => &mut m.albert,
            TaskModel::Tags(m) => &mut m.albert,
            TaskModel::Span(m) => &mut m.albert,
        };
        *albert = albert.clone().with_precision(precision);
        self
    }

    /// Whether it is a multiple-choice model, whose examples are several rows (one per choice)
    /// where the other heads' are one.
    pub fn is_choice(&self) -> bool {
        matches!(self, TaskModel::Choice(_))
    }

    /// The head it is, as the kinds name heads.
    pub fn head(&self) -> Head {
        match self {
            TaskModel::Pair(m) => Head::Classes(m.num_labels()),
            TaskModel::Choice(_) => Head::Choice,
            TaskModel::Tags(m) => Head::Tags(m.num_labels()),
            TaskModel::Span(_) => Head::Span,
            TaskModel::Score(_) => Head::Score,
        }
    }

    /// The head's name in errors: transformers' architecture.
    pub fn head_name(&self) -> &'static str {
        match self {
            TaskModel::Pair(_) => "AlbertForSequenceClassification",
            TaskModel::Choice(_) => "AlbertForMultipleChoice",
            TaskModel::Tags(_) => "AlbertForTokenClassification",
            TaskModel::Span(_) => "AlbertForQuestionAnswering",
            TaskModel::Score(_) => "AlbertForSequenceClassification regressor",
        }
    }

    /// The loss of `input` against `gold` (`choices` rows per example for a choice model),
    /// the classifier's dropout given as a mask, and how many predictions were right: the
    /// weighted cross-entropy of the logits (`[examples, classes or choices]`; for a token
    /// model every position a row), or for a span model transformers' mean of the start and
    /// end cross-entropies (right: rows whose start and end are both right), or for a
    /// regressor the mean squared error (right: none, a score is not right or wrong). Gold of
    /// another head's shape is a [`HeadMismatch`].
    pub fn loss(
        &self,
        input: &AlbertInput,
        choices: usize,
        mask: Option<DropoutMask>,
        gold: GoldTensors,
    ) -> Result<(Tensor<1>, Tensor<1>), HeadMismatch> {
        let pooled = |m: Option<DropoutMask>| match m {
            Some(DropoutMask::Pooled(t)) => Some(t),
            _ => None,
        };
        let (logits, ids, weights) = match (self, gold) {
            (TaskModel::Score(m), GoldTensors::Scores(gold)) => {
                let scores = m.forward_with_dropout_mask(input, pooled(mask));
                return Ok(mean_squared_error(scores, gold));
            }
            (TaskModel::Score(_), _) => return Err(self.mismatch("classes or answer spans")),
            (_, GoldTensors::Scores(_)) => return Err(self.mismatch("scores")),
            (TaskModel::Span(m), GoldTensors::Spans { start, end }) => {
                return Ok(AlbertForQuestionAnswering::loss(
                    &m.forward(input),
                    start,
                    end,
                ));
            }
            (TaskModel::Span(_), GoldTensors::Classes { .. }) => {
                return Err(self.mismatch("classes"));
            }
            (_, GoldTensors::Spans { .. }) => return Err(self.mismatch("answer spans")),
            (TaskModel::Pair(m), GoldTensors::Classes { ids, weights }) => (
                m.forward_with_dropout_mask(input, pooled(mask)),
                ids,
                weights,
            ),
            (TaskModel::Choice(m), GoldTensors::Classes { ids, weights }) => (
                m.forward_with_dropout_mask(input, choices, pooled(mask)),
                ids,
                weights,
            ),
            (TaskModel::Tags(m), GoldTensors::Classes { ids, weights }) => {
                let hidden = match mask {
                    Some(DropoutMask::Hidden(t)) => Some(t),
                    _ => None,
                };
                let logits = m.forward_with_dropout_mask(input, hidden);
                let [b, s, n] = logits.dims();
                (logits.reshape([b * s, n]), ids, weights)
            }
        };
        Ok(weighted_cross_entropy(logits, ids, weights))
    }

    /// This model given gold `gold`.
    pub fn mismatch(&self, gold: &'static str) -> HeadMismatch {
        HeadMismatch {
            head: self.head_name(),
            gold,
        }
    }

    /// A dropout mask for `rows` rows of `seq` positions and width `hidden`, scaled by
    /// `1/(1-p)`; `None` without dropout. Drawn from `device`'s random stream (call it in a
    /// fixed order).
    pub fn dropout_mask(
        &self,
        rows: usize,
        seq: usize,
        hidden: usize,
        device: &Device,
    ) -> Option<DropoutMask> {
        let p = match self {
            TaskModel::Pair(m) | TaskModel::Score(m) => m.dropout_prob(),
            TaskModel::Choice(m) => m.dropout_prob(),
            TaskModel::Tags(m) => m.dropout_prob(),
            TaskModel::Span(_) => 0.0,
        };
        if p <= 0.0 {
            return None;
        }
        let keep = Distribution::Bernoulli(1.0 - p);
        Some(match self {
            TaskModel::Tags(_) => DropoutMask::Hidden(
                Tensor::<3>::random([rows, seq, hidden], keep, device).div_scalar(1.0 - p),
            ),
            _ => DropoutMask::Pooled(
                Tensor::<2>::random([rows, hidden], keep, device).div_scalar(1.0 - p),
            ),
        })
    }

    /// The model directory in the Hugging Face layout.
    pub fn save(&self, dir: &Path, config: &AlbertConfig, labels: &[String]) -> anyhow::Result<()> {
        match self {
            TaskModel::Pair(m) => hf::save_classifier(dir, config, m, labels)?,
            TaskModel::Choice(m) => hf::save_multiple_choice(dir, config, m)?,
            TaskModel::Tags(m) => hf::save_token_classifier(dir, config, m, labels)?,
            // Its two outputs (start, end) are transformers' `num_labels`: no label names.
            TaskModel::Span(m) => hf::save_question_answering(dir, config, m)?,
            TaskModel::Score(m) => {
                hf::save_classifier(dir, config, m, &[SCORE_LABEL.to_string()])?;
                mark_regression(dir)?;
            }
        }
        Ok(())
    }
}

/// The one output's name in a regressor's `id2label` (what transformers writes for one label
/// is `LABEL_0`; a name says what the output is).
pub const SCORE_LABEL: &str = "score";

/// The mean squared error of `scores` (`[rows, 1]`) against `gold` (`[rows]`), and no right
/// predictions (a zero, detached, so that the step's shape is every head's).
fn mean_squared_error(scores: Tensor<2>, gold: Tensor<1>) -> (Tensor<1>, Tensor<1>) {
    let [n, _] = scores.dims();
    let diff = scores.reshape([n]) - gold;
    let loss = (diff.clone() * diff).mean();
    let right = loss.clone().detach().mul_scalar(0.0);
    (loss, right)
}

/// Adds transformers' `problem_type: regression` to the config.json just exported, so that
/// transformers' `AlbertForSequenceClassification` trains and reads it as a regressor.
fn mark_regression(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join("config.json");
    let mut config: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    config.insert("problem_type".into(), "regression".into());
    std::fs::write(&path, serde_json::to_string_pretty(&config)? + "\n")?;
    Ok(())
}

/// Checks that the tokenizer's vocabulary (`vocab` tokens, read from `dir`) is as large as
/// the model's `vocab_size`: a mismatch would index embeddings that do not exist.
pub fn check_vocab(dir: &Path, vocab: usize, config: &AlbertConfig) -> anyhow::Result<()> {
    if vocab != config.vocab_size {
        bail!(
            "{}: vocab.txt has {vocab} tokens but the model's vocab_size is {}",
            dir.display(),
            config.vocab_size
        );
    }
    Ok(())
}

fn with_dropout(c: &AlbertConfig, hidden: f64) -> AlbertConfig {
    let mut c = c.clone();
    c.hidden_dropout_prob = hidden;
    c
}

/// A loaded backbone keeps the dropout of its config file; fine-tuning sets its own.
fn set_hidden_dropout(mut albert: Albert, p: f64) -> Albert {
    albert.embeddings.dropout = DropoutConfig::new(p).init();
    for a in &mut albert.encoder.attentions {
        a.output_dropout = DropoutConfig::new(p).init();
    }
    for f in &mut albert.encoder.ffns {
        f.dropout = DropoutConfig::new(p).init();
    }
    albert
}
