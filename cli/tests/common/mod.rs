//! Helpers of the `ddp` end-to-end tests: run the real binary with a deadline; the fixtures
//! every crate's tests share (specs, sample data, waits) come from
//! `ddp_workspaces::test_util::fixtures`.
#![allow(dead_code, unused_imports)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

pub use ddp_workspaces::test_util::fixtures::{
    Raw, TestSpec, mnist_dir, output_within, repo, shakespeare, text, wait_for,
};

pub const DDP: &str = env!("CARGO_BIN_EXE_ddp");

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
pub fn output(c: Command, limit: Duration) -> Output {
    output_within(c, limit)
}

pub fn run_ddp(ws: &Path, args: &[&str], limit: Duration) -> Output {
    let mut c = ddp(ws);
    c.args(args);
    output(c, limit)
}

/// Asserts success and returns stdout.
pub fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ddp run` of a tiny GPT, trained in about a second: the Shakespeare example made small (6
/// steps of a 1-layer, 32-channel model with a context of 16 characters, 1 replica), evaluated
/// and checkpointed at steps 3 and 6.
pub fn tiny_gpt_run(name: &str) -> Vec<String> {
    let spec = ddp_workspaces::test_util::fixtures::examples_dir().join("gpt-shakespeare.toml");
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
