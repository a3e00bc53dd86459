//! Mixed precision (`train.precision = "bf16"`): the same runs as f32 within bf16's stated
//! tolerances, a resumed bf16 run ending with the uninterrupted one's weights, checkpoints and
//! `model.safetensors` in f32, and what cannot run refused before anything is made.
//! (2 replicas × B ≡ 1 × 2B under bf16: `equivalence.rs`.)

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

use ddp_trainer::metrics::MetricKind;

/// 2048 MNIST digits (1843 to train on: 29 steps an epoch), 2 epochs of 2 replicas × 32 with a checkpoint after each.
fn cnn_spec(dir: &Path, precision: &str) -> std::path::PathBuf {
    write_spec(
        dir,
        "mnist-cnn",
        &format!(
            "val_fraction = 0.1\nlimit_train = 2048\nlimit_test = 512\n[train]\nepochs = 2\nbatch_size = 32\noptimizer = \"adam\"\nlr = 0.001\nseed = 5\nprecision = \"{precision}\"\n[checkpoint]\nevery_epochs = 1\n"
        ),
    )
}

fn train_losses(out: &Path) -> Vec<f64> {
    metrics(out, 0)
        .into_iter()
        .filter(|r| r.kind == MetricKind::Train)
        .map(|r| r.loss)
        .collect()
}

/// The CNN in bf16 learns as in f32: its logged training losses (each a window of steps) within
/// 0.03 of f32's on average and 0.1 at most, test accuracy within 1.5 points; its weights moved by bf16's rounding, which shows, and all
/// of its files are f32. A run stopped after its first epoch and resumed ends with the weights
/// of the uninterrupted bf16 run.
#[test]
fn bf16_trains_the_cnn_as_f32_does_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (f32_dir, bf16_dir) = (dir.path().join("f32"), dir.path().join("bf16"));
    std::fs::create_dir_all(&f32_dir).unwrap();
    std::fs::create_dir_all(&bf16_dir).unwrap();
    let (f32_spec, bf16_spec) = (cnn_spec(&f32_dir, "f32"), cnn_spec(&bf16_dir, "bf16"));
    let (a, b) = (f32_dir.join("out"), bf16_dir.join("out"));
    train_standalone(&f32_spec, 2, &a, &[]);
    let log = text(&train_standalone(&bf16_spec, 2, &b, &[]));
    assert!(log.contains("precision bf16"), "{log}");

    let (la, lb) = (train_losses(&a), train_losses(&b));
    assert_eq!(la.len(), lb.len());
    assert!(la.len() >= 4, "{la:?}");
    let gaps: Vec<f64> = la.iter().zip(&lb).map(|(x, y)| (x - y).abs()).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let worst = gaps.iter().cloned().fold(0.0, f64::max);
    assert!(
        mean <= 0.03 && worst <= 0.1,
        "train losses apart by {mean} on average, {worst} at most\n{la:?}\n{lb:?}"
    );
    let (ta, tb) = (test_record(&a), test_record(&b));
    let (acc_a, acc_b) = (ta.accuracy.unwrap(), tb.accuracy.unwrap());
    assert!(acc_a > 0.8, "f32 learned too little: {acc_a}");
    assert!((acc_a - acc_b).abs() <= 0.015, "f32 {acc_a}, bf16 {acc_b}");

    let (wa, wb) = (
        load_model(&a.join("model.safetensors")),
        load_model(&b.join("model.safetensors")),
    );
    let gap = max_abs_diff(&wa, &wb);
    eprintln!(
        "test accuracy f32 {acc_a}, bf16 {acc_b}; train losses apart by {mean:.4} on average, \
         {worst:.4} at most; weights apart by {gap}"
    );
    assert!(gap > 1e-4, "bf16 left the weights as f32's: {gap}");
    for (name, t) in &wb {
        assert_eq!(t.dtype(), candle_core::DType::F32, "{name}");
    }
    for (name, t) in load_model(&b.join("checkpoints/epoch-0001.safetensors")) {
        assert_eq!(t.dtype(), candle_core::DType::F32, "{name}");
    }

    // Stopped 11 steps into epoch 2, resumed from the epoch 1 checkpoint.
    let cut = bf16_dir.join("cut");
    train_standalone(&bf16_spec, 2, &cut, &["train.max_steps=40"]);
    let mut c = trainer();
    c.arg(&bf16_spec)
        .args(["--standalone", "--nproc", "2", "--resume", "--out"])
        .arg(&cut);
    let o = run_with_timeout(c, Duration::from_secs(120));
    assert_success(&o);
    assert!(text(&o).contains("resuming from"), "{}", text(&o));
    let diff = max_abs_diff(&wb, &load_model(&cut.join("model.safetensors")));
    assert!(diff <= 1e-6, "resumed bf16 run differs by {diff}");
}

/// The GPT in bf16: its validation loss within 0.02 of f32's after the same steps.
#[test]
fn bf16_trains_the_gpt_as_f32_does() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(dir.path(), "");
    let (a, b) = (dir.path().join("f32"), dir.path().join("bf16"));
    train_standalone(&spec, 2, &a, &[]);
    train_standalone(&spec, 2, &b, &["train.precision=bf16"]);
    let val = |out: &Path| {
        metrics(out, 0)
            .into_iter()
            .rev()
            .find(|r| r.kind == MetricKind::Val)
            .expect("a validation record")
            .loss
    };
    let (va, vb) = (val(&a), val(&b));
    assert!((va - vb).abs() <= 0.02, "val loss f32 {va}, bf16 {vb}");
    let gap = max_abs_diff(
        &load_model(&a.join("model.safetensors")),
        &load_model(&b.join("model.safetensors")),
    );
    assert!(gap > 1e-5, "bf16 left the GPT's weights as f32's: {gap}");
}

/// fp16 (no loss scaling in this build) and bf16 on GPUs are refused naming the key, exit 2,
/// nothing written.
#[test]
fn what_cannot_run_is_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let spec = cnn_spec(dir.path(), "f32");
    for (set, says) in [
        (vec!["train.precision=fp16"], "loss scaling"),
        (
            vec!["train.precision=bf16", "ddp.devices=[0]"],
            "runs on CPU replicas",
        ),
        (vec!["train.precision=f8"], "train.precision"),
    ] {
        let out = dir.path().join("out");
        let mut c = trainer();
        c.arg(&spec)
            .args(["--standalone", "--nproc", "1", "--out"])
            .arg(&out);
        for s in &set {
            c.arg("--set").arg(s);
        }
        let o = run_with_timeout(c, Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(2), "{set:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("train.precision") && err.contains(says),
            "{set:?}: {err}"
        );
        assert!(!out.exists(), "{set:?} made {}", out.display());
    }
}
