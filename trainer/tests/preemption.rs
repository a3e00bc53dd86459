//! Preemption: a stop request (SIGUSR2, SIGTERM) to the launcher or to the replicas makes every
//! replica finish the same step, rank 0 checkpoint it inside the epoch, and all exit 143;
//! `checkpoint.every_steps` checkpoints inside epochs too, so a replica killed outright loses
//! only the steps since. `--resume` then ends with exactly an uninterrupted run's
//! `model.safetensors` (the same bytes) and, after a graceful stop, the same metrics records.
//!
//! The signals are sent once a known step's record is out; the tests assert the checkpoints'
//! positions as the trainer reports them, never when the signal landed.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use ddp_trainer::checkpoint::{self, Loaded};
use ddp_trainer::metrics::{MetricKind, MetricRecord, StepBreakdown};

/// 2048 MNIST digits, 1843 to train: 58 steps per epoch with 2 replicas × 16, validated every
/// 7 steps and at each epoch's end, a train record every 3 steps.
const BODY: &str = "val_fraction = 0.1\nlimit_train = 2048\nlimit_test = 256\n[train]\nepochs = 2\nbatch_size = 16\noptimizer = \"adam\"\nlr = 0.001\nscheduler = { kind = \"step\", step_size = 1, gamma = 0.7 }\neval_every = 7\nlog_every = 3\nseed = 5\n[checkpoint]\nevery_epochs = 1\nkeep_last = 2\n";
const STEPS_PER_EPOCH: u64 = 58;
const LIMIT: Duration = Duration::from_secs(180);

