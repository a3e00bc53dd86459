//! One run of the PyTorch reference `bench/pytorch/torch_ref.py` (`--compare-torch PYTHON`), or
//! of `torch_gpt.py` beside it for the GPT: the script and torch version found before anything
//! runs, the process, and its summary line; and one run of `torch_allreduce.py` beside it (gloo
//! all-reduce bandwidth).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::allreduce::{AR_WORLD, ArFigure, folder_suffix, read_figures, round_suffix};
use crate::procs::{clean_env, free_port, kib_to_mb, spawn, tail, wait_deadline};
use crate::train::{Config, Data, Workload, gpt_warmup, json_num};
use ddp_trainer::spec::Precision;

/// The configurations PyTorch runs, in the order they alternate with ours: world 1 × all
/// cores, then world 2 × 1 thread per process.
pub fn torch_configs(threads: usize) -> [Config; 2] {
    [Config::ddp(1, threads), Config::ddp(2, 1)]
}

/// The last `"summary": true` line of `torch_ref.py` (or `torch_gpt.py`: tokens, no engine).
#[derive(Deserialize)]
struct Summary {
    engine: Option<String>,
    threads: usize,
    train_s: f64,
    #[serde(alias = "tokens_per_s")]
    samples_per_s: f64,
    test_acc: Option<f64>,
    /// `torch_gpt.py`: the mean loss of 20 random validation batches (not our evaluation).
    val_loss: Option<f64>,
}

/// One `torch_ref.py` run's figures.
#[derive(Clone)]
pub struct TorchFigure {
    /// As asked for (`threads` is what the script asked for, see `threads_used`).
    pub config: Config,
    /// `pytorch-<version>`, from the summary line.
    pub engine: String,
    /// `torch.get_num_threads()` of rank 0.
    pub threads_used: usize,
    /// Rank 0's epoch times (between barriers, evaluation excluded).
    pub train_s: f64,
    pub samples_per_s: f64,
    pub test_acc: Option<f64>,
    /// `torch_gpt.py`'s own validation loss (random batches).
    pub val_loss: Option<f64>,
    pub wall_s: f64,
    /// The largest resident set of the launcher and its `mp.spawn` workers, KiB.
    pub peak_rss_kib: Option<u64>,
}

impl TorchFigure {
    /// The `--json` line of one run.
    pub fn json_line(&self, w: &Workload, round: u32) -> String {
        format!(
            "{{\"bench\": \"train\", \"engine\": \"{}\", \"model\": \"{}\", \"world\": {}, \
             \"threads_per_replica\": {}, \"batch\": {}, \"epochs\": {}, \"steps\": {}, \
             \"unit\": \"{}\", \"train_s\": {:.3}, \"samples_per_s\": {:.1}, \"test_acc\": {}, \
             \"val_loss\": {}, \"wall_s\": {:.3}, \"peak_rss_mb\": {}, \"round\": {round}}}",
            self.engine,
            w.model.short(),
            self.config.world,
            self.threads_used,
            w.batch,
            w.epochs,
            w.steps,
            w.model.unit(),
            self.train_s,
            self.samples_per_s,
            json_num(self.test_acc, 4),
            json_num(self.val_loss, 4),
            self.wall_s,
            json_num(self.peak_rss_kib.map(kib_to_mb), 1),
        )
    }
}

/// The Python, the script, and what all runs share.
pub struct Torch<'a> {
    python: PathBuf,
    script: PathBuf,
    /// `torch.__version__`.
    pub version: String,
    tmp: &'a Path,
    timeout: Duration,
}

