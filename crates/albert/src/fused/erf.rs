//! The exact GELU, `0.5·x·(1 + erf(x/√2))` (Hugging Face's `gelu`), as one vectorised pass for
//! inference on flex.
//!
//! Why: burn computes it as several passes with libm's scalar `erff` (7 % of a server's time
//! on a model with this activation, perf at AVX2). Here `erf` is Cephes' single-precision
//! `erff`/`erfcf`, branch-free so that it vectorises: for |x| < 1 an odd polynomial (evaluated
//! as `x + x·r(x²)`, so that its largest term is exact), above it `erfc(x) = e^(−x²)/x·R(1/x²)`
//! (two polynomials, split at 2). Within 9e-8 of an f64 `erf` (the tests sweep it; libm's
//! `erff` is within 3e-8), so outputs match burn's `gelu` to ~1e-7. `1 + erf(u)` for u < 0 is
//! taken as `erfc(|u|)` itself, not `1 − erf(|u|)`: no cancellation in GELU's negative tail.
//! Compiled per [`CpuLevel`] by [`multiversion!`]; no `mul_add`, so every level computes the
//! same bits.

use super::{CpuLevel, exp};

/// `erf(x)/x − 1` for |x| < 1 as a polynomial in x² (Cephes `erff`'s `T`, its constant term
/// less one), highest degree first.
const SMALL: [f32; 7] = [
    7.853_861_4e-5,
    -8.010_193_6e-4,
    5.188_327_7e-3,
    -2.685_381_2e-2,
    1.128_358_5e-1,
    -3.761_262_6e-1,
    1.283_791_7e-1,
];

/// `erfc(x)·x·e^(x²)` for 1 ≤ x < 2, a polynomial in 1/x² (Cephes `erfcf`'s `P`).
const MID: [f32; 9] = [
    2.326_82e-2,
    -1.387_039_4e-1,
    3.687_424_7e-1,
    -5.824_733e-1,
    6.210_004_6e-1,
    -4.944_515_3e-1,
    3.404_88e-1,
    -2.741_127e-1,
    5.638_259_4e-1,
];

/// The same for x ≥ 2 (Cephes `erfcf`'s `R`).
const LARGE: [f32; 8] = [
    -1.047_766_4e1,
    1.297_72e1,
    -7.495_518_7,
    2.921_019,
    -1.015_265_3,
    4.218_463_4e-1,
    -2.820_767_4e-1,
    5.641_895e-1,
];

/// Beyond this `erfc` is below 1e-44 and `e^(−x²)` saturates: inputs are clamped to it.
const LIMIT: f32 = 10.0;

#[inline(always)]
fn horner<const N: usize>(c: &[f32; N], x: f32) -> f32 {
    let mut p = c[0];
    for k in &c[1..] {
        p = p * x + k;
    }
    p
}

/// `(erf(a), erfc(a))` for `a ≥ 0`, each computed where it is accurate; both branches are
/// evaluated and one selected, so the loop has no branches and vectorises.
#[inline(always)]
fn erf_erfc(a: f32) -> (f32, f32) {
    let a = a.min(LIMIT);
    let a2 = a * a;
    let small = a + a * horner(&SMALL, a2);
    let q = 1.0 / a.max(1.0);
    let w = q * q;
    let tail = if a < 2.0 {
        horner(&MID, w)
    } else {
        horner(&LARGE, w)
    };
    let large = exp(-a2) * q * tail;
    if a < 1.0 {
        (small, 1.0 - small)
    } else {
        (1.0 - large, large)
    }
}

/// The exact GELU of one value: `0.5·x·(1 + erf(x/√2))`.
#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    let u = x * std::f32::consts::FRAC_1_SQRT_2;
    let (erf, erfc) = erf_erfc(u.abs());
    let one_plus = if u < 0.0 { erfc } else { 1.0 + erf };
    0.5 * x * one_plus
}

#[inline(always)]
fn gelu_erf_slice(v: &mut [f32]) {
    for e in v.iter_mut() {
        *e = gelu_erf(*e);
    }
}

multiversion!(gelu_erf_at, gelu_erf_slice, (v: &mut [f32]));

