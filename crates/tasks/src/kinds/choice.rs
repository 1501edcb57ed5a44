//! Multiple choice (`choice`), the whole kind in one module: its JSONL format, its example and
//! the reader of its files, and how it is fine-tuned and served.
//!
//! - **Format and reading**: one JSON object a line, the line format in the module docs of
//!   [`crate::read`]; `num_choices` may fix N, which must be at least 2.
//! - **Fine-tuning**: one `[CLS] prompt [SEP] choice [SEP]` row per choice,
//!   `AlbertForMultipleChoice` scoring them against each other. In `predictions.tsv` the
//!   choices are `text_b`, joined by ` | `.

use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::reading_choice::{choices_cost, choose, encode_questions};
use super::{Head, InputSpec, Kind, Limits, Run, Scores, classify};
use crate::TaskKind;
use crate::error::TaskError;
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction, PredictionShape};
use crate::params;
use crate::protocol::SplitExample;
use crate::read::{BadReason, FileReport, Lines, Parsed, collect, open};

/// The keys a `choice` task map may hold.
const CHOICE_KEYS: &[&str] = &["name", "num_choices"];

/// A multiple-choice JSONL format (see [`crate::read`] for the line format).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChoiceFormat {
    /// `choice`.
    pub name: String,
    /// The number of choices every line must have; `None`: whatever the first line has.
    pub num_choices: Option<usize>,
}

impl ChoiceFormat {
    /// The overrides of a task map (`{name: choice, num_choices: 4}`).
    pub(crate) fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        params::check_keys(map, CHOICE_KEYS, at)?;
        if let Some(v) = map.get("num_choices") {
            self.num_choices = Some(params::count(v, &format!("{at}.num_choices"))?);
        }
        Ok(())
    }

    /// A fixed N is at least 2.
    pub(crate) fn validate(&self, at: &str) -> Result<(), TaskError> {
        if let Some(n) = self.num_choices
            && n < 2
        {
            return Err(TaskError::param(
                format!("{at}.num_choices"),
                format!("{n}: a choice task needs at least 2 choices"),
            ));
        }
        Ok(())
    }
}

/// A multiple-choice example.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChoiceExample {
    /// The question or context, trimmed, never empty.
    pub prompt: String,
    /// The candidate answers, trimmed, none empty: at least 2, as many on every line of a file.
    pub choices: Vec<String>,
    /// Index of the correct choice; also the class id.
    pub answer: usize,
    /// As in [`crate::PairExample::file`].
    pub file: usize,
    /// 1-based line number in that file.
    pub line: usize,
}

/// A multiple-choice file's examples and report.
#[derive(Debug, Clone)]
pub struct ChoiceFile {
    /// The valid lines, in file order.
    pub examples: Vec<ChoiceExample>,
    /// What reading found: rows, bad lines, examples per answer position.
    pub report: FileReport,
    /// N, the number of choices on every line.
    pub num_choices: usize,
}

/// Reads a multiple-choice JSONL file (format in the module docs). `name` is the path as the
/// params give it.
pub fn read_choice_file(
    path: &Path,
    name: &str,
    format: &ChoiceFormat,
) -> Result<ChoiceFile, TaskError> {
    read_choices(open(path, name)?, name, format)
}

/// The shape check of one JSONL line: prompt, choices and the raw answer.
fn parse_choice(text: &str) -> Result<(String, Vec<String>, i64), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(obj) = v else {
        return Err("not a JSON object".into());
    };
    let prompt = match obj.get("prompt") {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(other) => return Err(format!("`prompt` is not a string: {other}")),
        None => return Err("no `prompt`".into()),
    };
    let choices = match obj.get("choices") {
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Value::String(s) => Ok(s.trim().to_string()),
                other => Err(format!("`choices[{i}]` is not a string: {other}")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => return Err(format!("`choices` is not a list: {other}")),
        None => return Err("no `choices`".into()),
    };
    let answer = match obj.get("answer") {
        Some(v @ Value::Number(_)) => v
            .as_i64()
            .ok_or_else(|| format!("`answer` is not an integer: {v}"))?,
        Some(other) => return Err(format!("`answer` is not an integer: {other}")),
        None => return Err("no `answer`".into()),
    };
    Ok((prompt, choices, answer))
}

