//! All-reduce bandwidth: the bench spawns itself twice as hidden workers (`--allreduce-worker`,
//! with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) that join a `ProcessGroup` over loopback and
//! run `bench_all_reduce` on 1, 25 and 100 MiB; rank 0 prints `torch_allreduce.py`'s JSON keys.
//! Beside them, this process times a plain copy of each size (`memcpy`): the memory bandwidth of
//! the moment, which bounds every engine and moves with the machine's load.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use ddp_trainer::dist::bench::{AllReduceFigure, bench_all_reduce};
use ddp_trainer::dist::group::{GroupConfig, ProcessGroup};
use ddp_trainer::env::DistEnv;

use crate::Args;
use crate::procs::{clean_env, free_port, kill_all, spawn, tail};

/// All-reduce sizes of `torch_allreduce.py` (1 MB = 1 << 20 bytes).
pub const SIZES: [usize; 3] = [1 << 20, 25 << 20, 100 << 20];
/// World size of the all-reduce benchmark.
pub const AR_WORLD: usize = 2;
/// One way of ours to all-reduce.
#[derive(Clone, Copy)]
pub struct Engine {
    /// `engine` of the JSON lines.
    pub name: &'static str,
    /// Through shared memory (else the TCP ring).
    pub shm: bool,
    /// Shared memory staged through the segment (`DDP_SHM_DIRECT=0`) instead of direct copies.
    pub staged: bool,
}

/// Our engines, in the order they run and print.
pub const AR_ENGINES: [Engine; 3] = [
    Engine {
        name: "ddp-tcp",
        shm: false,
        staged: false,
    },
    Engine {
        name: "ddp-shm",
        shm: true,
        staged: false,
    },
    Engine {
        name: "ddp-shm-staged",
        shm: true,
        staged: true,
    },
];
const POLL: Duration = Duration::from_millis(50);

/// One all-reduce size: the figure and rank 0's JSON line as printed.
pub struct ArFigure {
    pub engine: String,
    pub fig: AllReduceFigure,
    pub line: String,
}

/// One rank of the all-reduce benchmark, placed by the torchrun variables.
pub fn allreduce_worker(args: &Args) -> Result<(), String> {
    let env = DistEnv::from_env().map_err(|e| e.to_string())?;
    let mut group = ProcessGroup::init(&GroupConfig {
        rank: env.rank,
        world_size: env.world_size,
        master_addr: env.master_addr.clone(),
        master_port: env.master_port,
        timeout: Duration::from_secs(args.timeout_s),
        token: std::env::var("DDP_TOKEN").ok().filter(|t| !t.is_empty()),
        shared_memory: args.shm,
        store_elsewhere: false,
        joining: false,
    })
    .map_err(|e| e.to_string())?;
    let figures = bench_all_reduce(group.collective(), &SIZES).map_err(|e| e.to_string())?;
    if env.rank == 0 {
        for f in &figures {
            println!("{}", f.json_line(&args.engine, env.world_size));
        }
    }
    group.shutdown().map_err(|e| e.to_string())
}

/// Runs the two workers of `engine` (`tag`, if any, names the round) and reads rank 0's figures.
pub fn bench_allreduce(
    args: &Args,
    tmp: &Path,
    engine: Engine,
    tag: &str,
) -> Result<Vec<ArFigure>, String> {
    eprintln!(
        "ddp-bench: {} all-reduce at world {AR_WORLD} ({} MiB{}) ...",
        engine.name,
        SIZES.map(|s| (s >> 20).to_string()).join(", "),
        round_suffix(tag, "; ")
    );
    let me = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let dir = tmp.join(format!("allreduce-{}{}", engine.name, folder_suffix(tag)));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let port = free_port()?;
    // The workers' collectives give up after this long without progress.
    let worker_timeout = args.timeout_s.clamp(1, 120);
    let mut children: Vec<(Child, PathBuf)> = Vec::new();
    for rank in 0..AR_WORLD {
        let mut cmd = Command::new(&me);
        clean_env(&mut cmd);
        cmd.arg("--allreduce-worker")
            .arg("--engine")
            .arg(engine.name);
        if engine.shm {
            cmd.arg("--shm");
        }
        if engine.staged {
            cmd.env("DDP_SHM_DIRECT", "0");
        }
        cmd.arg("--timeout-s")
            .arg(worker_timeout.to_string())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", AR_WORLD.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", AR_WORLD.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("RAYON_NUM_THREADS", "1");
        let (out, err) = (
            dir.join(format!("rank-{rank}.out")),
            dir.join(format!("rank-{rank}.err")),
        );
        match spawn(cmd, &out, &err) {
            Ok(c) => children.push((c, err)),
            Err(e) => {
                kill_all(&mut children);
                return Err(format!("cannot start all-reduce worker {rank}: {e}"));
            }
        }
    }
    wait_workers(&mut children, Duration::from_secs(args.timeout_s))?;
    read_figures(&dir.join("rank-0.out"), engine.name)
}

