//! Branch-free `exp`, `erf` and GELU for kernels that the compiler vectorises: every function is
//! `#[inline(always)]`, so inside a [`super::simd::widest_simd`] body it becomes AVX-512 or AVX2
//! code (libm's `expf`/`erff` are calls per value, which no loop around them vectorises).
//!
//! - [`exp`]: Cephes' `expf` (a degree-6 polynomial on the remainder of a rounding to a power of
//!   two), within 2 ulp of `f32::exp` on [−87, 88]; 0 below, +∞ above.
//! - [`erf`]: Abramowitz and Stegun 7.1.26 with [`exp`], absolute error below 5e-7 in f32: the
//!   approximation PyTorch's vectorised CPU `erf` uses, so GELU matches PyTorch's kernel.
//! - [`gelu`], [`gelu_grad`]: the exact (erf) GELU and its derivative, PyTorch's formulas.

/// 2^23 + 2^22: adding and subtracting it rounds an f32 below 2^22 in magnitude to the nearest
/// integer (ties to even), with no conversion instruction.
const ROUND: f32 = 12_582_912.0;

/// `e^x` (see the module doc).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts: n·LN2_HI is exact for the n that occur.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let below = x < -87.5;
    let x = x.clamp(-87.5, 88.5);
    let rounded = x * LOG2E + ROUND;
    let n = rounded - ROUND;
    // n as an integer, read from the bits (an `as i32` conversion checks every value for NaN
    // and range, one at a time, and keeps the loop from vectorising).
    let ni = rounded.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n: n is in [−127, 128) after the clamp; 2^−127 and below flush to 0 (as −126 does).
    let e = ni + 127;
    let scale = if e > 0 {
        f32::from_bits((e as u32) << 23)
    } else {
        0.0
    };
    // 2^128 overflows the exponent field: split it.
    let v = if e >= 255 {
        y * f32::from_bits(254 << 23) * 2.0
    } else {
        y * scale
    };
    if below { 0.0 } else { v }
}

/// The error function (see the module doc).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_with_exp(x, exp(-(x * x)))
}

/// [`erf`] given `e = exp(−x²)` (which GELU's gradient needs too).
#[inline(always)]
fn erf_with_exp(x: f32, e: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_6;
    const A2: f32 = -0.284_496_74;
    const A3: f32 = 1.421_413_8;
    const A4: f32 = -1.453_152;
    const A5: f32 = 1.061_405_4;
    let t = 1.0 / (P * x.abs() + 1.0);
    let r = (((A5 * t + A4) * t + A3) * t + A2) * t + A1;
    let y = 1.0 - r * t * e;
    if x < 0.0 { -y } else { y }
}

/// 1/√2.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π).
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// GELU with the exact (erf) form: `x · Φ(x) = 0.5·x·(1 + erf(x/√2))`.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2))
}

/// GELU's derivative times the output gradient `g`: `g · (Φ(x) + x·φ(x))`; `exp(−x²/2)`, in
/// φ and in the erf of Φ alike, is computed once.
#[inline(always)]
pub fn gelu_grad(x: f32, g: f32) -> f32 {
    let u = x * FRAC_1_SQRT_2;
    let e = exp(-(u * u));
    let cdf = 0.5 * (1.0 + erf_with_exp(u, e));
    g * (cdf + x * FRAC_1_SQRT_2PI * e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_2_ulp_of_libm() {
        let mut worst = 0;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let (got, want) = (exp(x), x.exp());
            if want.is_normal() {
                worst = worst.max(ulps(got, want));
            }
        }
        assert!(worst <= 2, "{worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-1000.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(89.0) > 1e38, "{}", exp(89.0));
    }

    /// erf(i·h) for i in 0..=n, by Simpson's rule on each step of 2/√π·∫e^(−t²) (f64, exact
    /// to about 1e-14 at this step).
    fn erf_table(h: f64, n: usize) -> Vec<f64> {
        let f = |t: f64| 2.0 / std::f64::consts::PI.sqrt() * (-t * t).exp();
        let mut out = vec![0.0; n + 1];
        for i in 0..n {
            let (a, b) = (i as f64 * h, (i + 1) as f64 * h);
            out[i + 1] = out[i] + h / 6.0 * (f(a) + 4.0 * f(0.5 * (a + b)) + f(b));
        }
        out
    }

    #[test]
    fn erf_and_gelu_are_within_5e_7_of_f64() {
        // x = ±i·h up to 10; erf(x/√2) read from a table on the grid of x/√2.
        let (h, n) = (1.0 / 2048.0, 20_480);
        let table = erf_table(h, n);
        let erf64 = |x: f64| {
            let i = (x.abs() / h).round() as usize;
            table[i].copysign(x)
        };
        let table2 = erf_table(h / 2f64.sqrt(), n);
        let erf64_half = |x: f64| {
            let i = (x.abs() / h).round() as usize;
            table2[i].copysign(x)
        };
        let mut worst: f64 = 0.0;
        let mut worst_grad: f64 = 0.0;
        for i in 0..=2 * n {
            let x = (i as f64 - n as f64) * h;
            worst = worst.max((erf(x as f32) as f64 - erf64(x)).abs());
            let want = 0.5 * x * (1.0 + erf64_half(x));
            let tol = 2e-7 * (1.0 + x.abs());
            assert!(
                (gelu(x as f32) as f64 - want).abs() < tol,
                "gelu({x}) = {} not {want}",
                gelu(x as f32)
            );
            let cdf = 0.5 * (1.0 + erf64_half(x));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let want_grad = 3.0 * (cdf + x * pdf);
            worst_grad = worst_grad.max((gelu_grad(x as f32, 3.0) as f64 - want_grad).abs());
        }
        assert!(worst < 5e-7, "erf off by {worst}");
        assert!(worst_grad < 3.0 * 4e-7, "gelu gradient off by {worst_grad}");
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(gelu(0.0), 0.0);
    }
}
