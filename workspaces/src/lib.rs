//! `ddp-workspaces`: experiment workspaces shared by every ddp front end (the `ddp` CLI, the TUI,
//! the Jupyter kernel). The run folder on disk is the contract: a run started by any front end is
//! supervised by its own process, survives the front end closing, and shows up in all of them.
//!
//! Layout:
//! - `commands`: the arguments of every command (`RunArgs`, `LsArgs`, ...), one `clap::Args`
//!   struct each, flattened by the CLI, the kernel's magics and the TUI's dialogs; the one word
//!   splitter and path completion of typed command lines.
//! - `actions`: what front ends do to runs, returning data and printing nothing: validate and
//!   start a run or a sweep, resume, stop (request, wait), remove, tag.
//! - `workspace`: the workspace root, run creation, listing and addressing (`latest`, prefixes).
//! - `run`: one run folder: `run.json` (atomic), `events.jsonl`, stale-supervisor detection.
//! - `policy`: the restart policy (pure).
//! - `supervisor`: the per-run supervisor process (launch, restart, stop), and the hidden
//!   sub-commands (`__supervise`, `__replica`) every front end that starts runs must handle first
//!   thing in `main` (`supervisor::run_hidden_command`).
//! - `devices`: GPU discovery (NVML / DDP_SIMULATED_GPUS, CUDA_VISIBLE_DEVICES), placement
//!   policy, per-GPU locks, the device queue, device telemetry (GPUs, CPU, memory, the runs'
//!   processes) for a devices view.
//! - `tail`, `watch`: following files line by line (notify + polling fallback).
//! - `run_list`: following the whole run list live (`Workspace::watch_runs` → `RunListWatch`,
//!   a stream of `RunListEvent`: runs appearing, changing, disappearing, with metric digests).
//! - `events`: following a run as typed events (`Workspace::watch` → `RunWatch`, a stream of
//!   `RunEvent`).
//! - `curves`: metric records turned into points (x = step, epoch or time), for plots and charts.
//! - `plot`: loss/accuracy plots (SVG, PNG) of one or several runs.
//! - `sweep`: grids of overrides → one run each, grouped under a sweep id; the sweep's
//!   parallelism limit (slots: per-sweep lock files taken by the runs' supervisors).
//! - `analysis`: comparing runs (frozen specs as dotted keys, the keys that differ), CSV export.
//! - `metrics`: the trainer's metric records (schema re-exported, reader), `fmt_lr`, and
//!   `is_language_model`, how every front end tells a language model's run.
//! - `plan`: how long a run trains (`train.epochs`, or `train.steps` for a run counted in steps),
//!   from its frozen spec.
//! - `summary`: a run's figures (`Summary`) and its `--json` form (`RunOverview`).
//! - `report`: the text renderings front ends share: the `ddp ls` and `ddp compare` tables
//!   (`Table`), what `ddp show` prints.
//! - `format`: human formatting of durations, timestamps, percentages, losses, perplexities,
//!   bits and throughputs.
//! - `fsutil`: atomic file writes.
//! - `spec`: the experiment spec type (`Spec`), re-exported from the trainer.
//! - `error`: the one `Error`, and `Error::exit_code` for front ends.
//! - `test_util` (tests, feature `test-util`): builders for tests: `RunRecord::sample()` and a
//!   run in a folder (`in_dir`, `in_workspace`), `metric` (a curve's point), a language model's
//!   run (`lm_metrics`, `lm_run_in`),
//!   `Telemetry::sample()`; the feature turns on the trainer's builders
//!   (`MetricRecord::sample()`) too.
//!
//! Front ends depend on this crate alone (not on `ddp-trainer`).

pub mod actions;
pub mod analysis;
pub mod commands;
pub mod curves;
pub mod devices;
pub mod error;
pub mod events;
pub mod format;
pub mod fsutil;
pub mod metrics;
pub mod plan;
pub mod plot;
pub mod policy;
pub mod report;
pub mod run;
pub mod run_list;
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
pub use run::{Run, RunRecord, RunStatus, SupervisorEvent};
pub use summary::Summary;
pub use workspace::Workspace;
