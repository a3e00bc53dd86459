//! `ddp-workspaces`: experiment workspaces shared by every ddp front end (the `ddp` CLI, the TUI,
//! the Jupyter kernel). The run folder on disk is the contract: a run started by any front end is
//! supervised by its own process, survives the front end closing, and shows up in all of them.
//!
//! Layout:
//! - `commands`: the arguments of every command (`RunArgs`, `LsArgs`, ...), one `clap::Args`
//!   struct each, flattened by the CLI, the kernel's magics and the TUI's dialogs; the one word
//!   splitter and path completion of typed command lines.
//! - `request`: what a front end asks for when it starts runs (`NewRun`, `RunOn`, `NewSweep`),
//!   built by `commands` and carried out by `actions`; it imports nothing of its siblings.
//! - `actions`: what front ends do to runs, returning data and printing nothing: validate and
//!   start a run or a sweep, resume, stop (request, wait), remove, tag.
//! - `engine`: where a run's replicas run, one `Engine` each for this machine, a Slurm job and
//!   a Spark application (`local.rs`, `slurm.rs`, `spark.rs`): check a new run, start or resume
//!   it, stop it, scale it; the actions go through the run's engine.
//! - `workspace`: the workspace root, run creation, listing and addressing (`latest`, prefixes).
//! - `run`: one run folder: `run.json` (atomic; `slurm_job`: a Slurm run's job as it records it),
//!   `events.jsonl`, stale-supervisor detection, the workspace a run folder belongs to.
//! - `policy`: the restart policy (pure).
//! - `supervisor`: the per-run supervisor process (attempts through the run's engine, restarts,
//!   stop).
//! - `invocation`: the hidden sub-commands of a front end's executable (`__supervise`,
//!   `__replica`, `__slurm-watch`) as one enum, `HiddenCommand`, parsed and written in one place;
//!   `hidden`: running them ([`run_hidden_command`], which every front end that starts runs
//!   calls first thing in `main`).
//! - `devices`: GPU discovery (NVML / DDP_SIMULATED_GPUS, CUDA_VISIBLE_DEVICES), placement
//!   policy, per-GPU locks, the device queue, device telemetry (GPUs, CPU, memory, the runs'
//!   processes) for a devices view.
//! - `detach`: starting a hidden sub-command of this executable as a detached process (the
//!   supervisor, the Slurm watcher).
//! - `lockfile`: the workspace's lock files (`locks/`: a GPU, a sweep's slot, the Slurm
//!   watcher), an exclusive `flock` held by a value, and who holds one.
//! - `logs`: a run's replica logs as front ends print them (rank prefixes, `--tail`).
//! - `tail`, `watch`: following files line by line (notify + polling fallback).
//! - `index`: the run index (`<ws>/index.sqlite`): what the views list and filter (record, tags,
//!   summary, every filter field, every frozen spec key), refreshed from the folders that changed
//!   by whoever reads it; the folders stay the truth.
//! - `run_entry`: what a run list shows per run (`RunEntry`; `MetricDigest`, metric records
//!   folded).
//! - `run_fields`: a run's fields by the names filters and sorts use, read as first asked for.
//! - `run_list`: following the whole run list live (`Workspace::watch_runs` → `RunListWatch`,
//!   a stream of `RunListEvent`: runs appearing, changing, disappearing, with metric digests).
//! - `events`: following a run as typed events (`Workspace::watch` → `RunWatch`, a stream of
//!   `RunEvent`; `events::blocking`: the same for plain code, with a time limit per event).
//! - `curves`: metric records turned into points (x = step, epoch or time), for plots and charts.
//! - `plot`: loss/accuracy plots (SVG, PNG) of one or several runs.
//! - `slurm`: runs on Slurm (`--on slurm`): the batch script, submitting, stopping and
//!   resubmitting a job, parsing `squeue --json`, the status policy, and the workspace's
//!   watcher process (`__slurm-watch`) that keeps such runs' `run.json` in step with their jobs.
//! - `spark`: runs on Spark (`--on spark`): the driver program written into the run folder,
//!   `spark-submit` run and followed by the run's supervisor, the application in `run.json`.
//! - `sweep`: grids of overrides → one run each, grouped under a sweep id; the sweep's
//!   parallelism limit (slots: per-sweep lock files taken by the runs' supervisors); search
//!   spaces and their trials (`sweep/space.rs`), sweep files (`sweep/file.rs`) and the ASHA
//!   scheduler's policy (`sweep/asha.rs`), all pure.
//! - `search`: sweeps as the front ends start them, and scheduled searches (ASHA): planning,
//!   the search's own process (`__sweep`, `search/driver.rs`) that creates, pauses and resumes
//!   its trials' runs, stopping and resuming a search.
//! - `scaffold`: crates of one's own outside the checkout: where the ddp sources are
//!   (`Checkout`, `$DDP_SOURCE_DIR`), the dependency lines naming ddp-trainer and its candle by
//!   absolute path (the kernel's `%%ddp train` cells use them too), and the crate of `ddp new
//!   model DIR` (`scaffold/model.rs`).
//! - `sample`: text generated by a language-model run (`Sampler`: the run's spec, tokenizer
//!   and chosen weights; the text streamed to a callback), and the refusal of other runs.
//! - `analysis`: comparing runs (frozen specs as dotted keys, the keys that differ), CSV export.
//! - `kubernetes`: Kubeflow jobs (`PyTorchJob`, `TrainJob`) that train a run or a spec
//!   (`ddp export --kubeflow/--trainjob`): the plan (pure), the manifests, their YAML.
//! - `metrics`: the trainer's metric records (schema re-exported, reader), `fmt_lr`, and
//!   `is_language_model`, how every front end tells a language model's run.
//! - `plan`: how long a run trains (`train.epochs`, or `train.steps` for a run counted in steps),
//!   from its frozen spec.
//! - `summary`: a run's figures (`Summary`) and its `--json` form (`RunOverview`).
//! - `report`: the text renderings front ends share: the `ddp ls` and `ddp compare` tables
//!   (`Table`), what `ddp show` prints.
//! - `selection`: which runs a listing picks (`RunSelection`: experiment, status, sweep,
//!   `--where`, sort, limit), from run folders or the index.
//! - `filter`: run filters (`--where` expressions over a run's fields), parsed and
//!   evaluated; pure.
//! - `format`: human formatting of durations, timestamps, percentages, losses, perplexities,
//!   bits and throughputs.
//! - `fsutil`: atomic file writes.
//! - `spec`: the experiment spec type (`Spec`), re-exported from the trainer.
//! - `error`: the one `Error`, and `Error::exit_code` for front ends.
//! - `test_util` (tests, feature `test-util`): builders for tests: `RunRecord::sample()` and a
//!   run in a folder (`in_dir`, `in_workspace`), `metric` (a curve's point), a language model's
//!   run (`lm_metrics`, `lm_run_in`), `Telemetry::sample()`, `SlurmJob::sample()`, run folders on disk
//!   (`completed_run`, `gpt_run`: a tiny GPT with its tokenizer and weights); the feature turns
//!   on the trainer's builders (`MetricRecord::sample()`, `write_gpt`) too.
//!
//! Front ends depend on this crate alone (not on `ddp-trainer`).

pub mod actions;
pub mod analysis;
pub mod commands;
pub mod curves;
pub mod detach;
pub mod devices;
pub mod engine;
pub mod error;
pub mod events;
pub mod filter;
pub mod format;
pub mod fsutil;
pub mod hidden;
pub mod index;
pub mod invocation;
pub mod kubernetes;
pub mod lockfile;
pub mod logs;
pub mod metrics;
pub mod plan;
pub mod plot;
pub mod policy;
pub mod report;
pub mod request;
pub mod run;
pub mod run_entry;
pub mod run_fields;
pub mod run_list;
pub mod sample;
pub mod scaffold;
pub mod search;
pub mod selection;
pub mod slurm;
pub mod spark;
pub mod spec;
pub mod summary;
pub mod supervisor;
pub mod sweep;
pub mod tail;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod watch;
pub mod workspace;

pub use error::{Error, Result};
pub use events::{RunEvent, RunWatch, WatchFrom};
pub use hidden::run_hidden_command;
pub use run::{Run, RunRecord, RunStatus, SupervisorEvent};
pub use summary::Summary;
pub use workspace::Workspace;
