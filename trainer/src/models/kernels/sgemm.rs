//! A packed f32 GEMM for x86-64 with AVX2 and FMA (BLIS's loop structure): `C += A·B` over
//! blocks of `KC` depth, `MC` rows of A and `NC` columns of B, each packed into panels the
//! 6×16 microkernel streams through (a B micro-panel stays in L1 across the rows of an A block,
//! the A block in L2). Edge tiles go through a scratch tile. The `gemm` crate, which candle's
//! matmul uses, reached 12–31 GFLOP/s on the convolutions' shapes on a 2-core EPYC where this
//! reaches (see docs/performance.md) — the difference between losing and beating PyTorch's
//! oneDNN convolutions.
//!
//! [`available`] says whether the CPU has AVX2 and FMA; [`super::gemm`] falls back to the `gemm`
//! crate otherwise.

use super::tasks::Scratch;

/// Rows of C per microkernel tile.
const MR: usize = 6;
/// Columns of C per microkernel tile (two 8-lane vectors).
const NR: usize = 16;
/// Depth of a packed block.
const KC: usize = 256;
/// Rows of A per packed block (a multiple of MR).
const MC: usize = 96;
/// Columns of B per packed block (a multiple of NR).
const NC: usize = 2048;

/// A matrix operand as raw strides: element (r, c) at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub struct Operand<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// Whether this CPU runs [`gemm`] (checked once).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static YES: OnceLock<bool> = OnceLock::new();
        *YES.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A left operand packed once for every block of every product it takes part in (a layer's
/// weight across a batch's chunks): `[KC-deep block][MC-row block]` panels in loop order.
pub struct PackedA {
    data: Vec<f32>,
    m: usize,
    k: usize,
}

impl PackedA {
    /// Packs the `m × k` matrix `a`.
    pub fn new(m: usize, k: usize, a: Operand) -> Self {
        let mut data = vec![0f32; m.next_multiple_of(MR) * k];
        let mut at = 0;
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                let len = mc.next_multiple_of(MR) * kc;
                pack_a(&a, ic, mc, pc, kc, &mut data[at..at + len]);
                at += len;
            }
        }
        PackedA { data, m, k }
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    pub fn depth(&self) -> usize {
        self.k
    }

    /// The packed (depth block starting at `pc`, row block starting at `ic`).
    fn block(&self, pc: usize, ic: usize) -> &[f32] {
        // Every depth block before `pc` holds all rows; within it, every row block before
        // `ic` holds MC rows.
        let at = pc * self.m.next_multiple_of(MR) + ic * KC.min(self.k - pc);
        &self.data[at..]
    }
}

/// `C = A·B` (or `C += A·B` with `accumulate`) for `A` m×k, `B` k×n, `C` row-major m×n with row
/// stride `ldc`. The caller checked the bounds of every operand and [`available`]. (Callers
/// pack through [`PackedA`]; this form is for the tests.)
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: Operand,
    b: Operand,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    threads: usize,
) {
    gemm_packed(&PackedA::new(m, k, a), n, b, c, ldc, accumulate, threads);
}

/// [`gemm`] with A packed beforehand. With `threads > 1`, threads take ranges of MC-row blocks.
pub fn gemm_packed(
    a: &PackedA,
    n: usize,
    b: Operand,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    threads: usize,
) {
    use rayon::prelude::*;
    assert!(available(), "sgemm needs AVX2 and FMA");
    let (m, k) = (a.m, a.k);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                c[r * ldc..r * ldc + n].fill(0.0);
            }
        }
        return;
    }
    let row_blocks = m.div_ceil(MC);
    let per = row_blocks.div_ceil(threads.clamp(1, row_blocks));
    if per >= row_blocks {
        row_range(a, 0..m, n, &b, c, ldc, accumulate);
    } else {
        c.par_chunks_mut(per * MC * ldc)
            .enumerate()
            .for_each(|(t, c)| {
                let first = t * per * MC;
                row_range(a, first..m.min(first + per * MC), n, &b, c, ldc, accumulate);
            });
    }
}

