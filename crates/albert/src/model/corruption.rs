//! Masked-LM predictions counted by the corruption their input shows (`[MASK]`, a random
//! token, the label kept), so that a run's accuracy can be read against the mask stage's
//! no-context floor: a model that only copies visible tokens is right at every kept position
//! and wrong at every `[MASK]`.

use burn::tensor::{Int, Tensor};

/// `[6]`: of the weighted rows, the `hits` whose `inputs` is `mask_id`, another token than
/// the label (random) and the label itself (kept), then the weighted number of each. `[MASK]`
/// is tested first, as the pretrain stage and the mask stage's floor classify a position. One
/// `[2, n] × [n, 3]` product on the device, nothing read back.
pub fn mlm_by_corruption(
    inputs: Tensor<1, Int>,
    labels: Tensor<1, Int>,
    weights: Tensor<1>,
    hits: Tensor<1>,
    mask_id: u32,
) -> Tensor<1> {
    let [n] = weights.dims();
    let is_mask = inputs.clone().equal_elem(mask_id as i64).float();
    let not_mask = is_mask.clone().neg().add_scalar(1.0);
    let is_kept = inputs.equal(labels).float() * not_mask.clone();
    let is_random = not_mask - is_kept.clone();
    let kinds = Tensor::stack::<2>(vec![is_mask, is_random, is_kept], 1) * weights.reshape([n, 1]);
    let rows = Tensor::stack::<2>(vec![hits.clone(), hits.ones_like()], 0);
    rows.matmul(kinds).reshape([6]).detach()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    #[test]
    fn predictions_are_counted_by_the_corruption_their_input_shows() {
        let device = Device::flex();
        const MASK: i64 = 3;
        // Rows: [MASK] right, [MASK] wrong, kept right, random (input 9, label 8) right,
        // random wrong, and a padding row (weight 0) that would count as kept.
        let ints = |v: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(v, [6]), &device);
        let floats = |v: Vec<f32>| Tensor::<1>::from_data(TensorData::new(v, [6]), &device);
        let inputs = ints(vec![MASK, MASK, 7, 9, 9, 0]);
        let labels = ints(vec![5, 6, 7, 8, 10, 0]);
        let hits = floats(vec![1.0, 0.0, 1.0, 1.0, 0.0, 1.0]);
        let weights = floats(vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
        let got: Vec<f32> = mlm_by_corruption(inputs, labels, weights, hits, MASK as u32)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap();
        // Correct at [MASK], random, kept; then how many of each.
        assert_eq!(got, vec![1.0, 1.0, 1.0, 2.0, 2.0, 1.0]);
    }
}
