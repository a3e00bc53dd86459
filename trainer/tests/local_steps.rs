//! Local steps with an outer optimizer (`[ddp.sync]`) in real runs of 2 processes: DiLoCo on the
//! CNN learns, its train records say where the syncs stand, its checkpoints hold each replica's
//! own part beside the global weights, and a run resumed from a checkpoint between two syncs
//! ends with the uninterrupted run's model, bit for bit; Streaming DiLoCo on the GPT paused with a
//! fragment's sync in flight resumes to the same weights; what cannot run is refused before
//! anything is made. (The equivalences with DDP and between the methods, the encodings' bounds:
//! the step's unit tests, `step::ddp::local`.)

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

use ddp_trainer::metrics::MetricKind;

/// 2048 MNIST digits (29 steps an epoch), 2 epochs of 2 replicas × 32, DiLoCo every 5 steps in
/// int8, checkpointed after each epoch (step 29: 4 steps after a sync).
fn cnn_spec(dir: &Path) -> std::path::PathBuf {
    write_spec(
        dir,
        "mnist-cnn",
        "val_fraction = 0.1\nlimit_train = 2048\nlimit_test = 512\n[train]\nepochs = 2\nbatch_size = 32\noptimizer = \"adam\"\nlr = 0.001\nseed = 5\n[checkpoint]\nevery_epochs = 1\n[ddp.sync]\nmethod = \"diloco\"\nevery = 5\nencoding = \"int8\"\n",
    )
}

#[test]
fn diloco_trains_the_cnn_and_resumes_between_syncs_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let spec = cnn_spec(dir.path());
    let out = dir.path().join("out");
    let log = text(&train_standalone(&spec, 2, &out, &[]));
    assert!(log.contains("local steps: DiLoCo"), "{log}");
    let acc = test_record(&out).accuracy.unwrap();
    assert!(acc > 0.75, "DiLoCo learned too little: {acc}");
    let train: Vec<_> = metrics(&out, 0)
        .into_iter()
        .filter(|r| r.kind == MetricKind::Train)
        .collect();
    let last = train.last().unwrap();
    let sync = last
        .sync
        .as_ref()
        .expect("train records say how the replicas sync");
    assert_eq!(
        (sync.method.as_str(), sync.every, sync.encoding.as_str()),
        ("diloco", 5, "int8")
    );
    assert_eq!(sync.last_sync, 55, "58 steps: the last sync after step 55");
    assert_eq!(sync.drift.len(), 2);
    assert!(sync.drift.iter().all(|d| *d > 0.0), "{sync:?}");
    // Between syncs a step sends the control element only, a sync each replica's int8 change
    // of the weights (1.06 bytes a parameter): 0.21 bytes a parameter a step, where DDP sends 4.
    let per_record: Vec<f64> = train
        .iter()
        .map(|r| r.breakdown.unwrap().bytes_sent.unwrap())
        .collect();
    let bytes = per_record.iter().sum::<f64>() / per_record.len() as f64;
    let params: usize = load_model(&out.join("model.safetensors"))
        .values()
        .map(|t| t.elem_count())
        .sum();
    let ratio = 4.0 * params as f64 / bytes;
    assert!(
        (15.0..23.0).contains(&ratio),
        "{bytes} bytes a step for {params} parameters: {ratio} times fewer than DDP"
    );
    for epoch in ["epoch-0001", "epoch-0002"] {
        for rank in 0..2 {
            let p = out.join(format!("checkpoints/{epoch}.replica-{rank}.safetensors"));
            assert!(p.is_file(), "{}", p.display());
        }
    }
    // The first epoch's checkpoint is 4 steps past a sync: a run folder with nothing newer,
    // resumed, ends the same.
    let cut = dir.path().join("cut");
    std::fs::create_dir_all(cut.join("checkpoints")).unwrap();
    for entry in std::fs::read_dir(out.join("checkpoints")).unwrap() {
        let name = entry.unwrap().file_name();
        if name.to_string_lossy().starts_with("epoch-0001") {
            std::fs::copy(
                out.join("checkpoints").join(&name),
                cut.join("checkpoints").join(&name),
            )
            .unwrap();
        }
    }
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--resume", "--out"])
        .arg(&cut);
    let o = run_with_timeout(c, Duration::from_secs(120));
    assert_success(&o);
    assert!(text(&o).contains("resuming from"), "{}", text(&o));
    let (diff, at) = worst_tensor(
        &load_model(&out.join("model.safetensors")),
        &load_model(&cut.join("model.safetensors")),
    );
    assert_eq!(diff, 0.0, "resumed and uninterrupted runs differ in {at}");
}

