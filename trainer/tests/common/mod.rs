//! Helpers shared by the integration tests: run the real `ddp-trainer` binary, write specs, read
//! checkpoints and metrics.
#![allow(dead_code, unused_imports)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use ddp_trainer::metrics::{MetricKind, MetricRecord, read_metrics};

pub const BIN: &str = env!("CARGO_BIN_EXE_ddp-trainer");

pub use ddp_trainer::test_util::fixtures::{
    TestSpec, examples_dir, mnist_dir, output_within, repo, text, wait_for,
};

/// A small MNIST spec (absolute data path) written into `dir`; `body` continues its `[data]`
/// section and may open others.
pub fn write_spec(dir: &Path, model: &str, body: &str) -> PathBuf {
    TestSpec::mnist(model).tail(body).write(dir)
}

/// A spec in `dir` (`spec.toml`) reading MNIST-format data from `data`; `body` continues its
/// `[data]` section.
pub fn write_spec_reading(dir: &Path, model: &str, data: &Path, body: &str) -> PathBuf {
    TestSpec::mnist(model)
        .set("data.path", data)
        .tail(body)
        .write(dir)
}

/// A deterministic text of ~12,000 characters over a 27-character alphabet.
pub fn corpus(dir: &Path) -> PathBuf {
    let words = [
        "the ", "king ", "and ", "queen ", "of ", "a ", "land ", "far ", "away ", "said ", "to ",
        "thee\n",
    ];
    let mut s = String::new();
    let mut x: u64 = 7;
    while s.len() < 12_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(words[(x >> 33) as usize % words.len()]);
    }
    let p = dir.join("input.txt");
    std::fs::write(&p, s).unwrap();
    p
}

/// A small GPT spec on [`corpus`] in `dir` (6 steps, validated every 3); `train` is appended to
/// its `[train]` section.
pub fn gpt_spec(dir: &Path, train: &str) -> PathBuf {
    let data = corpus(dir);
    let body = format!(
        "name = \"lm\"\n[model]\nname = \"gpt\"\nlayers = 2\nheads = 2\nembd = 16\nblock = 16\n[data]\nname = \"text\"\npath = \"{}\"\nval_fraction = 0.1\n[train]\nsteps = 6\nbatch_size = 4\noptimizer = \"adamw\"\nlr = 0.003\nweight_decay = 0.1\ngrad_clip = 1.0\nseed = 3\neval_every = 3\n{train}\n",
        data.display()
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// A command for the trainer with a clean distributed environment and 1 CPU thread.
pub fn trainer() -> Command {
    let mut c = Command::new(BIN);
    for v in ddp_trainer::env::LAUNCHER_VARIABLES {
        c.env_remove(v);
    }
    c.env("RAYON_NUM_THREADS", "1");
    c
}

/// Runs to completion with a deadline; panics (with the output) if it hangs.
pub fn run_with_timeout(cmd: Command, limit: Duration) -> Output {
    output_within(cmd, limit)
}

pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "ddp-trainer did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn assert_success(o: &Output) {
    assert!(
        o.status.success(),
        "ddp-trainer failed ({:?})\n{}",
        o.status,
        text(o)
    );
}

/// `ddp-trainer SPEC --standalone --nproc N --out OUT [--set ...]`, asserted successful.
pub fn train_standalone(spec: &Path, nproc: usize, out: &Path, sets: &[&str]) -> Output {
    train_standalone_env(spec, nproc, out, sets, &[])
}

/// [`train_standalone`] with extra environment variables (passed on to the replicas).
pub fn train_standalone_env(
    spec: &Path,
    nproc: usize,
    out: &Path,
    sets: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut c = trainer();
    c.envs(env.iter().copied());
    c.arg(spec)
        .arg("--standalone")
        .arg("--nproc")
        .arg(nproc.to_string())
        .arg("--out")
        .arg(out);
    for s in sets {
        c.arg("--set").arg(s);
    }
    let o = run_with_timeout(c, Duration::from_secs(120));
    assert_success(&o);
    o
}

/// `ddp-trainer SPEC --standalone --nproc 1 --out OUT [--set ...]`, asserted refused as bad
/// input (exit 2); its stderr.
pub fn refused_standalone(spec: &Path, out: &Path, sets: &[&str]) -> String {
    let mut c = trainer();
    c.arg(spec)
        .args(["--standalone", "--nproc", "1", "--out"])
        .arg(out);
    for s in sets {
        c.arg("--set").arg(s);
    }
    let o = run_with_timeout(c, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(2), "{sets:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn load_model(path: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// Not every test binary that includes this module compares weights.
#[allow(unused_imports)]
pub use ddp_trainer::test_util::{max_abs_diff, worst_tensor};

pub fn metrics(out: &Path, rank: usize) -> Vec<MetricRecord> {
    read_metrics(out.join(format!("metrics/rank-{rank}.jsonl"))).unwrap()
}

pub fn test_record(out: &Path) -> MetricRecord {
    metrics(out, 0)
        .into_iter()
        .rev()
        .find(|r| r.kind == MetricKind::Test)
        .expect("a test record in rank-0.jsonl")
}

/// A free TCP port on loopback for a rendezvous (the launcher's choice: below the ephemeral
/// range, so no other test's listener or connection takes it before rank 0 binds it).
pub fn free_port() -> u16 {
    ddp_trainer::launcher::free_port().unwrap()
}

/// Starts rank `rank` of `world` the way torchrun would.
pub fn spawn_rank(
    spec: &Path,
    out: &Path,
    rank: usize,
    world: usize,
    port: u16,
    extra_env: &[(&str, &str)],
    sets: &[&str],
) -> Child {
    let mut c = trainer();
    c.arg(spec).arg("--out").arg(out);
    for s in sets {
        c.arg("--set").arg(s);
    }
    c.env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string());
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Owns a spawned process and kills (SIGKILL) and reaps it when dropped, so a test that fails
/// half-way leaves nothing running. `take()` hands the child back (e.g. to `wait_output`).
pub struct ChildGuard(Option<Child>);

impl ChildGuard {
    pub fn new(child: Child) -> Self {
        ChildGuard(Some(child))
    }
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("child already taken")
    }
    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("child already taken").id()
    }
    pub fn take(&mut self) -> Child {
        self.0.take().expect("child already taken")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Fields of `/proc/PID/stat` after the command name: [state, ppid, ...]; None once it is gone.
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces or parentheses.
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Pids of the live direct children of `pid` (scans `/proc/*/stat` for the parent pid).
pub fn child_pids(pid: u32) -> Vec<u32> {
    let mut kids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            proc_stat(p)
                .is_some_and(|f| f.get(1).and_then(|pp| pp.parse::<u32>().ok()) == Some(pid))
        })
        .collect();
    kids.sort();
    kids
}

/// True while `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|f| f.first().map(String::as_str) != Some("Z"))
}

