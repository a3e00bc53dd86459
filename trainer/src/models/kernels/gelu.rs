//! The exact (erf) GELU over a slice and its gradient, vectorised ([`super::math::gelu`]) and
//! split over the pool in large contiguous pieces.

use super::math::{gelu, gelu_grad};
use super::simd::widest_simd;
use super::tasks::{items_per_task, written_pieces};

/// Values per parallel piece (small tensors stay on one thread).
const PIECE: usize = 1 << 15;

fn per_task(len: usize, threads: usize) -> usize {
    items_per_task(len.div_ceil(PIECE), threads) * PIECE
}

widest_simd! {
    fn forward_into(x: &[f32], out: &mut [f32]) {
        for (o, v) in out.iter_mut().zip(x) {
            *o = gelu(*v);
        }
    }
}

widest_simd! {
    fn backward_into(x: &[f32], g: &[f32], out: &mut [f32]) {
        for ((o, v), g) in out.iter_mut().zip(x).zip(g) {
            *o = gelu_grad(*v, *g);
        }
    }
}

/// `gelu(x)`.
pub fn forward(x: &[f32], threads: usize) -> Vec<f32> {
    written_pieces(x.len(), 1, per_task(x.len(), threads), |first, out| {
        forward_into(&x[first..], out)
    })
    .0
}

/// The input gradient for the output gradient `g`.
pub fn backward(x: &[f32], g: &[f32], threads: usize) -> Vec<f32> {
    assert_eq!(x.len(), g.len(), "gelu: input and gradient lengths");
    written_pieces(x.len(), 1, per_task(x.len(), threads), |first, out| {
        backward_into(&x[first..], &g[first..], out)
    })
    .0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_piece_is_the_scalar_function() {
        let x: Vec<f32> = (0..100_003)
            .map(|i| (i as f32 - 50_000.0) / 7_000.0)
            .collect();
        let g: Vec<f32> = x.iter().map(|v| 1.0 - v).collect();
        for threads in [1, 3] {
            let y = forward(&x, threads);
            let d = backward(&x, &g, threads);
            for i in 0..x.len() {
                assert_eq!(y[i].to_bits(), gelu(x[i]).to_bits(), "at {i}");
                assert_eq!(d[i].to_bits(), gelu_grad(x[i], g[i]).to_bits(), "at {i}");
            }
        }
    }
}