/// Streaming DiLoCo on the GPT: 2 fragments synced every 4 steps in turn, each sent during the
/// step after it began, in int4 with error feedback. Paused after step 6, where fragment 0's
/// sync is in flight, and resumed, it ends with the uninterrupted run's weights.
#[test]
fn streaming_diloco_on_the_gpt_resumes_with_a_fragment_in_flight_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(
        dir.path(),
        "[ddp.sync]\nmethod = \"streaming\"\nevery = 4\nfragments = 2\ndelay = 1\nencoding = \"int4\"\nerror_feedback = true\n",
    );
    let text12 = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("steps = 6", "steps = 12");
    std::fs::write(&spec, text12).unwrap();
    let (straight, paused) = (dir.path().join("straight"), dir.path().join("paused"));
    let log = text(&train_standalone(&spec, 2, &straight, &[]));
    assert!(log.contains("local steps: DiLoCo in 2 fragments"), "{log}");
    let run = |extra: &[&str]| {
        let mut c = trainer();
        c.arg(&spec)
            .args(["--standalone", "--nproc", "2", "--out"])
            .arg(&paused)
            .args(extra);
        let o = run_with_timeout(c, Duration::from_secs(120));
        assert_success(&o);
        text(&o)
    };
    let log = run(&["--pause-at", "step:6"]);
    assert!(log.contains("paused after step 6"), "{log}");
    run(&["--resume"]);
    let (diff, at) = worst_tensor(
        &load_model(&straight.join("model.safetensors")),
        &load_model(&paused.join("model.safetensors")),
    );
    assert_eq!(diff, 0.0, "paused and uninterrupted runs differ in {at}");
    let val = metrics(&straight, 0)
        .into_iter()
        .rev()
        .find(|r| r.kind == MetricKind::Val)
        .unwrap();
    assert!(val.loss.is_finite() && val.loss < 5.0, "{}", val.loss);
}

/// fp16 (whose skipped steps the local steps do not agree on), a key of another method, and
/// more fragments than parameters: exit 2, naming the key, nothing written (the last once the
/// model is built: before any step).
#[test]
fn what_cannot_run_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let spec = cnn_spec(dir.path());
    for (set, says, made) in [
        (
            vec!["train.precision=fp16"],
            "train.precision: \"fp16\" skips a step on every replica at once",
            false,
        ),
        (
            vec!["ddp.sync.fragments=2"],
            "ddp.sync.fragments: does not apply to ddp.sync.method = \"diloco\"",
            false,
        ),
        (
            vec![
                "ddp.sync.method=streaming",
                "ddp.sync.fragments=50",
                "ddp.sync.every=100",
            ],
            "ddp.sync.fragments: is 50 but the model has",
            true,
        ),
    ] {
        let out = dir.path().join("out");
        let _ = std::fs::remove_dir_all(&out);
        let err = refused_standalone(&spec, &out, &set);
        assert!(err.contains(says), "{set:?}: {err}");
        if !made {
            assert!(!out.exists(), "{set:?} made {}", out.display());
        } else {
            assert!(!out.join("checkpoints").exists());
        }
    }
}
