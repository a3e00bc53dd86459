//! `ddp-bench`: the figures of `docs/performance.md`, measured the same way as the PyTorch
//! references in `shared/bench/` (`torch_ref.py`, `torch_allreduce.py`).
//!
//! - **train**: for mnist-cnn and mlp at world 1 and world 2, runs the sibling `ddp-trainer`
//!   executable (`--standalone --nproc W`, one CPU thread per replica) on a generated spec that
//!   mirrors `torch_ref.py` (CNN: Adam lr 0.001 × world; MLP: SGD momentum 0.9 lr 0.01 × world;
//!   both StepLR(1, 0.7); no validation split; no checkpoints), then reads the run's metrics
//!   JSONL. Each rank's training time is the sum of its `train` records' `samples /
//!   samples_per_sec` (the logging windows tile every epoch's training loop, evaluation and
//!   checkpoints excluded); the run's time is the slowest rank's, and its throughput is the
//!   samples of all ranks divided by that time. Scaling efficiency = world-2 throughput /
//!   (2 × world-1 throughput).
//! - **allreduce**: spawns itself twice as hidden workers (`--allreduce-worker`, with RANK,
//!   WORLD_SIZE, MASTER_ADDR, MASTER_PORT) that join a `ProcessGroup` over loopback and run
//!   `bench_all_reduce` on 1, 25 and 100 MiB; rank 0 prints `torch_allreduce.py`'s JSON keys.
//!
//! A table by default, JSON lines with `--json` (progress goes to stderr either way). Every wait
//! on a child process has a deadline; children die with the bench (`PR_SET_PDEATHSIG`).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use ddp_trainer::dist::bench::{AllReduceFigure, bench_all_reduce};
use ddp_trainer::dist::group::{GroupConfig, ProcessGroup};
use ddp_trainer::env::DistEnv;
use ddp_trainer::metrics::{MetricKind, read_metrics};

/// All-reduce sizes of `torch_allreduce.py` (1 MB = 1 << 20 bytes).
const SIZES: [usize; 3] = [1 << 20, 25 << 20, 100 << 20];
/// World size of the all-reduce benchmark.
const AR_WORLD: usize = 2;
/// `engine` of the all-reduce JSON lines, and whether that engine uses shared memory.
const AR_ENGINES: [(&str, bool); 2] = [("ddp-tcp", false), ("ddp-shm", true)];
/// World sizes of the training benchmark.
const WORLDS: [usize; 2] = [1, 2];
/// Time between SIGTERM and SIGKILL when a child is stopped (the launcher itself gives its
/// replicas 10 s).
const GRACE: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);
/// Variables of a surrounding launcher that must not leak into the children.
const LAUNCHER_VARS: [&str; 16] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_TASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "DDP_TOKEN",
    "TORCHELASTIC_RESTART_COUNT",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum What {
    Train,
    Allreduce,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModelSel {
    Cnn,
    Mlp,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    Cnn,
    Mlp,
}

impl Model {
    /// The name `torch_ref.py` uses (`--model cnn|mlp`).
    fn short(self) -> &'static str {
        match self {
            Model::Cnn => "cnn",
            Model::Mlp => "mlp",
        }
    }

    /// `model.name` of the spec.
    fn spec_name(self) -> &'static str {
        match self {
            Model::Cnn => "mnist-cnn",
            Model::Mlp => "mlp",
        }
    }

    /// `[train]` keys mirroring `torch_ref.py` (which applies StepLR(1, 0.7) to both models).
    fn train_keys(self) -> &'static str {
        match self {
            Model::Cnn => "optimizer = \"adam\"\nlr = 0.001\n",
            Model::Mlp => "optimizer = \"sgd\"\nlr = 0.01\nmomentum = 0.9\n",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "ddp-bench",
    version,
    about = "Training throughput and all-reduce bandwidth, measured like shared/bench's PyTorch \
             references (see docs/performance.md)"
)]
struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value = "all")]
    what: What,
    /// Models of the training benchmark.
    #[arg(long, value_enum, default_value = "all")]
    model: ModelSel,
    /// Epochs per training run (torch_ref.py --epochs).
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Batch size per replica (torch_ref.py --batch).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// MNIST-format data folder (default: examples/data/mnist-sample).
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
    /// Rounds of the training benchmark (world 1, world 2, 1+1 per round, alternating); the table
    /// shows each figure's median and the range of the scaling.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Internal: one rank of the all-reduce benchmark (RANK, WORLD_SIZE, MASTER_ADDR/PORT).
    #[arg(long, hide = true)]
    allreduce_worker: bool,
    /// Internal: the worker all-reduces through shared memory.
    #[arg(long, hide = true)]
    shm: bool,
}

