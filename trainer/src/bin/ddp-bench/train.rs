//! One training run of `ddp-trainer --standalone`: the models, the configurations, the spec
//! (`torch_ref.py`'s recipe, or `torch_gpt.py`'s for the GPT), the process, and the figures read
//! back from its metrics.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use ddp_trainer::metrics::{MetricKind, MetricRecord, read_metrics};
use ddp_trainer::spec::Precision;

use crate::procs::{self, clean_env, kib_to_mb, spawn, tail, wait_deadline};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    Cnn,
    Mlp,
    Resnet18,
    /// The baby GPT of `torch_gpt.py` on a text file, trained for a number of steps.
    Gpt,
}

impl Model {
    /// The name `torch_ref.py` uses (`--model cnn|mlp|resnet18`); `gpt` for `torch_gpt.py`.
    pub fn short(self) -> &'static str {
        match self {
            Model::Cnn => "cnn",
            Model::Mlp => "mlp",
            Model::Resnet18 => "resnet18",
            Model::Gpt => "gpt",
        }
    }

    /// `model.name` of the spec.
    pub fn spec_name(self) -> &'static str {
        match self {
            Model::Cnn => "mnist-cnn",
            Model::Mlp => "mlp",
            Model::Resnet18 => "resnet18",
            Model::Gpt => "gpt",
        }
    }

    /// Epochs when `--epochs` is not given (the issue's recipe: ResNet-18 trains 1 epoch; the
    /// GPT counts steps instead, see [`Workload::steps`]).
    pub fn default_epochs(self) -> usize {
        match self {
            Model::Cnn | Model::Mlp => 3,
            Model::Resnet18 | Model::Gpt => 1,
        }
    }

    /// Batch size per replica when `--batch` is not given: `torch_ref.py`'s 32, `torch_gpt.py`'s
    /// 12 windows.
    pub fn default_batch(self) -> usize {
        match self {
            Model::Gpt => 12,
            _ => 32,
        }
    }

    /// Whether the model trains on the MNIST-format folder.
    pub fn uses_mnist(self) -> bool {
        matches!(self, Model::Cnn | Model::Mlp)
    }

    /// What its throughput counts: training samples, or tokens for the language model.
    pub fn unit(self) -> &'static str {
        match self {
            Model::Gpt => "tokens",
            _ => "samples",
        }
    }

    /// `[train]` keys mirroring `torch_ref.py` (which applies StepLR(1, 0.7) to every model) and
    /// `torch_gpt.py` (AdamW, betas 0.9/0.99, weight decay 0.1 on matrices, clip 1.0, warm-up 100
    /// then cosine to 1e-4, no learning-rate scaling with the world size).
    fn train_keys(self) -> &'static str {
        match self {
            Model::Cnn => {
                "optimizer = \"adam\"\nlr = 0.001\nlr_scaling = \"linear\"\n\
                 scheduler = { kind = \"step\", step_size = 1, gamma = 0.7 }\n"
            }
            Model::Mlp | Model::Resnet18 => {
                "optimizer = \"sgd\"\nlr = 0.01\nmomentum = 0.9\nlr_scaling = \"linear\"\n\
                 scheduler = { kind = \"step\", step_size = 1, gamma = 0.7 }\n"
            }
            Model::Gpt => {
                "optimizer = \"adamw\"\nlr = 1e-3\nbetas = [0.9, 0.99]\neps = 1e-8\n\
                 weight_decay = 0.1\ngrad_clip = 1.0\n"
            }
        }
    }
}

/// The GPT's warm-up steps: `torch_gpt.py`'s 100, or the whole of a shorter run.
pub fn gpt_warmup(steps: usize) -> usize {
    steps.min(100)
}

/// What a model trains on.
#[derive(Clone, Debug)]
pub enum Data {
    /// An MNIST-format folder (cnn, mlp).
    Mnist(PathBuf),
    /// Synthetic 3x32x32 images of 10 classes: `train` training images, `train / 4` test images.
    Synthetic { train: usize },
    /// A UTF-8 text file, tokenized by character; the last 10 % validates (gpt).
    Text(PathBuf),
}

