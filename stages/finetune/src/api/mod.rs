//! The finetune stage's public API, the one module the `pipeline` binary uses: load a
//! fine-tuned model, check and predict inputs ([`Predictor`], [`Input`], [`Prediction`]), and
//! time fine-tuning steps ([`bench`]).

pub mod bench;
mod io;
mod predictor;

pub use io::{
    AnswerPrediction, ChoicePrediction, ClassPrediction, FoundEntity, Input, InputError,
    Prediction, PredictionShape, ScorePrediction, TagPrediction,
};
pub use predictor::{MAX_WINDOWS, ModelInfo, Predictor};
