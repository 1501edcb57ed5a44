//! Single-text classification (ChnSentiCorp, SMP2020-EWECT; `single`), the whole kind in one
//! module: its TSV format, its example and the reader of its files (on the TSV reading it
//! shares with sentence pairs), and how it is fine-tuned and served: `[CLS] text [SEP]` with
//! token types 0, `AlbertForSequenceClassification` as for pairs. `predictions.tsv` keeps the
//! pair columns, `text_b` empty, so one reader serves both.

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

/// The keys a single-text task map may hold.
const SINGLE_KEYS: &[&str] = &[
    "name",
    "text",
    "label",
    "header",
    "columns",
    "labels",
    "label_map",
];

/// A tab-separated single-text file format with its labels (ChnSentiCorp, SMP2020-EWECT, or
/// any `label \t text` file): the same fields as [`crate::task::PairFormat`] with one text column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SingleFormat {
    /// The built-in it came from (`chnsenticorp`, `smp2020_ewect`) or `single`.
    pub name: String,
    /// The text's column.
    pub text: Column,
    /// The raw label's column.
    pub label: Column,
    /// As [`crate::PairFormat::header`].
    pub header: bool,
    /// As [`crate::PairFormat::columns`].
    pub columns: Option<usize>,
    /// As [`crate::PairFormat::labels`].
    pub labels: Vec<String>,
    /// As [`crate::PairFormat::label_map`].
    pub label_map: BTreeMap<String, String>,
}

impl SingleFormat {
    pub(crate) fn view(&self) -> ClassView<'_> {
        ClassView {
            name: &self.name,
            columns: vec![("text", &self.text), ("label", &self.label)],
            header: self.header,
            column_count: self.columns,
            labels: &self.labels,
            label_map: &self.label_map,
        }
    }

    pub(crate) fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, SINGLE_KEYS, at)?;
        let keys = ["text", "label"];
        let slots = [&mut self.text, &mut self.label];
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

    /// As [`crate::PairFormat::accepted_labels`].
    pub fn accepted_labels(&self) -> impl Iterator<Item = (&str, &str)> {
        accepted(&self.labels, &self.label_map)
    }

    /// As [`crate::PairFormat::label_id`].
    pub fn label_id(&self, raw: &str) -> Option<usize> {
        label_id(&self.labels, &self.label_map, raw)
    }
}

/// A single-text example.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SingleExample {
    /// The text (a review, a post), trimmed, never empty.
    pub text: String,
    /// The class id.
    pub label: usize,
    /// As in [`crate::PairExample::file`].
    pub file: usize,
    /// 1-based line number in that file.
    pub line: usize,
}

/// A single-text file's examples and report.
#[derive(Debug, Clone)]
pub struct SingleFile {
    /// The valid rows, in file order.
    pub examples: Vec<SingleExample>,
    /// What reading found: header, rows, bad rows, examples per class.
    pub report: FileReport,
}

/// Reads a single-text TSV file (as [`crate::read::read_pair_file`]).
pub fn read_single_file(
    path: &Path,
    name: &str,
    format: &SingleFormat,
    labels: &[String],
) -> Result<SingleFile, TaskError> {
    read_singles(open(path, name)?, name, format, labels)
}

/// [`read_single_file`] from any reader.
pub fn read_singles(
    input: impl BufRead,
    name: &str,
    format: &SingleFormat,
    labels: &[String],
) -> Result<SingleFile, TaskError> {
    let (rows, report) = read_classes(input, name, &format.view(), labels)?;
    let examples = rows
        .into_iter()
        .map(|(mut texts, label, line)| SingleExample {
            text: texts.pop().unwrap_or_default(),
            label,
            file: 0,
            line,
        })
        .collect();
    Ok(SingleFile { examples, report })
}

impl SplitExample for SingleExample {
    fn push_labels(&self, out: &mut Vec<usize>) {
        out.push(self.label);
    }

    fn stratum(&self) -> usize {
        self.label
    }

    fn texts_key(&self) -> String {
        self.text.clone()
    }

    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>> {
        Some(examples.iter().map(|e| vec![e.text.clone()]).collect())
    }
}

/// The single-text kind.
pub struct Singles;

impl Kind for Singles {
    const KIND: TaskKind = TaskKind::Single;
    type Example = SingleExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, labels: &[String]) -> Head {
        Head::Classes(labels.len())
    }

    fn encode(&self, name: &str, examples: &[SingleExample], encoder: &Encoder) -> EncodedSplit {
        EncodedSplit::classes(
            name,
            examples
                .iter()
                .map(|e| vec![encoder.encode_single(&e.text)])
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
        examples: &[SingleExample],
        predictions: &[Vec<f32>],
        labels: &[String],
        out: &mut String,
    ) {
        let rows = examples
            .iter()
            .map(|e| (e.line, e.text.clone(), String::new(), e.label));
        classify::rows(name, rows, predictions, labels, out);
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["text"],
            usage: "`text`",
            model: "a single-text classifier",
            predicts: PredictionShape::Class,
        }
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        let n = limits.tokens(&input.text) + 2;
        limits.row("text", n, " with [CLS] and [SEP]")
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        classify::predict(inputs, run)
    }
}