/// One training run's figures.
#[derive(Clone)]
struct TrainFigure {
    model: Model,
    world: usize,
    /// Training samples of all ranks together.
    samples: u64,
    /// The slowest rank's training time.
    train_s: f64,
    samples_per_s: f64,
    test_acc: Option<f64>,
    /// The whole `ddp-trainer` run (start-up, data loading, test, exit) seen from here.
    wall_s: f64,
    /// Set on world 2 (and 1+1): samples/s over 2 × world 1's.
    scaling: Option<f64>,
    /// Lowest and highest scaling over the rounds (`--repeat`).
    scaling_range: Option<(f64, f64)>,
    /// Two independent world-1 runs at once ([`Job::run_pair`]), not one world-2 run.
    independent: bool,
}

/// One all-reduce size: the figure and rank 0's JSON line as printed.
struct ArFigure {
    engine: &'static str,
    fig: AllReduceFigure,
    line: String,
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
    if args.epochs == 0 || args.batch == 0 {
        eprintln!("ddp-bench: --epochs and --batch must be at least 1");
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

fn bench(args: &Args, tmp: &Path) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = load_average();
    let header = format!(
        "ddp-bench {} | {cores} CPU cores | load average {load}",
        env!("CARGO_PKG_VERSION")
    );
    if args.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
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
    if matches!(args.what, What::Train | What::All) {
        let figures = bench_training(args, tmp)?;
        if !args.json {
            print_train_table(args, &figures);
        }
    }
    if matches!(args.what, What::Allreduce | What::All) {
        let mut figures = Vec::new();
        for (engine, shm) in AR_ENGINES {
            figures.extend(bench_allreduce(args, tmp, engine, shm)?);
        }
        if args.json {
            for f in &figures {
                println!("{}", f.line);
            }
        } else {
            print_allreduce_table(&figures);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Training throughput

fn bench_training(args: &Args, tmp: &Path) -> Result<Vec<TrainFigure>, String> {
    let job = Job {
        args,
        trainer: trainer_exe(args)?,
        data: data_dir(args)?,
        tmp,
    };
    let models: &[Model] = match args.model {
        ModelSel::Cnn => &[Model::Cnn],
        ModelSel::Mlp => &[Model::Mlp],
        ModelSel::All => &[Model::Cnn, Model::Mlp],
    };
    let mut figures: Vec<TrainFigure> = Vec::new();
    for &model in models {
        let mut rounds: Vec<[TrainFigure; 3]> = Vec::new();
        for round in 0..args.repeat {
            let tag = format!("-r{round}");
            let [one, two] = WORLDS.map(|world| {
                eprintln!(
                    "ddp-bench: training {} at world {world} ({} epochs, batch {} per replica, \
                     1 thread per replica; round {}/{}) ...",
                    model.spec_name(),
                    args.epochs,
                    args.batch,
                    round + 1,
                    args.repeat
                );
                job.run(model, world, &tag)
            });
            eprintln!(
                "ddp-bench: training {} twice at world 1 at the same time (the machine's ceiling) ...",
                model.spec_name()
            );
            let pair = job.run_pair(model, &tag);
            let (one, mut two, mut pair) = (one?, two?, pair?);
            two.scaling = Some(two.samples_per_s / (2.0 * one.samples_per_s));
            pair.scaling = Some(pair.samples_per_s / (2.0 * one.samples_per_s));
            if args.json {
                for f in [&one, &two, &pair] {
                    println!("{}", train_json(args, f, round));
                }
            }
            rounds.push([one, two, pair]);
        }
        for k in 0..3 {
            figures.push(median_figure(rounds.iter().map(|r| &r[k]).collect()));
        }
    }
    Ok(figures)
}

/// The run with the median samples/s, its scaling replaced by the median of the rounds' scalings
/// (each against the world-1 run of its own round), with their range.
fn median_figure(mut runs: Vec<&TrainFigure>) -> TrainFigure {
    let mut scalings: Vec<f64> = runs.iter().filter_map(|f| f.scaling).collect();
    scalings.sort_by(f64::total_cmp);
    runs.sort_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
    let mut f = runs[runs.len() / 2].clone();
    if let (Some(&lo), Some(&hi)) = (scalings.first(), scalings.last()) {
        f.scaling = Some(scalings[scalings.len() / 2]);
        f.scaling_range = Some((lo, hi));
    }
    f
}

/// The `ddp-trainer` beside this executable (or `--trainer`).
fn trainer_exe(args: &Args) -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let path = match &args.trainer {
        Some(p) => p.clone(),
        None => me.with_file_name(format!("ddp-trainer{}", std::env::consts::EXE_SUFFIX)),
    };
    if !path.is_file() {
        return Err(format!(
            "{} not found: build it first (cargo build --release -p ddp-trainer) or pass \
             --trainer PATH",
            path.display()
        ));
    }
    // `cargo run --bin ddp-bench` rebuilds the library and this binary, not ddp-trainer: a
    // trainer older than the newest library build in target/<profile>/deps measures old code.
    let mtime = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    let newest_lib = me
        .parent()
        .and_then(|d| fs::read_dir(d.join("deps")).ok())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("libddp_trainer-") && name.ends_with(".rlib")
        })
        .filter_map(|e| mtime(&e.path()))
        .max();
    let stale = matches!((mtime(&path), newest_lib), (Some(t), Some(lib)) if t < lib);
    if args.trainer.is_none() && stale {
        eprintln!(
            "ddp-bench: warning: {} is older than the library it is built from; `cargo run --bin \
             ddp-bench` does not rebuild it: run `cargo build --release -p ddp-trainer` first",
            path.display()
        );
    }
    Ok(path)
}

fn data_dir(args: &Args) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match &args.data {
        Some(d) => vec![d.clone()],
        None => vec![
            PathBuf::from("examples/data/mnist-sample"),
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/mnist-sample"),
        ],
    };
    for c in &candidates {
        if c.is_dir() {
            return c
                .canonicalize()
                .map_err(|e| format!("{}: {e}", c.display()));
        }
    }
    Err(format!(
        "data folder {} not found (pass --data DIR, an MNIST-format folder)",
        candidates[0].display()
    ))
}

