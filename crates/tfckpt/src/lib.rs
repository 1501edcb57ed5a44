//! TensorFlow 1 checkpoints — "tensor bundles" — read and written without TensorFlow.
//!
//! A checkpoint is `<prefix>.index` (an SSTable, see [`table`]) plus `<prefix>.data-NNNNN-of-NNNNN`
//! shards holding the raw little-endian tensors, and usually a `checkpoint` text file naming the
//! prefix. The index maps the empty key to a `BundleHeaderProto` and every tensor name to a
//! `BundleEntryProto` (dtype, shape, shard, offset, size, masked CRC-32C; see [`proto`]).
//! References: tensorflow/core/util/tensor_bundle/tensor_bundle.{cc,proto} and
//! tensorflow/core/lib/io/format.cc.
//!
//! [`Checkpoint`] checks what TensorFlow checks (footer magic, block checksums, the header, the
//! version, endianness, `size == numel × width`, every tensor's checksum) and names the file and
//! tensor in every error. [`Writer`] writes bundles that `tf.train.load_checkpoint` reads.
//! [`skip_reason`] is the rule that sets optimizer slots and bookkeeping apart from weights.

#![warn(missing_docs)]

pub mod proto;
mod reader;
pub mod table;
mod writer;

use std::fmt;
use std::path::PathBuf;

pub use reader::{Checkpoint, Tensor, is_checkpoint};
pub use writer::{Writer, write_checkpoint_file};

/// A checkpoint problem, with the file (and tensor) it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    /// The index or data file the problem is in.
    pub file: PathBuf,
    /// The tensor, when the problem is one tensor's.
    pub tensor: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(t) = &self.tensor {
            write!(f, ": tensor {t}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl Error {
    /// A problem with `file` as a whole.
    pub fn new(file: impl Into<PathBuf>, message: impl Into<String>) -> Error {
        Error {
            file: file.into(),
            tensor: None,
            message: message.into(),
        }
    }

    /// A problem with one tensor of `file`.
    pub fn tensor(file: impl Into<PathBuf>, tensor: &str, message: impl Into<String>) -> Error {
        Error {
            file: file.into(),
            tensor: Some(tensor.to_string()),
            message: message.into(),
        }
    }
}

/// A tensor type this reader cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "dtype {name} (TensorFlow DataType {code}) is not supported: only float32, float16, \
     bfloat16, float64, int32, int64 and bool tensors can be read"
)]
pub struct UnsupportedDType {
    /// TensorFlow's name for it (or "a reference type", "an unsupported type").
    pub name: &'static str,
    /// Its `DataType` code.
    pub code: i32,
}

/// The tensor types this reader handles (TensorFlow's `DataType` codes in [`DType::tf_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// float32.
    F32,
    /// float64.
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16 (the top half of a float32).
    BF16,
    /// int32.
    I32,
    /// int64.
    I64,
    /// One byte a value, 0 or 1.
    Bool,
}

impl DType {
    /// Every dtype, in TensorFlow's code order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// TensorFlow's `DataType` code.
    pub fn tf_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::F64 => 2,
            DType::I32 => 3,
            DType::I64 => 9,
            DType::Bool => 10,
            DType::BF16 => 14,
            DType::F16 => 19,
        }
    }

    /// The dtype of a TensorFlow code, or why it cannot be read.
    pub fn from_tf(code: i32) -> Result<DType, UnsupportedDType> {
        if let Some(d) = DType::ALL.into_iter().find(|d| d.tf_code() == code) {
            return Ok(d);
        }
        let name = match code {
            7 => "string",
            20 => "resource",
            21 => "variant",
            4 => "uint8",
            5 => "int16",
            6 => "int8",
            8 => "complex64",
            18 => "complex128",
            c if c > 100 => "a reference type",
            _ => "an unsupported type",
        };
        Err(UnsupportedDType { name, code })
    }

    /// Bytes per element.
    pub fn width(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// numpy's name for it (`float32`, `bfloat16`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
        }
    }
}

