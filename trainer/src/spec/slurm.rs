//! `[slurm]`: where and how a workspace run goes when it is submitted to Slurm (`ddp run SPEC
//! --on slurm`): nodes, replicas per node, partition, time limit, account, QOS, constraint,
//! extra `sbatch` arguments, and how long before its time limit the job is warned. The keys do
//! not change what is trained: they are left out of [`Spec::hash`], a run resumes with others,
//! and a run started locally ignores them.

use serde::{Deserialize, Serialize};

use super::Spec;
use crate::Result;

/// The `[slurm]` table (every key optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSpec {
    /// Nodes to run on (`sbatch --nodes`); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<usize>,
    /// Replicas per node, one GPU each (`--gpus-per-node`); `ddp.replicas` becomes nodes × this.
    /// Without it the replicas are spread evenly over the nodes (CPU runs: tasks per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The time limit, in Slurm's forms: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
    /// `D-HH:MM:SS`, `UNLIMITED`; a bare number is minutes (`time = 30`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "time_text"
    )]
    pub time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// More `sbatch` options, passed through as they are (`["--mem=8G", "--exclusive"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Seconds before the time limit (or a preemption's grace time) that the job is warned
    /// with SIGUSR2 to checkpoint and requeue (`--signal=B:USR2@N`); default 90.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_s: Option<u32>,
}

/// The warning's lead when `slurm.warn_s` is not set.
pub const DEFAULT_WARN_S: u32 = 90;

/// A time limit written as text, or as a number of minutes.
fn time_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Time {
        Text(String),
        Minutes(u64),
    }
    Ok(Some(match Time::deserialize(d)? {
        Time::Text(t) => t,
        Time::Minutes(m) => m.to_string(),
    }))
}

impl SlurmSpec {
    /// Whether no key is set (the table is then left out of the frozen spec).
    pub fn is_empty(&self) -> bool {
        *self == SlurmSpec::default()
    }

    /// Nodes asked for (`slurm.nodes`, default 1).
    pub fn node_count(&self) -> usize {
        self.nodes.unwrap_or(1)
    }

    /// Replicas per node for `replicas` in all: `gpus_per_node`, else an even share.
    pub fn replicas_per_node(&self, replicas: usize) -> usize {
        self.gpus_per_node
            .unwrap_or_else(|| replicas / self.node_count().max(1))
    }
}

impl Spec {
    /// The rules of `[slurm]`: positive counts, replicas that split evenly over the nodes, a
    /// time limit Slurm reads, arguments that are options.
    pub(super) fn check_slurm(&self) -> Result<()> {
        let s = &self.slurm;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        if s.nodes == Some(0) {
            return bad("slurm.nodes", "must be at least 1".into());
        }
        if s.gpus_per_node == Some(0) {
            return bad(
                "slurm.gpus_per_node",
                "must be at least 1 (leave it out for a CPU run)".into(),
            );
        }
        let nodes = s.node_count();
        let replicas = self.ddp.replicas;
        match s.gpus_per_node {
            Some(g) if replicas != nodes * g => {
                return bad(
                    "ddp.replicas",
                    format!(
                        "is {replicas} but slurm.nodes × slurm.gpus_per_node is {nodes} × {g} = {}: \
                         set ddp.replicas = {} (one replica per GPU), or leave gpus_per_node out",
                        nodes * g,
                        nodes * g
                    ),
                );
            }
            None if !replicas.is_multiple_of(nodes) || replicas < nodes => {
                return bad(
                    "ddp.replicas",
                    format!(
                        "is {replicas}, which does not spread evenly over slurm.nodes = {nodes}: \
                         use a multiple of {nodes} replicas, or another number of nodes"
                    ),
                );
            }
            _ => {}
        }
        if let Some(t) = &s.time
            && let Err(why) = slurm_time(t)
        {
            return bad("slurm.time", format!("{t:?} {why}"));
        }
        for (key, value) in [
            ("slurm.partition", &s.partition),
            ("slurm.account", &s.account),
            ("slurm.qos", &s.qos),
            ("slurm.constraint", &s.constraint),
        ] {
            if let Some(v) = value
                && (v.trim().is_empty() || v.contains(char::is_whitespace))
            {
                return bad(key, format!("{v:?} must be one word without spaces"));
            }
        }
        if let Some(a) = s
            .sbatch_args
            .iter()
            .find(|a| !a.starts_with('-') || a.contains('\n'))
        {
            return bad(
                "slurm.sbatch_args",
                format!(
                    "{a:?} is not an sbatch option: each item is one option as sbatch takes it, \
                     e.g. \"--mem=8G\""
                ),
            );
        }
        if s.warn_s == Some(0) {
            return bad(
                "slurm.warn_s",
                "must be at least 1 second (the replicas need the time to checkpoint)".into(),
            );
        }
        Ok(())
    }
}

