//! Mixed precision: the matrix products in bfloat16, everything else in float32.
//!
//! What `torch.autocast(dtype=torch.bfloat16)` does for a transformer, written out: the weights
//! stay float32 (the master copy the optimiser updates), each product casts its two operands to
//! bf16 and multiplies (on tensor cores on a GPU). A result that only feeds the next product
//! stays bf16, as autocast leaves it: Q, K and V for the attention core (torch's SDPA in bf16),
//! its context for the output projection, and the feed-forward's `[batch·seq, I]` activation
//! (its GELU in bf16 too) for the second projection; and the MLM logits, which the loss's
//! log-softmax reads in bf16 and works on in float32, as autocast runs it. Every other result
//! goes back to float32, so LayerNorm, softmax, the residual sums and the losses see float32. The casts are autodiff
//! ops: the backward products run in bf16 too, each weight's gradient arrives in float32, and
//! each activation's in its own dtype.
//!
//! Why casts in the model rather than `tch::autocast`: burn's autodiff records the graph itself
//! and runs the backward through its own ops, so an autocast region set on libtorch would cover
//! the forward kernels but not the backward burn replays, and `tch::autocast` switches libtorch's
//! CUDA autocast, whose dtype defaults to fp16 (bf16 needs `set_autocast_dtype`, which tch 0.22
//! does not wrap), and leaves the CPU alone. Explicit casts are the same on every backend that
//! has bf16 and can be tested on libtorch's CPU. Every product's result is bf16, as torch's
//! bf16 products return it; unlike autocast, one that meets float32 (the residual sum, a
//! LayerNorm, a head's output) is cast up before its bias is added, in float32, where autocast
//! adds the bias in bf16 inside the product.
//!
//! Why the activations between products stay bf16: the feed-forward's is the step's largest
//! tensor (I = 4H wide), and in float32 it was written by the product's cast back, read and
//! written by the bias and the GELU, and read by the cast for the next product, each way, on
//! a GPU where such passes run at memory speed beside tensor-core products: ~32 bytes an
//! element moved forward, the two products' own write and read included; in bf16, 8 (the
//! product writes it with its bias, the GELU reads and writes it, the next product reads it).
//! The backward keeps it, and its gradient, in bf16 alone.

use burn::nn::Linear;
use burn::tensor::{FloatDType, Tensor};

use super::{Albert, AlbertEncoder, AlbertForPreTraining};
use crate::device::{ResolvedDevice, has_bf16};

/// The dtype of the model's matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatmulPrecision {
    /// float32 throughout.
    #[default]
    Fp32,
    /// bf16 operands; results in float32, or bf16 where they only feed another product (see
    /// the module docs).
    Bf16,
}

/// A precision that is neither `fp32` nor `bf16`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("precision {0:?}: expected fp32 or bf16")]
pub struct UnknownPrecision(pub String);

/// A precision the device cannot train in: bf16 where the backend has no bf16 products.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bf16 needs a libtorch device (device: tch-cpu or cuda:N), and device {device} has no bf16 \
     products; use precision: fp32 there"
)]
pub struct NoBf16 {
    /// The device's name.
    pub device: String,
}

impl std::str::FromStr for MatmulPrecision {
    type Err = UnknownPrecision;

    /// `fp32` or `bf16`, as the stages' `precision` param and `--precision` take it.
    fn from_str(s: &str) -> Result<Self, UnknownPrecision> {
        match s {
            "fp32" => Ok(MatmulPrecision::Fp32),
            "bf16" => Ok(MatmulPrecision::Bf16),
            other => Err(UnknownPrecision(other.into())),
        }
    }
}