/// What every run of one model trains, ours and PyTorch's alike.
#[derive(Clone, Debug)]
pub struct Workload {
    pub model: Model,
    pub epochs: usize,
    /// The GPT's optimizer steps (`train.steps`, `torch_gpt.py --iters`); 0 for the others.
    pub steps: usize,
    /// Batch size per replica.
    pub batch: usize,
    pub data: Data,
    /// `train.precision` of our runs; PyTorch's run under bf16 autocast where it is bf16.
    pub precision: Precision,
    /// The GPT's shape (`--gpt-shape`; the baby GPT's by default).
    pub gpt: GptShape,
}

/// A GPT's layers, heads, width and context, as `torch_gpt.py --layers --heads --embd --block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptShape {
    pub layers: usize,
    pub heads: usize,
    pub embd: usize,
    pub block: usize,
}

impl GptShape {
    /// The baby GPT of `examples/gpt-shakespeare.toml` and `torch_gpt.py`'s defaults.
    pub const BABY: GptShape = GptShape {
        layers: 4,
        heads: 4,
        embd: 128,
        block: 64,
    };

    /// `L,H,E,B` (layers, heads, width, context), as `--gpt-shape` takes it.
    pub fn parse(text: &str) -> Result<GptShape, String> {
        let v: Vec<usize> = text
            .split(',')
            .map(|p| p.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                format!("--gpt-shape {text:?}: four whole numbers, L,H,E,B (e.g. 6,6,384,256)")
            })?;
        let [layers, heads, embd, block] = v[..] else {
            return Err(format!(
                "--gpt-shape {text:?}: four numbers, L,H,E,B (e.g. 6,6,384,256)"
            ));
        };
        if layers == 0 || heads == 0 || block == 0 || embd % heads != 0 {
            return Err(format!(
                "--gpt-shape {text:?}: layers, heads and block at least 1, the width a multiple of the heads"
            ));
        }
        Ok(GptShape {
            layers,
            heads,
            embd,
            block,
        })
    }
}

impl Workload {
    /// The data and epochs (or steps), for table titles.
    pub fn describe(&self) -> String {
        let data = match &self.data {
            Data::Mnist(_) => "MNIST sample".to_string(),
            Data::Synthetic { train } => {
                format!("{train} synthetic 3x32x32 images ({} test)", train / 4)
            }
            Data::Text(path) => format!(
                "{}, {}block {}",
                path.file_name().unwrap_or_default().to_string_lossy(),
                match self.gpt {
                    GptShape::BABY => String::new(),
                    g => format!("{} layers x {} wide, ", g.layers, g.embd),
                },
                self.gpt.block
            ),
        };
        let data = match self.precision {
            Precision::F32 => data,
            p => format!("{data}, {}", p.name()),
        };
        if self.model == Model::Gpt {
            return format!("{data}, {} steps", self.steps);
        }
        let plural = if self.epochs == 1 { "" } else { "s" };
        format!("{data}, {} epoch{plural}", self.epochs)
    }

    /// The `[model]` keys of the spec (the GPT's shape: `--gpt-shape`).
    fn model_keys(&self) -> String {
        let name = format!("name = \"{}\"\n", self.model.spec_name());
        match self.model {
            Model::Gpt => {
                let g = self.gpt;
                name + &format!(
                    "layers = {}\nheads = {}\nembd = {}\nblock = {}\n",
                    g.layers, g.heads, g.embd, g.block
                )
            }
            _ => name,
        }
    }

    /// `[train]` keys of the length of the run: epochs, or the GPT's steps with one evaluation
    /// and one checkpoint at the end.
    fn length_keys(&self) -> String {
        match self.model {
            Model::Gpt => format!(
                "steps = {s}\neval_every = {s}\nlog_every = 50\n\
                 scheduler = {{ kind = \"cosine\", warmup_steps = {warmup}, min_lr = 1e-4 }}\n",
                s = self.steps,
                warmup = gpt_warmup(self.steps)
            ),
            _ => format!("epochs = {}\n", self.epochs),
        }
    }

