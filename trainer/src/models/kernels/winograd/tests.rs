use super::super::conv::{self, tests::values};
use super::super::unfold::Unfold;
use super::*;
use crate::data::rng::SplitMix64;

/// A 3×3 stride-1 convolution of `(n, c, h, w)` inputs into `o` channels, padded by `padding`.
fn conv3x3(input: (usize, usize, usize, usize), o: usize, padding: usize) -> ConvShape {
    let unfold = Unfold {
        k: 3,
        stride: 1,
        padding,
    };
    ConvShape::new(input, o, unfold).unwrap()
}

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
        let s = conv3x3((n, c, h, w), o, padding);
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
    let s = conv3x3((2, 64, 8, 8), 64, 1);
    // Uniform in [-1, 1).
    let real = |n: usize, seed: u64| -> Vec<f32> {
        let mut g = SplitMix64::new(seed);
        (0..n).map(|_| g.next_f64() as f32 * 2.0 - 1.0).collect()
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
        ConvShape::new((2, c, 18, 18), o, Unfold { k, stride, padding }).unwrap()
    };
    assert!(applies(&shape(64, 64, 3, 1, 1)));
    assert!(applies(&shape(128, 256, 3, 1, 0)));
    assert!(
        !applies(&shape(32, 64, 3, 1, 0)),
        "the reference CNN's second layer"
    );
    assert!(!applies(&conv3x3((2, 64, 5, 5), 64, 0)), "a 3x3 output");
    assert!(!applies(&shape(3, 64, 3, 1, 1)), "a first layer");
    assert!(!applies(&shape(64, 64, 3, 2, 1)), "stride 2");
    assert!(!applies(&shape(64, 64, 1, 1, 0)), "1x1");
    assert!(!applies(&shape(64, 64, 3, 1, 3)), "padding 3");
    let eight = conv3x3((2, 64, 8, 8), 64, 1);
    assert_eq!(applies(&eight), min_width() <= 8, "an 8x8 output");
    assert!(applies(&conv3x3((2, 64, 4, 16), 64, 1)), "a 4x16 output");
}
