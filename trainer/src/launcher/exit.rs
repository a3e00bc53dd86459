//! How a replica ended ([`Exit`]), the failure the launcher reports ([`ReplicaFailure`]) and
//! which of several it is ([`culprit`]): pure policy, no I/O.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

use crate::error::{EXIT_CONFIG, EXIT_LEFT, EXIT_RESTART, EXIT_STOPPED, Error};

/// How a replica ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Exited(i32),
    Signaled {
        signal: i32,
        core_dumped: bool,
    },
    /// `wait` failed: the status is unknown.
    Lost(String),
}

impl Exit {
    pub fn from_status(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Exited(code),
            (None, Some(signal)) => Exit::Signaled {
                signal,
                core_dumped: status.core_dumped(),
            },
            (None, None) => Exit::Lost(format!("unrecognised status {status}")),
        }
    }

    pub fn success(&self) -> bool {
        *self == Exit::Exited(0)
    }

    pub fn code(&self) -> Option<i32> {
        match self {
            Exit::Exited(code) => Some(*code),
            _ => None,
        }
    }

    /// `exited with code 2`, `was killed by signal 9 (SIGKILL)`.
    pub fn describe(&self) -> String {
        match self {
            Exit::Exited(code) => format!("exited with code {code}"),
            Exit::Signaled {
                signal,
                core_dumped,
            } => format!(
                "was killed by signal {signal} ({}){}",
                signal_name(*signal),
                if *core_dumped { " and dumped core" } else { "" }
            ),
            Exit::Lost(msg) => format!("could not be waited for ({msg})"),
        }
    }

    /// Among failures seen together, the likeliest root cause comes first: a replica killed by
    /// a signal (its peers then fail because it died), then a configuration error, then other
    /// failures, and last a replica that lost its peers (a collective failed: [`EXIT_RESTART`]),
    /// which is most often the consequence of another's exit.
    pub(super) fn blame_order(&self) -> u8 {
        match self {
            Exit::Signaled { .. } => 0,
            Exit::Exited(EXIT_CONFIG) => 1,
            Exit::Exited(EXIT_RESTART) => 3,
            _ => 2,
        }
    }

    /// A replica that left its elastic group on request ([`EXIT_LEFT`]): no failure.
    pub fn left(&self) -> bool {
        *self == Exit::Exited(EXIT_LEFT)
    }

    /// A replica that stopped on request after a step its peers finished too, its position
    /// checkpointed ([`EXIT_STOPPED`]).
    pub fn stopped(&self) -> bool {
        *self == Exit::Exited(EXIT_STOPPED)
    }

    /// The signal that killed the replica, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            Exit::Signaled { signal, .. } => Some(*signal),
            _ => None,
        }
    }

    /// A replica that refused its input: a configuration or data error ([`EXIT_CONFIG`]), which
    /// the same input repeats.
    pub fn bad_input(&self) -> bool {
        *self == Exit::Exited(EXIT_CONFIG)
    }

    /// A replica that failed because a peer went away: the peer's own outcome, arriving a moment
    /// later, says more.
    pub fn lost_its_peers(&self) -> bool {
        *self == Exit::Exited(EXIT_RESTART)
    }
}

/// The name of `signal`, for messages.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "unnamed signal",
    }
}

/// Which of the replicas that failed in the same poll, given as (rank, outcome), is reported:
/// the likeliest root cause ([`Exit::blame_order`]), the lowest rank among equals. Returns its
/// index in `failed`.
pub(super) fn culprit(failed: &[(usize, &Exit)]) -> Option<usize> {
    (0..failed.len()).min_by_key(|&i| (failed[i].1.blame_order(), failed[i].0))
}

/// A replica that failed (or, for a stop that reached the replicas, stopped): which, its process,
/// how it ended and its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFailure {
    pub rank: usize,
    pub pid: u32,
    pub exit: Exit,
    pub log: PathBuf,
}

