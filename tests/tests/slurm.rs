//! The test Slurm itself (two nodes on this machine: `scripts/slurm-cluster.sh`, taken through
//! [`SlurmCluster`]) and the trainer on it: both nodes are idle, a killed node goes down and comes
//! back, and `srun` on two nodes trains the weights a local 2-replica run does, bit for bit.
//! Then workspace runs on it (`ddp run --on slurm`): a run goes queued → running → completed
//! with the weights of a local run; `ddp stop` cancels its job and `ddp resume` submits it
//! again; a replica killed mid-run fails the run naming its rank, or, with restarts, the job
//! requeues itself and completes.
//!
//! Each test skips, saying so, where there is no cluster (`DDP_TEST_SLURM` unset); with
//! `DDP_TEST_SLURM_REQUIRED=1` (CI) it fails instead. They take the cluster one at a time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use candle_core::Device;
use ddp_e2e::{Outcome, SlurmCluster, binaries, repo, run_limited_with, trainer};
use ddp_trainer::test_util::worst_tensor;
use serde_json::Value;

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

/// The reference MNIST recipe on part of the embedded sample, in few steps.
const RUN_SETS: [&str; 3] = [
    "data.limit_train=1000",
    "data.limit_test=200",
    "train.epochs=1",
];

/// A workspace and the `ddp` commands run on it against the cluster.
struct Ws<'a> {
    cluster: &'a SlurmCluster,
    root: PathBuf,
}

impl<'a> Ws<'a> {
    /// The workspace `name` in `tmp`.
    fn new(cluster: &'a SlurmCluster, tmp: &tempfile::TempDir, name: &str) -> Ws<'a> {
        Ws {
            cluster,
            root: tmp.path().join(name),
        }
    }

    fn ddp(&self, args: &[&str]) -> Outcome {
        let mut cmd: Command = self.cluster.command(binaries().ddp);
        cmd.arg("--workspace")
            .arg(&self.root)
            .args(args)
            .env("DDP_SLURM_POLL_MAX_S", "1")
            .env("RAYON_NUM_THREADS", "1");
        // Generous: a local reference run shares the 2 cores with other tests' trainings.
        run_limited_with(cmd, Duration::from_secs(600), Vec::new)
    }

    /// `ddp ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.ddp(args);
        assert!(
            o.status.is_some_and(|s| s.success()),
            "`ddp {}` failed ({:?}):\n{}{}",
            args.join(" "),
            o.status,
            o.stdout,
            o.stderr
        );
        o.stdout
    }

    /// `ddp run examples/mnist.toml OPTIONS --set SET...` (the reference MNIST recipe), which
    /// must succeed; its stdout.
    fn run_mnist(&self, options: &[&str], sets: &[&str]) -> String {
        let spec = repo().join("examples/mnist.toml");
        let mut args = vec!["run", spec.to_str().unwrap()];
        args.extend(options);
        for s in sets {
            args.extend(["--set", s]);
        }
        self.ok(&args)
    }

    /// [`Ws::run_mnist`] on Slurm, one replica on each of the 2 nodes, with `options` added;
    /// `ddp run`'s stdout.
    fn submit_mnist(&self, options: &[&str], sets: &[&str]) -> String {
        let mut all = vec!["--on", "slurm", "--nodes", "2"];
        all.extend(options);
        self.run_mnist(&all, sets)
    }

    /// The one run of the workspace's experiment `mnist-cnn`.
    fn run_dir(&self) -> PathBuf {
        let runs = self.root.join("experiments/mnist-cnn/runs");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
            .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        dirs.pop().expect("a run")
    }

