//! Helpers shared by the `ddp` end-to-end tests: run the real binary with a deadline.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const DDP: &str = env!("CARGO_BIN_EXE_ddp");

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `ddp --workspace WS` with one CPU thread per replica and no workspace/GPU settings inherited.
pub fn ddp(ws: &Path) -> Command {
    let mut c = Command::new(DDP);
    c.arg("--workspace")
        .arg(ws)
        .env("RAYON_NUM_THREADS", "1")
        .env_remove("DDP_WORKSPACE")
        .env_remove("DDP_SIMULATED_GPUS");
    c
}

/// Runs to completion; panics with the output if it takes longer than `limit`.
pub fn output(mut c: Command, limit: Duration) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!("ddp did not finish in {limit:?}\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub fn run_ddp(ws: &Path, args: &[&str], limit: Duration) -> Output {
    let mut c = ddp(ws);
    c.args(args);
    output(c, limit)
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts success and returns stdout.
pub fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ddp run` of a tiny GPT, trained in about a second: the Shakespeare example made small (6
/// steps of a 1-layer, 32-channel model with a context of 16 characters, 1 replica), evaluated
/// and checkpointed at steps 3 and 6.
pub fn tiny_gpt_run(name: &str) -> Vec<String> {
    let spec = repo().join("examples/gpt-shakespeare.toml");
    let mut args = vec!["run".to_string(), spec.display().to_string()];
    for set in [
        "train.steps=6",
        "train.scheduler.warmup_steps=2",
        "train.eval_every=3",
        "checkpoint.every_steps=3",
        "model.layers=1",
        "model.heads=2",
        "model.embd=32",
        "model.block=16",
        "train.batch_size=4",
        "data.val_fraction=0.02",
    ] {
        args.extend(["--set".to_string(), set.to_string()]);
    }
    args.extend(["--replicas", "1", "--name", name].map(String::from));
    args
}
