//! `dst = [dst +] a · b` with bf16 inputs and f32 accumulation (PyTorch's bf16 autocast of a
//! matmul), for f32 matrices given as [`Mat`] views.
//!
//! The inputs are rounded to bf16 (to nearest, ties to even, NaN kept NaN: PyTorch's f32 → bf16
//! cast, [`round_bf16`]), every product of two bf16 values is exact in f32, and the products are
//! summed in f32.
//!
//! - [`Kernel::Avx512Bf16`] (AVX512_BF16, detected at run time): the operands are packed once
//!   into bf16 panels, `a` in panels of [`MR`] rows and `b` in panels of [`NR`] columns, each
//!   32-bit element a pair of consecutive k (the pairs `vdpbf16ps` multiplies and adds into one
//!   f32 lane), zero-padded to an even k and to whole panels. A microkernel keeps an `MR × NR`
//!   tile of f32 sums in 24 registers, blocked over k ([`KC`]) and over rows (`MC`) so that a `b`
//!   micro-panel stays in L1 and an `a` block in L2. `vdpbf16ps` treats bf16 subnormals (|x| <
//!   1.2e-38) as zero and flushes subnormal sums, as oneDNN's bf16 matmul does on this CPU.
//! - [`Kernel::Fallback`] (elsewhere, or forced): the operands are rounded into f32 buffers and
//!   multiplied by the f32 [`gemm`] (same inputs, f32 accumulation).
//!
//! The packed operands [`PackedA`] and [`PackedB`] can be reused: a weight packed once per step
//! serves every product with it ([`gemm_bf16_packed_b`]). A weight `W` (out × in) used as `x·Wᵀ`
//! and, for the input gradient, as `dy·W` is packed twice (`W.t()` and `W`): each packing is one
//! pass over `W`.
//!
//! Speed (`ddp-bench --what gemm`, Xeon model 207 without AMX): `vdpbf16ps` issues at a quarter
//! of `vfmadd231ps`'s rate there, so bf16 dot products peak at half the f32 FMA's flops (85
//! against 170 GFLOP/s per core, measured); the microkernel reaches ~95% of that, about half the
//! f32 `gemm` crate, and the fallback runs at 70-95% of the f32 GEMM. [`Kernel::detect`] still
//! prefers AVX512_BF16 wherever it exists: a caller that wants the faster path on such a CPU
//! passes [`Kernel::Fallback`].
//!
//! Every `dst` element of the AVX512_BF16 path is one sum in a fixed order (from `dst`, or 0,
//! then k pair after k pair), whatever the blocking and `threads`: the result does not depend on
//! the thread count. The fallback's is the `gemm` crate's.

use std::sync::OnceLock;

use rayon::prelude::*;

use super::gemm::{Mat, gemm};

/// Rows of `a` per panel (and of the microkernel's tile).
pub const MR: usize = 12;
/// Columns of `b` per panel (two AVX-512 vectors of f32 sums).
pub const NR: usize = 32;
/// k values per cache block (`KC / 2` pairs): a `KC × NR` bf16 micro-panel of `b` is 16 KiB.
pub const KC: usize = 256;
/// Rows per block of `a` kept in L2 (`MC × KC` bf16, 192 KiB).
const MC: usize = 32 * MR;

/// Which code computes a bf16 product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Packed bf16 panels and `vdpbf16ps` (needs AVX512F and AVX512_BF16).
    Avx512Bf16,
    /// Inputs rounded into f32 buffers, the f32 GEMM.
    Fallback,
}

impl Kernel {
    /// The fastest kernel this CPU runs (detected once).
    pub fn detect() -> Kernel {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            if Kernel::Avx512Bf16.is_available() {
                Kernel::Avx512Bf16
            } else {
                Kernel::Fallback
            }
        })
    }

    /// Whether this CPU runs the kernel.
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Fallback => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Bf16 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512Bf16 => false,
        }
    }

    fn check(self) {
        assert!(self.is_available(), "gemm_bf16: this CPU has no {self:?}");
    }
}

