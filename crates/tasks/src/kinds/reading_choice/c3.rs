//! C3 (Chinese multiple-choice reading comprehension, dialogues and mixed-genre texts):
//! `../shared/datasets/c3/dev.json`.
//!
//! ```json
//! [[["男：听说你们公司要派你去南方工作?", "女：是呀，…"],
//!   [{"question": "他们在谈论什么?", "choice": ["旅行", "坏境", "工作", "家庭"], "answer": "工作"}],
//!   "47-275"], …]
//! ```
//!
//! A document is `[context lines, questions, id]`; the answer is the text of the right choice.
//! As CLUE's C3 baseline (`CLUEbenchmark/CLUE`, `baselines/models_pytorch/mrc_pytorch/run_c3.py`,
//! `c3Processor`) builds it: the context is the lines joined by `\n`, and a question with fewer
//! than [`C3_CHOICES`] choices is padded with empty choices up to 4. CLUE lets the model score
//! the padding like any choice; here [`C3Example::mask`] marks the real ones, so that the head
//! can give the padding −∞ and it is never predicted. (CLUE also lower-cases every text; that is
//! the tokenizer's business here, as for the other tasks.)
//!
//! Read as a stream, one document at a time. Bad input never stops the reader; it is counted by
//! cause with the question's id (`DOCID#N`, N the question's index in its document): a document
//! that is not `[array, array, string]` (`malformed_document`, counted once), a context line
//! that is not a string (`missing_field`), an empty context, question or choice
//! (`empty_context`, `empty_question`, `empty_choice`), fewer than 2 or more than 4 choices
//! (`too_few_choices`, `too_many_choices`), an answer that is none of the choices
//! (`answer_not_in_choices`) or more than one (`ambiguous_answer`). Texts are trimmed; a choice
//! may repeat another that is not the answer (the dev set has one such question).
//!
//! Document ids are not unique in the shared file (2,674 documents, 2,648 ids: the dialogue and
//! mixed-genre subsets reuse numbers), so documents are told apart by their position, and the
//! split groups by document (with documents of identical context merged).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::BufReader;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::group_split::{GroupSplit, GroupSplitError, split_by_group};
use crate::json_stream::{OpenError, for_each_element, open_data_file};
use crate::protocol::SplitExample;
use crate::tally::Tally;

/// Choices per question after padding (C3's maximum).
pub const C3_CHOICES: usize = 4;

/// The fixed protocol of C3 here: its only labelled split (dev) cut 80 / 10 / 10 by document.
/// This is the share of documents held out for dev (model selection).
pub const C3_DEV_FRACTION: f64 = 0.1;
/// The share of documents held out as the evaluation set `test` (see [`C3_DEV_FRACTION`]).
pub const C3_TEST_FRACTION: f64 = 0.1;

/// Everything that stops a C3 file from being read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum C3Error {
    /// The file cannot be opened or read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file, as the path given to the reader displays.
        path: String,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
    /// Not JSON, not a top-level array, or a file the reader refuses (not a regular file,
    /// larger than 1 GiB).
    #[error("{path}: not C3 JSON: {message}")]
    Format {
        /// The file, as the path given to the reader displays.
        path: String,
        /// What is wrong: serde's message with line and column, or why the file is refused.
        message: String,
    },
    /// Every question was dropped (or the file holds none).
    #[error("{path} has no usable question ({read} read: {counts})")]
    NoQuestions {
        /// The file, as the path given to the reader displays.
        path: String,
        /// Questions read (a malformed document counts as one).
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
        /// Questions read.
        read: usize,
        /// `bad` as a percentage of `read`.
        pct: f64,
        /// The `max_bad_fraction` exceeded, a share (0.01 is 1 %).
        max: f64,
        /// Why they were dropped: [`Tally::summary`] of the report's `dropped`.
        counts: String,
    },
    /// The documents cannot be split as asked (too few of them for the fractions, …).
    #[error("{path}: {source}")]
    Split {
        /// The file, as the path given to the reader displays.
        path: String,
        /// What the split refused.
        #[source]
        source: GroupSplitError,
    },
}

/// Why a question was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum C3Issue {
    /// A document that is not `[context lines, questions, id]`; counted once, as one question.
    MalformedDocument,
    /// A context line that is not a string, or a question without its `question`, `choice`
    /// (an array of strings) or `answer` string.
    MissingField,
    /// A context that is empty once trimmed.
    EmptyContext,
    /// A question that is empty once trimmed.
    EmptyQuestion,
    /// A choice that is empty once trimmed.
    EmptyChoice,
    /// Fewer than 2 choices.
    TooFewChoices,
    /// More than [`C3_CHOICES`] choices.
    TooManyChoices,
    /// An answer that is none of the choices' texts.
    AnswerNotInChoices,
    /// An answer that is the text of more than one choice.
    AmbiguousAnswer,
}

