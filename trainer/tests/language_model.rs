//! A GPT trained on text through the real trainer binary: DDP equivalence (2 replicas × B end
//! with the weights of 1 replica × 2B), a resumed run equal to an uninterrupted one, and the
//! run's outputs (tokenizer, validation records with perplexity and bits per character, train
//! records in tokens, TensorBoard tags, a model PyTorch's module names load).

mod common;
use std::path::Path;

use common::*;
use ddp_trainer::data::text::{EvalWindows, train_len};
use ddp_trainer::metrics::MetricKind;
use ddp_trainer::tensorboard::read_events;
use ddp_trainer::test_util::{max_abs_diff, worst_tensor};

#[test]
fn two_replicas_of_b_windows_equal_one_of_2b() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(dir.path(), "");
    let (two, one, zero) = (
        dir.path().join("two"),
        dir.path().join("one"),
        dir.path().join("zero"),
    );
    train_standalone(&spec, 2, &two, &["train.batch_size=4"]);
    train_standalone(&spec, 1, &one, &["train.batch_size=8"]);
    train_standalone(&spec, 1, &zero, &["train.batch_size=8", "train.lr=1e-12"]);
    let (a, b) = (
        load_model(&two.join("model.safetensors")),
        load_model(&one.join("model.safetensors")),
    );
    let moved = max_abs_diff(&b, &load_model(&zero.join("model.safetensors")));
    assert!(moved > 1e-3, "training did not move the weights ({moved})");
    let (diff, at) = worst_tensor(&a, &b);
    assert!(diff < 1e-5, "2×4 and 1×8 differ by {diff} (in {at})");
    // Both tied names, as PyTorch's module lists them.
    assert!(a.contains_key("lm_head.weight") && a.contains_key("transformer.wte.weight"));
    // The validation loss at steps 3 and 6, the same for both worlds.
    let val = |out: &Path| -> Vec<(u64, f64)> {
        metrics(out, 0)
            .into_iter()
            .filter(|m| m.kind == MetricKind::Val)
            .map(|m| (m.step, m.loss))
            .collect()
    };
    let (va, vb) = (val(&two), val(&one));
    assert_eq!(va.iter().map(|v| v.0).collect::<Vec<_>>(), vec![3, 6]);
    for ((s, x), (_, y)) in va.iter().zip(&vb) {
        assert!((x - y).abs() < 1e-4, "step {s}: val loss {x} vs {y}");
    }
    assert!(two.join("tokenizer.json").is_file());
}

#[test]
fn a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(dir.path(), "");
    let (straight, resumed) = (dir.path().join("straight"), dir.path().join("resumed"));
    train_standalone(&spec, 2, &straight, &[]);
    // Stopped after step 3 (its checkpoint), then resumed to step 6.
    train_standalone(&spec, 2, &resumed, &["train.max_steps=3"]);
    // A longer context than the checkpoint's positions is refused, naming the key; the run
    // folder is left as it was for the right resume below.
    let mut longer = trainer();
    longer
        .arg(&spec)
        .args(["--standalone", "--nproc", "2", "--resume"])
        .args(["--set", "model.block=32", "--out"])
        .arg(&resumed);
    let refused = run_with_timeout(longer, std::time::Duration::from_secs(60));
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains(&format!(
            "{}: the model there has 16 positions (`transformer.wpe.weight` [16, 16]) but model.block = 32: resume with model.block = 16, or start a new run folder",
            resumed.join("checkpoints/step-00000003.safetensors").display()
        )),
        "{}",
        text(&refused)
    );
    let mut cmd = trainer();
    cmd.arg(&spec)
        .args(["--standalone", "--nproc", "2"])
        .arg("--out")
        .arg(&resumed)
        .arg("--resume");
    let out = run_with_timeout(cmd, std::time::Duration::from_secs(300));
    assert_success(&out);
    assert!(
        text(&out).contains("resuming from") && text(&out).contains("step 3)"),
        "{}",
        text(&out)
    );
    let (a, b) = (
        load_model(&straight.join("model.safetensors")),
        load_model(&resumed.join("model.safetensors")),
    );
    let (diff, at) = worst_tensor(&a, &b);
    assert_eq!(diff, 0.0, "resumed and uninterrupted runs differ in {at}");
}

