//! Products of bf16 matrices whose result is wanted in float32, for the bf16 linear layer
//! ([`super::torch`]): the layers that meet the float32 residual stream (the attention's output
//! projection, the FFN's second layer), the input gradients of the layers fed in float32 (the
//! LayerNorm outputs into Q/K/V and the FFN), and the weights' gradients (float32 master copies).
//!
//! Why: composed, each is a bf16 product, a cast of its result up to float32 and, in the
//! forward, the bias added in float32: three kernels, two of them passes over an
//! activation-sized tensor. The 2026-11-30 profile of a `base` 32 × 512 bf16 step on an H200
//! spent 1.3 ms in bf16 casts (147) and 3.3 ms in float32 adds (258) of its 35.1 ms. On CUDA
//! torch (≥ 2.8) has products that write float32 from bf16 operands (`mm.dtype`,
//! `addmm.dtype`): cuBLAS accumulates in float32 anyway, and the bias goes in as the product's
//! `C`, so one kernel does it, and the result is not rounded to bf16 on the way.
//!
//! libtorch's CPU has no such kernels ("Could not run 'aten::mm.dtype' with arguments from the
//! 'CPU' backend", torch 2.11), so there, and on CUDA should torch refuse them, the composed
//! form runs: the same product rounded to bf16 before it is cast up, which the tests check
//! against. A refusal on CUDA is said once, as a warning.
//!
//! The weight gradient of a layer whose weight the layers before it share is added into their
//! running sum by the product itself ([`add_mm_to_float`]: `addmm.dtype` with the float32 sum
//! as `C`, β = 1, written in place), see `super::torch_shared`.

use std::sync::atomic::{AtomicBool, Ordering};

use tch::{Kind, Tensor};

/// Set when torch refused a float32-output product on CUDA: from then on the composed form.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Set when torch refused to add a float32-output product into a float32 `C` on CUDA: from
/// then on the composed form, for that product alone. Torch's `addmm.dtype` took `C` in the
/// operands' dtype only until pytorch/pytorch#167931 (November 2025) let it be the output's.
/// The sitting's libtorch 2.11 has the new check: its `libtorch_cuda.so` holds the message
/// "self dtype must match either out_dtype or mat1 dtype" and not the old "self and mat2 must
/// have the same dtype" (`grep -a`, 2026-12-01). Not yet run on a GPU.
static SUM_REFUSED: AtomicBool = AtomicBool::new(false);

/// `a·b` of bf16 matrices, in float32.
pub(super) fn mm_to_float(a: &Tensor, b: &Tensor) -> Tensor {
    if let Some(product) = on_cuda(a, &REFUSED, || a.f_mm_dtype(b, Kind::Float)) {
        return product;
    }
    a.mm(b).to_kind(Kind::Float)
}

/// `x·W + bias` of bf16 `x` and `W` and a float32 `bias`, in float32. On CUDA the bias is
/// rounded to bf16 first, as autocast's `nn.Linear` rounds it (and as torch's `addmm.dtype`
/// required before pytorch/pytorch#167931), and added in float32 by the product.
pub(super) fn addmm_to_float(bias: &Tensor, x: &Tensor, w: &Tensor) -> Tensor {
    let fused = on_cuda(x, &REFUSED, || {
        bias.to_kind(Kind::BFloat16)
            .f_addmm_dtype(x, w, Kind::Float)
    });
    if let Some(y) = fused {
        return y;
    }
    x.mm(w).to_kind(Kind::Float) + bias
}

/// `sum += a·b` in place, of bf16 matrices `a` and `b` and a float32 `sum`: on CUDA one
/// product writing into `sum` (`addmm.dtype`, `sum` its `C` and its output, β = 1), so the
/// layer's gradient is never written out on its own; elsewhere, or should torch refuse, the
/// bf16 product cast up and added.
pub(super) fn add_mm_to_float(sum: &Tensor, a: &Tensor, b: &Tensor) {
    if on_cuda(a, &SUM_REFUSED, || {
        sum.f_addmm_dtype_out(sum, a, b, Kind::Float)
    })
    .is_some()
    {
        return;
    }
    let mut sum = sum.shallow_clone();
    sum += a.mm(b).to_kind(Kind::Float);
}

