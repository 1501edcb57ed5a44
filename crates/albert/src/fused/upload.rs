//! Host data onto the device without waiting for it. On CUDA a plain copy
//! (`Tensor::from_data`) comes from pageable memory and synchronises the stream: the host waits
//! there until the device has run everything queued before it, which in a training step is the
//! whole previous step, so the host cannot queue step k + 1 while the device still runs step k.
//! Here the data are staged in libtorch's CPU memory and copied from pinned memory without
//! blocking (`FusedOps::fused_upload_int`), which the stream orders like a kernel. On flex and
//! on libtorch's CPU there is nothing to wait for: the op hands the tensor back as it is, and
//! the values are `Tensor::from_data`'s (the same path all the same, so that the tests on a CPU
//! check its routing).

use burn::backend::Dispatch;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::tracked::FusedOps;

/// `data` as an int tensor on `device`.
pub fn ints<const D: usize>(data: TensorData, device: &Device) -> Tensor<D, Int> {
    let (host, cuda) = staging(device);
    let staged = Tensor::<D, Int>::from_data(data, &host).into_dispatch();
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_upload_int(staged, cuda))
}

/// `data` as a float tensor on `device` (outside any graph).
pub fn floats<const D: usize>(data: TensorData, device: &Device) -> Tensor<D> {
    let (host, cuda) = staging(device);
    let staged = Tensor::<D>::from_data(data, &host).into_dispatch();
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_upload_float(staged, cuda))
}

/// The device to stage data on for `device`, and the CUDA device to copy them to from there
/// (`None`: they are where they belong).
fn staging(device: &Device) -> (Device, Option<usize>) {
    #[cfg(feature = "tch")]
    if let Some(staging) = super::torch_upload::staging(device) {
        return staging;
    }
    (device.clone(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::device::under_test as device;

    #[test]
    fn uploads_hold_what_from_data_holds() {
        for device in [device(), device().autodiff()] {
            let ids = TensorData::new(vec![3i64, -1, 7, 0, 2, 9], [2, 3]);
            let got = ints::<2>(ids.clone(), &device);
            assert_eq!(got.device(), device);
            let want = Tensor::<2, Int>::from_data(ids, &device);
            assert_eq!(got.into_data(), want.into_data());
            let mask = TensorData::new(vec![1.0f32, 0.5, 0.0, -2.0], [4]);
            let got = floats::<1>(mask.clone(), &device);
            assert_eq!(got.device(), device);
            assert_eq!(
                got.into_data(),
                Tensor::<1>::from_data(mask, &device).into_data()
            );
        }
    }

    #[test]
    fn an_uploaded_mask_meets_tracked_tensors_in_one_graph() {
        let device = device().autodiff();
        let p = Tensor::<2>::from_data(TensorData::new(vec![1.0f32; 6], [2, 3]), &device)
            .require_grad();
        let mask = floats::<2>(
            TensorData::new(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], [2, 3]),
            &device,
        );
        let ids = ints::<1>(TensorData::new(vec![1i64, 0], [2]), &device);
        // The mask weighs p, and the ids pick rows of p: both meet the graph of p.
        let loss = (p.clone() * mask.clone()).sum() + p.clone().select(0, ids).sum();
        let grads = loss.backward();
        let g = p.grad(&grads).expect("a gradient").into_data();
        let want = TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
        assert_eq!(g.convert::<f32>(), want);
    }
}
