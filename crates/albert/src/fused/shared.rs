//! [`shared_weight`]: a weight that several layers share, made once for a forward pass.

use burn::tensor::{DType, Tensor};

use super::tracked;

/// `w` as every layer sharing it takes it in one forward pass, for the fused linear ops
/// ([`super::linear`], [`super::linear_bf16`]) and nothing else: on libtorch cast to bf16 once
/// when `bf16` (autocast's cast cache), and under autodiff one node of the graph whose layers'
/// weight gradients the products sum in place, in one kernel a layer
/// (`super::torch_shared` says why and how); `w` itself elsewhere, or when it is not float32.
///
/// Only the fused products may take the result: burn's own ops adding to its gradient would
/// leave the in-place sum behind (the backward checks, and panics, rather than drop it).
pub fn shared_weight(w: Tensor<2>, bf16: bool) -> Tensor<2> {
    let float32 = w.dtype() == DType::F32;
    let libtorch = tracked::on_libtorch(&w);
    if !(float32 && libtorch) {
        return w;
    }
    tracked::shared_operand(w, bf16)
}
