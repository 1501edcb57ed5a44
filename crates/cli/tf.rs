//! `pipeline model import|export` and `model info` on TensorFlow 1 checkpoints. Every failure
//! here is the input's (a missing, truncated or corrupt file, a config or vocabulary that
//! disagrees with the tensors, an unwritable --out): exit code 2, the file named.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use pipeline_albert::tf::{self, ModelDir};
use pipeline_engine::UserError;
use serde_json::json;

use crate::global::Global;
use crate::model::ModelSource;

fn user(e: impl Into<anyhow::Error>) -> anyhow::Error {
    UserError::new(format!("{:#}", e.into())).into()
}

/// The model directory to load from `dir`: itself, or a TF checkpoint imported into a
/// temporary directory.
pub fn open_model_dir(dir: &Path) -> Result<ModelDir> {
    ModelDir::open(dir).map_err(user)
}

pub fn import(
    global: &Global,
    from: &Path,
    out: &Path,
    config: Option<&Path>,
    vocab: Option<&Path>,
    json_out: bool,
) -> Result<ExitCode> {
    let r = tf::import(from, config, vocab, out).map_err(user)?;
    let mb = r.bytes_read as f64 / 1e6;
    let rate = mb / r.seconds.max(1e-9);
    if json_out {
        let mut v = serde_json::to_value(&r)?;
        v["out"] = json!(out);
        v["megabytes_per_second"] = json!((rate * 10.0).round() / 10.0);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("imported {} into {}", r.checkpoint.display(), out.display());
    println!(
        "layout:   {} (share_type {}), config {}, vocabulary {}",
        r.layout,
        r.share_type,
        r.config_file.display(),
        r.vocab_file.display()
    );
    println!(
        "tensors:  {} read ({mb:.1} MB in {:.2} s, {rate:.0} MB/s), {} skipped, {} ignored",
        r.tensors_read,
        r.seconds,
        r.skipped.len(),
        r.ignored.len()
    );
    if !global.quiet {
        for (name, why) in &r.skipped {
            println!("  skipped  {name} ({why})");
        }
        for name in &r.ignored {
            println!("  ignored  {name} (not part of the pretraining model)");
        }
    }
    if r.layout == "albert_zh" {
        println!(
            "note:     albert_zh's own embeddings and MLM head: `pipeline` runs, trains and \
             fine-tunes it; transformers' AlbertForPreTraining cannot load it (config.json says so)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn export(global: &Global, src: &ModelSource, out: &Path, json_out: bool) -> Result<ExitCode> {
    let dir = crate::model::model_dir(global, src)?;
    let r = tf::export(&dir, out).map_err(user)?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "wrote {} ({} layout, {} tensors, {:.1} MB) with albert_config.json and the \
             checkpoint file; TensorFlow reads it with tf.train.load_checkpoint(\"{}\")",
            r.prefix.display(),
            r.layout,
            r.tensors_written,
            r.bytes_written as f64 / 1e6,
            out.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `model info` on a TF checkpoint: what the index says (the data files are not needed).
pub fn info(path: &Path, json_out: bool) -> Result<ExitCode> {
    let i = tf::inspect(path, None).map_err(user)?;
    // The checkpoint's own weights, without optimizer slots and bookkeeping.
    let weights: u64 = i
        .checkpoint
        .names()
        .filter(|n| pipeline_tfckpt::skip_reason(n).is_none())
        .filter_map(|n| i.checkpoint.raw_entry(n))
        .map(|e| e.size as u64)
        .sum();
    if json_out {
        println!("{}", serde_json::to_string_pretty(&info_json(&i, weights))?);
    } else {
        print_info(&i, weights);
    }
    Ok(ExitCode::SUCCESS)
}

/// `model info --json` on a TF checkpoint.
fn info_json(i: &tf::TfInfo, weights: u64) -> serde_json::Value {
    let d = &i.detected;
    let counts = i.config.as_ref().map(|c| c.parameter_count());
    let note = i.config.as_ref().and_then(|c| c.hf_compatible().err());
    json!({
            "checkpoint": i.checkpoint.prefix,
            "format": "tensorflow",
            "layout": d.layout.name(),
            "share_type": d.share_type.name(),
            "detected": {
                "vocab_size": d.vocab_size, "embedding_size": d.embedding_size,
                "hidden_size": d.hidden_size, "intermediate_size": d.intermediate_size,
                "max_position_embeddings": d.max_position_embeddings,
                "type_vocab_size": d.type_vocab_size, "encoder_blocks": d.blocks,
            },
            "config": i.config,
            "config_file": i.config_file,
            "parameters": counts,
            "tensors": i.checkpoint.len(),
            "weights_bytes": weights,
            "skipped": i.skipped.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            "missing_shards": i.missing_shards,
            "hf_compatible": note.is_none() && i.config.is_some(),
            "note": note,
    })
}

/// `model info` on a TF checkpoint, as lines.
fn print_info(i: &tf::TfInfo, weights: u64) {
    let d = &i.detected;
    let counts = i.config.as_ref().map(|c| c.parameter_count());
    let note = i.config.as_ref().and_then(|c| c.hf_compatible().err());
    println!(
        "checkpoint:   {} (TensorFlow)",
        i.checkpoint.prefix.display()
    );
    println!(
        "layout:       {} · share_type {} ({} encoder block(s))",
        d.layout.name(),
        d.share_type,
        d.blocks
    );
    println!(
        "from tensors: V {} · E {} · H {} · FFN {} · {} positions · {} token types",
        d.vocab_size,
        d.embedding_size,
        d.hidden_size,
        d.intermediate_size,
        d.max_position_embeddings,
        d.type_vocab_size
    );
    match (&i.config, &i.config_file) {
        (Some(c), Some(f)) => println!(
            "config:       {} · {} layers · {} heads · {} · {}",
            f.display(),
            c.num_hidden_layers,
            c.num_attention_heads,
            c.ln_type.name(),
            c.hidden_act.hf_name()
        ),
        _ => println!("config:       none beside the checkpoint (layers and heads unknown)"),
    }
    if let Some(p) = counts {
        println!(
            "parameters:   {} ({:.2}M): embeddings {}, encoder {}, pooler {}, MLM head {}, SOP head {}",
            p.total,
            p.total as f64 / 1e6,
            p.embeddings,
            p.encoder,
            p.pooler,
            p.mlm_head,
            p.sop_head
        );
    }
    println!(
        "tensors:      {} ({:.1} MB of weights), {} skipped (optimizer slots, bookkeeping)",
        i.checkpoint.len(),
        weights as f64 / 1e6,
        i.skipped.len()
    );
    for s in &i.missing_shards {
        println!(
            "missing:      {} (the weights cannot be loaded)",
            s.display()
        );
    }
    match note {
        None if i.config.is_some() => {
            println!("transformers: loads as is after `pipeline model import`")
        }
        None => {}
        Some(why) => println!("transformers: cannot run it faithfully: {why}"),
    }
}
