//! The arguments of every command, defined once: each is one `clap::Args` struct that the `ddp`
//! CLI flattens into its subcommands, the kernel's `%ddp` magics flatten into theirs, and the
//! TUI's dialogs parse their input line with (`RunArgs::try_parse_from`). A help text or an
//! option changed here changes in every front end.
//!
//! What a front end adds of its own is presentation only: the CLI's `--detach` and `--follow`
//! and `plot --output`, the kernel's `--wait`.
//!
//! Layout:
//! - `run`: starting runs: [`RunArgs`] (`run SPEC`), [`RunOptions`], [`SpecOptions`],
//!   [`SweepArgs`] with its [`SchedulerOptions`], and [`SweepCommand`] (`sweep show|stop|resume`).
//! - `runs`: looking at and managing runs: [`LsArgs`] with its [`RunFilter`], [`ShowArgs`],
//!   [`LogsArgs`], [`RunAddress`] (stop, resume, rm), [`TagArgs`].
//! - `analysis`: several runs at once: [`CompareArgs`], [`PlotArgs`], [`ExportArgs`] (with its
//!   [`ExportFormat`] and the [`KubernetesOptions`] of a Kubernetes job).
//! - `sample`: text from a language-model run: [`SampleArgs`] (`sample RUN`) with its
//!   [`SampleOptions`] (what the TUI's Sample pane takes too) and [`Weights`]; the defaults.
//! - `shared`: [`SharedCommand`], the subcommands every front end has (ls, show, stop, compare,
//!   sample), with their help text once.
//! - `new`: starting points written to disk: [`NewCommand`] (`new model DIR`, a crate of one's
//!   own, [`NewModelArgs`]).
//! - `words`: a command line split into words as a shell would ([`split`]), and parsing words
//!   into one of these structs ([`parse_line`], [`parse_words`]) with clap's messages as plain text ([`one_line`]
//!   for a one-line dialog), and a struct's arguments on one line ([`synopsis`]).
//! - `paths`: completing a path being typed ([`path_candidates`]); where a missing path is
//!   ([`missing_path`], [`found_in_ancestors`]).

mod analysis;
mod new;
mod paths;
mod run;
mod runs;
mod sample;
mod shared;
mod words;

pub use analysis::{CompareArgs, ExportArgs, ExportFormat, KubernetesOptions, PlotArgs};
pub use new::{NewCommand, NewModelArgs};
pub use paths::{found_in_ancestors, missing_path, path_candidates};
pub use run::{
    RunArgs, RunOptions, SchedulerOptions, SpecOptions, SweepAddress, SweepArgs, SweepCommand,
};
pub use runs::{LogsArgs, LsArgs, RunAddress, RunFilter, ScaleArgs, ShowArgs, TagArgs};
pub use sample::{
    DEFAULT_PROMPT, DEFAULT_SEED, DEFAULT_TEMPERATURE, DEFAULT_TOKENS, DEFAULT_TOP_K, SampleArgs,
    SampleOptions, Weights,
};
pub use shared::SharedCommand;
pub use words::{one_line, parse_line, parse_words, split, synopsis, synopsis_of};
