//! Checkpoints that a killed run resumes from: the model, the optimiser and the stage's own
//! state, written beside the old checkpoint and renamed over it.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::{BurnpackStore, ModuleSnapshot};
use serde::{Deserialize, Serialize};

use super::TrainingOptimizer;

/// Why a training checkpoint could not be saved or loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file or directory operation failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The state could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The temporary checkpoint directory could not be created.
    #[error("cannot create {}", dir.display())]
    Create {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// burn could not write the model's tensors.
    #[error("cannot save the model checkpoint: {0}")]
    SaveModel(String),
    /// burn could not write the optimiser's state.
    #[error("cannot save the optimizer state: {0}")]
    SaveOptimizer(String),
    /// `state.json` could not be read (not a regular file, larger than
    /// [`MAX_STATE_BYTES`], an I/O error).
    #[error("reading {}", dir.display())]
    ReadState {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why (the shared reader's error, which names the file and the limit).
        #[source]
        source: pipeline_bounded::ReadError,
    },
    /// `state.json` is not the state this run saves.
    #[error("{}/state.json is not a checkpoint state", dir.display())]
    BadState {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The parser's reason.
        #[source]
        source: serde_json::Error,
    },
    /// burn could not load the model's tensors into this model.
    #[error("the checkpoint in {} does not fit the model: {message}", dir.display())]
    DoesNotFit {
        /// The checkpoint directory.
        dir: PathBuf,
        /// burn's reason.
        message: String,
    },
    /// Tensors of the model are missing from the checkpoint or have another shape.
    #[error(
        "the checkpoint in {} does not fit the model ({missing} missing, {mismatched} mismatched \
         tensors)",
        dir.display()
    )]
    Mismatched {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Tensors of the model the checkpoint lacks.
        missing: usize,
        /// Tensors whose shape or type differs.
        mismatched: usize,
    },
    /// burn could not load the optimiser's state.
    #[error("cannot load the optimizer state: {0}")]
    LoadOptimizer(String),
}

/// The largest `state.json` a checkpoint is loaded from. Pretraining's state (step, the data
/// position, timings, the last evaluation, the config) is about 2 KB; the bound only keeps a
/// file that is not a state (a FIFO, `/dev/zero`, something still growing) from being read
/// without end.
pub const MAX_STATE_BYTES: u64 = 16 << 20;

/// A training checkpoint on disk: `model.bpk` (burnpack, which keeps parameter ids so the
/// optimiser state lines up), `optimizer.bpk`, and `state.json` (step, data position, …,
/// whatever the stage puts in `S`). It is written into `<dir>.tmp` and renamed over `dir`, so a
/// kill at any moment leaves the previous checkpoint or the new one, never half of one.
pub struct Checkpoint {
    /// The checkpoint directory.
    pub dir: PathBuf,
}

impl Checkpoint {
    /// A checkpoint at `dir` (nothing is read or written yet).
    pub fn new(dir: impl Into<PathBuf>) -> Checkpoint {
        Checkpoint { dir: dir.into() }
    }

    /// Whether a complete checkpoint is there.
    pub fn exists(&self) -> bool {
        self.dir.join("state.json").is_file()
    }

    /// Writes the model, the optimiser and `state` (atomically: see the type's docs).
    pub fn save<M: Module + ModuleSnapshot, S: Serialize>(
        &self,
        model: &M,
        optim: &TrainingOptimizer,
        state: &S,
    ) -> Result<(), CheckpointError> {
        let tmp = self.dir.with_extension("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        if let Err(source) = std::fs::create_dir_all(&tmp) {
            return Err(CheckpointError::Create { dir: tmp, source });
        }
        let mut store = BurnpackStore::from_file(tmp.join("model.bpk"));
        model
            .save_into(&mut store)
            .map_err(|e| CheckpointError::SaveModel(e.to_string()))?;
        optim
            .save(&tmp.join("optimizer.bpk"))
            .map_err(|e| CheckpointError::SaveOptimizer(e.to_string()))?;
        std::fs::write(
            tmp.join("state.json"),
            serde_json::to_string_pretty(state)? + "\n",
        )?;
        // Rename the old one aside first: rename cannot replace a non-empty directory.
        let old = self.dir.with_extension("old");
        if self.dir.exists() {
            if old.exists() {
                std::fs::remove_dir_all(&old)?;
            }
            std::fs::rename(&self.dir, &old)?;
        }
        std::fs::rename(&tmp, &self.dir)?;
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        Ok(())
    }

    /// Loads the checkpoint into a freshly built `model` and `optim` of the same shape.
    pub fn load<M: Module + ModuleSnapshot, S: for<'de> Deserialize<'de>>(
        &self,
        mut model: M,
        optim: TrainingOptimizer,
    ) -> Result<(M, TrainingOptimizer, S), CheckpointError> {
        // A kill between the two renames of `save` leaves the previous checkpoint in `.old`.
        let old = self.dir.with_extension("old");
        if !self.exists() && old.join("state.json").is_file() {
            std::fs::rename(&old, &self.dir)?;
        }
        let text = pipeline_bounded::read(
            &self.dir.join("state.json"),
            MAX_STATE_BYTES,
            "a checkpoint's state.json",
        )
        .map_err(|source| CheckpointError::ReadState {
            dir: self.dir.clone(),
            source,
        })?;
        let state: S =
            serde_json::from_slice(&text).map_err(|source| CheckpointError::BadState {
                dir: self.dir.clone(),
                source,
            })?;
        let mut store = BurnpackStore::from_file(self.dir.join("model.bpk"));
        let result = model
            .load_from(&mut store)
            .map_err(|e| CheckpointError::DoesNotFit {
                dir: self.dir.clone(),
                message: e.to_string(),
            })?;
        if !result.missing.is_empty() || !result.errors.is_empty() {
            return Err(CheckpointError::Mismatched {
                dir: self.dir.clone(),
                missing: result.missing.len(),
                mismatched: result.errors.len(),
            });
        }
        // Loaded tensors come back without gradient tracking; training them needs it.
        let model = model.set_require_grad(true);
        let optim = optim
            .load(&self.dir.join("optimizer.bpk"))
            .map_err(|e| CheckpointError::LoadOptimizer(e.to_string()))?;
        Ok((model, optim, state))
    }
}

/// Removes a checkpoint directory (after the stage has succeeded, or to start over).
pub fn remove_checkpoint(dir: &Path) -> std::io::Result<()> {
    for d in [
        dir.to_path_buf(),
        dir.with_extension("tmp"),
        dir.with_extension("old"),
    ] {
        if d.exists() {
            std::fs::remove_dir_all(&d)?;
        }
    }
    Ok(())
}
