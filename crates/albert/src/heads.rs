//! The fine-tuning heads on the ALBERT backbone, each transformers' class of the same name (so
//! that [`crate::hf`] reads and writes them in its layout): sequence classification and multiple
//! choice on the pooled `[CLS]`, token classification and question answering (span extraction)
//! on every position of the last hidden state.
//!
//! transformers builds the two per-position heads on an `AlbertModel` without its pooler; ours
//! keep [`Albert`]'s pooler (one `[H, H]` linear, unused by their forward), and [`crate::hf`]
//! neither requires it when loading them nor writes it when saving them.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::{Device, Int, Tensor};

use crate::config::AlbertConfig;
use crate::model::{Albert, AlbertInput, linear, weighted_cross_entropy};

/// ALBERT with a classifier on the pooled [CLS] (`AlbertForSequenceClassification`).
#[derive(Module, Debug)]
pub struct AlbertForSequenceClassification {
    /// The backbone.
    pub albert: Albert,
    /// Dropout on the pooled `[CLS]` before the classifier.
    pub dropout: Dropout,
    /// `[H, num_labels]`: pooled `[CLS]` → logits.
    pub classifier: Linear,
}

impl AlbertForSequenceClassification {
    /// A freshly initialised model of config `c` with `num_labels` classes (the backbone is
    /// drawn first, then the classifier, as transformers does).
    pub fn new(c: &AlbertConfig, num_labels: usize, dropout: f64, device: &Device) -> Self {
        Self::from_backbone(Albert::new(c, device), c, num_labels, dropout, device)
    }

    /// A classifier on top of an existing backbone (a pretrained one).
    pub fn from_backbone(
        albert: Albert,
        c: &AlbertConfig,
        num_labels: usize,
        dropout: f64,
        device: &Device,
    ) -> Self {
        AlbertForSequenceClassification {
            albert,
            dropout: DropoutConfig::new(dropout).init(),
            classifier: linear(c.hidden_size, num_labels, c, device),
        }
    }

    /// `[batch, num_labels]` logits.
    pub fn forward(&self, input: &AlbertInput) -> Tensor<2> {
        let pooled = self.albert.pooled(input);
        self.albert
            .linear_on(&self.classifier, self.dropout.forward(pooled))
    }

    /// Logits with the classifier's dropout given as a mask on the pooled output (`[batch, H]`,
    /// already scaled by `1/(1-p)`; `None`: no dropout). Data-parallel training draws the masks
    /// on one thread in a fixed order: workers drawing from the device's one random stream
    /// concurrently would make runs irreproducible.
    pub fn forward_with_dropout_mask(
        &self,
        input: &AlbertInput,
        mask: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let pooled = self.albert.pooled(input);
        self.albert
            .linear_on(&self.classifier, apply_mask(pooled, mask))
    }

    /// The dropout probability before the classifier.
    pub fn dropout_prob(&self) -> f64 {
        self.dropout.prob
    }

    /// The number of classes (the classifier's output width).
    pub fn num_labels(&self) -> usize {
        self.classifier.weight.dims()[1]
    }
}

/// ALBERT for multiple choice (`AlbertForMultipleChoice`): every (prompt, choice) pair is
/// encoded, a one-output classifier scores it, and the scores of one question are compared.
#[derive(Module, Debug)]
pub struct AlbertForMultipleChoice {
    /// The backbone.
    pub albert: Albert,
    /// Dropout on the pooled `[CLS]` of each (prompt, choice) pair.
    pub dropout: Dropout,
    /// `[H, 1]`: a pair's pooled `[CLS]` → its score.
    pub classifier: Linear,
}

impl AlbertForMultipleChoice {
    /// A freshly initialised model of config `c`.
    pub fn new(c: &AlbertConfig, dropout: f64, device: &Device) -> Self {
        Self::from_backbone(Albert::new(c, device), c, dropout, device)
    }