impl fmt::Display for C3Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self).ok();
        f.write_str(s.as_ref().and_then(Value::as_str).unwrap_or("?"))
    }
}

/// One question, its choices padded to [`C3_CHOICES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct C3Example {
    /// `DOCID#N`.
    pub id: String,
    /// The document's position in the file.
    pub document: usize,
    /// The context lines joined by `\n`.
    pub context: String,
    /// The question, trimmed, never empty.
    pub question: String,
    /// The real choices first, then empty strings.
    pub choices: [String; C3_CHOICES],
    /// How many choices are real (2–4).
    pub real_choices: usize,
    /// Index of the right choice (< `real_choices`).
    pub answer: usize,
    /// Which file of a protocol it came from (0 as read; the protocol numbers its files).
    pub file: usize,
}

impl C3Example {
    /// `true` for the real choices, `false` for the padding (never to be predicted).
    pub fn mask(&self) -> [bool; C3_CHOICES] {
        std::array::from_fn(|i| i < self.real_choices)
    }
}

/// The predicted choice: the highest score among the first `real_choices` (the padding is
/// never chosen, whatever its score; the first on a tie; NaN loses).
pub fn best_real_choice(scores: &[f32], real_choices: usize) -> usize {
    let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    let real = &scores[..real_choices.min(scores.len())];
    let mut best = 0;
    for (i, &s) in real.iter().enumerate().skip(1) {
        if key(s) > key(real[best]) {
            best = i;
        }
    }
    best
}

/// What the reader saw; serialisable for metrics.json.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct C3Report {
    /// The file, as the path given to the reader displays.
    pub path: String,
    /// Elements of the top-level array, malformed ones included.
    pub documents_read: usize,
    /// Documents with at least one kept question.
    pub documents: usize,
    /// Questions in the file (a malformed document counts as one).
    pub questions_read: usize,
    /// Questions kept: the examples.
    pub questions: usize,
    /// The questions dropped, by cause with their ids.
    pub dropped: Tally<C3Issue>,
    /// Kept questions by number of real choices (`{"2": 170, "3": 465, "4": 3181}`).
    pub by_choices: BTreeMap<usize, usize>,
    /// Kept questions by the answer's position.
    pub by_answer: [usize; C3_CHOICES],
}

/// A C3 file's kept questions and what its reader counted.
#[derive(Debug, Clone)]
pub struct C3File {
    /// The kept questions, in file order.
    pub examples: Vec<C3Example>,
    /// What the reader saw.
    pub report: C3Report,
}

/// Reads a C3 file (see the module doc for what is dropped and counted).
pub fn read_c3(path: &Path) -> Result<C3File, C3Error> {
    let name = path.display().to_string();
    let file = open_data_file(path).map_err(|e| match e {
        OpenError::Io(source) => C3Error::Io {
            path: name.clone(),
            source,
        },
        OpenError::Refused(message) => C3Error::Format {
            path: name.clone(),
            message,
        },
    })?;
    let mut f = C3File {
        examples: Vec::new(),
        report: C3Report {
            path: name.clone(),
            documents_read: 0,
            documents: 0,
            questions_read: 0,
            questions: 0,
            dropped: Tally::default(),
            by_choices: BTreeMap::new(),
            by_answer: [0; C3_CHOICES],
        },
    };
    for_each_element(BufReader::new(file), None, |doc| f.document(doc)).map_err(|e| {
        C3Error::Format {
            path: name.clone(),
            message: e.to_string(),
        }
    })?;
    if f.examples.is_empty() {
        return Err(C3Error::NoQuestions {
            path: name,
            read: f.report.questions_read,
            counts: f.report.dropped.summary(),
        });
    }
    Ok(f)
}