/// `x` rounded to bf16 (its upper 16 bits): to nearest, ties to even; a NaN stays a NaN (quiet,
/// sign and upper payload kept), infinities stay infinite, subnormals round like other values.
/// The same bits as `half::bf16::from_f32` and, but for a NaN's payload, PyTorch's cast.
#[inline(always)]
pub fn round_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    // Wraps only for NaNs, whose value is not used.
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet_nan = (bits >> 16) | 0x0040;
    // Selected without a branch, so that packing loops vectorise.
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        quiet_nan as u16
    } else {
        rounded as u16
    }
}

/// The f32 value of bf16 bits.
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `x` rounded to the nearest bf16, as an f32.
#[inline(always)]
pub fn round_to_bf16_f32(x: f32) -> f32 {
    bf16_to_f32(round_bf16(x))
}

/// An operand's values, packed for one kernel.
enum Repr {
    /// Panels of `W` rows (of `a`, or of `bᵀ`), `kp = ⌈k/2⌉` pairs each: pair `p` of row `r` of
    /// panel `i` at `(i * kp + p) * W + r`, as `lo | hi << 16` (bf16 of k = 2p and 2p + 1).
    Panels(Vec<u32>),
    /// The rounded values, row-major, or column-major (`transposed`: the view's columns were
    /// its contiguous direction, as in `dYᵀ`), so that the copy reads along memory.
    Rounded { values: Vec<f32>, transposed: bool },
}

/// The left operand `a` (m × k) of a bf16 product, packed.
pub struct PackedA {
    kernel: Kernel,
    m: usize,
    k: usize,
    repr: Repr,
}

/// The right operand `b` (k × n) of a bf16 product, packed.
pub struct PackedB {
    kernel: Kernel,
    k: usize,
    n: usize,
    repr: Repr,
}

impl PackedA {
    /// `a` rounded to bf16 and packed for `kernel`, on up to `threads` threads.
    pub fn new(kernel: Kernel, a: Mat, threads: usize) -> Self {
        kernel.check();
        let (_, m, k, _, _) = a.parts();
        let repr = match kernel {
            Kernel::Avx512Bf16 => Repr::Panels(pack_panels::<MR>(a, threads)),
            Kernel::Fallback => round_copy(a),
        };
        PackedA { kernel, m, k, repr }
    }

    /// Rows and columns (m, k).
    pub fn shape(&self) -> (usize, usize) {
        (self.m, self.k)
    }
}

impl PackedB {
    /// `b` rounded to bf16 and packed for `kernel`, on up to `threads` threads.
    pub fn new(kernel: Kernel, b: Mat, threads: usize) -> Self {
        kernel.check();
        let (_, k, n, _, _) = b.parts();
        let repr = match kernel {
            Kernel::Avx512Bf16 => Repr::Panels(pack_panels::<NR>(b.t(), threads)),
            Kernel::Fallback => round_copy(b),
        };
        PackedB { kernel, k, n, repr }
    }

    /// Rows and columns (k, n).
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.n)
    }
}

/// `dst = a · b` (or `dst += a · b` with `accumulate`) with `a` and `b` rounded to bf16 and the
/// products summed in f32, by the fastest [`Kernel`]; `dst` is row-major with row stride
/// `dst_rs`, `threads > 1` splits the work over rayon's pool (as [`gemm`]).
pub fn gemm_bf16(dst: &mut [f32], dst_rs: usize, accumulate: bool, a: Mat, b: Mat, threads: usize) {
    gemm_bf16_with(Kernel::detect(), dst, dst_rs, accumulate, a, b, threads);
}

/// [`gemm_bf16`] by a given kernel (panics if this CPU lacks it).
pub fn gemm_bf16_with(
    kernel: Kernel,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    a: Mat,
    b: Mat,
    threads: usize,
) {
    let (pa, pb) = (
        PackedA::new(kernel, a, threads),
        PackedB::new(kernel, b, threads),
    );
    gemm_packed(dst, dst_rs, accumulate, &pa, &pb, threads);
}

