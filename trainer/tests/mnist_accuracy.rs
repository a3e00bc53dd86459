//! The main job on real data: the embedded 10,000-digit MNIST sample, mnist-cnn, 2 replicas,
//! 3 epochs, exactly `examples/mnist.toml` → at least 96.5% test accuracy (PyTorch's reference
//! recipe gets 97.0–97.35%). Also checks the run folder the trainer leaves behind, and that
//! PowerSGD over the ring ends within 0.5 % of that accuracy.

mod common;
use common::*;
use ddp_trainer::metrics::MetricKind;
use ddp_trainer::tensorboard::read_events;

#[test]
fn mnist_cnn_two_replicas_reaches_reference_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train_standalone(&examples_dir().join("mnist.toml"), 2, &out, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("epoch 1/3 step 113/113 loss "), "{stdout}");
    assert!(stdout.contains(" samples/s"), "{stdout}");

    let test = test_record(&out);
    let acc = test.accuracy.unwrap();
    assert!(acc >= 0.965, "test accuracy {acc} < 0.965\n{stdout}");
    assert_eq!(test.samples, Some(2000));
    assert_eq!(test.world_size, 2);

    // Every rank wrote its train metrics; rank 0 wrote one val line per epoch with global figures.
    for rank in 0..2 {
        let m = metrics(&out, rank);
        assert!(
            m.iter()
                .any(|r| r.kind == MetricKind::Train && r.rank == rank && r.epoch == 3)
        );
        assert!(m.iter().all(|r| r.loss.is_finite() && r.lr > 0.0));
    }
    let val: Vec<_> = metrics(&out, 0)
        .into_iter()
        .filter(|r| r.kind == MetricKind::Val)
        .collect();
    assert_eq!(
        val.iter().map(|r| r.epoch).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(val.iter().all(|r| r.samples == Some(800)), "{val:?}");
    // StepLR(1, 0.7) on lr 0.001 × 2 replicas.
    let lrs: Vec<f64> = val.iter().map(|r| r.lr).collect();
    for (a, b) in lrs.iter().zip([0.002, 0.0014, 0.00098]) {
        assert!((a - b).abs() < 1e-9, "{lrs:?}");
    }

    // Checkpoints (every epoch, keep 3), the final model, logs, TensorBoard.
    for e in 1..=3 {
        assert!(
            out.join(format!("checkpoints/epoch-{e:04}.safetensors"))
                .is_file()
        );
        assert!(
            out.join(format!("checkpoints/epoch-{e:04}.state.safetensors"))
                .is_file()
        );
    }
    let model = load_model(&out.join("model.safetensors"));
    assert_eq!(model["dense1.weight"].dims(), &[64, 576]);
    for rank in 0..2 {
        assert!(out.join(format!("logs/rank-{rank}.log")).is_file());
    }
    let tb: Vec<_> = std::fs::read_dir(out.join("tb"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(tb.len(), 1, "{tb:?}");
    let events = read_events(&tb[0]).unwrap();
    for tag in [
        "train/loss",
        "val/loss",
        "val/accuracy",
        "test/loss",
        "test/accuracy",
    ] {
        assert!(
            events.iter().any(|e| e.tag == tag),
            "no {tag} in TensorBoard events"
        );
    }
    let tb_test = events.iter().find(|e| e.tag == "test/accuracy").unwrap();
    assert!((tb_test.value as f64 - acc).abs() < 1e-6);

    // The same job with PowerSGD (rank 4, error feedback) over the ring: within 0.5 % of the
    // uncompressed accuracy, the matrices sent as factors.
    let ps = dir.path().join("powersgd");
    let o = train_standalone(
        &examples_dir().join("mnist.toml"),
        2,
        &ps,
        &["ddp.shared_memory=false", "ddp.compression=\"powersgd\""],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("gradients sent as PowerSGD factors of rank 4"),
        "{stdout}"
    );
    let ps_acc = test_record(&ps).accuracy.unwrap();
    assert!(
        (ps_acc - acc).abs() <= 0.005,
        "PowerSGD test accuracy {ps_acc} against {acc} uncompressed"
    );
    // Past the first step (uncompressed, it learns the buckets): 93,322 floats a step in f32;
    // the factors and the biases are under a tenth of that.
    let sent: Vec<f64> = metrics(&ps, 0)
        .iter()
        .filter_map(|r| r.breakdown.and_then(|b| b.bytes_sent))
        .collect();
    assert!(
        sent.len() > 3 && sent[1..].iter().all(|&b| b < 93_322.0 * 4.0 / 10.0),
        "{sent:?}"
    );
}
