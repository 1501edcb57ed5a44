//! The finetune stage's public API, the one module the `pipeline` binary uses: load a
//! fine-tuned model and predict ([`Predictor`]), and time fine-tuning steps ([`bench`]).

pub mod bench;
