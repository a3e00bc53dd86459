//! 3×3 stride-1 convolution by Winograd's minimal filtering F(2×2, 3×3): 16 multiplications per
//! 2×2 output tile and channel pair instead of 36, the GEMMs 2.25× smaller than im2col's.
//!
//! Every 4×4 input patch `d` (stride 2, zero padded) becomes `V = Bᵀ d B`, every filter `g`
//! becomes `U = G g Gᵀ`, and per transform position ξ (16 of them) one GEMM
//! `M[ξ] [O, T] = U[ξ] [O, C] · V[ξ] [C, T]` covers a batch chunk's `T` tiles; `Y = Aᵀ M A`
//! gives the 2×2 outputs. Backward:
//! - `dx` is the same forward pass over `dy` with the filters flipped and their channels
//!   swapped, padded by `2 − p`;
//! - `dW = Gᵀ (Σ_tiles Ê ⊙ V) G` with `Ê = A E Aᵀ` for each 2×2 tile `E` of `dy` (the transpose
//!   of the forward identity, F(3×3, 2×2)): per ξ one GEMM `S[ξ] [O, C] += Ê[ξ] [O, T] · V[ξ]ᵀ`.
//!
//! The batch is split like [`super::conv`]: one contiguous range of samples per thread, worked in
//! chunks of about [`TARGET_TILES`] tiles whose transformed buffers are reused chunk after chunk.
//! The transforms only add, subtract and halve, so small integers stay exact (the tests compare
//! with the definition for equality).

use super::conv::ConvShape;
use super::gemm::{Mat, gemm};
use super::tasks::{Scratch, items_per_task, map_pieces, map_range, output_vec, written_pieces};

/// Tiles of a batch chunk worth one set of 16 GEMMs.
pub const TARGET_TILES: usize = 256;

/// Whether [`forward`] and [`backward`] take this convolution: 3×3, stride 1, padding ≤ 2, at
/// least [`MIN_CHANNELS`] channels on both sides (where the GEMMs are the work and the transforms'
/// passes over the data pay off), and an output of at least 4×4 (a 3×3 one would compute 16
/// outputs in its 2×2 tiles for 9). That is ResNet-18's 3×3 convolutions after its stem; the
/// reference CNN's layers and every first layer stay with im2col.
pub fn applies(s: &ConvShape) -> bool {
    let u = s.unfold;
    u.k == 3
        && u.stride == 1
        && u.padding <= 2
        && s.c >= MIN_CHANNELS
        && s.o >= MIN_CHANNELS
        && s.oh >= 4
        && s.ow >= 4
}

/// Fewest input and output channels of a convolution done by Winograd.
pub const MIN_CHANNELS: usize = 64;

/// Tile rows, tile columns and tiles per sample of an `oh × ow` output.
fn tiling(oh: usize, ow: usize) -> (usize, usize, usize) {
    let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
    (th, tw, th * tw)
}

/// Samples per chunk and the batch split of `n` samples with `tiles` tiles each.
struct Plan {
    per_task: usize,
    per_chunk: usize,
    gemm_threads: usize,
}

impl Plan {
    fn new(n: usize, tiles: usize, threads: usize) -> Self {
        let per_task = items_per_task(n, threads);
        Plan {
            per_task,
            per_chunk: TARGET_TILES.div_ceil(tiles.max(1)).clamp(1, per_task),
            gemm_threads: if per_task >= n { threads } else { 1 },
        }
    }

    fn chunks(&self, count: usize) -> impl Iterator<Item = (usize, usize)> + use<> {
        let g = self.per_chunk;
        (0..count).step_by(g).map(move |s| (s, g.min(count - s)))
    }
}

/// `L` tiles' values side by side: the transforms work on `L` tiles at once (8: one AVX
/// register), and on 1 for a row's last tiles. Plain loops, so that they vectorise wherever
/// they are inlined (the AVX2 copies of the transforms included).
type Lanes<const L: usize> = [f32; L];

