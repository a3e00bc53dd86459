//! The test Slurm itself (two nodes on this machine: `scripts/slurm-cluster.sh`, taken through
//! [`SlurmCluster`]) and the trainer on it: both nodes are idle, a killed node goes down and comes
//! back, and `srun` on two nodes trains the weights a local 2-replica run does, bit for bit.
//!
//! Each test skips, saying so, where there is no cluster (`DDP_TEST_SLURM` unset); with
//! `DDP_TEST_SLURM_REQUIRED=1` (CI) it fails instead. They take the cluster one at a time.

use std::path::Path;
use std::time::Duration;

use candle_core::Device;
use ddp_e2e::{SlurmCluster, repo, run_limited_with, trainer};
use ddp_trainer::test_util::worst_tensor;

#[test]
fn sinfo_lists_both_nodes_idle() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    assert_eq!(cluster.nodes(), ["ddp-n1", "ddp-n2"]);
    let states = cluster.node_states();
    assert_eq!(
        states,
        [
            ("ddp-n1".to_string(), "idle".to_string()),
            ("ddp-n2".to_string(), "idle".to_string())
        ],
        "{}",
        cluster.snapshot()
    );
}

#[test]
fn a_killed_node_goes_down_and_comes_back() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    cluster.kill_node("ddp-n2");
    assert!(!cluster.node_running("ddp-n2"));
    cluster.wait_for(
        "Slurm to mark the killed ddp-n2 down",
        Duration::from_secs(120),
        || cluster.node_state("ddp-n2").starts_with("down"),
    );
    assert_eq!(cluster.node_state("ddp-n1"), "idle");
    cluster.start_node("ddp-n2");
    cluster.wait_for(
        "the restarted ddp-n2 to be idle",
        Duration::from_secs(60),
        || cluster.node_state("ddp-n2") == "idle",
    );
    // and it runs tasks again
    let hosts = cluster.run(
        "srun",
        &[
            "-N2",
            "-n2",
            "--ntasks-per-node=1",
            "printenv",
            "SLURMD_NODENAME",
        ],
    );
    let mut hosts: Vec<&str> = hosts.lines().collect();
    hosts.sort();
    assert_eq!(hosts, ["ddp-n1", "ddp-n2"]);
}

/// A short run of the reference MNIST recipe on the embedded sample: 6 steps of 2 replicas.
const SETS: [&str; 4] = [
    "train.max_steps=6",
    "data.limit_train=1000",
    "data.limit_test=200",
    "checkpoint.every_epochs=0",
];

#[test]
fn srun_on_two_nodes_trains_the_weights_of_a_local_run() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let trainer = trainer();
    let spec = repo().join("examples/mnist.toml");
    let tmp = tempfile::tempdir().unwrap();
    let sets = SETS.iter().flat_map(|s| ["--set", s]);

    // The local run, in the cluster command's clean environment (no launcher variables).
    let local = tmp.path().join("local");
    let mut cmd = cluster.command(&trainer);
    cmd.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&local)
        .args(sets.clone())
        .env("RAYON_NUM_THREADS", "1");
    let o = run_limited_with(cmd, Duration::from_secs(300), Vec::new);
    assert!(
        o.status.is_some_and(|s| s.success()),
        "the local run failed ({:?}):\n{}{}",
        o.status,
        o.stdout,
        o.stderr
    );

    // One task on each node; rank 0's host (the rendezvous) is the first node of the job.
    let on_slurm = tmp.path().join("slurm");
    let port = ddp_trainer::launcher::free_port().unwrap();
    let mut cmd = cluster.command("srun");
    cmd.args(["-N2", "-n2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"])
        .args(["--label", "--time=5"])
        .arg(&trainer)
        .arg(&spec)
        .arg("--out")
        .arg(&on_slurm)
        .args(sets)
        .env("MASTER_PORT", port.to_string())
        .env("RAYON_NUM_THREADS", "1");
    let o = run_limited_with(cmd, Duration::from_secs(300), Vec::new);
    let log = format!("{}{}\n{}", o.stdout, o.stderr, cluster.snapshot());
    assert!(
        o.status.is_some_and(|s| s.success()),
        "srun failed ({:?}):\n{log}",
        o.status
    );
    for rank in 0..2 {
        let placed = format!("rank {rank}/2 (local 0/1) via slurm, master ddp-n1:{port}");
        assert!(
            log.lines()
                .any(|l| l.starts_with(&format!("{rank}: ")) && l.contains(&placed)),
            "no line of task {rank} says `{placed}`:\n{log}"
        );
    }
    assert_same_weights(&local, &on_slurm);
}

/// The two runs' `model.safetensors` are equal byte for byte (else: where they differ most).
fn assert_same_weights(a: &Path, b: &Path) {
    let (fa, fb) = (a.join("model.safetensors"), b.join("model.safetensors"));
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if read(&fa) != read(&fb) {
        let load = |p: &Path| {
            candle_core::safetensors::load(p, &Device::Cpu)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        let (diff, name) = worst_tensor(&load(&fa), &load(&fb));
        panic!(
            "{} and {} differ: by up to {diff} in {name}",
            fa.display(),
            fb.display()
        );
    }
}
