//! Tagging files, in the two layouts of [`crate::task::TagLayout`]: a sentence per TSV row
//! (characters and tags each separated by spaces, MSRA NER's layout), or CoNLL's character per
//! line with a blank line between sentences.

use std::io::BufRead;
use std::path::Path;

use crate::error::TaskError;
use crate::protocol::SplitExample;
use crate::read::tsv::{header, looks_like_header};
use crate::read::{BadReason, FileReport, Lines, Parsed, collect, is_blank, open, quote, utf8};
use crate::task::{TagFormat, TagLayout};

/// A tagged sentence: its characters (the units the tags belong to: one character each in
/// MSRA NER, a whitespace-free token in general) and one tag id per character.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TagExample {
    /// The sentence's characters (tokens), in order; never empty.
    pub chars: Vec<String>,
    /// Tag ids (positions in the task's tag set), one per character.
    pub tags: Vec<usize>,
    /// As in [`crate::PairExample::file`].
    pub file: usize,
    /// The line of the sentence (of its first character in CoNLL).
    pub line: usize,
}

impl TagExample {
    /// The sentence as one string (the characters joined).
    pub fn text(&self) -> String {
        self.chars.concat()
    }
}

/// A tagging file's sentences and report.
#[derive(Debug, Clone)]
pub struct TagFile {
    /// The valid sentences, in file order.
    pub examples: Vec<TagExample>,
    /// What reading found: rows, bad sentences, characters per tag id.
    pub report: FileReport,
}

/// Reads a tagging file in its format's layout. `tags` is the task's tag set (rows get their
/// ids in it).
pub fn read_tag_file(
    path: &Path,
    name: &str,
    format: &TagFormat,
    tags: &[String],
) -> Result<TagFile, TaskError> {
    read_tags(open(path, name)?, name, format, tags)
}

/// [`read_tag_file`] from any reader.
pub fn read_tags(
    input: impl BufRead,
    name: &str,
    format: &TagFormat,
    tags: &[String],
) -> Result<TagFile, TaskError> {
    let mut report = FileReport::new(name, &format.name, tags.len());
    let mut lines = Lines::new(input, name);
    let examples = match format.layout {
        TagLayout::Tsv => read_tsv(&mut lines, &mut report, format, tags)?,
        TagLayout::Conll => read_conll(&mut lines, &mut report, format, tags)?,
    };
    if examples.is_empty() {
        return Err(report.no_examples());
    }
    for e in &examples {
        for &t in &e.tags {
            report.label_counts[t] += 1;
        }
    }
    Ok(TagFile { examples, report })
}

/// The characters and tags of one sentence, or why it is bad.
fn sentence(
    chars: Vec<String>,
    raw_tags: &[&str],
    tags: &[String],
    line: usize,
) -> Parsed<TagExample> {
    if chars.is_empty() {
        return Parsed::Bad(BadReason::EmptyText, "the sentence is empty".into());
    }
    if chars.len() != raw_tags.len() {
        let detail = format!("{} characters but {} tags", chars.len(), raw_tags.len());
        return Parsed::Bad(BadReason::TagCount, detail);
    }
    let mut ids = Vec::with_capacity(raw_tags.len());
    for (i, t) in raw_tags.iter().enumerate() {
        match tags.iter().position(|k| k == t) {
            Some(id) => ids.push(id),
            None => {
                let detail = format!(
                    "unknown tag {} at character {} (the tags: {})",
                    quote(t),
                    i + 1,
                    tags.join(", ")
                );
                return Parsed::Bad(BadReason::UnknownLabel, detail);
            }
        }
    }
    Parsed::Example(TagExample {
        chars,
        tags: ids,
        file: 0,
        line,
    })
}

