//! The `metrics.json` records of the stages that make pretraining data, train or score
//! something (mask, pretrain, finetune, baseline) as types shared by the stage that writes a
//! record and every reader of it (the report; pretrain reading its mask dep; finetune reading
//! its pretrain dep): a key renamed on one side is renamed on the other, or fails to compile.
//! docs/metrics.md describes each key; a test of the default pipeline checks that every key a
//! stage writes is described there.
//!
//! Every field is an `Option`: a reader meets records written by older versions of a stage
//! (a key added since is missing) and digested records without their timings (an artifact
//! pulled without its logs), and a missing key must read as "not known", never as 0. A writer
//! sets every field; `None` is written as `null` where the stage wrote `null` before, and left
//! out where it left the key out. Blocks whose shape belongs to another crate (the model config,
//! the optimiser, the task protocol, per-set scores) stay JSON values here: this crate is a
//! leaf that the engine depends on, and must not pull the model or the task crates into it.
//!
//! Counts read leniently ([`count`]): a count written as a float by an older stage (`3.0`)
//! reads as 3, as the report's readers always took it.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// A pretrain artifact's `metrics.json`: the model, the run, the last evaluation, throughput
/// and where the wall time went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PretrainRecord {
    /// The size preset (`tiny`, `base`, …) the config started from.
    pub model: Option<String>,
    /// The model's `AlbertConfig`, as transformers' `config.json` names its fields.
    pub config: Option<Value>,
    /// Parameter counts by part (`ParameterCount`: `total`, `word_embeddings`, …).
    pub parameters: Option<Value>,
    /// Cross-layer sharing: `all`, `attention`, `ffn` or `none`.
    pub share_type: Option<String>,
    /// `postln` or `preln`.
    pub ln_type: Option<String>,
    /// Whether transformers' `AlbertModel` can load the weights as they are.
    pub hf_compatible: Option<bool>,
    /// Optimiser steps taken.
    #[serde(deserialize_with = "count")]
    pub steps: Option<u64>,
    /// Rows per micro-batch.
    #[serde(deserialize_with = "count")]
    pub batch_size: Option<u64>,
    /// Micro-batches per optimiser step.
    #[serde(deserialize_with = "count")]
    pub grad_accum_steps: Option<u64>,
    /// Rows per optimiser step (`batch_size × grad_accum_steps`).
    #[serde(deserialize_with = "count")]
    pub effective_batch_size: Option<u64>,
    /// Under `batch_size: auto`, what was chosen and how (the stage's `FoundBatch`: `rows`,
    /// `fits`, `device`, `device_model`, `seq_len`, `tried`); left out for a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size_auto: Option<Value>,
    /// The longest sequence of the mask stage's instances, in tokens.
    #[serde(deserialize_with = "count")]
    pub max_seq_length: Option<u64>,
    /// The optimiser and its schedule (`OptimConfig`).
    pub optimizer: Option<Value>,
    /// Real (not padding) tokens trained on.
    #[serde(deserialize_with = "count")]
    pub tokens_seen: Option<u64>,
    /// Token positions trained on, padding included.
    #[serde(deserialize_with = "count")]
    pub padded_tokens_seen: Option<u64>,
    /// Seconds in optimiser steps (a timing: in the full record only).
    pub train_seconds: Option<f64>,
    /// Seconds in evaluations (a timing).
    pub eval_seconds: Option<f64>,
    /// Seconds writing checkpoints (a timing).
    pub checkpoint_seconds: Option<f64>,
    /// The stage's wall-clock seconds (a timing).
    pub wall_seconds: Option<f64>,
    /// The seconds above and their shares of the wall time (a timing).
    pub time_split: Option<Value>,
    /// Real tokens per second of optimiser steps (a timing).
    pub tokens_per_s: Option<f64>,
    /// Token positions per second of optimiser steps, padding included (a timing).
    pub padded_tokens_per_s: Option<f64>,
    /// Model FLOPs per second of optimiser steps, in TFLOP/s (a timing).
    pub model_tflops_per_s: Option<f64>,
    /// The device trained on (`cpu`, `cuda:0`, …).
    pub device: Option<String>,
    /// The GPU's model (`NVIDIA H200`) when it trained on one and the driver named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_model: Option<String>,
    /// `fp32` or `bf16`.
    pub precision: Option<String>,
    /// The host's available parallelism (a host fact: in the full record only).
    #[serde(deserialize_with = "count")]
    pub threads: Option<u64>,
    /// Data-parallel workers on the CPU (one per rayon thread), 1 on a GPU.
    #[serde(deserialize_with = "count")]
    pub data_parallel_workers: Option<u64>,
    /// Batches of the held-out shard each evaluation reads.
    #[serde(deserialize_with = "count")]
    pub eval_batches: Option<u64>,
    /// The checkpoint step this run resumed from, `null` when it started fresh (a host fact).
    #[serde(deserialize_with = "count")]
    pub resumed_from_step: Option<u64>,
    /// Training instances in one pass over the shards.
    #[serde(deserialize_with = "count")]
    pub train_instances_per_epoch: Option<u64>,
    /// Passes over the training instances (fractional).
    pub epochs: Option<f64>,
    /// Whether the sentence-order loss was trained (`false`: MLM only).
    pub sop: Option<bool>,
    /// The mask stage's masking params (`masking`, `max_ngram`, `dupe_factor`, …).
    pub masking: Option<Map<String, Value>>,
    /// The mask instance that made the shards, `null` when unknown.
    pub mask_instance: Option<String>,
    /// The clean instance below that mask instance, `null` when unknown.
    pub clean_instance: Option<String>,
    /// The last evaluation (`mlm_loss`, `mlm_accuracy`, `sop_*` unless MLM only, `instances`),
    /// `null` when the run never evaluated.
    pub eval: Option<Value>,
    /// The steps whose models were kept in `steps/<N>/`.
    pub save_steps: Option<Vec<u64>>,
    /// The held-out SOP loss over the run's evaluations, `null` for an MLM-only run or one
    /// that never evaluated.
    pub sop_trend: Option<SopTrend>,
}

