//! `new`: starting points written to disk — a crate of one's own ([`NewCommand::Model`]).

use std::path::PathBuf;

/// What `new` writes.
#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum NewCommand {
    /// Write a crate of one's own in DIR: a candle model (src/main.rs) whose executable is a
    /// ddp-trainer, its spec (model.toml: 2 replicas on the embedded MNIST sample), a test that
    /// trains it, and a manifest naming ddp-trainer and its candle from this ddp checkout by path
    /// (with the checkout's Cargo.lock, so `cargo test --release --offline` works at once).
    Model(NewModelArgs),
}

/// `new model DIR [--name NAME]`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct NewModelArgs {
    /// The crate's folder: new, or empty.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The package and executable name (default: DIR's name).
    #[arg(long)]
    pub name: Option<String>,
}