#[inline(always)]
fn add<const L: usize>(a: Lanes<L>, b: Lanes<L>) -> Lanes<L> {
    let mut r = a;
    for i in 0..L {
        r[i] += b[i];
    }
    r
}

#[inline(always)]
fn sub<const L: usize>(a: Lanes<L>, b: Lanes<L>) -> Lanes<L> {
    let mut r = a;
    for i in 0..L {
        r[i] -= b[i];
    }
    r
}

#[inline(always)]
fn load<const L: usize>(values: &[f32], at: usize) -> Lanes<L> {
    let mut r = [0f32; L];
    r.copy_from_slice(&values[at..at + L]);
    r
}

/// `Bᵀ` applied to 4 values (a row or a column of a patch).
#[inline(always)]
fn bt<const L: usize>(r: [Lanes<L>; 4]) -> [Lanes<L>; 4] {
    [
        sub(r[0], r[2]),
        add(r[1], r[2]),
        sub(r[2], r[1]),
        sub(r[1], r[3]),
    ]
}

/// `Aᵀ` applied to 4 values.
#[inline(always)]
fn at<const L: usize>(r: [Lanes<L>; 4]) -> [Lanes<L>; 2] {
    [add(add(r[0], r[1]), r[2]), sub(sub(r[1], r[2]), r[3])]
}

/// `A` applied to 2 values (the adjoint of [`at`]).
#[inline(always)]
fn a<const L: usize>(x: Lanes<L>, y: Lanes<L>) -> [Lanes<L>; 4] {
    [x, add(x, y), sub(x, y), sub([0.0; L], y)]
}

/// Splits a row into its even and odd columns, each `len` long, zeros past the row's end;
/// `shift` zeros go before the row's first value (the padding).
fn deinterleave(row: &[f32], shift: usize, even: &mut [f32], odd: &mut [f32]) {
    even.fill(0.0);
    odd.fill(0.0);
    // Value k of the row lands at padded column k + shift: pairs (k, k + 1) from an even k go
    // to (even, odd) at (k + shift) / 2 when the shift is even, else to (odd, even).
    let (first, second, at0, at1) = if shift % 2 == 0 {
        (&mut *even, &mut *odd, shift / 2, shift / 2)
    } else {
        (&mut *odd, &mut *even, shift / 2, shift / 2 + 1)
    };
    let pairs = row.len() / 2;
    let (first, second) = (&mut first[at0..][..pairs], &mut second[at1..][..pairs]);
    for ((pair, f), s) in row
        .chunks_exact(2)
        .zip(first.iter_mut())
        .zip(second.iter_mut())
    {
        *f = pair[0];
        *s = pair[1];
    }
    if row.len() % 2 == 1 {
        let k = row.len() - 1 + shift;
        let dst = if k % 2 == 0 { even } else { odd };
        dst[k / 2] = row[row.len() - 1];
    }
}

/// `G g Gᵀ` of a 3×3 filter.
fn filter_transform(g: &[f32]) -> [f32; 16] {
    let expand = |a: f32, b: f32, c: f32| [a, (a + b + c) * 0.5, (a - b + c) * 0.5, c];
    let cols: [[f32; 4]; 3] = std::array::from_fn(|j| expand(g[j], g[3 + j], g[6 + j]));
    let mut u = [0f32; 16];
    for i in 0..4 {
        u[i * 4..i * 4 + 4].copy_from_slice(&expand(cols[0][i], cols[1][i], cols[2][i]));
    }
    u
}

/// `Gᵀ s G`: the 3×3 filter gradient of a transformed one (the adjoint of
/// [`filter_transform`]).
fn filter_gradient(s: [f32; 16]) -> [f32; 9] {
    let fold = |r: [f32; 4]| {
        [
            r[0] + (r[1] + r[2]) * 0.5,
            (r[1] - r[2]) * 0.5,
            (r[1] + r[2]) * 0.5 + r[3],
        ]
    };
    let t: [[f32; 3]; 4] =
        std::array::from_fn(|a| fold([s[a * 4], s[a * 4 + 1], s[a * 4 + 2], s[a * 4 + 3]]));
    let mut w = [0f32; 9];
    for j in 0..3 {
        let col = fold([t[0][j], t[1][j], t[2][j], t[3][j]]);
        for i in 0..3 {
            w[i * 3 + j] = col[i];
        }
    }
    w
}

