//! The `mask` stage kind: the clean corpus and a vocabulary in, ALBERT pretraining instances out,
//! as Arrow shards (schema in `crates/shards/SCHEMA.md`).
//!
//! Deps: a `clean` artifact (`*.txt`, one sentence a line, a blank line between documents) and a
//! `vocab` artifact (`vocab.txt` + `tokenizer.json`). Params, with albert_zh's defaults:
//!
//! | param | default | what |
//! |---|---|---|
//! | `max_seq_length` | 128 | tokens per instance, [CLS] and two [SEP] included |
//! | `max_predictions_per_seq` | 20 | at most this many masked positions |
//! | `masked_lm_prob` | 0.15 | share of tokens to mask, in (0, 1) |
//! | `short_seq_prob` | 0.1 | how often the target length is drawn in [2, max) |
//! | `max_ngram` | 3 | longest masked span in words; p(n) ∝ 1/n |
//! | `whole_word` | true | mask whole jieba words (and whole `##` words) |
//! | `dupe_factor` | 5 | passes over the corpus, each with different masks |
//! | `seed` | 12345 | everything random derives from it and the document's index |
//! | `eval_fraction` | 0.02 | share of documents held out for the eval shard (one pass) |
//! | `instances_per_shard` | 65536 | rows per Arrow file |
//! | `pack` | false | pack short documents: consecutive documents of a split (in corpus order, within a block of 2,048) are joined until they hold `max_seq_length − 3` tokens, then cut into instances as one document, so that a short document no longer makes a short, mostly padded instance; an instance may then hold text of two documents (RoBERTa's FULL-SENTENCES packing), but segments A and B always meet inside one of them: the cut is never at a document boundary, and trimming never takes the last token of the document they meet in, so that the sentence order SOP asks for is one a document gives |
//!
//! Output: `shard-00000.arrow`… (training: one masking pass a shard, the passes' files numbered
//! in turn), `eval-00000.arrow`… (held-out documents) and
//! `metrics.json` (with each split's `padding_fraction`: the share of its instances'
//! `max_seq_length` slots that are padding, and its `no_context_floor`: the MLM accuracy and
//! loss a model reaches without using context, see [`floor`]; and its `sop_floor`: the SOP
//! accuracy of reading only the punctuation at the segments' edges, see [`sop_floor`]). The output depends only on the inputs and params, never on the number of
//! threads: documents are processed in fixed blocks, each with its own seeded RNG, and written
//! in corpus order.

#![warn(missing_docs)]

pub mod floor;
pub mod instances;
mod pairs;
mod read;
mod report;
pub mod sop_floor;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use pipeline_engine::stage::{Stage, StageContext};
pub use pipeline_params::ParamError;
use pipeline_shards::ShardWriter;
use pipeline_shards::rng::splitmix64;
use pipeline_text::vocab::Vocab;
use pipeline_text::wordpiece::{TokenizeWithOffsets, load_tokenizer};
use pipeline_text::words::WordSegmenter;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value};

use instances::{MaskStats, Recipe, Specials, TokenizedDoc, instances_from_document};
use read::DocReader;
pub use report::{MaskReport, SplitReport};

/// The `mask` stage kind.
pub struct MaskStage;

/// The params (see the crate documentation for what each does), with their defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct MaskConfig {
    /// Tokens per instance, `[CLS]` and two `[SEP]` included.
    pub max_seq_length: usize,
    /// At most this many masked positions.
    pub max_predictions_per_seq: usize,
    /// Share of tokens to mask, in (0, 1).
    pub masked_lm_prob: f64,
    /// How often the target length is drawn in [2, max).
    pub short_seq_prob: f64,
    /// Longest masked span in words.
    pub max_ngram: usize,
    /// Mask whole jieba words (and whole `##` words).
    pub whole_word: bool,
    /// Passes over the corpus, each with different masks.
    pub dupe_factor: usize,
    /// Everything random derives from it and the document's index.
    pub seed: u64,
    /// Share of documents held out for the eval shard.
    pub eval_fraction: f64,
    /// Rows per Arrow file.
    pub instances_per_shard: usize,
    /// Join consecutive short documents of a split into one before cutting instances.
    pub pack: bool,
}

