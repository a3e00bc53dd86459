//! The restart policy: given how an attempt ended, decide what the supervisor does next. Pure:
//! no processes, no files (the supervisor acts on the decision).

use std::time::Duration;

use ddp_trainer::error::{EXIT_CONFIG, EXIT_RESTART};

/// How one attempt (all replicas of one launch) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every replica exited 0.
    Completed,
    /// The supervisor was asked to stop (and the replicas stopped).
    Stopped,
    /// The first replica to fail, and how.
    ReplicaFailed { rank: usize, exit: Exit },
    /// Launching itself failed (no executable, no logs folder...).
    LaunchFailed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with code {c}"),
            Exit::Signal(s) => write!(f, "was killed by signal {s}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Complete,
    Stop,
    /// Restart every replica with `--resume` after `after`; `attempt` counts restarts from 1.
    Restart {
        attempt: u32,
        after: Duration,
        reason: String,
    },
    Fail {
        reason: String,
    },
}

/// Whether an exit is worth restarting the group for: deaths by signal (OOM killer, a lost
/// node, `kill -9`), 137/143 (the same reported by a shell), and the trainer's "please
/// restart" code (a peer was lost). Configuration errors (2) and other failures are not.
pub fn restartable(exit: Exit) -> bool {
    match exit {
        Exit::Signal(_) => true,
        Exit::Code(c) => c == 137 || c == 143 || c == EXIT_RESTART,
    }
}

pub fn decide(
    outcome: &Outcome,
    restarts_used: u32,
    max_restarts: u32,
    backoff: Duration,
) -> Decision {
    match outcome {
        Outcome::Completed => Decision::Complete,
        Outcome::Stopped => Decision::Stop,
        Outcome::LaunchFailed(msg) => Decision::Fail {
            reason: msg.clone(),
        },
        Outcome::ReplicaFailed { rank, exit } => {
            let what = format!("rank {rank} {exit}");
            if *exit == Exit::Code(EXIT_CONFIG) {
                Decision::Fail {
                    reason: format!("{what} (configuration error: not restarted; see its log)"),
                }
            } else if !restartable(*exit) {
                Decision::Fail {
                    reason: format!("{what} (not a restartable failure; see its log)"),
                }
            } else if restarts_used >= max_restarts {
                Decision::Fail {
                    reason: format!(
                        "{what}; restart.max_restarts = {max_restarts} used up ({restarts_used} restarts)"
                    ),
                }
            } else {
                Decision::Restart {
                    attempt: restarts_used + 1,
                    after: backoff,
                    reason: what,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Duration = Duration::from_millis(500);

    fn failed(exit: Exit) -> Outcome {
        Outcome::ReplicaFailed { rank: 1, exit }
    }

    #[test]
    fn signal_deaths_restart_until_the_budget_is_used() {
        assert_eq!(
            decide(&failed(Exit::Signal(9)), 0, 3, B),
            Decision::Restart {
                attempt: 1,
                after: B,
                reason: "rank 1 was killed by signal 9".into()
            }
        );
        assert!(matches!(
            decide(&failed(Exit::Code(137)), 2, 3, B),
            Decision::Restart { attempt: 3, .. }
        ));
        assert!(matches!(
            decide(&failed(Exit::Code(EXIT_RESTART)), 0, 1, B),
            Decision::Restart { .. }
        ));
        match decide(&failed(Exit::Signal(9)), 3, 3, B) {
            Decision::Fail { reason } => assert_eq!(
                reason,
                "rank 1 was killed by signal 9; restart.max_restarts = 3 used up (3 restarts)"
            ),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn config_errors_and_plain_failures_never_restart() {
        match decide(&failed(Exit::Code(2)), 0, 3, B) {
            Decision::Fail { reason } => assert!(
                reason.contains("configuration error: not restarted"),
                "{reason}"
            ),
            d => panic!("{d:?}"),
        }
        assert!(matches!(
            decide(&failed(Exit::Code(1)), 0, 3, B),
            Decision::Fail { .. }
        ));
    }

    #[test]
    fn completion_and_stop() {
        assert_eq!(decide(&Outcome::Completed, 0, 0, B), Decision::Complete);
        assert_eq!(decide(&Outcome::Stopped, 1, 3, B), Decision::Stop);
        assert_eq!(
            decide(&Outcome::LaunchFailed("x".into()), 0, 3, B),
            Decision::Fail { reason: "x".into() }
        );
    }
}