/// `U` of filters `w` `[O, C, 3, 3]`, as `[O·C][16]` (each filter's 16 values together, so that
/// the pool's threads write contiguous pieces); [`u_matrix`] views one transform position.
fn transformed_filters(w: &[f32], o: usize, c: usize, threads: usize) -> Scratch {
    let mut u = Scratch::take(16 * o * c);
    map_pieces(
        &mut u,
        16,
        items_per_task(o * c, threads),
        |first, piece| {
            for (i, dst) in piece.chunks_exact_mut(16).enumerate() {
                dst.copy_from_slice(&filter_transform(&w[(first + i) * 9..][..9]));
            }
        },
    );
    u
}

/// `U[ξ]` `[O, C]` of [`transformed_filters`].
fn u_matrix(u: &[f32], xi: usize, o: usize, c: usize) -> Mat<'_> {
    Mat::strided(&u[xi..], o, c, 16 * c, 16)
}

/// The tiles of a tile row of `tw` in blocks of `L`: `(first tile, L)` for blocks of 8, then of 1.
fn blocks(tw: usize) -> impl Iterator<Item = (usize, usize)> {
    let full = tw / 8 * 8;
    (0..full)
        .step_by(8)
        .map(|j| (j, 8))
        .chain((full..tw).map(|j| (j, 1)))
}

/// Column `k` of `d B` for the 4 rows of the `L` tiles from `j` (see [`input_tiles`]). Plain
/// functions rather than closures or `array::from_fn`, which are not inlined into the AVX2 copy.
#[inline(always)]
fn input_column<const L: usize>(
    (even, odd): (&[f32], &[f32]),
    rs: [usize; 4],
    j: usize,
    k: usize,
) -> [Lanes<L>; 4] {
    let e = (even, odd);
    [
        input_entry(e, rs[0] + j, k),
        input_entry(e, rs[1] + j, k),
        input_entry(e, rs[2] + j, k),
        input_entry(e, rs[3] + j, k),
    ]
}

/// Column `k` of `d B` for one row of `d`, which starts at `at` in `even`/`odd`.
#[inline(always)]
fn input_entry<const L: usize>((even, odd): (&[f32], &[f32]), at: usize, k: usize) -> Lanes<L> {
    match k {
        0 => sub(load(even, at), load(even, at + 1)),
        1 => add(load(odd, at), load(even, at + 1)),
        2 => sub(load(even, at + 1), load(odd, at)),
        _ => sub(load(odd, at), load(odd, at + 1)),
    }
}

/// `Aᵀ` of row `r` of the transformed tiles in `m` (see [`output_tiles`]).
#[inline(always)]
fn output_row<const L: usize>(m: &[f32], (col, stride): (usize, usize), r: usize) -> [Lanes<L>; 2] {
    let base = r * 4 * stride + col;
    at([
        load(m, base),
        load(m, base + stride),
        load(m, base + 2 * stride),
        load(m, base + 3 * stride),
    ])
}

/// `V = Bᵀ d B` of the `L` tiles from `j` of a tile row whose 4 padded input rows start at
/// `rs` in `even`/`odd`, stored at column `col` of each transform position's row (`stride`
/// apart). One column of `d B` at a time, to keep the values in registers.
#[inline(always)]
fn input_tiles<const L: usize>(
    (even, odd): (&[f32], &[f32]),
    rs: [usize; 4],
    j: usize,
    v: &mut [f32],
    (col, stride): (usize, usize),
) {
    for k in 0..4 {
        for (i, lanes) in bt(input_column::<L>((even, odd), rs, j, k))
            .iter()
            .enumerate()
        {
            v[(i * 4 + k) * stride + col..][..L].copy_from_slice(lanes);
        }
    }
}

