//! Mixed precision (`train.precision`): candle's own matrix products and the engine's custom
//! ops (the GPT's linear and attention here, the convolution in `conv`) round the same inputs under
//! [`candle_core::autocast`], so each op still equals its candle composition, value and
//! gradients, and differs from its f32 result by bf16's rounding, not by nothing.

use candle_core::{D, DType, Device, Tensor, Var};

use super::gpt::ops::{causal_attention, causal_mask, linear};
use super::testing::assert_same_with_grads;
use crate::test_util::tensor_diff;

pub(crate) fn var(shape: &[usize], seed: u64) -> Var {
    let n = shape.iter().product();
    let values = crate::test_util::uniform_values(n, seed, -1.0, 1.0);
    Var::from_tensor(&Tensor::from_vec(values, shape, &Device::Cpu).unwrap()).unwrap()
}

fn rounded(t: &Tensor, dtype: DType) -> Tensor {
    t.to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap()
}

#[test]
fn candle_matmul_multiplies_the_rounded_inputs_while_the_scope_lives() {
    let (a, b) = (var(&[9, 33], 1), var(&[33, 7], 2));
    let f32_product = a.matmul(&b).unwrap();
    for dtype in [DType::BF16, DType::F16] {
        let of_rounded = rounded(&a, dtype).matmul(&rounded(&b, dtype)).unwrap();
        let product = {
            let _scope = candle_core::autocast::scope(Some(dtype)).unwrap();
            a.matmul(&b).unwrap()
        };
        assert_eq!(tensor_diff(&product, &of_rounded), 0.0, "{dtype:?}");
        let gap = tensor_diff(&product, &f32_product);
        let bound = if dtype == DType::BF16 { 0.2 } else { 0.02 };
        assert!(gap > 0.0 && gap < bound, "{dtype:?}: {gap}");
        // The scope is gone: f32 again.
        assert_eq!(tensor_diff(&a.matmul(&b).unwrap(), &f32_product), 0.0);
    }
    assert!(candle_core::autocast::scope(Some(DType::F64)).is_err());
}

/// Views (a narrowed row block, a narrowed transposed matrix, a column slice) multiply as the
/// same views of the rounded tensors do: the autocast rounds what each layout reaches and keeps
/// its strides (so the GEMM sums in the same order).
#[test]
fn candle_matmul_of_views_rounds_what_they_view() {
    let (big, wide, cols) = (var(&[40, 33], 3), var(&[7, 40], 4), var(&[33, 50], 5));
    let views = |big: &Tensor, wide: &Tensor, cols: &Tensor| {
        (
            big.narrow(0, 17, 9).unwrap(),
            wide.t().unwrap().narrow(0, 3, 33).unwrap(),
            cols.narrow(1, 11, 7).unwrap(),
        )
    };
    let (a, b, c) = views(&big, &wide, &cols);
    let r = |t: &Var| rounded(t, DType::BF16);
    let (ra, rb, rc) = views(&r(&big), &r(&wide), &r(&cols));
    for ((x, y), (rx, ry)) in [((&a, &b), (&ra, &rb)), ((&a, &c), (&ra, &rc))] {
        let of_rounded = rx.matmul(ry).unwrap();
        let _scope = candle_core::autocast::scope(Some(DType::BF16)).unwrap();
        let product = x.matmul(y).unwrap();
        assert_eq!(tensor_diff(&product, &of_rounded), 0.0);
    }
}

/// Each op under bf16 against candle's composition under bf16 (the same rounded inputs), and
/// against itself in f32: bf16's rounding shows (more than 1e-3), and no more than it should.
pub(crate) fn rounds_like_candle(
    what: &str,
    inputs: &[&Var],
    ours: impl Fn() -> Tensor,
    reference: impl Fn() -> Tensor,
) {
    let f32_out = ours();
    let _bf16 = candle_core::autocast::scope(Some(DType::BF16)).unwrap();
    let out = ours();
    let tensors: Vec<&Tensor> = inputs.iter().map(|v| v.as_tensor()).collect();
    assert_same_with_grads(&out, &reference(), &tensors, 1e-4, what);
    let gap = tensor_diff(&out, &f32_out);
    assert!(
        gap > 1e-3 && gap < 0.1,
        "{what}: bf16 moved the output by {gap}"
    );
}

#[test]
fn the_gpt_linear_rounds_as_candle_does() {
    let (x, w, b) = (var(&[12, 40], 3), var(&[24, 40], 4), var(&[24], 5));
    rounds_like_candle(
        "linear",
        &[&x, &w, &b],
        || linear(&x, &w, Some(&b)).unwrap(),
        || {
            x.matmul(&w.t().unwrap())
                .unwrap()
                .broadcast_add(&b)
                .unwrap()
        },
    );
}

#[test]
fn attention_rounds_its_products_as_candle_does() {
    let (batch, t, heads, hd) = (2, 6, 2, 8);
    let qkv = var(&[batch * t, 3 * heads * hd], 9);
    let composed = || {
        let parts = qkv.reshape((batch, t, 3, heads, hd)).unwrap();
        let part = |i: usize| {
            parts
                .narrow(2, i, 1)
                .unwrap()
                .squeeze(2)
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (part(0), part(1), part(2));
        let mask = causal_mask(t, t, &Device::Cpu).unwrap();
        let att = (q.matmul(&k.t().unwrap()).unwrap() * (1.0 / (hd as f64).sqrt()))
            .unwrap()
            .broadcast_add(&mask)
            .unwrap();
        let att = candle_nn::ops::softmax(&att, D::Minus1).unwrap();
        att.matmul(&v)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((batch * t, heads * hd))
            .unwrap()
    };
    rounds_like_candle(
        "attention",
        &[&qkv],
        || causal_attention(&qkv, batch, heads).unwrap(),
        composed,
    );
}

/// The vectorised roundings give half's bits for every kind of value: ties, subnormals,
/// infinities, NaNs, and (fp16) values beyond half's range, which become infinite.
#[test]
fn the_fast_roundings_equal_halfs_conversions() {
    use super::kernels::Rounding;
    let mut values = crate::test_util::uniform_values(5000, 9, -3.0, 3.0);
    for (i, v) in values.iter_mut().enumerate().step_by(7) {
        *v *= [1e-40, 1e-8, 7e4, 1e38, 1.0][i % 5];
    }
    // Ties (bf16: the halfway bit set, the rest clear) and the special values.
    values.extend([
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.0,
        65504.0,
        65520.0,
        f32::MAX,
    ]);
    let same = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    };
    let bf16: Vec<f32> = values
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    let f16: Vec<f32> = values
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect();
    assert!(same(&Rounding::Bf16.rounded(&values), &bf16));
    // candle's autocast (users' candle models) rounds to the same bits.
    assert!(same(
        &candle_core::autocast::rounded(DType::BF16, &values),
        &bf16
    ));
    assert!(same(
        &candle_core::autocast::rounded(DType::F16, &values),
        &f16
    ));
    assert!(same(&Rounding::F16.rounded(&values), &f16));
    let mut in_place = values.clone();
    Rounding::Bf16.apply(&mut in_place);
    assert!(same(&in_place, &bf16));
    assert!(
        f16.contains(&f32::INFINITY),
        "65520 rounds to half's infinity"
    );
}
