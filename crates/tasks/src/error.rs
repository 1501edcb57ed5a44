//! The crate's error type. Every message names what the user has to look at: the param (with
//! its path inside nested params, `train[1].format`), or the file and line.

use std::path::PathBuf;

use crate::read::BadRow;

/// Everything that can go wrong defining a task, reading its files or building a protocol.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A param is missing, has the wrong type or an invalid value. `param` is its path within
    /// the stage's params (`eval.xnli_dev[0].path`).
    #[error("param `{param}`: {message}")]
    Param { param: String, message: String },

    /// A data file named by the params does not exist.
    #[error("{path}: no such file (looked for {})", resolved.display())]
    NotFound { path: String, resolved: PathBuf },

    /// A data file exists but cannot be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// The first row of a file read with `header: false` is a header.
    #[error(
        "{path}:{line}: looks like a header; set header: true (`task: {{name: {task}, header: \
         true}}`, or the same as this file's `format:`); the line: {row}"
    )]
    UnexpectedHeader {
        path: String,
        line: usize,
        row: String,
        task: String,
    },

    /// The first row of a file read with `header: true` is data.
    #[error(
        "{path}:{line}: header: true, but this line looks like data (it holds `{label}`, a \
         label of task {task}); set header: false, or give the file its own format \
         (`{{path: …, format: cmnli}}`)"
    )]
    HeaderLooksLikeData {
        path: String,
        line: usize,
        label: String,
        task: String,
    },

    /// A column named in the task is not in the file's header.
    #[error("{path}:{line}: no column `{column}` in the header (columns: {header})")]
    MissingColumn {
        path: String,
        line: usize,
        column: String,
        header: String,
    },

    /// The file has no valid example (it is empty, or every row is bad).
    #[error("{path} has no examples ({rows} data rows, {bad} bad{samples})")]
    NoExamples {
        path: String,
        rows: usize,
        bad: usize,
        /// `: line 3 unknown_label …; …` when there were bad rows.
        samples: String,
    },

    /// More bad rows than `max_bad_fraction` allows.
    #[error(
        "{path}: {bad} of {rows} rows are bad ({pct:.2} %, more than max_bad_fraction = {max}): \
         {counts}; e.g. {}",
        format_samples(samples)
    )]
    TooManyBadRows {
        path: String,
        bad: usize,
        rows: usize,
        pct: f64,
        max: f64,
        /// `unknown_label 12, empty_text 1`.
        counts: String,
        samples: Vec<BadRow>,
    },

    /// A multiple-choice file whose lines do not all have the same number of choices.
    #[error(
        "{path}:{line}: {found} choices, but {expected_from} has {expected}; every line of a \
         choice task must have the same number of choices"
    )]
    ChoiceCount {
        path: String,
        line: usize,
        found: usize,
        expected: usize,
        /// `file:line` of the first example, which fixed the count.
        expected_from: String,
    },

    /// The examples cannot be split as asked (too few examples for a held-out dev set, …).
    #[error("{0}")]
    Split(String),

    /// A SQuAD v1 file (CMRC 2018) that cannot be used; the message names the file.
    #[error(transparent)]
    Squad(#[from] crate::squad::SquadError),

    /// A C3 file that cannot be used; the message names the file.
    #[error(transparent)]
    C3(#[from] crate::c3::C3Error),
}

impl TaskError {
    pub(crate) fn param(param: impl Into<String>, message: impl Into<String>) -> TaskError {
        TaskError::Param {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// `line 3 (unknown_label: `foo` …); line 9 (…)`, at most 5, for one-line messages.
pub(crate) fn format_samples(samples: &[BadRow]) -> String {
    let mut s: Vec<String> = samples
        .iter()
        .take(5)
        .map(|b| format!("{}:{} {}: {}", b.file, b.line, b.reason, b.detail))
        .collect();
    if samples.len() > 5 {
        s.push(format!("… ({} samples in all)", samples.len()));
    }
    s.join("; ")
}