/// The 2×2 outputs `Aᵀ m A` (+ `b`) of the `L` tiles from `j` of tile row `ty`, read at column
/// `col` of each transform position's row of `m` (`stride` apart), clipped to the `oh × ow`
/// plane.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn output_tiles<const L: usize>(
    m: &[f32],
    (col, stride): (usize, usize),
    b: f32,
    ty: usize,
    j: usize,
    (oh, ow): (usize, usize),
    plane: &mut [f32],
) {
    let pos = (col, stride);
    let rows: [[Lanes<L>; 2]; 4] = [
        output_row(m, pos, 0),
        output_row(m, pos, 1),
        output_row(m, pos, 2),
        output_row(m, pos, 3),
    ];
    let left = at([rows[0][0], rows[1][0], rows[2][0], rows[3][0]]);
    let right = at([rows[0][1], rows[1][1], rows[2][1], rows[3][1]]);
    for i in 0..2 {
        let yy = 2 * ty + i;
        if yy >= oh {
            break;
        }
        let mut pairs = [[0f32; 2]; L];
        for t in 0..L {
            pairs[t] = [left[i][t] + b, right[i][t] + b];
        }
        let x0 = 2 * j;
        let n = (2 * L).min(ow - x0);
        plane[yy * ow + x0..][..n].copy_from_slice(&pairs.as_flattened()[..n]);
    }
}

/// `Ê = A e Aᵀ` of the `L` tiles from `j` of a tile row whose two output-gradient rows are in
/// `r` as even, odd, even, odd columns (`tw` each), stored like [`input_tiles`].
#[inline(always)]
fn grad_tiles<const L: usize>(
    r: &[f32],
    tw: usize,
    j: usize,
    e: &mut [f32],
    (col, stride): (usize, usize),
) {
    let top: [Lanes<L>; 4] = a(load(r, j), load(r, tw + j));
    let bottom: [Lanes<L>; 4] = a(load(r, 2 * tw + j), load(r, 3 * tw + j));
    for k in 0..4 {
        for (i, lanes) in a(top[k], bottom[k]).iter().enumerate() {
            e[(i * 4 + k) * stride + col..][..L].copy_from_slice(lanes);
        }
    }
}

/// Writes `V [16][C][T]` for the `g` samples `x` (`[g, C, H, W]`) of a chunk of `T = g · tiles`
/// tiles, the input zero-padded by `p`. `rows` is a scratch buffer.
#[inline(always)]
fn transform_inputs_body(
    x: &[f32],
    (g, c, h, w): (usize, usize, usize, usize),
    p: usize,
    (th, tw): (usize, usize),
    rows: &mut Vec<f32>,
    v: &mut [f32],
) {
    let tiles = th * tw;
    let t_all = g * tiles;
    // Each padded row as its even and odd columns (tw + 1 of each).
    let (prows, half) = (2 * th + 2, tw + 1);
    rows.resize(2 * prows * half, 0.0);
    for s in 0..g {
        for ci in 0..c {
            let plane = &x[(s * c + ci) * h * w..][..h * w];
            let (even, odd) = rows.split_at_mut(prows * half);
            for (pr, (e, o)) in even
                .chunks_exact_mut(half)
                .zip(odd.chunks_exact_mut(half))
                .enumerate()
            {
                let row = pr
                    .checked_sub(p)
                    .filter(|y| *y < h)
                    .map_or(&[][..], |y| &plane[y * w..][..w]);
                deinterleave(row, p, e, o);
            }
            let (even, odd) = (&*even, &*odd);
            for ty in 0..th {
                let col0 = s * tiles + ty * tw;
                let rs: [usize; 4] = std::array::from_fn(|r| (2 * ty + r) * half);
                let at = (ci * t_all + col0, c * t_all);
                for (j, lanes) in blocks(tw) {
                    let at = (at.0 + j, at.1);
                    if lanes == 8 {
                        input_tiles::<8>((even, odd), rs, j, v, at);
                    } else {
                        input_tiles::<1>((even, odd), rs, j, v, at);
                    }
                }
            }
        }
    }
}