#[test]
fn records_count_tokens_and_validation_has_perplexity_and_bits_per_char() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(dir.path(), "");
    let out = dir.path().join("run");
    train_standalone(&spec, 2, &out, &[]);
    // 6 steps, a train record after each (log_every: a tenth of the steps, at least 1), on
    // every rank: 4 windows of 16 tokens per step and rank.
    for rank in 0..2 {
        let train: Vec<_> = metrics(&out, rank)
            .into_iter()
            .filter(|m| m.kind == MetricKind::Train)
            .collect();
        assert_eq!(
            train.iter().map(|m| m.step).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        for m in &train {
            assert_eq!((m.samples, m.tokens), (Some(4), Some(64)), "{m:?}");
            assert_eq!(m.tokens_per_sec, Some(m.samples_per_sec * 16.0), "{m:?}");
            assert_eq!((m.perplexity, m.bits_per_char), (None, None), "{m:?}");
        }
    }
    // Validation at steps 3 and 6 over every window of the last tenth of the text.
    let n = std::fs::read_to_string(dir.path().join("input.txt"))
        .unwrap()
        .len();
    let windows = EvalWindows::new(n - train_len(n, 0.1), 16).count() as u64;
    let val: Vec<_> = metrics(&out, 0)
        .into_iter()
        .filter(|m| m.kind == MetricKind::Val)
        .collect();
    assert_eq!(val.iter().map(|m| m.step).collect::<Vec<_>>(), [3, 6]);
    for m in &val {
        assert!(m.loss.is_finite() && m.loss > 0.0, "{m:?}");
        assert_eq!(m.perplexity, Some(m.loss.exp()), "{m:?}");
        assert_eq!(
            m.bits_per_char,
            Some(m.loss / std::f64::consts::LN_2),
            "{m:?}"
        );
        assert_eq!(m.bits_per_byte, None);
        assert_eq!(
            (m.samples, m.tokens_per_sec, m.tokens),
            (Some(windows), None, None)
        );
        assert_eq!(m.accuracy, None);
    }
    // Rank 1 writes no evaluation: rank 0's figures are the global ones.
    assert!(metrics(&out, 1).iter().all(|m| m.kind == MetricKind::Train));
    // TensorBoard: the same figures under their tags, no samples/s and no accuracy.
    let tb: Vec<_> = std::fs::read_dir(out.join("tb"))
        .unwrap()
        .flat_map(|e| read_events(e.unwrap().path()).unwrap())
        .collect();
    let tag = |t: &str| -> Vec<(i64, f32)> {
        tb.iter()
            .filter(|e| e.tag == t)
            .map(|e| (e.step, e.value))
            .collect()
    };
    let last = &val[1];
    assert_eq!(
        tag("val/perplexity").last(),
        Some(&(6, last.perplexity.unwrap() as f32))
    );
    assert_eq!(
        tag("val/bits_per_char").last(),
        Some(&(6, last.bits_per_char.unwrap() as f32))
    );
    assert_eq!(tag("train/tokens_per_sec").len(), 6);
    for absent in ["train/samples_per_sec", "val/accuracy", "val/bits_per_byte"] {
        assert!(tag(absent).is_empty(), "{absent}");
    }
}

/// `--pause-at step:4` (between evaluations): a language model validates and checkpoints at step
/// 4, writes `paused.json` and no model; resumed, it ends with the uninterrupted run's weights.
#[test]
fn a_language_model_paused_at_a_step_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(dir.path(), "");
    let (straight, paused) = (dir.path().join("straight"), dir.path().join("paused"));
    train_standalone(&spec, 2, &straight, &[]);
    let run = |resume: bool, pause: Option<&str>| {
        let mut c = trainer();
        c.arg(&spec)
            .args(["--standalone", "--nproc", "2", "--out"])
            .arg(&paused);
        if let Some(p) = pause {
            c.args(["--pause-at", p]);
        }
        if resume {
            c.arg("--resume");
        }
        let o = run_with_timeout(c, std::time::Duration::from_secs(120));
        assert_success(&o);
        text(&o)
    };
    let log = run(false, Some("step:4"));
    assert!(log.contains("paused after step 4 (--pause-at)"), "{log}");
    let at: serde_json::Value =
        serde_json::from_slice(&std::fs::read(paused.join("paused.json")).unwrap()).unwrap();
    assert_eq!(at["global_step"], 4);
    assert!(!paused.join("model.safetensors").exists());
    assert!(
        paused
            .join("checkpoints/step-00000004.safetensors")
            .is_file()
    );
    let vals: Vec<u64> = metrics(&paused, 0)
        .into_iter()
        .filter(|m| m.kind == MetricKind::Val)
        .map(|m| m.step)
        .collect();
    assert_eq!(vals, [3, 4]);
    run(true, None);
    assert!(!paused.join("paused.json").exists());
    let (diff, at) = worst_tensor(
        &load_model(&straight.join("model.safetensors")),
        &load_model(&paused.join("model.safetensors")),
    );
    assert_eq!(diff, 0.0, "paused and uninterrupted runs differ in {at}");
}