/// Rows `rows` of C (`c` starts at the first of them), every column.
fn row_range(
    a: &PackedA,
    rows: std::ops::Range<usize>,
    n: usize,
    b: &Operand,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let k = a.k;
        let mut bpack = Scratch::take(KC * NC.min(n.next_multiple_of(NR)));
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                pack_b(b, pc, kc, jc, nc, &mut bpack);
                let load_c = accumulate || pc > 0;
                for ic in rows.clone().step_by(MC) {
                    let mc = MC.min(rows.end - ic);
                    // SAFETY: AVX2 and FMA are available (asserted by gemm_packed); the panels
                    // hold kc·MR / kc·NR values per tile and every tile of C lies inside `c`
                    // (the caller checked m, n and ldc against its length).
                    unsafe {
                        block(
                            mc,
                            nc,
                            kc,
                            a.block(pc, ic),
                            &bpack,
                            c,
                            ldc,
                            ic - rows.start,
                            jc,
                            load_c,
                        )
                    };
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, rows, n, b, c, ldc, accumulate);
        unreachable!("sgemm::available() is false off x86-64");
    }
}

/// Packs rows `i0..i0+mc`, columns `p0..p0+kc` of A into MR-row panels (`p·MR + i` within a
/// panel), zero-padding the last panel. Reads follow whichever stride of A is 1.
fn pack_a(a: &Operand, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [f32]) {
    for (panel, dst) in out
        .chunks_exact_mut(MR * kc)
        .take(mc.div_ceil(MR))
        .enumerate()
    {
        let rows = MR.min(mc - panel * MR);
        let r0 = i0 + panel * MR;
        if rows < MR {
            dst.fill(0.0);
        }
        if a.rs == 1 && rows == MR {
            // Column-major A: the panel's rows of one column are adjacent.
            for (p, d) in dst.chunks_exact_mut(MR).enumerate() {
                let at = r0 + (p0 + p) * a.cs;
                d.copy_from_slice(&a.data[at..at + MR]);
            }
        } else {
            for i in 0..rows {
                let row = (r0 + i) * a.rs;
                for (p, d) in dst.chunks_exact_mut(MR).enumerate() {
                    d[i] = a.data[row + (p0 + p) * a.cs];
                }
            }
        }
    }
}

/// Packs rows `p0..p0+kc`, columns `j0..j0+nc` of B into NR-column panels (`p·NR + j`),
/// zero-padding the last panel. Reads follow whichever stride of B is 1.
fn pack_b(b: &Operand, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [f32]) {
    for (panel, dst) in out
        .chunks_exact_mut(NR * kc)
        .take(nc.div_ceil(NR))
        .enumerate()
    {
        let cols = NR.min(nc - panel * NR);
        let c0 = j0 + panel * NR;
        if cols < NR {
            dst.fill(0.0);
        }
        if b.cs == 1 && cols == NR {
            for (p, d) in dst.chunks_exact_mut(NR).enumerate() {
                let at = (p0 + p) * b.rs + c0;
                d.copy_from_slice(&b.data[at..at + NR]);
            }
        } else {
            for j in 0..cols {
                let col = (c0 + j) * b.cs;
                for (p, d) in dst.chunks_exact_mut(NR).enumerate() {
                    d[j] = b.data[col + (p0 + p) * b.rs];
                }
            }
        }
    }
}

