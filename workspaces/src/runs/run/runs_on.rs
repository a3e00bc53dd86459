//! Where a run's replicas run, as `run.json` records it ([`RunsOn`]), described for the views
//! in one place: `ddp ls`'s status and replicas columns, `ddp show`'s, the run view's and the
//! card's line naming the job or application.

use super::{RunRecord, RunStatus, SlurmJob, SparkApp};

/// Where a run's replicas run: here (under the run's supervisor), or in a cluster's job
/// recorded in `run.json` (a Slurm job, a Spark application).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsOn<'a> {
    Here,
    Slurm(&'a SlurmJob),
    Spark(&'a SparkApp),
}

impl RunRecord {
    /// Where this run's replicas run.
    pub fn runs_on(&self) -> RunsOn<'_> {
        match (&self.slurm, &self.spark) {
            (Some(job), _) => RunsOn::Slurm(job),
            (None, Some(app)) => RunsOn::Spark(app),
            (None, None) => RunsOn::Here,
        }
    }
}

impl RunsOn<'_> {
    /// The cluster's name, `slurm` or `spark`; none for a run here.
    pub fn cluster(&self) -> Option<&'static str> {
        match self {
            RunsOn::Here => None,
            RunsOn::Slurm(_) => Some("slurm"),
            RunsOn::Spark(_) => Some("spark"),
        }
    }

    /// The job's line in `ddp show`, the run view and the card: its label (the cluster) and
    /// what it says (`job 42 RUNNING on n[1-2]`, `app-... on spark://h:7077 (2 tasks), UI ...`).
    pub fn line(&self) -> Option<(&'static str, String)> {
        self.cluster().map(|c| (c, self.text(true)))
    }

    /// The job's text, its web UI's address left out without `with_ui` (a view that links to it
    /// instead, [`RunsOn::ui`]).
    pub fn text(&self, with_ui: bool) -> String {
        match self {
            RunsOn::Here => String::new(),
            RunsOn::Slurm(job) => job.text(),
            RunsOn::Spark(app) if with_ui => app.text(),
            RunsOn::Spark(app) => SparkApp {
                ui: None,
                ..(*app).clone()
            }
            .text(),
        }
    }

    /// The job's web UI, where it has one (a Spark application's).
    pub fn ui(&self) -> Option<&str> {
        match self {
            RunsOn::Spark(app) => app.ui.as_deref(),
            _ => None,
        }
    }

    /// A run's status as `ddp ls` prints it: a live run on a cluster names its job or
    /// application, and why it waits (`queued (slurm 42: Priority)`, `running (slurm 42)`,
    /// `queued (spark: waiting for executors: ...)`, `running (spark app-2026...)`).
    pub fn status_text(&self, status: RunStatus) -> String {
        if status.is_terminal() {
            return status.to_string();
        }
        match self {
            RunsOn::Here => status.to_string(),
            RunsOn::Slurm(j) if status == RunStatus::Queued => format!(
                "queued (slurm {}: {})",
                j.job_id,
                j.reason.as_deref().unwrap_or("pending")
            ),
            RunsOn::Slurm(j) => format!("{status} (slurm {})", j.job_id),
            RunsOn::Spark(app) => match (status, &app.waiting, &app.app_id) {
                (RunStatus::Queued, Some(why), _) => format!("queued (spark: {why})"),
                (status, _, Some(id)) => format!("{status} (spark {id})"),
                (status, _, None) => format!("{status} (spark: submitted)"),
            },
        }
    }

    /// The replicas column of a run list: `2× slurm`, `2× spark`, or `2× DEVICE` for a run
    /// here (the first of `devices`).
    pub fn replicas_text(&self, replicas: usize, devices: &str) -> String {
        let on = self
            .cluster()
            .unwrap_or_else(|| devices.split(' ').next().unwrap_or(""));
        format!("{replicas}× {on}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> SlurmJob {
        SlurmJob {
            job_id: "42".into(),
            state: "PENDING".into(),
            reason: Some("Priority".into()),
            nodes: 2,
            node_list: None,
            requeues: 0,
        }
    }

    #[test]
    fn each_place_describes_itself() {
        let job = job();
        let app = SparkApp {
            master: "spark://h:7077".into(),
            tasks: 2,
            app_id: Some("app-1".into()),
            ui: Some("http://h:4040".into()),
            ..SparkApp::default()
        };
        let (slurm, spark, here) = (RunsOn::Slurm(&job), RunsOn::Spark(&app), RunsOn::Here);
        assert_eq!(
            slurm.status_text(RunStatus::Queued),
            "queued (slurm 42: Priority)"
        );
        assert_eq!(slurm.status_text(RunStatus::Running), "running (slurm 42)");
        assert_eq!(slurm.status_text(RunStatus::Completed), "completed");
        assert_eq!(
            spark.status_text(RunStatus::Running),
            "running (spark app-1)"
        );
        assert_eq!(here.status_text(RunStatus::Running), "running");
        assert_eq!(
            slurm.line(),
            Some(("slurm", "job 42 PENDING (Priority)".into()))
        );
        assert_eq!(here.line(), None);
        assert!(spark.text(true).contains("UI http://h:4040"));
        assert!(!spark.text(false).contains("UI"));
        assert_eq!(spark.ui(), Some("http://h:4040"));
        assert_eq!(spark.replicas_text(2, "cpu"), "2× spark");
        assert_eq!(here.replicas_text(2, "gpu0 gpu1"), "2× gpu0");
    }
}
