//! What a training step leaves on the device instead of reading it back to the host: its
//! losses, correct counts and gradient norm (`pipeline_albert::train::clip_global_norm` keeps
//! the norm and the clipping there) wait in one small tensor per step until [`read_steps`]
//! reads all of them in one transfer. On a GPU a read-back waits for every queued kernel, so
//! reading once per `log_interval` steps instead of once per step lets the host queue the next
//! step while the device still runs this one.

use burn::tensor::Tensor;

/// The values a step leaves on the device, in this order: the MLM loss and the SOP loss (each
/// already weighted by its micro-batches' shares), the correct MLM and SOP predictions, and the
/// global gradient norm before clipping.
pub const STEP_VALUES: usize = 5;

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
    use burn::tensor::Device;

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