/// Writes the outputs `[g, O, OH, OW]` (+ `bias`) of `M [16][O][T]`.
#[inline(always)]
fn transform_outputs_body(
    m: &[f32],
    (g, o, oh, ow): (usize, usize, usize, usize),
    (th, tw): (usize, usize),
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let tiles = th * tw;
    let t_all = g * tiles;
    for s in 0..g {
        for oc in 0..o {
            let b = bias.map_or(0.0, |b| b[oc]);
            let plane = &mut y[(s * o + oc) * oh * ow..][..oh * ow];
            for ty in 0..th {
                let col0 = s * tiles + ty * tw;
                for (j, lanes) in blocks(tw) {
                    let at = (oc * t_all + col0 + j, o * t_all);
                    if lanes == 8 {
                        output_tiles::<8>(m, at, b, ty, j, (oh, ow), plane);
                    } else {
                        output_tiles::<1>(m, at, b, ty, j, (oh, ow), plane);
                    }
                }
            }
        }
    }
}

/// Writes `Ê [16][O][T]` for the output gradients `dy` (`[g, O, OH, OW]`) of a chunk. `rows` is
/// a scratch buffer.
#[inline(always)]
fn transform_grads_body(
    dy: &[f32],
    (g, o, oh, ow): (usize, usize, usize, usize),
    (th, tw): (usize, usize),
    rows: &mut Vec<f32>,
    e: &mut [f32],
) {
    let tiles = th * tw;
    let t_all = g * tiles;
    rows.resize(4 * tw, 0.0);
    for s in 0..g {
        for oc in 0..o {
            let plane = &dy[(s * o + oc) * oh * ow..][..oh * ow];
            for ty in 0..th {
                // The tile row's two output rows as even and odd columns.
                let (top, bottom) = rows.split_at_mut(2 * tw);
                for (i, half) in [top, bottom].into_iter().enumerate() {
                    let yy = 2 * ty + i;
                    let row = if yy < oh {
                        &plane[yy * ow..][..ow]
                    } else {
                        &[][..]
                    };
                    let (even, odd) = half.split_at_mut(tw);
                    deinterleave(row, 0, even, odd);
                }
                let col0 = s * tiles + ty * tw;
                for (j, lanes) in blocks(tw) {
                    let at = (oc * t_all + col0 + j, o * t_all);
                    if lanes == 8 {
                        grad_tiles::<8>(rows, tw, j, e, at);
                    } else {
                        grad_tiles::<1>(rows, tw, j, e, at);
                    }
                }
            }
        }
    }
}

/// Defines `$name`, which runs `$body` compiled for AVX2 where the CPU has it (the crate is
/// built for baseline x86-64, where 8 lanes take two SSE registers), else as built.
macro_rules! with_avx2 {
    ($(#[$doc:meta])* fn $name:ident / $avx:ident => $body:ident ($($arg:ident: $ty:ty),* $(,)?)) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, the only feature `$avx` is compiled for.
                return unsafe { $avx($($arg),*) };
            }
            $body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx($($arg: $ty),*) {
            $body($($arg),*)
        }
    };
}

with_avx2! {
    /// Writes `V [16][C][T]` for the `g` samples `x` (`[g, C, H, W]`) of a chunk of
    /// `T = g · tiles` tiles, the input zero-padded by `p`. `rows` is a scratch buffer.
    fn transform_inputs / transform_inputs_avx2 => transform_inputs_body(
        x: &[f32],
        dims: (usize, usize, usize, usize),
        p: usize,
        tiling: (usize, usize),
        rows: &mut Vec<f32>,
        v: &mut [f32],
    )
}

