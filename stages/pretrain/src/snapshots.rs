//! Intermediate exports of the model (`save_steps`): at each chosen step the same Hugging Face
//! export as the final artifact, with the tokens seen so far, so that `finetune` can fine-tune
//! a model from any point of the run (`pretrain_step`) and the report can plot downstream
//! accuracy against pretraining tokens.
//!
//! They are written into the work area while training (so that a killed run keeps the ones it
//! finished) and moved under `steps/<N>/` of the artifact when the run exports.

use std::path::{Path, PathBuf};

use anyhow::Context;
use pipeline_albert::{AlbertConfig, AlbertForPreTraining, hf};
use pipeline_metrics::PretrainingPoint;
use pipeline_metrics::records::SNAPSHOT_FILE;

/// Where the snapshots of a run are kept until the export (the work area).
pub fn work_dir(work: &Path) -> PathBuf {
    work.join("steps")
}

/// Exports `model` as the snapshot of `step`, replacing one a previous attempt left; the
/// directory appears whole or not at all.
pub fn save(
    work: &Path,
    step: u64,
    tokens_seen: u64,
    config: &AlbertConfig,
    model: &AlbertForPreTraining,
    vocab_dir: &Path,
) -> anyhow::Result<()> {
    let root = work_dir(work);
    let staging = root.join(format!(".{step}.partial"));
    let dir = root.join(step.to_string());
    for d in [&staging, &dir] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
    }
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    hf::save_pretraining(&staging, config, model)?;
    copy_vocabulary(vocab_dir, &staging)?;
    let about = PretrainingPoint {
        step: Some(step),
        tokens_seen: Some(tokens_seen),
    };
    std::fs::write(
        staging.join(SNAPSHOT_FILE),
        serde_json::to_value(about)?.to_string() + "\n",
    )?;
    std::fs::rename(&staging, &dir)
        .with_context(|| format!("renaming {} to {}", staging.display(), dir.display()))
}

/// `vocab.txt` and `tokenizer.json` of the vocabulary, beside a model export.
pub fn copy_vocabulary(vocab_dir: &Path, out: &Path) -> anyhow::Result<()> {
    for f in ["vocab.txt", "tokenizer.json"] {
        let src = vocab_dir.join(f);
        if src.is_file() {
            std::fs::copy(&src, out.join(f))
                .with_context(|| format!("copying {}", src.display()))?;
        }
    }
    Ok(())
}

/// Moves the finished snapshots (those of `steps`) from the work area into `out/steps/`.
pub fn publish(work: &Path, out: &Path, steps: &[u64]) -> anyhow::Result<()> {
    if steps.is_empty() {
        return Ok(());
    }
    let target = out.join("steps");
    std::fs::create_dir_all(&target)?;
    for step in steps {
        let src = work_dir(work).join(step.to_string());
        anyhow::ensure!(
            src.join(SNAPSHOT_FILE).is_file(),
            "the snapshot of step {step} is missing from {}: run the stage again with --force",
            src.display()
        );
        let dst = target.join(step.to_string());
        std::fs::rename(&src, &dst)
            .with_context(|| format!("moving {} to {}", src.display(), dst.display()))?;
    }
    Ok(())
}
