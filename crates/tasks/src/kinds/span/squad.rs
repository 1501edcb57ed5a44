//! SQuAD v1 JSON: CMRC 2018 (`../shared/datasets/cmrc2018/{dev,test}.json`) and any file of the
//! same shape.
//!
//! ```json
//! {"version": "v1.0", "data": [{"title": "…", "id": "DEV_0", "paragraphs": [
//!   {"id": "DEV_0", "context": "《战国无双3》（）是由光荣和ω-force开发的…",
//!    "qas": [{"id": "DEV_0_QUERY_0", "question": "…是由哪两个公司合作开发的？",
//!             "answers": [{"text": "光荣和ω-force", "answer_start": 11}, …]}]}]}]}
//! ```
//!
//! `answer_start` counts characters (Unicode scalar values, as Python indexes a `str`); the
//! examples carry byte ranges into their context, for slicing in Rust.
//!
//! The file is read as a stream, one article at a time (`serde_json`'s streaming deserializer
//! with a visitor over `data`), so memory is the examples plus one article, whatever the file
//! size. Bad input never stops the reader; it is counted by cause with up to
//! [`Tally::MAX_SAMPLES`] question ids:
//!
//! - a question is dropped for a missing or mistyped field (`missing_field`), an empty or
//!   whitespace context (`empty_context`), an empty question (`empty_question`), an id seen
//!   before in the file (`duplicate_id`: predictions are keyed by id), or no answer at all
//!   (`no_answers`);
//! - an answer whose `answer_start` does not point at its text is **repaired** to the occurrence
//!   of the text nearest to the given start (the first on a tie; `answer_start_repaired`), as
//!   SQuAD loaders that search the context do: the annotator's text is what the metric scores,
//!   and the offsets are what drifted (CMRC 2018 dev: 7 answers, each one or two characters off);
//! - an answer whose text is nowhere in the context (`answer_not_in_context`) is kept as a gold
//!   text: CMRC 2018's official script compares texts only, and its dev set has 193 such second
//!   and third answers (`answer_start` -1, a paraphrase). It cannot be a training target;
//! - an empty answer text is dropped (`empty_answer`).
//!
//! A question keeps its answers in file order; its training target is the first answer that is
//! a span of the context ([`SquadExample::target`]: `run_qa.py` trains on `answers[0]`; here the
//! first usable one). A kept question with no span at all counts in `without_span`: it can be
//! scored, not trained on. A file where no question has a span has no gold answers
//! ([`SquadFile::require_labels`]): CMRC 2018's `test.json` in the shared data is such a file,
//! its 6,000 answers are `FAKE_ANSWER_1..3` placeholders of the hidden test set.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::BufReader;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::group_split::{GroupSplit, GroupSplitError, split_by_group};
use crate::json_stream::{OpenError, for_each_element, open_data_file};
use crate::protocol::SplitExample;
pub use crate::tally::Tally;

/// Everything that stops a SQuAD file from being read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum SquadError {
    /// The file cannot be opened or read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file, as the path given to the reader displays.
        path: String,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
    /// Not JSON, or not SQuAD's top-level shape; the message has serde's line and column.
    #[error("{path}: not SQuAD v1 JSON: {message}")]
    Format {
        /// The file, as the path given to the reader displays.
        path: String,
        /// What is wrong (serde's message), or why the file is refused (not a regular file,
        /// over 1 GiB).
        message: String,
    },
    /// Every question was dropped (or the file holds none).
    #[error("{path} has no usable question ({read} read: {counts})")]
    NoQuestions {
        /// The file, as the path given to the reader displays.
        path: String,
        /// Question entries read.
        read: usize,
        /// Why they were dropped: [`Tally::summary`] of the report's `dropped`.
        counts: String,
    },
    /// More questions dropped than `max_bad_fraction` allows.
    #[error(
        "{path}: {bad} of {read} questions are bad ({pct:.2} %, more than max_bad_fraction = \
         {max}): {counts}"
    )]
    TooManyBad {
        /// The file, as the path given to the reader displays.
        path: String,
        /// Questions dropped.
        bad: usize,
        /// Question entries read.
        read: usize,
        /// `bad` as a percentage of `read`.
        pct: f64,
        /// The `max_bad_fraction` exceeded, a share (0.01 is 1 %).
        max: f64,
        /// Why they were dropped: [`Tally::summary`] of the report's `dropped`.
        counts: String,
    },
    /// No kept question has an answer that is a span: a file without gold answers, refused
    /// for training and evaluation by [`SquadFile::require_labels`].
    #[error(
        "{path}: none of its {questions} questions has an answer that is a span of its context, \
         so it has no gold answers (CMRC 2018's test.json holds FAKE_ANSWER placeholders of the \
         hidden test set); it can be predicted on, not evaluated or trained on"
    )]
    Unlabelled {
        /// The file, as the path given to the reader displays.
        path: String,
        /// Questions kept, none with a span.
        questions: usize,
    },
    /// The articles cannot be split as asked (too few of them for the fractions, …).
    #[error("{path}: {source}")]
    Split {
        /// The file, as the path given to the reader displays.
        path: String,
        /// What the split refused.
        #[source]
        source: GroupSplitError,
    },
}