with_avx2! {
    /// Writes the outputs `[g, O, OH, OW]` (+ `bias`) of `M [16][O][T]`.
    fn transform_outputs / transform_outputs_avx2 => transform_outputs_body(
        m: &[f32],
        dims: (usize, usize, usize, usize),
        tiling: (usize, usize),
        bias: Option<&[f32]>,
        y: &mut [f32],
    )
}

with_avx2! {
    /// Writes `Ê [16][O][T]` for the output gradients `dy` (`[g, O, OH, OW]`) of a chunk. `rows`
    /// is a scratch buffer.
    fn transform_grads / transform_grads_avx2 => transform_grads_body(
        dy: &[f32],
        dims: (usize, usize, usize, usize),
        tiling: (usize, usize),
        rows: &mut Vec<f32>,
        e: &mut [f32],
    )
}

/// `y = conv(x, w) + b` for a convolution that [`applies`]; returns `[N, O, OH, OW]`.
pub fn forward(s: &ConvShape, x: &[f32], w: &[f32], b: Option<&[f32]>, threads: usize) -> Vec<f32> {
    let u = transformed_filters(w, s.o, s.c, threads);
    forward_with(s, x, &u, b, threads)
}

fn forward_with(
    s: &ConvShape,
    x: &[f32],
    u: &[f32],
    b: Option<&[f32]>,
    threads: usize,
) -> Vec<f32> {
    let (c, o, oh, ow) = (s.c, s.o, s.oh, s.ow);
    let (th, tw, tiles) = tiling(oh, ow);
    let plan = Plan::new(s.n, tiles, threads);
    let (in_plane, out_plane) = (c * s.h * s.w, o * oh * ow);
    let (y, _) = written_pieces(s.n * out_plane, out_plane, plan.per_task, |first, out| {
        let count = out.len() / out_plane;
        let (mut v, mut m, mut pad) = (Scratch::take(0), Scratch::take(0), Vec::new());
        for (c0, g) in plan.chunks(count) {
            let t_all = g * tiles;
            if v.len() != 16 * c * t_all {
                v = Scratch::take(16 * c * t_all);
                m = Scratch::take(16 * o * t_all);
            }
            let xs = &x[(first + c0) * in_plane..][..g * in_plane];
            transform_inputs(
                xs,
                (g, c, s.h, s.w),
                s.unfold.padding,
                (th, tw),
                &mut pad,
                &mut v,
            );
            for xi in 0..16 {
                gemm(
                    &mut m[xi * o * t_all..][..o * t_all],
                    t_all,
                    false,
                    u_matrix(u, xi, o, c),
                    Mat::row_major(&v[xi * c * t_all..][..c * t_all], c, t_all),
                    plan.gemm_threads,
                );
            }
            let ys = &mut out[c0 * out_plane..][..g * out_plane];
            transform_outputs(&m, (g, o, oh, ow), (th, tw), b, ys);
        }
    });
    y
}

