//! `ddp-cli`: the `ddp` command line. The library part is what the command line accepts
//! ([`args`]: every subcommand flattens the arguments the front ends share from
//! `ddp_workspaces::commands`), so tests can hold it against the other front ends; the binary
//! (`src/main.rs`) does what it says.
//!
//! Layout:
//! - [`args`]: `Cli` and its `Command`s (clap).
//! - binary `ddp` (`src/main.rs`): the hidden supervisor/replica sub-commands, parsing and
//!   dispatch, exit codes; one file per group of commands: `follow` (run, resume: progress until
//!   the run ends), `list` (ls, show), `logs`, `manage` (stop, rm, tag), `sweep`, `compare`,
//!   `plot`, `export`, `sample` (text from a language model, streamed), `new` (a crate of one's
//!   own), and `table`
//!   (plain-text tables).

pub mod args;