/// `tag` after `sep`, or nothing for an untagged round.
pub fn round_suffix(tag: &str, sep: &str) -> String {
    if tag.is_empty() {
        String::new()
    } else {
        format!("{sep}{tag}")
    }
}

/// `tag` as part of a folder name: `-round-1-3` for "round 1/3".
pub fn folder_suffix(tag: &str) -> String {
    round_suffix(&tag.replace([' ', '/'], "-"), "-")
}

/// A plain copy of each size in this process (3 warm-ups, median of 10), as engine `memcpy`:
/// algbw = bytes copied per second.
pub fn memcpy_figures() -> Vec<ArFigure> {
    SIZES
        .iter()
        .map(|&bytes| {
            let src = vec![1.0f32; bytes / 4];
            let mut dst = vec![0.0f32; bytes / 4];
            let mut times: Vec<f64> = (0..13)
                .map(|_| {
                    let t0 = Instant::now();
                    dst.copy_from_slice(std::hint::black_box(&src));
                    std::hint::black_box(&mut dst);
                    t0.elapsed().as_secs_f64()
                })
                .skip(3)
                .collect();
            times.sort_by(f64::total_cmp);
            let median_s = times[times.len() / 2];
            let algbw_gbps = bytes as f64 / median_s / 1e9;
            let fig = AllReduceFigure {
                bytes,
                median_s,
                algbw_gbps,
                busbw_gbps: algbw_gbps,
            };
            ArFigure {
                engine: "memcpy".into(),
                line: fig.json_line("memcpy", 1),
                fig,
            }
        })
        .collect()
}

/// The JSON lines of `out` (ours or `torch_allreduce.py`'s), one per size.
pub fn read_figures(out: &Path, engine: &str) -> Result<Vec<ArFigure>, String> {
    let text = fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut figures = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{engine} printed {line:?}: {e}"))?;
        let num = |k: &str| {
            v[k].as_f64()
                .ok_or_else(|| format!("{engine}: no {k} in {line}"))
        };
        figures.push(ArFigure {
            engine: engine.to_string(),
            fig: AllReduceFigure {
                bytes: num("bytes")? as usize,
                median_s: num("median_s")?,
                algbw_gbps: num("algbw_GBps")?,
                busbw_gbps: num("busbw_GBps")?,
            },
            line: line.to_string(),
        });
    }
    if figures.len() != SIZES.len() {
        return Err(format!(
            "{engine} printed {} figures, expected {}",
            figures.len(),
            SIZES.len()
        ));
    }
    Ok(figures)
}

/// Waits for every worker; one failure or the deadline stops the others.
fn wait_workers(children: &mut [(Child, PathBuf)], limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    let mut done = vec![false; children.len()];
    loop {
        for (rank, (child, err)) in children.iter_mut().enumerate() {
            if done[rank] {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) if status.success() => done[rank] = true,
                Ok(Some(status)) => {
                    let msg = format!("all-reduce worker {rank} failed ({status})\n{}", tail(err));
                    kill_all(children);
                    return Err(msg);
                }
                Ok(None) => {}
                Err(e) => {
                    kill_all(children);
                    return Err(format!("waiting for all-reduce worker {rank}: {e}"));
                }
            }
        }
        if done.iter().all(|d| *d) {
            return Ok(());
        }
        if start.elapsed() > limit {
            kill_all(children);
            return Err(format!(
                "the all-reduce workers did not finish within {} s",
                limit.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
}