/// [`gemm_bf16`] with `b` packed beforehand (a weight packed once per step): packs `a` for
/// `b`'s kernel and multiplies.
pub fn gemm_bf16_packed_b(
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    a: Mat,
    b: &PackedB,
    threads: usize,
) {
    let pa = PackedA::new(b.kernel, a, threads);
    gemm_packed(dst, dst_rs, accumulate, &pa, b, threads);
}

/// `dst = [dst +] a · b` of two packed operands (packed for the same kernel).
pub fn gemm_packed(
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    a: &PackedA,
    b: &PackedB,
    threads: usize,
) {
    let (m, k, n) = (a.m, a.k, b.n);
    assert_eq!(
        k, b.k,
        "gemm_bf16: inner dimensions differ ({m}x{k} · {}x{n})",
        b.k
    );
    assert_eq!(
        a.kernel, b.kernel,
        "gemm_bf16: operands packed for different kernels"
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        dst_rs >= n && (m - 1) * dst_rs + n <= dst.len(),
        "gemm_bf16: a {m}x{n} result with row stride {dst_rs} does not fit {} values",
        dst.len()
    );
    match (&a.repr, &b.repr) {
        (Repr::Rounded { .. }, Repr::Rounded { .. }) => gemm(
            dst,
            dst_rs,
            accumulate,
            a.repr.rounded_view(m, k),
            b.repr.rounded_view(k, n),
            threads,
        ),
        (Repr::Panels(ap), Repr::Panels(bp)) => {
            if k == 0 {
                if !accumulate {
                    for r in 0..m {
                        dst[r * dst_rs..r * dst_rs + n].fill(0.0);
                    }
                }
                return;
            }
            let shape = Shape {
                m,
                n,
                kp: k.div_ceil(2),
                dst_rs,
                accumulate,
            };
            run_panels(dst, ap, bp, shape, threads);
        }
        _ => unreachable!("a kernel's operands have its representation"),
    }
}

/// `v`'s rounded values, row by row, or column by column where its columns are contiguous.
fn round_copy(v: Mat) -> Repr {
    let (data, rows, cols, rs, cs) = v.parts();
    let transposed = rs < cs;
    let (outer, inner, os, is) = if transposed {
        (cols, rows, cs, rs)
    } else {
        (rows, cols, rs, cs)
    };
    let mut values = Vec::with_capacity(rows * cols);
    // An empty line has no element to start from in `data`.
    for o in 0..if inner == 0 { 0 } else { outer } {
        if is == 1 {
            let line = &data[o * os..][..inner];
            values.extend(line.iter().map(|&x| round_to_bf16_f32(x)));
        } else {
            values.extend((0..inner).map(|i| round_to_bf16_f32(data[o * os + i * is])));
        }
    }
    Repr::Rounded { values, transposed }
}

impl Repr {
    /// The `rows × cols` view of a [`Repr::Rounded`].
    fn rounded_view(&self, rows: usize, cols: usize) -> Mat<'_> {
        match self {
            Repr::Rounded {
                values,
                transposed: true,
            } => Mat::row_major(values, cols, rows).t(),
            Repr::Rounded { values, .. } => Mat::row_major(values, rows, cols),
            Repr::Panels(_) => unreachable!("panels have no f32 view"),
        }
    }
}

/// `v` (rows × k) in panels of `W` rows of k pairs (see [`Repr::Panels`]), zero-padded; the
/// panels split over up to `threads` threads.
fn pack_panels<const W: usize>(v: Mat, threads: usize) -> Vec<u32> {
    let (_, rows, k, _, _) = v.parts();
    let kp = k.div_ceil(2);
    let panels = rows.div_ceil(W);
    let mut out = vec![0u32; panels * kp * W];
    if out.is_empty() {
        return out;
    }
    let per_task = panels.div_ceil(threads.max(1));
    let chunk = per_task * kp * W;
    if threads > 1 && panels > 1 {
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(t, part)| pack_range::<W>(v, t * per_task, part));
    } else {
        pack_range::<W>(v, 0, &mut out);
    }
    out
}

