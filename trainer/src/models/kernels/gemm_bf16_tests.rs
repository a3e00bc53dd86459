//! Tests of `gemm_bf16`: the rounding against `half`, and both kernels' products against a
//! naive f64 loop over the bf16-rounded inputs.
//!
//! Tolerance: every product of two bf16 values is exact in f32 and the sum has k terms, so
//! `|got − exact| ≤ 1e-5 · Σₖ |aᵢₖ · bₖⱼ|` (plus the start value's magnitude when accumulating):
//! about k/2 f32 roundings in the worst case at the shapes below, far fewer in practice, and two
//! hundred times smaller than the error of one unrounded input (2⁻⁹).

use super::gemm::Mat;
use super::gemm_bf16::*;

/// The kernels this CPU runs (the fallback always; AVX512_BF16 where it exists).
fn kernels() -> Vec<Kernel> {
    let mut ks = vec![Kernel::Fallback];
    if Kernel::Avx512Bf16.is_available() {
        ks.push(Kernel::Avx512Bf16);
    } else {
        eprintln!("gemm_bf16 tests: no AVX512_BF16 here, the fallback only");
    }
    ks
}

/// Pseudo-random values in about [-2, 2) that are not bf16 values (so rounding matters).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn at(m: Mat, r: usize, c: usize) -> f32 {
    let (data, _, _, rs, cs) = m.parts();
    data[r * rs + c * cs]
}

/// Checks `got` (row stride `rs`, start values `start` when accumulating) against the f64
/// product of the rounded inputs; the padding columns past n must be untouched.
fn check(got: &[f32], rs: usize, start: Option<&[f32]>, a: Mat, b: Mat, what: &str) {
    let (_, m, k, _, _) = a.parts();
    let (_, _, n, _, _) = b.parts();
    for r in 0..m {
        for c in 0..rs {
            let i = r * rs + c;
            if i >= got.len() {
                break;
            }
            let base = start.map_or(0.0, |s| s[i] as f64);
            if c >= n {
                assert_eq!(got[i].to_bits(), start.map_or(7.0, |s| s[i]).to_bits());
                continue;
            }
            let (mut exact, mut size) = (base, base.abs());
            for j in 0..k {
                let p =
                    round_to_bf16_f32(at(a, r, j)) as f64 * round_to_bf16_f32(at(b, j, c)) as f64;
                exact += p;
                size += p.abs();
            }
            let err = (got[i] as f64 - exact).abs();
            assert!(
                err <= 1e-5 * size,
                "{what}: ({r}, {c}) of {m}x{k}·{k}x{n}: {} vs {exact} (size {size})",
                got[i]
            );
        }
    }
}

/// `dst` for an m × n result with row stride `rs`: 7.0 everywhere, or the start values.
fn dst_for(m: usize, n: usize, rs: usize, seed: Option<u64>) -> Vec<f32> {
    let len = if m == 0 { 0 } else { (m - 1) * rs + n };
    seed.map_or(vec![7.0; len], |s| values(len, s))
}

/// Row-major products over shapes with 1, odd, edge and block-crossing dimensions, k = 0
/// included, overwriting and accumulating, one and three threads, both kernels.
#[test]
fn products_match_the_rounded_f64_product() {
    let shapes = [
        (1, 1, 1),
        (1, 1, 0),
        (3, 5, 0),
        (1, 7, 1),
        (5, 1, 3),
        (13, 33, 7),
        (12, 32, 256),
        (25, 65, 257),
        (MR * 33 + 5, NR * 2 + 3, KC * 2 + 3),
        (40, NR * 5 + 1, 600),
    ];
    for kernel in kernels() {
        for &(m, n, k) in &shapes {
            let (av, bv) = (values(m * k, 1), values(k * n, 2));
            let (a, b) = (Mat::row_major(&av, m, k), Mat::row_major(&bv, k, n));
            for threads in [1, 3] {
                for accumulate in [false, true] {
                    let rs = n + 3;
                    let start = dst_for(m, n, rs, accumulate.then_some(3));
                    let mut dst = start.clone();
                    gemm_bf16_with(kernel, &mut dst, rs, accumulate, a, b, threads);
                    let what = format!("{kernel:?} threads {threads} accumulate {accumulate}");
                    check(&dst, rs, accumulate.then_some(&start[..]), a, b, &what);
                }
            }
        }
    }
}