/// Why a question, or one of its answers, was set aside or changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SquadIssue {
    /// A missing or mistyped field: an article without `paragraphs`, a paragraph without `qas`
    /// or `context`, a question without `id`, `question` or `answers`, an answer without
    /// `text`. Drops the question (the whole entry, for an article or a paragraph); an answer
    /// without `text` is dropped alone.
    MissingField,
    /// A context that is empty or whitespace: drops each of its questions.
    EmptyContext,
    /// A question that is empty or whitespace: drops it.
    EmptyQuestion,
    /// A question id seen before in the file: drops the later question.
    DuplicateId,
    /// A question left with no usable answer: drops it.
    NoAnswers,
    /// An answer whose `answer_start` did not point at its text, moved to the nearest
    /// occurrence: kept.
    AnswerStartRepaired,
    /// An answer whose text is nowhere in the context: kept as a gold text without a span.
    AnswerNotInContext,
    /// An answer whose text is empty or whitespace: dropped.
    EmptyAnswer,
}

impl SquadIssue {
    /// The cause's snake_case name, as metrics.json and the messages write it
    /// (`answer_start_repaired`).
    pub fn as_str(self) -> &'static str {
        match self {
            SquadIssue::MissingField => "missing_field",
            SquadIssue::EmptyContext => "empty_context",
            SquadIssue::EmptyQuestion => "empty_question",
            SquadIssue::DuplicateId => "duplicate_id",
            SquadIssue::NoAnswers => "no_answers",
            SquadIssue::AnswerStartRepaired => "answer_start_repaired",
            SquadIssue::AnswerNotInContext => "answer_not_in_context",
            SquadIssue::EmptyAnswer => "empty_answer",
        }
    }
}

impl fmt::Display for SquadIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One answer: its text and, when it is a span of the context, the span in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquadAnswer {
    /// The annotator's text, as in the file (what the metric compares).
    pub text: String,
    /// Its byte range in the context (the repaired one for `answer_start_repaired`); `None`
    /// when the text is nowhere in the context.
    pub span: Option<Range<usize>>,
}

/// One question on one context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquadExample {
    /// The question's `id`, unique in its file; predictions are keyed by it.
    pub id: String,
    /// Index into [`SquadFile::articles`].
    pub article: usize,
    /// Shared by the questions on one paragraph.
    pub context: Arc<str>,
    /// Trimmed (`run_qa.py` strips the question's leading whitespace).
    pub question: String,
    /// At least one (none only from [`read_squad_questions`]).
    pub answers: Vec<SquadAnswer>,
    /// Which file of a protocol it came from (0 as read; the protocol numbers its files).
    pub file: usize,
}

impl SquadExample {
    /// The training target: the first answer that is a span of the context.
    pub fn target(&self) -> Option<&Range<usize>> {
        self.answers.iter().find_map(|a| a.span.as_ref())
    }

    /// The gold texts the metric takes the maximum over.
    pub fn gold_texts(&self) -> Vec<&str> {
        self.answers.iter().map(|a| a.text.as_str()).collect()
    }
}

