//! Elastic runs (`ddp.elastic`) through the real launcher (`ddp-trainer --standalone`) and
//! processes: replicas killed with SIGKILL mid-run, rank 0 among them, and the survivors going
//! on from their memory. No checkpoint is ever written (`checkpoint.every_epochs = 0`), so none
//! can be read; each epoch's samples over all replicas still add up to the data set; the test
//! accuracy stays within a point of an undisturbed run's.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;
use ddp_trainer::metrics::{MetricKind, MetricRecord, read_metrics};

/// Training samples: 20 steps an epoch for 4 replicas of 16.
const TRAIN: usize = 1280;
const REPLICAS: usize = 4;

/// The elastic CNN run (minimum `min`) the tests change.
fn spec(min: usize) -> TestSpec {
    TestSpec::mnist("mnist-cnn")
        .set("data.val_fraction", 0.0)
        .set("data.limit_train", TRAIN)
        .set("data.limit_test", 512)
        .set("train.epochs", 3)
        .set("train.batch_size", 16)
        .set("train.optimizer", "adam")
        .set("train.lr", 0.002)
        .set("train.log_every", 1)
        .set("ddp.replicas", REPLICAS)
        .set("ddp.timeout_s", 20)
        .set("ddp.elastic.min_replicas", min)
        .set("checkpoint.every_epochs", 0)
        .set("restart.max_restarts", 0)
}

fn launch(spec: &Path, out: &Path) -> Child {
    let mut cmd = trainer();
    cmd.arg(spec)
        .args(["--standalone", "--out"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

/// The replicas of launcher `launcher` by rank (from their environment).
fn replicas(launcher: u32) -> HashMap<usize, u32> {
    let children = std::fs::read_dir(format!("/proc/{launcher}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        });
    children
        .filter_map(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let rank = env
                .split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"RANK="))
                .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())?;
            Some((rank, pid))
        })
        .collect()
}

/// Every replica's train records (all metrics files of the run).
fn train_records(out: &Path) -> Vec<MetricRecord> {
    (0..REPLICAS)
        .filter_map(|r| read_metrics(out.join(format!("metrics/rank-{r}.jsonl"))).ok())
        .flatten()
        .filter(|m| m.kind == MetricKind::Train)
        .collect()
}

/// The highest step any replica has recorded.
fn last_step(out: &Path) -> u64 {
    train_records(out).iter().map(|m| m.step).max().unwrap_or(0)
}

/// Runs the elastic spec (minimum `min`) in `out`, killing replica `rank` with SIGKILL once a
/// replica has recorded step `step`, for each of `kills` in turn.
fn run(out: &Path, min: usize, kills: &[(usize, u64)]) -> Output {
    let kills: Vec<_> = kills.iter().map(|&(r, s)| (r, s, libc::SIGKILL)).collect();
    run_spec(out, &spec(min), &kills)
}

/// Runs `spec` in `out` through the launcher, sending replica `rank` signal `sig` once a
/// replica has recorded step `step`, for each of `signals` in turn; its output.
fn run_spec(out: &Path, spec: &TestSpec, signals: &[(usize, u64, i32)]) -> Output {
    std::fs::create_dir_all(out).unwrap();
    let spec = spec.write(out);
    let child = launch(&spec, out);
    let launcher = child.id();
    for &(rank, step, sig) in signals {
        wait_for(&format!("step {step}"), Duration::from_secs(120), || {
            last_step(out) >= step
        });
        let pid = replicas(launcher)[&rank];
        // SAFETY: kill(2) on a process of this test.
        assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
    }
    wait_output(child, Duration::from_secs(240))
}

/// The test accuracy an undisturbed elastic run of the same spec reaches (computed once).
fn undisturbed_accuracy() -> f64 {
    static ACC: OnceLock<f64> = OnceLock::new();
    *ACC.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), 2, &[]);
        assert_success(&out);
        test_accuracy(dir.path())
    })
}

fn test_accuracy(out: &Path) -> f64 {
    (0..REPLICAS)
        .filter_map(|r| read_metrics(out.join(format!("metrics/rank-{r}.jsonl"))).ok())
        .flatten()
        .find(|m| m.kind == MetricKind::Test)
        .and_then(|m| m.accuracy)
        .expect("a test record")
}

