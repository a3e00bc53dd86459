//! `ddp-kernel`: a Jupyter kernel for ddp. Rust cells run through evcxr (state persists across
//! cells); `%ddp` magics start, watch and compare the data-parallel runs of the shared workspace
//! (the same run folders as the `ddp` CLI and `ddp-tui`), with **run cards** that update in place
//! (`update_display_data`) while a run trains, whether or not the cell is still running.
//!
//! Layout (transport, protocol and evaluation are separate parts):
//! - `transport`: the five ZeroMQ sockets (`jupyter-zmq-client`), one task each; signatures
//!   checked there (bad ones dropped and logged); [`transport::Outbox`] to send from anywhere.
//! - `protocol`: incoming messages as a typed [`protocol::Request`] (parsed once, at the edge);
//!   building replies and IOPub messages (version 5.4, spec-valid shapes).
//! - `kernel`: the message loop (one `match` over requests), `kernel_info`.
//! - `shared`: the state the loop, the executor and the magics share ([`shared::Shared`]: outbox,
//!   interrupt, cards, history, workspace); it imports none of them.
//! - `executor`: the thread that runs cells and Rust completion/inspection, off the loop.
//! - `cell`: a cell split into line magics, a cell magic and Rust; `is_complete`.
//! - `magics`: the `%ddp` command line (clap), what each subcommand does (`exec`), completion.
//! - `rust`: the evcxr context, output forwarding, errors as replies, the cell's value.
//! - `compile_errors`: Rust compile errors in the cell's lines (never evcxr's generated file).
//! - `train`: `%%ddp train` cells: the cell as a crate, built with cargo, started as a run.
//! - `cards`: live run cards (one task per card, owned by `Cards`, ended at shutdown).
//! - `render`: rich outputs (HTML + faithful text, SVG/PNG plots, JSON) for magics and cards.
//! - `output`: the outputs of one request (`stream`, `display_data`, `execute_result`, ...).
//! - `interrupt`, `history`: interrupt state; executed inputs for `history_request`.
//! - `install`: the `ddp` kernelspec (`ddp-kernel install`) and the cells' cache (`--warm`).
//! - `server`: starting and shutting down the kernel process.

pub mod cards;
pub mod cell;
pub mod compile_errors;
pub mod error;
pub mod executor;
pub mod history;
pub mod install;
pub mod interrupt;
pub mod kernel;
pub mod magics;
pub mod output;
pub mod protocol;
pub mod render;
pub mod rust;
pub mod server;
pub mod shared;
pub mod train;
pub mod transport;

pub use error::{Error, Result};

/// Logs to the kernel's stderr (the Jupyter server's console).
pub fn log(msg: &str) {
    eprintln!("ddp-kernel: {msg}");
}

/// The message of a caught panic.
pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_string())
}
