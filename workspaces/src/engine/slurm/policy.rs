//! What a run's status becomes from what Slurm says about its job (pure: no I/O).
//!
//! | Slurm | run |
//! | --- | --- |
//! | PENDING (any flag: REQUEUED, ...), REQUEUE_HOLD, SUSPENDED, CONFIGURING | queued, with Slurm's reason |
//! | RUNNING, COMPLETING, STOPPED, SIGNALING | running |
//! | COMPLETED | completed |
//! | CANCELLED | stopped (`ddp stop`, or `scancel` outside ddp, which is said) |
//! | FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL, DEADLINE | failed, with the state, exit code and failed rank |
//!
//! A job Slurm has forgotten is judged by what its batch script left in the run folder
//! (`slurm/exit`) and by whether the trainer wrote its final model. A job Slurm has just requeued
//! shows as COMPLETING (its requeue count up) until its old allocation is cleaned up: the run is
//! restarting meanwhile ([`while_requeued`]).

use super::squeue::JobInfo;
use crate::runs::run::RunStatus;

/// A run's status as its job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: RunStatus,
    /// Why it is queued (Slurm's reason), or why it failed.
    pub detail: Option<String>,
}

/// What the run folder says beside Slurm.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FolderFacts {
    /// `ddp stop` asked for the job to end (`slurm/stop`).
    pub stop_requested: bool,
    /// The first rank whose task failed, from `srun`'s report in the job's log.
    pub failed_rank: Option<usize>,
    /// `slurm/exit`: the batch script's last exit code and attempt.
    pub exit: Option<(i32, u32)>,
    /// The trainer wrote `model.safetensors` (it finished).
    pub finished: bool,
}

/// The run's status from its job's state.
pub fn judge(job: &JobInfo, facts: &FolderFacts) -> Verdict {
    let state = job.state.as_str();
    let queued = |reason: Option<&str>| Verdict {
        status: RunStatus::Queued,
        detail: reason.filter(|r| *r != "None").map(String::from),
    };
    match state {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD"
        | "CONFIGURING" => queued(job.reason.as_deref()),
        "SUSPENDED" => queued(Some("Suspended")),
        "RUNNING" | "COMPLETING" | "STOPPED" | "SIGNALING" | "STAGE_OUT" => Verdict {
            status: RunStatus::Running,
            detail: None,
        },
        "COMPLETED" => Verdict {
            status: RunStatus::Completed,
            detail: None,
        },
        "CANCELLED" => Verdict {
            status: RunStatus::Stopped,
            detail: (!facts.stop_requested)
                .then(|| "the job was cancelled outside ddp (scancel)".to_string()),
        },
        _ => Verdict {
            status: RunStatus::Failed,
            detail: Some(failure(job, facts)),
        },
    }
}

/// `Slurm: NODE_FAIL (reason NodeDown, exit code 0, signal 9); rank 1 failed (logs/rank-1.log)`.
fn failure(job: &JobInfo, facts: &FolderFacts) -> String {
    let state = if job.state.is_empty() {
        "an unknown state"
    } else {
        &job.state
    };
    let mut parts = Vec::new();
    if let Some(r) = job.reason.as_deref().filter(|r| *r != "None") {
        parts.push(format!("reason {r}"));
    }
    if let Some(c) = job.exit_code {
        parts.push(format!("exit code {c}"));
    }
    if let Some(s) = job.signal {
        parts.push(format!("signal {s}"));
    }
    let mut text = format!("Slurm: {state}");
    if !parts.is_empty() {
        text.push_str(&format!(" ({})", parts.join(", ")));
    }
    if let Some(rank) = facts.failed_rank {
        text.push_str(&format!("; rank {rank} failed (logs/rank-{rank}.log)"));
    }
    text
}

/// The run's status once Slurm no longer lists its job: what the batch script left, else the
/// trainer's final model, else a failure saying so.
pub fn judge_forgotten(facts: &FolderFacts) -> Verdict {
    match (facts.exit, facts.finished, facts.stop_requested) {
        (_, true, _) | (Some((0, _)), _, _) => Verdict {
            status: RunStatus::Completed,
            detail: None,
        },
        (_, _, true) => Verdict {
            status: RunStatus::Stopped,
            detail: None,
        },
        (Some((code, attempt)), _, _) => Verdict {
            status: RunStatus::Failed,
            detail: Some(format!(
                "the job's replicas ended with exit code {code} (attempt {}){}; Slurm no longer lists the job",
                attempt + 1,
                facts
                    .failed_rank
                    .map(|r| format!(", rank {r} failed (logs/rank-{r}.log)"))
                    .unwrap_or_default()
            )),
        },
        (None, _, _) => Verdict {
            status: RunStatus::Failed,
            detail: Some(
                "the job left Slurm's queue without running to its end (no slurm/exit in the run folder): see logs/slurm-*.out".into(),
            ),
        },
    }
}

