//! Getting at a flex tensor's float32 values for the fused kernels: contiguous from offset 0
//! to read, owned by the caller alone to write in place, and a new tensor from values.

use burn::backend::flex::FlexTensor;
use burn::tensor::{Shape, TensorData};

/// `t` contiguous from offset 0, so that [`values`] can read it (a copy only if it is not).
pub(super) fn contiguous(t: FlexTensor) -> FlexTensor {
    if t.as_slice::<f32>().is_some() {
        t
    } else {
        t.to_contiguous()
    }
}

/// The values of a tensor [`contiguous`] returned.
pub(super) fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice::<f32>()
        .expect("a contiguous float32 tensor (the callers check the dtype)")
}

/// `t` contiguous and owned by the caller alone, to be written in place: no copy when it is
/// already (the usual case for a fresh activation or gradient; a parameter's value the module
/// still holds is copied).
pub(super) fn owned(t: FlexTensor) -> FlexTensor {
    FlexTensor::from_data(t.into_data())
}

/// A new float32 tensor.
pub(super) fn tensor(values: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}