    /// Waits until the run's status is `want`, then returns its record.
    fn wait_status(&self, want: &str, limit: Duration) -> Value {
        let dir = self.run_dir();
        let start = Instant::now();
        loop {
            let record = record(&dir);
            if record["status"] == want {
                return record;
            }
            if start.elapsed() > limit {
                panic!(
                    "the run did not become {want} within {limit:?}: run.json {record:#}\nevents:\n{}\njob log:\n{}\n{}",
                    read(&dir.join("events.jsonl")),
                    job_logs(&dir),
                    self.cluster.snapshot()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn record(dir: &Path) -> Value {
    serde_json::from_str(&read(&dir.join("run.json"))).unwrap_or(Value::Null)
}

/// The batch script's and the ranks' logs.
fn job_logs(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir.join("logs")).into_iter().flatten() {
        let p = e.unwrap().path();
        out.push_str(&format!("--- {}\n{}", p.display(), read(&p)));
    }
    out
}

/// The events of the run (`events.jsonl`), in order.
fn event_records(dir: &Path) -> Vec<Value> {
    read(&dir.join("events.jsonl"))
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// The event names of the run, in order.
fn events(dir: &Path) -> Vec<String> {
    event_records(dir)
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_two_node_run_completes_with_the_weights_of_a_local_run() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let local = Ws::new(&cluster, &tmp, "local");
    local.run_mnist(&["--replicas", "2"], &RUN_SETS);
    assert_eq!(record(&local.run_dir())["status"], "completed");

    let ws = Ws::new(&cluster, &tmp, "slurm");
    // The port the job's id gives is taken (as by another cluster's job on the node): the
    // script passes over it.
    let config = cluster.run("scontrol", &["show", "config"]);
    let next: u32 = config
        .lines()
        .find_map(|l| l.strip_prefix("NEXT_JOB_ID"))
        .and_then(|v| v.trim_start_matches([' ', '=']).trim().parse().ok())
        .unwrap_or_else(|| panic!("no NEXT_JOB_ID in scontrol show config:\n{config}"));
    let derived = 20000 + next % 20000;
    let _taken = std::net::TcpListener::bind(("0.0.0.0", derived as u16))
        .unwrap_or_else(|e| panic!("holding port {derived}: {e}"));
    let out = ws.submit_mnist(&["--time", "10"], &RUN_SETS);
    assert!(out.contains("submitted Slurm job"), "{out}");
    let dir = ws.run_dir();
    let script = read(&dir.join("job.sbatch"));
    assert!(script.contains("#SBATCH --nodes=2\n") && script.contains("#SBATCH --time=10\n"));
    let job_id = record(&dir)["slurm"]["job_id"]
        .as_str()
        .expect("run.json records the job id")
        .to_string();
    assert_eq!(job_id, next.to_string());
    let done = ws.wait_status("completed", Duration::from_secs(300));
    assert_eq!(done["slurm"]["state"], "COMPLETED", "{done:#}");
    assert_eq!(done["slurm"]["node_list"], "ddp-n[1-2]", "{done:#}");
    let out = read(&dir.join(format!("logs/slurm-{job_id}.out")));
    assert!(
        out.contains(&format!("rendezvous port {}", derived + 1)),
        "{out}"
    );
    assert_eq!(events(&dir), ["queued", "started", "completed"]);
    for rank in 0..2 {
        let log = read(&dir.join(format!("logs/rank-{rank}.log")));
        assert!(
            log.contains(&format!("rank {rank}/2")),
            "rank {rank}:\n{log}"
        );
    }
    let show = ws.ok(&["show", "latest"]);
    assert!(
        show.contains(&format!("slurm       job {job_id} COMPLETED on ddp-n[1-2]")),
        "{show}"
    );
    assert_same_weights(&local.run_dir(), &dir);
}

#[test]
fn stop_cancels_the_job_and_resume_submits_it_again() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ws = Ws::new(&cluster, &tmp, "ws");
    ws.submit_mnist(&[], &["data.limit_test=200", "train.epochs=2"]);
    let dir = ws.run_dir();
    ws.wait_status("running", Duration::from_secs(120));
    // Once it has trained a little, stop it: the replicas checkpoint and the job is cancelled.
    let metrics = dir.join("metrics/rank-0.jsonl");
    let start = Instant::now();
    while read(&metrics).lines().count() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no training records:\n{}",
            job_logs(&dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = ws.ok(&["stop", "latest"]);
    assert!(out.contains("cancelled Slurm job"), "{out}");
    let stopped = ws.wait_status("stopped", Duration::from_secs(120));
    assert_eq!(stopped["slurm"]["state"], "CANCELLED", "{stopped:#}");
    assert!(stopped.get("error").is_none(), "{stopped:#}");
    let first_job = stopped["slurm"]["job_id"].clone();

    let out = ws.ok(&["resume", "latest"]);
    assert!(out.contains("submitted Slurm job"), "{out}");
    let done = ws.wait_status("completed", Duration::from_secs(300));
    assert_ne!(done["slurm"]["job_id"], first_job, "{done:#}");
    assert!(
        job_logs(&dir).contains("resuming"),
        "the second job did not resume:\n{}",
        job_logs(&dir)
    );
}

#[test]
fn a_killed_replica_fails_the_run_naming_its_rank_or_requeues_it() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for (restarts, end) in [(0, "failed"), (1, "completed")] {
        let ws = Ws::new(&cluster, &tmp, &format!("ws-{restarts}"));
        let restart = format!("restart.max_restarts={restarts}");
        ws.submit_mnist(&[], &["data.limit_test=200", "train.epochs=2", &restart]);
        let dir = ws.run_dir();
        ws.wait_status("running", Duration::from_secs(120));
        let pid = replica_pid(&dir, 1, Duration::from_secs(120));
        // SAFETY: kill(2) of the replica we found.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let last = ws.wait_status(end, Duration::from_secs(300));
        if restarts == 0 {
            let error = last["error"].as_str().unwrap_or("");
            assert!(
                error.contains("rank 1 failed (logs/rank-1.log)"),
                "{last:#}\n{}",
                job_logs(&dir)
            );
        } else {
            assert_eq!(last["slurm"]["requeues"], 1, "{last:#}");
            assert!(events(&dir).contains(&"restarting".to_string()));
        }
    }
}

/// The pid of the replica of `rank` of the run in `dir` (a process whose command line names
/// the run folder and whose environment says `SLURM_PROCID=rank`).
fn replica_pid(dir: &Path, rank: usize, limit: Duration) -> i32 {
    let start = Instant::now();
    let want = format!("SLURM_PROCID={rank}");
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if !cmdline.contains("__replica") || !cmdline.contains(dir.to_str().unwrap()) {
                continue;
            }
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
                // It has trained at least one step.
                if read(&dir.join(format!("metrics/rank-{rank}.jsonl")))
                    .lines()
                    .count()
                    > 0
                {
                    return pid;
                }
            }
        }
        assert!(
            start.elapsed() < limit,
            "no replica of rank {rank} in {} trained within {limit:?}:\n{}",
            dir.display(),
            job_logs(dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_job_warned_of_its_time_limit_checkpoints_requeues_and_completes() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // slurmctld checks time limits every 30 s and sends the warning once the time left is under
    // the warning's lead plus those 30 s: with a 1-minute limit and a 40 s lead, each attempt is
    // warned at the controller's first check after it starts (within 30 s). The training (about
    // 50 s on 2 cores) is longer than that, so the first attempt cannot finish it: its replicas
    // checkpoint mid-epoch and the job requeues itself until the run is done.
    let sets = ["data.limit_test=200", "train.epochs=10"];
    let local = Ws::new(&cluster, &tmp, "local");
    local.run_mnist(&["--replicas", "2"], &sets);
    let ws = Ws::new(&cluster, &tmp, "slurm");
    ws.submit_mnist(
        &["--time", "1"],
        &[&sets[..], &["slurm.warn_s=40", "restart.max_restarts=12"]].concat(),
    );
    let dir = ws.run_dir();
    let done = ws.wait_status("completed", Duration::from_secs(900));
    let log = job_logs(&dir);
    assert!(
        log.contains("warned by Slurm") && log.contains("resuming"),
        "the job was not warned and resumed:\n{log}"
    );
    assert!(done["slurm"]["requeues"].as_u64().unwrap() >= 1, "{done:#}");
    // The stop checkpoint lies inside an epoch (later epochs' checkpoints replace it on disk).
    let resumed_inside_an_epoch = log.lines().any(|l| {
        l.starts_with("resuming from") && l.contains("-step-") && l.contains("into epoch")
    });
    assert!(
        resumed_inside_an_epoch,
        "no resume from a mid-epoch checkpoint:\n{log}"
    );
    assert_same_weights(&local.run_dir(), &dir);
}

#[test]
fn a_node_failure_requeues_or_fails_the_run_as_slurm_decides() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ws = Ws::new(&cluster, &tmp, "ws");
    ws.submit_mnist(
        &[],
        &[
            "data.limit_test=200",
            "train.epochs=20",
            "restart.max_restarts=2",
        ],
    );
    let dir = ws.run_dir();
    ws.wait_status("running", Duration::from_secs(120));
    replica_pid(&dir, 1, Duration::from_secs(120));
    // The node's slurmd dies (SIGKILL): Slurm marks the node down and decides the job's fate.
    cluster.kill_node("ddp-n2");
    let start = Instant::now();
    let fate = loop {
        let r = record(&dir);
        let requeued = r["slurm"]["requeues"].as_u64().unwrap_or(0) >= 1;
        if r["status"] == "failed" || (r["status"] == "queued" && requeued) {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "run.json did not follow the node failure: {r:#}\n{}",
            cluster.snapshot()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "after the node failure: {} ({})",
        fate["status"],
        fate["error"]
            .as_str()
            .or(fate["slurm"]["reason"].as_str())
            .unwrap_or("")
    );
    if fate["status"] == "failed" {
        let error = fate["error"].as_str().unwrap_or("");
        assert!(error.starts_with("Slurm: NODE_FAIL"), "{fate:#}");
    } else {
        // Requeued: Slurm's reason says why it waits (the node is down), and it completes
        // once the node is back.
        assert!(fate["slurm"]["reason"].is_string(), "{fate:#}");
        assert!(events(&dir).contains(&"restarting".to_string()));
        cluster.start_node("ddp-n2");
        ws.wait_status("completed", Duration::from_secs(600));
    }
}

/// An elastic run (`ddp.elastic.min_replicas = 1`) on 2 nodes: the second node dies (its
/// slurmd and the replica on it, SIGKILL). The job is `--no-kill`, so it keeps running on the
/// first node, whose replica re-forms the group alone (the store is the batch step's, on the
/// first node) and completes the run without a requeue.
#[test]
fn an_elastic_run_goes_on_when_a_node_dies() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ws = Ws::new(&cluster, &tmp, "ws");
    ws.submit_mnist(
        &[],
        &[
            "data.limit_train=3000",
            "data.limit_test=200",
            "train.epochs=3",
            "ddp.elastic.min_replicas=1",
            "restart.max_restarts=0",
        ],
    );
    let dir = ws.run_dir();
    ws.wait_status("running", Duration::from_secs(120));
    replica_pid(&dir, 1, Duration::from_secs(120));
    cluster.kill_node("ddp-n2");
    let done = ws.wait_status("completed", Duration::from_secs(300));
    assert_eq!(done["slurm"]["state"], "COMPLETED", "{done:#}");
    assert_eq!(
        done["slurm"]["requeues"].as_u64().unwrap_or(0),
        0,
        "{done:#}"
    );
    let membership: Vec<Value> = event_records(&dir)
        .into_iter()
        .filter(|e| e["event"] == "membership")
        .collect();
    assert_eq!(membership.len(), 1, "{membership:?}\n{}", job_logs(&dir));
    assert_eq!(membership[0]["left"], serde_json::json!([1]));
    assert_eq!(membership[0]["world_after"], 1);
    assert!(dir.join("model.safetensors").exists());
    // srun saw the node fail and went on; rank 0 went on alone.
    let logs = job_logs(&dir);
    assert!(
        logs.contains("membership: replica 1 left after step"),
        "{logs}"
    );
}