/// What the reader saw; serialisable for metrics.json.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SquadReport {
    /// The file, as the path given to the reader displays.
    pub path: String,
    /// Articles with a `paragraphs` array.
    pub articles: usize,
    /// Paragraphs with at least one kept question.
    pub contexts: usize,
    /// Question entries in the file (an article without `paragraphs` or a paragraph without
    /// `qas` counts as one, dropped as `missing_field`).
    pub questions_read: usize,
    /// Questions kept.
    pub questions: usize,
    /// The questions dropped, by cause with their ids.
    pub dropped: Tally<SquadIssue>,
    /// Answers kept (on kept questions).
    pub answers: usize,
    /// Answers repaired, kept without a span, or dropped, of questions read with a context.
    pub answer_notes: Tally<SquadIssue>,
    /// Kept questions none of whose answers is a span: scored, never trained on.
    pub without_span: usize,
}

/// A SQuAD v1 file's examples.
#[derive(Debug, Clone)]
pub struct SquadFile {
    /// Article titles (or ids, or `article N`), in file order.
    pub articles: Vec<String>,
    /// The kept questions, in file order.
    pub examples: Vec<SquadExample>,
    /// What the reader saw.
    pub report: SquadReport,
}

/// Reads a SQuAD v1 file (see the module doc for what is dropped, repaired, counted).
pub fn read_squad(path: &Path) -> Result<SquadFile, SquadError> {
    read(path, false)
}

/// [`read_squad`] for prediction: questions without answers (no `answers`, or an empty list)
/// are kept, with none.
pub fn read_squad_questions(path: &Path) -> Result<SquadFile, SquadError> {
    read(path, true)
}

fn read(path: &Path, unanswered: bool) -> Result<SquadFile, SquadError> {
    let name = path.display().to_string();
    let file = open_data_file(path).map_err(|e| match e {
        OpenError::Io(source) => SquadError::Io {
            path: name.clone(),
            source,
        },
        OpenError::Refused(message) => SquadError::Format {
            path: name.clone(),
            message,
        },
    })?;
    let mut b = Builder::new(&name);
    b.unanswered = unanswered;
    for_each_element(BufReader::new(file), Some("data"), |article| {
        b.article(article)
    })
    .map_err(|e| SquadError::Format {
        path: name.clone(),
        message: e.to_string(),
    })?;
    let f = b.finish();
    if f.examples.is_empty() {
        return Err(SquadError::NoQuestions {
            path: name,
            read: f.report.questions_read,
            counts: f.report.dropped.summary(),
        });
    }
    Ok(f)
}

impl SquadFile {
    /// Fails when more than `max_bad_fraction` of the questions were dropped.
    pub fn check_bad_fraction(&self, max_bad_fraction: f64) -> Result<(), SquadError> {
        let r = &self.report;
        let pct = 100.0 * r.dropped.total as f64 / r.questions_read.max(1) as f64;
        if pct > 100.0 * max_bad_fraction {
            return Err(SquadError::TooManyBad {
                path: r.path.clone(),
                bad: r.dropped.total,
                read: r.questions_read,
                pct,
                max: max_bad_fraction,
                counts: r.dropped.summary(),
            });
        }
        Ok(())
    }

    /// Fails when no question has a gold span (an unlabelled file such as CMRC 2018's test).
    pub fn require_labels(&self) -> Result<(), SquadError> {
        if self.examples.iter().all(|e| e.target().is_none()) {
            return Err(SquadError::Unlabelled {
                path: self.report.path.clone(),
                questions: self.examples.len(),
            });
        }
        Ok(())
    }

    /// Each example's group for a split: its article, with articles that share a context text
    /// merged (so that no context is on both sides even if a file repeats one).
    pub fn groups(&self) -> Vec<usize> {
        // Union-find over articles: an article joins the first article that had its context.
        let mut parent: Vec<usize> = (0..self.articles.len()).collect();
        fn find(parent: &mut [usize], mut a: usize) -> usize {
            while parent[a] != a {
                parent[a] = parent[parent[a]];
                a = parent[a];
            }
            a
        }
        let mut first: HashMap<&str, usize> = HashMap::new();
        for ex in &self.examples {
            let other = *first.entry(&*ex.context).or_insert(ex.article);
            let (a, b) = (find(&mut parent, ex.article), find(&mut parent, other));
            parent[a.max(b)] = a.min(b);
        }
        self.examples
            .iter()
            .map(|ex| find(&mut parent, ex.article))
            .collect()
    }