/// Transposed and strided views of both operands (the GPT's `x·Wᵀ`, `dYᵀ·X`, `dY·W`).
#[test]
fn transposed_and_strided_views() {
    let (m, n, k) = (29, 45, 301);
    // a stored transposed (k × m, rows of stride m + 2); b as a view with column stride 2.
    let at_v = values(k * (m + 2), 4);
    let b_v = values(4 * k * n, 5);
    let a_views = [
        Mat::strided(&at_v, k, m, m + 2, 1).t(),
        Mat::strided(&at_v, m, k / 2, 1, 2 * (m + 2)),
        Mat::strided(&at_v, m, k / 3, 3, m + 2),
    ];
    for kernel in kernels() {
        for a in a_views {
            let ka = a.parts().2;
            let b_views = [
                Mat::strided(&b_v, ka, n, n * 2, 2),
                Mat::strided(&b_v, n, ka, 2 * ka + 1, 2).t(),
                Mat::strided(&b_v, ka, n, 1, 3 * ka),
            ];
            for b in b_views {
                for threads in [1, 2] {
                    let mut dst = dst_for(m, n, n, None);
                    gemm_bf16_with(kernel, &mut dst, n, false, a, b, threads);
                    check(&dst, n, None, a, b, &format!("{kernel:?} views"));
                }
            }
        }
    }
}

/// A weight packed once serves several products; a packed `b` of one kernel's panels gives the
/// one-call result's bits; the AVX512_BF16 result does not depend on the thread count.
#[test]
fn packed_operands_are_reusable_and_results_reproducible() {
    let (n_in, n_out) = (70, 90);
    let w = values(n_out * n_in, 6);
    let wm = Mat::row_major(&w, n_out, n_in);
    for kernel in kernels() {
        let wt = PackedB::new(kernel, wm.t(), 1);
        assert_eq!(wt.shape(), (n_in, n_out));
        for (rows, seed) in [(17, 7), (130, 8)] {
            let x = values(rows * n_in, seed);
            let xm = Mat::row_major(&x, rows, n_in);
            let mut y = vec![0f32; rows * n_out];
            gemm_bf16_packed_b(&mut y, n_out, false, xm, &wt, 1);
            check(&y, n_out, None, xm, wm.t(), "packed weight");
            let mut one_call = vec![0f32; rows * n_out];
            gemm_bf16_with(kernel, &mut one_call, n_out, false, xm, wm.t(), 1);
            assert_eq!(y, one_call);
            if kernel == Kernel::Avx512Bf16 {
                let pa = PackedA::new(kernel, xm, 2);
                for threads in [2, 3, 8] {
                    let mut yt = vec![0f32; rows * n_out];
                    gemm_packed(&mut yt, n_out, false, &pa, &wt, threads);
                    assert_eq!(yt, y, "threads {threads}");
                }
            }
        }
    }
}

/// Empty strided views (k = 0 with row strides past the data, m or n = 0) leave `dst` zeroed
/// or untouched.
#[test]
fn empty_strided_views() {
    let v = vec![1f32; 4];
    for kernel in kernels() {
        let mut dst = vec![5f32; 6];
        let (a, b) = (Mat::strided(&v, 3, 0, 9, 1), Mat::strided(&v, 0, 2, 1, 7));
        gemm_bf16_with(kernel, &mut dst, 2, true, a, b, 1);
        assert_eq!(dst, [5.0; 6]);
        gemm_bf16_with(kernel, &mut dst, 2, false, a, b, 2);
        assert_eq!(dst, [0.0; 6]);
        let mut none: Vec<f32> = Vec::new();
        let (a0, b0) = (Mat::strided(&v, 0, 2, 9, 1), Mat::row_major(&v, 2, 2));
        gemm_bf16_with(kernel, &mut none, 2, false, a0, b0, 1);
        gemm_bf16_with(kernel, &mut none, 0, false, b0, a0.t(), 1);
    }
}

#[test]
#[should_panic(expected = "inner dimensions differ")]
fn mismatched_operands_are_refused() {
    let v = vec![0f32; 12];
    let mut dst = vec![0f32; 9];
    gemm_bf16(
        &mut dst,
        3,
        false,
        Mat::row_major(&v, 3, 4),
        Mat::row_major(&v, 3, 3),
        1,
    );
}

/// The rounding gives `half::bf16::from_f32`'s bits: ties to even both ways, the largest finite
/// values (to infinity), infinities, NaNs (quiet, sign kept), zeros, subnormals, and a sweep.
#[test]
fn rounding_matches_half() {
    let mut cases: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        f32::from_bits(0x3f80_8000), // halfway, even below: down
        f32::from_bits(0x3f81_8000), // halfway, odd below: up
        f32::from_bits(0x3f80_8001),
        f32::from_bits(0x3f80_7fff),
        f32::MAX,
        f32::MIN,
        f32::from_bits(0x7f7f_7fff),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001), // signalling NaN with a low payload
        f32::from_bits(0xffc1_2345),
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x0000_8000),
        f32::from_bits(0x0001_8000),
        f32::from_bits(0x807f_ffff),
    ];
    cases.extend((0..200_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
    for x in cases {
        let want = half::bf16::from_f32(x);
        let got = round_bf16(x);
        assert_eq!(got, want.to_bits(), "{x:?} ({:#x})", x.to_bits());
        assert_eq!(bf16_to_f32(got).is_nan(), x.is_nan());
        if !x.is_nan() {
            assert_eq!(round_to_bf16_f32(x).to_bits(), want.to_f32().to_bits());
        }
    }
}