/// Every tile of one packed (A block, B block) pair.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    mc: usize,
    nc: usize,
    kc: usize,
    apack: &[f32],
    bpack: &[f32],
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    j0: usize,
    load_c: bool,
) {
    let mut scratch = [0f32; MR * NR];
    for jr in (0..nc).step_by(NR) {
        let cols = NR.min(nc - jr);
        let bp = bpack[(jr / NR) * NR * kc..].as_ptr();
        for ir in (0..mc).step_by(MR) {
            let rows = MR.min(mc - ir);
            let ap = apack[(ir / MR) * MR * kc..].as_ptr();
            let origin = (i0 + ir) * ldc + j0 + jr;
            if rows == MR && cols == NR {
                // SAFETY: a full tile: rows origin..origin+5·ldc+16 lie inside c.
                unsafe { kernel(kc, ap, bp, c.as_mut_ptr().add(origin), ldc, load_c) };
            } else {
                // SAFETY: the scratch tile is MR×NR with row stride NR.
                unsafe { kernel(kc, ap, bp, scratch.as_mut_ptr(), NR, false) };
                for r in 0..rows {
                    let dst = &mut c[origin + r * ldc..origin + r * ldc + cols];
                    let src = &scratch[r * NR..r * NR + cols];
                    if load_c {
                        for (d, s) in dst.iter_mut().zip(src) {
                            *d += s;
                        }
                    } else {
                        dst.copy_from_slice(src);
                    }
                }
            }
        }
    }
}

/// The 6×16 microkernel: `C[0..6, 0..16] (+)= Σ_p a[p·6 + i] · b[p·16 + j]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel(k: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, load_c: bool) {
    use std::arch::x86_64::*;
    // SAFETY (whole body): a holds k·6 values, b k·16, and c six rows of 16 at stride ldc.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for p in 0..k {
            let b0 = _mm256_loadu_ps(b.add(p * NR));
            let b1 = _mm256_loadu_ps(b.add(p * NR + 8));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*a.add(p * MR + i));
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            let dst = c.add(i * ldc);
            let (mut v0, mut v1) = (row[0], row[1]);
            if load_c {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(dst));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(dst.add(8)));
            }
            _mm256_storeu_ps(dst, v0);
            _mm256_storeu_ps(dst.add(8), v1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every edge case of the blocking (partial tiles, several KC/MC/NC blocks), strided and
    /// transposed operands, accumulate or not, against a naive loop on small integers (exact).
    #[test]
    fn matches_a_naive_product() {
        if !available() {
            eprintln!("no AVX2/FMA here: nothing to test");
            return;
        }
        let cases = [
            (1, 1, 1),
            (6, 16, 3),
            (7, 17, 5),
            (13, 40, 300),
            (100, 33, 520),
            (5, 2100, 7),
            (200, 20, 9),
        ];
        for ((m, n, k), threads) in cases.into_iter().zip([1, 2, 3].into_iter().cycle()) {
            for (transpose_a, transpose_b, accumulate) in [
                (false, false, false),
                (true, false, true),
                (false, true, false),
                (true, true, true),
            ] {
                let av: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
                let bv: Vec<f32> = (0..k * n).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
                let a = if transpose_a {
                    Operand {
                        data: &av,
                        rs: 1,
                        cs: m,
                    }
                } else {
                    Operand {
                        data: &av,
                        rs: k,
                        cs: 1,
                    }
                };
                let b = if transpose_b {
                    Operand {
                        data: &bv,
                        rs: 1,
                        cs: k,
                    }
                } else {
                    Operand {
                        data: &bv,
                        rs: n,
                        cs: 1,
                    }
                };
                let ldc = n + 3;
                let mut c = vec![1f32; m * ldc];
                gemm(m, n, k, a, b, &mut c, ldc, accumulate, threads);
                for r in 0..m {
                    for col in 0..ldc {
                        let want = if col >= n {
                            1.0
                        } else {
                            let dot: f32 = (0..k)
                                .map(|p| {
                                    a.data[r * a.rs + p * a.cs] * b.data[p * b.rs + col * b.cs]
                                })
                                .sum();
                            dot + if accumulate { 1.0 } else { 0.0 }
                        };
                        assert_eq!(
                            c[r * ldc + col],
                            want,
                            "{m}x{n}x{k} ta {transpose_a} tb {transpose_b} acc {accumulate} at ({r}, {col})"
                        );
                    }
                }
            }
        }
    }
}
