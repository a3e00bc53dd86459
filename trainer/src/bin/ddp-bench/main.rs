//! `ddp-bench`: the figures of `docs/performance.md`, measured the same way as the PyTorch
//! references in `bench/pytorch/` (`torch_ref.py`, `torch_gpt.py`, `torch_allreduce.py`).
//!
//! - **train**: for mnist-cnn and mlp (MNIST sample), ResNet-18 (synthetic 3x32x32 data, as
//!   `torch_ref.py --model resnet18 --synthetic N`) and the baby GPT (`--model gpt`: a text file
//!   for `--steps` steps, as `torch_gpt.py`), runs the sibling `ddp-trainer` executable
//!   (`--standalone --nproc W`) in four configurations per round: world 1 × 1 thread, world 1 ×
//!   T threads (`--threads`, default all cores; skipped when T = 1), world 2 × 1 thread per
//!   replica, and 1+1 (two independent world-1 runs at once, 1 thread each). The generated spec
//!   mirrors `torch_ref.py` (CNN: Adam lr 0.001 × world; MLP and ResNet-18: SGD momentum 0.9 lr
//!   0.01 × world; all StepLR(1, 0.7); no validation split; no checkpoints; the GPT: AdamW,
//!   warm-up and cosine, one evaluation and checkpoint at the end); the bench then reads
//!   the run's metrics JSONL. Each rank's training time is the sum of its `train` records'
//!   `samples / samples_per_sec` (the logging windows tile every epoch's training loop,
//!   evaluation and checkpoints excluded); the run's time is the slowest rank's, and its
//!   throughput is the samples of all ranks divided by that time. Scaling efficiency = world-2
//!   throughput / (2 × world-1 throughput); "vs 1 thread" = world 1 × T over world 1 × 1. Peak RSS
//!   is the largest resident set among a run's processes (`wait4`'s rusage of the child).
//!   For the GPT the throughput counts tokens (its records' `tokens / tokens_per_sec`: its
//!   samples are windows of 64 tokens), and each round also times sampling 500 tokens from its
//!   world-2 model.
//! - **--compare-torch PYTHON**: also runs `torch_ref.py` (`torch_gpt.py`) at world 2 × 1 thread
//!   and world 1 × T threads, alternating with our runs, and prints ddp / PyTorch ratios (medians
//!   over rounds); for the all-reduce, `torch_allreduce.py` (gloo) after our engines in every
//!   round.
//! - **quality** (`--model gpt`): the full recipe (2,000 steps) at world 2 on both sides, both
//!   final models evaluated by our evaluation over every validation window, and sampling.
//! - **lockstep**: two threads pinned to cores 0 and 1 run the same steps (arithmetic, then
//!   arithmetic and passes over a buffer of their own) meeting at a barrier after each, then
//!   free-running: the ceiling this machine puts on world 2 against 1+1 with no trainer code.
//! - **allreduce**: per round, for each engine (ddp-tcp, ddp-shm, ddp-shm-staged) spawns itself
//!   twice as hidden workers (`--allreduce-worker`, with RANK, WORLD_SIZE, MASTER_ADDR,
//!   MASTER_PORT) that join a `ProcessGroup` over loopback and run `bench_all_reduce` on 1, 25
//!   and 100 MiB (rank 0 prints `torch_allreduce.py`'s JSON keys), then times a plain copy of
//!   each size in this process (`memcpy`: the memory bandwidth of the moment).
//!
//! - **gemm**: the bf16 GEMM against the f32 `gemm` crate on the GPT's products, 1 and 2
//!   threads, in GFLOP/s and fractions of the nominal peak (`gemmbench.rs`).
//!
//! A table by default, JSON lines with `--json` (progress goes to stderr either way). Every wait
//! on a child process has a deadline; children die with the bench (`PR_SET_PDEATHSIG`).
//!
//! # Layout
//!
//! - `main.rs`: the arguments, `main`, `bench` (checks, header, the parts in order).
//! - `tables.rs`: the tables it prints (training and the ddp / PyTorch ratios, sampling, the
//!   all-reduce, lock-step).
//! - `rounds.rs`: the training rounds: our configurations alternating with PyTorch's, scaling
//!   and "vs 1 thread" per round, medians, the ddp / PyTorch comparison.
//! - `train.rs`: one `ddp-trainer` run: models, configurations, the spec, the figures from its
//!   metrics.
//! - `torch.rs`: one `torch_ref.py` (or `torch_gpt.py`) run: finding the script and torch, its
//!   summary line; one `torch_allreduce.py` run.
//! - `gpt.rs`: the GPT's quality run and evaluation of both sides' models.
//! - `sampling.rs`: the time to sample 500 tokens from a trained GPT.
//! - `lockstep.rs`: the lock-step threads and their figures.
//! - `allreduce.rs`: the all-reduce engines, workers and their figures; the memcpy reference.
//! - `gemmbench.rs`: the bf16 and f32 GEMMs on the GPT's shapes and their table.
//! - `procs.rs`: child processes: spawn, wait with a deadline (`wait4`, peak RSS), stop, log tails.