/// Whether a run's sentence-order head generalises: the lowest held-out SOP loss of its
/// evaluations, where it was, and the last one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SopTrend {
    /// The lowest eval SOP loss of the run (nats).
    pub lowest_loss: Option<f64>,
    /// The step of that evaluation.
    #[serde(deserialize_with = "count")]
    pub lowest_step: Option<u64>,
    /// The last evaluation's SOP loss.
    pub final_loss: Option<f64>,
    /// The pretrain stage's verdict: the last held-out loss is worse than a constant 50 %
    /// guess (ln 2) and risen from the lowest, so the head predicts the order of the training
    /// pairs, not of unseen ones (it memorises them).
    pub memorising: Option<bool>,
}

/// The file in each of a pretrain artifact's `steps/<N>/` models that says where in the run
/// it was taken: a [`PretrainingPoint`].
pub const SNAPSHOT_FILE: &str = "snapshot.json";

/// How far a backbone was pretrained: the `{step, tokens_seen}` of the pretrain model a
/// fine-tuning run started from (`0, 0` for random weights), written as a pretrain snapshot's
/// `snapshot.json` and as finetune's `pretraining`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PretrainingPoint {
    /// Optimiser steps of pretraining; `null` when the pretrain record did not say.
    #[serde(deserialize_with = "count")]
    pub step: Option<u64>,
    /// Real tokens pretrained on; `null` when the pretrain record did not say.
    #[serde(deserialize_with = "count")]
    pub tokens_seen: Option<u64>,
}

impl PretrainRecord {
    /// All parameters of the model (`parameters.total`).
    pub fn total_parameters(&self) -> Option<u64> {
        self.parameters.as_ref()?.get("total")?.as_u64()
    }

    /// Rows per optimiser step: `effective_batch_size`, or `batch_size` in a record from
    /// before gradient accumulation.
    pub fn rows_per_step(&self) -> Option<u64> {
        self.effective_batch_size.or(self.batch_size)
    }

    /// The point this record's final model stands at.
    pub fn final_point(&self) -> PretrainingPoint {
        PretrainingPoint {
            step: self.steps,
            tokens_seen: self.tokens_seen,
        }
    }
}

