//! The model's element-wise blocks: the activations (tanh-GELU fused on flex, see
//! [`crate::fused`]) and LayerNorm (fused with its backward under autodiff on flex).

use burn::nn::LayerNorm;
use burn::tensor::Tensor;
use burn::tensor::activation::{gelu, relu, sigmoid};

use crate::config::Activation;

pub(super) fn activate<const D: usize>(x: Tensor<D>, act: Activation) -> Tensor<D> {
    match act {
        Activation::Gelu => gelu(x),
        Activation::GeluNew => gelu_tanh(x),
        Activation::Relu => relu(x),
    }
}

/// The tanh approximation of GELU, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as
/// the identical `x·σ(2·√(2/π)·(x + 0.044715·x³))`: burn's `gelu_approximate` spends a quarter
/// of a CPU training step in scalar `powf` and `tanhf`. On flex one fused pass (forward, and
/// backward under autodiff); elsewhere burn's ops, with `sigmoid` one op each way.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    crate::fused::gelu_tanh(x)
        .or_else(|x| crate::fused::gelu_tanh_tracked(*x))
        .unwrap_or_else(|x| gelu_tanh_composed(*x))
}

/// [`gelu_tanh`] from burn's ops (what other backends run; the fused ops' reference).
pub fn gelu_tanh_composed<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    const C1: f64 = 1.595_769_121_605_730_7; // 2·√(2/π)
    const C3: f64 = C1 * 0.044715;
    let inner = (x.clone() * x.clone()).mul_scalar(C3).add_scalar(C1) * x.clone();
    x * sigmoid(inner)
}

/// `ln(x)` with its configured `epsilon` (burn's `LayerNorm` does not expose it): one op with
/// a fused backward when training on flex ([`crate::fused::layer_norm`]).
pub(super) fn norm<const D: usize>(ln: &LayerNorm, x: Tensor<D>, epsilon: f64) -> Tensor<D> {
    crate::fused::layer_norm(ln, x, epsilon)
}