impl Default for MaskConfig {
    fn default() -> Self {
        MaskConfig {
            max_seq_length: 128,
            max_predictions_per_seq: 20,
            masked_lm_prob: 0.15,
            short_seq_prob: 0.1,
            max_ngram: 3,
            whole_word: true,
            dupe_factor: 5,
            seed: 12345,
            eval_fraction: 0.02,
            instances_per_shard: 65536,
            pack: false,
        }
    }
}

/// The params the kind takes: [`MaskConfig`]'s fields.
fn params() -> &'static [&'static str] {
    pipeline_params::struct_fields::<MaskConfig>()
}

impl MaskConfig {
    /// The params, read and checked.
    pub fn from_params(params: &Map<String, Value>) -> Result<MaskConfig, ParamError> {
        // In the clean and vocab stages' words: "param `key`: serde's message".
        let c: MaskConfig = pipeline_params::from_params(params, |_| "")?;
        if c.max_seq_length < 5 {
            return Err(format!(
                "max_seq_length = {} is too small: [CLS] A [SEP] B [SEP] needs at least 5 tokens",
                c.max_seq_length
            )
            .into());
        }
        if !(c.masked_lm_prob > 0.0 && c.masked_lm_prob < 1.0) {
            return Err(format!(
                "masked_lm_prob = {} must be in (0, 1) (albert_zh uses 0.15)",
                c.masked_lm_prob
            )
            .into());
        }
        if !(0.0..=1.0).contains(&c.short_seq_prob) {
            return Err(format!("short_seq_prob = {} must be in [0, 1]", c.short_seq_prob).into());
        }
        if !(0.0..1.0).contains(&c.eval_fraction) {
            return Err(format!("eval_fraction = {} must be in [0, 1)", c.eval_fraction).into());
        }
        for (name, v) in [
            ("max_predictions_per_seq", c.max_predictions_per_seq),
            ("max_ngram", c.max_ngram),
            ("dupe_factor", c.dupe_factor),
            ("instances_per_shard", c.instances_per_shard),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1").into());
            }
        }
        Ok(c)
    }

    fn recipe(&self) -> Recipe {
        Recipe {
            max_seq_length: self.max_seq_length,
            max_predictions_per_seq: self.max_predictions_per_seq,
            masked_lm_prob: self.masked_lm_prob,
            short_seq_prob: self.short_seq_prob,
            max_ngram: self.max_ngram,
            pack: self.pack,
        }
    }
}

impl Stage for MaskStage {
    fn kind(&self) -> &'static str {
        "mask"
    }

    fn code_version(&self) -> &'static str {
        env!("STAGE_CODE_VERSION")
    }

    fn known_params(&self) -> &'static [&'static str] {
        params()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        MaskConfig::from_params(params).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let config = MaskConfig::from_params(ctx.params)?;
        let clean = ctx.dep("clean").context(
            "the mask stage needs a `clean` dep (the corpus) and a `vocab` dep: add `deps: [clean, vocab]`",
        )?;
        let vocab_dir = ctx
            .dep("vocab")
            .context("the mask stage needs a `vocab` dep: add `deps: [clean, vocab]`")?;
        let (vocab, tokenizer) = load_tokenizer(&vocab_dir.dir)
            .with_context(|| format!("loading the vocabulary in {}", vocab_dir.dir.display()))?;
        let files = corpus_files(&clean.dir)?;
        let total_bytes: u64 = files
            .iter()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum();
        ctx.progress.set_length(total_bytes);
        ctx.progress.set_message("masking");
        let masker = Masker::new(config.clone(), vocab, tokenizer)?;
        let report = masker.run(&files, ctx.out_dir, |bytes| ctx.progress.inc(bytes))?;
        if report.train.instances == 0 {
            bail!(
                "no training instances: the corpus in {} has {} documents and {} sentences; \
                 every document was too short or held out (eval_fraction = {})",
                clean.dir.display(),
                report.documents,
                report.sentences,
                config.eval_fraction
            );
        }
        // Which corpus the shards were cut from, so that what trains on them can say so.
        let record = report.metrics(&config, Some(clean.instance.clone()))?;
        std::fs::write(
            ctx.out_dir.join("metrics.json"),
            serde_json::to_string_pretty(&record)? + "\n",
        )?;
        Ok(())
    }
}