mod allreduce;
mod gemmbench;
mod gpt;
mod lockstep;
mod procs;
mod rounds;
mod sampling;
mod tables;
mod torch;
mod train;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use ddp_trainer::spec::Precision;

use allreduce::{AR_ENGINES, allreduce_worker, bench_allreduce, memcpy_figures};
use rounds::{Setup, bench_training};
use tables::{
    print_allreduce_table, print_comparisons, print_lockstep_table, print_sampling,
    print_train_table,
};
use torch::Torch;
use train::{Data, GptShape, Model, Trainer, Workload, find_data_dir, find_text, find_trainer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum What {
    Train,
    Allreduce,
    /// Two pinned threads in lock-step against free-running: this machine's ceiling for world 2
    /// against 1+1.
    Lockstep,
    /// The GPT's full recipe at world 2, both sides' final models evaluated alike (--model gpt).
    Quality,
    /// The bf16 GEMM against the f32 one on the GPT's matrix products.
    Gemm,
    /// train, allreduce and lockstep.
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModelSel {
    Cnn,
    Mlp,
    #[value(name = "resnet18")]
    Resnet18,
    /// The baby GPT on a text file (torch_gpt.py).
    Gpt,
    /// cnn, mlp and resnet18.
    All,
}

impl ModelSel {
    fn models(self) -> &'static [Model] {
        match self {
            ModelSel::Cnn => &[Model::Cnn],
            ModelSel::Mlp => &[Model::Mlp],
            ModelSel::Resnet18 => &[Model::Resnet18],
            ModelSel::Gpt => &[Model::Gpt],
            ModelSel::All => &[Model::Cnn, Model::Mlp, Model::Resnet18],
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "ddp-bench",
    version,
    about = "Training throughput and all-reduce bandwidth, measured like the PyTorch references \
             in bench/pytorch/ (see docs/performance.md)"
)]
struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value = "all")]
    what: What,
    /// Models of the training benchmark.
    #[arg(long, value_enum, default_value = "all")]
    model: ModelSel,
    /// Epochs per training run (torch_ref.py --epochs) [default: 3 for cnn and mlp, 1 for
    /// resnet18].
    #[arg(long)]
    epochs: Option<usize>,
    /// Batch size per replica (torch_ref.py --batch, torch_gpt.py --batch) [default: 32; gpt:
    /// 12].
    #[arg(long)]
    batch: Option<usize>,
    /// gpt: optimizer steps per run (torch_gpt.py --iters) [default: 300; --what quality:
    /// 2000, the full recipe].
    #[arg(long)]
    steps: Option<usize>,
    /// resnet18: synthetic 3x32x32 training images, a quarter as many test images
    /// (torch_ref.py --synthetic).
    #[arg(long, value_name = "N", default_value_t = 512)]
    synthetic: usize,
    /// gpt: the GPT's layers, heads, width and context, L,H,E,B (both sides) [default: the baby
    /// GPT, 4,4,128,64]; the larger one is 6,6,384,256.
    #[arg(long, value_name = "L,H,E,B", value_parser = GptShape::parse)]
    gpt_shape: Option<GptShape>,
    /// Our runs' train.precision (f32, bf16, fp16); with --compare-torch, PyTorch's runs take
    /// torch.autocast in bf16 where it is bf16.
    #[arg(long, value_name = "P", default_value = "f32", value_parser = ["f32", "bf16", "fp16"])]
    precision: String,
    /// CPU threads per replica of the world-1 "all cores" configuration (also PyTorch's)
    /// [default: the number of cores].
    #[arg(long, value_name = "T")]
    threads: Option<usize>,
    /// Also run bench/pytorch/torch_ref.py (training; torch_gpt.py for gpt) and torch_allreduce.py
    /// (all-reduce) with this Python (one with torch), alternating with our runs, and print ddp /
    /// PyTorch ratios.
    #[arg(long, value_name = "PYTHON")]
    compare_torch: Option<PathBuf>,
    /// The PyTorch reference script for --compare-torch; torch_gpt.py and torch_allreduce.py are
    /// taken from beside it [default: bench/pytorch/torch_ref.py of the repository this was built
    /// from, else of the current folder].
    #[arg(long, value_name = "PATH")]
    torch_ref: Option<PathBuf>,
    /// MNIST-format data folder (default: examples/data/mnist-sample); gpt: the text file
    /// (default: examples/data/shakespeare/input.txt).
    #[arg(long)]
    data: Option<PathBuf>,
    /// One JSON line per figure instead of a table.
    #[arg(long)]
    json: bool,
    /// The ddp-trainer executable (default: the one beside this executable).
    #[arg(long)]
    trainer: Option<PathBuf>,
    /// Longest wait for one child run, in seconds (workers: their collectives' timeout).
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Keep the temporary folder (specs, run folders, logs) and print where it is.
    #[arg(long)]
    keep: bool,
    /// Rounds of each benchmark (training: per model all configurations; all-reduce: every
    /// engine; each alternating with PyTorch's); the tables show each figure's median and its
    /// range.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Internal: one rank of the all-reduce benchmark (RANK, WORLD_SIZE, MASTER_ADDR/PORT).
    #[arg(long, hide = true)]
    allreduce_worker: bool,
    /// Internal: the worker all-reduces through shared memory.
    #[arg(long, hide = true)]
    shm: bool,
    /// Internal: the worker's engine name in its JSON lines.
    #[arg(long, hide = true, default_value = "ddp")]
    engine: String,
}

