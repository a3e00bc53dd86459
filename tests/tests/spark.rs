//! Runs on a real Spark (`ddp run --on spark`), on the standalone test cluster of
//! `scripts/spark-cluster.sh` (a master and two one-core workers; `ddp_e2e::SparkCluster`): a
//! 2-task run ends with the weights of a local 2-replica run, byte for byte, and records its
//! application; bad input is refused before anything is created.

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
    let spec = repo().join("examples/mnist.toml");
    let mut args = vec!["run", spec.to_str().unwrap()];
    args.extend(options);
    for s in RUN_SETS {
        args.extend(["--set", s]);
    }
    ddp(ws, &args)
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
    assert!(!ws.join("experiments").exists(), "nothing was created");
}