impl ReplicaFailure {
    /// The launcher's error for it ([`Error::Replica`]).
    pub fn error(&self) -> Error {
        Error::Replica {
            rank: self.rank,
            pid: self.pid,
            status: self.exit.describe(),
            code: self.exit.code(),
            signal: self.exit.signal(),
            log: self.log.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;

    use super::*;

    #[test]
    fn blame_prefers_signals_then_config_errors() {
        let killed = Exit::Signaled {
            signal: libc::SIGSEGV,
            core_dumped: true,
        };
        assert_eq!(
            killed.describe(),
            "was killed by signal 11 (SIGSEGV) and dumped core"
        );
        let mut outcomes = [Exit::Exited(1), Exit::Exited(2), killed.clone()];
        outcomes.sort_by_key(Exit::blame_order);
        assert_eq!(outcomes, [killed, Exit::Exited(2), Exit::Exited(1)]);
        assert!(Exit::Exited(0).success());
        assert_eq!(Exit::Exited(7).code(), Some(7));
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(
            Exit::from_status(ExitStatus::from_raw(2 << 8)),
            Exit::Exited(2)
        );
        assert_eq!(
            Exit::from_status(ExitStatus::from_raw(libc::SIGKILL)),
            Exit::Signaled {
                signal: libc::SIGKILL,
                core_dumped: false
            }
        );
        assert_eq!(
            Exit::from_status(ExitStatus::from_raw(libc::SIGSEGV | 0x80)),
            Exit::Signaled {
                signal: libc::SIGSEGV,
                core_dumped: true
            }
        );
        assert_eq!(
            Exit::Signaled {
                signal: libc::SIGKILL,
                core_dumped: false
            }
            .describe(),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(Exit::Exited(2).describe(), "exited with code 2");
        assert_eq!(Exit::Exited(2).code(), Some(2));
        assert!(!Exit::Exited(1).success());
        assert_eq!(signal_name(64), "unnamed signal");
    }

    #[test]
    fn the_culprit_is_the_likeliest_cause_then_the_lowest_rank() {
        let killed = Exit::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        let (config, runtime) = (Exit::Exited(EXIT_CONFIG), Exit::Exited(1));
        assert_eq!(culprit(&[]), None);
        assert_eq!(culprit(&[(3, &runtime), (1, &runtime)]), Some(1));
        assert_eq!(culprit(&[(0, &runtime), (2, &config)]), Some(1));
        assert_eq!(
            culprit(&[(0, &config), (1, &runtime), (2, &killed)]),
            Some(2)
        );
        assert_eq!(culprit(&[(2, &killed), (1, &killed)]), Some(1));
        let lost = Exit::Exited(EXIT_RESTART);
        assert!(lost.lost_its_peers() && !config.lost_its_peers());
        assert_eq!(culprit(&[(1, &lost), (0, &config)]), Some(1));
        assert_eq!(culprit(&[(0, &lost), (1, &runtime)]), Some(1));
    }

    #[test]
    fn a_failure_becomes_the_replica_error() {
        let killed = Exit::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        let failure = |rank, pid, exit: &Exit, log: PathBuf| ReplicaFailure {
            rank,
            pid,
            exit: exit.clone(),
            log,
        };
        match failure(1, 42, &killed, "out/logs/rank-1.log".into()).error() {
            Error::Replica {
                rank,
                pid,
                status,
                code,
                signal,
                log,
            } => {
                assert_eq!((rank, pid), (1, 42));
                assert_eq!(status, "was killed by signal 9 (SIGKILL)");
                assert_eq!((code, signal), (None, Some(libc::SIGKILL)));
                assert_eq!(log, Path::new("out/logs/rank-1.log"));
            }
            other => panic!("expected Error::Replica, got {other:?}"),
        }
        match failure(0, 7, &Exit::Exited(2), PathBuf::new()).error() {
            Error::Replica { code, signal, .. } => assert_eq!((code, signal), (Some(2), None)),
            other => panic!("expected Error::Replica, got {other:?}"),
        }
    }
}
