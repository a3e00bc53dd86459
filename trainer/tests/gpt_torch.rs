//! The `gpt` model against PyTorch: `fixtures/gpt/tiny.safetensors` holds a tiny GPT's weights
//! (PyTorch's state dict, both tied names), input ids, logits, loss and every parameter's
//! gradient, written by `fixtures/gpt/make_fixtures.py` with the module of the PyTorch benchmark.
//! And a trained run's `model.safetensors` loads into that module (`examples/pytorch/load_gpt.py`,
//! `load_state_dict(strict=True)`), which computes the run's validation loss; that test needs a
//! Python with torch and safetensors (`DDP_TORCH_PYTHON`), which CI has not, so it is ignored
//! unless asked for:
//! `DDP_TORCH_PYTHON=/path/to/venv/bin/python cargo test -p ddp-trainer --test gpt_torch -- --ignored`.

mod common;

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

#[test]
#[ignore = "needs DDP_TORCH_PYTHON (torch, safetensors)"]
fn pytorch_loads_a_trained_gpt_strictly_and_computes_its_val_loss() {
    let Some(python) = std::env::var_os("DDP_TORCH_PYTHON") else {
        panic!(
            "DDP_TORCH_PYTHON is not set: name a Python with torch and safetensors, e.g. \
             DDP_TORCH_PYTHON=/path/to/venv/bin/python cargo test -p ddp-trainer --test gpt_torch \
             -- --ignored"
        );
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = root.join("examples/data/shakespeare/input.txt");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"lm\"\n[model]\nname = \"gpt\"\nlayers = 2\nheads = 2\nembd = 32\nblock = 32\n[data]\nname = \"text\"\npath = \"{}\"\n[train]\nsteps = 30\nbatch_size = 8\noptimizer = \"adamw\"\nlr = 0.003\ngrad_clip = 1.0\n",
            text.display()
        ),
    )
    .unwrap();
    let out = dir.path().join("run");
    common::train_standalone(&spec, 2, &out, &[]);
    let ours = common::metrics(&out, 0)
        .into_iter()
        .rfind(|r| r.kind == ddp_trainer::metrics::MetricKind::Val)
        .expect("a val record")
        .loss;

    let o = std::process::Command::new(python)
        .arg(root.join("examples/pytorch/load_gpt.py"))
        .arg(&out)
        .arg("--text")
        .arg(&text)
        .args(["--heads", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "load_gpt.py: {}\n{stdout}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let theirs: f64 = stdout
        .strip_prefix("val loss ")
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"));
    println!("val loss: ddp {ours:.6}, PyTorch {theirs:.6}");
    assert!(
        (ours - theirs).abs() < 1e-3,
        "ddp's val loss {ours} against PyTorch's {theirs}"
    );
}