/// The membership events of `events.jsonl`.
fn membership(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "membership")
        .collect()
}

/// Each epoch's samples over all replicas' train records: the data set, plus at most the
/// padding of the worlds that split it, and at most `short` samples fewer; `context` is shown on
/// failure.
fn assert_epochs_cover_the_data(out: &Path, short: u64, context: &str) {
    let records = train_records(out);
    // On failure: every file's train records as `epoch:step:samples`, and the events.
    let listing = (0..REPLICAS)
        .map(|r| {
            let path = out.join(format!("metrics/rank-{r}.jsonl"));
            let steps: Vec<String> = read_metrics(path)
                .unwrap_or_default()
                .iter()
                .filter(|m| m.kind == MetricKind::Train)
                .map(|m| format!("{}:{}:{}", m.epoch, m.step, m.samples.unwrap_or(0)))
                .collect();
            format!("rank-{r}.jsonl {}", steps.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let events = std::fs::read_to_string(out.join("events.jsonl")).unwrap_or_default();
    let context = format!("{context}\n{listing}\n{events}");
    for epoch in 1..=3 {
        let samples: u64 = records
            .iter()
            .filter(|m| m.epoch == epoch)
            .filter_map(|m| m.samples)
            .sum();
        let train = TRAIN as u64;
        assert!(
            (train - short..train + 2 * REPLICAS as u64).contains(&samples),
            "epoch {epoch}: {samples} samples\n{context}"
        );
    }
}

/// What every elastic run that lost replicas and completed shows.
fn assert_went_on(out: &Path, output: &Output, left: &[&[u64]]) {
    assert_success(output);
    let events = membership(out);
    assert_eq!(events.len(), left.len(), "{events:?}\n{}", text(output));
    let mut world = REPLICAS as u64;
    for (e, left) in events.iter().zip(left) {
        let got: Vec<u64> = e["left"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_u64())
            .collect();
        assert_eq!(got, *left);
        assert_eq!(e["world_before"], world);
        world -= left.len() as u64;
        assert_eq!(e["world_after"], world);
        assert!(e["seconds_lost"].as_f64().unwrap() < 10.0, "{e}");
    }
    // No checkpoint was written, so none was read.
    assert!(
        !out.join("checkpoints").exists()
            || std::fs::read_dir(out.join("checkpoints"))
                .unwrap()
                .next()
                .is_none()
    );
    // A replica killed right after the step it last contributed to was applied by the others
    // cannot record that step's batch: at most a batch per loss short.
    assert_epochs_cover_the_data(out, 16 * left.len() as u64, &text(output));
    let acc = test_accuracy(out);
    let base = undisturbed_accuracy();
    assert!(
        acc.is_finite() && acc >= base - 0.01,
        "accuracy {acc} against {base} undisturbed"
    );
}

#[test]
fn a_killed_replica_is_left_behind_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), 2, &[(2, 5)]);
    assert_went_on(dir.path(), &out, &[&[2]]);
    let show = std::fs::read_to_string(dir.path().join("logs/rank-0.log")).unwrap();
    assert!(
        show.contains("membership: replica 2 left after step"),
        "{show}"
    );
    // Shared memory from the start, and again for the three who go on.
    let shm = "all-reduce through shared memory (all ranks on this host";
    assert_eq!(show.matches(shm).count(), 2, "{show}");
}

#[test]
fn losing_rank_0_is_survived_like_any_replica() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), 2, &[(0, 5)]);
    assert_went_on(dir.path(), &out, &[&[0]]);
}

#[test]
fn a_replica_then_rank_0_are_lost_one_after_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), 2, &[(1, 5), (0, 30)]);
    assert_went_on(dir.path(), &out, &[&[1], &[0]]);
}

#[test]
fn fewer_replicas_than_the_minimum_end_the_run_naming_who_left() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), REPLICAS, &[(3, 5)]);
    assert!(!out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(
        all.contains("replica 3 left after step")
            && all.contains("3 of 4 replicas remain, fewer than ddp.elastic.min_replicas = 4"),
        "{all}"
    );
}

