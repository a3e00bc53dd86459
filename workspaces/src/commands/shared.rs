//! The subcommands every front end has, with one help text each: the `ddp` CLI and the kernel's
//! `%ddp` magics flatten [`SharedCommand`] into their own subcommand lists and add theirs (the
//! CLI's `run --detach`, `logs -f`, `plot --output`; the kernel's `--wait`, `watch`, `devices`).

use super::analysis::CompareArgs;
use super::runs::{LsArgs, RunAddress, ScaleArgs, ShowArgs};
use super::sample::SampleArgs;

/// A subcommand every front end has.
#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum SharedCommand {
    /// List runs (newest first).
    #[command(display_order = 20)]
    Ls(LsArgs),
    /// Show one run: spec, status, devices, metrics, restarts, durations.
    #[command(display_order = 30)]
    Show(ShowArgs),
    /// Stop a run: replicas finish their step and exit; the run becomes `stopped`.
    #[command(display_order = 50)]
    Stop(RunAddress),
    /// Scale an elastic run under way: replicas beyond N leave at the next step boundary,
    /// missing ones start and join with the group's weights and optimizer state.
    #[command(display_order = 55)]
    Scale(ScaleArgs),
    /// Compare runs: the spec keys that differ between them, and their final figures.
    #[command(display_order = 100)]
    Compare(CompareArgs),
    /// Generate text from a language-model run (a gpt on text), shown as it is drawn; the same
    /// seed, weights and options give the same text.
    #[command(display_order = 120)]
    Sample(SampleArgs),
}
