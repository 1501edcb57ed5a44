//! `batch_size: auto`: the micro-batch is the largest power of two of rows whose training step
//! fits the device, found once per run and recorded.
//!
//! On a GPU, two training steps of the run's own model, optimiser and precision are tried on a
//! synthetic batch of full-length rows (`max_seq_length` tokens and `max_predictions_per_seq`
//! masked positions: the largest batch the data can hold), 1, 2, 4, … rows, until a step runs
//! out of memory or the cap ([`crate::params::AutoBatch::cap`]; the training instances) is
//! reached, as Lightning's `BatchSizeFinder` does in its `power` mode. A probe holds the run's
//! weights and a second copy made by its update, its own moments and gradients: at least what
//! the run itself will hold, so what fits the probe fits the run. What was found is written to
//! the work area (`auto_batch.json`): a run that resumes there, or runs again with the same
//! fingerprint on the same GPU, trains with the same micro-batch without probing again.
//!
//! On a CPU nothing is probed: a failed allocation there ends the process (`pipeline_albert::
//! memory`), and more rows per micro-batch do not train faster
//! ([`crate::params::AUTO_BATCH_CPU`]).

use std::path::Path;

use anyhow::{Context, bail};
use burn::tensor::Device;
use pipeline_albert::device::ResolvedDevice;
use pipeline_albert::memory::unless_out_of_memory;
use pipeline_albert::{AlbertConfig, AlbertForPreTraining};
use pipeline_shards::rng::SplitMix64;
use pipeline_shards::{shard_instances, synthetic};
use serde::{Deserialize, Serialize};

use crate::batch_search::{Tried, largest_power_of_two};
use crate::data::Data;
use crate::params::{AutoBatch, PretrainParams};
use crate::trainer::Trainer;

/// The record's file in the work area.
const RECORD: &str = "auto_batch.json";

/// The seed of the probe's synthetic rows.
const PROBE_SEED: u64 = 11;

/// What `batch_size: auto` chose, as `metrics.json` (`batch_size_auto`) and the work area
/// record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoundBatch {
    /// The micro-batch trained with.
    pub rows: usize,
    /// The largest power of two whose steps fit (`rows` is at most this, and divides the
    /// effective batch when one is given).
    pub fits: usize,
    /// The device it was found on, and its model when a GPU's driver names it.
    pub device: String,
    /// The GPU's model.
    pub device_model: Option<String>,
    /// Tokens of each probed row (`max_seq_length`).
    pub seq_len: usize,
    /// The sizes tried, in order, and whether their steps fit; empty where nothing was probed
    /// (a CPU).
    pub tried: Vec<Tried>,
}

impl FoundBatch {
    /// A line for the stage's log.
    pub fn describe(&self) -> String {
        let on = self.device_model.as_deref().unwrap_or(&self.device);
        if self.tried.is_empty() {
            return format!(
                "batch_size auto: {} rows per micro-batch on {on} (a CPU: nothing probed)",
                self.rows
            );
        }
        let failed = self
            .tried
            .iter()
            .find(|t| !t.fits)
            .map_or_else(String::new, |t| format!(", {} ran out of memory", t.rows));
        format!(
            "batch_size auto: {} rows per micro-batch on {on} ({} rows of {} tokens fit{failed})",
            self.rows, self.fits, self.seq_len
        )
    }
}

/// The params with the micro-batch `batch_size: auto` finds for this run (unchanged for a
/// number), and what was found.
pub fn resolve(
    work_dir: &Path,
    p: &PretrainParams,
    data: &Data,
    (config, model): (&AlbertConfig, &AlbertForPreTraining),
    device: &ResolvedDevice,
) -> anyhow::Result<(PretrainParams, Option<FoundBatch>)> {
    let Some(auto) = p.auto_batch else {
        return Ok((p.clone(), None));
    };
    let found = if device.is_gpu {
        match recorded(work_dir, device, data.max_seq_length) {
            Some(found) => found,
            None => {
                let found = probe(auto, p, data, (config, model), device)?;
                record(work_dir, &found)?;
                found
            }
        }
    } else {
        FoundBatch {
            rows: p.batch_size,
            fits: p.batch_size,
            device: device.name.clone(),
            device_model: None,
            seq_len: data.max_seq_length,
            tried: Vec::new(),
        }
    };
    Ok((p.with_micro_batch(found.rows), Some(found)))
}

/// Probes the device: the largest power of two of rows up to the cap whose steps fit.
fn probe(
    auto: AutoBatch,
    p: &PretrainParams,
    data: &Data,
    (config, model): (&AlbertConfig, &AlbertForPreTraining),
    device: &ResolvedDevice,
) -> anyhow::Result<FoundBatch> {
    let instances = data
        .train
        .iter()
        .map(|f| shard_instances(f))
        .sum::<Result<u64, _>>()
        .context("counting the training instances for batch_size: auto")?;
    if instances == 0 {
        bail!("batch_size auto: the training shards hold no instances");
    }
    let cap = auto
        .cap()
        .min(usize::try_from(instances).unwrap_or(usize::MAX));
    let (seq, masked) = (data.max_seq_length, data.max_predictions);
    tracing::info!(
        target: "pretrain",
        "batch_size auto: trying 1, 2, 4, … up to {cap} rows of {seq} tokens on {}",
        device.name
    );
    let (fits, tried) = largest_power_of_two(cap, |rows| {
        Ok::<_, anyhow::Error>(steps_fit(
            p,
            (config, model),
            &device.device,
            [rows, seq, masked],
        ))
    })?;
    if fits == 0 {
        bail!(
            "batch_size auto: not even one row of {seq} tokens trains on {} without running out \
             of memory: use a smaller model or shorter rows (the mask stage's max_seq_length)",
            device.name
        );
    }
    Ok(FoundBatch {
        rows: auto.micro_batch(fits),
        fits,
        device: device.name.clone(),
        device_model: device.model.clone(),
        seq_len: seq,
        tried,
    })
}

