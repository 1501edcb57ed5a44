//! The `clean` stage kind: raw corpus files to one sentence per line, documents separated by
//! blank lines (the input format of BERT's and albert_zh's `create_pretraining_data.py`).
//!
//! Inputs are the files that the stage's `inputs:` globs match (read in sorted path order).
//! For each document: every paragraph is normalised ([`pipeline_text::normalize`]: full-width →
//! half-width, control/zero-width characters, HTML remnants, whitespace, Traditional →
//! Simplified), split into sentences ([`pipeline_text::sentences`], long ones cut at commas),
//! sentences outside the length bounds are dropped, then documents outside theirs; exact and
//! near-duplicate documents are dropped last ([`pipeline_text::dedup`]; the first occurrence in
//! input order is kept).
//!
//! # Params
//!
//! | param | default | meaning |
//! |---|---|---|
//! | `format` | `auto` | layout of the files: `lines` (one document per line), `paragraphs` (one paragraph per line, blank line between documents), `wiki` (WikiExtractor `<doc>` blocks) or `auto` (decided per file from its first 64 KiB; the choice is logged) |
//! | `formats` | none | per-file formats: `{glob: format}` matched against each input's path relative to the workspace root (e.g. `{"*/zhwiki_sample/*": wiki}`); patterns of a map must not disagree on a file, a list `[{glob: format}, …]` takes the first match; files no pattern matches get `format` |
//! | `to_simplified` | `true` | convert Traditional to Simplified Chinese (OpenCC t2s) |
//! | `min_sentence_chars` | `2` | drop shorter sentences (characters) |
//! | `max_sentence_chars` | `256` | cut longer sentences at a comma past half this length, else hard |
//! | `min_doc_chars` | `20` | drop documents with fewer characters (after the sentence filter) |
//! | `max_doc_chars` | `0` | drop documents with more characters; 0 = no maximum |
//! | `min_doc_sentences` | `1` | drop documents with fewer sentences |
//! | `dedup` | `true` | drop exact duplicate documents (and near ones, with `near_dup`) |
//! | `near_dup` | `true` | also drop near-duplicates (MinHash over character 5-shingles) |
//! | `near_dup_threshold` | `0.8` | estimated Jaccard similarity from which a document is a near-duplicate, in (0, 1] |
//! | `shard_bytes` | `67108864` | start a new output file after this many bytes (at a document boundary) |
//!
//! # Output
//!
//! - `corpus-00000.txt`, `corpus-00001.txt`, …: one sentence per line, a blank line between
//!   documents;
//! - `metrics.json`: counts only (deterministic): files, documents and characters in and out,
//!   sentences out, invalid UTF-8 lines, drops by reason, the format read for each file.
//!
//! Lines that are not valid UTF-8 are skipped and listed (file:line) in `clean.log` in the log
//! directory, with one warning. An empty result is an error that says what dropped what.
//!
//! Documents are processed in parallel (rayon) in blocks of up to 2,000 documents, and written
//! and deduplicated in input order, so the output does not depend on the number of threads.
//! Memory is bounded by a few blocks in flight plus about 1 KB per kept document for dedup.

#![warn(missing_docs)]

mod params;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use pipeline_engine::stage::{Stage, StageContext};
use pipeline_text::corpus::{
    Detection, Document, DocumentReader, Format, InvalidUtf8, MAX_RECORDED_INVALID,
};
use pipeline_text::dedup::{Deduplicator, Fingerprint, Verdict};
use pipeline_text::normalize::{NormalizeOptions, Normalizer};
use pipeline_text::sentences::SentenceSplitter;
use rayon::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

pub use params::{CleanParams, FormatRules, known_params};

/// The `clean` stage kind.
pub struct CleanStage;