/// The spec of one run: torch_ref.py's recipe, no validation split, no checkpoints.
fn spec_text(args: &Args, data: &Path, model: Model, world: usize) -> String {
    let path = serde_json::to_string(&data.to_string_lossy()).expect("a string serializes");
    format!(
        "name = \"bench-{short}-w{world}\"\n\n\
         [model]\nname = \"{model}\"\n\n\
         [data]\nname = \"mnist\"\npath = {path}\nval_fraction = 0.0\n\n\
         [train]\nepochs = {epochs}\nbatch_size = {batch}\n{keys}lr_scaling = \"linear\"\n\
         scheduler = {{ kind = \"step\", step_size = 1, gamma = 0.7 }}\nseed = 1\n\n\
         [ddp]\nreplicas = {world}\nthreads = 1\ntimeout_s = 300\n\n\
         [checkpoint]\nevery_epochs = 0\n",
        short = model.short(),
        model = model.spec_name(),
        epochs = args.epochs,
        batch = args.batch,
        keys = model.train_keys(),
    )
}

/// A training run in progress.
struct Running {
    child: Child,
    what: String,
    out: PathBuf,
    stderr: PathBuf,
    model: Model,
    world: usize,
    t0: Instant,
}

/// What every training run of the bench shares.
struct Job<'a> {
    args: &'a Args,
    trainer: PathBuf,
    data: PathBuf,
    tmp: &'a Path,
}

