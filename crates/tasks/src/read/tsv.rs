//! Tab-separated files: the header (columns found by name, a header where none is expected, a
//! data row where a header should be), and the classification reader that sentence pairs and
//! single texts share.

use std::collections::HashMap;
use std::io::BufRead;

use super::{FileReport, Lines, Parsed, collect, is_blank, quote};
use crate::error::TaskError;
use crate::read::BadReason;
use crate::task::{ClassView, Column};

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
pub(crate) fn looks_like_header(cells: &[&str], label_cell: Option<&str>) -> bool {
    let ident = |c: &str| {
        let c = c.trim();
        let mut chars = c.chars();
        matches!(chars.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
            && chars.all(|ch| ch.is_ascii_alphanumeric() || "_-. ".contains(ch))
    };
    label_cell.is_some_and(|l| HEADER_WORDS.contains(&l.trim().to_ascii_lowercase().as_str()))
        || (cells.len() >= 2 && cells.iter().all(|c| ident(c)))
}

/// Where a TSV format's fields are, once the header (if any) is read.
pub(crate) struct TsvColumns {
    /// The 0-based position of each field (the label last).
    pub idx: Vec<usize>,
    /// The exact column count a row must have, if known.
    pub expected: Option<usize>,
    /// Enough columns for the highest index.
    pub needed: usize,
}

impl TsvColumns {
    /// Whether a row of `n` cells has the right count. Both: an exact count can be below
    /// `needed` when a header is shorter than an index.
    pub fn count_ok(&self, n: usize) -> bool {
        n >= self.needed && self.expected.is_none_or(|e| n == e)
    }

    /// `3`, or `at least 6`.
    pub fn want(&self) -> String {
        match self.expected {
            Some(n) if n >= self.needed => format!("{n}"),
            _ => format!("at least {}", self.needed),
        }
    }
}

/// Reads the header of a file with `header: true` (the first non-blank line) and finds the
/// named columns in it; `is_label` says whether a cell holds a label, which a header must not.
/// Without a header, the columns are the given indices.
pub(crate) fn header<R: BufRead>(
    lines: &mut Lines<R>,
    report: &mut FileReport,
    format_name: &str,
    header: bool,
    cols: &[&Column],
    columns: Option<usize>,
    is_label: &dyn Fn(&str) -> bool,
) -> Result<TsvColumns, TaskError> {
    let name = report.path.clone();
    let mut idx: Vec<usize> = cols
        .iter()
        .map(|c| match c {
            Column::Index(i) => *i,
            Column::Name(_) => 0,
        })
        .collect();
    let mut expected = columns;
    if header {
        let (line, cells) = loop {
            let Some((line, bytes)) = lines.next_line()? else {
                return Err(report.no_examples());
            };
            if is_blank(bytes) {
                report.blank_lines += 1;
                continue;
            }
            let text = String::from_utf8_lossy(bytes);
            break (
                line,
                text.split('\t')
                    .map(|c| c.trim().to_string())
                    .collect::<Vec<_>>(),
            );
        };
        report.header = true;
        // A data row where a header should be: its label column (or, when columns are found by
        // name, any column) holds a label.
        let by_name = cols.iter().any(|c| matches!(c, Column::Name(_)));
        let label_at = idx[idx.len() - 1];
        let data_label = if by_name {
            cells.iter().find(|c| is_label(c))
        } else {
            cells.get(label_at).filter(|c| is_label(c))
        };
        if let Some(l) = data_label {
            return Err(TaskError::HeaderLooksLikeData {
                path: name,
                line,
                label: l.to_string(),
                task: format_name.to_string(),
            });
        }
        for (k, col) in cols.iter().enumerate() {
            if let Column::Name(n) = col {
                idx[k] =
                    cells
                        .iter()
                        .position(|c| c == n)
                        .ok_or_else(|| TaskError::MissingColumn {
                            path: name.clone(),
                            line,
                            column: n.clone(),
                            header: cells.join(", "),
                        })?;
            }
        }
        expected = expected.or(Some(cells.len()));
    }
    let needed = idx.iter().max().map_or(0, |m| m + 1);
    Ok(TsvColumns {
        idx,
        expected,
        needed,
    })
}

/// The raw label strings a format accepts mapped to the task's class ids, or an error naming a
/// format label the task lacks.
fn label_lookup(
    format: &ClassView,
    labels: &[String],
) -> Result<HashMap<String, usize>, TaskError> {
    let mut lookup = HashMap::new();
    let accepted = format
        .labels
        .iter()
        .map(|l| (l, l))
        .chain(format.label_map.iter());
    for (raw, label) in accepted {
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

fn known_labels(format: &ClassView) -> String {
    let mut s = format.labels.join(", ");
    if !format.label_map.is_empty() {
        let aliases: Vec<_> = format.label_map.keys().map(String::as_str).collect();
        s += &format!("; aliases {}", aliases.join(", "));
    }
    s
}

/// One row of a TSV classification file: its texts (as many as the format has text columns,
/// in order), the class id and the line.
pub(crate) type ClassRow = (Vec<String>, usize, usize);

/// The rows of a TSV classification file and its report.
pub(crate) fn read_classes(
    input: impl BufRead,
    name: &str,
    format: &ClassView,
    labels: &[String],
) -> Result<(Vec<ClassRow>, FileReport), TaskError> {
    let lookup = label_lookup(format, labels)?;
    let mut report = FileReport::new(name, format.name, labels.len());
    let mut lines = Lines::new(input, name);
    let cols: Vec<&Column> = format.columns.iter().map(|(_, c)| *c).collect();
    let keys: Vec<&str> = format.columns.iter().map(|(k, _)| *k).collect();
    let is_label = |c: &str| lookup.contains_key(c);
    let tsv = header(
        &mut lines,
        &mut report,
        format.name,
        format.header,
        &cols,
        format.column_count,
        &is_label,
    )?;
    let texts = cols.len() - 1;
    let rows = collect(&mut lines, &mut report, |line, row, text| {
        let first = row == 1;
        let cells: Vec<&str> = text.split('\t').collect();
        let count_ok = tsv.count_ok(cells.len());
        let label_raw = cells.get(tsv.idx[texts]).map(|l| l.trim());
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
                task: format.name.to_string(),
            });
        }
        if !count_ok {
            let detail = format!(
                "{} columns, expected {}: {}",
                cells.len(),
                tsv.want(),
                quote(text)
            );
            return Ok(Parsed::Bad(BadReason::ColumnCount, detail));
        }
        let values: Vec<String> = (0..texts)
            .map(|k| cells[tsv.idx[k]].trim().to_string())
            .collect();
        if let Some(k) = values.iter().position(String::is_empty) {
            let detail = format!("{} is empty", keys[k]);
            return Ok(Parsed::Bad(BadReason::EmptyText, detail));
        }
        let Some(label) = label else {
            let detail = format!(
                "unknown label {} (task {} knows {})",
                quote(label_raw.unwrap_or("")),
                format.name,
                known_labels(format)
            );
            return Ok(Parsed::Bad(BadReason::UnknownLabel, detail));
        };
        Ok(Parsed::Example((values, label, line)))
    })?;
    if rows.is_empty() {
        return Err(report.no_examples());
    }
    for (_, label, _) in &rows {
        report.label_counts[*label] += 1;
    }
    Ok((rows, report))
}