    /// The `[data]` keys of the spec: all training images, no validation split.
    fn data_keys(&self) -> String {
        match &self.data {
            Data::Mnist(dir) => {
                let path =
                    serde_json::to_string(&dir.to_string_lossy()).expect("a string serializes");
                format!("name = \"mnist\"\npath = {path}\nval_fraction = 0.0\n")
            }
            Data::Text(path) => {
                let path =
                    serde_json::to_string(&path.to_string_lossy()).expect("a string serializes");
                format!(
                    "name = \"text\"\npath = {path}\ntokenizer = \"char\"\nval_fraction = 0.1\n"
                )
            }
            Data::Synthetic { train } => format!(
                "name = \"synthetic\"\ntask = \"classification\"\nshape = [3, 32, 32]\n\
                 classes = 10\ntrain_size = {train}\ntest_size = {test}\nval_fraction = 0.0\n",
                test = train / 4
            ),
        }
    }
}

/// Where a run's replicas are and how many CPU threads each has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Replicas (2 for the independent pair).
    pub world: usize,
    pub threads: usize,
    /// Two independent world-1 runs at once ([`Trainer::run_pair`]), not one world-2 run.
    pub independent: bool,
}

impl Config {
    pub const PAIR: Config = Config {
        world: 2,
        threads: 1,
        independent: true,
    };

    pub const fn ddp(world: usize, threads: usize) -> Config {
        Config {
            world,
            threads,
            independent: false,
        }
    }

    /// "1", "2" or "1+1".
    pub fn world_label(&self) -> String {
        if self.independent {
            "1+1".to_string()
        } else {
            self.world.to_string()
        }
    }

    /// "world 2 x 1 thread", "world 1+1 x 1 thread".
    pub fn label(&self) -> String {
        format!(
            "world {} x {}",
            self.world_label(),
            threads_text(self.threads)
        )
    }
}

/// "1 thread", "2 threads".
pub fn threads_text(threads: usize) -> String {
    if threads == 1 {
        "1 thread".to_string()
    } else {
        format!("{threads} threads")
    }
}

/// One training run's figures.
#[derive(Clone)]
pub struct TrainFigure {
    pub model: Model,
    pub config: Config,
    /// Training samples of all ranks together.
    pub samples: u64,
    /// The slowest rank's training time.
    pub train_s: f64,
    pub samples_per_s: f64,
    pub test_acc: Option<f64>,
    /// The GPT: rank 0's last validation loss (all validation windows, see `ddp_trainer::lm`).
    pub val_loss: Option<f64>,
    /// The run folder (of the first run for 1+1), kept until the bench ends.
    pub run_dir: PathBuf,
    /// The whole `ddp-trainer` run (start-up, data loading, test, exit) seen from here.
    pub wall_s: f64,
    /// The largest resident set of the run's processes (of both runs for 1+1), KiB.
    pub peak_rss_kib: Option<u64>,
    /// Set on world 2 (and 1+1): samples/s over 2 × world 1 × 1 thread's.
    pub scaling: Option<f64>,
    /// Lowest and highest scaling over the rounds (`--repeat`).
    pub scaling_range: Option<(f64, f64)>,
    /// Set on world 1 with more than 1 thread: samples/s over world 1 × 1 thread's.
    pub vs_one_thread: Option<f64>,
    /// Set on world 2: samples/s over the same round's 1+1 (target: what the machine allows).
    pub vs_pair: Option<f64>,
    /// Lowest and highest `vs_pair` over the rounds.
    pub vs_pair_range: Option<(f64, f64)>,
}

impl TrainFigure {
    /// The `--json` line of one run.
    pub fn json_line(&self, w: &Workload, round: u32) -> String {
        format!(
            "{{\"bench\": \"{}\", \"engine\": \"ddp-trainer-{}\", \"model\": \"{}\", \
             \"world\": {}, \"threads_per_replica\": {}, \"batch\": {}, \"epochs\": {}, \
             \"steps\": {}, \"unit\": \"{}\", \"samples\": {}, \"train_s\": {:.3}, \
             \"samples_per_s\": {:.1}, \"scaling_efficiency\": {}, \"vs_1_thread\": {}, \
             \"vs_1plus1\": {}, \"test_acc\": {}, \"val_loss\": {}, \"wall_s\": {:.3}, \
             \"peak_rss_mb\": {}, \"round\": {round}}}",
            if self.config.independent {
                "train-independent-pair"
            } else {
                "train"
            },
            env!("CARGO_PKG_VERSION"),
            self.model.short(),
            self.config.world,
            self.config.threads,
            w.batch,
            w.epochs,
            w.steps,
            self.model.unit(),
            self.samples,
            self.train_s,
            self.samples_per_s,
            json_num(self.scaling, 4),
            json_num(self.vs_one_thread, 4),
            json_num(self.vs_pair, 4),
            json_num(self.test_acc, 4),
            json_num(self.val_loss, 4),
            self.wall_s,
            json_num(self.peak_rss_kib.map(kib_to_mb), 1),
        )
    }
}