impl<'a> Torch<'a> {
    /// Finds the script and asks `python` for its torch version: every mistake in
    /// `--compare-torch`/`--torch-ref` shows here, before anything is measured.
    pub fn prepare(
        python: &Path,
        script: Option<&Path>,
        tmp: &'a Path,
        timeout: Duration,
    ) -> Result<Torch<'a>, String> {
        let script = find_script(script)?;
        let version = torch_version(python, tmp, timeout)?;
        Ok(Torch {
            python: python.to_path_buf(),
            script,
            version,
            tmp,
            timeout,
        })
    }

    /// "PyTorch 2.15.0 (PYTHON SCRIPT)", for the header; `gpt`: the GPT's script.
    pub fn describe(&self, gpt: bool) -> String {
        let script = match gpt {
            true => self.script.with_file_name("torch_gpt.py"),
            false => self.script.clone(),
        };
        format!(
            "PyTorch {} ({} {})",
            self.version,
            self.python.display(),
            script.display()
        )
    }

    /// One `torch_ref.py` (`torch_gpt.py`) run of `w` in `config`, in a folder named with
    /// `tag`; `torch_gpt.py` also saves its state dict to `save` (`--save`). A run that fails is
    /// run once more: torch_ref.py at world 2 now and then aborts inside gloo (`terminate called
    /// without an active exception`), which says nothing about its speed (an abort after the
    /// summary is no failure, see [`Torch::execute`]). A second failure ends the benchmark.
    pub fn run(
        &self,
        w: &Workload,
        config: Config,
        tag: &str,
        save: Option<&Path>,
    ) -> Result<TorchFigure, String> {
        let once = |tag: &str| -> Result<TorchFigure, String> {
            let dir = self.tmp.join(format!(
                "torch-{}-w{}-t{}{tag}",
                w.model.short(),
                config.world,
                config.threads
            ));
            fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut cmd = self.command(w, config, free_port()?)?;
            if let Some(path) = save {
                cmd.arg("--save").arg(path);
            }
            let what = format!(
                "{} ({} {}{tag})",
                script_name(w),
                w.model.short(),
                config.label()
            );
            self.execute(cmd, &dir, &what, config)
        };
        once(tag).or_else(|first| {
            eprintln!(
                "ddp-bench: warning: {first}
ddp-bench: running it once more"
            );
            once(&format!("{tag}-retry"))
        })
    }

    /// Runs `cmd` (`what`, for messages; its output in `dir`) and reads its summary line.
    fn execute(
        &self,
        cmd: Command,
        dir: &Path,
        what: &str,
        config: Config,
    ) -> Result<TorchFigure, String> {
        let (stdout, stderr) = (dir.join("stdout.log"), dir.join("stderr.log"));
        let t0 = Instant::now();
        let child =
            spawn(cmd, &stdout, &stderr).map_err(|e| format!("cannot start {what}: {e}"))?;
        let exit = wait_deadline(child, self.timeout, what)
            .map_err(|e| format!("{e}\n{}", tail(&stderr)))?;
        let wall_s = t0.elapsed().as_secs_f64();
        let summary = read_summary(&stdout);
        if !exit.status.success() {
            // gloo sometimes aborts in the teardown after the summary (`terminate called
            // without an active exception`): the figures measured before it stand.
            if summary.is_err() {
                return Err(format!(
                    "{what} failed ({})\n{}",
                    exit.status,
                    tail(&stderr)
                ));
            }
            eprintln!(
                "ddp-bench: warning: {what} failed ({}) after printing its summary, whose \
                 figures are used; see {}",
                exit.status,
                stderr.display()
            );
        }
        let s = summary?;
        if s.threads != config.threads {
            eprintln!(
                "ddp-bench: warning: {what} ran {} threads per process, not {}",
                s.threads, config.threads
            );
        }
        Ok(TorchFigure {
            config,
            engine: s
                .engine
                .unwrap_or_else(|| format!("pytorch-{}", self.version)),
            threads_used: s.threads,
            train_s: s.train_s,
            samples_per_s: s.samples_per_s,
            test_acc: s.test_acc,
            val_loss: s.val_loss,
            wall_s,
            peak_rss_kib: exit.peak_rss_kib,
        })
    }

    /// One `torch_allreduce.py 2` run (gloo; the script beside `torch_ref.py`); `tag`, if any,
    /// names the round.
    pub fn run_allreduce(&self, tag: &str) -> Result<Vec<ArFigure>, String> {
        let script = self.script.with_file_name("torch_allreduce.py");
        if !script.is_file() {
            return Err(format!(
                "{} not found: it sits beside torch_ref.py (bench/pytorch/ in the repository)",
                script.display()
            ));
        }
        let dir = self
            .tmp
            .join(format!("torch-allreduce{}", folder_suffix(tag)));
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (stdout, stderr) = (dir.join("stdout.log"), dir.join("stderr.log"));
        let mut cmd = Command::new(&self.python);
        clean_env(&mut cmd);
        cmd.arg(&script).arg(AR_WORLD.to_string());
        let what = format!("torch_allreduce.py{}", round_suffix(tag, ", "));
        eprintln!("ddp-bench: gloo all-reduce at world {AR_WORLD} ({what}) ...");
        let child =
            spawn(cmd, &stdout, &stderr).map_err(|e| format!("cannot start {what}: {e}"))?;
        let exit = wait_deadline(child, self.timeout, &what)
            .map_err(|e| format!("{e}\n{}", tail(&stderr)))?;
        if !exit.status.success() {
            return Err(format!(
                "{what} failed ({})\n{}",
                exit.status,
                tail(&stderr)
            ));
        }
        read_figures(&stdout, "gloo")
    }

    /// `torch_gpt.py` beside `torch_ref.py`.
    pub fn gpt_script(&self) -> Result<PathBuf, String> {
        let script = self.script.with_file_name("torch_gpt.py");
        if !script.is_file() {
            return Err(format!(
                "{} not found: it sits beside torch_ref.py (bench/pytorch/ in the repository)",
                script.display()
            ));
        }
        Ok(script)
    }

    /// `PYTHON torch_ref.py DATA --world W --model M --epochs E --batch B --threads T --port P
    /// [--synthetic N]` (for ResNet-18 the data folder is ignored: the temporary folder); for the
    /// GPT `PYTHON torch_gpt.py TEXT --world W --iters N --batch B --threads T --port P`.
    fn command(&self, w: &Workload, config: Config, port: u16) -> Result<Command, String> {
        let mut cmd = Command::new(&self.python);
        clean_env(&mut cmd);
        if let Data::Text(text) = &w.data {
            cmd.arg(self.gpt_script()?)
                .arg(text)
                .arg("--world")
                .arg(config.world.to_string())
                .arg("--iters")
                .arg(w.steps.to_string())
                .arg("--warmup")
                .arg(gpt_warmup(w.steps).to_string())
                .arg("--batch")
                .arg(w.batch.to_string())
                .arg("--threads")
                .arg(config.threads.to_string())
                .arg("--port")
                .arg(port.to_string())
                .arg("--layers")
                .arg(w.gpt.layers.to_string())
                .arg("--heads")
                .arg(w.gpt.heads.to_string())
                .arg("--embd")
                .arg(w.gpt.embd.to_string())
                .arg("--block")
                .arg(w.gpt.block.to_string());
            autocast(&mut cmd, w);
            return Ok(cmd);
        }
        cmd.arg(&self.script);
        match &w.data {
            Data::Mnist(dir) => cmd.arg(dir),
            Data::Synthetic { train } => {
                cmd.arg(self.tmp).arg("--synthetic").arg(train.to_string())
            }
            Data::Text(_) => unreachable!("the GPT's command is above"),
        };
        cmd.arg("--world")
            .arg(config.world.to_string())
            .arg("--threads")
            .arg(config.threads.to_string())
            .arg("--model")
            .arg(w.model.short())
            .arg("--epochs")
            .arg(w.epochs.to_string())
            .arg("--batch")
            .arg(w.batch.to_string())
            .arg("--port")
            .arg(port.to_string());
        autocast(&mut cmd, w);
        Ok(cmd)
    }
}

