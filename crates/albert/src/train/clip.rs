//! Clipping by the global gradient norm without reading anything back: the norm and the
//! scale stay device tensors (burn's own clipping works per tensor). On a GPU a read-back waits
//! for every queued kernel, so a trainer that reads the norm once per `log_interval` steps lets
//! the host queue the next step while the device still runs this one.

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

/// The global L2 norm of `grads` (each visit of a parameter counts) and the gradients scaled
/// by [`clip_scale`], both without a read-back; `None` for the norm when no parameter of
/// `module` has a gradient. `max_norm` 0 leaves the gradients as they are.
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
        module.visit(&mut ScaleVisitor {
            grads: &mut grads,
            scale: clip_scale(norm.clone(), max_norm),
            seen: Vec::new(),
        });
    }
    (grads, Some(norm))
}

/// `min(1, max_norm / (norm + 1e-6))` (`torch.nn.utils.clip_grad_norm_`), applied every step,
/// as a factor of exactly 1 when the norm is within bounds: deciding whether to clip on the
/// host would need the norm there.
pub fn clip_scale(norm: Tensor<1>, max_norm: f64) -> Tensor<1> {
    norm.add_scalar(1e-6)
        .recip()
        .mul_scalar(max_norm)
        .clamp_max(1.0)
}

/// The global L2 norm of `grads`, read back (0 when no parameter has a gradient).
pub fn global_grad_norm<M: Module>(module: &M, grads: GradientsParams) -> f64 {
    let (_, norm) = clip_global_norm(module, grads, 0.0);
    norm.map_or(0.0, |n| n.into_scalar::<f64>())
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{Device, Distribution};

    /// The L2 norm of a linear layer's gradients, summed on the host.
    fn host_norm(model: &Linear, grads: &GradientsParams) -> f64 {
        let weight = grads.get::<2>(model.weight.id).expect("a gradient");
        let bias = model.bias.as_ref().expect("a bias").id;
        let bias = grads.get::<1>(bias).expect("a gradient");
        let mut values = weight.into_data().try_to_vec::<f32>().expect("float32");
        values.extend(bias.into_data().try_to_vec::<f32>().expect("float32"));
        values
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt()
    }

    fn grads_of(model: &Linear, device: &Device, scale: f64) -> GradientsParams {
        let x = Tensor::<2>::random([4, 3], Distribution::Default, device);
        let loss = model.forward(x).sum().mul_scalar(scale);
        GradientsParams::from_grads(loss.backward(), model)
    }

    #[test]
    fn clips_as_torch_does_without_reading_back() {
        let device = Device::flex().autodiff();
        let model = LinearConfig::new(3, 2).init(&device);
        for (scale, max_norm) in [(100.0, 1.0), (1e-3, 1.0), (100.0, 0.0)] {
            let grads = grads_of(&model, &device, scale);
            let want = host_norm(&model, &grads);
            let (clipped, norm) = clip_global_norm(&model, grads, max_norm);
            let norm = norm.expect("a norm").into_scalar::<f64>();
            assert!((norm - want).abs() <= 1e-5 * want, "{norm} vs {want}");
            let after = host_norm(&model, &clipped);
            let expected = if max_norm > 0.0 {
                want.min(max_norm)
            } else {
                want
            };
            assert!(
                (after - expected).abs() <= 1e-4 * expected,
                "{after} vs {expected}"
            );
            assert!((global_grad_norm(&model, clipped) - after).abs() <= 1e-5 * after);
        }
    }

    #[test]
    fn no_gradient_no_norm() {
        let model = LinearConfig::new(3, 2).init(&Device::flex());
        let (_, norm) = clip_global_norm(&model, GradientsParams::new(), 1.0);
        assert!(norm.is_none());
        assert_eq!(global_grad_norm(&model, GradientsParams::new()), 0.0);
    }
}
