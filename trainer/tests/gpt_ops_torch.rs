//! The gpt model's fused operations (`ddp_trainer::models::gpt::ops`) against PyTorch's:
//! `fixtures/gpt/ops.safetensors` holds each op's inputs, an output gradient, and PyTorch's
//! output and input gradients, written by `fixtures/gpt/make_op_fixtures.py`. Each op here runs
//! as the model runs it (one candle custom op on CPU) and its backward gives the gradients of
//! `(y · dy).sum()` (the cross-entropy: of the loss).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use ddp_trainer::models::gpt::ops;
use ddp_trainer::test_util::tensor_diff;

/// Largest absolute difference allowed (the values and gradients are of order 1).
const TOL: f32 = 1e-5;

fn fixture() -> HashMap<String, Tensor> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt/ops.safetensors");
    candle_core::safetensors::load(&path, &Device::Cpu).expect("the fixture loads")
}

/// The fixture's tensors of one op.
struct Op {
    fx: HashMap<String, Tensor>,
    name: &'static str,
}

impl Op {
    fn new(name: &'static str) -> Op {
        Op {
            fx: fixture(),
            name,
        }
    }

    fn get(&self, key: &str) -> Tensor {
        let k = format!("{}.{key}", self.name);
        self.fx.get(&k).unwrap_or_else(|| panic!("no {k}")).clone()
    }

    fn var(&self, key: &str) -> Var {
        Var::from_tensor(&self.get(key)).unwrap()
    }

    fn ids(&self, key: &str) -> Tensor {
        self.get(key).to_dtype(DType::U32).unwrap()
    }

    /// Checks `y` against PyTorch's, then the gradient of every `(name, var)` of
    /// `(y · dy).sum()` against PyTorch's `d<name>`.
    fn check(&self, y: &Tensor, vars: &[(&str, &Var)]) {
        let want = self.get("y");
        assert_eq!(y.dims(), want.dims(), "{}: output shape", self.name);
        let d = tensor_diff(y, &want);
        println!("{}: output max abs diff {d:e}", self.name);
        assert!(d < TOL, "{}: output differs by {d}", self.name);
        let loss = (y * self.get("dy")).unwrap().sum_all().unwrap();
        self.check_grads(&loss, vars);
    }

    fn check_grads(&self, loss: &Tensor, vars: &[(&str, &Var)]) {
        let grads = loss.backward().unwrap();
        for (name, var) in vars {
            let got = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{}: no gradient for {name}", self.name));
            let d = tensor_diff(got, &self.get(&format!("d{name}")));
            println!("{}: d{name} max abs diff {d:e}", self.name);
            assert!(d < TOL, "{}: d{name} differs by {d}", self.name);
        }
    }
}

#[test]
fn linear_matches_pytorch() {
    let op = Op::new("linear");
    let (x, w, b) = (op.var("x"), op.var("w"), op.var("b"));
    let y = ops::linear(x.as_tensor(), w.as_tensor(), Some(b.as_tensor())).unwrap();
    op.check(&y, &[("x", &x), ("w", &w), ("b", &b)]);
}

#[test]
fn layer_norm_matches_pytorch() {
    let op = Op::new("layer_norm");
    let (x, w, b) = (op.var("x"), op.var("w"), op.var("b"));
    let y = ops::layer_norm(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-5).unwrap();
    op.check(&y, &[("x", &x), ("w", &w), ("b", &b)]);
}

#[test]
fn exact_gelu_matches_pytorch() {
    let op = Op::new("gelu");
    let x = op.var("x");
    let y = ops::gelu(x.as_tensor()).unwrap();
    op.check(&y, &[("x", &x)]);
}

#[test]
fn causal_attention_matches_scaled_dot_product_attention() {
    let op = Op::new("attention");
    let qkv = op.var("qkv");
    let y = ops::causal_attention(qkv.as_tensor(), 2, 4).unwrap();
    op.check(&y, &[("qkv", &qkv)]);
}

#[test]
fn embedding_matches_pytorch() {
    let op = Op::new("embed");
    let (wte, wpe) = (op.var("wte"), op.var("wpe"));
    let y = ops::embed(&op.ids("ids"), wte.as_tensor(), wpe.as_tensor(), 0).unwrap();
    op.check(&y, &[("wte", &wte), ("wpe", &wpe)]);
}

#[test]
fn cross_entropy_matches_pytorch() {
    let op = Op::new("cross_entropy");
    let logits = op.var("logits");
    let loss = ops::cross_entropy(logits.as_tensor(), &op.ids("targets")).unwrap();
    let d = tensor_diff(&loss, &op.get("loss"));
    println!("cross_entropy: loss abs diff {d:e}");
    assert!(d < TOL, "cross_entropy: loss differs by {d}");
    op.check_grads(&loss, &[("logits", &logits)]);
}

#[test]
fn bad_shapes_and_ids_are_refused() {
    let dev = Device::Cpu;
    let qkv = Tensor::zeros((10, 12), DType::F32, &dev).unwrap();
    let e = ops::causal_attention(&qkv, 3, 2).unwrap_err().to_string();
    assert!(e.contains("do not split into 3 sequences"), "{e}");
    let (wte, wpe) = (
        Tensor::zeros((5, 4), DType::F32, &dev).unwrap(),
        Tensor::zeros((3, 4), DType::F32, &dev).unwrap(),
    );
    let ids = Tensor::new(&[[1u32, 5]], &dev).unwrap();
    let e = ops::embed(&ids, &wte, &wpe, 0).unwrap_err().to_string();
    assert!(
        e.contains("token id 5 is outside the vocabulary of 5"),
        "{e}"
    );
    let ids = Tensor::new(&[[1u32, 2]], &dev).unwrap();
    let e = ops::embed(&ids, &wte, &wpe, 2).unwrap_err().to_string();
    assert!(e.contains("positions 2..4 of 3"), "{e}");
    let logits = Tensor::zeros((2, 3), DType::F32, &dev).unwrap();
    let e = ops::cross_entropy(&logits, &Tensor::new(&[0u32, 3], &dev).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("target 3 of 3 classes"), "{e}");
}