    /// The seeded split by article (indices into [`SquadFile::examples`]): CMRC 2018's protocol
    /// here is `split(0.1, 0.0, seed)` (train on 90 % of dev's articles, select on 10 %) when a
    /// labelled test file exists, `split(0.1, 0.1, seed)` otherwise.
    pub fn split(&self, dev: f64, test: f64, seed: u64) -> Result<GroupSplit, SquadError> {
        split_by_group(&self.groups(), dev, test, seed).map_err(|source| SquadError::Split {
            path: self.report.path.clone(),
            source,
        })
    }
}

/// The character offset of byte offset `byte` of `text` (for reports and `predict`, which give
/// offsets as SQuAD does, in characters).
pub fn char_offset(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(0, |s| s.chars().count())
}

/// Accumulates articles into a [`SquadFile`].
struct Builder {
    file: SquadFile,
    ids: HashSet<String>,
    /// Keep questions without answers (prediction).
    unanswered: bool,
}

impl Builder {
    fn new(path: &str) -> Builder {
        Builder {
            file: SquadFile {
                articles: Vec::new(),
                examples: Vec::new(),
                report: SquadReport {
                    path: path.to_string(),
                    articles: 0,
                    contexts: 0,
                    questions_read: 0,
                    questions: 0,
                    dropped: Tally::default(),
                    answers: 0,
                    answer_notes: Tally::default(),
                    without_span: 0,
                },
            },
            ids: HashSet::new(),
            unanswered: false,
        }
    }

    fn finish(mut self) -> SquadFile {
        self.file.report.articles = self.file.articles.len();
        self.file
    }

    fn article(&mut self, mut article: Value) {
        let index = self.file.articles.len();
        let title = ["title", "id"]
            .iter()
            .find_map(|k| article.get(*k).and_then(Value::as_str))
            .map_or_else(|| format!("article {index}"), str::to_string);
        let Some(Value::Array(paragraphs)) = article.get_mut("paragraphs").map(Value::take) else {
            let id = format!("{title}.paragraphs");
            self.file
                .report
                .dropped
                .record(SquadIssue::MissingField, &id, "no `paragraphs` array");
            self.file.report.questions_read += 1;
            return;
        };
        self.file.articles.push(title);
        for (p, paragraph) in paragraphs.into_iter().enumerate() {
            self.paragraph(index, p, paragraph);
        }
    }

    fn paragraph(&mut self, article: usize, p: usize, mut paragraph: Value) {
        let where_ = format!("{}.paragraphs[{p}]", self.file.articles[article]);
        let Some(Value::Array(qas)) = paragraph.get_mut("qas").map(Value::take) else {
            self.file.report.questions_read += 1;
            let detail = "no `qas` array";
            self.file
                .report
                .dropped
                .record(SquadIssue::MissingField, &where_, detail);
            return;
        };
        let context = match paragraph.get_mut("context").map(Value::take) {
            Some(Value::String(c)) if !c.trim().is_empty() => Ok(c),
            Some(Value::String(_)) => Err((SquadIssue::EmptyContext, "empty context")),
            _ => Err((SquadIssue::MissingField, "no `context` string")),
        };
        let context = match context {
            Ok(c) => c,
            Err((issue, detail)) => {
                for (q, qa) in qas.iter().enumerate() {
                    self.file.report.questions_read += 1;
                    let id = qa_id(qa, &where_, q);
                    self.file.report.dropped.record(issue, &id, detail);
                }
                return;
            }
        };
        let context: Arc<str> = context.into();
        let mut kept = false;
        for (q, qa) in qas.into_iter().enumerate() {
            kept |= self.question(article, &context, &where_, q, qa);
        }
        self.file.report.contexts += usize::from(kept);
    }

