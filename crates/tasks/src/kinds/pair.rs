//! Sentence-pair classification (LCQMC, AFQMC, XNLI, …; `pair`), the whole kind in one
//! module: its TSV format (columns, labels and label aliases), its example and the reader of
//! its files (on the TSV reading it shares with single texts, [`crate::read`]'s `tsv`), and how
//! it is fine-tuned and served: `[CLS] a [SEP] b [SEP]`, `AlbertForSequenceClassification`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Head, InputSpec, Kind, Limits, Run, Scores, classify};
use crate::TaskKind;
use crate::error::TaskError;
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction, PredictionShape};
use crate::params::check_keys;
use crate::protocol::SplitExample;
use crate::read::tsv::read_classes;
use crate::read::{FileReport, open};
use crate::task::Column;
use crate::task::classify::{ClassView, accepted, apply_columns, apply_labels, label_id};

/// The keys a pair task map may hold.
const PAIR_KEYS: &[&str] = &[
    "name",
    "text_a",
    "text_b",
    "label",
    "header",
    "columns",
    "labels",
    "label_map",
];

/// A tab-separated sentence-pair file format with its labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairFormat {
    /// The built-in it came from (`lcqmc`, `xnli`, …) or `pair`.
    pub name: String,
    /// The first text's column.
    pub text_a: Column,
    /// The second text's column.
    pub text_b: Column,
    /// The raw label's column.
    pub label: Column,
    /// Whether the first line is a header row (skipped; names columns given by name).
    pub header: bool,
    /// The exact number of columns a row must have; `None`: the header's count when there is
    /// a header, else enough for the highest index.
    pub columns: Option<usize>,
    /// Class labels; a label's position is its class id.
    pub labels: Vec<String>,
    /// Other raw spellings of labels: raw string → one of `labels`.
    pub label_map: BTreeMap<String, String>,
}

impl PairFormat {
    pub(crate) fn view(&self) -> ClassView<'_> {
        ClassView {
            name: &self.name,
            columns: vec![
                ("text_a", &self.text_a),
                ("text_b", &self.text_b),
                ("label", &self.label),
            ],
            header: self.header,
            column_count: self.columns,
            labels: &self.labels,
            label_map: &self.label_map,
        }
    }

    pub(crate) fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, PAIR_KEYS, at)?;
        let keys = ["text_a", "text_b", "label"];
        let slots = [&mut self.text_a, &mut self.text_b, &mut self.label];
        apply_columns(map, at, &keys, slots, &mut self.header)?;
        apply_labels(
            map,
            at,
            &mut self.columns,
            &mut self.labels,
            &mut self.label_map,
        )
    }

    pub(crate) fn validate(&self, at: &str) -> Result<(), TaskError> {
        self.view().validate(at)
    }

    /// The raw strings (labels and `label_map` keys) this format accepts, with the label each
    /// one means.
    pub fn accepted_labels(&self) -> impl Iterator<Item = (&str, &str)> {
        accepted(&self.labels, &self.label_map)
    }

    /// The class id of a raw label in this format's own label order.
    pub fn label_id(&self, raw: &str) -> Option<usize> {
        label_id(&self.labels, &self.label_map, raw)
    }
}

/// A sentence-pair example.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PairExample {
    /// The first text (the premise in NLI), trimmed, never empty.
    pub text_a: String,
    /// The second text (the hypothesis in NLI), trimmed, never empty.
    pub text_b: String,
    /// The class id: the label's position in the task's labels.
    pub label: usize,
    /// Which file it came from: 0 from a reader, an index into [`crate::Protocol::files`] in a
    /// protocol.
    pub file: usize,
    /// 1-based line number in that file.
    pub line: usize,
}

/// A sentence-pair file's examples and report.
#[derive(Debug, Clone)]
pub struct PairFile {
    /// The valid rows, in file order.
    pub examples: Vec<PairExample>,
    /// What reading found: header, rows, bad rows, examples per class.
    pub report: FileReport,
}

