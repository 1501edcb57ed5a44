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
//! | `task_text` | none | fine-tuning protocols whose **train** texts join the corpus (task-adaptive pretraining): a list of the finetune stage's protocol maps, `[{task: chnsenticorp, train: …, dev: …, test: …}, {task: msra_ner, train: …, dev_fraction: 0.1, test: …}]`, each with an optional `name`; the texts are the train split exactly as finetune loads it (after `drop_eval_overlap`, `dev_fraction`, `max_train_examples`), one document per example, its texts as paragraphs |
//! | `add_task_text` | `true` | add `task_text`'s train texts (a scalar, so that a matrix axis can compare the corpus with and without them; their dev and test texts are excluded either way) |
//! | `exclude_texts_of` | none | protocols (the same map form) whose dev and evaluation texts must never enter the corpus; `task_text`'s own are excluded too |
//! | `exclude_min_chars` | `12` | held-out texts shorter than this are not matched (too common to mean a leak) |
//! | `exclude_window` | `32` | held-out texts at least this long match by any shared passage of 1.5× this many characters; shorter ones must be contained whole |
//!
//! # Task text and decontamination
//!
//! Files a `task_text` or `exclude_texts_of` entry names are task files, not corpus, even when
//! the stage's `inputs:` list them (list them there so that a change to them re-runs the stage;
//! one that is not listed gets a warning). A paragraph of the corpus (or of a task text) that
//! contains a held-out text, after both are normalised alike ([`decontam`]), is dropped and
//! counted against that task; a document with nothing else left is dropped
//! (`drops.contaminated`). Task texts are cleaned after the corpus, so a text the corpus
//! already has counts as its duplicate.
//!
//! # Output
//!
//! - `corpus-00000.txt`, `corpus-00001.txt`, …: one sentence per line, a blank line between
//!   documents;
//! - `metrics.json`: counts only (deterministic): files, documents and characters in and out,
//!   sentences out, invalid UTF-8 lines, drops by reason, the format read for each file; with
//!   `task_text`, per task what it added (`task_text`); with held-out texts, per task what they
//!   dropped (`decontamination`).
//!
//! Lines that are not valid UTF-8 are skipped and listed (file:line) in `clean.log` in the log
//! directory, with one warning. An empty result is an error that says what dropped what.
//!
//! Documents are processed in parallel (rayon) in blocks of up to 2,000 documents, and written
//! and deduplicated in input order, so the output does not depend on the number of threads.
//! Memory is bounded by a few blocks in flight plus about 1 KB per kept document for dedup.

#![warn(missing_docs)]

mod decontam;
mod metrics;
mod params;
mod read;
mod task_text;
mod writer;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use pipeline_engine::ParamError;
use pipeline_engine::stage::{Stage, StageContext};
use pipeline_text::corpus::{Document, MAX_RECORDED_INVALID};
use pipeline_text::dedup::{Deduplicator, Fingerprint, Verdict};
use pipeline_text::normalize::{NormalizeOptions, Normalizer};
use pipeline_text::sentences::SentenceSplitter;
use rayon::prelude::*;
use serde_json::{Map, Value};

use decontam::HeldOut;
pub use decontam::SourceCounts;
use metrics::DropReason;
pub use metrics::{DecontamTask, Decontamination, Drops, Metrics};
pub use params::{CleanParams, FormatRules, TaskParams, known_params};
use read::{BLOCK_DOCS, Msg, read_all};
pub use task_text::TaskEntry;
pub use task_text::TaskTextCounts;
use writer::ShardWriter;

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

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        CleanParams::parse(params).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let (params, rules, tasks) = CleanParams::parse(ctx.params)?;
        Cleaner::new(ctx, params, rules, tasks)?.run()
    }
}

/// One document after the parallel part.
struct Processed {
    chars_in: u64,
    short_sentences: u64,
    long_cut: u64,
    /// The task of each paragraph dropped for holding its held-out text.
    contaminated: Vec<usize>,
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
    tasks: TaskParams,
    held_out: HeldOut,
    metrics: Metrics,
    log: BufWriter<File>,
    writer: ShardWriter,
}

/// Where the documents of a wave come from.
#[derive(Clone, Copy)]
enum Source<'t> {
    Corpus,
    /// A `task_text` entry, by name.
    Task(&'t str),
}

