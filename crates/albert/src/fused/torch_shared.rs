//! A weight that several layers share, as one training pass on libtorch uses it
//! ([`crate::fused::shared_weight`]): made once a forward pass (cast to bf16 once under bf16
//! mixed precision, passed through as it is in float32), and backward its layers' gradients
//! summed by the products that compute them.
//!
//! Why: ALBERT's layers share one block's weights, and each layer's product took the float32
//! master weight. Under bf16 each cast it again: 12 casts of each weight a step of `base`, 24
//! of `large`. Backward, burn's autodiff summed the layers' weight gradients with one float32
//! `add` each: `pipeline bench train --model base --precision bf16 --count-ops` on `tch-cpu`
//! counted 22–24 float32 `add_`s of each shared weight's shape a step (two data-parallel halves,
//! 11–12 each). Here the cast is made once, as autocast's cast cache makes it. The first layer
//! backward (the last one forward) registers its weight gradient with burn, and every later
//! one adds its product into that same tensor inside the product: `addmm_` with β = 1 in
//! float32, and under bf16 `addmm.dtype` writing float32 into the sum on CUDA
//! (`super::torch_products::add_mm_to_float`). One kernel a layer where there were two, and no
//! weight-sized gradient written out and read back for the sum.
//!
//! The running sums wait in [`OPEN`], keyed by the shared operand's node, from its forward to
//! its backward. The backward takes the sum from burn (the tensor the first layer registered,
//! which the others added into) and checks that it is that very tensor: an op other than these
//! products that added to it through burn would leave the running sum behind, so the operand
//! is made only for the products, and a mismatch panics rather than drop a gradient.

// burn marks its libtorch backend deprecated; it is the one that builds offline (device.rs).
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::libtorch::TchTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, LibTorch};
use tch::{Kind, Tensor};

/// The running weight-gradient sums of the shared operands whose backward has not run yet:
/// `None` until the first product's backward registers a gradient.
static OPEN: Mutex<BTreeMap<NodeId, Option<Tensor>>> = Mutex::new(BTreeMap::new());

/// How many operands may wait for their backward. A forward pass under autodiff that is never
/// differentiated leaves its entries here; past this many the oldest go (node ids only grow).
/// A training step of `tiny` or `base` opens four a data-parallel half.
const MAX_OPEN: usize = 256;

fn open() -> MutexGuard<'static, BTreeMap<NodeId, Option<Tensor>>> {
    OPEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a product's backward does with its weight's gradient.
pub(super) enum WeightSum {
    /// The weight is no shared operand: register the gradient with burn, as any op does.
    Alone,
    /// The first of the layers sharing it: register the gradient and keep it as their sum.
    First(NodeId),
    /// A later layer: add the product into this sum and register nothing.
    Into(Tensor),
}

/// How the backward of a product whose weight is node `weight` sums its weight gradient.
pub(super) fn weight_sum(weight: NodeId) -> WeightSum {
    match open().get(&weight) {
        None => WeightSum::Alone,
        Some(None) => WeightSum::First(weight),
        Some(Some(sum)) => WeightSum::Into(sum.shallow_clone()),
    }
}

/// Keeps `gradient`, which the first layer's backward registers with burn, as the running sum
/// of the operand `weight`.
pub(super) fn keep_first(weight: NodeId, gradient: &Tensor) {
    if let Some(slot) = open().get_mut(&weight) {
        *slot = Some(gradient.shallow_clone());
    }
}

/// `w` once for every layer that shares it: cast to bf16 when `bf16`, as it is otherwise; a
/// node of burn's graph whose layers' gradients are summed in place (see the module doc).
pub(super) fn operand<C: CheckpointStrategy>(
    w: FloatTensor<Autodiff<LibTorch, C>>,
    bf16: bool,
) -> FloatTensor<Autodiff<LibTorch, C>> {
    let node = w.node();
    let w = w.into_primitive();
    let kind = w.tensor.kind();
    match SharedOperandBackward
        .prepare::<C>([node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let output = prep.finish(kind, cast(w, bf16));
            start(output.id());
            output
        }
        OpsKind::UnTracked(prep) => prep.finish(cast(w, bf16)),
    }
}