impl Stage for CleanStage {
    fn kind(&self) -> &'static str {
        "clean"
    }

    fn code_version(&self) -> &'static str {
        env!("STAGE_CODE_VERSION")
    }

    fn known_params(&self) -> &'static [&'static str] {
        known_params()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), String> {
        CleanParams::parse(params).map(|_| ()).map_err(|e| e.0)
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let (params, rules) = CleanParams::parse(ctx.params)?;
        Cleaner::new(ctx, params, rules)?.run()
    }
}

/// Documents per block of parallel work.
const BLOCK_DOCS: usize = 2_000;
/// A block also ends after this much text, so that blocks of long documents stay small.
const BLOCK_BYTES: usize = 4 * 1024 * 1024;

/// Why a document was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DropReason {
    Empty,
    ShortDocument,
    FewSentences,
    LongDocument,
}

/// Drops by reason, as `metrics.json` shows them.
#[derive(Debug, Default, Serialize)]
struct Drops {
    /// Sentences shorter than `min_sentence_chars` (sentences, not documents).
    short_sentence: u64,
    /// Documents with no text left after normalisation.
    empty: u64,
    short_document: u64,
    too_few_sentences: u64,
    long_document: u64,
    duplicate: u64,
    near_duplicate: u64,
}

#[derive(Debug, Default, Serialize)]
struct Metrics {
    files: u64,
    bytes_in: u64,
    documents_in: u64,
    documents_out: u64,
    chars_in: u64,
    chars_out: u64,
    sentences_out: u64,
    /// Sentences longer than `max_sentence_chars` that were cut into pieces.
    long_sentences_cut: u64,
    invalid_utf8_lines: u64,
    /// Documents of the `paragraphs`/`wiki` formats cut by the reader's size limit.
    oversized_documents_cut: u64,
    shards: u64,
    drops: Drops,
    formats: BTreeMap<String, Format>,
}

/// One document after the parallel part.
struct Processed {
    chars_in: u64,
    short_sentences: u64,
    long_cut: u64,
    outcome: Result<Kept, DropReason>,
}

struct Kept {
    /// Sentences, each followed by `\n`.
    text: String,
    chars: u64,
    sentences: u64,
    fingerprint: Option<Fingerprint>,
}

struct Cleaner<'a> {
    ctx: &'a StageContext<'a>,
    params: CleanParams,
    rules: FormatRules,
    normalizer: Normalizer,
    splitter: SentenceSplitter,
    dedup: Option<Deduplicator>,
    metrics: Metrics,
    log: BufWriter<File>,
    writer: ShardWriter,
}

impl<'a> Cleaner<'a> {
    fn new(
        ctx: &'a StageContext<'a>,
        params: CleanParams,
        rules: FormatRules,
    ) -> anyhow::Result<Self> {
        let normalizer = Normalizer::new(NormalizeOptions {
            to_simplified: params.to_simplified,
            ..NormalizeOptions::default()
        })?;
        fs::create_dir_all(ctx.log_dir)
            .with_context(|| format!("creating the log directory {}", ctx.log_dir.display()))?;
        let log_path = ctx.log_dir.join("clean.log");
        let log = BufWriter::new(
            File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?,
        );
        let dedup = params
            .dedup
            .then(|| Deduplicator::new(params.near_dup.then_some(params.near_dup_threshold)));
        Ok(Cleaner {
            ctx,
            splitter: SentenceSplitter::new(params.max_sentence_chars),
            writer: ShardWriter::new(ctx.out_dir, params.shard_bytes),
            params,
            rules,
            normalizer,
            dedup,
            metrics: Metrics::default(),
            log,
        })
    }

