//! `pipeline model import`: a TensorFlow 1 checkpoint (google-research/albert's or
//! brightmart/albert_zh's) into a model directory: config.json, model.safetensors, vocab.txt,
//! tokenizer.json. Every failure is the input's (exit code 2, the file named).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use pipeline_albert::tf;
use serde_json::json;

use crate::global::Global;
use crate::model_source::input_error;

pub fn import(
    global: &Global,
    from: &Path,
    out: &Path,
    config: Option<&Path>,
    vocab: Option<&Path>,
    json_out: bool,
) -> Result<ExitCode> {
    let r = tf::import(from, config, vocab, out).map_err(input_error)?;
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