/// A replica that stops answering (SIGSTOP: its sockets stay open) is waited for
/// `ddp.timeout_s`, then left out; the run completes without it and the launcher stops it.
#[test]
fn a_silent_replica_is_left_out_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = spec(2).set("train.epochs", 2).set("ddp.timeout_s", 3);
    let output = run_spec(out, &spec, &[(1, 5, libc::SIGSTOP)]);
    assert_success(&output);
    let events = membership(out);
    assert_eq!(events.len(), 1, "{events:?}\n{}", text(&output));
    assert_eq!(events[0]["left"], serde_json::json!([1]));
    // The collective's timeout, then at least 3 s for the silent one to ask, and no more.
    let lost = events[0]["seconds_lost"].as_f64().unwrap();
    assert!((3.0..3.0 + 3.0 + 4.0).contains(&lost), "{lost} s lost");
    assert!(
        text(&output).contains("the run completed without ranks 1"),
        "{}",
        text(&output)
    );
}

/// A language model's run goes on likewise: its step budget is kept, each step's windows
/// drawn over the new world.
#[test]
fn a_language_model_goes_on_without_a_replica() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = TestSpec::tiny_gpt()
        .set("train.steps", 60)
        .set("train.eval_every", 30)
        .set("train.log_every", 1)
        .set("ddp.replicas", 3)
        .set("ddp.timeout_s", 20)
        .set("ddp.elastic.min_replicas", 2)
        .set("checkpoint.every_steps", 1000);
    let output = run_spec(out, &spec, &[(1, 10, libc::SIGKILL)]);
    assert_success(&output);
    let events = membership(out);
    assert_eq!(events.len(), 1, "{events:?}\n{}", text(&output));
    assert_eq!(events[0]["left"], serde_json::json!([1]));
    assert_eq!(last_step(out), 60);
    // The run's one checkpoint is its last step's; nothing was read back.
    assert!(
        !text(&output).contains("resuming from"),
        "{}",
        text(&output)
    );
}

/// The weights fingerprint each replica printed at the end, by replica.
fn final_weights(out: &Path) -> HashMap<usize, String> {
    (0..REPLICAS)
        .filter_map(|r| {
            let log = std::fs::read_to_string(out.join(format!("logs/rank-{r}.log"))).ok()?;
            let line = log
                .lines()
                .rev()
                .find_map(|l| l.split_once(": final weights "))?;
            Some((r, line.1.trim().to_string()))
        })
        .collect()
}

/// The ids of every event's `key` list, sorted.
fn union(events: &[serde_json::Value], key: &str) -> Vec<u64> {
    let mut v: Vec<u64> = events.iter().flat_map(|e| ids(e, key)).collect();
    v.sort();
    v
}

/// The ids of one membership event's `key` list.
fn ids(e: &serde_json::Value, key: &str) -> Vec<u64> {
    e[key]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_u64())
        .collect()
}