impl MatmulPrecision {
    /// Its name, as the params take it and metrics.json records it.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Fp32 => "fp32",
            MatmulPrecision::Bf16 => "bf16",
        }
    }

    /// This precision, or the error of one `device` cannot train in. Refused rather than
    /// silently trained in float32 under a bf16 label.
    pub fn on(self, device: &ResolvedDevice) -> Result<MatmulPrecision, NoBf16> {
        if self == MatmulPrecision::Bf16 && !has_bf16(&device.device) {
            return Err(NoBf16 {
                device: device.name.clone(),
            });
        }
        Ok(self)
    }

    /// The dtype a product's result is left in when it only feeds another product (Q, K and V
    /// the attention core, the attention's context its output projection, the feed-forward's
    /// first projection the activation and the second) or an op that reads bf16 and computes
    /// in float32 (the MLM logits the loss's log-softmax): bf16 under bf16, as autocast leaves
    /// every product's result, and float32 under fp32. Results that meet the residual stream,
    /// a LayerNorm or a head's output go back to float32.
    pub fn between_products(self) -> FloatDType {
        match self {
            MatmulPrecision::Fp32 => FloatDType::F32,
            MatmulPrecision::Bf16 => FloatDType::BF16,
        }
    }

    /// `a · b` in this precision, the result in float32.
    pub fn matmul<const D: usize>(self, a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
        match self {
            MatmulPrecision::Fp32 => a.matmul(b),
            MatmulPrecision::Bf16 => a
                .cast(FloatDType::BF16)
                .matmul(b.cast(FloatDType::BF16))
                .cast(FloatDType::F32),
        }
    }

    /// `l` applied to `[n, d]` rows, its product in this precision (the bias added in float32).
    pub fn linear(self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        match self {
            MatmulPrecision::Fp32 => l.forward(x),
            MatmulPrecision::Bf16 => {
                let y = self.matmul(x, l.weight.val());
                match &l.bias {
                    Some(b) => y + b.val().unsqueeze(),
                    None => y,
                }
            }
        }
    }
}

impl AlbertEncoder {
    /// The encoder with every product in `precision`: the E→H projection's and its blocks'.
    pub fn with_precision(mut self, precision: MatmulPrecision) -> Self {
        self.precision = precision;
        for a in &mut self.attentions {
            a.precision = precision;
        }
        for f in &mut self.ffns {
            f.precision = precision;
        }
        self
    }
}

impl Albert {
    /// The backbone with every product in `precision`, the pooler's included (and the heads'
    /// on top of it, which read it through [`Albert::precision`]), as `torch.autocast` runs
    /// every `nn.Linear`.
    pub fn with_precision(mut self, precision: MatmulPrecision) -> Self {
        self.encoder = self.encoder.with_precision(precision);
        self
    }

    /// The precision of the backbone's products, which the heads on it follow.
    pub fn precision(&self) -> MatmulPrecision {
        self.encoder.precision
    }
}

