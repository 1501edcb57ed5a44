//! Readers: one data file in, its valid examples and a report of what was skipped out.
//!
//! Real benchmark files are messy, so a bad row does not stop a reader: it is counted by
//! reason ([`BadReason`]), up to [`BadRows::MAX_SAMPLES`] of them are kept with file, line and
//! detail, and the row is skipped. The caller decides how many bad rows are acceptable with
//! [`FileReport::check_bad_fraction`] (the protocol does it with its `max_bad_fraction` param).
//! What is certainly a mistake in the params rather than in the data fails at once: a header
//! where none is expected, a missing header column, a file with no example at all.
//!
//! Lines are numbered from 1 as an editor shows them (the header is line 1). Blank lines are
//! skipped and counted apart; a UTF-8 byte-order mark and CRLF line ends are accepted. Texts are
//! trimmed of surrounding whitespace.
//!
//! # Sentence-pair files (TSV)
//!
//! Tab-separated, one example per line, columns as the [`PairFormat`] says (see
//! [`crate::task`]). A row is bad when it has the wrong number of columns (`column_count`), an
//! empty text (`empty_text`), a label the format does not know (`unknown_label`), or is not
//! valid UTF-8 (`invalid_utf8`).
//!
//! # Multiple-choice files (JSONL)
//!
//! One JSON object per line:
//!
//! ```json
//! {"prompt": "下雨天出门要带什么？", "choices": ["雨伞", "墨镜", "泳衣", "风筝"], "answer": 0}
//! ```
//!
//! - `prompt`: the question or context, a non-empty string;
//! - `choices`: the candidate answers, at least 2 non-empty strings, **the same number on every
//!   line of a file** (a line with another count is an error naming file and line, since it
//!   means the file is not what the task thinks it is, and a choice head scores a fixed N);
//! - `answer`: the 0-based index of the correct choice;
//! - any other keys (`id`, `source`, …) are ignored.
//!
//! A line is bad when it is not a JSON object with those three fields of those types
//! (`invalid_json`), has an empty prompt or choice (`empty_text`), an answer out of range
//! (`bad_answer`), fewer than 2 choices (`too_few_choices`), or is not valid UTF-8.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::error::{TaskError, format_samples};
use crate::task::{ChoiceFormat, Column, PairFormat};

/// A sentence-pair example.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PairExample {
    pub text_a: String,
    pub text_b: String,
    /// The class id: the label's position in the task's labels.
    pub label: usize,
    /// Which file it came from: 0 from a reader, an index into [`crate::Protocol::files`] in a
    /// protocol.
    pub file: usize,
    /// 1-based line number in that file.
    pub line: usize,
}

/// A multiple-choice example.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChoiceExample {
    pub prompt: String,
    pub choices: Vec<String>,
    /// Index of the correct choice; also the class id.
    pub answer: usize,
    /// As in [`PairExample::file`].
    pub file: usize,
    pub line: usize,
}

/// Why a row was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadReason {
    ColumnCount,
    UnknownLabel,
    EmptyText,
    InvalidUtf8,
    InvalidJson,
    BadAnswer,
    TooFewChoices,
}

impl BadReason {
    pub fn as_str(self) -> &'static str {
        match self {
            BadReason::ColumnCount => "column_count",
            BadReason::UnknownLabel => "unknown_label",
            BadReason::EmptyText => "empty_text",
            BadReason::InvalidUtf8 => "invalid_utf8",
            BadReason::InvalidJson => "invalid_json",
            BadReason::BadAnswer => "bad_answer",
            BadReason::TooFewChoices => "too_few_choices",
        }
    }
}

impl fmt::Display for BadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One skipped row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadRow {
    /// The file as the params name it.
    pub file: String,
    pub line: usize,
    pub reason: BadReason,
    /// What exactly: `unknown label "-" (known: contradiction, entailment, neutral, …)`.
    pub detail: String,
}

/// The bad rows of one file: counts by reason and the first few rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BadRows {
    pub total: usize,
    pub by_reason: BTreeMap<BadReason, usize>,
    /// The first [`BadRows::MAX_SAMPLES`] bad rows.
    pub samples: Vec<BadRow>,
}

