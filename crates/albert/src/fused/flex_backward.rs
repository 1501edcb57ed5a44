//! The hand-written backward of each fused op on flex ([`super::FusedOps`] for
//! `Autodiff<Flex>`): one pass over the saved values and the incoming gradient
//! ([`super::kernels`]), registered for each parent that needs a gradient.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::flex::FlexTensor;
use burn::backend::{Flex, TensorMetadata};

use super::super::flex_values::{contiguous, owned, tensor, values};
use super::super::{attention, dense, kernels};
use super::NormState;

#[derive(Debug)]
pub(super) struct GeluBackward;

impl Backward<Flex, 1> for GeluBackward {
    /// The input.
    type State = FlexTensor;

    fn backward(self, ops: Ops<FlexTensor, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = parent {
            let x = contiguous(ops.state);
            let mut g = owned(grad);
            kernels::gelu_grad(values(&x), g.storage_mut::<f32>());
            grads.register::<Flex>(parent.id, g);
        }
    }
}

#[derive(Debug)]
pub(super) struct SoftmaxBackward;

impl Backward<Flex, 1> for SoftmaxBackward {
    /// The probabilities and the scale.
    type State = (FlexTensor, f32);

    fn backward(self, ops: Ops<(FlexTensor, f32), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = parent {
            let (p, scale) = ops.state;
            let p = contiguous(p);
            let row = p.shape()[3];
            let mut g = owned(grad);
            kernels::softmax_grad(values(&p), g.storage_mut::<f32>(), row, scale);
            grads.register::<Flex>(parent.id, g);
        }
    }
}

#[derive(Debug)]
pub(super) struct AttentionBackward;

/// What the attention's backward needs: Q, K, V, the probabilities, the heads and the scale.
pub(super) type AttentionState = ([FlexTensor; 4], usize, f32);

impl Backward<Flex, 3> for AttentionBackward {
    type State = AttentionState;

    fn backward(self, ops: Ops<AttentionState, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let ([q, k, v, p], heads, scale) = ops.state;
        let results = attention::backward([&q, &k, &v, &p], grad, heads, scale);
        for (parent, result) in ops.parents.into_iter().zip(results) {
            if let Some(parent) = parent {
                grads.register::<Flex>(parent.id, result);
            }
        }
    }
}

#[derive(Debug)]
pub(super) struct LinearBackward;

impl Backward<Flex, 3> for LinearBackward {
    /// The input, the weight and whether it is used transposed.
    type State = (FlexTensor, FlexTensor, bool);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let (x, w, transposed) = ops.state;
        let want = [0, 1, 2].map(|i| ops.parents[i].is_some());
        let results = dense::backward(&x, &w, grad, transposed, want);
        for (parent, result) in ops.parents.into_iter().zip(results) {
            if let (Some(parent), Some(result)) = (parent, result) {
                grads.register::<Flex>(parent.id, result);
            }
        }
    }
}

#[derive(Debug)]
pub(super) struct LogSoftmaxBackward;

impl Backward<Flex, 1> for LogSoftmaxBackward {
    /// The output.
    type State = FlexTensor;

    fn backward(self, ops: Ops<FlexTensor, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        if let Some(parent) = parent {
            let y = contiguous(ops.state);
            let row = y.shape()[y.shape().num_dims() - 1];
            let mut g = owned(grad);
            kernels::log_softmax_grad(values(&y), g.storage_mut::<f32>(), row);
            grads.register::<Flex>(parent.id, g);
        }
    }
}

#[derive(Debug)]
pub(super) struct LayerNormBackward;

impl Backward<Flex, 3> for LayerNormBackward {
    type State = NormState;

    fn backward(self, ops: Ops<NormState, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [px, pgamma, pbeta] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let NormState { xhat, rstd, gamma } = ops.state;
        let d = gamma.layout().num_elements();
        let (mut dgamma, mut dbeta) = (vec![0.0; d], vec![0.0; d]);
        let mut g = owned(grad);
        kernels::layer_norm_grad(
            values(&xhat),
            &rstd,
            values(&gamma),
            g.storage_mut::<f32>(),
            &mut dgamma,
            &mut dbeta,
        );
        if let Some(node) = px {
            grads.register::<Flex>(node.id, g);
        }
        if let Some(node) = pgamma {
            grads.register::<Flex>(node.id, tensor(dgamma, gamma.shape()));
        }
        if let Some(node) = pbeta {
            grads.register::<Flex>(node.id, tensor(dbeta, gamma.shape()));
        }
    }
}