/// `ddp-trainer SPEC --standalone --nproc 2 --out OUT [--resume] [--set ...]`, started.
fn start(spec: &Path, out: &Path, resume: bool, sets: &[&str]) -> ChildGuard {
    let mut c = trainer();
    c.arg(spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(out);
    if resume {
        c.arg("--resume");
    }
    for s in sets {
        c.args(["--set", s]);
    }
    ChildGuard::new(
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Runs a launch to its end and asserts it succeeded.
fn finish(spec: &Path, out: &Path, resume: bool, sets: &[&str]) -> String {
    let mut run = start(spec, out, resume, sets);
    let o = wait_output(run.take(), LIMIT);
    assert_success(&o);
    text(&o)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill {pid}");
}

/// The launcher's two replicas.
fn replicas(launcher: &ChildGuard) -> Vec<u32> {
    let pids = child_pids(launcher.id());
    assert_eq!(pids.len(), 2, "replicas of {}: {pids:?}", launcher.id());
    pids
}

/// Waits for the launcher's end: it must exit 143 (every replica stopped at a checkpoint).
fn stopped(mut launcher: ChildGuard) -> String {
    let o: Output = wait_output(launcher.take(), LIMIT);
    assert_eq!(o.status.code(), Some(143), "{}", text(&o));
    text(&o)
}

/// The step rank 0 reported stopping after.
fn stop_step(log: &str) -> u64 {
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("stop requested: stopping after step "))
        .unwrap_or_else(|| panic!("no stop line in\n{log}"));
    line.split(' ').next().unwrap().parse().unwrap()
}

fn newest(out: &Path) -> Loaded {
    checkpoint::latest_complete(out, |w| panic!("{w}"))
        .unwrap()
        .expect("a checkpoint")
}

/// The two final models are the same file, byte for byte.
fn assert_same_model(full: &Path, out: &Path) {
    let (a, b) = (
        full.join("model.safetensors"),
        out.join("model.safetensors"),
    );
    let same = std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap();
    assert!(
        same,
        "{} differs from the uninterrupted {} (largest difference {})",
        b.display(),
        a.display(),
        max_abs_diff(&load_model(&a), &load_model(&b))
    );
}

/// A rank's records without what depends on the clock (time, throughput, the step's timings;
/// the bytes a step sent stay).
fn figures(out: &Path, rank: usize) -> Vec<MetricRecord> {
    metrics(out, rank)
        .into_iter()
        .map(|r| MetricRecord {
            time: 0.0,
            samples_per_sec: 0.0,
            tokens_per_sec: None,
            breakdown: r.breakdown.map(|b| StepBreakdown {
                bytes_sent: b.bytes_sent,
                ..StepBreakdown::default()
            }),
            ..r
        })
        .collect()
}

/// The checkpoint files left in `out`.
fn checkpoint_names(out: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(checkpoint::checkpoint_dir(out))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.contains(".state."))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// SIGUSR2 to the launcher stops the run inside epoch 1 (a mid-epoch checkpoint, exit 143);
/// the resumed run is stopped again inside epoch 2 by SIGUSR2 to its replicas themselves (as
/// `srun` passes it on); the second resume ends with the uninterrupted run's model, byte for
/// byte, and the same metrics records on every rank: no step missing or repeated.
#[test]
fn sigusr2_stops_at_a_mid_epoch_checkpoint_and_resume_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", BODY);
    // `--resume` with no checkpoint starts from the beginning, with a notice.
    let full = dir.path().join("full");
    let log = finish(&spec, &full, true, &[]);
    assert!(log.contains("no checkpoint in"), "{log}");
    assert!(log.contains("starting from scratch"), "{log}");

    let out = dir.path().join("preempted");
    let mut launcher = start(&spec, &out, false, &[]);
    wait_for_train_step(&out, 0, 3, &mut launcher, LIMIT);
    signal(launcher.id(), libc::SIGUSR2);
    let log = stopped(launcher);
    assert!(log.contains("stopped on SIGUSR2 to the launcher"), "{log}");
    let first = stop_step(&log);
    let ck = newest(&out);
    assert!(
        ck.path.ends_with(format!(
            "checkpoints/epoch-0000-step-{first:08}.safetensors"
        )),
        "{}\n{log}",
        ck.path.display()
    );
    assert_eq!(
        (ck.state.epoch, ck.state.global_step, ck.state.step_in_epoch),
        (0, first, first)
    );
    assert!(first > 3 && first < STEPS_PER_EPOCH, "{log}");
    assert_eq!(ck.state.val_due, first.is_multiple_of(7));
    assert!(!out.join("model.safetensors").exists());
    // Inside an epoch, the order of the samples depends on the number of replicas: another
    // number is refused, naming the checkpoint, and nothing changes.
    let mut one = trainer();
    one.arg(&spec)
        .args(["--standalone", "--nproc", "1", "--resume", "--out"])
        .arg(&out);
    let refused = run_with_timeout(one, LIMIT);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains(&format!(
            "environment variable WORLD_SIZE: is 1 but the newest checkpoint, {}, was written inside an epoch by 2 replicas",
            ck.path.display()
        )),
        "{}",
        text(&refused)
    );
    assert_eq!(newest(&out).path, ck.path);

    let mut launcher = start(&spec, &out, true, &[]);
    wait_for_train_step(&out, 0, STEPS_PER_EPOCH + 3, &mut launcher, LIMIT);
    for pid in replicas(&launcher) {
        signal(pid, libc::SIGUSR2);
    }
    let log = stopped(launcher);
    assert!(
        log.contains(&format!(
            "epoch-0000-step-{first:08}.safetensors (epoch 0 done, step {first}, {first} steps into epoch 1)"
        )),
        "{log}"
    );
    assert!(log.contains("stopped on a signal to the replicas"), "{log}");
    let second = stop_step(&log);
    let ck = newest(&out);
    assert_eq!(
        (ck.state.epoch, ck.state.global_step, ck.state.step_in_epoch),
        (1, second, second - STEPS_PER_EPOCH),
        "{log}"
    );
    assert!(second < 2 * STEPS_PER_EPOCH, "{log}");
    // Retention: the two newest epochs' checkpoints, and the steps after the newest.
    assert_eq!(
        checkpoint_names(&out),
        [
            format!("epoch-0001-step-{second:08}.safetensors"),
            "epoch-0001.safetensors".to_string(),
        ]
    );

    let log = finish(&spec, &out, true, &[]);
    assert!(
        log.contains(&format!("(epoch 1 done, step {second}")),
        "{log}"
    );
    assert_same_model(&full, &out);
    for rank in 0..2 {
        assert_eq!(
            figures(&out, rank),
            figures(&full, rank),
            "rank {rank}'s records differ from the uninterrupted run's"
        );
    }
}

