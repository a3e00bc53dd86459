//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong in the kernel outside a cell (a cell's own errors become `error` replies).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("connection file {}: {msg}", path.display())]
    ConnectionFile { path: PathBuf, msg: String },
    #[error("{channel} channel ({url}): {msg}")]
    Transport {
        channel: &'static str,
        url: String,
        msg: String,
    },
    #[error("kernelspec: {0}")]
    Install(String),
    #[error(transparent)]
    Workspace(#[from] ddp_workspaces::Error),
    /// A magic's command line was not understood (the message is clap's, as the CLI prints it).
    #[error("{0}")]
    Usage(String),
    /// The Rust evaluation context (evcxr) could not be started or used.
    #[error("Rust context: {0}")]
    Rust(String),
    /// A `%%ddp train` cell did not compile: rustc's diagnostics, with the cell's line numbers.
    #[error("{summary}")]
    Compile {
        summary: String,
        diagnostics: Vec<String>,
    },
    /// Building a `%%ddp train` cell failed for another reason than its code (cargo could not
    /// start, resolve or finish, or the build was interrupted or took too long).
    #[error("{0}")]
    Build(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The `ename` of the `error` reply this error becomes.
    pub fn ename(&self) -> &'static str {
        match self {
            Error::Usage(_) => "UsageError",
            Error::Workspace(_) => "DdpError",
            Error::Rust(_) => "RustContextError",
            Error::Compile { .. } => "CompileError",
            Error::Build(_) => "BuildError",
            _ => "KernelError",
        }
    }

    /// The `traceback` of the `error` reply, when it is more than the message's lines.
    pub fn traceback(&self) -> Option<Vec<String>> {
        match self {
            Error::Compile {
                summary,
                diagnostics,
            } => Some(
                diagnostics
                    .iter()
                    .cloned()
                    .chain(std::iter::once(summary.clone()))
                    .collect(),
            ),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