/// [`read_choice_file`] from any reader.
pub fn read_choices(
    input: impl BufRead,
    name: &str,
    format: &ChoiceFormat,
) -> Result<ChoiceFile, TaskError> {
    let mut report = FileReport::new(name, &format.name, 0);
    let mut lines = Lines::new(input, name);
    // N and where it was fixed: by the task, or by the first line that parsed.
    let mut n: Option<(usize, String)> = format
        .num_choices
        .map(|n| (n, "the task (num_choices)".to_string()));

    let examples = collect(&mut lines, &mut report, |line, _, text| {
        let (prompt, choices, answer) = match parse_choice(text) {
            Ok(x) => x,
            Err(detail) => return Ok(Parsed::Bad(BadReason::InvalidJson, detail)),
        };
        if choices.len() < 2 {
            let detail = format!("{} choice(s); at least 2 are needed", choices.len());
            return Ok(Parsed::Bad(BadReason::TooFewChoices, detail));
        }
        match &n {
            Some((expected, from)) if *expected != choices.len() => {
                return Err(TaskError::ChoiceCount {
                    path: name.to_string(),
                    line,
                    found: choices.len(),
                    expected: *expected,
                    expected_from: from.clone(),
                });
            }
            Some(_) => {}
            None => n = Some((choices.len(), format!("{name}:{line}"))),
        }
        if prompt.is_empty() {
            return Ok(Parsed::Bad(
                BadReason::EmptyText,
                "the prompt is empty".into(),
            ));
        }
        if let Some(i) = choices.iter().position(String::is_empty) {
            return Ok(Parsed::Bad(
                BadReason::EmptyText,
                format!("choice {i} is empty"),
            ));
        }
        let Some(answer) = usize::try_from(answer).ok().filter(|a| *a < choices.len()) else {
            let detail = format!(
                "answer {answer} is not a choice index 0..{}",
                choices.len() - 1
            );
            return Ok(Parsed::Bad(BadReason::BadAnswer, detail));
        };
        Ok(Parsed::Example(ChoiceExample {
            prompt,
            choices,
            answer,
            file: 0,
            line,
        }))
    })?;
    let Some((num_choices, _)) = n.filter(|_| !examples.is_empty()) else {
        return Err(report.no_examples());
    };
    report.label_counts = vec![0; num_choices];
    for e in &examples {
        report.label_counts[e.answer] += 1;
    }
    Ok(ChoiceFile {
        examples,
        report,
        num_choices,
    })
}

impl SplitExample for ChoiceExample {
    fn push_labels(&self, out: &mut Vec<usize>) {
        out.push(self.answer);
    }

    fn stratum(&self) -> usize {
        self.answer
    }

    fn texts_key(&self) -> String {
        format!("{}\t{}", self.prompt, self.choices.join("\t"))
    }

    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>> {
        Some(
            examples
                .iter()
                .map(|e| {
                    std::iter::once(e.prompt.clone())
                        .chain(e.choices.iter().cloned())
                        .collect()
                })
                .collect(),
        )
    }
}

/// The multiple-choice kind.
pub struct Choices;

impl Kind for Choices {
    const KIND: TaskKind = TaskKind::Choice;
    type Example = ChoiceExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, _labels: &[String]) -> Head {
        Head::Choice
    }

    fn encode(&self, name: &str, examples: &[ChoiceExample], encoder: &Encoder) -> EncodedSplit {
        EncodedSplit::classes(
            name,
            examples
                .iter()
                .map(|e| {
                    e.choices
                        .iter()
                        .map(|c| encoder.encode(&e.prompt, c))
                        .collect()
                })
                .collect(),
            examples.iter().map(|e| e.answer).collect(),
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
        examples: &[ChoiceExample],
        predictions: &[Vec<f32>],
        labels: &[String],
        out: &mut String,
    ) {
        let rows = examples
            .iter()
            .map(|e| (e.line, e.prompt.clone(), e.choices.join(" | "), e.answer));
        classify::rows(name, rows, predictions, labels, out);
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["question", "choices"],
            usage: "`question` and `choices` (2 to 4)",
            model: "a multiple-choice model",
            predicts: PredictionShape::Choice,
        }
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        choices_cost(input, limits)
    }

    /// Decoded as a C3 model's questions are, but with `[CLS] prompt [SEP] choice [SEP]` rows
    /// of the real choices only, as a `choice` model was trained.
    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        choose(inputs, run, |questions, encoder| {
            let mut split = encode_questions("predict", questions, encoder);
            split.rows = questions
                .iter()
                .map(|q| {
                    let real = &q.choices[..q.real_choices];
                    real.iter()
                        .map(|c| encoder.encode(&q.question, c))
                        .collect()
                })
                .collect();
            split
        })
    }

    fn recognises(&self, architecture: &str, _named: Option<TaskKind>) -> bool {
        architecture == "AlbertForMultipleChoice"
    }
}