/// A finetune artifact's `metrics.json`: the task and its protocol, where the weights came
/// from, the training params, the history, the selected epoch's scores and throughput.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FinetuneRecord {
    /// The task's name (`lcqmc`, `chnsenticorp`, `msra_ner`, `cmrc2018`, …).
    pub task: Option<String>,
    /// The task's kind (`pair`, `single`, `tagging`, `span`, `choice`).
    pub kind: Option<String>,
    /// The label names, in the model's output order.
    pub labels: Option<Vec<String>>,
    /// `pretrained`, `random`, `hf` or `checkpoint`.
    pub init: Option<String>,
    /// The TF or transformers directory for `init_from`, `null` otherwise.
    pub init_from: Option<String>,
    /// The pretrain instance the weights (or the architecture) came from, `null` for
    /// `init_from`.
    pub pretrain_instance: Option<String>,
    /// The `save_steps` model asked for, `null` for the final one.
    #[serde(deserialize_with = "count")]
    pub pretrain_step: Option<u64>,
    /// How far the backbone was pretrained, `null` for `init_from`.
    pub pretraining: Option<PretrainingPoint>,
    /// Cross-layer sharing of the backbone.
    pub share_type: Option<String>,
    /// `postln` or `preln`.
    pub ln_type: Option<String>,
    /// The backbone's `AlbertConfig`.
    pub config: Option<Value>,
    /// Parameters of the task model, head included.
    #[serde(deserialize_with = "count")]
    pub parameters: Option<u64>,
    /// The protocol: which files each split read, how many examples, the eval sets.
    pub protocol: Option<Value>,
    /// Training epochs.
    #[serde(deserialize_with = "count")]
    pub epochs: Option<u64>,
    /// Optimiser steps taken.
    #[serde(deserialize_with = "count")]
    pub steps: Option<u64>,
    /// Examples per batch.
    #[serde(deserialize_with = "count")]
    pub batch_size: Option<u64>,
    /// Peak learning rate.
    pub learning_rate: Option<f64>,
    /// The optimiser and its schedule (`OptimConfig`).
    pub optimizer: Option<Value>,
    /// The sequence length used: the param, capped by the model's positions.
    #[serde(deserialize_with = "count")]
    pub max_seq_length: Option<u64>,
    /// Linear warm-up steps.
    #[serde(deserialize_with = "count")]
    pub warmup_steps: Option<u64>,
    /// Dropout on the classifier head.
    pub dropout: Option<f64>,
    /// Dropout inside the backbone.
    pub hidden_dropout: Option<f64>,
    /// Whether batches were grouped by length.
    pub group_by_length: Option<bool>,
    /// The run's seed.
    #[serde(deserialize_with = "count")]
    pub seed: Option<u64>,
    /// One entry per epoch (loss, dev scores, seconds).
    pub history: Option<Value>,
    /// The epoch whose dev score selected the model (1-based).
    #[serde(deserialize_with = "count")]
    pub best_epoch: Option<u64>,
    /// The selected epoch's dev scores.
    pub dev: Option<Value>,
    /// Scores of the selected model on each evaluation set, by set name.
    pub eval: Option<Map<String, Value>>,
    /// Seconds of training (a timing).
    pub train_seconds: Option<f64>,
    /// Training examples per second (a timing).
    pub train_examples_per_s: Option<f64>,
    /// Real training tokens per second (a timing).
    pub train_tokens_per_s: Option<f64>,
    /// Share of the trained token positions that were padding.
    pub padding_share: Option<f64>,
    /// Evaluation examples per second (a timing).
    pub eval_sentences_per_s: Option<f64>,
    /// The stage's wall-clock seconds (a timing).
    pub wall_seconds: Option<f64>,
    /// The device trained on.
    pub device: Option<String>,
    /// The encoder's matrix products: `fp32` or `bf16` (absent in records written before
    /// fine-tuning had the choice: those are `fp32`).
    pub precision: Option<String>,
    /// Data-parallel workers on the CPU, 1 on a GPU.
    #[serde(deserialize_with = "count")]
    pub data_parallel_workers: Option<u64>,
    /// The host's available parallelism (a host fact).
    #[serde(deserialize_with = "count")]
    pub threads: Option<u64>,
    /// A span task's window params (`max_query_length`, `doc_stride`, …); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_features: Option<Value>,
    /// What each split's encoding could not serve whole, by cause with the example ids;
    /// absent when everything was served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Map<String, Value>>,
}