/// Gradients of [`forward`]: `(dx, dw, db)` for the output gradient `dy` `[N, O, OH, OW]`, as
/// [`super::conv::backward`].
pub fn backward(
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    want_dx: bool,
    with_bias: bool,
    threads: usize,
) -> (Option<Vec<f32>>, Vec<f32>, Option<Vec<f32>>) {
    let (c, o, oh, ow) = (s.c, s.o, s.oh, s.ow);
    let dx = want_dx.then(|| {
        // dx = conv(dy, w') with w'[c][o] = w[o][c] turned by 180°, padded by 2 − p.
        let mut flipped = output_vec(w.len());
        for oc in 0..o {
            for ic in 0..c {
                let src = &w[(oc * c + ic) * 9..][..9];
                let dst = &mut flipped[(ic * o + oc) * 9..][..9];
                for (d, v) in dst.iter_mut().zip(src.iter().rev()) {
                    *d = *v;
                }
            }
        }
        let unfold = super::unfold::Unfold {
            k: 3,
            stride: 1,
            padding: 2 - s.unfold.padding,
        };
        let t = ConvShape::new((s.n, o, oh, ow), c, unfold).expect("the forward's own sizes");
        forward_with(
            &t,
            dy,
            &transformed_filters(&flipped, c, o, threads),
            None,
            threads,
        )
    });
    let (th, tw, tiles) = tiling(oh, ow);
    let plan = Plan::new(s.n, tiles, threads);
    let (in_plane, out_plane) = (c * s.h * s.w, o * oh * ow);
    let ranges = s.n.div_ceil(plan.per_task);
    let partials = map_range(ranges, threads, |r| {
        let first = r * plan.per_task;
        let count = plan.per_task.min(s.n - first);
        let (mut v, mut e, mut pad) = (Scratch::take(0), Scratch::take(0), Vec::new());
        // The first chunk's GEMMs write it, the others add.
        let mut sum = Scratch::take(16 * o * c);
        let mut db = vec![0f32; if with_bias { o } else { 0 }];
        for (i, (c0, g)) in plan.chunks(count).enumerate() {
            let (a, t_all) = (first + c0, g * tiles);
            if v.len() != 16 * c * t_all {
                v = Scratch::take(16 * c * t_all);
                e = Scratch::take(16 * o * t_all);
            }
            let dys = &dy[a * out_plane..][..g * out_plane];
            if with_bias {
                for (oc, d) in db.iter_mut().enumerate() {
                    for si in 0..g {
                        *d += dys[si * out_plane + oc * oh * ow..][..oh * ow]
                            .iter()
                            .sum::<f32>();
                    }
                }
            }
            // The tiles of dy and of the input patches they saw line up one to one.
            transform_inputs(
                &x[a * in_plane..][..g * in_plane],
                (g, c, s.h, s.w),
                s.unfold.padding,
                (th, tw),
                &mut pad,
                &mut v,
            );
            transform_grads(dys, (g, o, oh, ow), (th, tw), &mut pad, &mut e);
            for xi in 0..16 {
                gemm(
                    &mut sum[xi * o * c..][..o * c],
                    c,
                    i > 0,
                    Mat::row_major(&e[xi * o * t_all..][..o * t_all], o, t_all),
                    Mat::row_major(&v[xi * c * t_all..][..c * t_all], c, t_all).t(),
                    plan.gemm_threads,
                );
            }
        }
        (sum, db)
    });
    // dW = Gᵀ S G with S the ranges' partial sums added in range order, split over the pool.
    let mut dw = output_vec(o * c * 9);
    map_pieces(
        &mut dw,
        9,
        items_per_task(o * c, threads),
        |first, piece| {
            for (i, dst) in piece.chunks_exact_mut(9).enumerate() {
                let at = first + i;
                let mut st = [0f32; 16];
                for (xi, v) in st.iter_mut().enumerate() {
                    let mut parts = partials.iter().map(|(p, _)| p[xi * o * c + at]);
                    *v = parts.next().expect("at least one range");
                    for p in parts {
                        *v += p;
                    }
                }
                dst.copy_from_slice(&filter_gradient(st));
            }
        },
    );
    let mut parts = partials.iter().map(|(_, db)| db);
    let mut db = parts.next().expect("at least one range").clone();
    for pb in parts {
        for (a, b) in db.iter_mut().zip(pb) {
            *a += b;
        }
    }
    (dx, dw, with_bias.then_some(db))
}

#[cfg(test)]
mod tests {
    use super::super::conv::{self, tests::values};
    use super::super::unfold::Unfold;
    use super::*;

