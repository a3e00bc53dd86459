//! Resume: a run interrupted after a checkpoint and resumed with `--resume` ends with the same
//! weights as an uninterrupted run; a truncated newest checkpoint is skipped with a warning.

mod common;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// 1024 MNIST digits (921 train after the 10% split): 15 steps per epoch with 2 replicas × 32.
fn spec(dir: &Path) -> std::path::PathBuf {
    write_spec(
        dir,
        "mnist-cnn",
        "val_fraction = 0.1\nlimit_train = 1024\nlimit_test = 256\n[train]\nepochs = 3\nbatch_size = 32\noptimizer = \"adam\"\nlr = 0.001\nlr_scaling = \"linear\"\nscheduler = { kind = \"step\", step_size = 1, gamma = 0.7 }\n[checkpoint]\nevery_epochs = 1\nkeep_last = 3\n",
    )
}

fn uninterrupted(dir: &Path, spec: &Path) -> Model {
    let out = dir.join("full");
    train_standalone(spec, 2, &out, &[]);
    load_model(&out.join("model.safetensors"))
}

type Model = std::collections::HashMap<String, candle_core::Tensor>;

/// The model the run in `out` finished with equals the uninterrupted run's, to 1e-6.
fn assert_same_as_uninterrupted(full: &Model, out: &Path) {
    let diff = max_abs_diff(full, &load_model(&out.join("model.safetensors")));
    assert!(
        diff <= 1e-6,
        "resumed run differs from the uninterrupted one by {diff}"
    );
}

fn resume(spec: &Path, out: &Path) -> String {
    let mut c = trainer();
    c.arg(spec)
        .args(["--standalone", "--nproc", "2", "--resume", "--out"])
        .arg(out);
    let o = run_with_timeout(c, Duration::from_secs(120));
    assert_success(&o);
    text(&o)
}

#[test]
fn stopped_mid_epoch_and_resumed_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let full = uninterrupted(dir.path(), &spec);
    let out = dir.path().join("cut");
    // Stops 5 steps into epoch 2: the newest checkpoint is epoch 1.
    train_standalone(&spec, 2, &out, &["train.max_steps=20"]);
    assert_eq!(ddp_trainer::checkpoint::list_epochs(&out).unwrap(), vec![1]);
    let log = resume(&spec, &out);
    assert!(
        log.contains("resuming from")
            && log.contains("epoch-0001.safetensors (epoch 1 done, step 15)"),
        "{log}"
    );
    assert_same_as_uninterrupted(&full, &out);
}

#[test]
fn killed_replica_then_resume_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let full = uninterrupted(dir.path(), &spec);
    let out = dir.path().join("killed");
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out);
    let launcher = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = out.join("checkpoints/epoch-0001.safetensors");
    let start = Instant::now();
    while !first.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", launcher.id())).unwrap();
    let pids: Vec<i32> = children
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "replicas: {children}");
    // SAFETY: plain kill(2) on a child process we know.
    unsafe { libc::kill(pids[1], libc::SIGKILL) };
    let o = wait_output(launcher, Duration::from_secs(30));
    assert!(
        !o.status.success(),
        "the run should have failed\n{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("SIGKILL"),
        "{}",
        text(&o)
    );
    assert!(!out.join("model.safetensors").exists());
    let log = resume(&spec, &out);
    assert!(log.contains("resuming from"), "{log}");
    assert_same_as_uninterrupted(&full, &out);
}

#[test]
fn truncated_newest_checkpoint_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let full = uninterrupted(dir.path(), &spec);
    let out = dir.path().join("cut");
    // Stops 5 steps into epoch 3: checkpoints 1 and 2 exist; break the newest.
    train_standalone(&spec, 2, &out, &["train.max_steps=35"]);
    let newest = out.join("checkpoints/epoch-0002.safetensors");
    let len = std::fs::metadata(&newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(len / 3)
        .unwrap();
    let log = resume(&spec, &out);
    assert!(
        log.contains("warning: skipping checkpoint epoch 2")
            && log.contains("epoch-0002.safetensors"),
        "{log}"
    );
    assert!(
        log.contains("epoch-0001.safetensors (epoch 1 done, step 15)"),
        "{log}"
    );
    assert_same_as_uninterrupted(&full, &out);
}

