//! The stage's inputs: the `mask` dep's shards and the `vocab` dep's vocabulary, checked
//! against each other and against the model, and the model to start from (a named size or
//! config file, or `init_from`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining, hf};
use pipeline_engine::stage::StageContext;
use pipeline_shards::{BatchReaderConfig, list_shards, shard_metadata};
use pipeline_text::vocab::MAX_VOCAB_BYTES;

use crate::PretrainParams;
use crate::metrics::Floor;

/// The data the stage trains on, found in its deps.
pub struct Data {
    /// The training shards, in name order.
    pub train: Vec<PathBuf>,
    /// The eval shards.
    pub eval: Vec<PathBuf>,
    /// From the shards' metadata.
    pub max_seq_length: usize,
    /// From the shards' metadata.
    pub max_predictions: usize,
    /// The `vocab` dep's artifact.
    pub vocab_dir: PathBuf,
    /// Tokens in its `vocab.txt`.
    pub vocab_size: usize,
    /// The `mask` instance the shards come from, when known: the report's lineage of a
    /// pretraining run.
    pub mask_instance: Option<String>,
    /// The `clean` instance that mask instance cut them from (its record's `clean_instance`).
    pub clean_instance: Option<String>,
    /// How the shards were masked (their metadata: `whole_word`, `masked_lm_prob`,
    /// `max_ngram`, `dupe_factor`, …), for metrics.json: the report tells masking ablations
    /// apart by it.
    pub masking: serde_json::Map<String, serde_json::Value>,
    /// The vocabulary's `[MASK]` id (its line in `vocab.txt`), for the eval accuracy by
    /// corruption; `None` when it has no `[MASK]` line.
    pub mask_id: Option<u32>,
    /// The eval split's no-context floor from the mask dep's metrics
    /// (`eval.no_context_floor`); `None` for a mask artifact made before it was recorded, or
    /// without an eval split: then evaluations give no floor verdict.
    pub floor: Option<Floor>,
}

impl Data {
    /// The shards in `mask_dir` and the vocabulary in `vocab_dir`, checked against each other.
    pub fn find(mask_dir: &Path, vocab_dir: &Path) -> anyhow::Result<Data> {
        let train = list_shards(mask_dir, "shard")?;
        if train.is_empty() {
            bail!(
                "{} has no training shards (shard-00000.arrow, …): is the dep a `mask` stage's \
                 artifact?",
                mask_dir.display()
            );
        }
        let eval = list_shards(mask_dir, "eval")?;
        let meta = shard_metadata(&train[0])?;
        let number = |key: &str| -> anyhow::Result<usize> {
            meta.get(key).and_then(|v| v.parse().ok()).with_context(|| {
                format!("{}: the shard metadata has no `{key}`", train[0].display())
            })
        };
        let vocab_file = vocab_dir.join("vocab.txt");
        // The dep's vocab.txt (a `cmd` dep may have written anything) read as the vocab stage
        // reads one: regular files only, at most MAX_VOCAB_BYTES. The reader's error names it.
        let vocab_text =
            pipeline_bounded::read_to_string(&vocab_file, MAX_VOCAB_BYTES, "a vocabulary")
                .context("reading the `vocab` dep's vocabulary")?;
        let vocab_size = vocab_text.lines().count();
        let mask_id = vocab_text
            .lines()
            .position(|l| l.trim_end_matches('\r') == "[MASK]")
            .and_then(|i| u32::try_from(i).ok());
        if let Ok(shard_vocab) = number("vocab_size")
            && shard_vocab != vocab_size
        {
            bail!(
                "the shards were made with a vocabulary of {shard_vocab} tokens but {} has \
                 {vocab_size}: the `mask` and `pretrain` stages must use the same `vocab` dep",
                vocab_file.display()
            );
        }
        let max_seq_length = number("max_seq_length")?;
        let max_predictions = number("max_predictions_per_seq")?;
        Ok(Data {
            train,
            eval,
            max_seq_length,
            max_predictions,
            vocab_dir: vocab_dir.to_path_buf(),
            vocab_size,
            masking: masking(&meta),
            mask_instance: None,
            clean_instance: None,
            mask_id,
            floor: None,
        })
    }

