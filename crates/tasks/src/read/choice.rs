//! Multiple-choice JSONL files (the line format is in the module docs of [`crate::read`]).

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use super::{BadReason, ChoiceExample, FileReport, Lines, Parsed, collect, open};
use crate::error::TaskError;
use crate::protocol::SplitExample;
use crate::task::ChoiceFormat;

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
}
