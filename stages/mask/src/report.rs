//! What `metrics.json` says the stage did: the instances and their masking per split, their
//! no-context floor ([`crate::floor`]), and the totals.

use pipeline_metrics::{MaskRecord, MaskSplitRecord};
use serde_json::{Map, Value, json};

use crate::MaskConfig;
use crate::floor::{Floor, LabelCounts, NoContext};
use crate::instances::{MaskStats, Specials};
use crate::sop_floor::{EdgeCounts, SopFloor};

/// Counts for one output split.
#[derive(Debug, Default, Clone)]
pub struct SplitReport {
    /// Instances written.
    pub instances: u64,
    /// Their tokens.
    pub tokens: u64,
    /// What masking did.
    pub stats: MaskStats,
    /// Instances whose segments were swapped (sentence-order label 1).
    pub swapped: u64,
    /// The shard files, by name.
    pub shards: Vec<String>,
    /// The masked labels by corruption, for the no-context floor.
    pub labels: LabelCounts,
    /// The pairs' edge patterns by order label, for the SOP floor.
    pub edges: EdgeCounts,
}

impl SplitReport {
    pub(crate) fn add(&mut self, inst: &pipeline_shards::Instance, specials: &Specials) {
        self.labels.add_instance(inst, specials.mask);
        self.edges
            .add_instance(inst, specials.sep, &specials.sentence_final);
        self.instances += 1;
        self.tokens += inst.input_ids.len() as u64;
        self.swapped += inst.sentence_order_label as u64;
    }

    pub(crate) fn to_json(&self, max_ngram: usize, max_seq_length: usize) -> MaskSplitRecord {
        let tokens = self.tokens.max(1) as f64;
        let slots = (self.instances * max_seq_length as u64).max(1) as f64;
        let masked = self.stats.masked.max(1) as f64;
        let mut hist = Map::new();
        for n in 1..=max_ngram {
            hist.insert(
                n.to_string(),
                json!(self.stats.ngrams.get(n - 1).copied().unwrap_or(0)),
            );
        }
        MaskSplitRecord {
            instances: Some(self.instances),
            tokens: Some(self.tokens),
            mean_length: Some(round4(self.tokens as f64 / self.instances.max(1) as f64)),
            padding_fraction: Some(round4(1.0 - self.tokens as f64 / slots)),
            masked_tokens: Some(self.stats.masked),
            mask_rate: Some(round4(self.stats.masked as f64 / tokens)),
            replaced_by_mask: Some(round4(self.stats.replaced_mask as f64 / masked)),
            replaced_by_random: Some(round4(self.stats.replaced_random as f64 / masked)),
            kept: Some(round4(self.stats.kept as f64 / masked)),
            ngram_histogram: Some(hist),
            sop_swapped_fraction: Some(round4(self.swapped as f64 / self.instances.max(1) as f64)),
            shards: Some(self.shards.clone()),
        }
    }
}

pub(crate) fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// What the stage did, for `metrics.json`.
#[derive(Debug, Default, Clone)]
pub struct MaskReport {
    /// Documents read.
    pub documents: u64,
    /// Of which held out for evaluation.
    pub eval_documents: u64,
    /// Sentences read.
    pub sentences: u64,
    /// Tokens of the corpus (one pass).
    pub corpus_tokens: u64,
    /// Of which `[UNK]`.
    pub unk_tokens: u64,
    /// The units instances were cut from: documents, or with `pack` groups of them.
    pub packs: u64,
    /// The training split.
    pub train: SplitReport,
    /// The eval split.
    pub eval: SplitReport,
    /// Ids in the vocabulary (what the floor's unigram is smoothed over).
    pub vocab_size: usize,
}

impl MaskReport {
    /// The no-context floor of the training and the eval split, the predictor fitted on the
    /// training split; `None` for a split without masked positions.
    pub fn floors(&self) -> (Option<Floor>, Option<Floor>) {
        let model = NoContext::fit(&self.train.labels, self.vocab_size);
        (
            model.floor(&self.train.labels),
            model.floor(&self.eval.labels),
        )
    }

    /// The SOP floor of the training and the eval split, the rule fitted on the training
    /// split; `None` for a split without pairs.
    pub fn sop_floors(&self) -> (Option<SopFloor>, Option<SopFloor>) {
        let rule = self.train.edges.fit();
        (self.train.edges.floor(&rule), self.eval.edges.floor(&rule))
    }

    /// `metrics.json`: the typed record with `clean_instance`, and each split's
    /// `no_context_floor` (`null` for a split without masked positions) and `sop_floor`
    /// (`null` for one without pairs). The floors are keys the shared record type does not
    /// have yet; their readers take them from the JSON.
    pub fn metrics(
        &self,
        c: &MaskConfig,
        clean_instance: Option<String>,
    ) -> serde_json::Result<Value> {
        let mut record = self.to_json(c);
        record.clean_instance = clean_instance;
        let mut value = serde_json::to_value(record)?;
        let (train, eval) = self.floors();
        let (sop_train, sop_eval) = self.sop_floors();
        for (split, floor, sop) in [("train", train, sop_train), ("eval", eval, sop_eval)] {
            if let Some(m) = value.get_mut(split).and_then(Value::as_object_mut) {
                m.insert("no_context_floor".into(), serde_json::to_value(floor)?);
                m.insert("sop_floor".into(), serde_json::to_value(sop)?);
            }
        }
        Ok(value)
    }

    /// `metrics.json`'s content (without `clean_instance`, which the stage adds).
    pub fn to_json(&self, c: &MaskConfig) -> MaskRecord {
        MaskRecord {
            documents: Some(self.documents),
            eval_documents: Some(self.eval_documents),
            sentences: Some(self.sentences),
            corpus_tokens: Some(self.corpus_tokens),
            unk_rate: Some(round4(
                self.unk_tokens as f64 / self.corpus_tokens.max(1) as f64,
            )),
            train: Some(self.train.to_json(c.max_ngram, c.max_seq_length)),
            eval: Some(self.eval.to_json(c.max_ngram, c.max_seq_length)),
            max_seq_length: Some(c.max_seq_length as u64),
            max_predictions_per_seq: Some(c.max_predictions_per_seq as u64),
            masked_lm_prob: Some(c.masked_lm_prob),
            dupe_factor: Some(c.dupe_factor as u64),
            whole_word: Some(c.whole_word),
            max_ngram: Some(c.max_ngram as u64),
            short_seq_prob: Some(c.short_seq_prob),
            pack: Some(c.pack),
            packs: Some(self.packs),
            clean_instance: None,
        }
    }
}
