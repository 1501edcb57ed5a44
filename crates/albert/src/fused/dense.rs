//! The dense layer `y = x·W + b` (or `x·Wᵀ + b`, the MLM decoder's tied embeddings) on flex
//! as one gemm each way, for [`super::tracked`]'s fused linear op.
//!
//! Why: flex allocates each matrix product's output zeroed as bytes and then copies it into an
//! aligned buffer (`FlexTensor::empty`: a memset and a memmove per product, 10 % of a CPU
//! training step at AVX2 after the element-wise ops were fused), and adds the bias in another
//! pass (and sums it in another op backward). Here the output starts as the bias, rows
//! repeated, and gemm accumulates the product onto it; the backward's three results are two
//! gemms and one pass of column sums. Same `gemm` crate, kernels and threading rule as flex.

use burn::backend::TensorMetadata;
use burn::backend::flex::FlexTensor;
use gemm::Parallelism;

use super::flex_values::{contiguous, tensor, values};

/// Products of at least this many multiply-adds run on rayon's threads (flex's own threshold).
const PARALLEL_THRESHOLD: usize = 192 * 192 * 192;

/// A row-major view of a matrix held in a slice: element `(i, j)` at `i·rs + j·cs`.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// `[rows, cols]` from `data[offset..]` at row stride `rs` (columns contiguous).
    pub(super) fn strided(
        data: &'a [f32],
        offset: usize,
        rows: usize,
        cols: usize,
        rs: usize,
    ) -> Self {
        Mat {
            data: data.get(offset..).unwrap_or(&[]),
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// A contiguous `[rows, cols]` matrix.
    pub(super) fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Mat {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The same values read as the transposed matrix (no copy: the strides swap).
    pub(super) fn t(self) -> Self {
        Mat {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Whether every element the view names lies inside its slice.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

/// `dst ← [dst +] a·b` with `dst` row-major `[a.rows, b.cols]`.
fn gemm_into(dst: &mut [f32], accumulate: bool, a: Mat, b: Mat) {
    assert_eq!(dst.len(), a.rows * b.cols, "gemm_into: destination size");
    gemm_strided(dst, b.cols, accumulate, a, b)
}

/// `dst ← [dst +] a·b` with `dst` `[a.rows, b.cols]` at row stride `dst_rs` (columns
/// contiguous): rows of a wider matrix, such as one head's columns of `[batch, seq, H]`.
pub(super) fn gemm_strided(dst: &mut [f32], dst_rs: usize, accumulate: bool, a: Mat, b: Mat) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let dst_fits = m == 0 || n == 0 || ((m - 1) * dst_rs + n <= dst.len() && n <= dst_rs);
    assert!(
        b.rows == k && dst_fits && a.in_bounds() && b.in_bounds(),
        "gemm_strided: [{m}, {k}]·[{}, {n}] into {} values at row stride {dst_rs}",
        b.rows,
        dst.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(dst_rs).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let parallelism = if m.saturating_mul(n).saturating_mul(k) >= PARALLEL_THRESHOLD {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    let s = |v: usize| v as isize;
    // SAFETY: the assert above keeps every element gemm reads or writes inside its slice
    // (dst's `[m, n]` at row stride dst_rs, a and b in bounds for their shapes), and dst is
    // borrowed mutably, so no other reference sees it while gemm writes.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            s(dst_rs),
            accumulate,
            a.data.as_ptr(),
            s(a.cs),
            s(a.rs),
            b.data.as_ptr(),
            s(b.cs),
            s(b.rs),
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `(rows, d_in)` of the input and `(d_in, d_out)` of the weight as used (`[d_out, d_in]`
/// stored when `transposed`).
fn dims(x: &FlexTensor, w: &FlexTensor, transposed: bool) -> (usize, usize, usize) {
    let (xs, ws) = (x.shape(), w.shape());
    let d_out = if transposed { ws[0] } else { ws[1] };
    (xs[0], xs[1], d_out)
}

/// The weight as the `[d_in, d_out]` matrix the product uses.
fn weight(w: &FlexTensor, d_in: usize, d_out: usize, transposed: bool) -> Mat<'_> {
    if transposed {
        Mat::new(values(w), d_out, d_in).t()
    } else {
        Mat::new(values(w), d_in, d_out)
    }
}

/// `x·W + b`, `x` `[n, d_in]`.
pub(super) fn forward(
    x: &FlexTensor,
    w: &FlexTensor,
    b: &FlexTensor,
    transposed: bool,
) -> FlexTensor {
    let (n, d_in, d_out) = dims(x, w, transposed);
    let (x, w, b) = (
        contiguous(x.clone()),
        contiguous(w.clone()),
        contiguous(b.clone()),
    );
    let bias = values(&b);
    let mut y = Vec::with_capacity(n * d_out);
    for _ in 0..n {
        y.extend_from_slice(bias);
    }
    gemm_into(
        &mut y,
        true,
        Mat::new(values(&x), n, d_in),
        weight(&w, d_in, d_out, transposed),
    );
    tensor(y, [n, d_out].into())
}

/// The gradients of `x·W + b` from the output's `g` `[n, d_out]`: `(dx, dW, db)`, each only
/// when asked for (`want`), `dW` in the weight's stored layout.
pub(super) fn backward(
    x: &FlexTensor,
    w: &FlexTensor,
    g: FlexTensor,
    transposed: bool,
    want: [bool; 3],
) -> [Option<FlexTensor>; 3] {
    let (n, d_in, d_out) = dims(x, w, transposed);
    let (x, w, g) = (contiguous(x.clone()), contiguous(w.clone()), contiguous(g));
    let gm = Mat::new(values(&g), n, d_out);
    let xm = Mat::new(values(&x), n, d_in);
    let dx = want[0].then(|| {
        let mut dx = vec![0.0; n * d_in];
        gemm_into(&mut dx, false, gm, weight(&w, d_in, d_out, transposed).t());
        tensor(dx, [n, d_in].into())
    });
    let dw = want[1].then(|| {
        let mut dw = vec![0.0; d_in * d_out];
        if transposed {
            gemm_into(&mut dw, false, gm.t(), xm);
            tensor(dw, [d_out, d_in].into())
        } else {
            gemm_into(&mut dw, false, xm.t(), gm);
            tensor(dw, [d_in, d_out].into())
        }
    });
    let db = want[2].then(|| {
        let mut db = vec![0.0; d_out];
        for row in values(&g).chunks_exact(d_out.max(1)) {
            for (s, v) in db.iter_mut().zip(row) {
                *s += v;
            }
        }
        tensor(db, [d_out].into())
    });
    [dx, dw, db]
}