    fn run(mut self) -> anyhow::Result<()> {
        let ctx = self.ctx;
        let mut files: Vec<PathBuf> = ctx.inputs.to_vec();
        files.sort();
        files.dedup();
        if files.is_empty() {
            bail!(
                "no input files: list the corpus files under `inputs:` (e.g. \"${{vars.data}}/corpus/*/*.txt\")"
            );
        }
        let total: u64 = files
            .iter()
            .map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0))
            .sum();
        ctx.progress.set_length(total);
        // A thread reads (and validates UTF-8) while the rayon pool cleans the previous wave.
        let mut files_with_invalid = 0u64;
        let mut first_invalid: Option<String> = None;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Msg>(1);
        let rules = self.rules.clone();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let reader = {
                let (rules, format, files) = (&rules, self.params.format, &files);
                scope.spawn(move || read_all(ctx, files, rules, format, tx))
            };
            let mut result = Ok(());
            for msg in rx.iter() {
                result = self.receive(msg, &mut files_with_invalid, &mut first_invalid);
                if result.is_err() {
                    // Dropping the receiver stops the reader at its next send.
                    break;
                }
            }
            drop(rx);
            let read = reader
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the corpus reader thread panicked")));
            // A reading error explains a processing one that follows from it, not the reverse.
            read.and(result)
        })?;
        if self.metrics.invalid_utf8_lines > 0 {
            // Not `ctx.log_dir`'s path: that is a temporary folder, renamed into the artifact
            // (or the failed-runs folder) when the stage ends.
            tracing::warn!(
                "{} lines of invalid UTF-8 skipped in {files_with_invalid} file(s), the first at {}; all are listed in clean.log in the stage's log folder (`pipeline show {}` prints it)",
                self.metrics.invalid_utf8_lines,
                first_invalid.as_deref().unwrap_or("?"),
                ctx.instance
            );
        }
        self.log.flush()?;
        if self.metrics.documents_out == 0 {
            bail!("{}", self.why_empty());
        }
        self.metrics.shards = self.writer.finish()?;
        let path = ctx.out_dir.join("metrics.json");
        let mut json = serde_json::to_string_pretty(&self.metrics)?;
        json.push('\n');
        fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    /// Handles one message of the reader, in order.
    fn receive(
        &mut self,
        msg: Msg,
        files_with_invalid: &mut u64,
        first_invalid: &mut Option<String>,
    ) -> anyhow::Result<()> {
        match msg {
            Msg::File {
                rel,
                format,
                detection,
            } => {
                if let Some(d) = detection {
                    tracing::info!("{rel}: read as `{}` ({})", d.format, d.reason);
                    writeln!(self.log, "{rel}: format auto → {} ({})", d.format, d.reason)?;
                } else {
                    writeln!(self.log, "{rel}: format {format}")?;
                }
                self.metrics.formats.insert(rel, format);
                self.metrics.files += 1;
            }
            Msg::FileDone {
                rel,
                bytes,
                split_documents,
                invalid,
            } => {
                self.metrics.bytes_in += bytes;
                self.metrics.oversized_documents_cut += split_documents;
                if invalid.count > 0 {
                    *files_with_invalid += 1;
                    if first_invalid.is_none() {
                        *first_invalid = invalid.lines.first().map(|l| format!("{rel}:{l}"));
                    }
                    self.metrics.invalid_utf8_lines += invalid.count;
                    for line in &invalid.lines {
                        writeln!(self.log, "{rel}:{line}: invalid UTF-8, line skipped")?;
                    }
                    if invalid.count > invalid.lines.len() as u64 {
                        writeln!(
                            self.log,
                            "{rel}: … and {} more invalid lines (only the first {MAX_RECORDED_INVALID} are listed)",
                            invalid.count - invalid.lines.len() as u64
                        )?;
                    }
                }
            }
            Msg::Wave(wave) => self.process(wave)?,
        }
        Ok(())
    }

    /// Processes blocks in parallel, then deduplicates and writes in input order.
    fn process(&mut self, wave: Vec<Vec<Document>>) -> anyhow::Result<()> {
        let results: Vec<Vec<Processed>> = {
            let this = &*self;
            wave.par_iter()
                .map(|block| block.iter().map(|d| this.process_doc(d)).collect())
                .collect()
        };
        drop(wave);
        for p in results.into_iter().flatten() {
            let m = &mut self.metrics;
            m.documents_in += 1;
            m.chars_in += p.chars_in;
            m.drops.short_sentence += p.short_sentences;
            m.long_sentences_cut += p.long_cut;
            let kept = match p.outcome {
                Ok(k) => k,
                Err(reason) => {
                    *match reason {
                        DropReason::Empty => &mut m.drops.empty,
                        DropReason::ShortDocument => &mut m.drops.short_document,
                        DropReason::FewSentences => &mut m.drops.too_few_sentences,
                        DropReason::LongDocument => &mut m.drops.long_document,
                    } += 1;
                    continue;
                }
            };
            if let (Some(dedup), Some(fp)) = (&mut self.dedup, &kept.fingerprint) {
                match dedup.check(fp) {
                    Verdict::Unique => {}
                    Verdict::Duplicate => {
                        m.drops.duplicate += 1;
                        continue;
                    }
                    Verdict::NearDuplicate => {
                        m.drops.near_duplicate += 1;
                        continue;
                    }
                }
            }
            m.documents_out += 1;
            m.chars_out += kept.chars;
            m.sentences_out += kept.sentences;
            self.writer.write(&kept.text)?;
        }
        Ok(())
    }

    /// Everything about one document that does not depend on the others.
    fn process_doc(&self, doc: &Document) -> Processed {
        let p = &self.params;
        let mut chars_in = 0u64;
        let mut short_sentences = 0u64;
        let mut long_cut = 0u64;
        let mut text = String::new();
        let mut chars = 0u64;
        let mut sentences = 0u64;
        let mut any_text = false;
        for para in &doc.paragraphs {
            chars_in += count_chars(para);
            let norm = self.normalizer.normalize(para);
            if norm.is_empty() {
                continue;
            }
            any_text = true;
            let mut pieces = Vec::new();
            long_cut += self.splitter.split_into(&norm, &mut pieces) as u64;
            for s in &pieces {
                let n = count_chars(s);
                if (n as usize) < p.min_sentence_chars {
                    short_sentences += 1;
                    continue;
                }
                text.push_str(s);
                text.push('\n');
                chars += n;
                sentences += 1;
            }
        }
        let outcome = if !any_text {
            Err(DropReason::Empty)
        } else if (chars as usize) < p.min_doc_chars || sentences == 0 {
            Err(DropReason::ShortDocument)
        } else if (sentences as usize) < p.min_doc_sentences {
            Err(DropReason::FewSentences)
        } else if p.max_doc_chars > 0 && chars as usize > p.max_doc_chars {
            Err(DropReason::LongDocument)
        } else {
            let fingerprint = p.dedup.then(|| Fingerprint::new(&text, p.near_dup));
            Ok(Kept {
                text,
                chars,
                sentences,
                fingerprint,
            })
        };
        Processed {
            chars_in,
            short_sentences,
            long_cut,
            outcome,
        }
    }

    /// Why nothing came out, from the drop counts.
    fn why_empty(&self) -> String {
        let m = &self.metrics;
        let p = &self.params;
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

/// What the reader thread sends, in input order.
enum Msg {
    /// A file is opened (and read as `format`).
    File {
        rel: String,
        format: Format,
        detection: Option<Detection>,
    },
    /// Blocks of documents to clean.
    Wave(Vec<Vec<Document>>),
    /// A file has been read.
    FileDone {
        rel: String,
        bytes: u64,
        split_documents: u64,
        invalid: InvalidUtf8,
    },
}

/// The path as shown in logs and metrics and matched by `formats`: relative to the workspace
/// root when inside it.
fn display_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Reads every file into blocks of documents, sent in waves of a few blocks per thread.
/// Returns early, without error, when the receiver is gone.
fn read_all(
    ctx: &StageContext,
    files: &[PathBuf],
    rules: &FormatRules,
    default: Format,
    tx: std::sync::mpsc::SyncSender<Msg>,
) -> anyhow::Result<()> {
    let wave_blocks = (2 * rayon::current_num_threads()).max(4);
    let mut block: Vec<Document> = Vec::new();
    let mut block_bytes = 0usize;
    let mut wave: Vec<Vec<Document>> = Vec::new();
    macro_rules! send {
        ($msg:expr) => {
            if tx.send($msg).is_err() {
                return Ok(());
            }
        };
    }
    for path in files {
        let rel = display_path(ctx.root, path);
        let format = rules.format_for(Path::new(&rel), default)?;
        let mut reader = DocumentReader::open(path, format)
            .with_context(|| format!("opening the input {}", path.display()))?;
        send!(Msg::File {
            rel: rel.clone(),
            format: reader.format(),
            detection: reader.detection().cloned(),
        });
        ctx.progress.set_message(rel.clone());
        let mut reported = 0u64;
        while let Some(doc) = reader.next() {
            let doc = doc.with_context(|| {
                format!(
                    "reading {} after line {}",
                    path.display(),
                    reader.lines_read()
                )
            })?;
            block_bytes += doc.text_len();
            block.push(doc);
            if block.len() >= BLOCK_DOCS || block_bytes >= BLOCK_BYTES {
                wave.push(std::mem::take(&mut block));
                block_bytes = 0;
                ctx.progress.inc(reader.bytes_read() - reported);
                reported = reader.bytes_read();
                if wave.len() >= wave_blocks {
                    send!(Msg::Wave(std::mem::take(&mut wave)));
                }
            }
        }
        ctx.progress.inc(reader.bytes_read() - reported);
        send!(Msg::FileDone {
            rel,
            bytes: reader.bytes_read(),
            split_documents: reader.split_documents(),
            invalid: reader.invalid_utf8().clone(),
        });
    }
    if !block.is_empty() {
        wave.push(block);
    }
    if !wave.is_empty() {
        send!(Msg::Wave(wave));
    }
    Ok(())
}

/// Characters of a UTF-8 string: bytes that do not continue a character (vectorises).
fn count_chars(s: &str) -> u64 {
    s.bytes().filter(|&b| (b as i8) >= -0x40).count() as u64
}

/// Writes documents into `corpus-NNNNN.txt` files, a new one after `shard_bytes` bytes.
struct ShardWriter {
    dir: PathBuf,
    shard_bytes: u64,
    index: u64,
    file: Option<(PathBuf, BufWriter<File>)>,
    bytes: u64,
}

impl ShardWriter {
    fn new(dir: &Path, shard_bytes: u64) -> Self {
        ShardWriter {
            dir: dir.to_path_buf(),
            shard_bytes,
            index: 0,
            file: None,
            bytes: 0,
        }
    }

    /// Writes one document (its sentences, each ending in `\n`).
    fn write(&mut self, doc: &str) -> anyhow::Result<()> {
        if self.file.is_some() && self.bytes >= self.shard_bytes {
            self.close()?;
        }
        let separator: &[u8] = if self.file.is_some() { b"\n" } else { b"" };
        if self.file.is_none() {
            let path = self.dir.join(format!("corpus-{:05}.txt", self.index));
            let f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            self.index += 1;
            self.bytes = 0;
            self.file = Some((path, BufWriter::with_capacity(1 << 20, f)));
        }
        if let Some((path, out)) = &mut self.file {
            out.write_all(separator)
                .and_then(|_| out.write_all(doc.as_bytes()))
                .with_context(|| format!("writing {}", path.display()))?;
            self.bytes += (separator.len() + doc.len()) as u64;
        }
        Ok(())
    }

    fn close(&mut self) -> anyhow::Result<()> {
        if let Some((path, mut out)) = self.file.take() {
            out.flush()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// Closes the last shard; returns the number of shards.
    fn finish(mut self) -> anyhow::Result<u64> {
        self.close()?;
        Ok(self.index)
    }
}

#[cfg(test)]
mod tests;