    /// A choice scorer on top of an existing backbone (a pretrained one).
    pub fn from_backbone(albert: Albert, c: &AlbertConfig, dropout: f64, device: &Device) -> Self {
        AlbertForMultipleChoice {
            albert,
            dropout: DropoutConfig::new(dropout).init(),
            classifier: linear(c.hidden_size, 1, c, device),
        }
    }

    /// `input` holds `questions × choices` rows, the choices of a question adjacent;
    /// returns `[questions, choices]` scores.
    pub fn forward(&self, input: &AlbertInput, choices: usize) -> Tensor<2> {
        let pooled = self.albert.pooled(input);
        let [rows, _] = pooled.dims();
        self.albert
            .linear_on(&self.classifier, self.dropout.forward(pooled))
            .reshape([rows / choices, choices])
    }

    /// [`Self::forward`] with the dropout given as a mask (see
    /// [`AlbertForSequenceClassification::forward_with_dropout_mask`]).
    pub fn forward_with_dropout_mask(
        &self,
        input: &AlbertInput,
        choices: usize,
        mask: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let pooled = self.albert.pooled(input);
        let [rows, _] = pooled.dims();
        self.albert
            .linear_on(&self.classifier, apply_mask(pooled, mask))
            .reshape([rows / choices, choices])
    }

    /// The dropout probability before the classifier.
    pub fn dropout_prob(&self) -> f64 {
        self.dropout.prob
    }
}

fn apply_mask<const D: usize>(x: Tensor<D>, mask: Option<Tensor<D>>) -> Tensor<D> {
    match mask {
        Some(m) => x * m,
        None => x,
    }
}

/// ALBERT for token classification (`AlbertForTokenClassification`, e.g. NER): dropout and a
/// linear classifier on every position of the last hidden state.
#[derive(Module, Debug)]
pub struct AlbertForTokenClassification {
    /// The backbone.
    pub albert: Albert,
    /// Dropout on the last hidden state before the classifier.
    pub dropout: Dropout,
    /// `[H, num_labels]`: each position's hidden state → its label logits.
    pub classifier: Linear,
}

impl AlbertForTokenClassification {
    /// A freshly initialised model of config `c` with `num_labels` tags.
    pub fn new(c: &AlbertConfig, num_labels: usize, dropout: f64, device: &Device) -> Self {
        Self::from_backbone(Albert::new(c, device), c, num_labels, dropout, device)
    }

    /// A tagger on top of an existing backbone (a pretrained one). transformers takes `dropout`
    /// from `classifier_dropout_prob` (0.1 by default), else `hidden_dropout_prob`.
    pub fn from_backbone(
        albert: Albert,
        c: &AlbertConfig,
        num_labels: usize,
        dropout: f64,
        device: &Device,
    ) -> Self {
        AlbertForTokenClassification {
            albert,
            dropout: DropoutConfig::new(dropout).init(),
            classifier: linear(c.hidden_size, num_labels, c, device),
        }
    }

    /// `[batch, seq, num_labels]` logits, at every position (padding included: the caller
    /// ignores those, as transformers' loss does through label −100).
    pub fn forward(&self, input: &AlbertInput) -> Tensor<3> {
        let hidden = self.albert.forward(input).last_hidden_state;
        self.albert
            .dense_on(&self.classifier, self.dropout.forward(hidden))
    }

    /// [`Self::forward`] with the dropout given as a mask on the hidden states (`[batch, seq,
    /// H]`, scaled by `1/(1-p)`; `None`: no dropout), for the reason
    /// [`AlbertForSequenceClassification::forward_with_dropout_mask`] gives.
    pub fn forward_with_dropout_mask(
        &self,
        input: &AlbertInput,
        mask: Option<Tensor<3>>,
    ) -> Tensor<3> {
        let hidden = self.albert.forward(input).last_hidden_state;
        self.albert
            .dense_on(&self.classifier, apply_mask(hidden, mask))
    }

