//! What `metrics.json` holds (counts only, deterministic): the drops by reason, what the
//! held-out texts dropped, the totals; and the sentence that explains an empty result from them.

use std::collections::BTreeMap;

use pipeline_text::corpus::Format;
use serde::{Deserialize, Serialize};

use crate::CleanParams;
use crate::decontam::SourceCounts;
use crate::task_text::TaskTextCounts;

/// Why a document was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    Empty,
    ShortDocument,
    FewSentences,
    LongDocument,
    /// Every paragraph held a dev or test text.
    Contaminated,
}

impl DropReason {
    pub(crate) fn key(self) -> &'static str {
        match self {
            DropReason::Empty => "empty",
            DropReason::ShortDocument => "short_document",
            DropReason::FewSentences => "too_few_sentences",
            DropReason::LongDocument => "long_document",
            DropReason::Contaminated => "contaminated",
        }
    }
}

/// Drops by reason, as `metrics.json` shows them.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Drops {
    /// Sentences shorter than `min_sentence_chars` (sentences, not documents).
    pub short_sentence: u64,
    /// Documents with no text left after normalisation.
    pub empty: u64,
    /// Documents shorter than `min_doc_chars`.
    pub short_document: u64,
    /// Documents with fewer than `min_sentences` sentences.
    pub too_few_sentences: u64,
    /// Documents longer than `max_doc_chars`.
    pub long_document: u64,
    /// Documents with nothing left once the paragraphs holding a held-out text went.
    pub contaminated: u64,
    /// Exact duplicates of a document kept earlier.
    pub duplicate: u64,
    /// Near duplicates (MinHash similarity at or above `near_dup_threshold`).
    pub near_duplicate: u64,
}

impl Drops {
    /// Counts a dropped document by its reason's key ([`DropReason::key`], `duplicate`,
    /// `near_duplicate`).
    pub(crate) fn count(&mut self, key: &str) {
        *match key {
            "empty" => &mut self.empty,
            "short_document" => &mut self.short_document,
            "too_few_sentences" => &mut self.too_few_sentences,
            "long_document" => &mut self.long_document,
            "contaminated" => &mut self.contaminated,
            "duplicate" => &mut self.duplicate,
            _ => &mut self.near_duplicate,
        } += 1;
    }
}

/// What the held-out texts dropped, as `metrics.json` shows it.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Decontamination {
    /// Held-out texts shorter than this many characters are not matched.
    pub min_chars: usize,
    /// From this many characters on, any shared passage of 1.5× it counts as a match.
    pub window: usize,
    /// Paragraphs dropped, over every task.
    pub paragraphs_dropped: u64,
    /// Per task: its files, held-out texts and the paragraphs they dropped.
    pub tasks: BTreeMap<String, DecontamTask>,
}

/// One task's held-out texts in [`Decontamination`].
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DecontamTask {
    /// The task's dev and test files, as given.
    pub files: Vec<String>,
    /// Its texts and the paragraphs they dropped.
    #[serde(flatten)]
    pub counts: SourceCounts,
}

/// A clean artifact's `metrics.json` (counts only, deterministic), written by the stage and
/// read through this type by the report. Read with `serde(default)`: a key an older stage did
/// not write reads as 0 or empty.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metrics {
    /// Corpus files read.
    pub files: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Documents read.
    pub documents_in: u64,
    /// Documents kept.
    pub documents_out: u64,
    /// Characters read.
    pub chars_in: u64,
    /// Characters kept.
    pub chars_out: u64,
    /// Sentences kept.
    pub sentences_out: u64,
    /// Sentences longer than `max_sentence_chars` that were cut into pieces.
    pub long_sentences_cut: u64,
    /// Lines that were not valid UTF-8 (skipped, listed in clean.log).
    pub invalid_utf8_lines: u64,
    /// Documents of the `paragraphs`/`wiki` formats cut by the reader's size limit.
    pub oversized_documents_cut: u64,
    /// Shards written.
    pub shards: u64,
    /// Documents (and short sentences) dropped, by reason.
    pub drops: Drops,
    /// The format each corpus file was read as, by path.
    pub formats: BTreeMap<String, Format>,
    /// Per `task_text` entry: what its train texts added (absent without task text).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub task_text: BTreeMap<String, TaskTextCounts>,
    /// Absent when no held-out text is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decontamination: Option<Decontamination>,
}

impl Metrics {
    /// Why nothing came out, from the drop counts.
    pub(crate) fn why_empty(&self, p: &CleanParams) -> String {
        let m = self;
        if m.documents_in == 0 {
            let mut s = format!(
                "the {} input file(s) hold no documents ({} bytes read)",
                m.files, m.bytes_in
            );
            if m.invalid_utf8_lines > 0 {
                s.push_str(&format!(
                    "; {} lines were not valid UTF-8 (listed in clean.log)",
                    m.invalid_utf8_lines
                ));
            }
            return s;
        }
        let d = &m.drops;
        let mut parts = Vec::new();
        let mut add = |n: u64, what: String| {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        };
        add(d.empty, "empty after normalisation".into());
        add(
            d.short_document,
            format!(
                "too short (min_doc_chars = {}, after dropping sentences under min_sentence_chars = {})",
                p.min_doc_chars, p.min_sentence_chars
            ),
        );
        add(
            d.too_few_sentences,
            format!(
                "with too few sentences (min_doc_sentences = {})",
                p.min_doc_sentences
            ),
        );
        add(
            d.long_document,
            format!("too long (max_doc_chars = {})", p.max_doc_chars),
        );
        add(
            d.contaminated,
            "made only of paragraphs that hold a dev or test text (exclude_texts_of, task_text)"
                .into(),
        );
        add(d.duplicate, "duplicates".into());
        add(
            d.near_duplicate,
            format!(
                "near-duplicates (near_dup_threshold = {})",
                p.near_dup_threshold
            ),
        );
        format!(
            "all {} documents were dropped: {}",
            m.documents_in,
            parts.join(", ")
        )
    }
}