/// A number with `digits` decimals, or `null`.
pub fn json_num(v: Option<f64>, digits: usize) -> String {
    v.map_or("null".to_string(), |v| format!("{v:.digits$}"))
}

/// The `ddp-trainer` beside this executable (or `--trainer`).
pub fn find_trainer(given: Option<&Path>) -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => me.with_file_name(format!("ddp-trainer{}", std::env::consts::EXE_SUFFIX)),
    };
    if !path.is_file() {
        return Err(format!(
            "{} not found: build it first (cargo build --release -p ddp-trainer) or pass \
             --trainer PATH",
            path.display()
        ));
    }
    if given.is_none() && older_than_library(&me, &path) {
        eprintln!(
            "ddp-bench: warning: {} is older than the library it is built from; `cargo run --bin \
             ddp-bench` does not rebuild it: run `cargo build --release -p ddp-trainer` first",
            path.display()
        );
    }
    Ok(path)
}

/// `cargo run --bin ddp-bench` rebuilds the library and this binary, not ddp-trainer: a trainer
/// older than the newest library build in target/<profile>/deps measures old code.
fn older_than_library(me: &Path, trainer: &Path) -> bool {
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
    matches!((mtime(trainer), newest_lib), (Some(t), Some(lib)) if t < lib)
}

/// The MNIST-format folder: `--data`, else the embedded sample (from the current folder or the
/// repository).
pub fn find_data_dir(given: Option<&Path>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match given {
        Some(d) => vec![d.to_path_buf()],
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

/// The GPT's text file: `--data`, else the Shakespeare corpus of the examples (from the current
/// folder or the repository).
pub fn find_text(given: Option<&Path>) -> Result<PathBuf, String> {
    let rel = "examples/data/shakespeare/input.txt";
    let candidates: Vec<PathBuf> = match given {
        Some(p) => vec![p.to_path_buf()],
        None => vec![
            PathBuf::from(rel),
            Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel),
        ],
    };
    for c in &candidates {
        if c.is_file() {
            return c
                .canonicalize()
                .map_err(|e| format!("{}: {e}", c.display()));
        }
    }
    Err(format!(
        "text file {} not found (pass --data FILE, a UTF-8 text)",
        candidates[0].display()
    ))
}

/// "" for 1 thread (the names of the single-thread runs), "-t4" for 4 threads.
fn threads_suffix(threads: usize) -> String {
    if threads == 1 {
        String::new()
    } else {
        format!("-t{threads}")
    }
}

/// The spec of one run: torch_ref.py's recipe, no validation split, no checkpoints; or
/// torch_gpt.py's, validated and checkpointed once, at the end.
pub fn spec_text(w: &Workload, world: usize, threads: usize) -> String {
    let suffix = threads_suffix(threads);
    let checkpoint = match w.model {
        Model::Gpt => format!("every_steps = {}\n", w.steps),
        _ => "every_epochs = 0\n".to_string(),
    };
    format!(
        "name = \"bench-{short}-w{world}{suffix}\"\n\n\
         [model]\n{model}\n\
         [data]\n{data}\n\
         [train]\n{length}batch_size = {batch}\n{keys}{precision}seed = 1\n\n\
         [ddp]\nreplicas = {world}\nthreads = {threads}\ntimeout_s = 300\n\n\
         [checkpoint]\n{checkpoint}",
        short = w.model.short(),
        model = w.model_keys(),
        data = w.data_keys(),
        length = w.length_keys(),
        batch = w.batch,
        keys = w.model.train_keys(),
        precision = match w.precision {
            Precision::F32 => String::new(),
            p => format!("precision = \"{}\"\n", p.name()),
        },
    )
}

/// A training run in progress.
struct Running {
    child: Child,
    what: String,
    out: PathBuf,
    stderr: PathBuf,
    world: usize,
    t0: Instant,
}

/// The training part of a run's metrics, all ranks together.
struct RunMetrics {
    samples: u64,
    train_s: f64,
    test_acc: Option<f64>,
    val_loss: Option<f64>,
}

/// The `ddp-trainer` executable and what all its runs share.
pub struct Trainer<'a> {
    pub exe: PathBuf,
    pub tmp: &'a Path,
    /// Longest wait for one run.
    pub timeout: Duration,
}