/// A killed replica restarted by the restart policy joins the group under way: it takes the
/// weights and optimizer state from a member (no checkpoint is read) and ends with every
/// other replica's weights, bit for bit. Rank 0 is the one killed: back, it is the new
/// group's rank 0 again, and the group goes on from the members' weights, not from its fresh
/// ones (the loss right after the join stays where the members had brought it).
#[test]
fn a_restarted_replica_joins_and_ends_with_the_others_weights() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = spec(2)
        .set("restart.max_restarts", 1)
        .set("restart.backoff_s", 0.5);
    let output = run_spec(out, &spec, &[(0, 25, libc::SIGKILL)]);
    assert_success(&output);
    let all = text(&output);
    assert!(
        all.contains("restarting rank 0 in 0.5 s to join the group"),
        "{all}"
    );
    let joined_at = membership(out)
        .iter()
        .find(|e| !ids(e, "joined").is_empty())
        .map(|e| e["step"].as_u64().unwrap())
        .expect("a join");
    let train = train_records(out);
    let mean_loss = |steps: std::ops::RangeInclusive<u64>| {
        let l: Vec<f64> = train
            .iter()
            .filter(|m| steps.contains(&m.step))
            .map(|m| m.loss)
            .collect();
        l.iter().sum::<f64>() / l.len() as f64
    };
    let (first, after) = (mean_loss(1..=2), mean_loss(joined_at + 1..=joined_at + 3));
    assert!(
        after < 0.8 * first,
        "loss {after:.3} after the join at step {joined_at} against {first:.3} at the start\n{all}"
    );
    let events = membership(out);
    let changes: Vec<(Vec<u64>, Vec<u64>)> = events
        .iter()
        .map(|e| (ids(e, "left"), ids(e, "joined")))
        .collect();
    // Left, then back (or both at once, when it came back before the others noticed).
    assert!(
        changes == [(vec![0], vec![]), (vec![], vec![0])] || changes == [(vec![0], vec![0])],
        "{changes:?}\n{all}"
    );
    assert_eq!(events.last().unwrap()["world_after"], REPLICAS as u64);
    let weights = final_weights(out);
    assert_eq!(weights.len(), REPLICAS, "{weights:?}\n{all}");
    assert!(weights.values().all(|w| *w == weights[&0]), "{weights:?}");
    assert!(!all.contains("resuming from"), "{all}");
    let acc = test_accuracy(out);
    assert!(acc >= undisturbed_accuracy() - 0.01, "accuracy {acc}");
}

/// The launcher's scale file (what `ddp scale` writes): down to 2 replicas, the two highest
/// leave at a step boundary (exit 76, no failure); back up to 4, they join again.
#[test]
fn scaling_down_and_up_moves_replicas_out_and_in_at_step_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = spec(2).write(out);
    let child = launch(&spec, out);
    wait_for("step 5", Duration::from_secs(120), || last_step(out) >= 5);
    std::fs::write(out.join("scale"), "2\n").unwrap();
    let at_two = |e: &serde_json::Value| e["world_after"] == 2;
    wait_for("the scale-down", Duration::from_secs(60), || {
        membership(out).iter().any(at_two)
    });
    let step = last_step(out);
    wait_for("two more steps", Duration::from_secs(60), || {
        last_step(out) >= step + 2
    });
    std::fs::write(out.join("scale"), "4\n").unwrap();
    let output = wait_output(child, Duration::from_secs(240));
    assert_success(&output);
    let all = text(&output);
    let events = membership(out);
    // The two leave (and come back) at one step boundary or at two.
    assert_eq!(
        (union(&events, "left"), union(&events, "joined")),
        (vec![2, 3], vec![2, 3]),
        "{events:?}\n{all}"
    );
    assert!(events.iter().any(at_two), "{events:?}");
    assert_eq!(events.last().unwrap()["world_after"], REPLICAS as u64);
    for r in [2, 3] {
        let log = std::fs::read_to_string(out.join(format!("logs/rank-{r}.log"))).unwrap();
        assert!(
            log.contains(&format!("replica {r} left the elastic group on request")),
            "{log}"
        );
    }
    let weights = final_weights(out);
    assert_eq!(weights.len(), REPLICAS, "{weights:?}\n{all}");
    assert!(weights.values().all(|w| *w == weights[&0]), "{weights:?}");
}