    /// Forward and every gradient equal im2col's (itself checked against the definition), bit
    /// for bit: on small integers every transform and sum is exact. Odd and even sizes, paddings
    /// 0–2, one chunk or many, one and three threads.
    #[test]
    fn forward_and_backward_equal_im2col() {
        // (n, c, h, w, o, padding)
        let cases = [
            (3, 2, 6, 7, 3, 1),
            (2, 3, 5, 5, 2, 0),
            (2, 2, 4, 5, 3, 2),
            (40, 2, 3, 4, 2, 1),
            (1, 4, 9, 8, 5, 1),
        ];
        for (n, c, h, w, o, padding) in cases {
            let unfold = Unfold {
                k: 3,
                stride: 1,
                padding,
            };
            let s = ConvShape::new((n, c, h, w), o, unfold).unwrap();
            let x = values(n * c * h * w, 1);
            let wt = values(o * c * 9, 2);
            let b = values(o, 3);
            let dy = values(n * o * s.l(), 4);
            for threads in [1, 3] {
                let what = format!("{s:?} threads {threads}");
                assert_eq!(
                    forward(&s, &x, &wt, Some(&b), threads),
                    conv::im2col_forward(&s, &x, &wt, Some(&b), threads),
                    "forward {what}"
                );
                assert_eq!(
                    backward(&s, &x, &wt, &dy, true, true, threads),
                    conv::im2col_backward(&s, &x, &wt, &dy, true, true, threads),
                    "backward {what}"
                );
                let (no_dx, dw, no_db) = backward(&s, &x, &wt, &dy, false, false, threads);
                assert!(no_dx.is_none() && no_db.is_none(), "{what}");
                assert_eq!(
                    dw,
                    conv::im2col_backward(&s, &x, &wt, &dy, false, false, threads).1
                );
            }
        }
    }

    /// On real-valued data (a ResNet-sized layer) the results agree with im2col's to f32
    /// rounding: within 1e-5 of the largest value of each result.
    #[test]
    fn real_values_agree_with_im2col_to_rounding() {
        let s = ConvShape::new(
            (2, 64, 8, 8),
            64,
            Unfold {
                k: 3,
                stride: 1,
                padding: 1,
            },
        )
        .unwrap();
        let real = |n: usize, seed: u64| -> Vec<f32> {
            let mut state = seed;
            (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect()
        };
        let (x, wt, dy) = (
            real(2 * 64 * 64, 1),
            real(64 * 64 * 9, 2),
            real(2 * 64 * 64, 3),
        );
        let close = |a: &[f32], b: &[f32], what: &str| {
            let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(worst <= 1e-5 * scale, "{what}: off by {worst} of {scale}");
        };
        close(
            &forward(&s, &x, &wt, None, 1),
            &conv::im2col_forward(&s, &x, &wt, None, 1),
            "y",
        );
        let (dx, dw, _) = backward(&s, &x, &wt, &dy, true, false, 1);
        let (dx2, dw2, _) = conv::im2col_backward(&s, &x, &wt, &dy, true, false, 1);
        close(&dx.unwrap(), &dx2.unwrap(), "dx");
        close(&dw, &dw2, "dw");
    }

    #[test]
    fn only_wide_3x3_stride_1_convolutions_apply() {
        let shape = |c, o, k, stride, padding| {
            ConvShape::new((2, c, 8, 8), o, Unfold { k, stride, padding }).unwrap()
        };
        assert!(applies(&shape(64, 64, 3, 1, 1)));
        assert!(applies(&shape(128, 256, 3, 1, 0)));
        assert!(
            !applies(&shape(32, 64, 3, 1, 0)),
            "the reference CNN's second layer"
        );
        let cnn_third = ConvShape::new(
            (2, 64, 5, 5),
            64,
            Unfold {
                k: 3,
                stride: 1,
                padding: 0,
            },
        );
        assert!(!applies(&cnn_third.unwrap()), "a 3x3 output");
        assert!(!applies(&shape(3, 64, 3, 1, 1)), "a first layer");
        assert!(!applies(&shape(64, 64, 3, 2, 1)), "stride 2");
        assert!(!applies(&shape(64, 64, 1, 1, 0)), "1x1");
        assert!(!applies(&shape(64, 64, 3, 1, 3)), "padding 3");
    }
}