impl Job<'_> {
    /// One `ddp-trainer --standalone` run of `model` at `world`, in a folder named with `tag`.
    fn run(&self, model: Model, world: usize, tag: &str) -> Result<TrainFigure, String> {
        let run = self.start(model, world, tag)?;
        self.finish(run)
    }

    /// Two independent world-1 runs at the same time, each on its own core and talking to nobody:
    /// what the machine itself lets two replicas do (shared caches, memory bandwidth, the
    /// hypervisor). Their combined samples/s over 2 × world 1 bounds any world-2 scaling here.
    fn run_pair(&self, model: Model, tag: &str) -> Result<TrainFigure, String> {
        let a = self.start(model, 1, &format!("{tag}-pair-a"))?;
        let b = match self.start(model, 1, &format!("{tag}-pair-b")) {
            Ok(b) => b,
            Err(e) => {
                let mut a = a;
                let _ = a.child.kill();
                return Err(e);
            }
        };
        let (fa, fb) = (self.finish(a), self.finish(b));
        let (fa, fb) = (fa?, fb?);
        let samples = fa.samples + fb.samples;
        let train_s = fa.train_s.max(fb.train_s);
        Ok(TrainFigure {
            model,
            world: 2,
            samples,
            train_s,
            samples_per_s: samples as f64 / train_s,
            test_acc: fa.test_acc,
            wall_s: fa.wall_s.max(fb.wall_s),
            scaling: None,
            scaling_range: None,
            independent: true,
        })
    }

    fn start(&self, model: Model, world: usize, tag: &str) -> Result<Running, String> {
        let (args, tmp) = (self.args, self.tmp);
        let dir = tmp.join(format!("{}-w{world}{tag}", model.short()));
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let spec = dir.join("spec.toml");
        fs::write(&spec, spec_text(args, &self.data, model, world))
            .map_err(|e| format!("{}: {e}", spec.display()))?;
        let out = dir.join("run");
        let (stdout, stderr) = (dir.join("stdout.log"), dir.join("stderr.log"));
        let mut cmd = Command::new(&self.trainer);
        clean_env(&mut cmd);
        cmd.env("RAYON_NUM_THREADS", "1")
            .arg(&spec)
            .arg("--standalone")
            .arg("--nproc")
            .arg(world.to_string())
            .arg("--out")
            .arg(&out);
        let what = format!("ddp-trainer ({} world {world}{tag})", model.spec_name());
        let t0 = Instant::now();
        let child =
            spawn(cmd, &stdout, &stderr).map_err(|e| format!("cannot start {what}: {e}"))?;
        Ok(Running {
            child,
            what,
            out,
            stderr,
            model,
            world,
            t0,
        })
    }

    fn finish(&self, run: Running) -> Result<TrainFigure, String> {
        let args = self.args;
        let Running {
            child,
            what,
            out,
            stderr,
            model,
            world,
            t0,
        } = run;
        let status = wait_deadline(child, Duration::from_secs(args.timeout_s), &what)
            .map_err(|e| format!("{e}\n{}", tail(&stderr)))?;
        let wall_s = t0.elapsed().as_secs_f64();
        if !status.success() {
            return Err(format!("{what} failed ({status})\n{}", tail(&stderr)));
        }

        let mut samples = 0u64;
        let mut train_s = 0f64;
        let mut test_acc = None;
        for rank in 0..world {
            let path = out.join(format!("metrics/rank-{rank}.jsonl"));
            let records = read_metrics(&path).map_err(|e| e.to_string())?;
            let (mut n, mut t) = (0u64, 0f64);
            for r in records.iter().filter(|r| r.kind == MetricKind::Train) {
                let s = r
                    .samples
                    .ok_or_else(|| format!("{}: a train record without samples", path.display()))?;
                if !(r.samples_per_sec.is_finite() && r.samples_per_sec > 0.0) {
                    return Err(format!(
                        "{}: samples_per_sec {} in a train record",
                        path.display(),
                        r.samples_per_sec
                    ));
                }
                n += s;
                t += s as f64 / r.samples_per_sec;
            }
            if n == 0 {
                return Err(format!("{}: no train records", path.display()));
            }
            samples += n;
            train_s = train_s.max(t);
            if rank == 0 {
                test_acc = records
                    .iter()
                    .rev()
                    .find(|r| r.kind == MetricKind::Test)
                    .and_then(|r| r.accuracy);
            }
        }
        Ok(TrainFigure {
            model,
            world,
            samples,
            train_s,
            samples_per_s: samples as f64 / train_s,
            test_acc,
            wall_s,
            scaling: None,
            scaling_range: None,
            independent: false,
        })
    }
}