/// A run that lost a replica mid-epoch, then stopped mid-epoch (SIGTERM to rank 0: every
/// replica checkpoints the same step), resumes with the whole world: the checkpoint says where
/// in the epoch's order it stood, the rest is split over 4 replicas, and every epoch's samples
/// still add up to the data set.
#[test]
fn a_stop_after_a_membership_change_resumes_with_any_world() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = spec(2).set("checkpoint.every_epochs", 1);
    let stopped = run_spec(out, &spec, &[(2, 5, libc::SIGKILL), (0, 30, libc::SIGTERM)]);
    assert_eq!(stopped.status.code(), Some(143), "{}", text(&stopped));
    let spec = spec.write(out);
    let mut cmd = trainer();
    cmd.arg(&spec)
        .args(["--standalone", "--resume", "--out"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let resumed = wait_output(cmd.spawn().unwrap(), Duration::from_secs(240));
    assert_success(&resumed);
    let all = text(&resumed);
    assert!(
        all.contains("resuming from") && all.contains("steps into epoch 2"),
        "{all}"
    );
    assert_epochs_cover_the_data(out, 16, &all);
}

/// Two pods of an elastic PyTorchJob (`elasticPolicy`: `PET_NNODES=1:2`), 2 replicas each, as
/// two processes with the operator's variables. Pod 1's container dies (its launcher and both
/// replicas killed with SIGKILL); pod 0's replicas go on alone, and when the operator starts the
/// container again (the same command and variables, `--resume`), its replicas find the group
/// under way and join it: the run ends with all four replicas' weights equal, bit for bit.
#[test]
fn a_restarted_kubeflow_pod_joins_the_group_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = spec(2).write(out);
    let port = free_port().to_string();
    let pod = |node: usize| {
        let mut c = trainer();
        c.arg(&spec)
            .args(["--resume", "--out"])
            .arg(out)
            .env("PET_NNODES", "1:2")
            .env("PET_NPROC_PER_NODE", "2")
            .env("PET_NODE_RANK", node.to_string())
            .env("RANK", node.to_string())
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        ChildGuard::new(c.spawn().unwrap())
    };
    let mut pod0 = pod(0);
    let mut pod1 = pod(1);
    wait_for("step 5", Duration::from_secs(120), || last_step(out) >= 5);
    // The container dies whole: its launcher and its replicas.
    let mut killed = pod1.take();
    let mut pids: Vec<u32> = replicas(killed.id()).into_values().collect();
    pids.push(killed.id());
    for pid in pids {
        // SAFETY: kill(2) on a process of this test.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let _ = killed.wait();
    wait_for("pod 0 going on alone", Duration::from_secs(60), || {
        membership(out).iter().any(|e| e["world_after"] == 2)
    });
    let mut pod1 = pod(1);
    let restarted = wait_output(pod1.take(), Duration::from_secs(240));
    let first = wait_output(pod0.take(), Duration::from_secs(240));
    let all = format!("{}\n{}", text(&first), text(&restarted));
    assert_success(&first);
    assert_success(&restarted);
    assert!(
        all.contains("replica 2: its elastic group formed before it started; it joins the group"),
        "{all}"
    );
    let events = membership(out);
    assert_eq!(
        (union(&events, "left"), union(&events, "joined")),
        (vec![2, 3], vec![2, 3]),
        "{events:?}\n{all}"
    );
    assert_eq!(events.last().unwrap()["world_after"], REPLICAS as u64);
    let weights = final_weights(out);
    assert_eq!(weights.len(), REPLICAS, "{weights:?}\n{all}");
    assert!(weights.values().all(|w| *w == weights[&0]), "{weights:?}");
    assert!(!all.contains("resuming from"), "{all}");
}

/// DiLoCo's local steps (a sync every 4 steps) in an elastic run: a replica killed between two
/// syncs is left behind, the steps it took since the last sync going with it (said in the
/// membership event); restarted, it joins with the global weights; every member ends with the
/// same global weights and the run learns.
#[test]
fn diloco_survives_a_replica_lost_between_syncs_and_takes_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let spec = spec(2)
        .set("ddp.sync.method", "diloco")
        .set("ddp.sync.every", 4)
        .set("restart.max_restarts", 1)
        .set("restart.backoff_s", 0.5);
    let output = run_spec(out, &spec, &[(2, 6, libc::SIGKILL)]);
    assert_success(&output);
    let all = text(&output);
    let events = membership(out);
    let left = events
        .iter()
        .find(|e| ids(e, "left") == [2])
        .unwrap_or_else(|| panic!("no leave in {events:?}\n{all}"));
    let dropped = left["local_steps_dropped"]
        .as_u64()
        .expect("the local steps dropped");
    assert!(dropped < 4, "{left}");
    assert!(union(&events, "joined").contains(&2), "{events:?}\n{all}");
    let weights = final_weights(out);
    assert_eq!(weights.len(), REPLICAS, "{weights:?}\n{all}");
    assert!(
        weights.values().all(|w| *w == weights[&0]),
        "members end apart: {weights:?}"
    );
    let acc = test_accuracy(out);
    assert!(acc > 0.7, "accuracy {acc}\n{all}");
}