/// `values` (`rows × cols`, row-major) transposed to `cols × rows`: TF stores dense kernels
/// `[in, out]`, PyTorch `[out, in]`. In 32×32 tiles, so that reads and writes both stay in
/// cache (a naive loop over a 4096×16384 kernel runs at a tenth of the speed).
pub fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const T: usize = 32;
    assert_eq!(
        values.len(),
        rows * cols,
        "transpose: {rows}×{cols} values expected"
    );
    let mut out = vec![0f32; values.len()];
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                for c in c0..(c0 + T).min(cols) {
                    out[c * rows + r] = values[r * cols + c];
                }
            }
        }
    }
    out
}

/// Why a tensor of this name is not a model weight, or `None` when it is one: optimizer slots
/// (Adam/LAMB moments of albert_zh's and google-research/albert's optimizers, `Adam`/`Adam_1`
/// of tf.train.AdamOptimizer, momentum), `global_step`, the optimizers' own variables and
/// mixed-precision loss scaling. The rule is by name because the index says nothing else about
/// what a variable is for.
pub fn skip_reason(name: &str) -> Option<&'static str> {
    let last = name.rsplit('/').next().unwrap_or(name);
    if matches!(last, "adam_m" | "adam_v" | "lamb_m" | "lamb_v")
        || matches!(
            last,
            "Adam" | "Adam_1" | "Momentum" | "RMSProp" | "RMSProp_1"
        )
        || matches!(last, "Adagrad" | "LAMB" | "LAMB_1")
    {
        return Some("optimizer slot");
    }
    if name == "global_step" || name.ends_with("/global_step") {
        return Some("global_step");
    }
    if name.contains("AdamWeightDecayOptimizer")
        || name.contains("LAMBOptimizer")
        || name.contains("LambOptimizer")
        || matches!(last, "beta1_power" | "beta2_power")
    {
        return Some("optimizer state");
    }
    if matches!(last, "loss_scale" | "good_steps") || name.starts_with("_CHECKPOINTABLE") {
        return Some("bookkeeping");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_slots_and_bookkeeping_but_not_weights() {
        for name in [
            "bert/encoder/layer_shared/attention/self/query/kernel/adam_m",
            "bert/embeddings/word_embeddings/adam_v",
            "cls/predictions/output_bias/lamb_m",
            "bert/pooler/dense/bias/lamb_v",
            "global_step",
            "bert/embeddings/LayerNorm/beta/Adam_1",
            "AdamWeightDecayOptimizer/beta1",
            "beta1_power",
        ] {
            assert!(skip_reason(name).is_some(), "{name}");
        }
        for name in [
            "bert/embeddings/word_embeddings",
            "bert/embeddings/word_embeddings_2",
            "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel",
            "cls/seq_relationship/output_weights",
            "cls/predictions/output_bias",
        ] {
            assert_eq!(skip_reason(name), None, "{name}");
        }
    }

    #[test]
    fn transposes_any_shape() {
        for (r, c) in [(1, 1), (2, 3), (33, 70), (64, 32)] {
            let v: Vec<f32> = (0..r * c).map(|i| i as f32).collect();
            let t = transpose(&v, r, c);
            for i in 0..r {
                for j in 0..c {
                    assert_eq!(t[j * r + i], v[i * c + j]);
                }
            }
            assert_eq!(transpose(&t, c, r), v);
        }
    }

    #[test]
    fn dtypes_round_trip_and_strings_are_refused() {
        for d in DType::ALL {
            assert_eq!(DType::from_tf(d.tf_code()), Ok(d));
        }
        assert!(
            DType::from_tf(7)
                .unwrap_err()
                .to_string()
                .contains("string")
        );
        assert!(
            DType::from_tf(21)
                .unwrap_err()
                .to_string()
                .contains("variant")
        );
        assert!(
            DType::from_tf(101)
                .unwrap_err()
                .to_string()
                .contains("reference")
        );
    }
}