/// A baseline artifact's `metrics.json`: the task and its protocol, and per method what it
/// fitted and how it scored on each split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineRecord {
    /// The task's name.
    pub task: Option<String>,
    /// Always `baseline` (the report tells baseline artifacts by it and `baselines`).
    pub kind: Option<String>,
    /// The label names (tagging: the tags; reading comprehension: empty).
    pub labels: Option<Vec<String>>,
    /// The protocol, as finetune writes it.
    pub protocol: Option<Value>,
    /// One entry per method, in the order run.
    pub baselines: Option<Vec<BaselineEntry>>,
    /// Sentence-pair and single-text tasks: mean length in characters per class, by split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<Map<String, Value>>,
    /// Reading comprehension: questions per split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub questions: Option<Map<String, Value>>,
    /// The stage's wall-clock seconds (a timing).
    pub seconds: Option<f64>,
    /// The host's available parallelism (a host fact).
    #[serde(deserialize_with = "count")]
    pub threads: Option<u64>,
}

/// One method of a baseline record: what it is, what it fitted, its scores by split (each
/// block shaped like finetune's scores) and its seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineEntry {
    /// The method's name as `methods:` takes it (`majority`, `ngram_lr`, …).
    pub name: Option<String>,
    /// What the method does, in words.
    pub description: Option<String>,
    /// What it fitted (a threshold, a class, the n-gram model's alpha and features, …).
    pub fit: Option<Value>,
    /// Its scores on the training split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train: Option<Value>,
    /// Its scores on the held-out dev split; absent when the protocol has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<Value>,
    /// Its scores on each evaluation set, by set name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<Map<String, Value>>,
    /// Seconds to fit and score it (a timing).
    pub seconds: Option<f64>,
}

impl BaselineEntry {
    /// An entry from its scores by split as the baselines compute them (`train`, `dev`,
    /// `eval`); a block the map lacks is left out.
    pub fn new(
        name: &str,
        description: &str,
        fit: Value,
        mut scores: Map<String, Value>,
        seconds: f64,
    ) -> BaselineEntry {
        BaselineEntry {
            name: Some(name.into()),
            description: Some(description.into()),
            fit: Some(fit),
            train: scores.remove("train"),
            dev: scores.remove("dev"),
            eval: match scores.remove("eval") {
                Some(Value::Object(m)) => Some(m),
                _ => None,
            },
            seconds: Some(seconds),
        }
    }
}

/// A mask artifact's `metrics.json`: what the corpus held, the masking params, and the
/// instances of each split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MaskRecord {
    /// Documents read.
    #[serde(deserialize_with = "count")]
    pub documents: Option<u64>,
    /// Of which held out for evaluation.
    #[serde(deserialize_with = "count")]
    pub eval_documents: Option<u64>,
    /// Sentences read.
    #[serde(deserialize_with = "count")]
    pub sentences: Option<u64>,
    /// Tokens of the corpus (one pass).
    #[serde(deserialize_with = "count")]
    pub corpus_tokens: Option<u64>,
    /// Share of those tokens that are `[UNK]`.
    pub unk_rate: Option<f64>,
    /// The training instances.
    pub train: Option<MaskSplitRecord>,
    /// The held-out eval instances.
    pub eval: Option<MaskSplitRecord>,
    /// The longest instance, in tokens.
    #[serde(deserialize_with = "count")]
    pub max_seq_length: Option<u64>,
    /// Masked positions per instance at most.
    #[serde(deserialize_with = "count")]
    pub max_predictions_per_seq: Option<u64>,
    /// Share of tokens masked.
    pub masked_lm_prob: Option<f64>,
    /// Passes over the corpus, each masked differently.
    #[serde(deserialize_with = "count")]
    pub dupe_factor: Option<u64>,
    /// Whole-word (`true`) or character (`false`) masking.
    pub whole_word: Option<bool>,
    /// The longest n-gram masked as one span.
    #[serde(deserialize_with = "count")]
    pub max_ngram: Option<u64>,
    /// Probability of a shorter target length (BERT's `short_seq_prob`).
    pub short_seq_prob: Option<f64>,
    /// Whether documents were packed into full-length instances.
    pub pack: Option<bool>,
    /// The units instances were cut from: documents, or with `pack` groups of them.
    #[serde(deserialize_with = "count")]
    pub packs: Option<u64>,
    /// The clean instance whose corpus was masked.
    pub clean_instance: Option<String>,
}

