//! `ddp run SPEC --trainer PATH`: the supervisor launches PATH as the replicas (checked before
//! anything is created), run.json and `ddp show` record it, and `ddp resume` uses it again.

mod common;
use common::*;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ddp_workspaces::{RunStatus, Workspace};

/// The MNIST CNN on 512 samples, one epoch on 2 replicas.
fn spec(dir: &Path) -> PathBuf {
    TestSpec::mnist("mnist-cnn")
        .name("own-trainer")
        .set("data.val_fraction", 0.1)
        .set("data.limit_train", 512)
        .set("data.limit_test", 128)
        .set("train.epochs", 1)
        .set("train.batch_size", 32)
        .set("ddp.replicas", 2)
        .set("ddp.timeout_s", 30)
        .write(dir)
}

/// A trainer executable of our own: a script that leaves a mark, then runs the built-in replica.
fn own_trainer(dir: &Path) -> PathBuf {
    let p = dir.join("my-trainer");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\necho \"my-trainer $RANK\" >> '{}'\nexec '{}' __replica \"$@\"\n",
            dir.join("marks").display(),
            env!("CARGO_BIN_EXE_ddp")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// `ddp run SPEC --trainer TRAINER` on `ws`.
fn run_with_trainer(ws: &Path, spec: &Path, trainer: &Path, limit: Duration) -> Output {
    run_ddp(
        ws,
        &[
            "run",
            spec.to_str().unwrap(),
            "--trainer",
            trainer.to_str().unwrap(),
        ],
        limit,
    )
}

#[test]
fn the_replicas_run_the_given_trainer_and_the_run_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let trainer = own_trainer(dir.path());
    let spec = spec(dir.path());
    let out = ok(run_with_trainer(
        &ws,
        &spec,
        &trainer,
        Duration::from_secs(180),
    ));
    assert!(out.contains("completed"), "{out}");
    let marks = std::fs::read_to_string(dir.path().join("marks")).unwrap();
    assert!(
        marks.contains("my-trainer 0") && marks.contains("my-trainer 1"),
        "{marks}"
    );
    let (runs, _) = Workspace::open(&ws).unwrap().runs().unwrap();
    assert_eq!(runs[0].record.status, RunStatus::Completed);
    assert_eq!(
        runs[0].record.trainer.as_deref(),
        Some(trainer.canonicalize().unwrap().as_path())
    );
    let show = ok(run_ddp(&ws, &["show", "latest"], Duration::from_secs(30)));
    assert!(
        show.contains(&format!(
            "trainer     {}",
            trainer.canonicalize().unwrap().display()
        )),
        "{show}"
    );
}

#[test]
fn a_missing_or_non_executable_trainer_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path());
    let missing = dir.path().join("nope");
    let o = run_with_trainer(&ws, &spec, &missing, Duration::from_secs(30));
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--trainer") && text(&o).contains("nope"),
        "{}",
        text(&o)
    );
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "not a program").unwrap();
    let o = run_with_trainer(&ws, &spec, &plain, Duration::from_secs(30));
    assert!(text(&o).contains("not an executable file"), "{}", text(&o));
    assert!(!ws.exists(), "nothing may be created");
}

#[test]
fn a_custom_model_without_a_trainer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path());
    let text_ = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("mnist-cnn", "custom");
    std::fs::write(&spec, text_).unwrap();
    let o = run_ddp(
        &ws,
        &["run", spec.to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("--trainer PATH"), "{}", text(&o));
    assert!(!ws.exists());
}

#[test]
fn every_run_of_a_sweep_runs_the_given_trainer() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let trainer = own_trainer(dir.path());
    let spec = spec(dir.path());
    let out = ok(run_ddp(
        &ws,
        &[
            "sweep",
            spec.to_str().unwrap(),
            "--grid",
            "train.lr=0.001,0.002",
            "--set",
            "ddp.replicas=1",
            "--trainer",
            trainer.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    ));
    let (runs, _) = Workspace::open(&ws).unwrap().runs().unwrap();
    assert_eq!(runs.len(), 2, "{out}");
    for r in &runs {
        assert_eq!(r.record.status, RunStatus::Completed, "{out}");
        assert!(r.record.trainer.is_some());
    }
    let marks = std::fs::read_to_string(dir.path().join("marks")).unwrap();
    assert_eq!(marks.lines().count(), 2, "{marks}");
}
