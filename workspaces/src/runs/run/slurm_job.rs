//! A run's Slurm job as `run.json` records it.

use serde::{Deserialize, Serialize};

/// The job a run on Slurm was submitted as (`run.json` `"slurm"`), kept up to date by the
/// workspace's Slurm watcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// The job id `sbatch --parsable` printed (a requeued job keeps it; `ddp resume` submits a
    /// new job).
    pub job_id: String,
    /// Slurm's state as last seen: `PENDING`, `RUNNING`, `COMPLETED`, `NODE_FAIL`, ...
    /// (`SUBMITTED` until the watcher has seen the job).
    pub state: String,
    /// Slurm's reason while pending (`Priority`, `Resources`, ...) or for an end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Nodes asked for.
    pub nodes: usize,
    /// The nodes it runs (or ran) on, Slurm's compressed list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_list: Option<String>,
    /// Times Slurm requeued it (its restart count).
    #[serde(default)]
    pub requeues: u32,
}

impl SlurmJob {
    /// The state as `ddp show` and the views print it: `RUNNING on n[1-2]`, `PENDING
    /// (Priority)`.
    pub fn text(&self) -> String {
        let mut t = format!("job {} {}", self.job_id, self.state);
        if let Some(r) = &self.reason {
            t.push_str(&format!(" ({r})"));
        }
        if let Some(n) = &self.node_list {
            t.push_str(&format!(" on {n}"));
        }
        if self.requeues > 0 {
            t.push_str(&format!(
                ", requeued {} time{}",
                self.requeues,
                if self.requeues == 1 { "" } else { "s" }
            ));
        }
        t
    }
}
