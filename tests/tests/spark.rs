//! Runs on a real Spark (`ddp run --on spark`), on the standalone test cluster of
//! `scripts/spark-cluster.sh` (a master and two one-core workers; `ddp_e2e::SparkCluster`): a
//! 2-task run ends with the weights of a local 2-replica run, byte for byte, and records its
//! application, as does a run of 2 tasks × 2 GPUs (4 replicas); `ddp stop` checkpoints and ends
//! the application, `ddp resume` goes on from there; a replica killed mid-run makes Spark run
//! the stage again, which resumes from the checkpoint; bad input (options, spec, no PySpark, an
//! unreachable master, more tasks than the cluster runs at once) is refused with exit 2, before
//! anything is created where it can be known then.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ddp_e2e::{Outcome, SparkCluster, binaries, python, repo, run_limited_with};
use serde_json::Value;

/// The reference MNIST recipe on part of the embedded sample, one epoch, one thread a replica.
const RUN_SETS: [&str; 4] = [
    "data.limit_train=600",
    "data.limit_test=100",
    "train.epochs=1",
    "ddp.threads=1",
];

/// `ddp --workspace WS ARGS` with Spark's client from the test venv.
fn ddp(ws: &Path, args: &[&str]) -> Outcome {
    let mut cmd = Command::new(binaries().ddp);
    cmd.arg("--workspace")
        .arg(ws)
        .args(args)
        .env("DDP_SPARK_PYTHON", python());
    run_limited_with(cmd, Duration::from_secs(600), Vec::new)
}

fn run_mnist(ws: &Path, options: &[&str]) -> Outcome {
    run_mnist_with(ws, options, &RUN_SETS)
}

fn run_mnist_with(ws: &Path, options: &[&str], sets: &[&str]) -> Outcome {
    let spec = repo().join("examples/mnist.toml");
    let mut args = vec!["run", spec.to_str().unwrap()];
    args.extend(options);
    for s in sets {
        args.extend(["--set", s]);
    }
    ddp(ws, &args)
}

/// Four epochs of the whole sample (7,200 training digits): long enough to kill a replica
/// after the first epoch's checkpoint with three epochs to go.
const LONGER: [&str; 4] = [
    "data.limit_test=100",
    "train.epochs=4",
    "ddp.threads=1",
    "ddp.timeout_s=60",
];

/// Twenty epochs: a run that is still training when it is stopped (it never gets far).
const LONGEST: [&str; 3] = ["data.limit_test=100", "train.epochs=20", "ddp.threads=1"];