/// Checks a Slurm time limit; returns its minutes (None: unlimited) or why it is not one.
pub fn slurm_time(t: &str) -> std::result::Result<Option<u64>, String> {
    const FORMS: &str = "is not a Slurm time limit: use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, \
                         D-HH:MM:SS or UNLIMITED (e.g. \"30\" for 30 minutes, \"2:00:00\" for two hours)";
    let t = t.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    let num = |s: &str| -> std::result::Result<u64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(FORMS.to_string());
        }
        s.parse().map_err(|_| FORMS.to_string())
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, rest)) => (Some(num(d)?), rest),
        None => (None, t),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(num)
        .collect::<std::result::Result<_, _>>()?;
    let seconds = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) | (Some(_), [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(_), [h]) => h * 3600,
        (Some(_), [h, m]) => h * 3600 + m * 60,
        _ => return Err(FORMS.to_string()),
    } + days.unwrap_or(0) * 86400;
    if seconds == 0 {
        return Err("is zero: a job needs some time".into());
    }
    Ok(Some(seconds.div_ceil(60)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BASE: &str = "name = \"s\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n";

    fn spec(sets: &[&str]) -> std::result::Result<Spec, String> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Spec::parse(BASE, Path::new("s.toml"), &sets).map_err(|e| e.to_string())
    }

    #[test]
    fn time_limits_in_slurms_forms() {
        assert_eq!(slurm_time("30"), Ok(Some(30)));
        assert_eq!(slurm_time("1:30"), Ok(Some(2)));
        assert_eq!(slurm_time("2:00:00"), Ok(Some(120)));
        assert_eq!(slurm_time("1-2"), Ok(Some(26 * 60)));
        assert_eq!(slurm_time("1-0:30"), Ok(Some(24 * 60 + 30)));
        assert_eq!(slurm_time("1-0:0:30"), Ok(Some(24 * 60 + 1)));
        assert_eq!(slurm_time("UNLIMITED"), Ok(None));
        for bad in ["", "1h", "1:2:3:4", "-1", "1-", "a-1", "0", "0:00"] {
            assert!(slurm_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_slurm_table_is_checked() {
        let s = spec(&[
            "slurm.nodes=2",
            "ddp.replicas=4",
            "slurm.partition=gpu",
            "slurm.time=\"1:00:00\"",
            "slurm.sbatch_args=[\"--mem=4G\"]",
        ])
        .unwrap();
        assert_eq!(s.slurm.replicas_per_node(s.ddp.replicas), 2);
        let e = spec(&["slurm.nodes=2", "ddp.replicas=3"]).unwrap_err();
        assert!(
            e.contains("ddp.replicas: is 3, which does not spread evenly over slurm.nodes = 2"),
            "{e}"
        );
        let e = spec(&["slurm.nodes=2", "slurm.gpus_per_node=4", "ddp.replicas=2"]).unwrap_err();
        assert!(e.contains("set ddp.replicas = 8"), "{e}");
        let e = spec(&["slurm.time=soon"]).unwrap_err();
        assert!(
            e.contains("slurm.time: \"soon\" is not a Slurm time limit"),
            "{e}"
        );
        let e = spec(&["slurm.sbatch_args=[\"mem=4G\"]"]).unwrap_err();
        assert!(e.contains("is not an sbatch option"), "{e}");
        let e = spec(&["slurm.partition=\"a b\""]).unwrap_err();
        assert!(e.contains("slurm.partition"), "{e}");
        let e = spec(&["slurm.nodes=0"]).unwrap_err();
        assert!(e.contains("slurm.nodes: must be at least 1"), "{e}");
    }

    #[test]
    fn slurm_keys_do_not_change_the_hash() {
        let a = spec(&[]).unwrap();
        let b = spec(&["slurm.nodes=1", "slurm.time=10"]).unwrap();
        assert_eq!(a.hash(), b.hash());
        assert!(!a.to_toml().contains("[slurm]"));
        assert!(b.to_toml().contains("[slurm]"));
    }
}
