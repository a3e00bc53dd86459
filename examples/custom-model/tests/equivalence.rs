//! DDP equivalence for models the engine does not know: 2 replicas × batch B end with the same
//! weights as 1 replica × batch 2B, for an image classifier (`custom-model`) and a language model
//! (`custom-lm`); and the checkpoint's names are the `VarBuilder` paths.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use ddp_trainer::test_util::max_abs_diff;

fn train(spec: &Path, nproc: usize, out: &Path, sets: &[&str]) {
    train_with(env!("CARGO_BIN_EXE_custom-model"), spec, nproc, out, sets)
}

fn train_with(bin: &str, spec: &Path, nproc: usize, out: &Path, sets: &[&str]) {
    let mut c = Command::new(bin);
    c.arg(spec)
        .args(["--standalone", "--nproc", &nproc.to_string(), "--out"])
        .arg(out);
    for s in sets {
        c.args(["--set", s]);
    }
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "custom-model {nproc} replicas: {status}");
            return;
        }
        if start.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("custom-model with {nproc} replicas did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn load(path: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn two_replicas_of_8_equal_one_of_16() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/mnist-sample");
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"custom-eq\"\n[model]\nname = \"custom\"\n[data]\nname = \"mnist\"\npath = \"{}\"\nval_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 1\nmax_steps = 6\noptimizer = \"sgd\"\nlr = 0.01\nmomentum = 0.9\nseed = 7\n[checkpoint]\nevery_epochs = 0\n",
            data.display()
        ),
    )
    .unwrap();
    let (two, one, zero) = (
        dir.path().join("two"),
        dir.path().join("one"),
        dir.path().join("zero"),
    );
    train(&spec, 2, &two, &["train.batch_size=8"]);
    train(&spec, 1, &one, &["train.batch_size=16"]);
    train(&spec, 1, &zero, &["train.batch_size=16", "train.lr=1e-12"]);
    let (a, b, z) = (
        load(&two.join("model.safetensors")),
        load(&one.join("model.safetensors")),
        load(&zero.join("model.safetensors")),
    );
    let mut names: Vec<&String> = a.keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "conv.bias",
            "conv.weight",
            "fc1.bias",
            "fc1.weight",
            "fc2.bias",
            "fc2.weight"
        ]
    );
    let moved = max_abs_diff(&b, &z);
    assert!(moved > 1e-3, "training did not move the weights ({moved})");
    let diff = max_abs_diff(&a, &b);
    assert!(diff < 1e-5, "2×8 and 1×16 differ by {diff}");
}

#[test]
fn a_language_model_of_two_replicas_of_4_equals_one_of_8() {
    let dir = tempfile::tempdir().unwrap();
    let text = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/shakespeare/input.txt");
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"custom-lm-eq\"\n[model]\nname = \"custom\"\nblock = 32\n[data]\nname = \"text\"\npath = \"{}\"\n[train]\nsteps = 5\neval_every = 5\noptimizer = \"adamw\"\nlr = 0.003\ngrad_clip = 1.0\nseed = 7\n",
            text.display()
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_custom-lm");
    let (two, one) = (dir.path().join("two"), dir.path().join("one"));
    train_with(bin, &spec, 2, &two, &["train.batch_size=4"]);
    train_with(bin, &spec, 1, &one, &["train.batch_size=8"]);
    let zero = dir.path().join("zero");
    train_with(
        bin,
        &spec,
        1,
        &zero,
        &["train.batch_size=8", "train.lr=1e-12"],
    );
    let (a, b, z) = (
        load(&two.join("model.safetensors")),
        load(&one.join("model.safetensors")),
        load(&zero.join("model.safetensors")),
    );
    let mut names: Vec<&String> = a.keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "fc.bias",
            "fc.weight",
            "head.bias",
            "head.weight",
            "wpe.weight",
            "wte.weight"
        ]
    );
    let moved = max_abs_diff(&b, &z);
    assert!(moved > 1e-3, "training did not move the weights ({moved})");
    let diff = max_abs_diff(&a, &b);
    assert!(diff < 1e-5, "2×4 and 1×8 differ by {diff}");
}
