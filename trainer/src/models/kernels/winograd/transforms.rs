//! The Winograd transforms: `Bᵀ d B` of input patches, `Aᵀ m A` of transformed outputs,
//! `A e Aᵀ` of output-gradient tiles, `G g Gᵀ` of filters and its adjoint, a tile row's tiles 8
//! at a time, and the passes over a batch chunk that write the transform positions' GEMM
//! operands.

use super::super::gemm::Mat;
use super::super::simd::widest_simd;
use super::super::tasks::{Scratch, items_per_task, map_pieces};

/// `L` tiles' values side by side: the transforms work on `L` tiles at once (8: one AVX
/// register), and on 1 for a row's last tiles. Plain loops, so that they vectorise wherever
/// they are inlined (the AVX2 and AVX-512 copies of the transforms included).
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
#[inline(always)]
fn deinterleave(row: &[f32], shift: usize, even: &mut [f32], odd: &mut [f32]) {
    even.fill(0.0);
    odd.fill(0.0);
    // Value k of the row lands at padded column k + shift: pairs (k, k + 1) from an even k go
    // to (even, odd) at (k + shift) / 2 when the shift is even, else to (odd, even).
    let (first, second, at0, at1) = if shift.is_multiple_of(2) {
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
        let dst = if k.is_multiple_of(2) { even } else { odd };
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
pub(super) fn filter_gradient(s: [f32; 16]) -> [f32; 9] {
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
pub(super) fn transformed_filters(w: &[f32], o: usize, c: usize, threads: usize) -> Scratch {
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
pub(super) fn u_matrix(u: &[f32], xi: usize, o: usize, c: usize) -> Mat<'_> {
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
/// functions rather than closures or `array::from_fn`, which are not inlined into the wider copies.
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

widest_simd! {
    /// Writes `V [16][C][T]` for the `g` samples `x` (`[g, C, H, W]`) of a chunk of `T = g · tiles`
    /// tiles, the input zero-padded by `p`. `rows` is a scratch buffer.
    pub(super) fn transform_inputs(
        x: &[f32],
        dims: (usize, usize, usize, usize),
        p: usize,
        tiling: (usize, usize),
        rows: &mut Vec<f32>,
        v: &mut [f32],
    ) {
        let ((g, c, h, w), (th, tw)) = (dims, tiling);
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
}

widest_simd! {
    /// Writes the outputs `[g, O, OH, OW]` (+ `bias`) of `M [16][O][T]`.
    pub(super) fn transform_outputs(
        m: &[f32],
        dims: (usize, usize, usize, usize),
        tiling: (usize, usize),
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) {
        let ((g, o, oh, ow), (th, tw)) = (dims, tiling);
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
}

widest_simd! {
    /// Writes `Ê [16][O][T]` for the output gradients `dy` (`[g, O, OH, OW]`) of a chunk. `rows` is
    /// a scratch buffer.
    pub(super) fn transform_grads(
        dy: &[f32],
        dims: (usize, usize, usize, usize),
        tiling: (usize, usize),
        rows: &mut Vec<f32>,
        e: &mut [f32],
    ) {
        let ((g, o, oh, ow), (th, tw)) = (dims, tiling);
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
}