impl AlbertForPreTraining {
    /// The model with every product in `precision`: the backbone's, the MLM head's and the
    /// SOP classifier's.
    pub fn with_precision(mut self, precision: MatmulPrecision) -> Self {
        self.albert = self.albert.with_precision(precision);
        self.predictions.precision = precision;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::LinearConfig;
    use burn::tensor::{Device, Distribution};

    #[test]
    fn the_names_parse_back_and_others_are_refused() {
        for p in [MatmulPrecision::Fp32, MatmulPrecision::Bf16] {
            assert_eq!(p.name().parse::<MatmulPrecision>(), Ok(p));
        }
        let e = "fp16".parse::<MatmulPrecision>().unwrap_err();
        assert_eq!(e.to_string(), "precision \"fp16\": expected fp32 or bf16");
    }

    #[test]
    fn bf16_is_refused_on_flex_and_fp32_is_not() {
        let flex = crate::device::resolve(crate::device::DeviceChoice::Flex).unwrap();
        assert_eq!(MatmulPrecision::Fp32.on(&flex), Ok(MatmulPrecision::Fp32));
        let e = MatmulPrecision::Bf16.on(&flex).unwrap_err();
        assert!(e.to_string().contains("device flex has no bf16"), "{e}");
    }

    #[test]
    fn fp32_is_the_plain_product() {
        let device = Device::flex();
        device.seed(2);
        let l = LinearConfig::new(4, 3).init(&device);
        let x = Tensor::<2>::random([5, 4], Distribution::Default, &device);
        let a = MatmulPrecision::Fp32.linear(&l, x.clone()).into_data();
        let b = l.forward(x).into_data();
        assert_eq!(a, b);
    }

    /// On flex (whose bf16 product converts to float32, enough to check the casts): the output
    /// and the weight's gradient are float32, within bf16's rounding of the float32 ones, and
    /// not equal to them.
    #[test]
    fn bf16_rounds_the_operands_and_keeps_float32_around_the_product() {
        let device = Device::flex().autodiff();
        device.seed(4);
        let l = LinearConfig::new(64, 8).init(&device);
        let x = Tensor::<2>::random([16, 64], Distribution::Default, &device);
        let run = |p: MatmulPrecision| {
            let y = p.linear(&l, x.clone());
            assert_eq!(y.dtype(), burn::tensor::DType::F32);
            let grads = y.clone().square().sum().backward();
            let g = l.weight.grad(&grads).unwrap();
            assert_eq!(g.dtype(), burn::tensor::DType::F32);
            (y.inner(), g)
        };
        let (y32, g32) = run(MatmulPrecision::Fp32);
        let (y16, g16) = run(MatmulPrecision::Bf16);
        let rel = |a: Tensor<2>, b: Tensor<2>| {
            let scale = a.clone().abs().max().into_scalar::<f64>();
            (a - b).abs().max().into_scalar::<f64>() / scale
        };
        let (dy, dg) = (rel(y32, y16), rel(g32, g16));
        // bf16 keeps 8 bits of mantissa: each operand is within 2^-8 of itself.
        assert!(dy > 0.0 && dy < 2e-2, "{dy}");
        assert!(dg > 0.0 && dg < 3e-2, "{dg}");
    }

    /// On libtorch under bf16 the results that only feed another product stay bf16 (what makes
    /// the feed-forward's activation and Q, K, V cheap on a GPU; no numerical test would see
    /// them go back to float32), the blocks hand float32 to the residual stream within bf16's
    /// rounding of float32's, and the weights' gradients arrive in float32.
    #[cfg(feature = "tch")]
    #[test]
    fn bf16_leaves_the_activations_between_products_in_bf16_and_the_blocks_return_float32() {
        use crate::model::{
            AlbertAttention, AlbertFfn, AlbertInput, dense_between_products, dense_in,
        };
        use burn::tensor::DType;
        let tch_cpu = crate::device::resolve(crate::device::DeviceChoice::TchCpu);
        let device = tch_cpu
            .expect("a tch build has libtorch's CPU")
            .device
            .autodiff();
        device.seed(6);
        let c = crate::config::AlbertConfig::named("tiny").expect("tiny");
        let (mut ffn, mut attention) = (
            AlbertFfn::new(&c, &device),
            AlbertAttention::new(&c, &device),
        );
        // Biases that are not zero (a fresh model's are): with a zero bias a bf16 product's
        // result is the same in either dtype, and the GELU rounds once either way.
        let normal = Distribution::Normal(0.0, 1.0);
        let layers = [&mut ffn.ffn, &mut attention.query, &mut attention.value];
        crate::model::tests::random_biases(layers, &device);
        let [b, s, h] = [2, 5, c.hidden_size];
        let x = Tensor::<3>::random([b, s, h], normal, &device);
        let input = AlbertInput::from_rows(
            b,
            s,
            vec![0; b * s],
            vec![0; b * s],
            vec![1; b * s],
            &device,
        );
        let bias = input.attention_bias();
        let fp32 = [
            ffn.transform(x.clone()),
            attention.attend(x.clone(), bias.clone()),
        ];
        (ffn.precision, attention.precision) = (MatmulPrecision::Bf16, MatmulPrecision::Bf16);

        for (p, dtype) in [
            (MatmulPrecision::Fp32, DType::F32),
            (MatmulPrecision::Bf16, DType::BF16),
        ] {
            assert_eq!(
                dense_between_products(p, &ffn.ffn, x.clone()).dtype(),
                dtype
            );
            assert_eq!(
                dense_between_products(p, &attention.query, x.clone()).dtype(),
                dtype
            );
        }
        // The feed-forward block is its bf16 activation's composition, bit for bit, and not
        // the one whose activation went back to float32.
        let (bf16, f32_between) = [dense_between_products, dense_in]
            .map(|first| {
                let inner = first(MatmulPrecision::Bf16, &ffn.ffn, x.clone());
                let activated = crate::model::activate(inner, ffn.activation);
                dense_in(MatmulPrecision::Bf16, &ffn.ffn_output, activated).into_data()
            })
            .into();
        assert_eq!(ffn.transform(x.clone()).into_data(), bf16);
        assert_ne!(bf16, f32_between);
        let bf16 = [ffn.transform(x.clone()), attention.attend(x, bias)];
        for (name, (y16, y32)) in ["ffn", "attention"].into_iter().zip(bf16.iter().zip(fp32)) {
            assert_eq!(y16.dtype(), DType::F32, "{name}");
            let scale = y32.clone().abs().max().into_scalar::<f64>();
            let diff = (y16.clone() - y32).abs().max().into_scalar::<f64>() / scale;
            assert!(diff > 0.0 && diff < 3e-2, "{name}: {diff}");
        }
        let [y_ffn, y_attention] = bf16;
        let grads = (y_ffn.sum() + y_attention.sum()).backward();
        for w in [
            &ffn.ffn.weight,
            &ffn.ffn_output.weight,
            &attention.query.weight,
            &attention.dense.weight,
        ] {
            assert_eq!(w.grad(&grads).expect("a gradient").dtype(), DType::F32);
        }
    }
}
