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

/// `restart.backoff_s` holds for `ddp run` as for `ddp-trainer --standalone`: a killed replica of
/// an elastic run is started again to join no sooner than the back-off after its death.
#[test]
fn a_killed_replica_rejoins_after_the_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = TestSpec::small_mnist_cnn()
        .name("elastic-backoff")
        .set("train.epochs", 8)
        .set("train.log_every", 1)
        .set("ddp.replicas", 2)
        .set("ddp.elastic.min_replicas", 1)
        .set("restart.max_restarts", 1)
        .set("restart.backoff_s", 3.0)
        .write(dir.path());
    let mut c = ddp(&ws);
    c.arg("run").arg(spec).arg("--detach");
    ok(output(c, Duration::from_secs(30)));
    let run = run_of(&ws);
    wait_for("a few steps", Duration::from_secs(90), || {
        std::fs::read_to_string(run.dir.join("metrics/rank-0.jsonl"))
            .is_ok_and(|m| m.lines().count() >= 3)
    });
    let pid_of_rank_1 = || {
        Run::load(&run.dir)
            .unwrap()
            .record
            .replica_pids
            .get(&1)
            .copied()
    };
    let first = pid_of_rank_1().expect("rank 1's pid in run.json");
    // SAFETY: a signal to the test's own replica.
    assert_eq!(unsafe { libc::kill(first as i32, libc::SIGKILL) }, 0);
    let killed = std::time::Instant::now();
    wait_for("rank 1 started again", Duration::from_secs(60), || {
        pid_of_rank_1().is_some_and(|p| p != first)
    });
    let after = killed.elapsed();
    assert!(
        after >= Duration::from_secs(3),
        "rank 1 was started again {after:?} after it was killed: restart.backoff_s = 3 not held"
    );
    wait_for("the run to end", Duration::from_secs(240), || {
        Run::load(&run.dir).unwrap().record.status.is_terminal()
    });
    let run = Run::load(&run.dir).unwrap();
    assert_eq!(run.record.status, RunStatus::Completed, "{:?}", run.record);
    let joined = memberships(&run)
        .into_iter()
        .any(|e| matches!(e, SupervisorEvent::Membership { joined, .. } if joined == [1]));
    assert!(
        joined,
        "no membership event with rank 1 joining: {:?}",
        memberships(&run)
    );
    let log = std::fs::read_to_string(run.dir.join("logs/supervisor.log")).unwrap_or_default();
    assert!(
        log.contains("restarting rank 1 in 3.0 s"),
        "the supervisor's log does not say when rank 1 restarts:\n{log}"
    );
}
