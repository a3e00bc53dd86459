//! `ddp scale` on an elastic run under way, end to end: the supervisor's launcher reads the
//! wanted number of replicas, the highest leaves at a step boundary and comes back, and
//! `ddp show` lists both membership changes. Bad requests are refused and change nothing.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ddp_workspaces::{Run, RunStatus, SupervisorEvent, Workspace};

/// 3 elastic replicas (at least 1) for 4 epochs of the small MNIST set.
fn spec(dir: &Path) -> PathBuf {
    TestSpec::small_mnist_cnn()
        .name("elastic")
        .set("train.epochs", 4)
        .set("train.log_every", 1)
        .set("ddp.replicas", 3)
        .set("ddp.elastic.min_replicas", 1)
        .write(dir)
}

fn run_of(ws: &Path) -> Run {
    let (runs, _) = Workspace::open(ws).unwrap().runs().unwrap();
    runs.into_iter().next().expect("a run")
}

fn memberships(run: &Run) -> Vec<SupervisorEvent> {
    run.events()
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .filter(|e| matches!(e, SupervisorEvent::Membership { .. }))
        .collect()
}

fn scale(ws: &Path, n: &str) -> std::process::Output {
    run_ddp(
        ws,
        &["scale", "latest", "--replicas", n],
        Duration::from_secs(30),
    )
}

#[test]
fn scale_moves_an_elastic_runs_replicas_out_and_back_in() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let mut c = ddp(&ws);
    c.arg("run").arg(spec(dir.path())).arg("--detach");
    ok(output(c, Duration::from_secs(30)));
    let run = run_of(&ws);
    wait_for("a few steps", Duration::from_secs(90), || {
        std::fs::read_to_string(run.dir.join("metrics/rank-0.jsonl"))
            .is_ok_and(|m| m.lines().count() >= 3)
    });
    // Out of range, and a number that is none: refused, nothing written.
    for (n, why) in [
        (
            "4",
            "scales between ddp.elastic.min_replicas = 1 and ddp.replicas = 3",
        ),
        ("0", "scales between"),
    ] {
        let o = scale(&ws, n);
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(why), "{o:?}");
    }
    assert!(!run.dir.join("scale").exists());
    let said = ok(scale(&ws, "2"));
    assert!(said.contains("scaling to 2 replicas"), "{said}");
    wait_for("replica 2 to leave", Duration::from_secs(60), || {
        !memberships(&run).is_empty()
    });
    ok(scale(&ws, "3"));
    wait_for("the run to end", Duration::from_secs(240), || {
        Run::load(&run.dir).unwrap().record.status.is_terminal()
    });
    let run = Run::load(&run.dir).unwrap();
    assert_eq!(run.record.status, RunStatus::Completed, "{:?}", run.record);
    let changes = memberships(&run);
    assert_eq!(changes.len(), 2, "{changes:?}");
    let show = ok(run_ddp(&ws, &["show", "latest"], Duration::from_secs(30)));
    assert!(
        show.contains("replica 2 left at step") && show.contains("replica 2 joined at step"),
        "{show}"
    );
    // A finished run does not scale.
    let o = scale(&ws, "2");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("only a run under way scales"),
        "{o:?}"
    );
}
