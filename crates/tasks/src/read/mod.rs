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
//! # Single-text files (TSV)
//!
//! As sentence pairs, with one text column ([`SingleFormat`]): ChnSentiCorp's and
//! SMP2020-EWECT's `label \t text_a` rows under a header. The same bad rows.
//!
//! # Scored sentence pairs (TSV)
//!
//! `text_a \t text_b \t score`, no header, the score a finite number (STS-B style
//! regression); a row whose score is not one is bad (`bad_score`). The reader is the
//! kind's, [`crate::kinds::pair_regression`].
//!
//! # Tagging files
//!
//! A sentence per TSV row, its characters separated by spaces in one column and as many tags,
//! separated by spaces, in another (MSRA NER: header `text_a \t label`); or CoNLL's layout,
//! a character and its tag per line (whitespace-separated), a blank line between sentences
//! (`-DOCSTART-` lines are breaks too). A sentence is bad when its character and tag counts
//! differ (`tag_count`), it holds a tag not in the tag set (`unknown_label`), it is empty
//! (`empty_text`), a row or line has too few columns (`column_count`), or it is not valid
//! UTF-8; a CoNLL sentence is counted at the line of its first character.
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

pub(crate) mod tsv;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Serialize;

use crate::error::{TaskError, format_samples};
#[cfg(doc)]
use crate::task::{PairFormat, SingleFormat};
// The choice reader is its kind's module; here under its old paths.
pub use crate::kinds::choice::{ChoiceExample, ChoiceFile, read_choice_file, read_choices};
// The scored pairs' reader is its kind's module; here under its old paths.
pub use crate::kinds::pair_regression::{
    ScoredPairExample, ScoredPairFile, read_scored_pair_file, read_scored_pairs,
};
// The tagging reader is its kind's module; here under its old paths.
pub use crate::kinds::tagging::{TagExample, TagFile, read_tag_file, read_tags};
// The sentence-pair and single-text readers are their kinds' modules (on the TSV reading
// they share, [`tsv`]); here under their old paths.
pub use crate::kinds::pair::{PairExample, PairFile, read_pair_file, read_pairs};
pub use crate::kinds::single::{SingleExample, SingleFile, read_single_file, read_singles};

/// Why a row was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadReason {
    /// A row with another number of columns than the format expects (or too few for its
    /// highest column), or a CoNLL line with too few fields.
    ColumnCount,
    /// A label (or tag) that is not one of the task's, nor mapped to one by its `label_map`.
    UnknownLabel,
    /// A text, prompt or choice that is empty once trimmed, or a tagging sentence without
    /// characters.
    EmptyText,
    /// A line that is not valid UTF-8.
    InvalidUtf8,
    /// A JSONL line that is not an object with `prompt`, `choices` and `answer` of their types.
    InvalidJson,
    /// A multiple-choice answer that is not an index of the line's choices.
    BadAnswer,
    /// A multiple-choice line with fewer than 2 choices.
    TooFewChoices,
    /// A tagging sentence whose characters and tags differ in number.
    TagCount,
    /// A scored pair whose score is not a finite number.
    BadScore,
}

impl BadReason {
    /// The reason's snake_case name, as metrics.json and the messages write it
    /// (`unknown_label`).
    pub fn as_str(self) -> &'static str {
        match self {
            BadReason::ColumnCount => "column_count",
            BadReason::UnknownLabel => "unknown_label",
            BadReason::EmptyText => "empty_text",
            BadReason::InvalidUtf8 => "invalid_utf8",
            BadReason::InvalidJson => "invalid_json",
            BadReason::BadAnswer => "bad_answer",
            BadReason::TooFewChoices => "too_few_choices",
            BadReason::TagCount => "tag_count",
            BadReason::BadScore => "bad_score",
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
    /// 1-based line number in that file (of a CoNLL sentence: of its first character).
    pub line: usize,
    /// Why it was skipped.
    pub reason: BadReason,
    /// What exactly: `unknown label "-" (known: contradiction, entailment, neutral, …)`.
    pub detail: String,
}

/// The bad rows of one file: counts by reason and the first few rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BadRows {
    /// Bad rows in all.
    pub total: usize,
    /// Bad rows per reason (only reasons that occurred); the counts add up to `total`.
    pub by_reason: BTreeMap<BadReason, usize>,
    /// The first [`BadRows::MAX_SAMPLES`] bad rows.
    pub samples: Vec<BadRow>,
}

impl BadRows {
    /// How many bad rows are kept with their details.
    pub const MAX_SAMPLES: usize = 20;