/// With `checkpoint.every_steps`, gradient accumulation and augmentation: a replica killed
/// outright (SIGKILL, no stop) loses only the steps since the last step checkpoint; the resumed
/// run continues inside the epoch from it and ends with the uninterrupted run's model.
#[test]
fn every_steps_checkpoints_survive_a_killed_replica() {
    let dir = tempfile::tempdir().unwrap();
    let body = BODY
        .replace("log_every = 3\n", "log_every = 3\ngrad_accum = 2\n")
        .replace("limit_test", "augment = true\nlimit_test")
        .replace("keep_last = 2\n", "keep_last = 2\nevery_steps = 5\n");
    let spec = write_spec(dir.path(), "mnist-cnn", &body);
    let full = dir.path().join("full");
    finish(&spec, &full, false, &[]);
    // 29 steps per epoch: 2 micro-batches of 16 per step and replica; train records at steps
    // 3, 6, ..., checkpoints at 5, 10, ... and at the epoch's end.
    let out = dir.path().join("killed");
    let mut launcher = start(&spec, &out, false, &[]);
    wait_for_train_step(&out, 0, 6, &mut launcher, LIMIT);
    let step_5 = checkpoint::checkpoint_dir(&out).join("epoch-0000-step-00000005.safetensors");
    assert!(step_5.exists(), "{} missing", step_5.display());
    signal(replicas(&launcher)[1], libc::SIGKILL);
    let o = wait_output(launcher.take(), LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("SIGKILL"),
        "{}",
        text(&o)
    );
    let ck = newest(&out);
    let at = ck.state.global_step;
    assert!(
        at.is_multiple_of(5) && ck.state.step_in_epoch == at,
        "{}",
        ck.path.display()
    );
    let log = finish(&spec, &out, true, &[]);
    assert!(
        log.contains(&format!("resuming from {}", ck.path.display())),
        "{log}"
    );
    assert_same_model(&full, &out);
    // Records the killed run wrote after its checkpoint are written again; the last record of
    // each step (what readers keep) is the uninterrupted run's.
    for rank in 0..2 {
        let mut last: Vec<MetricRecord> = Vec::new();
        for r in figures(&out, rank) {
            last.retain(|l| (l.kind, l.step) != (r.kind, r.step));
            last.push(r);
        }
        last.sort_by_key(|r| (r.step, r.kind != MetricKind::Train));
        let mut want = figures(&full, rank);
        want.sort_by_key(|r| (r.step, r.kind != MetricKind::Train));
        assert_eq!(last, want, "rank {rank}");
    }
}

/// The first line a replica prints (after its stop handler is in place).
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

/// A stop requested before the first step stops every replica before it: exit 143 and
/// nothing new in the run folder's checkpoints.
#[test]
fn a_stop_before_the_first_step_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", BODY);
    let out: PathBuf = dir.path().join("early");
    let port = free_port();
    let mut r0 = ChildGuard::new(spawn_rank(&spec, &out, 0, 2, port, &[], &[]));
    assert!(first_line(r0.child()).contains("rank 0/2"));
    // Rank 0 waits for rank 1 at the rendezvous: the request comes before any step.
    signal(r0.id(), libc::SIGTERM);
    let mut r1 = ChildGuard::new(spawn_rank(&spec, &out, 1, 2, port, &[], &[]));
    let o1 = wait_output(r1.take(), LIMIT);
    let o0 = wait_output(r0.take(), LIMIT);
    assert_eq!(o0.status.code(), Some(143), "{}", text(&o0));
    assert_eq!(o1.status.code(), Some(143), "{}", text(&o1));
    assert!(
        text(&o0).contains("stop requested before the first step: stopping at step 0"),
        "{}",
        text(&o0)
    );
    assert_eq!(checkpoint_names(&out), Vec::<String>::new());
    assert!(!out.join("model.safetensors").exists());
}

/// A language model stopped between its step checkpoints (SIGTERM to the launcher, as `ddp stop`
/// sends it) checkpoints the step it stopped after, leaving that step's validation to the resumed
/// run, which ends with the uninterrupted run's model, byte for byte, and the same records.
#[test]
fn a_language_model_stopped_between_step_checkpoints_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gpt_spec(dir.path(), "log_every = 2");
    // Step checkpoints only at the end: the stop's is the only one before it. Every step is
    // validated, so the stop always leaves a validation due.
    let sets = [
        "train.steps=240",
        "checkpoint.every_steps=240",
        "train.eval_every=1",
    ];
    let full = dir.path().join("full");
    finish(&spec, &full, false, &sets);
    let out = dir.path().join("stopped");
    let mut launcher = start(&spec, &out, false, &sets);
    wait_for_train_step(&out, 0, 4, &mut launcher, LIMIT);
    signal(launcher.id(), libc::SIGTERM);
    let log = stopped(launcher);
    let at = stop_step(&log);
    assert!(at > 4 && at < 240, "{log}");
    assert_eq!(
        checkpoint_names(&out),
        [format!("step-{at:08}.safetensors")],
        "{log}"
    );
    let ck = newest(&out);
    assert_eq!((ck.state.epoch, ck.state.global_step), (0, at));
    assert!(ck.state.val_due);
    let log = finish(&spec, &out, true, &sets);
    assert!(log.contains(&format!("(epoch 0 done, step {at})")), "{log}");
    assert_same_model(&full, &out);
    for rank in 0..2 {
        assert_eq!(figures(&out, rank), figures(&full, rank), "rank {rank}");
    }
}
