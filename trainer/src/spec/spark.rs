//! `[spark]`: where and how a workspace run goes when it is submitted to a Spark cluster (`ddp
//! run SPEC --on spark`), as Spark's TorchDistributor runs PyTorch: the master, the tasks of the
//! barrier stage (one replica each, or `gpus_per_task` replicas each on that task's GPUs) and
//! more Spark configuration. The keys do not change what is trained: they are left out of
//! [`Spec::hash`], and a run started locally ignores them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Spec;
use crate::Result;

/// The `[spark]` table (every key optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparkSpec {
    /// The master URL (`spark://HOST:7077`, `yarn`, `k8s://...`, `local[N]`); default
    /// `$SPARK_MASTER`, else `local[N]` with N the tasks (a try on one machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// Tasks of the barrier stage (all scheduled together or none); default `ddp.replicas`
    /// divided by `gpus_per_task`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<usize>,
    /// GPUs per task: each task runs its replicas (`ddp-trainer --standalone --nproc G`) on
    /// the GPUs Spark gave it; none: one replica per task, on its CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<usize>,
    /// More Spark configuration, passed as `--conf KEY=VALUE` (`"spark.executor.memory" =
    /// "4g"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conf: BTreeMap<String, String>,
    /// Seconds the run may stay queued for its tasks' executors (all of them at once, as a
    /// barrier stage needs) before it fails naming what it waited for; default
    /// [`DEFAULT_WAIT_S`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<u64>,
}

/// How long a run waits for its executors when `spark.wait_s` is not set.
pub const DEFAULT_WAIT_S: u64 = 300;

impl SparkSpec {
    /// Whether no key is set (the table is then left out of the frozen spec).
    pub fn is_empty(&self) -> bool {
        *self == SparkSpec::default()
    }

    /// Replicas each task runs.
    pub fn replicas_per_task(&self) -> usize {
        self.gpus_per_task.unwrap_or(1)
    }

    /// Seconds the run may wait for its executors.
    pub fn wait_secs(&self) -> u64 {
        self.wait_s.unwrap_or(DEFAULT_WAIT_S)
    }

    /// Tasks for `replicas` in all: `spark.tasks`, else the replicas divided over the tasks.
    pub fn task_count(&self, replicas: usize) -> usize {
        self.tasks
            .unwrap_or_else(|| replicas / self.replicas_per_task().max(1))
    }
}

impl Spec {
    /// The rules of `[spark]`: positive counts, replicas that are the tasks × their GPUs, a
    /// master and configuration keys Spark reads.
    pub(super) fn check_spark(&self) -> Result<()> {
        let s = &self.spark;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        if s.tasks == Some(0) {
            return bad("spark.tasks", "must be at least 1".into());
        }
        if s.wait_s == Some(0) {
            return bad(
                "spark.wait_s",
                "must be at least 1 (seconds to wait for the executors)".into(),
            );
        }
        if s.gpus_per_task == Some(0) {
            return bad(
                "spark.gpus_per_task",
                "must be at least 1 (leave it out for a CPU run)".into(),
            );
        }
        let per_task = s.replicas_per_task();
        let replicas = self.ddp.replicas;
        let tasks = s.task_count(replicas);
        if tasks == 0 || tasks * per_task != replicas {
            return bad(
                "ddp.replicas",
                format!(
                    "is {replicas} but the barrier stage has {tasks} task(s) × {per_task} \
                     replica(s) each = {}: set ddp.replicas = spark.tasks × spark.gpus_per_task, \
                     or leave spark.tasks out",
                    tasks * per_task
                ),
            );
        }
        if let Some(m) = &s.master
            && (m.trim().is_empty() || m.contains(char::is_whitespace))
        {
            return bad(
                "spark.master",
                format!("{m:?} is not a master URL: e.g. \"spark://host:7077\", \"local[2]\""),
            );
        }
        if let Some(k) = s.conf.keys().find(|k| !k.starts_with("spark.")) {
            return bad(
                "spark.conf",
                format!("{k:?} is not a Spark configuration key: they start with \"spark.\""),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BASE: &str = "name = \"s\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n[ddp]\nreplicas = 4\n";

    fn spec(spark: &str, sets: &[&str]) -> std::result::Result<Spec, String> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let text = format!("{BASE}[spark]\n{spark}");
        Spec::parse(&text, Path::new("s.toml"), &sets).map_err(|e| e.to_string())
    }

    #[test]
    fn a_spark_table_is_checked_and_left_out_of_the_hash() {
        let plain = Spec::parse(BASE, Path::new("s.toml"), &[]).unwrap();
        let s = spec(
            "master = \"spark://h:7077\"\ntasks = 2\ngpus_per_task = 2\nconf = { \"spark.executor.memory\" = \"4g\" }\n",
            &[],
        )
        .unwrap();
        assert_eq!(s.spark.task_count(4), 2);
        assert_eq!(s.spark.replicas_per_task(), 2);
        assert_eq!(s.spark.conf["spark.executor.memory"], "4g");
        assert_eq!(s.hash(), plain.hash());
        // Without tasks: one replica per task; overrides as for any key.
        let s = spec("", &["spark.master=\"local[4]\""]).unwrap();
        assert_eq!(s.spark.task_count(4), 4);
        assert_eq!(s.spark.master.as_deref(), Some("local[4]"));
        let s = spec("", &["spark.conf={\"spark.task.cpus\" = \"1\"}"]).unwrap();
        assert_eq!(s.spark.conf["spark.task.cpus"], "1");

        for (bad, key, words) in [
            ("tasks = 3\n", "ddp.replicas", "3 task(s)"),
            ("tasks = 0\n", "spark.tasks", "at least 1"),
            ("wait_s = 0\n", "spark.wait_s", "at least 1"),
            ("gpus_per_task = 3\n", "ddp.replicas", "× 3 replica(s)"),
            (
                "master = \"spark://a b\"\n",
                "spark.master",
                "not a master URL",
            ),
            (
                "conf = { \"executor.memory\" = \"4g\" }\n",
                "spark.conf",
                "start with",
            ),
            ("mastr = \"x\"\n", "mastr", ""),
        ] {
            let e = spec(bad, &[]).unwrap_err();
            assert!(e.contains(key) && e.contains(words), "{bad}: {e}");
        }
    }
}