    /// The batch reader's settings for these shards and `p`.
    pub fn reader_config(&self, p: &PretrainParams) -> BatchReaderConfig {
        BatchReaderConfig {
            batch_size: p.batch_size,
            max_seq_length: self.max_seq_length,
            max_predictions_per_seq: self.max_predictions,
            seed: p.seed,
            shuffle: true,
            drop_last: true,
            pad_to_max: p.pad_to_max,
            epochs: None,
        }
    }
}

/// The masking recipe in the shard metadata (strings there), as JSON values.
fn masking(meta: &pipeline_shards::Metadata) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for key in [
        "whole_word",
        "masked_lm_prob",
        "max_ngram",
        "dupe_factor",
        "short_seq_prob",
        "pack",
    ] {
        if let Some(v) = meta.get(key) {
            let value = serde_json::from_str(v).unwrap_or_else(|_| v.clone().into());
            out.insert(key.to_string(), value);
        }
    }
    out
}

/// The model config and initial weights the params ask for.
pub fn initial_model(
    p: &PretrainParams,
    data_vocab: usize,
    device: &burn::tensor::Device,
) -> anyhow::Result<(AlbertConfig, AlbertForPreTraining)> {
    match &p.init_from {
        Some(dir) => {
            // A TensorFlow checkpoint (albert_zh's or Google's) is imported first.
            let model_dir = pipeline_albert::tf::ModelDir::open(dir)
                .with_context(|| format!("param `init_from`: {}", dir.display()))?;
            let (config, model) = hf::load_pretraining(model_dir.path(), device)
                .with_context(|| format!("param `init_from`: {}", dir.display()))?;
            if config.vocab_size != data_vocab {
                bail!(
                    "init_from {} has vocab_size {} but the vocabulary has {data_vocab} tokens",
                    dir.display(),
                    config.vocab_size
                );
            }
            Ok((config, model))
        }
        None => {
            let config = p.model_config(Some(data_vocab))?;
            // The seed decides the initial weights.
            device.seed(p.seed);
            let model = AlbertForPreTraining::new(&config, device);
            Ok((config, model))
        }
    }
}

impl Data {
    /// The shards and vocabulary of the stage's `mask` and `vocab` deps.
    pub fn from_deps(ctx: &StageContext) -> anyhow::Result<Data> {
        let mask = ctx.dep("mask").context(
            "the pretrain stage needs a `mask` dep (the shards) and a `vocab` dep: add `deps: [mask, vocab]`",
        )?;
        let vocab = ctx
            .dep("vocab")
            .context("the pretrain stage needs a `vocab` dep: add `deps: [mask, vocab]`")?;
        let mut data = Data::find(&mask.dir, &vocab.dir)?;
        data.mask_instance = Some(mask.instance.clone());
        // Read bounded (a record past 64 MiB, a FIFO, is "not known", as a missing one is).
        let record = pipeline_metrics::read_record::<serde_json::Value>(
            &mask.dir.join(pipeline_metrics::METRICS),
        )
        .unwrap_or_default();
        data.clean_instance =
            pipeline_metrics::records::read::<pipeline_metrics::MaskRecord>(&record)
                .and_then(|m| m.clean_instance);
        data.floor = Floor::of_mask_record(&record);
        Ok(data)
    }

    /// The shards' sequences must fit the model's positions.
    pub fn check_fits(&self, config: &AlbertConfig) -> anyhow::Result<()> {
        if self.max_seq_length > config.max_position_embeddings {
            bail!(
                "the shards hold sequences of up to {} tokens but the model has {} positions \
                 (max_position_embeddings)",
                self.max_seq_length,
                config.max_position_embeddings
            );
        }
        Ok(())
    }
}