/// Reads a sentence-pair TSV file. `name` is the path as the params give it (used in the
/// report and messages), `labels` the task's class labels (the format's labels must be among
/// them; rows get their class ids).
pub fn read_pair_file(
    path: &Path,
    name: &str,
    format: &PairFormat,
    labels: &[String],
) -> Result<PairFile, TaskError> {
    read_pairs(open(path, name)?, name, format, labels)
}

/// [`read_pair_file`] from any reader.
pub fn read_pairs(
    input: impl BufRead,
    name: &str,
    format: &PairFormat,
    labels: &[String],
) -> Result<PairFile, TaskError> {
    let (rows, report) = read_classes(input, name, &format.view(), labels)?;
    let examples = rows
        .into_iter()
        .map(|(mut texts, label, line)| {
            let text_b = texts.pop().unwrap_or_default();
            let text_a = texts.pop().unwrap_or_default();
            PairExample {
                text_a,
                text_b,
                label,
                file: 0,
                line,
            }
        })
        .collect();
    Ok(PairFile { examples, report })
}

impl SplitExample for PairExample {
    fn push_labels(&self, out: &mut Vec<usize>) {
        out.push(self.label);
    }

    fn stratum(&self) -> usize {
        self.label
    }

    fn texts_key(&self) -> String {
        format!("{}\t{}", self.text_a, self.text_b)
    }

    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>> {
        Some(
            examples
                .iter()
                .map(|e| vec![e.text_a.clone(), e.text_b.clone()])
                .collect(),
        )
    }
}

/// The pair kind.
pub struct Pairs;

impl Kind for Pairs {
    const KIND: TaskKind = TaskKind::Pair;
    type Example = PairExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, labels: &[String]) -> Head {
        Head::Classes(labels.len())
    }

    fn encode(&self, name: &str, examples: &[PairExample], encoder: &Encoder) -> EncodedSplit {
        EncodedSplit::classes(
            name,
            examples
                .iter()
                .map(|e| vec![encoder.encode(&e.text_a, &e.text_b)])
                .collect(),
            examples.iter().map(|e| e.label).collect(),
        )
    }

    fn decode(&self, _features: &(), outputs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        classify::decode(outputs)
    }

    fn score(
        &self,
        split: &EncodedSplit,
        _features: &(),
        predictions: &[Vec<f32>],
        labels: &[String],
    ) -> anyhow::Result<Scores> {
        classify::score(split, predictions, labels)
    }

    fn prediction_header(&self, labels: &[String]) -> String {
        classify::header(labels)
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &[PairExample],
        predictions: &[Vec<f32>],
        labels: &[String],
        out: &mut String,
    ) {
        let rows = examples
            .iter()
            .map(|e| (e.line, e.text_a.clone(), e.text_b.clone(), e.label));
        classify::rows(name, rows, predictions, labels, out);
    }

    fn input(&self) -> InputSpec {
        pair_input("a sentence-pair classifier", PredictionShape::Class)
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        row_cost(input, limits)
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        classify::predict(inputs, run)
    }

    /// Any sequence classifier no other kind recognises: every one was a pair classifier
    /// before single texts, and a model without `finetuning_task` still is.
    fn recognises(&self, _architecture: &str, _named: Option<TaskKind>) -> bool {
        true
    }
}

/// What a sentence-pair model (the pair regressor too) takes, `text_a` and `text_b`; `model`
/// is what it is, giving `predicts`.
pub fn pair_input(model: &'static str, predicts: PredictionShape) -> InputSpec {
    InputSpec {
        fields: &["text_a", "text_b"],
        usage: "`text_a` and `text_b`",
        model,
        predicts,
    }
}

/// The tokens of a pair's one row, which must fit `max_seq_length`.
pub fn row_cost(input: &Input, limits: &Limits) -> Result<usize, InputError> {
    let n = limits.tokens(&input.text_a) + limits.tokens(&input.text_b) + 3;
    limits.row("text_a + text_b", n, " with [CLS] and two [SEP]s")
}
