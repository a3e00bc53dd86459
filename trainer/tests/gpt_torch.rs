//! The `gpt` model against PyTorch: `fixtures/gpt/tiny.safetensors` holds a tiny GPT's weights
//! (PyTorch's state dict, both tied names), input ids, logits, loss and every parameter's
//! gradient, written by `fixtures/gpt/make_fixtures.py` with the module of the PyTorch benchmark.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use ddp_trainer::models::gpt::{GptConfig, LM_HEAD, WTE, gpt, lm_loss, tied_state, untie_state};
use ddp_trainer::test_util::tensor_diff;

const TOL: f32 = 1e-5;

fn fixture() -> HashMap<String, Tensor> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt/tiny.safetensors");
    candle_core::safetensors::load(&path, &Device::Cpu).expect("the fixture loads")
}

#[test]
fn logits_loss_and_gradients_match_pytorch() {
    let fx = fixture();
    let cfg = GptConfig::new(11, 8, 2, 2, 16);
    let varmap = VarMap::new();
    let model = gpt(
        &cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    let params: Vec<(String, Var)> = {
        let data = varmap.data().lock().unwrap();
        let mut p: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        p.sort_by(|a, b| a.0.cmp(&b.0));
        p
    };

    // PyTorch's state dict (without the reference outputs) loads by name, strictly.
    let state: HashMap<String, Tensor> = fx
        .iter()
        .filter(|(k, _)| k.starts_with("transformer.") || *k == LM_HEAD)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(state.contains_key(LM_HEAD) && state.contains_key(WTE));
    let state = untie_state(state, "tiny.safetensors").unwrap();
    let mut names: Vec<&String> = state.keys().collect();
    names.sort();
    assert_eq!(names, params.iter().map(|(k, _)| k).collect::<Vec<_>>());
    for (name, var) in &params {
        assert_eq!(state[name].dims(), var.dims(), "{name}");
        var.set(&state[name]).unwrap();
    }
    // Written back with both tied names: the same keys PyTorch's state dict has.
    let ours = tied_state(
        params
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect(),
    );
    let mut torch_keys: Vec<&String> = fx
        .keys()
        .filter(|k| k.starts_with("transformer.") || *k == LM_HEAD)
        .collect();
    torch_keys.sort();
    assert_eq!(ours.iter().map(|(k, _)| k).collect::<Vec<_>>(), torch_keys);

    let ids = fx["ids"].to_dtype(DType::U32).unwrap();
    let targets = fx["targets"].to_dtype(DType::U32).unwrap();
    let logits = model.forward(&ids, true).unwrap();
    let d = tensor_diff(&logits, &fx["logits"]);
    println!("logits: max abs diff {d:e}");
    assert!(d < TOL, "logits differ by {d}");

    let loss = lm_loss(&logits, &targets).unwrap();
    let d = tensor_diff(&loss, &fx["loss"]);
    println!("loss {}: abs diff {d:e}", loss.to_scalar::<f32>().unwrap());
    assert!(d < TOL, "loss differs by {d}");

    let grads = loss.backward().unwrap();
    let mut worst = (0f32, String::new());
    for (name, var) in &params {
        let want = &fx[&format!("grad.{name}")];
        let got = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        let d = tensor_diff(got, want);
        assert!(d < TOL, "gradient of {name} differs by {d}");
        if d >= worst.0 {
            worst = (d, name.clone());
        }
    }
    println!("gradients: max abs diff {:e} ({})", worst.0, worst.1);
}

#[test]
fn parameter_count_of_the_baby_gpt_is_pytorchs() {
    let torch: i64 = fixture()["baby_params"].to_scalar().unwrap();
    assert_eq!(GptConfig::baby(65).num_params() as i64, torch);
}