fn train_json(args: &Args, f: &TrainFigure, round: u32) -> String {
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("null".to_string(), |v| format!("{v:.digits$}"));
    format!(
        "{{\"bench\": \"{}\", \"engine\": \"ddp-trainer-{}\", \"model\": \"{}\", \"world\": {}, \
         \"threads_per_replica\": 1, \"batch\": {}, \"epochs\": {}, \"samples\": {}, \
         \"train_s\": {:.3}, \"samples_per_s\": {:.1}, \"scaling_efficiency\": {}, \
         \"test_acc\": {}, \"wall_s\": {:.3}, \"round\": {round}}}",
        if f.independent {
            "train-independent-pair"
        } else {
            "train"
        },
        env!("CARGO_PKG_VERSION"),
        f.model.short(),
        f.world,
        args.batch,
        args.epochs,
        f.samples,
        f.train_s,
        f.samples_per_s,
        opt(f.scaling, 4),
        opt(f.test_acc, 4),
        f.wall_s
    )
}

fn print_train_table(args: &Args, figures: &[TrainFigure]) {
    println!();
    println!(
        "Training throughput: MNIST sample, {} epochs, batch {} per replica, 1 CPU thread per \
         replica, ddp-trainer --standalone",
        args.epochs, args.batch
    );
    if args.repeat > 1 {
        println!(
            "median of {} rounds (each scaling against its own round's world 1; range in brackets)",
            args.repeat
        );
    }
    println!(
        "{:<6} {:>5} {:>8} {:>9} {:>10} {:>8} {:>9} {:>7} {:>15}",
        "model",
        "world",
        "samples",
        "train s",
        "samples/s",
        "scaling",
        "test acc",
        "wall s",
        "scaling range"
    );
    for f in figures {
        let scaling = f
            .scaling
            .map_or("-".to_string(), |s| format!("{:.1}%", 100.0 * s));
        let range = match f.scaling_range {
            Some((lo, hi)) if args.repeat > 1 => format!("[{:.1}–{:.1}%]", 100.0 * lo, 100.0 * hi),
            _ => String::new(),
        };
        let acc = f
            .test_acc
            .map_or("-".to_string(), |a| format!("{:.2}%", 100.0 * a));
        println!(
            "{:<6} {:>5} {:>8} {:>9.2} {:>10.1} {:>8} {:>9} {:>7.1} {:>15}",
            f.model.short(),
            if f.independent {
                "1+1".to_string()
            } else {
                f.world.to_string()
            },
            f.samples,
            f.train_s,
            f.samples_per_s,
            scaling,
            acc,
            f.wall_s,
            range
        );
    }
    println!(
        "samples/s = training samples of all ranks / training time of the slowest rank (sum of its \
         train records' samples / samples_per_sec); scaling = world-2 samples/s / (2 x world-1)"
    );
    println!(
        "world 1+1 = two independent world-1 runs at the same time (no communication): the scaling \
         this machine allows two replicas at all"
    );
}

// ---------------------------------------------------------------------------------------------
// All-reduce bandwidth

/// One rank of the all-reduce benchmark, placed by the torchrun variables.
fn allreduce_worker(args: &Args) -> Result<(), String> {
    let env = DistEnv::from_env().map_err(|e| e.to_string())?;
    let mut group = ProcessGroup::init(&GroupConfig {
        rank: env.rank,
        world_size: env.world_size,
        master_addr: env.master_addr.clone(),
        master_port: env.master_port,
        timeout: Duration::from_secs(args.timeout_s),
        token: std::env::var("DDP_TOKEN").ok().filter(|t| !t.is_empty()),
        shared_memory: args.shm,
    })
    .map_err(|e| e.to_string())?;
    let figures = bench_all_reduce(group.collective(), &SIZES).map_err(|e| e.to_string())?;
    if env.rank == 0 {
        for f in &figures {
            let engine = AR_ENGINES[args.shm as usize].0;
            println!("{}", f.json_line(engine, env.world_size));
        }
    }
    group.shutdown().map_err(|e| e.to_string())
}