/// Packs the panels from `first` on into `out` (whole panels, zeros already in the padding).
fn pack_range<const W: usize>(v: Mat, first: usize, out: &mut [u32]) {
    let (data, rows, k, rs, cs) = v.parts();
    let kp = k.div_ceil(2);
    let pair = |lo: f32, hi: f32| round_bf16(lo) as u32 | (round_bf16(hi) as u32) << 16;
    for (i, panel) in out.chunks_exact_mut(kp * W).enumerate() {
        let r0 = (first + i) * W;
        let live = rows.saturating_sub(r0).min(W);
        if cs == 1 {
            // Rows of contiguous k: a row's pairs in order, written W apart.
            for r in 0..live {
                let row = &data[(r0 + r) * rs..][..k];
                for (p, two) in row.chunks_exact(2).enumerate() {
                    panel[p * W + r] = pair(two[0], two[1]);
                }
                if k % 2 == 1 {
                    panel[(kp - 1) * W + r] = pair(row[k - 1], 0.0);
                }
            }
        } else if rs == 1 {
            // Columns of contiguous rows (a transposed view): a pair of columns at a time.
            for p in 0..kp {
                let lo = &data[2 * p * cs + r0..][..live];
                let dst = &mut panel[p * W..][..live];
                if 2 * p + 1 < k {
                    let hi = &data[(2 * p + 1) * cs + r0..][..live];
                    for ((d, &l), &h) in dst.iter_mut().zip(lo).zip(hi) {
                        *d = pair(l, h);
                    }
                } else {
                    for (d, &l) in dst.iter_mut().zip(lo) {
                        *d = pair(l, 0.0);
                    }
                }
            }
        } else {
            for r in 0..live {
                let at = |c: usize| data[(r0 + r) * rs + c * cs];
                for p in 0..kp {
                    let hi = if 2 * p + 1 < k { at(2 * p + 1) } else { 0.0 };
                    panel[p * W + r] = pair(at(2 * p), hi);
                }
            }
        }
    }
}

/// A product's dimensions in panels' terms.
#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    /// k pairs (⌈k/2⌉, at least 1).
    kp: usize,
    dst_rs: usize,
    accumulate: bool,
}

/// The result's first element, shared by the tasks that write disjoint tiles of it.
struct DstPtr(*mut f32);

// SAFETY: the tasks given a `DstPtr` write disjoint tiles of the result (`run_panels`).
unsafe impl Send for DstPtr {}
// SAFETY: as above.
unsafe impl Sync for DstPtr {}