impl Trainer<'_> {
    /// One run of `w` in `config`, in folders named with `tag`.
    pub fn run(&self, w: &Workload, config: Config, tag: &str) -> Result<TrainFigure, String> {
        if config.independent {
            return self.run_pair(w, config, tag);
        }
        let run = self.start(w, config.world, config.threads, tag)?;
        self.finish(run, w, config)
    }

    /// Two independent world-1 runs at the same time, each on its own core and talking to nobody:
    /// what the machine itself lets two replicas do (shared caches, memory bandwidth, the
    /// hypervisor). Their combined samples/s over 2 × world 1 bounds any world-2 scaling here.
    fn run_pair(&self, w: &Workload, config: Config, tag: &str) -> Result<TrainFigure, String> {
        let single = Config::ddp(1, config.threads);
        let a = self.start(w, 1, config.threads, &format!("{tag}-pair-a"))?;
        let b = match self.start(w, 1, config.threads, &format!("{tag}-pair-b")) {
            Ok(b) => b,
            Err(e) => {
                procs::stop(a.child);
                return Err(e);
            }
        };
        let (fa, fb) = (self.finish(a, w, single), self.finish(b, w, single));
        let (fa, fb) = (fa?, fb?);
        let samples = fa.samples + fb.samples;
        let train_s = fa.train_s.max(fb.train_s);
        Ok(TrainFigure {
            model: w.model,
            config,
            samples,
            train_s,
            samples_per_s: samples as f64 / train_s,
            test_acc: fa.test_acc,
            val_loss: fa.val_loss,
            run_dir: fa.run_dir,
            wall_s: fa.wall_s.max(fb.wall_s),
            peak_rss_kib: fa.peak_rss_kib.max(fb.peak_rss_kib),
            scaling: None,
            scaling_range: None,
            vs_one_thread: None,
            vs_pair: None,
            vs_pair_range: None,
        })
    }

    fn start(
        &self,
        w: &Workload,
        world: usize,
        threads: usize,
        tag: &str,
    ) -> Result<Running, String> {
        let suffix = threads_suffix(threads);
        let dir = self
            .tmp
            .join(format!("{}-w{world}{suffix}{tag}", w.model.short()));
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let spec = dir.join("spec.toml");
        fs::write(&spec, spec_text(w, world, threads))
            .map_err(|e| format!("{}: {e}", spec.display()))?;
        let out = dir.join("run");
        let (stdout, stderr) = (dir.join("stdout.log"), dir.join("stderr.log"));
        let mut cmd = Command::new(&self.exe);
        clean_env(&mut cmd);
        cmd.env("RAYON_NUM_THREADS", threads.to_string())
            .arg(&spec)
            .arg("--standalone")
            .arg("--nproc")
            .arg(world.to_string())
            .arg("--out")
            .arg(&out);
        let what = format!(
            "ddp-trainer ({} world {world}{suffix}{tag})",
            w.model.spec_name()
        );
        let t0 = Instant::now();
        let child =
            spawn(cmd, &stdout, &stderr).map_err(|e| format!("cannot start {what}: {e}"))?;
        Ok(Running {
            child,
            what,
            out,
            stderr,
            world,
            t0,
        })
    }

    fn finish(&self, run: Running, w: &Workload, config: Config) -> Result<TrainFigure, String> {
        let Running {
            child,
            what,
            out,
            stderr,
            world,
            t0,
        } = run;
        let exit = wait_deadline(child, self.timeout, &what)
            .map_err(|e| format!("{e}\n{}", tail(&stderr)))?;
        let wall_s = t0.elapsed().as_secs_f64();
        if !exit.status.success() {
            return Err(format!(
                "{what} failed ({})\n{}",
                exit.status,
                tail(&stderr)
            ));
        }
        let m = read_run_metrics(&out, world)?;
        Ok(TrainFigure {
            model: w.model,
            config,
            samples: m.samples,
            train_s: m.train_s,
            samples_per_s: m.samples as f64 / m.train_s,
            test_acc: m.test_acc,
            val_loss: m.val_loss,
            run_dir: out,
            wall_s,
            peak_rss_kib: exit.peak_rss_kib,
            scaling: None,
            scaling_range: None,
            vs_one_thread: None,
            vs_pair: None,
            vs_pair_range: None,
        })
    }
}