/// The value of `var` in the environment a running process was started with.
pub fn proc_env(pid: u32, var: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{var}=");
    env.split(|&b| b == 0).find_map(|kv| {
        kv.strip_prefix(prefix.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// Waits until `OUT/metrics/rank-R.jsonl` holds a train record, i.e. training steps are running.
/// Panics (with the process's output) when `child` exits first or `limit` passes.
pub fn wait_for_train_record(out: &Path, rank: usize, child: &mut ChildGuard, limit: Duration) {
    wait_for_train_step(out, rank, 1, child, limit);
}

/// Waits until `OUT/metrics/rank-R.jsonl` holds a train record of global step `step` or later.
/// Panics (with the process's output) when `child` exits first or `limit` passes.
pub fn wait_for_train_step(
    out: &Path,
    rank: usize,
    step: u64,
    child: &mut ChildGuard,
    limit: Duration,
) {
    let start = Instant::now();
    let file = out.join(format!("metrics/rank-{rank}.jsonl"));
    loop {
        if let Ok(recs) = read_metrics(&file)
            && recs
                .iter()
                .any(|r| r.kind == MetricKind::Train && r.step >= step)
        {
            return;
        }
        if child.child().try_wait().unwrap().is_some() {
            let o = child.take().wait_with_output().unwrap();
            panic!(
                "the process exited ({:?}) before {} showed a train record of step {step}\n{}",
                o.status,
                file.display(),
                text(&o)
            );
        }
        if start.elapsed() > limit {
            let mut c = child.take();
            let _ = c.kill();
            let o = c.wait_with_output().unwrap();
            panic!(
                "no train record of step {step} in {} within {limit:?}\n{}",
                file.display(),
                text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