fn bench_allreduce(
    args: &Args,
    tmp: &Path,
    engine: &'static str,
    shm: bool,
) -> Result<Vec<ArFigure>, String> {
    eprintln!(
        "ddp-bench: {engine} all-reduce at world {AR_WORLD} ({} MiB) ...",
        SIZES.map(|s| (s >> 20).to_string()).join(", ")
    );
    let me = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let dir = tmp.join(format!("allreduce-{engine}"));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))?
        .port();
    // The workers' collectives give up after this long without progress.
    let worker_timeout = args.timeout_s.clamp(1, 120);
    let mut children: Vec<(Child, PathBuf)> = Vec::new();
    for rank in 0..AR_WORLD {
        let mut cmd = Command::new(&me);
        clean_env(&mut cmd);
        cmd.arg("--allreduce-worker");
        if shm {
            cmd.arg("--shm");
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

    let out = dir.join("rank-0.out");
    let text = fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut figures = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("worker 0 printed {line:?}: {e}"))?;
        let num = |k: &str| {
            v[k].as_f64()
                .ok_or_else(|| format!("worker 0: no {k} in {line}"))
        };
        figures.push(ArFigure {
            engine,
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
            "worker 0 printed {} figures, expected {}",
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

fn print_allreduce_table(figures: &[ArFigure]) {
    println!();
    println!(
        "All-reduce: world {AR_WORLD} on this host (ddp-tcp: TCP ring over loopback; ddp-shm: \
         shared memory), sum of f32, median of 10 after 3 warm-ups"
    );
    println!(
        "{:<8} {:>8} {:>11} {:>11} {:>11}",
        "engine", "size", "median ms", "algbw GB/s", "busbw GB/s"
    );
    for f in figures {
        println!(
            "{:<8} {:>8} {:>11.3} {:>11.3} {:>11.3}",
            f.engine,
            format!("{} MiB", f.fig.bytes >> 20),
            f.fig.median_s * 1e3,
            f.fig.algbw_gbps,
            f.fig.busbw_gbps
        );
    }
    println!("algbw = bytes / median time (1 GB = 1e9 bytes); busbw = algbw x 2(W-1)/W");
}

// ---------------------------------------------------------------------------------------------
// Child processes

fn clean_env(cmd: &mut Command) {
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
}

/// Starts `cmd` with its output in two files and `PR_SET_PDEATHSIG(SIGKILL)`, so that it dies
/// with the bench.
fn spawn(mut cmd: Command, stdout: &Path, stderr: &Path) -> std::io::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only makes async-signal-safe calls (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "the bench exited before the child started",
                ));
            }
            Ok(())
        });
    }
    cmd.stdin(Stdio::null())
        .stdout(File::create(stdout)?)
        .stderr(File::create(stderr)?)
        .spawn()
}

/// Waits for `child` until `limit`; then SIGTERM (the launcher stops its replicas), SIGKILL
/// after [`GRACE`], and an error.
fn wait_deadline(mut child: Child, limit: Duration, what: &str) -> Result<ExitStatus, String> {
    let start = Instant::now();
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("waiting for {what}: {e}"))?
        {
            return Ok(status);
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) on the pid of our own unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let stopped = Instant::now();
            while stopped.elapsed() < GRACE {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(POLL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{what} did not finish within {} s (--timeout-s); stopped it",
                limit.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
}

fn kill_all(children: &mut [(Child, PathBuf)]) {
    for (c, _) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The last few lines of a log file, for error messages.
fn tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map_or(0, |m| m.len());
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(4000)));
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let last = &lines[lines.len().saturating_sub(20)..];
    format!(
        "--- last lines of {} ---\n{}",
        path.display(),
        last.join("\n")
    )
}

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