impl<'a> Cleaner<'a> {
    fn new(
        ctx: &'a StageContext<'a>,
        params: CleanParams,
        rules: FormatRules,
        tasks: TaskParams,
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
            held_out: HeldOut::new(params.exclude_min_chars, params.exclude_window),
            tasks,
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
        let task_docs = self.load_tasks()?;
        let files = self.corpus_files(!task_docs.is_empty())?;
        let total: u64 = files
            .iter()
            .map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0))
            .sum();
        ctx.progress.set_length(total);
        let (files_with_invalid, first_invalid) = self.read_corpus(&files)?;
        for (name, docs) in task_docs {
            self.add_task_text(&name, docs)?;
        }
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
            bail!("{}", self.metrics.why_empty(&self.params));
        }
        self.metrics.decontamination = self.decontamination();
        self.metrics.shards = self.writer.finish()?;
        let path = ctx.out_dir.join("metrics.json");
        let mut json = serde_json::to_string_pretty(&self.metrics)?;
        json.push('\n');
        fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    /// Reads the task entries: the held-out texts of every one into the decontamination index,
    /// and (with `add_task_text`) the train texts of `task_text`'s as documents, by task.
    fn load_tasks(&mut self) -> anyhow::Result<Vec<(String, Vec<Document>)>> {
        let ctx = self.ctx;
        let entries: Vec<(&task_text::TaskEntry, bool)> = self
            .tasks
            .task_text
            .iter()
            .map(|e| (e, self.params.add_task_text))
            .chain(self.tasks.exclude_texts_of.iter().map(|e| (e, false)))
            .collect();
        let mut docs = Vec::new();
        for (entry, train) in entries {
            for warning in entry.spec.undeclared(ctx.instance, ctx.root, ctx.inputs) {
                tracing::warn!("{warning}");
            }
            let loaded = task_text::load(entry, ctx.root, train)?;
            writeln!(
                self.log,
                "task {}: {} train examples added, {} held-out texts ({})",
                loaded.name,
                loaded.train.len(),
                loaded.held_out.len(),
                loaded.files.join(", ")
            )?;
            self.held_out.add_source(
                &loaded.name,
                &loaded.files,
                loaded.held_out.iter().map(String::as_str),
                &self.normalizer,
            );
            if train {
                self.metrics.task_text.insert(
                    loaded.name.clone(),
                    TaskTextCounts {
                        files: loaded.files.clone(),
                        examples: loaded.train.len() as u64,
                        texts: loaded.train.iter().map(|f| f.len() as u64).sum(),
                        ..TaskTextCounts::default()
                    },
                );
                docs.push((loaded.name.clone(), task_text::documents(&loaded)));
            }
        }
        Ok(docs)
    }

    /// The corpus: the stage's inputs less the files the task entries read.
    fn corpus_files(&self, task_text: bool) -> anyhow::Result<Vec<PathBuf>> {
        let ctx = self.ctx;
        let all: Vec<&task_text::TaskEntry> = self
            .tasks
            .task_text
            .iter()
            .chain(&self.tasks.exclude_texts_of)
            .collect();
        let task_files = task_text::task_files(&all, ctx.root);
        let mut files: Vec<PathBuf> = ctx
            .inputs
            .iter()
            .filter(|f| !task_files.contains(&task_text::canonical(f)))
            .cloned()
            .collect();
        files.sort();
        files.dedup();
        if files.is_empty() && !task_text {
            bail!(
                "no input files: list the corpus files under `inputs:` (e.g. \"${{vars.data}}/corpus/*/*.txt\")"
            );
        }
        Ok(files)
    }

    /// Cleans the corpus files: a thread reads (and validates UTF-8) while the rayon pool
    /// cleans the previous wave. Returns the files with invalid lines, and the first such line.
    fn read_corpus(&mut self, files: &[PathBuf]) -> anyhow::Result<(u64, Option<String>)> {
        let ctx = self.ctx;
        let mut files_with_invalid = 0u64;
        let mut first_invalid: Option<String> = None;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Msg>(1);
        let rules = self.rules.clone();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let reader = {
                let (rules, format) = (&rules, self.params.format);
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
        Ok((files_with_invalid, first_invalid))
    }

    /// Cleans a task's train texts like the corpus, after it, in blocks.
    fn add_task_text(&mut self, name: &str, docs: Vec<Document>) -> anyhow::Result<()> {
        let mut docs = docs.into_iter().peekable();
        while docs.peek().is_some() {
            let wave: Vec<Vec<Document>> = (0..rayon::current_num_threads().max(1))
                .map(|_| docs.by_ref().take(BLOCK_DOCS).collect::<Vec<_>>())
                .filter(|b| !b.is_empty())
                .collect();
            self.process(wave, Source::Task(name))?;
        }
        Ok(())
    }

    /// The decontamination counts; `None` when no held-out text was configured.
    fn decontamination(&self) -> Option<Decontamination> {
        if self.held_out.sources.is_empty() {
            return None;
        }
        let tasks: BTreeMap<String, DecontamTask> = self
            .held_out
            .sources
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    DecontamTask {
                        files: s.files.clone(),
                        counts: s.counts.clone(),
                    },
                )
            })
            .collect();
        Some(Decontamination {
            min_chars: self.params.exclude_min_chars,
            window: self.params.exclude_window,
            paragraphs_dropped: tasks.values().map(|t| t.counts.paragraphs_dropped).sum(),
            tasks,
        })
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
            Msg::Wave(wave) => self.process(wave, Source::Corpus)?,
        }
        Ok(())
    }

    /// Processes blocks in parallel, then deduplicates and writes in input order.
    fn process(&mut self, wave: Vec<Vec<Document>>, source: Source<'_>) -> anyhow::Result<()> {
        let results: Vec<Vec<Processed>> = {
            let this = &*self;
            wave.par_iter()
                .map(|block| block.iter().map(|d| this.process_doc(d)).collect())
                .collect()
        };
        drop(wave);
        for p in results.into_iter().flatten() {
            for &task in &p.contaminated {
                self.held_out.count_drop(task);
            }
            let m = &mut self.metrics;
            m.documents_in += 1;
            m.chars_in += p.chars_in;
            m.drops.short_sentence += p.short_sentences;
            m.long_sentences_cut += p.long_cut;
            let verdict = match p.outcome {
                Err(reason) => Err(reason.key()),
                Ok(kept) => match self.dedup.as_mut().zip(kept.fingerprint.as_ref()) {
                    Some((dedup, fp)) => match dedup.check(fp) {
                        Verdict::Unique => Ok(kept),
                        Verdict::Duplicate => Err("duplicate"),
                        Verdict::NearDuplicate => Err("near_duplicate"),
                    },
                    None => Ok(kept),
                },
            };
            let counts = match source {
                Source::Task(name) => self.metrics.task_text.get_mut(name),
                Source::Corpus => None,
            };
            match verdict {
                Err(reason) => {
                    self.metrics.drops.count(reason);
                    if let Some(c) = counts {
                        c.chars_in += p.chars_in;
                        *c.dropped.entry(reason.to_string()).or_default() += 1;
                    }
                }
                Ok(kept) => {
                    if let Some(c) = counts {
                        c.chars_in += p.chars_in;
                        c.documents_out += 1;
                        c.chars_out += kept.chars;
                        c.sentences_out += kept.sentences;
                    }
                    let m = &mut self.metrics;
                    m.documents_out += 1;
                    m.chars_out += kept.chars;
                    m.sentences_out += kept.sentences;
                    self.writer.write(&kept.text)?;
                }
            }
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
        let mut contaminated = Vec::new();
        let mut kept_paragraphs = 0usize;
        for para in &doc.paragraphs {
            chars_in += count_chars(para);
            let norm = self.normalizer.normalize(para);
            if norm.is_empty() {
                continue;
            }
            any_text = true;
            if let Some(task) = self.held_out.find(&norm) {
                contaminated.push(task);
                continue;
            }
            kept_paragraphs += 1;
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
        } else if kept_paragraphs == 0 {
            Err(DropReason::Contaminated)
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
            contaminated,
            outcome,
        }
    }
}

/// Characters of a UTF-8 string: bytes that do not continue a character (vectorises).
fn count_chars(s: &str) -> u64 {
    s.bytes().filter(|&b| (b as i8) >= -0x40).count() as u64
}

#[cfg(test)]
mod task_tests;
#[cfg(test)]
mod tests;