/// The factors `(a, b)` of a linear layer's weight gradient `a·b`: `xᵀ·g`, or `gᵀ·x` when the
/// weight is stored `transposed`.
pub(super) fn weight_factors(g: &Tensor, x: &Tensor, transposed: bool) -> (Tensor, Tensor) {
    if transposed {
        (g.tr(), x.shallow_clone())
    } else {
        (x.tr(), g.shallow_clone())
    }
}

/// The operands' dtype of a weight gradient's product: float32 (its result too), or bf16 with
/// the result in float32.
#[derive(Clone, Copy)]
pub(super) enum Precision {
    Float,
    Bf16,
}

/// The weight gradient `a·b`, in float32: returned, or added into `sum` in place (one product
/// with β = 1) and `None`.
pub(super) fn weight_gradient(
    a: &Tensor,
    b: &Tensor,
    sum: Option<&Tensor>,
    p: Precision,
) -> Option<Tensor> {
    match (sum, p) {
        (None, Precision::Float) => Some(a.mm(b)),
        (None, Precision::Bf16) => Some(mm_to_float(a, b)),
        (Some(sum), Precision::Float) => {
            let _ = sum.shallow_clone().addmm_(a, b);
            None
        }
        (Some(sum), Precision::Bf16) => {
            add_mm_to_float(sum, a, b);
            None
        }
    }
}

/// `product()` where `on` is a CUDA tensor and torch has not refused one before (`refused`);
/// `None` where the composed form must run (a refusal is warned of, once).
fn on_cuda(
    on: &Tensor,
    refused: &AtomicBool,
    product: impl FnOnce() -> Result<Tensor, tch::TchError>,
) -> Option<Tensor> {
    if !on.device().is_cuda() || refused.load(Ordering::Relaxed) {
        return None;
    }
    match product() {
        Ok(t) => Some(t),
        Err(e) => {
            if !refused.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "torch refused a bf16 product with a float32 result ({e}); casting the \
                     bf16 results up instead"
                );
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn bf16(rows: i64, cols: i64, seed: i64) -> Tensor {
        tch::manual_seed(seed);
        Tensor::randn([rows, cols], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16)
    }

    #[test]
    fn off_cuda_the_products_are_the_bf16_ones_cast_up() {
        let (x, w) = (bf16(5, 7, 1), bf16(7, 3, 2));
        let bias = Tensor::from_slice(&[0.25f32, -1.0, 3.0]);
        let y = addmm_to_float(&bias, &x, &w);
        assert_eq!(y.kind(), Kind::Float);
        let want = x.mm(&w).to_kind(Kind::Float) + &bias;
        assert!(y.equal(&want));
        let p = mm_to_float(&x.tr(), &bf16(5, 2, 3));
        assert_eq!((p.kind(), p.size()), (Kind::Float, vec![7, 2]));
        // Against the float32 product: within bf16's rounding of the result.
        let exact = x.to_kind(Kind::Float).mm(&w.to_kind(Kind::Float)) + &bias;
        let err = (&y - &exact).abs().max().double_value(&[]);
        assert!(err < 0.05, "{err}");
        assert!(!REFUSED.load(Ordering::Relaxed), "a CPU call is no refusal");
    }

    #[test]
    fn a_product_is_added_into_a_float32_sum_in_place() {
        let (a, b) = (bf16(4, 6, 4), bf16(6, 3, 5));
        tch::manual_seed(6);
        let sum = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let want = &sum + a.mm(&b).to_kind(Kind::Float);
        let before = sum.data_ptr();
        add_mm_to_float(&sum, &a, &b);
        assert!(sum.equal(&want));
        assert_eq!(sum.data_ptr(), before, "in place");
        assert!(
            !SUM_REFUSED.load(Ordering::Relaxed),
            "a CPU call is no refusal"
        );
    }
}
