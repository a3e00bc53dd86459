//! Mixed precision (`train.precision = "bf16"`, `"fp16"` with its loss scaler): the same runs as
//! f32 within the stated tolerances, a resumed fp16 run ending with the uninterrupted one's
//! weights (its loss scaler in the checkpoint), checkpoints and `model.safetensors` in f32, the
//! train records naming the precision, and what cannot run refused before anything is made.
//! (2 replicas × B ≡ 1 × 2B under bf16: `equivalence.rs`; every rank skipping the same steps:
//! the DDP step's unit tests.)

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

use ddp_trainer::metrics::MetricKind;

/// 2048 MNIST digits (1843 to train on: 29 steps an epoch), 2 epochs of 2 replicas × 32 with a
/// checkpoint after each. fp16 doubles its loss scale (from PyTorch's 65536) after 6 finite
/// steps instead of 2,000, so that it grows to where the CNN's gradients overflow half (2^21)
/// and its runs skip steps there, again and again.
fn cnn_spec(dir: &Path, precision: &str) -> std::path::PathBuf {
    let scaler = match precision {
        "fp16" => "loss_scale_growth_every = 6\n",
        _ => "",
    };
    write_spec(
        dir,
        "mnist-cnn",
        &format!(
            "val_fraction = 0.1\nlimit_train = 2048\nlimit_test = 512\n[train]\nepochs = 2\nbatch_size = 32\noptimizer = \"adam\"\nlr = 0.001\nseed = 5\nprecision = \"{precision}\"\n{scaler}[checkpoint]\nevery_epochs = 1\n"
        ),
    )
}

fn train_records(out: &Path) -> Vec<ddp_trainer::metrics::MetricRecord> {
    metrics(out, 0)
        .into_iter()
        .filter(|r| r.kind == MetricKind::Train)
        .collect()
}

fn train_losses(out: &Path) -> Vec<f64> {
    train_records(out).iter().map(|r| r.loss).collect()
}

/// The CNN in bf16 and in fp16 learns as in f32: its logged training losses (each a window of
/// steps) within 0.03 of f32's on average and 0.1 at most, test accuracy within 1.5 points; its
/// weights moved by the rounding, which shows, and all of its files are f32. The train records
/// name the precision, and fp16's its loss scale and the steps it skipped. An fp16 run stopped
/// 11 steps into its second epoch and resumed from the first epoch's checkpoint ends with the
/// weights of the uninterrupted run.
#[test]
fn bf16_and_fp16_train_the_cnn_as_f32_does_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let run = |precision: &str| {
        let d = dir.path().join(precision);
        std::fs::create_dir_all(&d).unwrap();
        let spec = cnn_spec(&d, precision);
        let out = d.join("out");
        let log = text(&train_standalone(&spec, 2, &out, &[]));
        (spec, out, log)
    };
    let (_, a, _) = run("f32");
    assert!(train_records(&a).iter().all(|r| r.precision.is_none()));
    let acc_a = test_record(&a).accuracy.unwrap();
    assert!(acc_a > 0.8, "f32 learned too little: {acc_a}");
    let wa = load_model(&a.join("model.safetensors"));
    let mut fp16 = None;
    for precision in ["bf16", "fp16"] {
        let (spec, b, log) = run(precision);
        assert!(log.contains(&format!("precision {precision}")), "{log}");
        let (la, lb) = (train_losses(&a), train_losses(&b));
        assert_eq!(la.len(), lb.len());
        assert!(la.len() >= 4, "{la:?}");
        let gaps: Vec<f64> = la.iter().zip(&lb).map(|(x, y)| (x - y).abs()).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let worst = gaps.iter().cloned().fold(0.0, f64::max);
        assert!(
            mean <= 0.03 && worst <= 0.1,
            "{precision}: train losses apart by {mean} on average, {worst} at most\n{la:?}\n{lb:?}"
        );
        let acc_b = test_record(&b).accuracy.unwrap();
        assert!(
            (acc_a - acc_b).abs() <= 0.015,
            "f32 {acc_a}, {precision} {acc_b}"
        );
        let wb = load_model(&b.join("model.safetensors"));
        let gap = max_abs_diff(&wa, &wb);
        let records = train_records(&b);
        let last = records.last().unwrap().precision.clone().unwrap();
        eprintln!(
            "test accuracy f32 {acc_a}, {precision} {acc_b}; train losses apart by {mean:.4} on \
             average, {worst:.4} at most; weights apart by {gap}; last record {last:?}"
        );
        assert!(gap > 1e-4, "{precision} left the weights as f32's: {gap}");
        for (name, t) in wb
            .iter()
            .chain(&load_model(&b.join("checkpoints/epoch-0001.safetensors")))
        {
            assert_eq!(t.dtype(), candle_core::DType::F32, "{name}");
        }
        assert!(
            records
                .iter()
                .all(|r| r.precision.as_ref().is_some_and(|p| p.name == precision))
        );
        match precision {
            "bf16" => assert_eq!((last.loss_scale, last.skipped_steps), (None, None)),
            _ => {
                let skipped = last.skipped_steps.unwrap();
                assert!(log.contains("step skipped"), "{log}");
                assert!(
                    skipped >= 3 && last.loss_scale.unwrap() > 65536.0,
                    "the scale should have grown into overflow, again and again: {last:?}"
                );
                fp16 = Some((spec, wb));
            }
        }
    }

    // Stopped 11 steps into epoch 2, resumed from the epoch 1 checkpoint.
    let (spec, wb) = fp16.unwrap();
    let cut = dir.path().join("cut");
    train_standalone(&spec, 2, &cut, &["train.max_steps=40"]);
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--resume", "--out"])
        .arg(&cut);
    let o = run_with_timeout(c, Duration::from_secs(120));
    assert_success(&o);
    assert!(text(&o).contains("resuming from"), "{}", text(&o));
    let diff = max_abs_diff(&wb, &load_model(&cut.join("model.safetensors")));
    assert!(diff <= 1e-6, "resumed fp16 run differs by {diff}");
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

/// Mixed precision on GPUs, an unknown precision and a loss scale without fp16 are refused
/// naming the key, exit 2, nothing written.
#[test]
fn what_cannot_run_is_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let spec = cnn_spec(dir.path(), "f32");
    for (set, says) in [
        (
            vec!["train.precision=fp16", "ddp.devices=[0]"],
            "train.precision: \"fp16\" runs on CPU replicas",
        ),
        (
            vec!["train.precision=bf16", "ddp.devices=[0]"],
            "train.precision: \"bf16\" runs on CPU replicas",
        ),
        (vec!["train.precision=f8"], "train.precision"),
        (
            vec!["train.loss_scale=1024"],
            "train.loss_scale: is fp16's loss scale",
        ),
        (
            vec!["train.precision=fp16", "train.loss_scale_growth_every=0"],
            "train.loss_scale_growth_every: must be at least 1",
        ),
    ] {
        let out = dir.path().join("out");
        let err = refused_standalone(&spec, &out, &set);
        assert!(err.contains(says), "{set:?}: {err}");
        assert!(!out.exists(), "{set:?} made {}", out.display());
    }
}