    /// Counts one bad row of `file` (the path as the params name it) at `line`, and keeps it as
    /// a sample while fewer than [`BadRows::MAX_SAMPLES`] are kept.
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
    /// Lines holding nothing but whitespace, skipped and not counted in `rows`.
    pub blank_lines: usize,
    /// Examples per class id.
    pub label_counts: Vec<usize>,
    /// The rows skipped, by reason with samples (for a reading-comprehension file, only
    /// `total`: the details are in `reading`).
    pub bad: BadRows,
    /// Set by a protocol for a train file: its examples dropped because a dev or evaluation
    /// example has the same texts.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_eval_overlap: usize,
    /// A reading-comprehension file: what its reader counted, by cause with question ids
    /// (`rows` are then its questions, `examples` those kept, `bad.total` those dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reading: Option<Box<ReadingReport>>,
}

/// The report of a reading-comprehension reader.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ReadingReport {
    /// A SQuAD v1 file's (`cmrc2018`, `squad`).
    Squad(crate::squad::SquadReport),
    /// A C3 file's (`c3`).
    C3(crate::c3::C3Report),
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl FileReport {
    pub(crate) fn new(path: &str, format: &str, classes: usize) -> FileReport {
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
            reading: None,
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

    pub(crate) fn no_examples(&self) -> TaskError {
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

pub(crate) fn open(path: &Path, name: &str) -> Result<BufReader<File>, TaskError> {
    // Only regular files: opening a FIFO with no writer blocks forever, and a device such as
    // /dev/zero is one endless line.
    match crate::error::open_regular(path) {
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

/// The longest line a task file may have. The longest line of the shared data's task files is
/// a few KB (an MSRA NER sentence with its tags); a line past this is not a task row, and
/// reading it whole would hold the file in memory.
const MAX_LINE_BYTES: u64 = 16 << 20;

/// Lines as raw bytes, numbered from 1, without the line end and (on line 1) the UTF-8 BOM.
/// Bytes rather than `String`s so that one invalid line is a bad row, not a failed file.
pub(crate) struct Lines<R> {
    input: R,
    name: String,
    line: usize,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(input: R, name: &str) -> Self {
        Lines {
            input,
            name: name.to_string(),
            line: 0,
            buf: Vec::new(),
        }
    }

    pub(crate) fn next_line(&mut self) -> Result<Option<(usize, &[u8])>, TaskError> {
        self.buf.clear();
        let n = (&mut self.input)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| TaskError::Io {
                path: self.name.clone(),
                source: e,
            })?;
        if n == 0 {
            return Ok(None);
        }
        if n as u64 > MAX_LINE_BYTES {
            return Err(TaskError::Io {
                path: self.name.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "line {} is longer than {} MiB (is this a task file?)",
                        self.line + 1,
                        MAX_LINE_BYTES >> 20
                    ),
                ),
            });
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

/// What a reader made of one data line.
pub(crate) enum Parsed<T> {
    Example(T),
    Bad(BadReason, String),
}

/// The data lines of a file after its header: blank lines are counted and skipped, every other
/// line is a row; a row that is not UTF-8, or that `parse` (given the line number, the row
/// number from 1 and the text) finds bad, is recorded in the report's bad rows, the one place
/// where that happens; the rest are the examples. Sets `report.examples`.
pub(crate) fn collect<R: BufRead, T>(
    lines: &mut Lines<R>,
    report: &mut FileReport,
    mut parse: impl FnMut(usize, usize, &str) -> Result<Parsed<T>, TaskError>,
) -> Result<Vec<T>, TaskError> {
    let mut examples = Vec::new();
    while let Some((line, bytes)) = lines.next_line()? {
        if is_blank(bytes) {
            report.blank_lines += 1;
            continue;
        }
        report.rows += 1;
        let parsed = match utf8(bytes) {
            Ok(text) => parse(line, report.rows, text)?,
            Err(e) => Parsed::Bad(BadReason::InvalidUtf8, e.to_string()),
        };
        match parsed {
            Parsed::Example(e) => examples.push(e),
            Parsed::Bad(reason, detail) => report.bad.record(&report.path, line, reason, detail),
        }
    }
    report.examples = examples.len();
    Ok(examples)
}

pub(crate) fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// A line that is not UTF-8: the byte where its valid prefix ends (what a bad row's detail says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid UTF-8 at byte {at}")]
pub(crate) struct InvalidUtf8 {
    /// The length of the line's valid prefix.
    pub at: usize,
}

pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, InvalidUtf8> {
    std::str::from_utf8(bytes).map_err(|e| InvalidUtf8 {
        at: e.valid_up_to(),
    })
}

pub(crate) fn quote(s: &str) -> String {
    let short: String = s.chars().take(40).collect();
    if short.len() < s.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
}

#[cfg(test)]
mod tests;