/// The AVX512_BF16 product of packed panels into `dst` (checked to hold the result), the
/// dimension with more panels split into up to `threads` contiguous ranges.
fn run_panels(dst: &mut [f32], a: &[u32], b: &[u32], s: Shape, threads: usize) {
    let (mp, np) = (s.m.div_ceil(MR), s.n.div_ceil(NR));
    let tasks = threads.max(1);
    let split_m = mp >= np || mp >= 2 * tasks;
    let along = if split_m { mp } else { np };
    let per = along.div_ceil(tasks);
    let tasks = along.div_ceil(per);
    let ptr = DstPtr(dst.as_mut_ptr());
    let run = |t: usize| {
        let range = t * per..((t + 1) * per).min(along);
        let (rows, cols) = if split_m {
            (range, 0..np)
        } else {
            (0..mp, range)
        };
        // SAFETY: `dst` holds the m × n result with row stride `dst_rs` (gemm_packed's assert),
        // tasks get disjoint panel ranges, so disjoint tiles, and the panels were packed by
        // `Kernel::Avx512Bf16`, which checked that the CPU has AVX512F and AVX512_BF16.
        unsafe { run_tiles(&ptr, a, b, s, rows, cols) }
    };
    if tasks > 1 {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// The tiles of row panels `rows` × column panels `cols`, blocked over k pairs (`KC / 2`) and
/// rows (`MC`).
///
/// # Safety
/// `dst` must hold the `s.m × s.n` result with row stride `s.dst_rs`, no other thread may touch
/// these tiles, and the CPU must have AVX512F and AVX512_BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn run_tiles(
    dst: &DstPtr,
    a: &[u32],
    b: &[u32],
    s: Shape,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    let kcp = KC / 2;
    for k0 in (0..s.kp).step_by(kcp) {
        let kc = kcp.min(s.kp - k0);
        let load = s.accumulate || k0 > 0;
        for m0 in rows.clone().step_by(MC / MR) {
            let m1 = (m0 + MC / MR).min(rows.end);
            for j in cols.clone() {
                let bp = &b[(j * s.kp + k0) * NR..][..kc * NR];
                let live_cols = (s.n - j * NR).min(NR);
                for i in m0..m1 {
                    let ap = &a[(i * s.kp + k0) * MR..][..kc * MR];
                    let tile = Tile {
                        // SAFETY: the tile's first element, (i·MR, j·NR), is inside the result.
                        c: unsafe { dst.0.add(i * MR * s.dst_rs + j * NR) },
                        rs: s.dst_rs,
                        rows: (s.m - i * MR).min(MR),
                        cols: live_cols,
                        load,
                    };
                    // SAFETY: the tile is inside `dst` and this task's (the caller's contract).
                    unsafe { micro(ap, bp, tile) }
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn run_tiles(
    _: &DstPtr,
    _: &[u32],
    _: &[u32],
    _: Shape,
    _: std::ops::Range<usize>,
    _: std::ops::Range<usize>,
) {
    unreachable!("Kernel::Avx512Bf16 is never available off x86-64")
}

/// Where a microkernel's `rows × cols` sums go (row stride `rs`), and whether they start from
/// the values there (`load`) or from zero.
struct Tile {
    c: *mut f32,
    rs: usize,
    rows: usize,
    cols: usize,
    load: bool,
}

/// `tile (+)= a-panel · b-panel` over `a.len() / MR` k pairs: an `MR × NR` block of f32 sums in
/// 24 registers, one `vdpbf16ps` per row and vector per k pair.
///
/// # Safety
/// `tile` must lie inside a result no other thread touches; the CPU must have AVX512F and
/// AVX512_BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn micro(a: &[u32], b: &[u32], tile: Tile) {
    use std::arch::x86_64::*;
    use std::mem::transmute;
    let kc = a.len() / MR;
    debug_assert!(b.len() == kc * NR && tile.rows <= MR && tile.cols <= NR);
    let mask = |n: usize| ((1u32 << n.min(16)) - 1) as __mmask16;
    let (m0, m1) = (mask(tile.cols), mask(tile.cols.saturating_sub(16)));
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    // A fixed number of rows, so that `acc` stays in registers; the missing ones are skipped.
    for (r, sums) in acc.iter_mut().enumerate() {
        if tile.load && r < tile.rows {
            let c = tile.c.wrapping_add(r * tile.rs);
            // SAFETY: the masks keep to the tile's live columns of a live row.
            unsafe {
                sums[0] = _mm512_maskz_loadu_ps(m0, c);
                sums[1] = _mm512_maskz_loadu_ps(m1, c.wrapping_add(16));
            }
        }
    }
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    for p in 0..kc {
        // SAFETY: `b` holds `kc` rows of NR pairs, `a` `kc` rows of MR pairs; `__m512i` and
        // `__m512bh` are both 64 bytes of any bits.
        unsafe {
            let b0 = transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(p * NR).cast()));
            let b1 = transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(p * NR + 16).cast()));
            for (r, sums) in acc.iter_mut().enumerate() {
                let pair = *ap.add(p * MR + r) as i32;
                let av = transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair));
                sums[0] = _mm512_dpbf16_ps(sums[0], av, b0);
                sums[1] = _mm512_dpbf16_ps(sums[1], av, b1);
            }
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        if r < tile.rows {
            let c = tile.c.wrapping_add(r * tile.rs);
            // SAFETY: as the loads.
            unsafe {
                _mm512_mask_storeu_ps(c, m0, sums[0]);
                _mm512_mask_storeu_ps(c.wrapping_add(16), m1, sums[1]);
            }
        }
    }
}
