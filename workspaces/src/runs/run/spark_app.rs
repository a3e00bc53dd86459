//! A run's Spark application as `run.json` records it.

use serde::{Deserialize, Serialize};

/// The Spark application of a run submitted with `--on spark` (`run.json` `"spark"`), kept up to
/// date by the run's supervisor while `spark-submit` runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparkApp {
    /// The master it was submitted to (`spark://host:7077`, `local[2]`, ...).
    pub master: String,
    /// Tasks of the barrier stage.
    pub tasks: usize,
    /// The application id, once the driver has it (`app-20261129120840-0001`, `local-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
    /// The driver's web UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui: Option<String>,
    /// Why the application waits (for executors), while it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// The cluster could not run the barrier stage (too few task slots within `spark.wait_s`):
    /// bad input, not retried.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    /// Attempts of the barrier stage that Spark ran again after a failure (the run's restarts).
    #[serde(default)]
    pub stage_retries: u32,
}

impl SparkApp {
    /// As `ddp show` and the views print it: `app-... on spark://h:7077 (2 tasks), UI http://...`.
    pub fn text(&self) -> String {
        let mut t = format!(
            "{} on {} ({} task{})",
            self.app_id.as_deref().unwrap_or("submitted"),
            self.master,
            self.tasks,
            if self.tasks == 1 { "" } else { "s" }
        );
        if let Some(ui) = &self.ui {
            t.push_str(&format!(", UI {ui}"));
        }
        if let Some(why) = &self.waiting {
            t.push_str(&format!("; {why}"));
        }
        if self.stage_retries > 0 {
            t.push_str(&format!(", stage run again {} time(s)", self.stage_retries));
        }
        t
    }
}