impl Args {
    fn wants_training(&self) -> bool {
        matches!(self.what, What::Train | What::All)
    }

    fn wants_allreduce(&self) -> bool {
        matches!(self.what, What::Allreduce | What::All)
    }

    fn wants_lockstep(&self) -> bool {
        matches!(self.what, What::Lockstep | What::All)
    }

    /// The GPT's steps per run.
    fn gpt_steps(&self) -> usize {
        self.steps.unwrap_or(if self.what == What::Quality {
            2000
        } else {
            300
        })
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.allreduce_worker {
        return match allreduce_worker(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ddp-bench worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = check_args(&args) {
        eprintln!("ddp-bench: {e}");
        return ExitCode::from(2);
    }
    let tmp = match make_tmp_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ddp-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = bench(&args, &tmp);
    if let Err(e) = &result {
        eprintln!("ddp-bench: {e}");
    }
    let empty = fs::read_dir(&tmp).map_or(true, |mut d| d.next().is_none());
    if (args.keep || result.is_err()) && !empty {
        eprintln!("ddp-bench: specs, runs and logs kept in {}", tmp.display());
    } else {
        let _ = fs::remove_dir_all(&tmp);
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Usage errors that clap does not catch.
fn check_args(args: &Args) -> Result<(), String> {
    if args.epochs == Some(0) || args.batch == Some(0) || args.steps == Some(0) {
        return Err("--epochs, --batch and --steps must be at least 1".into());
    }
    if args.what == What::Quality && args.model != ModelSel::Gpt {
        return Err("--what quality is the GPT's: pass --model gpt".into());
    }
    if args.threads == Some(0) {
        return Err("--threads must be at least 1".into());
    }
    if args.synthetic < 4 {
        return Err("--synthetic must be at least 4 (a quarter of it are test images)".into());
    }
    if args.torch_ref.is_some() && args.compare_torch.is_none() {
        return Err("--torch-ref is the script of --compare-torch PYTHON: pass both".into());
    }
    if args.what == What::Quality && args.gpt_shape.is_some_and(|g| g != GptShape::BABY) {
        return Err("--what quality is the baby GPT's full recipe: leave out --gpt-shape".into());
    }
    if args.precision == "fp16" && args.compare_torch.is_some() {
        return Err(
            "--precision fp16 has no PyTorch side here (its CPU references take bf16 autocast): \
             use --precision bf16 with --compare-torch"
                .into(),
        );
    }
    Ok(())
}

fn bench(args: &Args, tmp: &Path) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = load_average();
    say(
        args,
        &format!(
            "ddp-bench {} | {cores} CPU cores | load average {load}",
            env!("CARGO_PKG_VERSION")
        ),
    );
    warn_if_busy(&load);
    if args.wants_training() {
        let setup = prepare_training(args, tmp, cores)?;
        say(
            args,
            &format!("ddp-trainer: {}", setup.trainer.exe.display()),
        );
        if let Some(torch) = &setup.torch {
            say(args, &torch.describe(args.model == ModelSel::Gpt));
        }
        let results = bench_training(&setup)?;
        if !args.json {
            print_train_table(&setup, &results.figures);
            print_comparisons(&setup, &results);
            print_sampling(&results.sampling);
        }
    }
    if args.what == What::Quality {
        let setup = prepare_training(args, tmp, cores)?;
        say(
            args,
            &format!("ddp-trainer: {}", setup.trainer.exe.display()),
        );
        if let Some(torch) = &setup.torch {
            say(args, &torch.describe(true));
        }
        let w = &setup.workloads[0];
        let q = gpt::bench_quality(&setup, w)?;
        if args.json {
            println!("{}", q.json_line());
            println!("{}", q.sample.json_line(None));
        } else {
            gpt::print_quality(&q, setup.torch.as_ref().map(|t| t.version.as_str()));
        }
    }
    if args.wants_allreduce() {
        let torch = prepare_torch(args, tmp)?;
        let mut figures = Vec::new();
        for round in 1..=args.repeat {
            // Names this round in its folders and progress lines when there are several.
            let tag = if args.repeat > 1 {
                format!("round {round}/{}", args.repeat)
            } else {
                String::new()
            };
            let mut round_figures = Vec::new();
            for engine in AR_ENGINES {
                round_figures.extend(bench_allreduce(args, tmp, engine, &tag)?);
            }
            if let Some(torch) = &torch {
                round_figures.extend(torch.run_allreduce(&tag)?);
            }
            round_figures.extend(memcpy_figures());
            if args.json {
                for f in &round_figures {
                    println!("{}", f.line);
                }
            }
            figures.extend(round_figures);
        }
        if !args.json {
            print_allreduce_table(&figures, args.repeat);
        }
    }
    if args.wants_lockstep() {
        bench_lockstep(args, cores)?;
    }
    if args.what == What::Gemm {
        gemmbench::bench_gemm(args)?;
    }
    Ok(())
}

/// [`lockstep`]'s rounds and table (needs 2 cores).
fn bench_lockstep(args: &Args, cores: usize) -> Result<(), String> {
    if cores < 2 {
        say(args, "lock-step: skipped (it needs 2 cores)");
        return Ok(());
    }
    let units = lockstep::calibrate();
    let mut figures = Vec::new();
    for round in 0..args.repeat {
        eprintln!(
            "ddp-bench: two threads in lock-step and free-running (round {}/{}) ...",
            round + 1,
            args.repeat
        );
        let round_figures = lockstep::bench_round(units)?;
        if args.json {
            for f in &round_figures {
                println!("{}", f.json_line(round));
            }
        }
        figures.extend(round_figures);
    }
    if !args.json {
        print_lockstep_table(&figures, args.repeat);
    }
    Ok(())
}

/// A line of the header: on stdout with the tables, on stderr with `--json`.
fn say(args: &Args, line: &str) {
    if args.json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

fn warn_if_busy(load: &str) {
    let busy = load
        .split_whitespace()
        .next()
        .and_then(|l| l.parse::<f64>().ok());
    if let Some(l) = busy.filter(|l| *l > 0.5) {
        eprintln!(
            "ddp-bench: warning: the machine is not idle (1-minute load average {l}); every figure \
             depends on the CPU the replicas get"
        );
    }
}

/// The trainer, the data, PyTorch: everything the training runs need, found before any runs.
fn prepare_training<'a>(args: &Args, tmp: &'a Path, cores: usize) -> Result<Setup<'a>, String> {
    let timeout = Duration::from_secs(args.timeout_s);
    let trainer = Trainer {
        exe: find_trainer(args.trainer.as_deref())?,
        tmp,
        timeout,
    };
    let models = args.model.models();
    let mnist = match models.iter().any(|m| m.uses_mnist()) {
        true => Some(find_data_dir(args.data.as_deref())?),
        false => None,
    };
    let text = match models.contains(&Model::Gpt) {
        true => Some(find_text(args.data.as_deref())?),
        false => None,
    };
    let workloads = models
        .iter()
        .map(|&model| Workload {
            model,
            epochs: args.epochs.unwrap_or(model.default_epochs()),
            steps: if model == Model::Gpt {
                args.gpt_steps()
            } else {
                0
            },
            batch: args.batch.unwrap_or(model.default_batch()),
            precision: match args.precision.as_str() {
                "bf16" => Precision::Bf16,
                "fp16" => Precision::Fp16,
                _ => Precision::F32,
            },
            gpt: args.gpt_shape.unwrap_or(GptShape::BABY),
            data: match (&mnist, &text) {
                (Some(dir), _) if model.uses_mnist() => Data::Mnist(dir.clone()),
                (_, Some(path)) if model == Model::Gpt => Data::Text(path.clone()),
                _ => Data::Synthetic {
                    train: args.synthetic,
                },
            },
        })
        .collect();
    let torch = prepare_torch(args, tmp)?;
    Ok(Setup {
        trainer,
        torch,
        workloads,
        threads: args.threads.unwrap_or(cores),
        rounds: args.repeat,
        json: args.json,
    })
}

/// PyTorch for `--compare-torch PYTHON`, checked before anything runs.
fn prepare_torch<'a>(args: &Args, tmp: &'a Path) -> Result<Option<Torch<'a>>, String> {
    let Some(python) = &args.compare_torch else {
        return Ok(None);
    };
    let timeout = Duration::from_secs(args.timeout_s);
    Torch::prepare(python, args.torch_ref.as_deref(), tmp, timeout).map(Some)
}

// ---------------------------------------------------------------------------------------------
// Tables

fn make_tmp_dir() -> Result<PathBuf, String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("ddp-bench-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// `/proc/loadavg`'s first three fields (a busy machine makes every figure lower).
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}