/// SIGTERM to one replica stops every replica at the same step (the stop flag travels with the
/// gradient all-reduce): each exits 143 without a final model, and `--resume` then finishes the
/// run with the same weights as an uninterrupted one.
#[test]
fn sigterm_stops_all_replicas_at_the_same_step_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let full = uninterrupted(dir.path(), &spec);
    let out = dir.path().join("stopped");
    let port = free_port();
    let sets = ["train.log_every=1"];
    let mut r0 = ChildGuard::new(spawn_rank(&spec, &out, 0, 2, port, &[], &sets));
    let mut r1 = ChildGuard::new(spawn_rank(&spec, &out, 1, 2, port, &[], &sets));
    wait_for_train_record(&out, 1, &mut r1, Duration::from_secs(60));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(r1.child().id() as i32, libc::SIGTERM) };
    let o1 = wait_output(r1.take(), Duration::from_secs(30));
    let o0 = wait_output(r0.take(), Duration::from_secs(30));
    assert_eq!(o1.status.code(), Some(143), "{}", text(&o1));
    assert_eq!(o0.status.code(), Some(143), "{}", text(&o0));
    assert!(
        String::from_utf8_lossy(&o0.stdout).contains("stop requested: stopping after step"),
        "{}",
        text(&o0)
    );
    let last = |rank| {
        metrics(&out, rank)
            .into_iter()
            .rev()
            .find(|r| r.kind == ddp_trainer::metrics::MetricKind::Train)
            .unwrap()
            .step
    };
    assert_eq!(last(0), last(1), "replicas stopped at different steps");
    assert!(
        !out.join("model.safetensors").exists(),
        "a stopped run must not look finished"
    );
    resume(&spec, &out);
    assert_same_as_uninterrupted(&full, &out);
}

/// `--pause-at`: a run paused mid-epoch (step 20), then at an epoch's end, each time validated
/// and checkpointed there with `paused.json` and no test or final model, then resumed to the
/// end, ends with the uninterrupted run's weights.
#[test]
fn paused_at_a_step_then_an_epoch_and_resumed_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let full = uninterrupted(dir.path(), &spec);
    let out = dir.path().join("paused");
    let pause = |at: &str, resume: bool| {
        let mut c = trainer();
        c.arg(&spec)
            .args(["--standalone", "--nproc", "2", "--pause-at", at, "--out"])
            .arg(&out);
        if resume {
            c.arg("--resume");
        }
        let o = run_with_timeout(c, Duration::from_secs(120));
        assert_success(&o);
        let paused: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("paused.json")).unwrap()).unwrap();
        assert!(!out.join("model.safetensors").exists(), "{}", text(&o));
        (paused, text(&o))
    };
    let kinds = |out: &Path| -> Vec<(String, u64)> {
        metrics(out, 0)
            .into_iter()
            .filter(|m| m.kind != ddp_trainer::metrics::MetricKind::Train)
            .map(|m| (format!("{:?}", m.kind), m.step))
            .collect()
    };
    let (at, log) = pause("step:20", false);
    assert_eq!(
        at,
        serde_json::json!({"epoch": 1, "global_step": 20}),
        "{log}"
    );
    assert!(
        log.contains("paused (--pause-at): stopping after step 20"),
        "{log}"
    );
    let marks = ddp_trainer::checkpoint::list_marks(&out).unwrap();
    assert_eq!(
        marks.last().map(|m| (m.number, m.epochs)),
        Some((20, Some(1)))
    );
    assert_eq!(kinds(&out), [("Val".into(), 15), ("Val".into(), 20)]);
    let (at, log) = pause("epoch:2", true);
    assert_eq!(
        at,
        serde_json::json!({"epoch": 2, "global_step": 30}),
        "{log}"
    );
    assert!(log.contains("paused after epoch 2 (--pause-at)"), "{log}");
    let log = resume(&spec, &out);
    assert!(!out.join("paused.json").exists(), "{log}");
    let k = kinds(&out);
    assert_eq!(k.last().unwrap().0, "Test", "{k:?}");
    assert_same_as_uninterrupted(&full, &out);
}
