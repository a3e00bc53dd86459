//! The restart policy: given how an attempt ended, decide what the supervisor does next; and
//! what a front end reports for a run that ended ([`exit_code`]). Pure: no processes, no files
//! (the supervisor acts on the decision, and reads the failed replica's error line from its log
//! with [`last_error_line`](crate::runs::logs::last_error_line)).
//!
//! A replica's configuration or data error (exit code 2, [`EXIT_CONFIG`]: a bad spec, a corrupt
//! image, ...) is never restarted: the same input fails again. The run fails with the replica's
//! error line as its error, and the front ends report it as bad input (exit code 2).

use std::time::Duration;

use ddp_trainer::error::{EXIT_CONFIG, EXIT_FAILURE, EXIT_RESTART, EXIT_STOPPED};

pub use ddp_trainer::launcher::Exit;

use crate::runs::run::{RunRecord, RunStatus};

/// How one attempt (all replicas of one launch, local or on Spark) ended: what the policy decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Every replica exited 0.
    Completed,
    /// Every replica exited 0 at the run's pause point (`paused.json`): `epoch` epochs and
    /// `step` steps trained.
    Paused { epoch: u64, step: u64 },
    /// The supervisor was asked to stop (and the replicas stopped).
    Stopped,
    /// The first replica to fail, and how; `error` is the last error line it wrote in this
    /// attempt ([`last_error_line`](crate::runs::logs::last_error_line) of its log), if any.
    ReplicaFailed {
        rank: usize,
        exit: Exit,
        error: Option<String>,
    },
    /// Launching itself failed (no executable, no logs folder...).
    LaunchFailed(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Complete,
    Pause {
        epoch: u64,
        step: u64,
    },
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
/// A status that could not be waited for is not.
pub fn restartable(exit: &Exit) -> bool {
    match exit {
        Exit::Signaled { .. } => true,
        Exit::Exited(c) => *c == 137 || *c == 143 || *c == EXIT_RESTART,
        Exit::Lost(_) => false,
    }
}

pub fn decide(
    outcome: &Attempt,
    restarts_used: u32,
    max_restarts: u32,
    backoff: Duration,
) -> Decision {
    match outcome {
        Attempt::Completed => Decision::Complete,
        Attempt::Paused { epoch, step } => Decision::Pause {
            epoch: *epoch,
            step: *step,
        },
        Attempt::Stopped => Decision::Stop,
        Attempt::LaunchFailed(msg) => Decision::Fail {
            reason: msg.clone(),
        },
        Attempt::ReplicaFailed { rank, exit, error } => {
            let what = format!("rank {rank} {}", exit.describe());
            // The replica's own words when it wrote them, else where to look.
            let said = |why: &str| match error {
                Some(line) => format!("{what}{why}: {line}"),
                None => format!("{what}{why}; see its log"),
            };
            if *exit == Exit::Exited(EXIT_CONFIG) {
                Decision::Fail {
                    reason: said(", a configuration or data error (not restarted)"),
                }
            } else if !restartable(exit) {
                Decision::Fail {
                    reason: said(" (not a restartable failure)"),
                }
            } else if restarts_used >= max_restarts {
                let used = format!(
                    "; restart.max_restarts = {max_restarts} used up ({restarts_used} restarts)"
                );
                Decision::Fail {
                    reason: match error {
                        Some(line) => format!("{what}{used}: {line}"),
                        None => format!("{what}{used}"),
                    },
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

/// Whether `record` is a run that failed because a replica reported a configuration or data
/// error (exit code 2): retrying cannot help, the input must change.
pub fn failed_on_bad_input(record: &RunRecord) -> bool {
    record.status == RunStatus::Failed
        && (record.exit_codes.values().any(|&c| c == EXIT_CONFIG)
            || record.spark.as_ref().is_some_and(|s| s.refused))
}

/// The exit code a front end that waited for the run reports once it has ended: 0 completed,
/// 143 stopped, 2 failed on a replica's configuration or data error ([`failed_on_bad_input`],
/// the code of bad input), 1 any other failure.
pub fn exit_code(record: &RunRecord) -> i32 {
    match record.status {
        // A paused run trained what it was asked to (up to its pause point).
        RunStatus::Completed | RunStatus::Paused => 0,
        RunStatus::Stopped => EXIT_STOPPED,
        _ if failed_on_bad_input(record) => EXIT_CONFIG,
        _ => EXIT_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Duration = Duration::from_millis(500);

    fn failed(exit: Exit) -> Attempt {
        Attempt::ReplicaFailed {
            rank: 1,
            exit,
            error: None,
        }
    }

    fn failed_saying(exit: Exit, line: &str) -> Attempt {
        Attempt::ReplicaFailed {
            rank: 1,
            exit,
            error: Some(line.into()),
        }
    }

    #[test]
    fn signal_deaths_restart_until_the_budget_is_used() {
        assert_eq!(
            decide(
                &failed(Exit::Signaled {
                    signal: 9,
                    core_dumped: false
                }),
                0,
                3,
                B
            ),
            Decision::Restart {
                attempt: 1,
                after: B,
                reason: "rank 1 was killed by signal 9 (SIGKILL)".into()
            }
        );
        assert!(matches!(
            decide(&failed(Exit::Exited(137)), 2, 3, B),
            Decision::Restart { attempt: 3, .. }
        ));
        assert!(matches!(
            decide(&failed(Exit::Exited(EXIT_RESTART)), 0, 1, B),
            Decision::Restart { .. }
        ));
        match decide(
            &failed(Exit::Signaled {
                signal: 9,
                core_dumped: false,
            }),
            3,
            3,
            B,
        ) {
            Decision::Fail { reason } => assert_eq!(
                reason,
                "rank 1 was killed by signal 9 (SIGKILL); restart.max_restarts = 3 used up (3 restarts)"
            ),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn config_errors_and_plain_failures_never_restart() {
        let fail = |o: &Attempt| match decide(o, 0, 3, B) {
            Decision::Fail { reason } => reason,
            d => panic!("{d:?}"),
        };
        assert_eq!(
            fail(&failed(Exit::Exited(2))),
            "rank 1 exited with code 2, a configuration or data error (not restarted); see its log"
        );
        assert_eq!(
            fail(&failed(Exit::Exited(1))),
            "rank 1 exited with code 1 (not a restartable failure); see its log"
        );
        // The replica's error line is the reason's end.
        let line = "ddp-trainer: rank 1: /d/train/3/7.png: cannot be decoded as PNG: (corrupt or truncated)";
        assert_eq!(
            fail(&failed_saying(Exit::Exited(2), line)),
            format!(
                "rank 1 exited with code 2, a configuration or data error (not restarted): {line}"
            )
        );
        assert_eq!(
            fail(&failed_saying(
                Exit::Exited(1),
                "ddp-trainer: rank 1: disk full"
            )),
            "rank 1 exited with code 1 (not a restartable failure): ddp-trainer: rank 1: disk full"
        );
        // Not restarted even with restarts left and a line that says nothing of it.
        assert!(matches!(
            decide(&failed_saying(Exit::Exited(2), "ddp-trainer: x"), 0, 9, B),
            Decision::Fail { .. }
        ));
    }

    #[test]
    fn a_restart_keeps_its_short_reason_and_the_last_failure_says_why() {
        let o = failed_saying(
            Exit::Exited(EXIT_RESTART),
            "ddp-trainer: rank 1: all_reduce #3 failed",
        );
        assert!(matches!(
            decide(&o, 0, 1, B),
            Decision::Restart { reason, .. } if reason == "rank 1 exited with code 75"
        ));
        assert_eq!(
            decide(&o, 1, 1, B),
            Decision::Fail {
                reason: "rank 1 exited with code 75; restart.max_restarts = 1 used up (1 restarts): ddp-trainer: rank 1: all_reduce #3 failed".into()
            }
        );
    }

    #[test]
    fn exit_codes_of_ended_runs() {
        let mut r = RunRecord::sample();
        let code = |r: &RunRecord| exit_code(r);
        r.status = RunStatus::Completed;
        assert_eq!(code(&r), 0);
        r.status = RunStatus::Stopped;
        assert_eq!(code(&r), 143);
        r.status = RunStatus::Failed;
        assert_eq!(code(&r), 1, "no exit code recorded: the supervisor is gone");
        r.exit_codes.insert(1, 1);
        assert_eq!(code(&r), 1);
        assert!(!failed_on_bad_input(&r));
        r.exit_codes.insert(0, EXIT_CONFIG);
        assert_eq!(code(&r), 2);
        assert!(failed_on_bad_input(&r));
        // A stopped run with a recorded code 2 is still stopped.
        r.status = RunStatus::Stopped;
        assert!(!failed_on_bad_input(&r));
        assert_eq!(code(&r), 143);
    }

    #[test]
    fn completion_and_stop() {
        assert_eq!(decide(&Attempt::Completed, 0, 0, B), Decision::Complete);
        assert_eq!(decide(&Attempt::Stopped, 1, 3, B), Decision::Stop);
        assert_eq!(
            decide(&Attempt::LaunchFailed("x".into()), 0, 3, B),
            Decision::Fail { reason: "x".into() }
        );
    }
}
