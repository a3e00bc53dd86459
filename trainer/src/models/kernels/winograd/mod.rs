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
//!
//! Layout:
//! - `mod.rs`: which convolutions apply, the forward pass and both gradients over batch chunks.
//! - `transforms.rs`: the transforms of patches, tiles and filters, and the passes that write
//!   a chunk's GEMM operands (compiled for AVX2 and AVX-512 too, `simd::widest_simd!`).
//! - `tests.rs`: against im2col, exactly on small integers and to rounding on real values.

mod transforms;

use super::conv_shape::{ConvShape, add_bias_grads};
use super::gemm::{Mat, gemm};
use super::tasks::{
    BatchPlan, Scratch, items_per_task, map_pieces, map_range, output_vec, written_pieces,
};
use transforms::{
    filter_gradient, transform_grads, transform_inputs, transform_outputs, transformed_filters,
    u_matrix,
};

/// Tiles of a batch chunk worth one set of 16 GEMMs.
pub const TARGET_TILES: usize = 256;

/// Whether [`forward`] and [`backward`] take this convolution: 3×3, stride 1, padding ≤ 2, at
/// least [`MIN_CHANNELS`] channels on both sides (where the GEMMs are the work and the transforms'
/// passes over the data pay off), and an output at least 4 high and [`min_width`] wide (a 3×3 one
/// would compute 16 outputs in its 2×2 tiles for 9). That is ResNet-18's 3×3 convolutions after
/// its stem (with AVX-512, those of its first two stages); the reference CNN's layers and every
/// first layer stay with im2col.
pub fn applies(s: &ConvShape) -> bool {
    let u = s.unfold;
    u.k == 3
        && u.stride == 1
        && u.padding <= 2
        && s.c >= MIN_CHANNELS
        && s.o >= MIN_CHANNELS
        && s.oh >= 4
        && s.ow >= min_width()
}

/// Narrowest output for Winograd. The transforms work on 8 tiles (16 output columns) of a tile
/// row at a time and on narrower rows one tile at a time. Where the GEMMs run at AVX-512's 16
/// lanes, the flops Winograd saves on such rows no longer pay for those scalar transforms
/// (ResNet-18, 1 thread: 1,049 ms per step with its 8×8 and 4×4 stages through Winograd, 880 ms
/// through im2col); at AVX2's 8 lanes they do, so every output from
/// 4×4 up takes it there.
pub fn min_width() -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return 16;
    }
    4
}

/// Fewest input and output channels of a convolution done by Winograd.
pub const MIN_CHANNELS: usize = 64;

/// Tile rows, tile columns and tiles per sample of an `oh × ow` output.
fn tiling(oh: usize, ow: usize) -> (usize, usize, usize) {
    let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
    (th, tw, th * tw)
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
    let plan = BatchPlan::new(s.n, tiles, TARGET_TILES, threads);
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
        // dx = conv(dy, w') with w'[c][o] = w[o][c] turned by 180°, padded by 2 − p; the
        // input channels split over the pool.
        let (flipped, _) =
            written_pieces(w.len(), o * 9, items_per_task(c, threads), |first, out| {
                for (i, filters) in out.chunks_exact_mut(o * 9).enumerate() {
                    let ic = first + i;
                    for (oc, dst) in filters.chunks_exact_mut(9).enumerate() {
                        let src = &w[(oc * c + ic) * 9..][..9];
                        for (d, v) in dst.iter_mut().zip(src.iter().rev()) {
                            *d = *v;
                        }
                    }
                }
            });
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
    let plan = BatchPlan::new(s.n, tiles, TARGET_TILES, threads);
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
                add_bias_grads(&mut db, dys, oh * ow);
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
mod tests;
