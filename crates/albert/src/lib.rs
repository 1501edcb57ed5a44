//! ALBERT (Lan et al., 2019) on burn, for pretraining and fine-tuning Chinese models:
//!
//! - [`config`]: hyper-parameters from albert_zh JSON, Hugging Face `config.json` and pipeline
//!   params, validation, parameter counts;
//! - [`model`]: factorised embeddings, the shared encoder (`share_type` all / attention / ffn /
//!   none, post-LN or pre-LN), pooler, MLM/SOP heads;
//! - [`heads`]: the fine-tuning heads: sequence classification, multiple choice, token
//!   classification, question answering;
//! - [`hf`]: Hugging Face checkpoints in and out (`config.json` + `model.safetensors` or
//!   `pytorch_model.bin`);
//! - [`tf`]: TensorFlow 1 checkpoints of google-research/albert and brightmart/albert_zh in and
//!   out (read with `pipeline-tfckpt`), [`albert_zh_layout`] for albert_zh's own architecture;
//! - [`device`]: the `device` param (`auto`, `cpu`, `cuda:0`) and the backends this build has;
//! - [`parallel`]: one micro-batch per CPU core, gradients summed;
//! - [`memory`]: a libtorch device running out of memory as a value, for batch-size probes;
//! - [`cpu_level`]: the vector instructions the hand-written CPU kernels run with;
//! - [`cuda_sync`]: how many times a stretch of work makes the host wait for a CUDA device;
//! - [`op_tally`]: which of libtorch's operators a stretch of work calls, from where, on what;
//! - [`bench`]: what the model benchmarks share (their spec, config, device and timing);
//! - [`upload`]: host data onto the device without waiting for it (pinned memory on CUDA).

#![warn(missing_docs)]

pub mod albert_zh_layout;
pub mod bench;
pub mod config;
pub mod cpu_level;
pub mod cuda_profiler;
pub mod cuda_sync;
pub mod device;
mod fused;
pub mod heads;
pub mod hf;
pub mod memory;
pub mod model;
pub mod op_tally;
pub mod parallel;
pub mod safetensors_header;
pub mod tf;
pub mod torch_trace;
pub mod train;

pub use config::{
    Activation, AlbertConfig, ConfigError, Layout, LnType, ParameterCount, ShareType,
};
pub use fused::upload;
pub use heads::{
    AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
    AlbertForTokenClassification, SpanLogits,
};
pub use model::{Albert, AlbertForPreTraining, AlbertInput, MlmTargets, PretrainOutput};
