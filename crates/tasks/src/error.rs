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
    Param {
        /// The param's path (`train[0].format`).
        param: String,
        /// What is wrong with it, and what it should be.
        message: String,
    },

    /// A data file named by the params does not exist.
    #[error("{path}: no such file (looked for {})", resolved.display())]
    NotFound {
        /// The file as the params name it.
        path: String,
        /// Where it was looked for: `path` resolved against the workspace root.
        resolved: PathBuf,
    },

    /// A data file exists but cannot be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file as the params name it.
        path: String,
        /// The file system's error, or why the file is refused (not a regular file, a line
        /// longer than 16 MiB).
        #[source]
        source: std::io::Error,
    },

    /// The first row of a file read with `header: false` is a header.
    #[error(
        "{path}:{line}: looks like a header; set header: true (`task: {{name: {task}, header: \
         true}}`, or the same as this file's `format:`); the line: {row}"
    )]
    UnexpectedHeader {
        /// The file as the params name it.
        path: String,
        /// Its 1-based line number.
        line: usize,
        /// The line, quoted, cut after 40 characters.
        row: String,
        /// The name of the format the file is read with (the task's, or the file's `format:`).
        task: String,
    },

    /// The first row of a file read with `header: true` is data.
    #[error(
        "{path}:{line}: header: true, but this line looks like data (it holds `{label}`, a \
         label of task {task}); set header: false, or give the file its own format \
         (`{{path: …, format: cmnli}}`)"
    )]
    HeaderLooksLikeData {
        /// The file as the params name it.
        path: String,
        /// Its 1-based line number.
        line: usize,
        /// The cell that is one of the task's labels.
        label: String,
        /// The name of the format the file is read with (the task's, or the file's `format:`).
        task: String,
    },

    /// A column named in the task is not in the file's header.
    #[error("{path}:{line}: no column `{column}` in the header (columns: {header})")]
    MissingColumn {
        /// The file as the params name it.
        path: String,
        /// The header's 1-based line number.
        line: usize,
        /// The column name the format asks for (`text_a`, `sentence1`, …).
        column: String,
        /// The header's cells, joined by `, `.
        header: String,
    },

    /// The file has no valid example (it is empty, or every row is bad).
    #[error("{path} has no examples ({rows} data rows, {bad} bad{samples})")]
    NoExamples {
        /// The file as the params name it.
        path: String,
        /// Data rows read (neither blank lines nor the header).
        rows: usize,
        /// How many of them were bad.
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
        /// The file as the params name it.
        path: String,
        /// Bad rows.
        bad: usize,
        /// Data rows read.
        rows: usize,
        /// `bad` as a percentage of `rows`.
        pct: f64,
        /// The `max_bad_fraction` exceeded, a share (0.01 is 1 %).
        max: f64,
        /// `unknown_label 12, empty_text 1`.
        counts: String,
        /// The first bad rows (up to [`crate::BadRows::MAX_SAMPLES`]; the message shows 5).
        samples: Vec<BadRow>,
    },

    /// A multiple-choice file whose lines do not all have the same number of choices.
    #[error(
        "{path}:{line}: {found} choices, but {expected_from} has {expected}; every line of a \
         choice task must have the same number of choices"
    )]
    ChoiceCount {
        /// The file as the params name it.
        path: String,
        /// The 1-based line of the offending example (in a protocol: the file's first).
        line: usize,
        /// Its number of choices.
        found: usize,
        /// The number every line must have.
        expected: usize,
        /// `file:line` of the first example, which fixed the count, or `the task
        /// (num_choices)` when the task sets it.
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

/// Opens a task data file if it is a regular file, with the shared reader's open
/// (`pipeline_bounded::open`): `O_NONBLOCK`, so that a FIFO with no writer cannot block the
/// open, and the kind checked on the opened handle, so that nothing swapped in between a check
/// and the open (a FIFO, `/dev/zero`, whose one endless line would be read) is read. The error
/// is [`reason`]'s, which leaves the path to the caller.
pub(crate) fn open_regular(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    pipeline_bounded::open(path).map_err(reason)
}

/// The shared reader's error as an `io::Error` whose text is the reason alone (`not a regular
/// file (it is a FIFO)`), the file system's own error as it is (so `NotFound` stays
/// `NotFound`): a task file's messages name the file as the params give it.
pub(crate) fn reason(e: pipeline_bounded::ReadError) -> std::io::Error {
    match e {
        pipeline_bounded::ReadError::Io { source, .. } => source,
        other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.reason()),
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
