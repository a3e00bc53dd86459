//! The crate's one error type, and the exit code every front end reports for it.
use std::path::PathBuf;

/// Exit code for bad input: a spec, an argument, an unknown run (see [`Error::exit_code`]).
pub const EXIT_INPUT: i32 = ddp_trainer::error::EXIT_CONFIG;
/// Exit code for everything else that failed.
pub const EXIT_FAILURE: i32 = ddp_trainer::error::EXIT_FAILURE;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing a file atomically ([`crate::files::fsutil::write_atomic`]) failed; `path` is the file.
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {msg}", path.display())]
    Corrupt { path: PathBuf, msg: String },
    /// An unknown run, sweep or workspace (the message says what was looked for).
    #[error("{0}")]
    NotFound(String),
    /// Bad input: an argument, a spec that cannot run on this machine, an ambiguous address.
    #[error("{0}")]
    Invalid(String),
    /// An action the run's state does not allow (removing a live run, resuming a completed one),
    /// or a tag that is not a single non-empty line.
    #[error("{0}")]
    Refused(String),
    /// The run's supervisor could not be started or signalled, or did not finish in time.
    #[error("{0}")]
    Supervisor(String),
    #[error(transparent)]
    Trainer(#[from] ddp_trainer::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The process exit code a front end reports for this error: [`EXIT_INPUT`] (2) for bad
    /// input (an unknown run, an invalid argument or spec, a file written into a folder that does
    /// not exist), the trainer's own code for a trainer error (2 for spec and data errors), and
    /// [`EXIT_FAILURE`] (1) otherwise. Always in `1..=255`.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::NotFound(_) | Error::Invalid(_) => EXIT_INPUT,
            Error::Write { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                EXIT_INPUT
            }
            Error::Trainer(t) => t.exit_code().clamp(1, 255),
            Error::Io { .. }
            | Error::Write { .. }
            | Error::Corrupt { .. }
            | Error::Refused(_)
            | Error::Supervisor(_) => EXIT_FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "x")
    }

    #[test]
    fn exit_codes() {
        use std::io::ErrorKind::{NotFound, PermissionDenied};
        assert_eq!(Error::NotFound("no run".into()).exit_code(), 2);
        assert_eq!(Error::Invalid("bad".into()).exit_code(), 2);
        assert_eq!(Error::Refused("live".into()).exit_code(), 1);
        assert_eq!(Error::Supervisor("gone".into()).exit_code(), 1);
        assert_eq!(Error::io("/x", io(NotFound)).exit_code(), 1);
        let write = |kind| Error::Write {
            path: "/x".into(),
            source: io(kind),
        };
        assert_eq!(write(NotFound).exit_code(), 2);
        assert_eq!(write(PermissionDenied).exit_code(), 1);
        let spec = ddp_trainer::Error::Spec {
            file: "s.toml".into(),
            line: None,
            key: "train.lr".into(),
            msg: "bad".into(),
        };
        assert_eq!(Error::from(spec).exit_code(), 2);
        assert_eq!(
            Error::from(ddp_trainer::Error::Launch("x".into())).exit_code(),
            1
        );
    }
}
