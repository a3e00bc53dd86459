//! The device step (the DDP step that GPU replicas use: flat gradients all-reduced on the
//! device, tensor-op optimizer) run on the CPU with `DDP_DEVICE_STEP=1`: it must give the
//! combined-batch weights like the host step, match the host step, and resume exactly.

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

const DEVICE: &[(&str, &str)] = &[("DDP_DEVICE_STEP", "1")];

fn spec(dir: &Path, model: &str, optimizer: &str, extra: &str) -> std::path::PathBuf {
    let lr = if optimizer == "adam" { 0.001 } else { 0.01 };
    write_spec(
        dir,
        model,
        &format!(
            "val_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 1\nmax_steps = 6\noptimizer = \"{optimizer}\"\nlr = {lr}\nmomentum = 0.9\nseed = 7\n[checkpoint]\nevery_epochs = 0\n{extra}"
        ),
    )
}

fn model_of(out: &Path) -> std::collections::HashMap<String, candle_core::Tensor> {
    load_model(&out.join("model.safetensors"))
}

#[test]
fn two_replicas_equal_one_with_the_combined_batch() {
    for (model, optimizer, extra) in [
        ("mnist-cnn", "sgd", ""),
        ("convnet-bn", "sgd", "[ddp]\nsync_batchnorm = true\n"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(dir.path(), model, optimizer, extra);
        let (two, one) = (dir.path().join("two"), dir.path().join("one"));
        train_standalone_env(&spec, 2, &two, &["train.batch_size=8"], DEVICE);
        train_standalone_env(&spec, 1, &one, &["train.batch_size=16"], DEVICE);
        let (diff, at) = worst_tensor(&model_of(&two), &model_of(&one));
        assert!(
            diff < 1e-5,
            "{model}: 2×8 and 1×16 differ by {diff} (in {at})"
        );
    }
}

#[test]
fn device_step_equals_host_step() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), "mnist-cnn", "adam", "");
    let (dev, host, zero) = (
        dir.path().join("dev"),
        dir.path().join("host"),
        dir.path().join("zero"),
    );
    let o = train_standalone_env(&spec, 2, &dev, &["train.batch_size=8"], DEVICE);
    assert!(
        text(&o).contains("device step: gradients reduced and optimizer run on Cpu"),
        "{}",
        text(&o)
    );
    let o = train_standalone(&spec, 2, &host, &["train.batch_size=8"]);
    assert!(!text(&o).contains("device step"), "{}", text(&o));
    train_standalone(&spec, 2, &zero, &["train.batch_size=8", "train.lr=1e-12"]);
    let moved = max_abs_diff(&model_of(&host), &model_of(&zero));
    assert!(moved > 1e-3, "training did not move the weights ({moved})");
    let (diff, at) = worst_tensor(&model_of(&dev), &model_of(&host));
    assert!(
        diff < 1e-5,
        "device and host steps differ by {diff} (in {at})"
    );
}

#[test]
fn resumed_device_step_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        dir.path(),
        "mlp",
        "val_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 3\nbatch_size = 32\noptimizer = \"adam\"\nlr = 0.001\n[checkpoint]\nevery_epochs = 1\n",
    );
    let (full, cut) = (dir.path().join("full"), dir.path().join("cut"));
    train_standalone_env(&spec, 2, &full, &[], DEVICE);
    // 8 steps per epoch: stop 3 steps into epoch 2, resume from epoch 1's checkpoint.
    train_standalone_env(&spec, 2, &cut, &["train.max_steps=11"], DEVICE);
    let mut c = trainer();
    c.envs(DEVICE.iter().copied())
        .arg(&spec)
        .args(["--standalone", "--nproc", "2", "--resume", "--out"])
        .arg(&cut);
    let o = run_with_timeout(c, Duration::from_secs(120));
    assert_success(&o);
    assert!(text(&o).contains("epoch 1 done, step 8"), "{}", text(&o));
    let diff = max_abs_diff(&model_of(&full), &model_of(&cut));
    assert!(
        diff <= 1e-6,
        "resumed run differs from the uninterrupted one by {diff}"
    );
}
