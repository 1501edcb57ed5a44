//! `pipeline model info`: the config, parameter count and size of a model directory, or what
//! a TensorFlow 1 checkpoint's index says (its data files are not needed).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use pipeline_albert::tf;
use pipeline_albert::{AlbertConfig, hf};
use serde_json::{Value, json};

use crate::global::Global;
use crate::model_source::{ModelSource, input_error, model_dir};

pub fn info(global: &Global, src: &ModelSource, json_out: bool) -> Result<ExitCode> {
    let dir = model_dir(global, src)?;
    if pipeline_tfckpt::is_checkpoint(&dir) {
        return tf_info(&dir, json_out);
    }
    let config = hf::read_config(&dir)?;
    let weights = hf::weights_file(&dir)?;
    let bytes = std::fs::metadata(&weights)?.len();
    let raw = hf::read_config_json(&dir)?;
    let counts = config.parameter_count();
    let report = json!({
        "model": dir,
        "architecture": raw["architectures"][0],
        "config": config,
        "parameters": counts,
        "fp32_megabytes": (counts.total as f64 * 4.0 / 1e6 * 100.0).round() / 100.0,
        "weights_file": weights,
        "weights_bytes": bytes,
        "hf_compatible": config.hf_compatible().is_ok(),
        "note": raw.get("pipeline_note"),
        "labels": raw.get("id2label"),
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_info(&dir, &config, &report, bytes);
    Ok(ExitCode::SUCCESS)
}

fn print_info(dir: &Path, c: &AlbertConfig, report: &Value, bytes: u64) {
    let p = c.parameter_count();
    println!("model:        {}", dir.display());
    println!(
        "architecture: {}",
        report["architecture"].as_str().unwrap_or("?")
    );
    println!(
        "size:         V {} · E {} · H {} · {} layers · {} heads · FFN {} · {} positions",
        c.vocab_size,
        c.embedding_size,
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.intermediate_size,
        c.max_position_embeddings
    );
    println!(
        "variant:      share_type {} · {} · {}",
        c.share_type,
        c.ln_type.name(),
        c.hidden_act.hf_name()
    );
    println!(
        "parameters:   {} total ({:.2}M): embeddings {} (word {}), encoder {}, pooler {}, MLM head {}, SOP head {}",
        p.total,
        p.total as f64 / 1e6,
        p.embeddings,
        p.word_embeddings,
        p.encoder,
        p.pooler,
        p.mlm_head,
        p.sop_head
    );
    println!(
        "weights:      {} ({:.1} MB on disk, {:.1} MB as fp32)",
        report["weights_file"].as_str().unwrap_or("?"),
        bytes as f64 / 1e6,
        p.total as f64 * 4.0 / 1e6
    );
    if let Some(labels) = report["labels"].as_object() {
        let names: Vec<&str> = labels.values().filter_map(Value::as_str).collect();
        println!("labels:       {}", names.join(", "));
    }
    match c.hf_compatible() {
        Ok(()) => println!("transformers: loads as is"),
        Err(why) => println!("transformers: cannot run it faithfully: {why}"),
    }
}

/// `model info` on a TF checkpoint: what the index says (the data files are not needed).
fn tf_info(path: &Path, json_out: bool) -> Result<ExitCode> {
    let i = tf::inspect(path, None).map_err(input_error)?;
    // The checkpoint's own weights, without optimizer slots and bookkeeping.
    let weights: u64 = i
        .checkpoint
        .names()
        .filter(|n| pipeline_tfckpt::skip_reason(n).is_none())
        .filter_map(|n| i.checkpoint.raw_entry(n))
        .map(|e| e.size as u64)
        .sum();
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&tf_info_json(&i, weights))?
        );
    } else {
        print_tf_info(&i, weights);
    }
    Ok(ExitCode::SUCCESS)
}

/// `model info --json` on a TF checkpoint.
fn tf_info_json(i: &tf::TfInfo, weights: u64) -> serde_json::Value {
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
fn print_tf_info(i: &tf::TfInfo, weights: u64) {
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
