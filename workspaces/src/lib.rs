//! `ddp-workspaces`: experiment workspaces shared by every ddp front end (the `ddp` CLI, the TUI,
//! the Jupyter kernel). The run folder on disk is the contract: a run started by any front end is
//! supervised by its own process, survives the front end closing, and shows up in all of them.
//!
//! Layout, by concern:
//! - `commands`: the arguments of every command (`RunArgs`, `LsArgs`, ...), one `clap::Args`
//!   struct each, flattened by the CLI, the kernel's magics and the TUI's dialogs; the one word
//!   splitter and path completion of typed command lines.
//! - `request`: what a front end asks for when it starts runs (`NewRun`, `RunOn`, `NewSweep`),
//!   built by `commands` and carried out by `actions`; it imports nothing of its siblings.
//! - `actions`: what front ends do to runs, returning data and printing nothing: validate and
//!   start a run or a sweep, resume, stop (request, wait), remove, tag; sweeps and scheduled
//!   searches (`actions::search`, with the search's own process).
//! - `engine`: where a run's replicas run, one `Engine` each for this machine, a Slurm job
//!   and a Spark application (`local`, `slurm/`, `spark/`), and what keeps them running: the
//!   per-run supervisor, the restart policy, detached processes, devices (discovery, placement,
//!   locks, the queue, telemetry).
//! - `runs`: run folders and the workspace: `run.json`, `events.jsonl`, replica logs, how long
//!   a run trains.
//! - `index`: what the views list: the run index (`<ws>/index.sqlite`, refreshed from the
//!   folders that changed by whoever reads it; the folders stay the truth), a run's entry,
//!   fields, summary, filters and selections.
//! - `follow`: following runs live: a run's typed events, the whole run list.
//! - `sweep`: sweeps' plans and manifests, their slots (the parallelism limit), search spaces,
//!   sweep files, a scheduled search's trials and the ASHA policy, all pure but the manifests
//!   and slots.
//! - `present`: reports, plots, comparisons and generated text, as front ends show them.
//! - `files`: atomic writes, lock files, following files line by line.
//! - `invocation`: the hidden sub-commands of a front end's executable (`__supervise`,
//!   `__replica`, `__slurm-watch`, `__sweep`) as one enum, `HiddenCommand`, parsed and written
//!   in one place; `hidden`: running them ([`run_hidden_command`], which every front end that
//!   starts runs calls first thing in `main`).
//! - `scaffold`: crates of one's own outside the checkout: where the ddp sources are
//!   (`Checkout`, `$DDP_SOURCE_DIR`), the dependency lines naming ddp-trainer and its candle by
//!   absolute path (the kernel's `%%ddp train` cells use them too), and the crate of `ddp new
//!   model DIR` (`scaffold/model.rs`).
//! - `kubernetes`: Kubeflow jobs (`PyTorchJob`, `TrainJob`) that train a run or a spec
//!   (`ddp export --kubeflow/--trainjob`), an export beside the engines: the plan (pure), the
//!   manifests, their YAML.
//! - `metrics`: the trainer's metric records (schema re-exported, reader), `fmt_lr`, and
//!   `is_language_model`, how every front end tells a language model's run.
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
pub mod commands;
pub mod engine;
pub mod error;
pub mod files;
pub mod follow;
pub mod hidden;
pub mod index;
pub mod invocation;
pub mod kubernetes;
pub mod metrics;
pub mod present;
pub mod request;
pub mod runs;
pub mod scaffold;
pub mod spec;
pub mod sweep;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;

pub use error::{Error, Result};
pub use follow::events::{RunEvent, RunWatch, WatchFrom};
pub use hidden::run_hidden_command;
pub use index::summary::Summary;
pub use runs::run::{Run, RunRecord, RunStatus, SupervisorEvent};
pub use runs::workspace::Workspace;
