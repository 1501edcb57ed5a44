//! The pooled `[CLS]` alone: what the sequence-level heads (classification, pairs, regression,
//! multiple choice) read. Every layer but the last runs on every position, since the last one's
//! keys and values come from all of them; the last runs its query, attention output and
//! feed-forward on the `[CLS]` row only.
//!
//! Why: those rows are most of the last layer's work (10 of its 12 `H×H`-sized products per
//! position at `I = 4H`), so a 4-layer model (`tiny`) does about a fifth less arithmetic per
//! sequence, and their outputs were thrown away. The `[CLS]` row is the same sum over the same
//! positions as in [`Albert::forward`]; only the order in which the products add up may
//! differ, by rounding (tests below).

use burn::tensor::Tensor;
use burn::tensor::activation::softmax;

use super::{Albert, AlbertAttention, AlbertEncoder, AlbertInput, AlbertLayerOps, dense_in};
use crate::config::LnType;

impl Albert {
    /// `[batch, H]`: the pooled `[CLS]`, as [`Albert::forward`]'s `pooler_output`, without the
    /// last layer's work on the other positions.
    pub fn pooled(&self, input: &AlbertInput) -> Tensor<2> {
        let embedded = self
            .embeddings
            .forward(input.input_ids.clone(), input.token_type_ids.clone());
        let cls = self.encoder.forward_cls(embedded, input.attention_bias());
        let [b, _, h] = cls.dims();
        self.linear_on(&self.pooler, cls.reshape([b, h])).tanh()
    }
}

impl AlbertEncoder {
    /// `[batch, seq, E]` → `[batch, 1, H]`: the last hidden state of the first position.
    /// The layers before the last take the blocks as [`AlbertEncoder::for_pass`] makes them
    /// for the pass, as [`AlbertEncoder::forward`]'s do; the last takes its own (its queries
    /// are `[CLS]`'s alone, a product of their own).
    pub fn forward_cls(&self, embedded: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
        let mut x = self.project(embedded);
        let pass = self.for_pass(&x, &bias);
        for i in 0..self.num_layers {
            x = if i + 1 == self.num_layers {
                self.layer(i).forward_first(x, bias.clone())
            } else {
                pass.layer(i).forward(x, bias.clone())
            };
        }
        // One position already after the last layer; with no layers, the input's first.
        x.narrow(1, 0, 1)
    }
}

impl AlbertLayerOps<'_> {
    /// [`Self::forward`] for the first position alone (`[batch, 1, H]`), attending over all of
    /// `x`'s positions.
    pub fn forward_first(&self, x: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
        let (attn, ffn) = (self.attention, self.ffn);
        let first = |t: &Tensor<3>| t.clone().narrow(1, 0, 1);
        match self.ln_type {
            LnType::Postln => {
                let a = attn.norm(first(&x) + attn.attend_queries(first(&x), x, bias));
                ffn.norm(a.clone() + ffn.transform(a))
            }
            LnType::Preln => {
                let n = attn.norm(x.clone());
                let a = first(&x) + attn.attend_queries(first(&n), n, bias);
                a.clone() + ffn.transform(ffn.norm(a))
            }
        }
    }
}

impl AlbertAttention {
    /// [`Self::attend`] for the queries of `xq` (`[batch, q, H]`, rows of `x`) alone, against
    /// the keys and values of every position of `x` (`[batch, seq, H]`). The products are
    /// burn's: with a handful of query rows the attention is a sliver of the layer's work.
    pub fn attend_queries(&self, xq: Tensor<3>, x: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
        let ([b, q_len, h], s) = (xq.dims(), x.dims()[1]);
        let (heads, p) = (self.num_heads, self.precision);
        let d = h / heads;
        let q = dense_in(p, &self.query, xq);
        let [k, v] = [&self.key, &self.value].map(|l| dense_in(p, l, x.clone()));
        let split = |t: Tensor<3>, n: usize| t.reshape([b, n, heads, d]).swap_dims(1, 2);
        let scores = p.matmul(split(q, q_len), split(k, s).swap_dims(2, 3));
        let scale = 1.0 / (d as f64).sqrt();
        let probs = softmax(scores.mul_scalar(scale) + bias, 3);
        let probs = self.attention_dropout.forward(probs);
        let context = p
            .matmul(probs, split(v, s))
            .swap_dims(1, 2)
            .reshape([b, q_len, h]);
        self.output_dropout
            .forward(dense_in(p, &self.dense, context))
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;

    use crate::config::{AlbertConfig, LnType, ShareType};
    use crate::model::{Albert, AlbertInput};

    /// A small model: 3 layers, H 24 in 4 heads.
    fn config(ln_type: LnType, share_type: ShareType, layers: usize) -> AlbertConfig {
        let mut c = AlbertConfig::named("tiny").expect("tiny is a known size");
        c.vocab_size = 50;
        c.embedding_size = 8;
        c.hidden_size = 24;
        c.num_hidden_layers = layers;
        c.num_attention_heads = 4;
        c.intermediate_size = 48;
        c.ln_type = ln_type;
        c.share_type = share_type;
        c
    }

    /// Two rows of 7 positions, the second padded after 4 (mask 0 there).
    fn input(device: &Device) -> AlbertInput {
        let ids = [[2, 11, 12, 13, 14, 15, 3], [2, 21, 22, 3, 0, 0, 0]].concat();
        let mask = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]].concat();
        AlbertInput::from_rows(2, 7, ids, vec![0; 14], mask, device)
    }

    /// The largest absolute difference between two `[batch, H]` outputs, and their values.
    fn compare(model: &Albert, input: &AlbertInput) -> (f32, Vec<f32>) {
        let full = model.forward(input).pooler_output.into_data();
        let cls = model.pooled(input).into_data();
        assert_eq!(cls.shape(), full.shape());
        let (a, b) = (
            full.try_to_vec::<f32>().unwrap(),
            cls.try_to_vec::<f32>().unwrap(),
        );
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        (worst, a)
    }

    #[test]
    fn the_pooled_cls_alone_equals_the_full_forwards_pooler_output() {
        let device = Device::flex();
        device.seed(5);
        for ln in [LnType::Postln, LnType::Preln] {
            for share in [ShareType::All, ShareType::None] {
                let model = Albert::new(&config(ln, share, 3), &device);
                let (worst, full) = compare(&model, &input(&device));
                assert!(worst < 1e-5, "{ln:?} {share:?}: differs by {worst}");
                // The two rows pool to different values (the check is not of a constant).
                assert!(full[..24] != full[24..], "{ln:?} {share:?}");
            }
        }
    }

    #[test]
    fn a_model_without_layers_pools_the_projected_first_position() {
        let device = Device::flex();
        device.seed(5);
        let model = Albert::new(&config(LnType::Postln, ShareType::All, 0), &device);
        let (worst, _) = compare(&model, &input(&device));
        assert_eq!(worst, 0.0);
    }
}
