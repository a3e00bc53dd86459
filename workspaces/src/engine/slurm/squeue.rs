//! What Slurm says about jobs, parsed once at the edge: `squeue --json` of Slurm 22.05 (a job's
//! state is a string, numbers are plain) and of later versions (the state is a list of flags,
//! numbers are `{"set", "infinite", "number"}`), and `scontrol show job` for when accounting
//! is off.

use serde_json::Value;

use crate::{Error, Result};

/// One job as Slurm reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobInfo {
    pub id: String,
    /// The base state: `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`,
    /// `NODE_FAIL`, `OUT_OF_MEMORY`, `PREEMPTED`, ...
    pub state: String,
    /// Flags beside the state in newer versions (`REQUEUED`, `COMPLETING`, ...).
    pub flags: Vec<String>,
    /// Why it is pending (or why it ended): `Priority`, `Resources`, `None`, ...
    pub reason: Option<String>,
    /// The nodes it has (or had), Slurm's compressed list.
    pub nodes: Option<String>,
    /// How many times it was requeued.
    pub restarts: u32,
    /// The batch script's exit code, once it has ended.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// When it started (Unix seconds; squeue only). While pending, Slurm's estimate.
    pub start_time: Option<i64>,
    /// When it ended (Unix seconds; squeue only). While running, the end of its time limit.
    pub end_time: Option<i64>,
}

/// The jobs of `squeue --json` output.
pub fn parse_squeue_json(text: &str) -> Result<Vec<JobInfo>> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| Error::Invalid(format!("squeue --json printed no JSON ({e})")))?;
    if let Some(errors) = v.get("errors").and_then(Value::as_array)
        && let Some(first) = errors.first()
    {
        let msg = first
            .get("description")
            .or_else(|| first.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("an error");
        return Err(Error::Invalid(format!("squeue --json: {msg}")));
    }
    let jobs = v
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Invalid("squeue --json printed no \"jobs\" list".into()))?;
    jobs.iter().map(job).collect()
}

fn job(j: &Value) -> Result<JobInfo> {
    let id = number(j.get("job_id"))
        .map(|n| n.to_string())
        .ok_or_else(|| Error::Invalid(format!("squeue --json: a job without a job_id: {j}")))?;
    let (state, flags) = match j.get("job_state") {
        Some(Value::String(s)) => (s.clone(), Vec::new()),
        Some(Value::Array(list)) => {
            let names: Vec<String> = list
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect();
            // The base state comes first; the rest are flags (REQUEUED, COMPLETING, ...).
            let base = names
                .iter()
                .find(|n| BASE_STATES.contains(&n.as_str()))
                .or(names.first())
                .cloned()
                .unwrap_or_default();
            let flags = names.into_iter().filter(|n| *n != base).collect();
            (base, flags)
        }
        _ => (String::new(), Vec::new()),
    };
    let text = |key: &str| {
        j.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    let (exit_code, signal) = exit(j.get("exit_code"));
    Ok(JobInfo {
        id,
        state,
        flags,
        reason: text("state_reason"),
        nodes: text("nodes"),
        restarts: number(j.get("restart_cnt")).unwrap_or(0) as u32,
        exit_code,
        signal,
        start_time: number(j.get("start_time")).filter(|&t| t > 0),
        end_time: number(j.get("end_time")).filter(|&t| t > 0),
    })
}

/// Slurm's base job states (the rest of a newer state list are flags).
const BASE_STATES: [&str; 12] = [
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

/// A number written plainly (22.05) or as `{"set": true, "number": N}` (later); None when
/// absent or not set.
fn number(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::Object(o) => {
            if o.get("set").and_then(Value::as_bool) == Some(false)
                || o.get("infinite").and_then(Value::as_bool) == Some(true)
            {
                return None;
            }
            o.get("number").and_then(Value::as_i64)
        }
        _ => None,
    }
}

/// The exit code and signal: a plain number is the raw wait status (22.05: `768` is exit code
/// 3, `15` death by SIGTERM); an object has `return_code` and `signal.id` (later; `status`
/// PENDING or RUNNING means not ended).
fn exit(v: Option<&Value>) -> (Option<i32>, Option<i32>) {
    match v {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(status) if status & 0x7f != 0 => (None, Some((status & 0x7f) as i32)),
            Some(status) => (Some(((status >> 8) & 0xff) as i32), None),
            None => (None, None),
        },
        Some(Value::Object(o)) => {
            let status: Vec<&str> = match o.get("status") {
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                Some(Value::String(s)) => vec![s.as_str()],
                _ => Vec::new(),
            };
            if status.iter().any(|s| *s == "PENDING" || *s == "RUNNING") {
                return (None, None);
            }
            let code = number(o.get("return_code")).map(|c| c as i32);
            let signal = o
                .get("signal")
                .and_then(|s| number(s.get("id").or(Some(s))))
                .map(|c| c as i32)
                .filter(|&s| s > 0);
            (code, signal)
        }
        _ => (None, None),
    }
}