/// The `.txt` files of a clean artifact, in name order.
pub fn corpus_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the clean artifact {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "the clean artifact {} has no .txt corpus files",
            dir.display()
        );
    }
    Ok(files)
}

/// Documents are read and processed in blocks of this many: enough to keep every core busy,
/// few enough that memory stays flat whatever the corpus size.
const BLOCK_DOCS: usize = 2048;

/// The masking pipeline without the engine around it (the benchmark and tests call it).
pub struct Masker {
    config: MaskConfig,
    vocab: Arc<Vocab>,
    tokenizer: Box<dyn TokenizeWithOffsets>,
    words: Option<WordSegmenter>,
    specials: Specials,
}

impl Masker {
    /// A masker with `config`'s recipe, `vocab`'s special ids and `tokenizer`.
    pub fn new(
        config: MaskConfig,
        vocab: Arc<Vocab>,
        tokenizer: Box<dyn TokenizeWithOffsets>,
    ) -> anyhow::Result<Masker> {
        let special = [
            vocab.pad_id(),
            vocab.unk_id(),
            vocab.cls_id(),
            vocab.sep_id(),
            vocab.mask_id(),
        ];
        let random_pool: Vec<u32> = (0..vocab.len() as u32)
            .filter(|id| {
                let t = vocab.token(*id);
                !(special.contains(id) || t.starts_with('[') && t.ends_with(']'))
            })
            .collect();
        if random_pool.is_empty() {
            bail!("the vocabulary has no ordinary tokens besides the special ones");
        }
        let mut sentence_final: Vec<u32> = sop_floor::SENTENCE_FINAL
            .iter()
            .filter_map(|mark| vocab.id(mark))
            .collect();
        sentence_final.sort_unstable();
        sentence_final.dedup();
        let specials = Specials {
            cls: vocab.cls_id(),
            sep: vocab.sep_id(),
            mask: vocab.mask_id(),
            random_pool,
            sentence_final,
        };
        let words = config.whole_word.then(WordSegmenter::new);
        Ok(Masker {
            config,
            vocab,
            tokenizer,
            words,
            specials,
        })
    }

    /// Masks the corpus `files` into shards in `out`; `progress` gets the bytes read.
    pub fn run(
        &self,
        files: &[PathBuf],
        out: &Path,
        progress: impl Fn(u64),
    ) -> anyhow::Result<MaskReport> {
        let mut meta = self.shard_metadata();
        let per_shard = self.config.instances_per_shard;
        let mut train = self.pass_writers(out, &meta)?;
        meta.insert("split".into(), "eval".into());
        let mut eval = ShardWriter::create(out, "eval", per_shard, meta)?;
        let mut report = MaskReport {
            vocab_size: self.vocab.len(),
            ..MaskReport::default()
        };
        let mut reader = DocReader::new(files);
        let mut first_doc = 0u64;
        while let Some(block) = reader.next_block(BLOCK_DOCS)? {
            let docs: Vec<Tokenized> = block
                .docs
                .par_iter()
                .enumerate()
                .map(|(i, doc)| self.tokenize(first_doc + i as u64, doc))
                .collect();
            let packs = self.packs(&docs);
            let results: Vec<DocResult> = packs
                .par_iter()
                .map(|members| self.mask_pack(first_doc, members, &docs))
                .collect();
            first_doc += block.docs.len() as u64;
            self.write_block(&docs, &results, &mut train, &mut eval, &mut report)?;
            progress(block.bytes);
        }
        let mut files = Vec::new();
        for writer in train {
            files.extend(writer.finish()?.into_iter().map(|s| s.file));
        }
        files.sort();
        report.train.shards = files;
        report.eval.shards = eval.finish()?.into_iter().map(|s| s.file).collect();
        Ok(report)
    }

