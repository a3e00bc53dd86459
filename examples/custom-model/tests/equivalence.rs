//! DDP equivalence for models and data the engine does not know: 2 replicas × batch B end with
//! the same weights as 1 replica × batch 2B, for an image classifier (`custom-model`), a language
//! model (`custom-lm`) and a data set with its own loss and metrics (`custom-data`); and the
//! checkpoint's names are the `VarBuilder` paths (PyTorch's for the built-in MLP); and a
//! communication hook of one's own (`custom-hook`) ends with the weights of the built-in hook it
//! rewrites.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use ddp_trainer::test_util::max_abs_diff;

fn train(bin: &str, spec: &Path, nproc: usize, out: &Path, sets: &[&str]) {
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

/// Trains `bin` on `spec` with 2 replicas × `batch`, 1 × 2·`batch` and (to see the weights move)
/// 1 × 2·`batch` at a learning rate of 1e-12; the first two must agree within 1e-5, and the
/// checkpoint's names be `names`.
fn assert_two_of_b_equal_one_of_2b(
    bin: &str,
    dir: &Path,
    spec: &Path,
    batch: usize,
    names: &[&str],
) {
    let (half, full) = (
        format!("train.batch_size={batch}"),
        format!("train.batch_size={}", 2 * batch),
    );
    let (two, one, zero) = (dir.join("two"), dir.join("one"), dir.join("zero"));
    train(bin, spec, 2, &two, &[&half]);
    train(bin, spec, 1, &one, &[&full]);
    train(bin, spec, 1, &zero, &[&full, "train.lr=1e-12"]);
    let (a, b, z) = (
        load(&two.join("model.safetensors")),
        load(&one.join("model.safetensors")),
        load(&zero.join("model.safetensors")),
    );
    let mut found: Vec<&String> = a.keys().collect();
    found.sort();
    assert_eq!(found, names);
    let moved = max_abs_diff(&b, &z);
    assert!(moved > 1e-3, "training did not move the weights ({moved})");
    let diff = max_abs_diff(&a, &b);
    assert!(
        diff < 1e-5,
        "2×{batch} and 1×{} differ by {diff}",
        2 * batch
    );
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
    assert_two_of_b_equal_one_of_2b(
        env!("CARGO_BIN_EXE_custom-model"),
        dir.path(),
        &spec,
        8,
        &[
            "conv.bias",
            "conv.weight",
            "fc1.bias",
            "fc1.weight",
            "fc2.bias",
            "fc2.weight",
        ],
    );
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
    assert_two_of_b_equal_one_of_2b(
        env!("CARGO_BIN_EXE_custom-lm"),
        dir.path(),
        &spec,
        4,
        &[
            "fc.bias",
            "fc.weight",
            "head.bias",
            "head.weight",
            "wpe.weight",
            "wte.weight",
        ],
    );
}

#[test]
fn a_data_set_of_your_own_with_its_loss_of_two_replicas_of_16_equals_one_of_32() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"custom-data-eq\"\n[model]\nname = \"mlp\"\nhidden = [16]\n[data]\nname = \"custom\"\nval_fraction = 0.1\nlimit_train = 640\n[train]\nepochs = 1\nmax_steps = 8\noptimizer = \"adam\"\nlr = 0.01\nseed = 7\n[checkpoint]\nevery_epochs = 0\n",
    )
    .unwrap();
    assert_two_of_b_equal_one_of_2b(
        env!("CARGO_BIN_EXE_custom-data"),
        dir.path(),
        &spec,
        16,
        &[
            "linear_relu_stack.0.bias",
            "linear_relu_stack.0.weight",
            "linear_relu_stack.2.bias",
            "linear_relu_stack.2.weight",
        ],
    );
}

#[test]
fn a_comm_hook_of_ones_own_gives_the_weights_of_the_built_in_one_it_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/mnist-sample");
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"custom-hook\"\n[model]\nname = \"mlp\"\n[data]\nname = \"mnist\"\npath = \"{}\"\nval_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 1\nmax_steps = 6\nbatch_size = 16\noptimizer = \"sgd\"\nlr = 0.05\nseed = 7\n[ddp]\noverlap = true\nshared_memory = false\n[checkpoint]\nevery_epochs = 0\n",
            data.display()
        ),
    )
    .unwrap();
    let (hook, bf16, f32) = (
        dir.path().join("hook"),
        dir.path().join("bf16"),
        dir.path().join("f32"),
    );
    // custom-hook's Bf16Average; the built-in bf16 hook and plain f32 of an executable without one.
    train(env!("CARGO_BIN_EXE_custom-hook"), &spec, 2, &hook, &[]);
    let builtin = env!("CARGO_BIN_EXE_custom-model");
    train(builtin, &spec, 2, &bf16, &["ddp.compression=\"bf16\""]);
    train(builtin, &spec, 2, &f32, &[]);
    let weights = |d: &Path| load(&d.join("model.safetensors"));
    let (h, b, f) = (weights(&hook), weights(&bf16), weights(&f32));
    assert_eq!(
        max_abs_diff(&h, &b),
        0.0,
        "the hook and the built-in bf16 differ"
    );
    // The hook really ran: plain f32 gradients end elsewhere.
    assert!(max_abs_diff(&h, &f) > 0.0, "the hook's run is the f32 run");
    let log = std::fs::read_to_string(hook.join("logs/rank-0.log")).unwrap_or_default();
    assert!(
        log.contains("averaged by the registered communication hook \"custom\""),
        "rank 0's log names the hook:\n{log}"
    );

    // Beside a hook of one's own, a built-in compression is refused before training.
    let out = Command::new(env!("CARGO_BIN_EXE_custom-hook"))
        .arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(dir.path().join("refused"))
        .args(["--set", "ddp.compression=\"bf16\""])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ddp.compression"), "{stderr}");
}
