//! The built-in models sized from users' data load into PyTorch: each model is trained on a
//! tensors-format data set whose shape is not the tutorials' (3 channels of 22×26, 5 classes;
//! 12 flat features), then `examples/pytorch/load_classifier.py` builds the matching PyTorch
//! module from `examples/pytorch/classifiers.py`, loads `model.safetensors` with
//! `load_state_dict(strict=True)` and evaluates the test file, which must give ddp's own test
//! loss and accuracy; a bf16 run's weights evaluated under PyTorch's bf16 autocast give its test
//! figures within bf16's rounding of the outputs (PyTorch rounds them, ddp keeps them f32). Needs
//! a Python with torch, torchvision and safetensors
//! (`DDP_TORCH_PYTHON`), which CI has not, so it is ignored unless asked for:
//! `DDP_TORCH_PYTHON=/path/to/venv/bin/python cargo test -p ddp-trainer --test own_data_torch -- --ignored`.

mod common;

use std::path::Path;

use ddp_trainer::data::tensors::write::{Arr, safetensors};

/// `n` samples of `shape` (f32 in [0, 1)) with classes `0..classes`, deterministic.
fn part(n: usize, shape: &[usize], classes: i64, seed: u64) -> Vec<u8> {
    let d: usize = shape.iter().product();
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32) / (1u64 << 24) as f32
    };
    let y: Vec<i64> = (0..n as i64).map(|i| i % classes).collect();
    // Each class brightens its own band of values, so there is something to learn.
    let x: Vec<f32> = (0..n * d)
        .map(|k| {
            let (i, j) = (k / d, k % d);
            next() * 0.5
                + if j % classes as usize == i % classes as usize {
                    0.5
                } else {
                    0.0
                }
        })
        .collect();
    let mut dims = vec![n];
    dims.extend_from_slice(shape);
    safetensors(&[("x", &Arr::f32(&dims, &x)), ("y", &Arr::i64(&[n], &y))])
}

fn check(python: &std::ffi::OsStr, model: &str, shape: &[usize], extra: &str) {
    check_in(python, model, shape, extra, "f32");
}

/// [`check`] for a run trained (and tested) in `precision`: f32 exactly; bf16 within its
/// rounding of the outputs (loss within 0.01, one test sample of 60 at most on either side).
fn check_in(python: &std::ffi::OsStr, model: &str, shape: &[usize], extra: &str, precision: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("train.safetensors"), part(240, shape, 5, 1)).unwrap();
    std::fs::write(data.join("test.safetensors"), part(60, shape, 5, 2)).unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"torch-{model}\"\n[model]\nname = \"{model}\"\n{extra}[data]\nname = \"tensors\"\npath = \"data\"\nval_fraction = 0.0\n[train]\nepochs = 4\nbatch_size = 16\noptimizer = \"adam\"\nlr = 0.001\nprecision = \"{precision}\"\n[checkpoint]\nevery_epochs = 0\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("run");
    common::train_standalone(&spec, 2, &out, &[]);
    let ours = common::test_record(&out);
    let o = std::process::Command::new(python)
        .arg(root.join("examples/pytorch/load_classifier.py"))
        .arg(&out)
        .arg("--data")
        .arg(data.join("test.safetensors"))
        .arg("--spec")
        .arg(&spec)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{model}: load_classifier.py: {}\n{stdout}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let figure = |name: &str| -> f64 {
        stdout
            .split_whitespace()
            .skip_while(|w| *w != name)
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{model}: no {name} in {stdout}"))
    };
    let (loss, acc) = (figure("loss"), figure("accuracy"));
    println!(
        "{model}: test loss ddp {:.6} PyTorch {loss:.6}, accuracy {:?} / {acc}",
        ours.loss, ours.accuracy
    );
    let (loss_within, acc_within) = match precision {
        "f32" => (1e-3, 1e-6),
        _ => (1e-2, 1.0 / 60.0 + 1e-6),
    };
    assert!(
        (ours.loss - loss).abs() < loss_within,
        "{model} {precision}: {} vs {loss}",
        ours.loss
    );
    assert!(
        (ours.accuracy.unwrap() - acc).abs() < acc_within,
        "{model} {precision}: accuracy {:?} vs {acc}",
        ours.accuracy
    );
}

#[test]
#[ignore = "needs DDP_TORCH_PYTHON (torch, torchvision, safetensors)"]
fn pytorch_loads_models_sized_from_the_data_strictly() {
    let Some(python) = std::env::var_os("DDP_TORCH_PYTHON") else {
        panic!(
            "DDP_TORCH_PYTHON is not set: name a Python with torch, torchvision and safetensors, \
             e.g. DDP_TORCH_PYTHON=/path/to/venv/bin/python cargo test -p ddp-trainer --test \
             own_data_torch -- --ignored"
        );
    };
    check(&python, "mnist-cnn", &[3, 22, 26], "");
    check(&python, "convnet-bn", &[3, 22, 26], "");
    check(&python, "resnet18", &[1, 12, 12], "");
    check(&python, "mlp", &[12], "hidden = [32, 16]\n");
    check_in(&python, "mnist-cnn", &[3, 22, 26], "", "bf16");
    check_in(&python, "resnet18", &[1, 12, 12], "", "bf16");
}