impl BadRows {
    /// How many bad rows are kept with their details.
    pub const MAX_SAMPLES: usize = 20;

    pub fn record(&mut self, file: &str, line: usize, reason: BadReason, detail: String) {
        self.total += 1;
        *self.by_reason.entry(reason).or_default() += 1;
        if self.samples.len() < Self::MAX_SAMPLES {
            self.samples.push(BadRow {
                file: file.to_string(),
                line,
                reason,
                detail,
            });
        }
    }

    /// `unknown_label 12, empty_text 1`, or `none`.
    pub fn counts_line(&self) -> String {
        if self.total == 0 {
            return "none".into();
        }
        self.by_reason
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What reading one file found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileReport {
    /// The path as the params give it (not resolved), so metrics.json is the same everywhere.
    pub path: String,
    /// The format it was read with (`cmnli`, `pair`, `choice`, …).
    pub format: String,
    /// Whether a header line was skipped.
    pub header: bool,
    /// Data rows: every non-blank line but the header.
    pub rows: usize,
    /// Valid examples (`rows - bad.total`).
    pub examples: usize,
    pub blank_lines: usize,
    /// Examples per class id.
    pub label_counts: Vec<usize>,
    pub bad: BadRows,
    /// Set by a protocol for a train file: its examples dropped because a dev or evaluation
    /// example has the same texts.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_eval_overlap: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl FileReport {
    fn new(path: &str, format: &str, classes: usize) -> FileReport {
        FileReport {
            path: path.to_string(),
            format: format.to_string(),
            header: false,
            rows: 0,
            examples: 0,
            blank_lines: 0,
            label_counts: vec![0; classes],
            bad: BadRows::default(),
            dropped_eval_overlap: 0,
        }
    }

    /// The share of data rows that were bad (0 for a file without rows).
    pub fn bad_fraction(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.bad.total as f64 / self.rows as f64
        }
    }

    /// An error naming the file, the counts by reason and sample lines when more than
    /// `max_bad_fraction` of the rows are bad.
    pub fn check_bad_fraction(&self, max_bad_fraction: f64) -> Result<(), TaskError> {
        let fraction = self.bad_fraction();
        if fraction > max_bad_fraction {
            return Err(TaskError::TooManyBadRows {
                path: self.path.clone(),
                bad: self.bad.total,
                rows: self.rows,
                pct: 100.0 * fraction,
                max: max_bad_fraction,
                counts: self.bad.counts_line(),
                samples: self.bad.samples.clone(),
            });
        }
        Ok(())
    }

    fn no_examples(&self) -> TaskError {
        TaskError::NoExamples {
            path: self.path.clone(),
            rows: self.rows,
            bad: self.bad.total,
            samples: if self.bad.total == 0 {
                String::new()
            } else {
                format!(
                    ": {}; e.g. {}",
                    self.bad.counts_line(),
                    format_samples(&self.bad.samples)
                )
            },
        }
    }
}

/// A sentence-pair file's examples and report.
#[derive(Debug, Clone)]
pub struct PairFile {
    pub examples: Vec<PairExample>,
    pub report: FileReport,
}

/// A multiple-choice file's examples and report.
#[derive(Debug, Clone)]
pub struct ChoiceFile {
    pub examples: Vec<ChoiceExample>,
    pub report: FileReport,
    /// N, the number of choices on every line.
    pub num_choices: usize,
}

fn open(path: &Path, name: &str) -> Result<BufReader<File>, TaskError> {
    match File::open(path) {
        Ok(f) => Ok(BufReader::new(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(TaskError::NotFound {
            path: name.to_string(),
            resolved: path.to_path_buf(),
        }),
        Err(e) => Err(TaskError::Io {
            path: name.to_string(),
            source: e,
        }),
    }
}

/// Lines as raw bytes, numbered from 1, without the line end and (on line 1) the UTF-8 BOM.
/// Bytes rather than `String`s so that one invalid line is a bad row, not a failed file.
struct Lines<R> {
    input: R,
    name: String,
    line: usize,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    fn new(input: R, name: &str) -> Self {
        Lines {
            input,
            name: name.to_string(),
            line: 0,
            buf: Vec::new(),
        }
    }

    fn next_line(&mut self) -> Result<Option<(usize, &[u8])>, TaskError> {
        self.buf.clear();
        let n = self
            .input
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| TaskError::Io {
                path: self.name.clone(),
                source: e,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        let mut bytes: &[u8] = &self.buf;
        if self.line == 1 {
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        Ok(Some((self.line, bytes)))
    }
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8 at byte {}", e.valid_up_to()))
}

/// Header cells that say "this is a header row" when they appear in the label column.
const HEADER_WORDS: &[&str] = &[
    "label",
    "labels",
    "gold_label",
    "gold",
    "class",
    "target",
    "y",
    "category",
];

/// Whether a row that failed as data is a header: its label cell is a usual header word, or
/// every cell is an ASCII identifier (`text_a`, `sentence1`), which real Chinese text is not.
fn looks_like_header(cells: &[&str], label_cell: Option<&str>) -> bool {
    let ident = |c: &str| {
        let c = c.trim();
        let mut chars = c.chars();
        matches!(chars.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
            && chars.all(|ch| ch.is_ascii_alphanumeric() || "_-. ".contains(ch))
    };
    label_cell.is_some_and(|l| HEADER_WORDS.contains(&l.trim().to_ascii_lowercase().as_str()))
        || (cells.len() >= 2 && cells.iter().all(|c| ident(c)))
}

/// The raw label strings a format accepts mapped to the task's class ids, or an error naming a
/// format label the task lacks.
fn label_lookup(
    format: &PairFormat,
    labels: &[String],
) -> Result<HashMap<String, usize>, TaskError> {
    let mut lookup = HashMap::new();
    for (raw, label) in format.accepted_labels() {
        let id = labels.iter().position(|l| l == label).ok_or_else(|| {
            TaskError::param(
                "task",
                format!(
                    "format {} has label `{label}`, which the task's labels ({}) lack",
                    format.name,
                    labels.join(", ")
                ),
            )
        })?;
        lookup.insert(raw.to_string(), id);
    }
    Ok(lookup)
}

fn known_labels(format: &PairFormat) -> String {
    let mut s = format.labels.join(", ");
    if !format.label_map.is_empty() {
        let aliases: Vec<_> = format.label_map.keys().map(String::as_str).collect();
        s += &format!("; aliases {}", aliases.join(", "));
    }
    s
}

fn quote(s: &str) -> String {
    let short: String = s.chars().take(40).collect();
    if short.len() < s.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
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
    let lookup = label_lookup(format, labels)?;
    let mut report = FileReport::new(name, &format.name, labels.len());
    let mut examples = Vec::new();
    let mut lines = Lines::new(input, name);

    // Column positions: given, or looked up in the header.
    let mut idx = [0usize; 3];
    let cols = [&format.text_a, &format.text_b, &format.label];
    for (slot, col) in idx.iter_mut().zip(cols) {
        if let Column::Index(i) = col {
            *slot = *i;
        }
    }
    let mut expected_columns = format.columns;
    let mut first_data_row = true;
    if format.header {
        loop {
            let Some((line, bytes)) = lines.next_line()? else {
                return Err(report.no_examples());
            };
            if is_blank(bytes) {
                report.blank_lines += 1;
                continue;
            }
            report.header = true;
            let text = String::from_utf8_lossy(bytes);
            let cells: Vec<&str> = text.split('\t').map(str::trim).collect();
            // A data row where a header should be: its label column (or, when columns are
            // found by name, any column) holds a label.
            let by_name = cols.iter().any(|c| matches!(c, Column::Name(_)));
            let data_label = if by_name {
                cells.iter().find(|c| lookup.contains_key(**c))
            } else {
                cells.get(idx[2]).filter(|c| lookup.contains_key(**c))
            };
            if let Some(l) = data_label {
                return Err(TaskError::HeaderLooksLikeData {
                    path: name.to_string(),
                    line,
                    label: l.to_string(),
                    task: format.name.clone(),
                });
            }
            for (k, col) in cols.iter().enumerate() {
                if let Column::Name(n) = col {
                    idx[k] = cells.iter().position(|c| c == n).ok_or_else(|| {
                        TaskError::MissingColumn {
                            path: name.to_string(),
                            line,
                            column: n.clone(),
                            header: cells.join(", "),
                        }
                    })?;
                }
            }
            expected_columns = expected_columns.or(Some(cells.len()));
            break;
        }
    }
    let needed = idx.iter().max().map_or(0, |m| m + 1);

    while let Some((line, bytes)) = lines.next_line()? {
        if is_blank(bytes) {
            report.blank_lines += 1;
            continue;
        }
        report.rows += 1;
        let first = std::mem::replace(&mut first_data_row, false);
        let text = match utf8(bytes) {
            Ok(t) => t,
            Err(detail) => {
                report
                    .bad
                    .record(name, line, BadReason::InvalidUtf8, detail);
                continue;
            }
        };
        let cells: Vec<&str> = text.split('\t').collect();
        // Both: an exact count can be below `needed` when a header is shorter than an index.
        let count_ok = cells.len() >= needed && expected_columns.is_none_or(|n| cells.len() == n);
        let label_raw = cells.get(idx[2]).map(|l| l.trim());
        let label = label_raw.and_then(|l| lookup.get(l).copied());
        if first
            && !format.header
            && (!count_ok || label.is_none())
            && looks_like_header(&cells, label_raw)
        {
            return Err(TaskError::UnexpectedHeader {
                path: name.to_string(),
                line,
                row: quote(text),
                task: format.name.clone(),
            });
        }
        if !count_ok {
            let want = match expected_columns {
                Some(n) if n >= needed => format!("{n}"),
                _ => format!("at least {needed}"),
            };
            report.bad.record(
                name,
                line,
                BadReason::ColumnCount,
                format!("{} columns, expected {want}: {}", cells.len(), quote(text)),
            );
            continue;
        }
        let a = cells[idx[0]].trim();
        let b = cells[idx[1]].trim();
        if a.is_empty() || b.is_empty() {
            let which = if a.is_empty() { "text_a" } else { "text_b" };
            report.bad.record(
                name,
                line,
                BadReason::EmptyText,
                format!("{which} is empty"),
            );
            continue;
        }
        let Some(label) = label else {
            report.bad.record(
                name,
                line,
                BadReason::UnknownLabel,
                format!(
                    "unknown label {} (task {} knows {})",
                    quote(label_raw.unwrap_or("")),
                    format.name,
                    known_labels(format)
                ),
            );
            continue;
        };
        report.label_counts[label] += 1;
        examples.push(PairExample {
            text_a: a.to_string(),
            text_b: b.to_string(),
            label,
            file: 0,
            line,
        });
    }
    report.examples = examples.len();
    if examples.is_empty() {
        return Err(report.no_examples());
    }
    Ok(PairFile { examples, report })
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
    let mut examples = Vec::new();
    let mut lines = Lines::new(input, name);
    // N and where it was fixed: by the task, or by the first line that parsed.
    let mut n: Option<(usize, String)> = format
        .num_choices
        .map(|n| (n, "the task (num_choices)".to_string()));

    while let Some((line, bytes)) = lines.next_line()? {
        if is_blank(bytes) {
            report.blank_lines += 1;
            continue;
        }
        report.rows += 1;
        let text = match utf8(bytes) {
            Ok(t) => t,
            Err(detail) => {
                report
                    .bad
                    .record(name, line, BadReason::InvalidUtf8, detail);
                continue;
            }
        };
        let (prompt, choices, answer) = match parse_choice(text) {
            Ok(x) => x,
            Err(detail) => {
                report
                    .bad
                    .record(name, line, BadReason::InvalidJson, detail);
                continue;
            }
        };
        if choices.len() < 2 {
            report.bad.record(
                name,
                line,
                BadReason::TooFewChoices,
                format!("{} choice(s); at least 2 are needed", choices.len()),
            );
            continue;
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
            None => {
                n = Some((choices.len(), format!("{name}:{line}")));
                report.label_counts = vec![0; choices.len()];
            }
        }
        if prompt.is_empty() {
            report.bad.record(
                name,
                line,
                BadReason::EmptyText,
                "the prompt is empty".into(),
            );
            continue;
        }
        if let Some(i) = choices.iter().position(String::is_empty) {
            report.bad.record(
                name,
                line,
                BadReason::EmptyText,
                format!("choice {i} is empty"),
            );
            continue;
        }
        let Some(answer) = usize::try_from(answer).ok().filter(|a| *a < choices.len()) else {
            report.bad.record(
                name,
                line,
                BadReason::BadAnswer,
                format!(
                    "answer {answer} is not a choice index 0..{}",
                    choices.len() - 1
                ),
            );
            continue;
        };
        if report.label_counts.len() < choices.len() {
            report.label_counts.resize(choices.len(), 0);
        }
        report.label_counts[answer] += 1;
        examples.push(ChoiceExample {
            prompt,
            choices,
            answer,
            file: 0,
            line,
        });
    }
    report.examples = examples.len();
    let Some((num_choices, _)) = n.filter(|_| !examples.is_empty()) else {
        return Err(report.no_examples());
    };
    Ok(ChoiceFile {
        examples,
        report,
        num_choices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Task;
    use serde_json::json;

    fn fmt(name: &str) -> PairFormat {
        match Task::from_value(&json!(name), "task").unwrap() {
            Task::Pair(p) => p,
            Task::Choice(_) => panic!(),
        }
    }

    fn labels(p: &PairFormat) -> Vec<String> {
        p.labels.clone()
    }

    fn pairs(text: &[u8], format: &PairFormat) -> Result<PairFile, TaskError> {
        read_pairs(text, "x.tsv", format, &labels(format))
    }

    #[test]
    fn reads_lcqmc_rows_and_counts_bad_ones() {
        let f = fmt("lcqmc");
        let data = "今天天气怎么样\t今天天气如何\t1\n\n\
                    去哪里买票\t今天吃什么\t0\r\n\
                    只有两列\t1\n\
                    \t空的\t0\n\
                    甲\t乙\t2\n\
                    多\t了\t一\t列\n"
            .as_bytes()
            .iter()
            .copied()
            .chain(b"\xff\xfe\t\xe4\xb8\x80\t1\n".iter().copied())
            .collect::<Vec<u8>>();
        let r = pairs(&data, &f).unwrap();
        assert_eq!(r.examples.len(), 2);
        assert_eq!(r.examples[0].text_b, "今天天气如何");
        assert_eq!(r.examples[0].label, 1);
        assert_eq!(r.examples[1].label, 0);
        assert_eq!(
            r.examples[1].line, 3,
            "blank line 2 counts in the numbering"
        );
        let rep = &r.report;
        assert_eq!(
            (rep.rows, rep.examples, rep.blank_lines, rep.bad.total),
            (7, 2, 1, 5)
        );
        assert_eq!(rep.label_counts, [1, 1]);
        let by = |r| rep.bad.by_reason.get(&r).copied().unwrap_or(0);
        assert_eq!(by(BadReason::ColumnCount), 2);
        assert_eq!(by(BadReason::EmptyText), 1);
        assert_eq!(by(BadReason::UnknownLabel), 1);
        assert_eq!(by(BadReason::InvalidUtf8), 1);
        let lines: Vec<usize> = rep.bad.samples.iter().map(|b| b.line).collect();
        assert_eq!(lines, [4, 5, 6, 7, 8]);
        assert_eq!(rep.bad.samples[0].file, "x.tsv");
        assert!(
            rep.bad.samples[2].detail.contains("\"2\""),
            "{:?}",
            rep.bad.samples[2]
        );
        assert!(rep.bad.samples[2].detail.contains("knows 0, 1"));
        // 5 of 7 bad: over any sane threshold, with counts and samples in the message.
        let e = rep.check_bad_fraction(0.05).unwrap_err().to_string();
        assert!(e.starts_with("x.tsv: 5 of 7 rows are bad (71.43 %"), "{e}");
        assert!(e.contains("column_count 2") && e.contains("x.tsv:4"), "{e}");
        rep.check_bad_fraction(0.8).unwrap();
    }

    #[test]
    fn a_header_where_none_is_expected() {
        let e = pairs(
            b"text_a\ttext_b\tlabel\n\xe4\xb8\x80\t\xe4\xba\x8c\t1\n",
            &fmt("lcqmc"),
        )
        .unwrap_err();
        assert!(
            matches!(e, TaskError::UnexpectedHeader { line: 1, .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("looks like a header; set header: true"),
            "{e}"
        );
        // XNLI's header read as CMNLI.
        let e = pairs(
            "text_a\ttext_b\tlabel\n一\t二\tneutral\n".as_bytes(),
            &fmt("cmnli"),
        )
        .unwrap_err();
        assert!(matches!(e, TaskError::UnexpectedHeader { .. }));
        // A first row with a merely unknown label is a bad row, not a header.
        let r = pairs("一\t二\t-\n三\t四\tneutral\n".as_bytes(), &fmt("cmnli")).unwrap();
        assert_eq!(r.report.bad.total, 1);
    }

    #[test]
    fn header_rows_are_used_and_checked() {
        let x = fmt("xnli");
        // Columns found by name, in another order; `contradictory` is an alias.
        let r = pairs(
            "label\ttext_b\ttext_a\ncontradictory\t乙\t甲\nentailment\t丁\t丙\n".as_bytes(),
            &x,
        )
        .unwrap();
        assert_eq!(r.examples[0].text_a, "甲");
        assert_eq!(r.examples[0].label, 0);
        assert_eq!(r.examples[1].line, 3);
        assert!(r.report.header);
        // A header without the named column.
        let e = pairs(
            "sentence1\tsentence2\tlabel\n甲\t乙\tneutral\n".as_bytes(),
            &x,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no column `text_a`"), "{e}");
        // A header-less NLI file read as XNLI: its first line holds a label.
        let e = pairs("甲\t乙\tneutral\n丙\t丁\tentailment\n".as_bytes(), &x).unwrap_err();
        assert!(
            matches!(e, TaskError::HeaderLooksLikeData { line: 1, .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("set header: false, or give the file its own format")
        );
        // An index past the header's columns: every row is short, never a panic.
        let wide = match Task::from_value(
            &json!({"name": "pair", "header": true, "label": 5, "labels": ["a", "b"]}),
            "t",
        )
        .unwrap()
        {
            Task::Pair(p) => p,
            _ => panic!(),
        };
        let e = read_pairs(
            "h1\th2\th3\n甲\t乙\ta\n".as_bytes(),
            "w.tsv",
            &wide,
            &wide.labels,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("w.tsv:2 column_count: 3 columns, expected at least 6"),
            "{e}"
        );
        // header: true with index columns, but the first line is data.
        let lh = match Task::from_value(&json!({"name": "lcqmc", "header": true}), "t").unwrap() {
            Task::Pair(p) => p,
            _ => panic!(),
        };
        let e = pairs("甲\t乙\t1\n丙\t丁\t0\n".as_bytes(), &lh).unwrap_err();
        assert!(e.to_string().contains("set header: false"), "{e}");
    }

    #[test]
    fn empty_and_all_bad_files_have_no_examples() {
        let e = pairs(b"", &fmt("lcqmc")).unwrap_err();
        assert_eq!(e.to_string(), "x.tsv has no examples (0 data rows, 0 bad)");
        let e = pairs(b"\n\n", &fmt("lcqmc")).unwrap_err();
        assert!(matches!(e, TaskError::NoExamples { .. }));
        let e = pairs("甲\t乙\tneutral\n".as_bytes(), &fmt("lcqmc")).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("has no examples (1 data rows, 1 bad: unknown_label 1"),
            "{s}"
        );
        assert!(s.contains("x.tsv:1 unknown_label"), "{s}");
        // The XNLI header alone.
        let e = pairs(b"text_a\ttext_b\tlabel\n", &fmt("xnli")).unwrap_err();
        assert!(matches!(e, TaskError::NoExamples { rows: 0, .. }));
    }

    #[test]
    fn bom_and_sample_cap() {
        let mut data = b"\xEF\xBB\xBF\xe4\xb8\x80\t\xe4\xba\x8c\t1\n".to_vec();
        for _ in 0..30 {
            data.extend_from_slice(b"a\tb\t7\n");
        }
        let r = pairs(&data, &fmt("lcqmc")).unwrap();
        assert_eq!(r.examples[0].text_a, "一");
        assert_eq!(r.report.bad.total, 30);
        assert_eq!(r.report.bad.samples.len(), BadRows::MAX_SAMPLES);
    }

    #[test]
    fn format_labels_must_be_task_labels() {
        let e = read_pairs(
            &b"a\tb\t1\n"[..],
            "x",
            &fmt("lcqmc"),
            &["x".into(), "y".into()],
        )
        .unwrap_err();
        assert!(e.to_string().contains("format lcqmc has label `0`"), "{e}");
        // A format's labels map to the task's ids by name, not position.
        let task = vec![
            "neutral".to_string(),
            "entailment".into(),
            "contradiction".into(),
        ];
        let r = read_pairs(
            "甲\t乙\tcontradiction\n".as_bytes(),
            "x",
            &fmt("cmnli"),
            &task,
        )
        .unwrap();
        assert_eq!(r.examples[0].label, 2);
    }

    #[test]
    fn missing_file_names_the_path() {
        let e = read_pair_file(
            Path::new("/nonexistent/d.tsv"),
            "data/d.tsv",
            &fmt("lcqmc"),
            &labels(&fmt("lcqmc")),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "data/d.tsv: no such file (looked for /nonexistent/d.tsv)"
        );
    }

    fn choice(n: Option<usize>) -> ChoiceFormat {
        ChoiceFormat {
            name: "choice".into(),
            num_choices: n,
        }
    }

    #[test]
    fn reads_choices_and_counts_bad_ones() {
        let data = r#"{"prompt": "下雨天带什么？", "choices": ["雨伞", "墨镜", "风筝"], "answer": 0, "id": 7}

{"prompt": "", "choices": ["a", "b", "c"], "answer": 0}
{"prompt": "p", "choices": ["a", " ", "c"], "answer": 0}
{"prompt": "p", "choices": ["a", "b", "c"], "answer": 3}
{"prompt": "p", "choices": ["a", "b", "c"], "answer": "1"}
{"prompt": "p", "choices": ["a"], "answer": 0}
not json
[1, 2]
{"prompt": "q", "choices": ["a", "b", "c"], "answer": 2}
"#;
        let r = read_choices(data.as_bytes(), "c.jsonl", &choice(None)).unwrap();
        assert_eq!(r.num_choices, 3);
        assert_eq!(r.examples.len(), 2);
        assert_eq!(r.examples[1].line, 10);
        assert_eq!(r.examples[1].answer, 2);
        assert_eq!(r.report.label_counts, [1, 0, 1]);
        let by = |x| r.report.bad.by_reason.get(&x).copied().unwrap_or(0);
        assert_eq!(by(BadReason::EmptyText), 2);
        assert_eq!(by(BadReason::BadAnswer), 1);
        assert_eq!(by(BadReason::InvalidJson), 3);
        assert_eq!(by(BadReason::TooFewChoices), 1);
        assert_eq!((r.report.rows, r.report.blank_lines), (9, 1));
    }

    #[test]
    fn choice_count_must_not_change() {
        let data = "{\"prompt\": \"p\", \"choices\": [\"a\", \"b\"], \"answer\": 0}\n\
                    {\"prompt\": \"p\", \"choices\": [\"a\", \"b\", \"c\"], \"answer\": 0}\n";
        let e = read_choices(data.as_bytes(), "c.jsonl", &choice(None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.jsonl:2: 3 choices, but c.jsonl:1 has 2; every line of a choice task must have \
             the same number of choices"
        );
        let e = read_choices(data.as_bytes(), "c.jsonl", &choice(Some(4))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("c.jsonl:1: 2 choices, but the task (num_choices) has 4"),
            "{e}"
        );
        let e = read_choices(&b""[..], "c.jsonl", &choice(None)).unwrap_err();
        assert!(matches!(e, TaskError::NoExamples { .. }));
    }
}