/// `v ← gelu(v)` (the exact GELU), at the active level.
pub(super) fn gelu_erf_in_place(v: &mut [f32]) {
    gelu_erf_at(CpuLevel::active(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `erf(x)`, single precision, as the GELU computes it.
    fn erf(x: f32) -> f32 {
        erf_erfc(x.abs()).0.copysign(x)
    }

    /// `erfc(a)` for `a ≥ 0` in f64 (`std` has no `erf`): `1 −` the Taylor series of `erf`
    /// below 3, the continued fraction of `erfc` above it (to ~1e-15 relative there).
    fn erfc64(a: f64) -> f64 {
        if a < 3.0 {
            let (mut term, mut sum, mut n) = (a, a, 0.0);
            while term.abs() > 1e-17 * sum.abs() {
                n += 1.0;
                term *= -a * a / n;
                sum += term / (2.0 * n + 1.0);
            }
            1.0 - sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc(a) = e^(−a²)/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + …))))).
            let mut f = a;
            for k in (1..120).rev() {
                f = a + (k as f64 / 2.0) / f;
            }
            (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
        }
    }

    fn erf64(x: f64) -> f64 {
        (1.0 - erfc64(x.abs())).copysign(x)
    }

    /// `1 + erf(u)`, without cancellation for u < 0.
    fn one_plus_erf64(u: f64) -> f64 {
        if u < 0.0 { erfc64(-u) } else { 1.0 + erf64(u) }
    }

    #[test]
    fn the_reference_erf_is_right() {
        // erf(0.5), erf(1), erf(2), erf(3.5) to 15 digits (Abramowitz and Stegun, table 7.1).
        for (x, y) in [
            (0.5, 0.520_499_877_813_047),
            (1.0, 0.842_700_792_949_715),
            (2.0, 0.995_322_265_018_953),
            (3.5, 0.999_999_256_901_628),
        ] {
            assert!((erf64(x) - y).abs() < 1e-14, "erf64({x}) = {}", erf64(x));
            assert!((erf64(-x) + y).abs() < 1e-14);
        }
    }

    /// Within 1e-7 of an f64 `erf` at every 1/4096 from −12 to 12 (both branches, the switch
    /// at 1 and 2, the clamp), and odd.
    #[test]
    fn erf_is_within_1e7_of_f64() {
        let mut worst = 0.0_f64;
        for i in -12 * 4096..=12 * 4096 {
            let x = i as f32 / 4096.0;
            let (y, reference) = (erf(x), erf64(f64::from(x)));
            worst = worst.max((f64::from(y) - reference).abs());
            assert_eq!(erf(-x).to_bits(), (-y).to_bits(), "erf is odd at {x}");
        }
        assert!(worst < 1e-7, "erf is off by {worst}");
    }

    /// The GELU within 1e-7·max(|x|, 1) of f64's, and relative 1e-6·x² in the negative tail
    /// (where it is small), at every level the CPU has, with the baseline's bits.
    #[test]
    fn every_available_level_computes_the_same_exact_gelu() {
        let input: Vec<f32> = (-9000..9000).map(|i| i as f32 / 997.0).collect();
        let mut baseline = input.clone();
        gelu_erf_at(CpuLevel::Baseline, &mut baseline);
        for (x, y) in input.iter().zip(&baseline) {
            let x64 = f64::from(*x);
            let reference = 0.5 * x64 * one_plus_erf64(x64 * std::f64::consts::FRAC_1_SQRT_2);
            let error = (f64::from(*y) - reference).abs();
            assert!(
                error <= 1e-7 * x64.abs().max(1.0),
                "gelu({x}) = {y}, f64 {reference}"
            );
            // Relative in the tail, where `1 + erf` would cancel: only the rounding of x/√2
            // (amplified by e^(−x²/2) as x grows) is left.
            if *x < -1.0 {
                let tolerance = 1e-6 * (x64 * x64) * reference.abs();
                assert!(error <= tolerance, "gelu({x}) = {y}, f64 {reference}");
            }
        }
        for level in CpuLevel::ALL.into_iter().filter(|l| l.available()) {
            let mut v = input.clone();
            gelu_erf_at(level, &mut v);
            let same = v
                .iter()
                .zip(&baseline)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{level} differs from the baseline");
        }
    }
}