/// Whether two training steps of `[rows, seq, masked]` (rows, tokens a row, masked positions
/// a row) run on `device` without running out of memory: the run's model (not changed: the
/// steps train a copy, whose tensors are dropped after), `p`'s optimiser and SOP setting, a
/// synthetic batch. The first step also allocates the optimiser's moments; a non-finite loss
/// on random rows still ran, which is all this asks.
pub fn steps_fit(
    p: &PretrainParams,
    (config, model): (&AlbertConfig, &AlbertForPreTraining),
    device: &Device,
    [rows, seq, masked]: [usize; 3],
) -> bool {
    let batch = synthetic::batch(
        config.vocab_size,
        rows,
        seq,
        masked,
        &mut SplitMix64::new(PROBE_SEED),
    );
    let ad = device.clone().autodiff();
    let mut trainer = Trainer::new(config.clone(), model.clone(), p.optim.clone(), ad);
    trainer.sop = p.sop;
    unless_out_of_memory(|| {
        for step in 0..2 {
            let _ = trainer.step(step, std::slice::from_ref(&batch));
        }
    })
    .is_some()
}

/// The work area's record, when it was made on this device for rows of this length.
fn recorded(work_dir: &Path, device: &ResolvedDevice, seq_len: usize) -> Option<FoundBatch> {
    let found: FoundBatch = pipeline_metrics::read_record(&work_dir.join(RECORD)).ok()?;
    (found.device == device.name && found.device_model == device.model && found.seq_len == seq_len)
        .then_some(found)
}

/// Writes the record into the work area.
fn record(work_dir: &Path, found: &FoundBatch) -> anyhow::Result<()> {
    let path = work_dir.join(RECORD);
    std::fs::create_dir_all(work_dir)?;
    std::fs::write(&path, serde_json::to_vec_pretty(found)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn small() -> AlbertConfig {
        let mut c = AlbertConfig::named("tiny").expect("tiny");
        (c.vocab_size, c.embedding_size, c.hidden_size) = (40, 8, 16);
        (c.num_attention_heads, c.intermediate_size) = (2, 32);
        (c.num_hidden_layers, c.max_position_embeddings) = (1, 16);
        c
    }

    /// The device the tests run on: `ALBERT_TEST_DEVICE=tch-cpu` (a `tch` build) probes on
    /// libtorch, where running out of memory is what the probe catches.
    fn test_device() -> Device {
        let choice = std::env::var("ALBERT_TEST_DEVICE").unwrap_or_else(|_| "flex".into());
        pipeline_albert::device::DeviceChoice::parse(&choice)
            .ok()
            .and_then(|c| pipeline_albert::device::resolve(c).ok())
            .map_or_else(Device::flex, |d| d.device)
    }

    #[test]
    fn a_probe_trains_a_copy_and_leaves_the_run_s_model_as_it_was() {
        let (c, device) = (small(), test_device());
        let model = AlbertForPreTraining::new(&c, &device.clone().autodiff());
        let weights =
            |m: &AlbertForPreTraining| m.albert.embeddings.word_embeddings.weight.val().into_data();
        let before = weights(&model);
        let p = PretrainParams::parse(
            json!({"batch_size": "auto"})
                .as_object()
                .expect("an object"),
            Path::new("."),
        )
        .expect("params");
        assert!(steps_fit(&p, (&c, &model), &device, [4, 16, 3]));
        assert_eq!(weights(&model), before);
    }

    #[test]
    fn a_record_is_reused_only_for_the_same_device_and_rows() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let found = FoundBatch {
            rows: 512,
            fits: 1024,
            device: "cuda:0".into(),
            device_model: Some("NVIDIA H200".into()),
            seq_len: 128,
            tried: vec![Tried {
                rows: 2048,
                fits: false,
            }],
        };
        record(dir.path(), &found).expect("written");
        let device = |model: &str| ResolvedDevice {
            device: burn::tensor::Device::flex(),
            name: "cuda:0".into(),
            is_gpu: true,
            model: Some(model.into()),
        };
        assert_eq!(
            recorded(dir.path(), &device("NVIDIA H200"), 128),
            Some(found.clone())
        );
        assert_eq!(recorded(dir.path(), &device("NVIDIA H100"), 128), None);
        assert_eq!(recorded(dir.path(), &device("NVIDIA H200"), 512), None);
        assert!(
            found
                .describe()
                .contains("1024 rows of 128 tokens fit, 2048 ran out of memory")
        );
    }
}