    /// One training-shard writer per masking pass, their files numbered in turn
    /// (`shard-00000` is pass 0's first, `shard-00001` pass 1's first, …).
    ///
    /// Why: the trainer shuffles the order of the shards and the rows within one shard, not
    /// across shards (one shard decoded at a time), and google's script shuffles every instance
    /// of every pass together, which needs the whole corpus in memory. With one writer for all
    /// passes, a block's passes landed in the same shard, so a shuffled shard repeated each of
    /// its texts `dupe_factor` times within a few hundred steps; now a shard holds each text
    /// once, and its other maskings come in other shards.
    fn pass_writers(
        &self,
        out: &Path,
        meta: &BTreeMap<String, String>,
    ) -> anyhow::Result<Vec<ShardWriter>> {
        let passes = self.config.dupe_factor;
        let per_shard = self.config.instances_per_shard;
        (0..passes)
            .map(|pass| {
                let writer = ShardWriter::create(out, "shard", per_shard, meta.clone())?;
                Ok(writer.interleaved(pass, passes))
            })
            .collect()
    }

    /// The masking recipe, written into every shard's metadata.
    fn shard_metadata(&self) -> BTreeMap<String, String> {
        let mut meta = BTreeMap::new();
        for (k, v) in [
            ("vocab_size", self.vocab.len().to_string()),
            ("max_seq_length", self.config.max_seq_length.to_string()),
            (
                "max_predictions_per_seq",
                self.config.max_predictions_per_seq.to_string(),
            ),
            ("masked_lm_prob", self.config.masked_lm_prob.to_string()),
            ("max_ngram", self.config.max_ngram.to_string()),
            ("whole_word", self.config.whole_word.to_string()),
            ("dupe_factor", self.config.dupe_factor.to_string()),
            ("short_seq_prob", self.config.short_seq_prob.to_string()),
            ("pack", self.config.pack.to_string()),
            ("seed", self.config.seed.to_string()),
        ] {
            meta.insert(k.to_string(), v);
        }
        meta
    }

    /// Writes a block's instances (pass-major) into the train or eval shards, and counts them.
    fn write_block(
        &self,
        docs: &[Tokenized],
        results: &[DocResult],
        train: &mut [ShardWriter],
        eval: &mut ShardWriter,
        report: &mut MaskReport,
    ) -> anyhow::Result<()> {
        // Pass-major order inside a block, as google's script loops over dupe passes; each
        // pass into its own training shards (`pass_writers`).
        for (pass, pass_train) in train.iter_mut().enumerate() {
            for r in results {
                let (writer, split) = if r.eval {
                    (&mut *eval, &mut report.eval)
                } else {
                    (&mut *pass_train, &mut report.train)
                };
                if let Some(instances) = r.passes.get(pass) {
                    for inst in instances {
                        split.add(inst, &self.specials);
                        writer.write(inst)?;
                    }
                }
            }
        }
        for d in docs {
            report.documents += 1;
            report.eval_documents += d.eval as u64;
            report.sentences += d.doc.sentence_ends.len() as u64;
            report.corpus_tokens += d.doc.ids.len() as u64;
            report.unk_tokens += d.unk;
        }
        report.packs += results.len() as u64;
        for r in results {
            let split = if r.eval {
                &mut report.eval
            } else {
                &mut report.train
            };
            split.stats.add(&r.stats);
        }
        Ok(())
    }

    /// One document's tokens, word-continuation flags and split.
    fn tokenize(&self, index: u64, sentences: &[String]) -> Tokenized {
        let eval =
            unit_interval(mix(self.config.seed, u64::MAX, index)) < self.config.eval_fraction;
        let mut doc = TokenizedDoc::default();
        let mut ids = Vec::new();
        let mut starts = Vec::new();
        let mut word_starts = Vec::new();
        let mut continues = Vec::new();
        let mut unk = 0;
        for s in sentences {
            ids.clear();
            starts.clear();
            self.tokenizer.encode_with_offsets(s, &mut ids, &mut starts);
            continues.clear();
            match &self.words {
                Some(words) => {
                    word_starts.clear();
                    words.word_starts(s, &mut word_starts);
                    let mut w = 0;
                    for (k, &start) in starts.iter().enumerate() {
                        while w < word_starts.len() && word_starts[w] < start {
                            w += 1;
                        }
                        let at_word_start = w < word_starts.len() && word_starts[w] == start;
                        // Two pieces of one token start at the same offset only for `##` pieces
                        // of the same word, which continue it.
                        let same_as_prev = k > 0 && starts[k - 1] == start;
                        continues.push(k > 0 && (!at_word_start || same_as_prev));
                    }
                }
                None => continues.resize(ids.len(), false),
            }
            unk += ids.iter().filter(|&&t| t == self.vocab.unk_id()).count() as u64;
            doc.push_sentence(&ids, &continues);
        }
        Tokenized { eval, doc, unk }
    }

