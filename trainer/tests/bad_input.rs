//! Bad input, end to end: every case drives the real `ddp-trainer` binary and checks the exit code
//! (2 for configuration errors: spec, data, model, environment; 1 for runtime failures: peers,
//! rendezvous), that the message names the file / key / rank and says what to do, that nothing
//! hangs, and that nothing half-written is left in the run folder (no `model.safetensors`, no
//! checkpoint, no `.tmp` file).
//!
//! Most cases are rows of two tables, [`CONFIG_ERRORS`] and [`RENDEZVOUS_FAILURES`], each run by
//! one test; a failure names its case. The two cases that kill a replica mid-training are tests
//! of their own.

mod common;
use common::*;

use std::process::Stdio;
use std::time::{Duration, Instant};

#[path = "bad_input/cases.rs"]
mod cases;
#[path = "bad_input/check.rs"]
mod check;

use cases::{CONFIG_ERRORS, Case, RENDEZVOUS_FAILURES};
use check::{assert_exit, assert_nothing_half_written, assert_says, stderr};

/// A spec body that trains long enough for a replica to be killed mid-training.
const LONG: &str = "limit_train = 4096\nlimit_test = 64\n[train]\nepochs = 3\nlog_every = 1\n[ddp]\ntimeout_s = 300\n[checkpoint]\nevery_epochs = 1\n";

#[test]
fn config_errors() {
    run_cases(CONFIG_ERRORS);
}

#[test]
fn rendezvous_failures() {
    run_cases(RENDEZVOUS_FAILURES);
}

/// Runs every case (each in a fresh directory), then fails naming the cases that failed; each
/// failure's own message names its case too.
fn run_cases(cases: &[Case]) {
    let failed: Vec<&str> = cases
        .iter()
        .filter(|case| std::panic::catch_unwind(|| case.check()).is_err())
        .map(|case| case.name)
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

// ---------------------------------------------------------------------------------------------
// A replica killed mid-training (exit code 1 or EXIT_RESTART)
// ---------------------------------------------------------------------------------------------

#[test]
fn peer_killed_mid_training_is_named_at_once() {
    let case = "peer_killed_mid_training_is_named_at_once";
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", LONG);
    let out = dir.path().join("out");
    let port = free_port();
    let mut r0 = ChildGuard::new(spawn_rank(&spec, &out, 0, 2, port, &[], &[]));
    let mut r1 = ChildGuard::new(spawn_rank(&spec, &out, 1, 2, port, &[], &[]));
    wait_for_train_record(&out, 0, &mut r0, Duration::from_secs(120));
    r1.child().kill().unwrap();
    let killed = Instant::now();
    let o = wait_output(r0.take(), Duration::from_secs(60));
    let took = killed.elapsed();
    let _ = r1.take().wait();
    // A lost peer is the canonical transient failure: the "please restart" exit code.
    assert_exit(case, &o, ddp_trainer::error::EXIT_RESTART);
    assert!(
        took < Duration::from_secs(10),
        "rank 0 took {took:?} to notice (timeout_s = 300)\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(case, &o, &e, "failed on rank 0 (waiting for rank 1)");
    assert_says(case, &o, &e, "connection closed by rank 1");
    assert_nothing_half_written(case, &out);
}

#[test]
fn standalone_replica_killed_stops_the_others() {
    let case = "standalone_replica_killed_stops_the_others";
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", LONG);
    let out = dir.path().join("out");
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out);
    let mut launcher = ChildGuard::new(
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_train_record(&out, 0, &mut launcher, Duration::from_secs(120));
    let replicas = child_pids(launcher.id());
    assert_eq!(
        replicas.len(),
        2,
        "expected 2 replicas under the launcher, found {replicas:?}"
    );
    let rank1 = *replicas
        .iter()
        .find(|&&p| proc_env(p, "RANK").as_deref() == Some("1"))
        .unwrap_or_else(|| panic!("no replica with RANK=1 among {replicas:?}"));
    // SAFETY: plain kill(2) on a pid we just found as our launcher's child.
    assert_eq!(unsafe { libc::kill(rank1 as i32, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let o = wait_output(launcher.take(), Duration::from_secs(60));
    let took = killed.elapsed();
    assert_exit(case, &o, 1);
    assert!(
        took < Duration::from_secs(10),
        "the launcher took {took:?} to stop\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(
        case,
        &o,
        &e,
        &format!("rank 1 (pid {rank1}) was killed by signal 9 (SIGKILL)"),
    );
    assert_says(case, &o, &e, "logs/rank-1.log");
    let deadline = Instant::now() + Duration::from_secs(2);
    while replicas.iter().any(|&p| process_alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = replicas
        .iter()
        .copied()
        .filter(|&p| process_alive(p))
        .collect();
    assert!(
        alive.is_empty(),
        "replicas still running after the launcher exited: {alive:?}"
    );
    assert_nothing_half_written(case, &out);
}