impl C3File {
    /// Fails when more than `max_bad_fraction` of the questions were dropped.
    pub fn check_bad_fraction(&self, max_bad_fraction: f64) -> Result<(), C3Error> {
        let r = &self.report;
        let pct = 100.0 * r.dropped.total as f64 / r.questions_read.max(1) as f64;
        if pct > 100.0 * max_bad_fraction {
            return Err(C3Error::TooManyBad {
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

    /// Each example's group: its document, documents with the same context merged.
    pub fn groups(&self) -> Vec<usize> {
        let mut first: HashMap<&str, usize> = HashMap::new();
        self.examples
            .iter()
            .map(|e| *first.entry(e.context.as_str()).or_insert(e.document))
            .collect()
    }

    /// The seeded split by document (indices into [`C3File::examples`]); the protocol here is
    /// `split(C3_DEV_FRACTION, C3_TEST_FRACTION, split_seed)`, 80 / 10 / 10.
    pub fn split(&self, dev: f64, test: f64, seed: u64) -> Result<GroupSplit, C3Error> {
        split_by_group(&self.groups(), dev, test, seed).map_err(|source| C3Error::Split {
            path: self.report.path.clone(),
            source,
        })
    }

    fn document(&mut self, doc: Value) {
        let index = self.report.documents_read;
        self.report.documents_read += 1;
        let parts = match doc {
            Value::Array(a) if a.len() == 3 => Some(a),
            _ => None,
        };
        let Some(
            [
                Value::Array(lines),
                Value::Array(questions),
                Value::String(id),
            ],
        ) = parts.and_then(|p| <[Value; 3]>::try_from(p).ok())
        else {
            self.report.questions_read += 1;
            let id = format!("document {index}");
            let detail = "not [context lines, questions, id]";
            self.report
                .dropped
                .record(C3Issue::MalformedDocument, &id, detail);
            return;
        };
        let context: Option<Vec<&str>> = lines.iter().map(Value::as_str).collect();
        let context = context.map(|c| c.join("\n"));
        let before = self.examples.len();
        for (n, q) in questions.iter().enumerate() {
            self.report.questions_read += 1;
            let qid = format!("{id}#{n}");
            match parse_question(context.as_deref(), q) {
                Ok((question, choices, answer)) => {
                    self.keep(&qid, index, context.clone(), question, choices, answer)
                }
                Err((issue, detail)) => self.report.dropped.record(issue, &qid, detail),
            }
        }
        if self.examples.len() > before {
            self.report.documents += 1;
        }
    }

    fn keep(
        &mut self,
        id: &str,
        document: usize,
        context: Option<String>,
        question: String,
        real: Vec<String>,
        answer: usize,
    ) {
        let real_choices = real.len();
        let mut it = real.into_iter();
        let choices = std::array::from_fn(|_| it.next().unwrap_or_default());
        *self.report.by_choices.entry(real_choices).or_default() += 1;
        self.report.by_answer[answer] += 1;
        self.report.questions += 1;
        self.examples.push(C3Example {
            id: id.to_string(),
            document,
            context: context.unwrap_or_default(),
            question,
            choices,
            real_choices,
            answer,
            file: 0,
        });
    }
}

type Parsed = (String, Vec<String>, usize);

/// One question of a document: (question, real choices, answer index), or why it is bad.
fn parse_question(context: Option<&str>, q: &Value) -> Result<Parsed, (C3Issue, String)> {
    let bad = |issue, detail: &str| Err((issue, detail.to_string()));
    match context {
        None => return bad(C3Issue::MissingField, "a context line is not a string"),
        Some(c) if c.trim().is_empty() => return bad(C3Issue::EmptyContext, "empty context"),
        Some(_) => {}
    }
    let text = |key: &str| q.get(key).and_then(Value::as_str).map(str::trim);
    let Some(question) = text("question") else {
        return bad(C3Issue::MissingField, "no `question` string");
    };
    if question.is_empty() {
        return bad(C3Issue::EmptyQuestion, "empty question");
    }
    let choices: Option<Vec<&str>> = q
        .get("choice")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|c| c.as_str().map(str::trim)).collect());
    let Some(choices) = choices else {
        return bad(C3Issue::MissingField, "no `choice` array of strings");
    };
    let Some(answer) = text("answer") else {
        return bad(C3Issue::MissingField, "no `answer` string");
    };
    if choices.len() < 2 {
        return bad(
            C3Issue::TooFewChoices,
            &format!("{} choice(s)", choices.len()),
        );
    }
    if choices.len() > C3_CHOICES {
        let detail = format!("{} choices, more than {C3_CHOICES}", choices.len());
        return bad(C3Issue::TooManyChoices, &detail);
    }
    if choices.iter().any(|c| c.is_empty()) {
        return bad(C3Issue::EmptyChoice, "an empty choice");
    }
    let hits: Vec<usize> = (0..choices.len())
        .filter(|&i| choices[i] == answer)
        .collect();
    match hits[..] {
        [i] => Ok((
            question.to_string(),
            choices.iter().map(|c| c.to_string()).collect(),
            i,
        )),
        [] => bad(C3Issue::AnswerNotInChoices, &format!("answer `{answer}`")),
        _ => bad(
            C3Issue::AmbiguousAnswer,
            &format!("`{answer}` is {} choices", hits.len()),
        ),
    }
}

/// A C3 question's class is its answer's position; its texts the choices as padded.
impl SplitExample for C3Example {
    fn push_labels(&self, out: &mut Vec<usize>) {
        out.push(self.answer);
    }

    fn stratum(&self) -> usize {
        self.answer
    }

    fn texts_key(&self) -> String {
        let choices = self.choices.join("\t");
        format!("{}\t{}\t{choices}", self.context, self.question)
    }

    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>> {
        // The context, the question and the real choices, padding left out.
        Some(
            examples
                .iter()
                .map(|e| {
                    [e.context.clone(), e.question.clone()]
                        .into_iter()
                        .chain(e.choices[..e.real_choices].iter().cloned())
                        .collect()
                })
                .collect(),
        )
    }
}

#[cfg(test)]
#[path = "c3_tests.rs"]
mod tests;