    /// Reads one question; true when it was kept.
    fn question(
        &mut self,
        article: usize,
        context: &Arc<str>,
        where_: &str,
        q: usize,
        qa: Value,
    ) -> bool {
        self.file.report.questions_read += 1;
        let id = qa_id(&qa, where_, q);
        let drop = |b: &mut Builder, issue, detail: &str| {
            b.file.report.dropped.record(issue, &id, detail);
            false
        };
        if !matches!(qa.get("id"), Some(Value::String(_))) {
            return drop(self, SquadIssue::MissingField, "no `id` string");
        }
        let question = match qa.get("question") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            Some(Value::String(_)) => return drop(self, SquadIssue::EmptyQuestion, "empty"),
            _ => return drop(self, SquadIssue::MissingField, "no `question` string"),
        };
        let none = Vec::new();
        let raw = match qa.get("answers") {
            Some(Value::Array(raw)) => raw,
            None if self.unanswered => &none,
            _ => return drop(self, SquadIssue::MissingField, "no `answers` array"),
        };
        if self.ids.contains(&id) {
            return drop(self, SquadIssue::DuplicateId, "id seen before in this file");
        }
        let answers: Vec<SquadAnswer> = raw
            .iter()
            .filter_map(|a| self.answer(&id, context, a))
            .collect();
        if answers.is_empty() && !self.unanswered {
            return drop(self, SquadIssue::NoAnswers, "no usable answer");
        }
        let r = &mut self.file.report;
        r.questions += 1;
        r.answers += answers.len();
        if answers.iter().all(|a| a.span.is_none()) {
            r.without_span += 1;
        }
        self.ids.insert(id.clone());
        self.file.examples.push(SquadExample {
            id,
            article,
            context: context.clone(),
            question,
            answers,
            file: 0,
        });
        true
    }

    fn answer(&mut self, id: &str, context: &str, a: &Value) -> Option<SquadAnswer> {
        let notes = &mut self.file.report.answer_notes;
        let Some(text) = a.get("text").and_then(Value::as_str) else {
            notes.record(SquadIssue::MissingField, id, "an answer without `text`");
            return None;
        };
        if text.trim().is_empty() {
            notes.record(SquadIssue::EmptyAnswer, id, "an empty answer text");
            return None;
        }
        let given = a.get("answer_start").and_then(Value::as_i64);
        let span = locate(context, text, given);
        match (&span, given) {
            (None, _) => notes.record(
                SquadIssue::AnswerNotInContext,
                id,
                format!("`{text}` is not in the context"),
            ),
            (Some(s), g) if g != Some(char_offset(context, s.start) as i64) => notes.record(
                SquadIssue::AnswerStartRepaired,
                id,
                format!(
                    "answer_start {} → {} for `{text}`",
                    g.map_or("missing".into(), |g| g.to_string()),
                    char_offset(context, s.start)
                ),
            ),
            _ => {}
        }
        Some(SquadAnswer {
            text: text.to_string(),
            span,
        })
    }
}

fn qa_id(qa: &Value, where_: &str, q: usize) -> String {
    qa.get("id")
        .and_then(Value::as_str)
        .map_or_else(|| format!("{where_}.qas[{q}]"), str::to_string)
}

/// The byte span of `text` in `context`: at the character offset `given` when the text is
/// there, else the occurrence whose character offset is nearest to `given` (0 when absent;
/// the earlier on a tie), else `None`.
pub fn locate(context: &str, text: &str, given: Option<i64>) -> Option<Range<usize>> {
    if let Some(g) = given.and_then(|g| usize::try_from(g).ok())
        && let Some((b, _)) = context.char_indices().nth(g)
        && context[b..].starts_with(text)
    {
        return Some(b..b + text.len());
    }
    let target = given.unwrap_or(0);
    context
        .match_indices(text)
        .map(|(b, _)| (b, char_offset(context, b) as i64))
        .min_by_key(|&(_, c)| (c - target).abs())
        .map(|(b, _)| b..b + text.len())
}

/// A question has no classes and one stratum: its answer is a span, not a class.
impl SplitExample for SquadExample {
    fn push_labels(&self, _out: &mut Vec<usize>) {}

    fn stratum(&self) -> usize {
        0
    }

    fn texts_key(&self) -> String {
        format!("{}\t{}", self.context, self.question)
    }

    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>> {
        // The context and the question (an answer is a span of the context). Contexts repeat
        // across questions: the held-out texts keep each once.
        Some(
            examples
                .iter()
                .map(|e| vec![e.context.to_string(), e.question.clone()])
                .collect(),
        )
    }
}

#[cfg(test)]
#[path = "squad_tests.rs"]
mod tests;