/// One split of a mask record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MaskSplitRecord {
    /// Instances written.
    #[serde(deserialize_with = "count")]
    pub instances: Option<u64>,
    /// Their real tokens.
    #[serde(deserialize_with = "count")]
    pub tokens: Option<u64>,
    /// Mean tokens per instance.
    pub mean_length: Option<f64>,
    /// Share of the `instances × max_seq_length` positions that are padding.
    pub padding_fraction: Option<f64>,
    /// Positions masked.
    #[serde(deserialize_with = "count")]
    pub masked_tokens: Option<u64>,
    /// Masked positions per token.
    pub mask_rate: Option<f64>,
    /// Share of masked positions replaced by `[MASK]`.
    pub replaced_by_mask: Option<f64>,
    /// Share replaced by a random token.
    pub replaced_by_random: Option<f64>,
    /// Share kept as they were.
    pub kept: Option<f64>,
    /// Masked spans by length in tokens (`"1"`, `"2"`, …).
    pub ngram_histogram: Option<Map<String, Value>>,
    /// Share of instances whose segments were swapped (sentence-order label 1).
    pub sop_swapped_fraction: Option<f64>,
    /// The shard files, by name.
    pub shards: Option<Vec<String>>,
}

/// Reads a record from a stage's metrics, `None` when the record is missing (`null`) or a
/// key holds a value of another type than the record's (a record of another stage kind, or of
/// a version of the stage this one cannot read).
pub fn read<T: for<'de> Deserialize<'de>>(metrics: &Value) -> Option<T> {
    if metrics.is_null() {
        return None;
    }
    T::deserialize(metrics).ok()
}

/// A count that an older stage may have written as a float (`3.0`): rounded when it is a
/// non-negative number, `None` when it is missing, `null`, negative or not a number — as the
/// report read counts before the records were typed.
pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_f64().filter(|x| *x >= 0.0).map(|x| x.round() as u64))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_older_record_reads_with_its_missing_keys_as_none_and_float_counts_rounded() {
        let r: PretrainRecord =
            read(&json!({"model": "tiny", "steps": 3.0, "tokens_seen": 900})).unwrap();
        assert_eq!(r.model.as_deref(), Some("tiny"));
        assert_eq!(r.steps, Some(3));
        assert_eq!(
            r.final_point(),
            PretrainingPoint {
                step: Some(3),
                tokens_seen: Some(900)
            }
        );
        assert_eq!(r.data_parallel_workers, None);
        assert!(read::<PretrainRecord>(&Value::Null).is_none());
        // A key of another type: not this record.
        assert!(read::<PretrainRecord>(&json!({"model": 3})).is_none());
    }

    #[test]
    fn a_written_record_has_every_key_and_writes_null_where_the_stage_did() {
        let r = FinetuneRecord {
            task: Some("lcqmc".into()),
            ..Default::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["task"], "lcqmc");
        assert!(v["init_from"].is_null() && v.get("init_from").is_some());
        // The keys a stage adds only for some tasks stay absent when unset.
        assert!(v.get("span_features").is_none() && v.get("encoding").is_none());
        assert_eq!(read::<FinetuneRecord>(&v), Some(r));
    }

    #[test]
    fn a_baseline_entry_reads_and_builds_its_split_blocks() {
        let v = json!({"name": "majority", "description": "majority class",
                       "fit": {"class": "1"}, "train": {"accuracy": 0.5},
                       "eval": {"test": {"accuracy": 0.4}}, "seconds": 0.1});
        let e: BaselineEntry = read(&v).unwrap();
        assert_eq!(e.eval.as_ref().unwrap()["test"]["accuracy"], 0.4);
        assert_eq!(serde_json::to_value(&e).unwrap(), v);
        let scores = v.as_object().unwrap().clone();
        let built = BaselineEntry::new(
            "majority",
            "majority class",
            json!({"class": "1"}),
            scores,
            0.1,
        );
        assert_eq!(built, e);
    }
}