/// What one train record counts and its rate: its samples and samples/s, or for a language
/// model (a record with `tokens`) its tokens and tokens/s, since a language model's samples are
/// its windows and its throughput is counted in tokens (`Model::unit`).
fn train_count(r: &MetricRecord) -> Result<(u64, f64), String> {
    let (count, rate, what) = match r.tokens {
        Some(tokens) => (
            tokens,
            r.tokens_per_sec
                .ok_or("a train record with tokens but no tokens_per_sec")?,
            "tokens_per_sec",
        ),
        None => (
            r.samples.ok_or("a train record without samples")?,
            r.samples_per_sec,
            "samples_per_sec",
        ),
    };
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("{what} {rate} in a train record"));
    }
    Ok((count, rate))
}

/// Samples (a language model's tokens) of all ranks, the slowest rank's training time, and rank
/// 0's final test accuracy.
fn read_run_metrics(out: &Path, world: usize) -> Result<RunMetrics, String> {
    let mut m = RunMetrics {
        samples: 0,
        train_s: 0.0,
        test_acc: None,
        val_loss: None,
    };
    for rank in 0..world {
        let path = out.join(format!("metrics/rank-{rank}.jsonl"));
        let records = read_metrics(&path).map_err(|e| e.to_string())?;
        let (mut n, mut t) = (0u64, 0f64);
        for r in records.iter().filter(|r| r.kind == MetricKind::Train) {
            let (count, rate) = train_count(r).map_err(|e| format!("{}: {e}", path.display()))?;
            n += count;
            t += count as f64 / rate;
        }
        if n == 0 {
            return Err(format!("{}: no train records", path.display()));
        }
        m.samples += n;
        m.train_s = m.train_s.max(t);
        if rank == 0 {
            m.test_acc = records
                .iter()
                .rev()
                .find(|r| r.kind == MetricKind::Test)
                .and_then(|r| r.accuracy);
            m.val_loss = records
                .iter()
                .rev()
                .find(|r| r.kind == MetricKind::Val)
                .map(|r| r.loss);
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: &str) -> MetricRecord {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn a_classifier_counts_samples() {
        let r = record(
            r#"{"time":1.0,"rank":0,"kind":"train","epoch":1,"step":10,"loss":0.5,"lr":0.001,"samples_per_sec":1000.0,"samples":320,"world_size":2}"#,
        );
        assert_eq!(train_count(&r), Ok((320, 1000.0)));
    }

    #[test]
    fn a_language_model_counts_tokens_not_windows() {
        // 24 windows of 64 tokens at 50 windows/s: 1,536 tokens at 3,200 tokens/s, the same time.
        let r = record(
            r#"{"time":1.0,"rank":0,"kind":"train","epoch":1,"step":2,"loss":3.1,"lr":0.001,"samples_per_sec":50.0,"samples":24,"tokens_per_sec":3200.0,"tokens":1536,"world_size":2}"#,
        );
        assert_eq!(train_count(&r), Ok((1536, 3200.0)));
    }

    #[test]
    fn a_record_without_a_rate_is_an_error() {
        let r = record(
            r#"{"time":1.0,"rank":0,"kind":"train","epoch":1,"step":2,"loss":3.1,"lr":0.001,"samples_per_sec":0.0,"samples":24,"world_size":2}"#,
        );
        assert!(train_count(&r).unwrap_err().contains("samples_per_sec 0"));
        let r = record(
            r#"{"time":1.0,"rank":0,"kind":"train","epoch":1,"step":2,"loss":3.1,"lr":0.001,"samples_per_sec":50.0,"tokens":1536,"world_size":2}"#,
        );
        assert!(train_count(&r).unwrap_err().contains("no tokens_per_sec"));
    }
}