/// The first rank `srun` reports failed in the job's log: lines such as
/// `srun: error: n2: task 1: Killed` or `srun: error: n1: tasks 0-1: Exited with exit code 2`.
pub fn failed_rank(log: &str) -> Option<usize> {
    log.lines()
        .filter(|l| l.starts_with("srun: error:"))
        .find_map(|l| {
            let rest = l.split(": task").nth(1)?;
            let rest = rest.strip_prefix('s').unwrap_or(rest).trim_start();
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
}

/// The run's status while its job is being requeued: `status` (from [`judge`]) becomes
/// restarting when the job is not `RUNNING` yet ran (COMPLETING: Slurm cleans up the allocation
/// it requeued) and either its requeue count just went up or the run was restarting already.
pub fn while_requeued(
    status: RunStatus,
    state: &str,
    requeued: bool,
    before: RunStatus,
) -> RunStatus {
    let winding_down = status == RunStatus::Running && state != "RUNNING";
    if winding_down && (requeued || before == RunStatus::Restarting) {
        RunStatus::Restarting
    } else {
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &str) -> JobInfo {
        JobInfo {
            id: "7".into(),
            state: state.into(),
            flags: Vec::new(),
            reason: None,
            nodes: None,
            restarts: 0,
            ..JobInfo::default()
        }
    }

    #[test]
    fn states_map_onto_run_statuses() {
        let f = FolderFacts::default();
        let mut pending = job("PENDING");
        pending.reason = Some("Priority".into());
        assert_eq!(
            judge(&pending, &f),
            Verdict {
                status: RunStatus::Queued,
                detail: Some("Priority".into())
            }
        );
        pending.reason = Some("None".into());
        assert_eq!(judge(&pending, &f).detail, None);
        for s in ["RUNNING", "COMPLETING"] {
            assert_eq!(judge(&job(s), &f).status, RunStatus::Running);
        }
        assert_eq!(judge(&job("COMPLETED"), &f).status, RunStatus::Completed);
        let cancelled = judge(&job("CANCELLED"), &f);
        assert_eq!(cancelled.status, RunStatus::Stopped);
        assert!(cancelled.detail.unwrap().contains("outside ddp"));
        let asked = FolderFacts {
            stop_requested: true,
            ..f.clone()
        };
        assert_eq!(
            judge(&job("CANCELLED"), &asked),
            Verdict {
                status: RunStatus::Stopped,
                detail: None
            }
        );
    }

    #[test]
    fn a_requeued_job_winding_down_is_restarting() {
        use RunStatus::*;
        // Slurm 22.05 shows a job it requeued after a node failure as COMPLETING, its restart
        // count up, until the allocation is cleaned up; then PENDING.
        assert_eq!(
            while_requeued(Running, "COMPLETING", true, Running),
            Restarting
        );
        assert_eq!(
            while_requeued(Running, "COMPLETING", false, Restarting),
            Restarting
        );
        assert_eq!(while_requeued(Queued, "PENDING", false, Restarting), Queued);
        // requeued and running again between two polls; a job that simply ends
        assert_eq!(while_requeued(Running, "RUNNING", true, Running), Running);
        assert_eq!(
            while_requeued(Running, "COMPLETING", false, Running),
            Running
        );
        assert_eq!(while_requeued(Failed, "NODE_FAIL", true, Running), Failed);
    }

    #[test]
    fn failures_say_slurms_state_code_and_rank() {
        let mut j = job("NODE_FAIL");
        j.reason = Some("NodeDown".into());
        j.exit_code = Some(0);
        j.signal = Some(9);
        let facts = FolderFacts {
            failed_rank: Some(1),
            ..FolderFacts::default()
        };
        let v = judge(&j, &facts);
        assert_eq!(v.status, RunStatus::Failed);
        assert_eq!(
            v.detail.as_deref(),
            Some(
                "Slurm: NODE_FAIL (reason NodeDown, exit code 0, signal 9); rank 1 failed (logs/rank-1.log)"
            )
        );
        for s in [
            "FAILED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "PREEMPTED",
            "BOOT_FAIL",
        ] {
            let v = judge(&job(s), &FolderFacts::default());
            assert_eq!(v.status, RunStatus::Failed, "{s}");
            assert_eq!(v.detail.unwrap(), format!("Slurm: {s}"));
        }
    }

    #[test]
    fn a_forgotten_job_is_judged_by_its_folder() {
        let v = |exit, finished, stop_requested| {
            judge_forgotten(&FolderFacts {
                exit,
                finished,
                stop_requested,
                failed_rank: Some(0),
            })
        };
        assert_eq!(v(Some((0, 0)), false, false).status, RunStatus::Completed);
        assert_eq!(v(None, true, false).status, RunStatus::Completed);
        assert_eq!(v(Some((143, 0)), false, true).status, RunStatus::Stopped);
        let failed = v(Some((1, 2)), false, false);
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(
            failed.detail.unwrap(),
            "the job's replicas ended with exit code 1 (attempt 3), rank 0 failed (logs/rank-0.log); Slurm no longer lists the job"
        );
        assert!(
            v(None, false, false)
                .detail
                .unwrap()
                .contains("no slurm/exit")
        );
    }

    #[test]
    fn the_failed_rank_comes_from_sruns_report() {
        let log = "ddp: job 5 attempt 1\nsrun: error: ddp-n2: task 1: Killed\nsrun: error: ddp-n1: task 0: Terminated\n";
        assert_eq!(failed_rank(log), Some(1));
        assert_eq!(
            failed_rank("srun: error: n1: tasks 0-1: Exited with exit code 2\n"),
            Some(0)
        );
        assert_eq!(failed_rank("srun: error: Timed out\n"), None);
        assert_eq!(failed_rank(""), None);
    }
}
