//! Vector-Jacobian products through torch's autograd with a given output gradient: the
//! backward of the fused ops that torch differentiates itself (SDPA, LayerNorm; `torch.rs`).
//!
//! Why not `tch`'s `Tensor::run_backward`: it seeds every root with ones, so a backward with a
//! gradient `g` had to differentiate the scalar `Σ output·g`, which on every op backward costs a
//! product and a sum over the whole output, a seed, and the product's backward (a third pass)
//! before torch's own backward kernel runs. `torch::autograd::grad` takes `g` itself; tch 0.22
//! does not wrap it, so `torch_vjp.cpp` (compiled by build.rs) does, in one C function.

use std::ffi::{c_char, c_int};

use tch::{TchError, Tensor};

// `at::Tensor*` on both sides: tch's `C_tensor` is the `torch::Tensor` torch-sys allocates,
// and a `Tensor` built from a returned pointer frees it as tch frees its own.
type CTensor = torch_sys::C_tensor;

unsafe extern "C" {
    fn pipeline_torch_vjp(
        outputs: *const *mut CTensor,
        grads: *const *mut CTensor,
        n_outputs: c_int,
        inputs: *const *mut CTensor,
        n_inputs: c_int,
        results: *mut *mut CTensor,
        error: *mut c_char,
        error_len: usize,
    ) -> c_int;
}

/// The gradients of `inputs` (leaves of a graph torch recorded, each requiring a gradient)
/// when `output` has gradient `g`: `gᵀ·∂output/∂input` each, undefined for an input the output
/// does not depend on. The graph is freed on the way (each op's graph is walked once).
pub(super) fn vjp(
    output: &Tensor,
    g: &Tensor,
    inputs: &[&Tensor],
) -> Result<Vec<Tensor>, TchError> {
    let outputs = [output.as_ptr().cast_mut()];
    let grads = [g.as_ptr().cast_mut()];
    let leaves: Vec<*mut CTensor> = inputs.iter().map(|t| t.as_ptr().cast_mut()).collect();
    let mut results: Vec<*mut CTensor> = vec![std::ptr::null_mut(); inputs.len()];
    let mut error = [0 as c_char; 1024];
    let n_inputs = c_int::try_from(inputs.len())
        .map_err(|_| TchError::Kind(format!("{} inputs to one vjp", inputs.len())))?;
    // SAFETY: every pointer is a live tensor borrowed for the call (the C side copies the
    // handles it needs), `results` has room for one pointer per input, and `error` is the
    // buffer of the length given; the C side writes `results` only when it returns 0.
    let failed = unsafe {
        pipeline_torch_vjp(
            outputs.as_ptr(),
            grads.as_ptr(),
            1,
            leaves.as_ptr(),
            n_inputs,
            results.as_mut_ptr(),
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if failed != 0 {
        return Err(shim_error(&error));
    }
    // SAFETY: each result is a fresh `at::Tensor` the C side allocated with `new`, owned here.
    Ok(results
        .into_iter()
        .map(|p| unsafe { Tensor::from_ptr(p) })
        .collect())
}

/// The message a C++ shim wrote into `error` when it returned 1 (`torch_error.h`), as tch's
/// error for one of libtorch's: the bytes up to the first NUL (the buffer starts zeroed).
pub(crate) fn shim_error(error: &[c_char]) -> TchError {
    let bytes: Vec<u8> = error
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    TchError::Torch(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::vjp;

    /// A leaf of torch's graph: fixed values, requiring a gradient.
    fn leaf(values: &[f32]) -> Tensor {
        Tensor::from_slice(values).set_requires_grad(true)
    }

    #[test]
    fn the_given_gradient_seeds_the_backward_and_an_unused_input_gets_none() {
        let (x, w, unused) = (leaf(&[1.0, 2.0, 3.0]), leaf(&[4.0, 5.0, 6.0]), leaf(&[7.0]));
        let y = tch::with_grad(|| &x * &w);
        let g = Tensor::from_slice(&[0.5f32, -1.0, 2.0]);
        let grads = tch::with_grad(|| vjp(&y, &g, &[&x, &w, &unused])).expect("a backward");
        // ∂(x·w)/∂x = w and /∂w = x, each times g; `unused` does not reach y.
        assert_eq!(Vec::<f32>::try_from(&grads[0]).unwrap(), [2.0, -5.0, 12.0]);
        assert_eq!(Vec::<f32>::try_from(&grads[1]).unwrap(), [0.5, -2.0, 6.0]);
        assert!(!grads[2].defined());
    }

    #[test]
    fn a_gradient_of_the_wrong_shape_is_torchs_error_not_a_crash() {
        let x = leaf(&[1.0, 2.0, 3.0]);
        let y = tch::with_grad(|| &x * 2.0);
        let g = Tensor::ones([2], (Kind::Float, Device::Cpu));
        let error = tch::with_grad(|| vjp(&y, &g, &[&x])).expect_err("a shape mismatch");
        assert!(error.to_string().contains("shape"), "{error}");
    }
}