/// `w` in bf16 when `bf16` (a fresh copy unless it is bf16 already), else `w` itself.
pub(super) fn cast(w: TchTensor, bf16: bool) -> TchTensor {
    if bf16 && w.tensor.kind() != Kind::BFloat16 {
        TchTensor::new(w.tensor.to_kind(Kind::BFloat16))
    } else {
        w
    }
}

/// Opens the running sum of operand `id`, dropping the oldest open ones past [`MAX_OPEN`].
fn start(id: NodeId) {
    let mut open = open();
    while open.len() >= MAX_OPEN {
        open.pop_first();
    }
    open.insert(id, None);
}

/// The backward of [`operand`]: the summed gradient, in the weight's own dtype, to the weight.
#[derive(Debug)]
struct SharedOperandBackward;

impl Backward<LibTorch, 1> for SharedOperandBackward {
    /// The weight's dtype.
    type State = Kind;

    fn backward(self, ops: Ops<Kind, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<LibTorch>(&ops.node);
        let kept = open().remove(&ops.node.id).flatten();
        if let Some(sum) = kept {
            // The layers added into `sum`; burn must hand back that tensor, not another.
            assert_eq!(
                sum.data_ptr(),
                grad.tensor.data_ptr(),
                "a shared weight's gradient was summed outside its products"
            );
        }
        let Some(parent) = &ops.parents[0] else {
            return;
        };
        let grad = match grad.tensor.kind() == ops.state {
            true => grad,
            false => TchTensor::new(grad.tensor.to_kind(ops.state)),
        };
        grads.register::<LibTorch>(parent.id, grad);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use burn::tensor::{Device, Distribution, FloatDType, Tensor};

    use crate::fused::{linear, linear_bf16, shared_weight};

    fn device() -> Device {
        let device = Device::libtorch().autodiff();
        device.seed(41);
        device
    }

    /// What [`run`] differentiates: its layers' outputs and the gradients of
    /// the weight, the bias and each input, and the libtorch operators forward and backward.
    struct Run {
        outputs: Vec<Tensor<2>>,
        forward_ops: BTreeMap<String, u64>,
        dw: Tensor<2>,
        db: Tensor<1>,
        dxs: Vec<Tensor<2>>,
        ops: BTreeMap<String, u64>,
    }

    /// A weight `[6, 5]` and bias, three inputs `[4, 6]` and a random weighting of each output.
    struct Layers {
        w: Tensor<2>,
        b: Tensor<1>,
        xs: Vec<Tensor<2>>,
        weights: Vec<Tensor<2>>,
    }

    /// Drawn once for both runs a test compares (tests beside it draw from the same generator).
    fn layers() -> Layers {
        let device = device();
        let random = |dims: [usize; 2]| Tensor::<2>::random(dims, Distribution::Default, &device);
        Layers {
            w: random([6, 5]).require_grad(),
            b: Tensor::<1>::random([5], Distribution::Default, &device).require_grad(),
            xs: (0..3).map(|_| random([4, 6]).require_grad()).collect(),
            weights: (0..3).map(|_| random([4, 5])).collect(),
        }
    }

    /// Three linear layers sharing one weight and bias, each on its own input, in bf16 mixed
    /// precision or float32, the weight made once by [`shared_weight`] or taken as it is by
    /// every layer; the loss the weighted sum of the three outputs.
    fn run(l: &Layers, bf16: bool, shared: bool) -> Run {
        let Layers { w, b, xs, weights } = l;
        let _one = crate::op_tally::one_count_at_a_time();
        let forward = || {
            let operand = match shared {
                true => shared_weight(w.clone(), bf16),
                false => w.clone(),
            };
            let product = |x: &Tensor<2>| match bf16 {
                true => linear_bf16(x, &operand, b, false, FloatDType::F32),
                false => linear(x, &operand, b, false),
            };
            xs.iter().map(|x| product(x).expect("fused")).collect()
        };
        let (outputs, forward_ops): (Vec<_>, _) =
            crate::op_tally::count_ops_here(forward).expect("tally");
        let loss = outputs
            .iter()
            .zip(weights)
            .map(|(y, r)| (y.clone() * r.clone()).sum())
            .reduce(|a, b| a + b)
            .expect("three layers");
        let (grads, ops) = crate::op_tally::count_ops_here(|| loss.backward()).expect("tally");
        Run {
            outputs,
            forward_ops,
            dw: w.grad(&grads).expect("dW"),
            db: b.grad(&grads).expect("db"),
            dxs: xs.iter().map(|x| x.grad(&grads).expect("dx")).collect(),
            ops,
        }
    }

    /// How many times `op` was called on a `[6, 5]` float32 tensor (the weight's shape) at the
    /// top level, not inside another operator.
    fn weight_calls(ops: &BTreeMap<String, u64>, op: &str) -> u64 {
        ops.get(&format!("{op} [Float 6x5]")).copied().unwrap_or(0)
    }

    /// The outputs, and the gradients of the bias and of every input, bit for bit the same.
    fn assert_same_outputs_and_other_gradients(shared: &Run, own: &Run) {
        let pairs = shared.outputs.iter().zip(&own.outputs);
        for (a, b) in pairs.chain(shared.dxs.iter().zip(&own.dxs)) {
            assert_eq!(a.to_data(), b.to_data());
        }
        assert_eq!(shared.db.to_data(), own.db.to_data());
    }

    #[test]
    fn shared_float32_layers_sum_their_weight_gradient_in_their_products() {
        let l = layers();
        let (shared, own) = (run(&l, false, true), run(&l, false, false));
        assert_same_outputs_and_other_gradients(&shared, &own);
        let scale = own.dw.clone().abs().max().into_scalar::<f32>();
        let diff = (shared.dw.clone() - own.dw.clone())
            .abs()
            .max()
            .into_scalar::<f32>();
        assert!(diff <= 1e-6 * scale, "dW differs by {diff} (scale {scale})");
        // Two layers add their product into the first one's gradient (`addmm_`, β = 1), where
        // burn summed three products with two float32 adds.
        let counts = |ops| {
            [
                weight_calls(ops, "aten::addmm_"),
                weight_calls(ops, "aten::add_"),
            ]
        };
        assert_eq!(counts(&shared.ops), [2, 0], "{:#?}", shared.ops);
        assert_eq!(counts(&own.ops), [0, 2], "{:#?}", own.ops);
    }

    #[test]
    fn shared_bf16_layers_cast_the_weight_once_and_sum_as_the_layers_did() {
        let l = layers();
        let (shared, own) = (run(&l, true, true), run(&l, true, false));
        assert_same_outputs_and_other_gradients(&shared, &own);
        let casts = |ops| weight_calls(ops, "aten::to");
        assert_eq!(casts(&shared.forward_ops), 1, "{:#?}", shared.forward_ops);
        assert_eq!(casts(&own.forward_ops), 3, "{:#?}", own.forward_ops);
        // libtorch's CPU has no float32-output product: each layer's bf16 product is cast up
        // and added, in place into the sum instead of by burn, so the same sums bit for bit.
        assert_eq!(shared.dw.clone().dtype(), burn::tensor::DType::F32);
        assert_eq!(shared.dw.to_data(), own.dw.to_data());
    }

    #[test]
    fn operands_never_differentiated_are_let_go_past_the_bound() {
        let device = device();
        let w = Tensor::<2>::random([3, 2], Distribution::Default, &device).require_grad();
        for _ in 0..super::MAX_OPEN + 10 {
            drop(shared_weight(w.clone(), true));
        }
        assert!(super::open().len() <= super::MAX_OPEN);
    }
}
