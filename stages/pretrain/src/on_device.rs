//! What a training step computes without reading anything back to the host: the global
//! gradient norm and the clipping by it stay device tensors, and the step's losses, correct
//! counts and norm wait in one small tensor per step until [`read_steps`] reads all of them in
//! one transfer. On a GPU a read-back waits for every queued kernel, so reading once per
//! `log_interval` steps instead of once per step lets the host queue the next step while the
//! device still runs this one.

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

/// The values a step leaves on the device, in this order: the MLM loss and the SOP loss (each
/// already weighted by its micro-batches' shares), the correct MLM and SOP predictions, and the
/// global gradient norm before clipping.
pub const STEP_VALUES: usize = 5;

/// The global L2 norm of `grads` (as `pipeline_albert::train::global_grad_norm` computes it:
/// each visit of a parameter counts) and the gradients scaled by `min(1, max_norm / (norm +
/// 1e-6))` (`torch.nn.utils.clip_grad_norm_`), both without a read-back. `max_norm` 0 leaves
/// the gradients as they are. The scale is applied every step, as a factor of exactly 1 when
/// the norm is within bounds: deciding whether to clip on the host would need the norm there.
pub fn clip_global_norm<M: Module>(
    module: &M,
    mut grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, Option<Tensor<1>>) {
    let mut norm = NormVisitor {
        grads: &grads,
        sums: Vec::new(),
    };
    module.visit(&mut norm);
    if norm.sums.is_empty() {
        return (grads, None);
    }
    // One sum over the per-tensor sums, not an add per tensor: on a GPU every op is a launch
    // paid on the host, every step, for every parameter tensor (~30 fewer for `tiny`; no
    // difference within the noise of the host-overhead proxy in docs/gpu.md on 2 cores).
    let norm = Tensor::cat(norm.sums, 0).sum().sqrt();
    if max_norm > 0.0 {
        let scale = norm
            .clone()
            .add_scalar(1e-6)
            .recip()
            .mul_scalar(max_norm)
            .clamp_max(1.0);
        module.visit(&mut ScaleVisitor {
            grads: &mut grads,
            scale,
            seen: Vec::new(),
        });
    }
    (grads, Some(norm))
}

/// Collects `Σ g²` of each visited parameter's gradient.
struct NormVisitor<'a> {
    grads: &'a GradientsParams,
    sums: Vec<Tensor<1>>,
}

impl ModuleVisitor for NormVisitor<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.sums.push(g.square().sum());
        }
    }
}

struct ScaleVisitor<'a> {
    grads: &'a mut GradientsParams,
    scale: Tensor<1>,
    seen: Vec<ParamId>,
}

impl ModuleVisitor for ScaleVisitor<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        // A shared parameter is visited once per use; scale it once.
        if self.seen.contains(&param.id) {
            return;
        }
        self.seen.push(param.id);
        if let Some(g) = self.grads.remove::<D>(param.id) {
            let scale = self.scale.clone().unsqueeze::<D>();
            self.grads.register(param.id, g.mul(scale));
        }
    }
}

/// The values of `steps` (each [`STEP_VALUES`] long) in one read-back, one row per step. A
/// value the backend could not give back reads as NaN, so that it refuses its step rather than
/// passing as a number.
pub fn read_steps(steps: Vec<Tensor<1>>) -> Vec<[f64; STEP_VALUES]> {
    let n = steps.len();
    if n == 0 {
        return Vec::new();
    }
    let flat = Tensor::cat(steps, 0)
        .into_data()
        .convert::<f64>()
        .try_into_vec::<f64>()
        .unwrap_or_default();
    (0..n)
        .map(|k| {
            std::array::from_fn(|i| flat.get(k * STEP_VALUES + i).copied().unwrap_or(f64::NAN))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{Device, Distribution};

    fn grads_of(model: &Linear, device: &Device, scale: f64) -> GradientsParams {
        let x = Tensor::<2>::random([4, 3], Distribution::Default, device);
        let loss = model.forward(x).sum().mul_scalar(scale);
        GradientsParams::from_grads(loss.backward(), model)
    }

    #[test]
    fn clips_as_the_host_version_does_without_reading_back() {
        let device = Device::flex().autodiff();
        device.seed(3);
        let model = LinearConfig::new(3, 2).init(&device);
        for (scale, max_norm) in [(100.0, 1.0), (1e-3, 1.0), (100.0, 0.0)] {
            let grads = grads_of(&model, &device, scale);
            let want = pipeline_albert::train::global_grad_norm(&model, &grads);
            let (clipped, norm) = clip_global_norm(&model, grads, max_norm);
            let norm = norm.unwrap().into_scalar::<f64>();
            assert!((norm - want).abs() <= 1e-5 * want, "{norm} vs {want}");
            let after = pipeline_albert::train::global_grad_norm(&model, &clipped);
            let expected = if max_norm > 0.0 {
                want.min(max_norm)
            } else {
                want
            };
            assert!(
                (after - expected).abs() <= 1e-4 * expected,
                "{after} vs {expected}"
            );
        }
    }

    #[test]
    fn reads_rows_in_order_and_nan_for_what_is_missing() {
        let device = Device::flex();
        let rows: Vec<Tensor<1>> = (0..3)
            .map(|k| Tensor::from_floats([k as f32, 1.0, 2.0, 3.0, 4.0], &device))
            .collect();
        let read = read_steps(rows);
        assert_eq!(read.len(), 3);
        assert_eq!(read[2], [2.0, 1.0, 2.0, 3.0, 4.0]);
        let short = read_steps(vec![Tensor::from_floats([1.0, 2.0], &device)]);
        assert_eq!(short[0][1], 2.0);
        assert!(short[0][2].is_nan());
        assert!(read_steps(Vec::new()).is_empty());
    }
}