/// The job of `scontrol show job ID` output (`Key=Value` words), or None when Slurm no longer
/// knows it (`Invalid job id specified`).
pub fn parse_scontrol_job(text: &str) -> Option<JobInfo> {
    let mut fields = std::collections::HashMap::new();
    for word in text.split_whitespace() {
        if let Some((k, v)) = word.split_once('=') {
            fields.entry(k).or_insert(v);
        }
    }
    let id = fields.get("JobId")?.to_string();
    let text = |k: &str| {
        fields
            .get(k)
            .filter(|v| !v.is_empty() && **v != "(null)")
            .map(|v| v.to_string())
    };
    let (exit_code, signal) = match fields.get("ExitCode").and_then(|e| e.split_once(':')) {
        Some((c, s)) => (c.parse().ok(), s.parse().ok().filter(|&s: &i32| s > 0)),
        None => (None, None),
    };
    Some(JobInfo {
        id,
        state: text("JobState").unwrap_or_default(),
        flags: Vec::new(),
        reason: text("Reason"),
        nodes: text("NodeList"),
        restarts: fields
            .get("Restarts")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
        exit_code,
        signal,
        ..JobInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V22_05: &str = include_str!("fixtures/squeue-22.05.json");
    const V24_05: &str = include_str!("fixtures/squeue-24.05.json");
    const V22_05_ENDED: &str = include_str!("fixtures/squeue-22.05-ended.json");

    #[test]
    fn slurm_22_05_states_are_strings() {
        // Real output of Slurm 22.05.8 (the Debian 12 packages): one job running on two nodes,
        // one held back by --begin.
        let jobs = parse_squeue_json(V22_05).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            (jobs[0].id.as_str(), jobs[0].state.as_str()),
            ("1", "RUNNING")
        );
        assert_eq!(jobs[0].nodes.as_deref(), Some("ddp-n[1-2]"));
        assert_eq!(jobs[0].reason.as_deref(), Some("None"));
        assert_eq!(
            (jobs[1].id.as_str(), jobs[1].state.as_str()),
            ("2", "PENDING")
        );
        assert_eq!(jobs[1].reason.as_deref(), Some("BeginTime"));
        assert_eq!(jobs[1].nodes, None);
        assert!(jobs.iter().all(|j| j.flags.is_empty() && j.restarts == 0));
    }

    #[test]
    fn slurm_22_05_exit_codes_are_wait_statuses() {
        // Real output: `exit 3`, and `sleep` cancelled (SIGTERM), still in the controller.
        let jobs = parse_squeue_json(V22_05_ENDED).unwrap();
        assert_eq!(jobs[0].state, "FAILED");
        assert_eq!(jobs[0].reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!((jobs[0].exit_code, jobs[0].signal), (Some(3), None));
        assert_eq!(jobs[1].state, "CANCELLED");
        assert_eq!((jobs[1].exit_code, jobs[1].signal), (None, Some(15)));
        assert_eq!(
            (jobs[1].start_time, jobs[1].end_time),
            (Some(1795606427), Some(1795606428))
        );
    }

    #[test]
    fn later_states_are_lists_of_flags() {
        let jobs = parse_squeue_json(V24_05).unwrap();
        assert_eq!(
            jobs.iter().map(|j| j.state.as_str()).collect::<Vec<_>>(),
            ["PENDING", "RUNNING", "COMPLETED", "FAILED", "PENDING"]
        );
        assert_eq!(jobs[0].reason.as_deref(), Some("Priority"));
        assert_eq!(jobs[0].exit_code, None);
        assert_eq!(jobs[1].nodes.as_deref(), Some("n[1-2]"));
        assert_eq!(jobs[2].exit_code, Some(0));
        assert_eq!((jobs[3].exit_code, jobs[3].signal), (Some(1), None));
        assert_eq!(jobs[4].flags, ["REQUEUED"]);
        assert_eq!(jobs[4].restarts, 1);
    }

    #[test]
    fn errors_and_garbage_are_reported() {
        let e = parse_squeue_json("not json").unwrap_err().to_string();
        assert!(e.contains("squeue --json printed no JSON"), "{e}");
        let e = parse_squeue_json(
            r#"{"errors":[{"description":"Unable to contact slurm controller"}],"jobs":[]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("Unable to contact slurm controller"), "{e}");
    }

    #[test]
    fn scontrol_show_job() {
        let text = "JobId=42 JobName=ddp-mnist-r1\n   UserId=root(0) JobState=NODE_FAIL Reason=NodeDown Dependency=(null)\n   Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:9\n   NodeList=n[1-2]\n";
        let j = parse_scontrol_job(text).unwrap();
        assert_eq!(j.id, "42");
        assert_eq!(j.state, "NODE_FAIL");
        assert_eq!(j.reason.as_deref(), Some("NodeDown"));
        assert_eq!((j.exit_code, j.signal, j.restarts), (Some(0), Some(9), 2));
        assert_eq!(j.nodes.as_deref(), Some("n[1-2]"));
        assert_eq!(
            parse_scontrol_job("slurm_load_jobs error: Invalid job id specified"),
            None
        );
    }
}
