//! `train.steps` and `train.eval_every` on sample data: the run is counted in optimizer steps,
//! ends inside the epoch the budget reaches into (that epoch validated, checkpointed and the
//! model tested as for a run in epochs), and validates every `eval_every` steps besides the
//! epochs' ends.

mod common;
use common::*;
use ddp_trainer::metrics::MetricKind;

/// 80 MNIST digits, 16 held out: 64 to train, 4 steps per epoch with 2 replicas × 8.
const BODY: &str = "val_fraction = 0.2\nlimit_train = 80\nlimit_test = 32\n[train]\nsteps = 10\neval_every = 3\nbatch_size = 8\nlr = 0.01\n";

#[test]
fn a_step_budget_ends_mid_epoch_with_validation_every_n_steps() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mlp", BODY);
    let out = dir.path().join("run");
    let o = train_standalone(&spec, 2, &out, &[]);
    let stdout = text(&o);

    let records = metrics(&out, 0);
    let steps = |kind: MetricKind| -> Vec<(usize, u64)> {
        records
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| (r.epoch, r.step))
            .collect()
    };
    // Three epochs (4 + 4 + 2 steps); validated at steps 3, 6 and 9 mid-epoch and at the end of
    // each epoch (4, 8 and the budget's 10).
    assert_eq!(
        steps(MetricKind::Val),
        [(1, 3), (1, 4), (2, 6), (2, 8), (3, 9), (3, 10)],
        "{stdout}"
    );
    assert_eq!(steps(MetricKind::Train).last(), Some(&(3, 10)), "{stdout}");
    assert_eq!(steps(MetricKind::Test), [(3, 10)], "{stdout}");
    assert!(stdout.contains("epoch 3/3 step 2/4 loss"), "{stdout}");
    assert!(!stdout.contains("incomplete"), "{stdout}");
    for epoch in 1..=3 {
        let ck = out.join(format!("checkpoints/epoch-{epoch:04}.safetensors"));
        assert!(ck.exists(), "{} missing:\n{stdout}", ck.display());
    }
    assert!(out.join("model.safetensors").exists());
}
