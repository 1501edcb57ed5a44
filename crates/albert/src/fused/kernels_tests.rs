//! Every level computes the baseline's bits for each training kernel, and the baseline is
//! right: GELU's derivative, the softmax's and log-softmax's backward against f64 references
//! here, all of them (LayerNorm's too) against burn's autodiff in `tracked_tests.rs`.

use super::*;

/// Values spread over (-`spread`, `spread`) by a fixed recurrence, `n` of them.
fn values(n: usize, spread: f32, seed: u32) -> Vec<f32> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32 * 2.0 - 1.0) * spread
        })
        .collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
}

fn levels() -> impl Iterator<Item = CpuLevel> {
    CpuLevel::ALL.into_iter().filter(|l| l.available())
}

/// d/dx of `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` in f64.
fn gelu_grad_reference(x: f32) -> f64 {
    let x = f64::from(x);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
}

#[test]
fn gelu_forward_and_derivative_agree_across_levels_and_with_f64() {
    for n in [1, 15, 16, 17, 1037] {
        let x = values(n, 9.0, 0x51ed);
        let g = values(n, 2.0, 0x7a3);
        let mut y0 = vec![0.0; n];
        gelu_into_at(CpuLevel::Baseline, &x, &mut y0);
        let mut in_place = x.clone();
        super::super::gelu_at(CpuLevel::Baseline, &mut in_place);
        assert!(
            same_bits(&y0, &in_place),
            "out of place differs from in place"
        );
        let mut d0 = g.clone();
        gelu_grad_at(CpuLevel::Baseline, &x, &mut d0);
        for ((x, g), d) in x.iter().zip(&g).zip(&d0) {
            let reference = f64::from(*g) * gelu_grad_reference(*x);
            let tolerance = 2e-6 * reference.abs().max(1.0);
            assert!(
                (f64::from(*d) - reference).abs() <= tolerance,
                "gelu'({x})·{g} = {d}, f64 {reference}"
            );
        }
        for level in levels() {
            let mut y = vec![0.0; n];
            gelu_into_at(level, &x, &mut y);
            assert!(same_bits(&y, &y0), "{level}: gelu differs on {n} values");
            let mut d = g.clone();
            gelu_grad_at(level, &x, &mut d);
            assert!(same_bits(&d, &d0), "{level}: gelu' differs on {n} values");
        }
    }
}

#[test]
fn softmax_backward_agrees_across_levels_and_sums_to_zero() {
    for row in [7, 16, 37, 128] {
        let rows = 6;
        // Probabilities: positive rows summing to 1.
        let mut p: Vec<f32> = values(rows * row, 1.0, 0x99)
            .iter()
            .map(|v| v.abs() + 0.01)
            .collect();
        for r in p.chunks_mut(row) {
            let s: f32 = r.iter().sum();
            r.iter_mut().for_each(|v| *v /= s);
        }
        let g = values(rows * row, 3.0, 0x1234);
        let mut d0 = g.clone();
        softmax_grad_at(CpuLevel::Baseline, &p, &mut d0, row, 0.25);
        // The gradient of a softmax's input sums to zero over each row (a shift of the input
        // leaves the output alone), and matches the formula in f64.
        for ((p, g), d) in p.chunks(row).zip(g.chunks(row)).zip(d0.chunks(row)) {
            let dot: f64 = p
                .iter()
                .zip(g)
                .map(|(p, g)| f64::from(*p) * f64::from(*g))
                .sum();
            for ((p, g), d) in p.iter().zip(g).zip(d) {
                let reference = 0.25 * f64::from(*p) * (f64::from(*g) - dot);
                assert!(
                    (f64::from(*d) - reference).abs() < 1e-6,
                    "{d} vs {reference}"
                );
            }
            assert!(d.iter().map(|d| f64::from(*d)).sum::<f64>().abs() < 1e-5);
        }
        for level in levels() {
            let mut d = g.clone();
            softmax_grad_at(level, &p, &mut d, row, 0.25);
            assert!(
                same_bits(&d, &d0),
                "{level}: softmax backward differs on rows of {row}"
            );
        }
    }
}

#[test]
fn layer_norm_forward_and_backward_agree_across_levels() {
    for d in [5, 16, 40, 312] {
        let rows = 7;
        let x = values(rows * d, 4.0, 0xabc);
        let gamma = values(d, 1.5, 0x3);
        let beta = values(d, 0.5, 0x5);
        let g = values(rows * d, 1.0, 0x77);
        let run = |level: CpuLevel| {
            let (mut xhat, mut y, mut rstd) = (x.clone(), vec![0.0; rows * d], vec![0.0; rows]);
            layer_norm_at(level, &mut xhat, &mut y, &mut rstd, &gamma, &beta, 1e-5);
            let (mut dx, mut dgamma, mut dbeta) = (g.clone(), vec![0.0; d], vec![0.0; d]);
            layer_norm_grad_at(
                level,
                &xhat,
                &rstd,
                &gamma,
                &mut dx,
                &mut dgamma,
                &mut dbeta,
            );
            [y, xhat, rstd, dx, dgamma, dbeta]
        };
        let baseline = run(CpuLevel::Baseline);
        // x̂ has mean 0 and variance ~1 in each row.
        for r in baseline[1].chunks(d) {
            let mean: f32 = r.iter().sum::<f32>() / d as f32;
            let var: f32 = r.iter().map(|v| v * v).sum::<f32>() / d as f32;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3,
                "{mean} {var}"
            );
        }
        for level in levels() {
            for (i, (a, b)) in run(level).iter().zip(&baseline).enumerate() {
                assert!(
                    same_bits(a, b),
                    "{level}: output {i} differs for rows of {d}"
                );
            }
        }
    }
}

#[test]
fn log_softmax_forward_and_backward_agree_across_levels_and_with_f64() {
    for row in [3, 16, 37, 500] {
        let rows = 5;
        let x = values(rows * row, 30.0, 0x4321);
        let g = values(rows * row, 1.0, 0x8765);
        let mut y0 = x.clone();
        log_softmax_at(CpuLevel::Baseline, &mut y0, row);
        let mut d0 = g.clone();
        log_softmax_grad_at(CpuLevel::Baseline, &y0, &mut d0, row);
        for (((x, y), g), d) in x
            .chunks(row)
            .zip(y0.chunks(row))
            .zip(g.chunks(row))
            .zip(d0.chunks(row))
        {
            let max = x
                .iter()
                .map(|v| f64::from(*v))
                .fold(f64::NEG_INFINITY, f64::max);
            let lse = max
                + x.iter()
                    .map(|v| (f64::from(*v) - max).exp())
                    .sum::<f64>()
                    .ln();
            let sum_g: f64 = g.iter().map(|v| f64::from(*v)).sum();
            for (((x, y), g), d) in x.iter().zip(y).zip(g).zip(d) {
                let reference = f64::from(*x) - lse;
                assert!((f64::from(*y) - reference).abs() < 1e-5 * reference.abs().max(1.0));
                let grad = f64::from(*g) - reference.exp() * sum_g;
                assert!((f64::from(*d) - grad).abs() < 1e-5, "{d} vs {grad}");
            }
        }
        for level in levels() {
            let mut y = x.clone();
            log_softmax_at(level, &mut y, row);
            assert!(
                same_bits(&y, &y0),
                "{level}: log_softmax differs on rows of {row}"
            );
            let mut d = g.clone();
            log_softmax_grad_at(level, &y0, &mut d, row);
            assert!(
                same_bits(&d, &d0),
                "{level}: its backward differs on rows of {row}"
            );
        }
    }
}