fn read_tsv<R: BufRead>(
    lines: &mut Lines<R>,
    report: &mut FileReport,
    format: &TagFormat,
    tags: &[String],
) -> Result<Vec<TagExample>, TaskError> {
    let is_tag = |c: &str| {
        c.split(' ')
            .next()
            .is_some_and(|t| tags.iter().any(|k| k == t))
    };
    let cols = [&format.text, &format.label];
    let tsv = header(
        lines,
        report,
        &format.name,
        format.header,
        &cols,
        None,
        &is_tag,
    )?;
    let name = report.path.clone();
    collect(lines, report, |line, row, text| {
        let cells: Vec<&str> = text.split('\t').collect();
        let label_raw = cells.get(tsv.idx[1]).map(|l| l.trim());
        if row == 1
            && !format.header
            && !label_raw.is_some_and(is_tag)
            && looks_like_header(&cells, label_raw)
        {
            return Err(TaskError::UnexpectedHeader {
                path: name.clone(),
                line,
                row: quote(text),
                task: format.name.clone(),
            });
        }
        if !tsv.count_ok(cells.len()) {
            let detail = format!(
                "{} columns, expected {}: {}",
                cells.len(),
                tsv.want(),
                quote(text)
            );
            return Ok(Parsed::Bad(BadReason::ColumnCount, detail));
        }
        let chars: Vec<String> = cells[tsv.idx[0]]
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let raw: Vec<&str> = cells[tsv.idx[1]].split_whitespace().collect();
        Ok(sentence(chars, &raw, tags, line))
    })
}

/// CoNLL: `char tag` lines (whitespace-separated columns), sentences between blank lines;
/// `-DOCSTART-` lines are document breaks. A sentence's line is that of its first character;
/// a bad line makes its sentence bad.
fn read_conll<R: BufRead>(
    lines: &mut Lines<R>,
    report: &mut FileReport,
    format: &TagFormat,
    tags: &[String],
) -> Result<Vec<TagExample>, TaskError> {
    let idx = |c: &crate::task::Column| match c {
        crate::task::Column::Index(i) => *i,
        crate::task::Column::Name(_) => 0,
    };
    let (text_at, tag_at) = (idx(&format.text), idx(&format.label));
    let needed = text_at.max(tag_at) + 1;
    let mut examples = Vec::new();
    // The sentence being read: its first line, characters, tags, and why it is bad if it is.
    let mut start = 0usize;
    let mut chars: Vec<String> = Vec::new();
    let mut raw: Vec<String> = Vec::new();
    let mut bad: Option<(BadReason, String)> = None;
    let mut finish = |start: usize,
                      chars: &mut Vec<String>,
                      raw: &mut Vec<String>,
                      bad: &mut Option<(BadReason, String)>,
                      report: &mut FileReport| {
        if start == 0 {
            return;
        }
        report.rows += 1;
        let r: Vec<&str> = raw.iter().map(String::as_str).collect();
        let parsed = match bad.take() {
            Some((reason, detail)) => Parsed::Bad(reason, detail),
            None => sentence(std::mem::take(chars), &r, tags, start),
        };
        match parsed {
            Parsed::Example(e) => examples.push(e),
            Parsed::Bad(reason, detail) => report.bad.record(&report.path, start, reason, detail),
        }
        chars.clear();
        raw.clear();
    };
    while let Some((line, bytes)) = lines.next_line()? {
        let text = match utf8(bytes) {
            Ok(t) => t.trim(),
            Err(e) => {
                if start == 0 {
                    start = line;
                }
                bad.get_or_insert((BadReason::InvalidUtf8, format!("line {line}: {e}")));
                continue;
            }
        };
        if is_blank(bytes) || text.starts_with("-DOCSTART-") {
            report.blank_lines += usize::from(is_blank(bytes));
            finish(start, &mut chars, &mut raw, &mut bad, report);
            start = 0;
            continue;
        }
        if start == 0 {
            start = line;
        }
        let cells: Vec<&str> = text.split_whitespace().collect();
        if cells.len() < needed {
            let detail = format!(
                "line {line}: {} columns, expected at least {needed}: {}",
                cells.len(),
                quote(text)
            );
            bad.get_or_insert((BadReason::ColumnCount, detail));
            continue;
        }
        chars.push(cells[text_at].to_string());
        raw.push(cells[tag_at].to_string());
    }
    finish(start, &mut chars, &mut raw, &mut bad, report);
    report.examples = examples.len();
    Ok(examples)
}

/// A sentence's classes are its characters' tags; its stratum whether it holds any tag but
/// tag 0 (`O`), so that a held-out set has the share of sentences without entities train has.
impl SplitExample for TagExample {
    fn push_labels(&self, out: &mut Vec<usize>) {
        out.extend_from_slice(&self.tags);
    }

    fn stratum(&self) -> usize {
        usize::from(self.tags.iter().any(|&t| t != 0))
    }

    fn texts_key(&self) -> String {
        self.text()
    }

    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>> {
        Some(examples.iter().map(|e| vec![e.text()]).collect())
    }
}
