//! Scored sentence pairs (STS-B style regression): `text_a \t text_b \t score`, no header,
//! exactly 3 columns, the score a finite number (STS-B's 0–5). A row is bad when it has another
//! column count (`column_count`), an empty text (`empty_text`), a score that is not a finite
//! number (`bad_score`), or is not valid UTF-8; bad rows are counted as every reader counts
//! them and the caller's `max_bad_fraction` decides.

use std::io::BufRead;
use std::path::Path;

use super::{BadReason, FileReport, Lines, Parsed, collect, open, quote};
use crate::error::TaskError;
use crate::protocol::SplitExample;

/// A sentence pair with a gold similarity score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPairExample {
    /// The first text, trimmed, never empty.
    pub text_a: String,
    /// The second text, trimmed, never empty.
    pub text_b: String,
    /// The gold score, finite.
    pub score: f32,
    /// Which file of the split it came from (index into the protocol's files).
    pub file: usize,
    /// Its 1-based line in that file.
    pub line: usize,
}

/// A scored pair has no classes; its stratum is its score's band, the integer part (STS-B's
/// 0–5 bands, so that a held-out set spans the scores train does; a negative score in band 0,
/// strata being indices).
impl SplitExample for ScoredPairExample {
    fn push_labels(&self, _out: &mut Vec<usize>) {}

    fn stratum(&self) -> usize {
        self.score.max(0.0).floor() as usize
    }

    fn texts_key(&self) -> String {
        format!("{}\t{}", self.text_a, self.text_b)
    }
}

/// A scored-pair file's examples and report.
#[derive(Debug, Clone)]
pub struct ScoredPairFile {
    /// The valid rows, in file order.
    pub examples: Vec<ScoredPairExample>,
    /// What reading found: rows, bad rows (no classes: `label_counts` is empty).
    pub report: FileReport,
}

/// Reads a scored-pair TSV file; `name` is the path as the params give it, `format` the
/// task's name (`sts_b`, `pair_regression`).
pub fn read_scored_pair_file(
    path: &Path,
    name: &str,
    format: &str,
) -> Result<ScoredPairFile, TaskError> {
    read_scored_pairs(open(path, name)?, name, format)
}

/// [`read_scored_pair_file`] from any reader.
pub fn read_scored_pairs(
    input: impl BufRead,
    name: &str,
    format: &str,
) -> Result<ScoredPairFile, TaskError> {
    let mut report = FileReport::new(name, format, 0);
    let mut lines = Lines::new(input, name);
    let examples = collect(&mut lines, &mut report, |line, _row, text| {
        Ok(parse_row(line, text))
    })?;
    if examples.is_empty() {
        return Err(report.no_examples());
    }
    Ok(ScoredPairFile { examples, report })
}

/// One data row: three cells, two non-empty texts and a finite score.
fn parse_row(line: usize, text: &str) -> Parsed<ScoredPairExample> {
    let cells: Vec<&str> = text.split('\t').map(str::trim).collect();
    let [a, b, score] = cells[..] else {
        let detail = format!("{} columns, expected 3: {}", cells.len(), quote(text));
        return Parsed::Bad(BadReason::ColumnCount, detail);
    };
    if let Some(which) = [("text_a", a), ("text_b", b)]
        .iter()
        .find_map(|(k, t)| t.is_empty().then_some(*k))
    {
        return Parsed::Bad(BadReason::EmptyText, format!("{which} is empty"));
    }
    match score.parse::<f32>() {
        Ok(s) if s.is_finite() => Parsed::Example(ScoredPairExample {
            text_a: a.to_string(),
            text_b: b.to_string(),
            score: s,
            file: 0,
            line,
        }),
        _ => Parsed::Bad(
            BadReason::BadScore,
            format!("score {} is not a finite number", quote(score)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ScoredPairFile, TaskError> {
        read_scored_pairs(text.as_bytes(), "t.tsv", "sts_b")
    }

    #[test]
    fn reads_texts_scores_and_lines() {
        let f = read("我喜欢猫\t我爱猫\t4.5\n\n今天下雨\t股票涨了\t0\n").unwrap();
        assert_eq!(f.examples.len(), 2);
        assert_eq!(f.examples[0].text_a, "我喜欢猫");
        assert_eq!(f.examples[0].score, 4.5);
        assert_eq!(f.examples[1].line, 3);
        assert_eq!(f.examples[1].score, 0.0);
        assert_eq!(f.report.blank_lines, 1);
        assert_eq!(f.report.bad.total, 0);
    }

    #[test]
    fn bad_rows_are_counted_by_reason() {
        let f =
            read("甲\t乙\t3.2\n甲\t乙\n甲\t\t1\n甲\t乙\thigh\n甲\t乙\tNaN\n甲\t乙\tinf\n").unwrap();
        assert_eq!(f.examples.len(), 1);
        assert_eq!(f.report.rows, 6);
        assert_eq!(f.report.bad.total, 5);
        let by = &f.report.bad.by_reason;
        assert_eq!(by[&BadReason::ColumnCount], 1);
        assert_eq!(by[&BadReason::EmptyText], 1);
        assert_eq!(by[&BadReason::BadScore], 3);
        assert_eq!(f.report.bad.samples[0].line, 2);
    }

    #[test]
    fn a_file_without_examples_is_an_error() {
        assert!(read("甲\t乙\tx\n").is_err());
    }
}