    /// Mean cross-entropy over the positions whose label is ≥ 0 (transformers' −100 for
    /// padding, special tokens and the non-first pieces of a word), and the number of those
    /// positions predicted right. `logits` `[batch, seq, num_labels]`, `labels` `[batch, seq]`.
    pub fn loss(logits: Tensor<3>, labels: Tensor<2, Int>) -> (Tensor<1>, Tensor<1>) {
        let [b, s, n] = logits.dims();
        let labels = labels.reshape([b * s]);
        let weights = labels.clone().greater_equal_elem(0).float();
        // An ignored position still gathers a column; 0 is one that exists.
        let labels = labels.clamp_min(0);
        weighted_cross_entropy(logits.reshape([b * s, n]), labels, weights)
    }

    /// The dropout probability before the classifier.
    pub fn dropout_prob(&self) -> f64 {
        self.dropout.prob
    }

    /// The number of classes (the classifier's output width).
    pub fn num_labels(&self) -> usize {
        self.classifier.weight.dims()[1]
    }
}

/// Start and end scores of a span at every position, `[batch, seq]` each.
#[derive(Debug, Clone)]
pub struct SpanLogits {
    /// How likely each position is to start the answer.
    pub start_logits: Tensor<2>,
    /// How likely each position is to end the answer.
    pub end_logits: Tensor<2>,
}

/// ALBERT for extractive question answering (`AlbertForQuestionAnswering`, SQuAD and CMRC
/// 2018): a linear layer `qa_outputs` scores every position as the answer's start and end.
/// transformers applies no dropout in this head, and neither do we.
#[derive(Module, Debug)]
pub struct AlbertForQuestionAnswering {
    /// The backbone.
    pub albert: Albert,
    /// `[H, 2]`: each position's hidden state → its start and end logits.
    pub qa_outputs: Linear,
}

impl AlbertForQuestionAnswering {
    /// A freshly initialised model of config `c`.
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        Self::from_backbone(Albert::new(c, device), c, device)
    }

    /// A span scorer on top of an existing backbone (a pretrained one).
    pub fn from_backbone(albert: Albert, c: &AlbertConfig, device: &Device) -> Self {
        AlbertForQuestionAnswering {
            albert,
            qa_outputs: linear(c.hidden_size, 2, c, device),
        }
    }

    /// Start and end logits `[batch, seq]` (padding positions included; the decoder keeps to
    /// the context's tokens).
    pub fn forward(&self, input: &AlbertInput) -> SpanLogits {
        let hidden = self.albert.forward(input).last_hidden_state;
        let [b, s, _] = hidden.dims();
        let logits = self.albert.dense_on(&self.qa_outputs, hidden);
        SpanLogits {
            start_logits: logits.clone().narrow(2, 0, 1).reshape([b, s]),
            end_logits: logits.narrow(2, 1, 1).reshape([b, s]),
        }
    }

    /// transformers' loss: the mean of the start and the end cross-entropies over the batch;
    /// `start_positions`, `end_positions` `[batch]` token positions (`[CLS]`, 0, where the
    /// window does not hold the answer). Also the number of rows whose start and end are both
    /// predicted right (argmax each).
    pub fn loss(
        logits: &SpanLogits,
        start_positions: Tensor<1, Int>,
        end_positions: Tensor<1, Int>,
    ) -> (Tensor<1>, Tensor<1>) {
        let [b, _] = logits.start_logits.dims();
        let device = logits.start_logits.device();
        let start = logits.start_logits.clone();
        let end = logits.end_logits.clone();
        let both = start
            .clone()
            .argmax(1)
            .reshape([b])
            .equal(start_positions.clone())
            .int()
            * end
                .clone()
                .argmax(1)
                .reshape([b])
                .equal(end_positions.clone())
                .int();
        let ones = Tensor::ones([b], &device);
        let (start_loss, _) = weighted_cross_entropy(start, start_positions, ones.clone());
        let (end_loss, _) = weighted_cross_entropy(end, end_positions, ones);
        ((start_loss + end_loss).div_scalar(2.0), both.float().sum())
    }
}