    /// The units instances are cut from, as indices into the block's documents, in the order
    /// of their first document: each document alone, or with `pack` consecutive documents of
    /// one split joined until they hold a full instance's tokens (`max_seq_length − 3`).
    fn packs(&self, docs: &[Tokenized]) -> Vec<Vec<usize>> {
        if !self.config.pack {
            return (0..docs.len()).map(|i| vec![i]).collect();
        }
        let full = self.config.max_seq_length - 3;
        let mut out: Vec<Vec<usize>> = Vec::new();
        // The open pack of each split: its documents and tokens.
        let mut open: [(Vec<usize>, usize); 2] = Default::default();
        for (i, d) in docs.iter().enumerate() {
            let pack = &mut open[d.eval as usize];
            pack.0.push(i);
            pack.1 += d.doc.ids.len();
            if pack.1 >= full {
                out.push(std::mem::take(&mut pack.0));
                pack.1 = 0;
            }
        }
        out.extend(open.into_iter().map(|p| p.0).filter(|p| !p.is_empty()));
        out.sort_unstable_by_key(|p| p[0]);
        out
    }

    /// The instances of one pack for every pass, each pass with its own RNG seeded by the
    /// pack's first document (so that without `pack` each document draws as it always did).
    fn mask_pack(&self, first_doc: u64, members: &[usize], docs: &[Tokenized]) -> DocResult {
        let joined;
        let doc = match members {
            [one] => &docs[*one].doc,
            _ => {
                let mut all = TokenizedDoc::default();
                for &m in members {
                    all.append(&docs[m].doc);
                }
                joined = all;
                &joined
            }
        };
        let index = first_doc + members[0] as u64;
        let eval = docs[members[0]].eval;
        let recipe = self.config.recipe();
        let passes = if eval { 1 } else { self.config.dupe_factor };
        let mut stats = MaskStats::default();
        let passes = (0..passes as u64)
            .map(|pass| {
                let mut rng = ChaCha8Rng::seed_from_u64(mix(self.config.seed, pass, index));
                instances_from_document(doc, &recipe, &self.specials, &mut rng, &mut stats)
            })
            .collect();
        DocResult {
            eval,
            passes,
            stats,
        }
    }
}

/// A document after tokenization.
struct Tokenized {
    eval: bool,
    doc: TokenizedDoc,
    unk: u64,
}

struct DocResult {
    eval: bool,
    passes: Vec<Vec<pipeline_shards::Instance>>,
    stats: MaskStats,
}

/// A 64-bit seed for (seed, pass, document): splitmix64 over the three, so neighbouring
/// documents get unrelated streams.
fn mix(seed: u64, pass: u64, doc: u64) -> u64 {
    let mut x = seed;
    for v in [pass, doc] {
        x = splitmix64(x ^ splitmix64(v));
    }
    x
}

fn unit_interval(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod pack_tests;

#[cfg(test)]
mod params_tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<MaskConfig, String> {
        MaskConfig::from_params(v.as_object().unwrap()).map_err(|e| e.0)
    }

    #[test]
    fn params_are_read_by_their_names_with_errors_that_name_them() {
        assert_eq!(params().len(), 11);
        assert!(params().contains(&"pack") && params().contains(&"whole_word"));
        let c = parse(json!({"dupe_factor": 2, "pack": true})).unwrap();
        assert_eq!((c.dupe_factor, c.pack, c.max_seq_length), (2, true, 128));
        let e = parse(json!({"max_seq_length": "long"})).unwrap_err();
        assert!(e.starts_with("param `max_seq_length`: invalid type"), "{e}");
        assert_eq!(
            parse(json!({"dupe_factor": 0})).unwrap_err(),
            "dupe_factor must be at least 1"
        );
    }
}
