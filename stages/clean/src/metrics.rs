//! What `metrics.json` holds (counts only, deterministic): the drops by reason, what the
//! held-out texts dropped, the totals; and the sentence that explains an empty result from them.

use std::collections::BTreeMap;

use pipeline_text::corpus::Format;
use serde::Serialize;

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
#[derive(Debug, Default, Serialize)]
pub(crate) struct Drops {
    /// Sentences shorter than `min_sentence_chars` (sentences, not documents).
    pub(crate) short_sentence: u64,
    /// Documents with no text left after normalisation.
    pub(crate) empty: u64,
    pub(crate) short_document: u64,
    pub(crate) too_few_sentences: u64,
    pub(crate) long_document: u64,
    /// Documents with nothing left once the paragraphs holding a held-out text went.
    pub(crate) contaminated: u64,
    pub(crate) duplicate: u64,
    pub(crate) near_duplicate: u64,
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
#[derive(Debug, Default, Serialize)]
pub(crate) struct Decontamination {
    pub(crate) min_chars: usize,
    pub(crate) window: usize,
    /// Paragraphs dropped, over every task.
    pub(crate) paragraphs_dropped: u64,
    /// Per task: its files, held-out texts and the paragraphs they dropped.
    pub(crate) tasks: BTreeMap<String, DecontamTask>,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct DecontamTask {
    pub(crate) files: Vec<String>,
    #[serde(flatten)]
    pub(crate) counts: SourceCounts,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Metrics {
    pub(crate) files: u64,
    pub(crate) bytes_in: u64,
    pub(crate) documents_in: u64,
    pub(crate) documents_out: u64,
    pub(crate) chars_in: u64,
    pub(crate) chars_out: u64,
    pub(crate) sentences_out: u64,
    /// Sentences longer than `max_sentence_chars` that were cut into pieces.
    pub(crate) long_sentences_cut: u64,
    pub(crate) invalid_utf8_lines: u64,
    /// Documents of the `paragraphs`/`wiki` formats cut by the reader's size limit.
    pub(crate) oversized_documents_cut: u64,
    pub(crate) shards: u64,
    pub(crate) drops: Drops,
    pub(crate) formats: BTreeMap<String, Format>,
    /// Per `task_text` entry: what its train texts added (absent without task text).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) task_text: BTreeMap<String, TaskTextCounts>,
    /// Absent when no held-out text is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) decontamination: Option<Decontamination>,
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