/// `--autocast bf16` where our side trains in bf16 (`train.precision`).
fn autocast(cmd: &mut Command, w: &Workload) {
    if w.precision == Precision::Bf16 {
        cmd.arg("--autocast").arg("bf16");
    }
}

/// The script a workload runs.
fn script_name(w: &Workload) -> &'static str {
    match w.data {
        Data::Text(_) => "torch_gpt.py",
        _ => "torch_ref.py",
    }
}

/// `--torch-ref`, else `bench/pytorch/torch_ref.py` of the repository this was built from (found
/// through `CARGO_MANIFEST_DIR`, the `trainer/` crate), else of the current folder.
fn find_script(given: Option<&Path>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match given {
        Some(p) => vec![p.to_path_buf()],
        None => vec![
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/pytorch/torch_ref.py"),
            PathBuf::from("bench/pytorch/torch_ref.py"),
        ],
    };
    for c in &candidates {
        if c.is_file() {
            return c
                .canonicalize()
                .map_err(|e| format!("{}: {e}", c.display()));
        }
    }
    let tried: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(format!(
        "torch_ref.py not found ({}): pass --torch-ref PATH (the PyTorch reference in the \
         repository's bench/pytorch/, see bench/pytorch/README.md)",
        tried.join(", ")
    ))
}

/// `torch.__version__` as `python` imports it.
fn torch_version(python: &Path, tmp: &Path, timeout: Duration) -> Result<String, String> {
    let (stdout, stderr) = (tmp.join("torch-version.out"), tmp.join("torch-version.err"));
    let mut cmd = Command::new(python);
    clean_env(&mut cmd);
    cmd.arg("-c").arg("import torch; print(torch.__version__)");
    let child = spawn(cmd, &stdout, &stderr).map_err(|e| {
        // Nothing ran: no logs worth keeping.
        let _ = (fs::remove_file(&stdout), fs::remove_file(&stderr));
        format!(
            "cannot start {} (--compare-torch): {e}; pass a Python executable that has torch",
            python.display()
        )
    })?;
    let what = format!("{} -c 'import torch'", python.display());
    let exit = wait_deadline(child, timeout, &what)?;
    if !exit.status.success() {
        return Err(format!(
            "{} cannot import torch ({}): pass a Python that has torch to --compare-torch\n{}",
            python.display(),
            exit.status,
            tail(&stderr)
        ));
    }
    let text = fs::read_to_string(&stdout).map_err(|e| format!("{}: {e}", stdout.display()))?;
    let version = text.trim();
    if version.is_empty() {
        return Err(format!("{what} printed no version"));
    }
    Ok(version.to_string())
}

/// The last line of `stdout` that is JSON with `"summary": true`.
fn read_summary(stdout: &Path) -> Result<Summary, String> {
    let text = fs::read_to_string(stdout).map_err(|e| format!("{}: {e}", stdout.display()))?;
    let line = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["summary"] == serde_json::Value::Bool(true))
        .ok_or_else(|| {
            format!(
                "{}: no summary line (JSON with \"summary\": true) from torch_ref.py",
                stdout.display()
            )
        })?;
    let s: Summary = serde_json::from_value(line)
        .map_err(|e| format!("{}: torch_ref.py's summary line: {e}", stdout.display()))?;
    if !(s.samples_per_s.is_finite() && s.samples_per_s > 0.0) {
        return Err(format!(
            "{}: samples_per_s {} in torch_ref.py's summary line",
            stdout.display(),
            s.samples_per_s
        ));
    }
    Ok(s)
}
