//! The finetune stage's public API, the one module the `pipeline` binary uses: load a
//! fine-tuned model, check and predict inputs ([`Predictor`], [`Input`], [`Prediction`]), and
//! time fine-tuning steps ([`bench`]).

pub mod bench;
mod predictor;

// What a Predictor takes and gives belongs to the kinds (each kind's serving makes them).
pub use pipeline_tasks::kinds::io::{
    AnswerPrediction, ChoicePrediction, ClassPrediction, FoundEntity, Input, InputError,
    Prediction, PredictionShape, ScorePrediction, TagPrediction,
};
pub use predictor::{MAX_WINDOWS, ModelInfo, Predictor};
