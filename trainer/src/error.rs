//! The crate's one error type. Every variant names what a user needs to act on: the file, the key,
//! the rank, the collective operation and its sequence number.

use std::path::PathBuf;

/// Exit code of a replica for configuration errors (bad spec, bad data, bad environment).
/// A supervisor must not restart on it: the same input would fail again.
pub const EXIT_CONFIG: i32 = 2;
/// Exit code for runtime failures (a peer died, a timeout, an I/O error while training).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code for failures worth a restart of the whole group (the "please restart" code): a
/// collective failed because a peer died, hung or closed its connection. Supervisors restart on
/// it (and on death by signal) within `restart.max_restarts`.
pub const EXIT_RESTART: i32 = 75;
/// Exit code of a replica that stopped on request (SIGTERM, SIGINT, SIGUSR2): every replica
/// finished the same step, and the run's position is in its newest checkpoint (written there and
/// then, unless the request came before the first step), so `--resume` loses no finished step.
/// The standalone launcher exits with it too when all its replicas did.
pub const EXIT_STOPPED: i32 = 143;
/// Exit code of a replica that left its elastic group on request (`ddp scale`, SIGUSR1 to the
/// replica) after a step the others finished too: neither a failure nor the run's end.
pub const EXIT_LEFT: i32 = 76;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or socket operation failed; `path` says on what.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A data file exists but its content is wrong (magic, dimensions, counts, truncation).
    #[error("{}: {msg}", path.display())]
    Data { path: PathBuf, msg: String },

    /// The experiment spec (or a `--set` override) is invalid.
    #[error("{}{}: {msg}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Spec {
        file: PathBuf,
        line: Option<usize>,
        key: String,
        msg: String,
    },

    /// The launcher environment (RANK, WORLD_SIZE, SLURM_*, ...) is inconsistent.
    #[error("environment variable {var}: {msg}")]
    Env { var: String, msg: String },

    /// Joining the process group failed (store unreachable, port in use, wrong token, world mismatch).
    #[error("rendezvous failed on rank {rank}: {msg}")]
    Rendezvous { rank: usize, msg: String },

    /// A collective operation failed: which op, its sequence number, this rank, the missing peer.
    #[error("{op} #{seq} failed on rank {rank}{}: {msg}", peer.map(|p| format!(" (waiting for rank {p})")).unwrap_or_default())]
    Collective {
        op: &'static str,
        seq: u64,
        rank: usize,
        peer: Option<usize>,
        msg: String,
    },

    /// An elastic run lost more replicas than it may (`ddp.elastic.min_replicas`).
    #[error("elastic run: {0}")]
    Elastic(String),

    /// This replica left its elastic group on request ([`EXIT_LEFT`]).
    #[error("{0}")]
    Left(String),

    /// Model construction or parameter consistency across ranks.
    #[error("model: {0}")]
    Model(String),

    /// A checkpoint could not be written or read.
    #[error("checkpoint {}: {msg}", path.display())]
    Checkpoint { path: PathBuf, msg: String },

    /// The standalone launcher failed (a replica died, spawning failed).
    #[error("launcher: {0}")]
    Launch(String),

    /// A replica of the standalone launcher failed: `status` says how ("exited with code 2",
    /// "was killed by signal 9 (SIGKILL)"), `code` is its exit code when it exited, `log` its log.
    #[error("rank {rank} (pid {pid}) {status}; see {}", log.display())]
    Replica {
        rank: usize,
        pid: u32,
        status: String,
        code: Option<i32>,
        /// The signal that killed it, when it died by one.
        signal: Option<i32>,
        log: PathBuf,
    },

    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a data-format problem with the file it was found in.
    pub fn data(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Data {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// The process exit code for this error: [`EXIT_CONFIG`] when retrying cannot help.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Spec { .. } | Error::Env { .. } | Error::Data { .. } | Error::Model(_) => {
                EXIT_CONFIG
            }
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                EXIT_CONFIG
            }
            Error::Replica {
                code: Some(EXIT_CONFIG),
                ..
            } => EXIT_CONFIG,
            Error::Collective { .. } | Error::Elastic(_) => EXIT_RESTART,
            Error::Left(_) => EXIT_LEFT,
            _ => EXIT_FAILURE,
        }
    }
}