/// Waits (at most 180 s) until `ready` holds for the run folder `dir`.
fn wait_for(dir: &Path, what: &str, ready: impl Fn(&Path) -> bool) {
    let started = std::time::Instant::now();
    while !ready(dir) {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "waited 180 s for {what} in {}; run.json: {}\nrank 0's log:\n{}",
            dir.display(),
            std::fs::read_to_string(dir.join("run.json")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("logs/rank-0.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The checkpoints written so far.
fn checkpoints(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("checkpoints"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.contains(".state.") && n.ends_with(".safetensors"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Replicas of the run in `dir` still running here (the executors' children): pid and rank.
fn replicas_of(dir: &Path) -> Vec<(i32, String)> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains("__replica") || !cmdline.contains(&needle) {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let rank = environ
            .split(|&b| b == 0)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .find_map(|v| v.strip_prefix("RANK="))
            .unwrap_or("?")
            .to_string();
        found.push((pid, rank));
    }
    found
}

fn ok(o: Outcome) -> String {
    assert!(
        o.status.is_some_and(|s| s.success()),
        "failed ({:?}):\n{}{}",
        o.status,
        o.stdout,
        o.stderr
    );
    o.stdout
}

/// The one run of the workspace.
fn run_dir(ws: &Path) -> PathBuf {
    let runs = ws.join("experiments/mnist-cnn/runs");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs.pop().expect("a run")
}

fn record(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

#[test]
fn a_two_task_run_on_the_cluster_ends_with_the_weights_of_a_local_run() {
    let Some(cluster) = SparkCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    ok(run_mnist(&local, &["--replicas", "2"]));
    let ws = tmp.path().join("spark");
    let out = ok(run_mnist(
        &ws,
        &["--on", "spark", "--master", &cluster.master, "--tasks", "2"],
    ));
    assert!(out.contains("completed"), "{out}");
    let dir = run_dir(&ws);
    let r = record(&dir);
    assert_eq!(r["status"], "completed", "{r:#}");
    assert_eq!(r["replicas"], 2, "{r:#}");
    assert_eq!(r["spark"]["master"], cluster.master.as_str(), "{r:#}");
    assert_eq!(r["spark"]["tasks"], 2, "{r:#}");
    let app = r["spark"]["app_id"].as_str().unwrap_or_default();
    assert!(app.starts_with("app-"), "{r:#}");
    for rank in 0..2 {
        let log = std::fs::read_to_string(dir.join(format!("logs/rank-{rank}.log"))).unwrap();
        assert!(
            log.contains(&format!("rank {rank}/2")),
            "rank {rank}:\n{log}"
        );
    }
    let weights = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(
        weights(&run_dir(&local)) == weights(&dir),
        "the Spark run's weights differ from the local run's"
    );
}

#[test]
fn two_tasks_of_two_gpus_run_four_replicas_with_the_weights_of_a_local_run() {
    let Some(cluster) = SparkCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    ok(run_mnist(&local, &["--replicas", "4"]));
    // The test cluster's workers offer two GPU slots each (scripts/spark-cluster.sh): one task
    // on each, its replicas started by the trainer's launcher (on the CPU here).
    let ws = tmp.path().join("spark");
    let options = [
        "--on",
        "spark",
        "--master",
        &cluster.master,
        "--tasks",
        "2",
        "--gpus-per-task",
        "2",
        "--replicas",
        "4",
        "--spark-conf",
        "spark.executor.resource.gpu.amount=2",
    ];
    ok(run_mnist(&ws, &options));
    let dir = run_dir(&ws);
    let r = record(&dir);
    assert_eq!(r["status"], "completed", "{r:#}");
    for rank in 0..4 {
        let log = std::fs::read_to_string(dir.join(format!("logs/rank-{rank}.log"))).unwrap();
        assert!(
            log.contains(&format!("rank {rank}/4")),
            "rank {rank}:\n{log}"
        );
    }
    for task in 0..2 {
        let log = std::fs::read_to_string(dir.join(format!("logs/spark-task-{task}.log"))).unwrap();
        let ranks = format!(
            "node {task}/2 via spark: ranks {}-{} of 4",
            task * 2,
            task * 2 + 1
        );
        assert!(log.contains(&ranks), "task {task}:\n{log}");
    }
    let weights = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(
        weights(&run_dir(&local)) == weights(&dir),
        "the Spark run's weights differ from the local run's"
    );
}

#[test]
fn spark_options_without_on_spark_and_a_bad_spark_table_are_refused_creating_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let o = run_mnist(&ws, &["--master", "local[2]"]);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("--master applies to runs on Spark: add --on spark"),
        "{}",
        o.stderr
    );
    let o = run_mnist(&ws, &["--on", "spark", "--tasks", "3", "--replicas", "2"]);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("ddp.replicas"), "{}", o.stderr);
    // No PySpark where the client is looked for: named, with what to install.
    let spec = repo().join("examples/mnist.toml");
    let mut cmd = Command::new(binaries().ddp);
    cmd.arg("--workspace")
        .arg(&ws)
        .args(["run", spec.to_str().unwrap(), "--on", "spark"])
        .env("DDP_SPARK_PYTHON", "/nonexistent/python3");
    let o = run_limited_with(cmd, Duration::from_secs(60), Vec::new);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("pip install pyspark"), "{}", o.stderr);
    // PySpark but no Java: named, with what to install and JAVA_HOME.
    let mut cmd = Command::new(binaries().ddp);
    cmd.arg("--workspace")
        .arg(&ws)
        .args(["run", spec.to_str().unwrap(), "--on", "spark"])
        .env("DDP_SPARK_PYTHON", python())
        .env("JAVA_HOME", "/nonexistent/jdk");
    let o = run_limited_with(cmd, Duration::from_secs(60), Vec::new);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(
        o.stderr.contains("no Java (/nonexistent/jdk/bin/java)")
            && o.stderr.contains("openjdk-17-jre-headless")
            && o.stderr.contains("JAVA_HOME"),
        "{}",
        o.stderr
    );
    assert!(!ws.join("experiments").exists(), "nothing was created");
}

#[test]
fn ddp_stop_checkpoints_and_ends_the_application_and_ddp_resume_goes_on() {
    let Some(cluster) = SparkCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let options = ["--on", "spark", "--master", &cluster.master, "--detach"];
    ok(run_mnist_with(&ws, &options, &LONGEST));
    let dir = run_dir(&ws);
    // Queued while the application waits for its executors, with Spark's reason.
    let events = || std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
    wait_for(&dir, "a step of the run", |d| {
        std::fs::read_to_string(d.join("logs/rank-0.log")).is_ok_and(|l| l.contains(" step "))
    });
    assert!(
        events().contains("\"waiting_for\":\"Spark application: submitted to spark://"),
        "{}",
        events()
    );
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let stopped = ok(ddp(&ws, &["stop", &id]));
    assert!(stopped.contains("stopped"), "{stopped}");
    let r = record(&dir);
    assert_eq!(r["status"], "stopped", "{r:#}");
    // The replicas checkpointed where they stopped, and none is left.
    let saved = checkpoints(&dir);
    assert!(
        saved.iter().any(|c| c.contains("-step-")),
        "no checkpoint at the stop: {saved:?}"
    );
    wait_for(&dir, "the replicas to end", |d| replicas_of(d).is_empty());
    let first_app = r["spark"]["app_id"].as_str().unwrap().to_string();

    // Resumed: a new application, whose replicas go on from the stop's checkpoint; stopped again.
    let log_before = std::fs::read_to_string(dir.join("logs/rank-0.log"))
        .unwrap()
        .len();
    ok(ddp(&ws, &["resume", &id, "--detach"]));
    let stop_checkpoint = saved.iter().find(|c| c.contains("-step-")).unwrap().clone();
    wait_for(
        &dir,
        "the resumed replicas to go on from the checkpoint",
        |d| {
            let log = std::fs::read_to_string(d.join("logs/rank-0.log")).unwrap_or_default();
            log.get(log_before..).is_some_and(|new| {
                new.contains("resuming from") && new.contains(stop_checkpoint.as_str())
            })
        },
    );
    let stopped = ok(ddp(&ws, &["stop", &id]));
    assert!(stopped.contains("stopped"), "{stopped}");
    let r = record(&dir);
    assert_eq!(r["status"], "stopped", "{r:#}");
    assert_ne!(r["spark"]["app_id"].as_str().unwrap(), first_app, "{r:#}");
}

#[test]
fn a_replica_killed_mid_run_makes_spark_run_the_stage_again_from_the_checkpoint() {
    let Some(cluster) = SparkCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let options = ["--on", "spark", "--master", &cluster.master, "--detach"];
    ok(run_mnist_with(&ws, &options, &LONGER));
    let dir = run_dir(&ws);
    wait_for(&dir, "the first epoch's checkpoint", |d| {
        checkpoints(d).iter().any(|c| c.starts_with("epoch-0001"))
    });
    let replicas = replicas_of(&dir);
    let (pid, _) = replicas
        .iter()
        .find(|(_, rank)| rank == "1")
        .unwrap_or_else(|| panic!("no replica of rank 1 among {replicas:?}"));
    // SAFETY: a replica of this test's run.
    unsafe { libc::kill(*pid, libc::SIGKILL) };
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    wait_for(&dir, "the run to end", |d| {
        let r = record(d);
        ["completed", "failed", "stopped"].contains(&r["status"].as_str().unwrap_or(""))
    });
    let r = record(&dir);
    assert_eq!(r["status"], "completed", "{r:#}");
    assert_eq!(r["restarts"], 1, "{r:#}");
    assert_eq!(r["spark"]["stage_retries"], 1, "{r:#}");
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(
        events.contains("Spark ran the barrier stage again"),
        "{events}"
    );
    // One application: Spark's retry, not a new submission; the second attempt went on from
    // epoch 1's checkpoint (it trained epochs 2 to 4 only).
    let log = std::fs::read_to_string(dir.join("logs/rank-0.log")).unwrap();
    let attempts: Vec<&str> = log.split("restart 1 |").collect();
    assert_eq!(attempts.len(), 2, "one restart in rank 0's log:\n{log}");
    assert!(
        !attempts[1].contains("epoch 1/4 val") && attempts[1].contains("epoch 4/4 val"),
        "the second attempt did not resume from epoch 1:\n{log}"
    );
    let shown = ok(ddp(&ws, &["show", &id]));
    assert!(
        shown.contains(r["spark"]["app_id"].as_str().unwrap()),
        "{shown}"
    );
}

#[test]
fn an_unreachable_master_or_too_few_task_slots_end_with_exit_2() {
    let Some(cluster) = SparkCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    // Nothing listens there: refused before the run is created.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("spark://127.0.0.1:{port}");
    let o = run_mnist(&ws, &["--on", "spark", "--master", &nowhere]);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(
        o.stderr.contains("cannot reach the Spark master"),
        "{}",
        o.stderr
    );
    let o = run_mnist(&ws, &["--on", "spark", "--master", "local[1]"]);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("runs 1 task(s) at once"), "{}", o.stderr);
    assert!(!ws.join("experiments").exists(), "nothing was created");

    // Three tasks on a cluster of two cores: queued for spark.wait_s, then failed naming why.
    let mut sets = RUN_SETS.to_vec();
    sets.push("spark.wait_s=4");
    let options = [
        "--on",
        "spark",
        "--master",
        &cluster.master,
        "--replicas",
        "3",
    ];
    let o = run_mnist_with(&ws, &options, &sets);
    assert_eq!(
        o.status.and_then(|s| s.code()),
        Some(2),
        "{}{}",
        o.stdout,
        o.stderr
    );
    let dir = run_dir(&ws);
    let r = record(&dir);
    assert_eq!(r["status"], "failed", "{r:#}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("3 task slots") && error.contains("spark.wait_s"),
        "{r:#}"
    );
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains("waiting for executors"), "{events}");
    assert!(replicas_of(&dir).is_empty());
}
