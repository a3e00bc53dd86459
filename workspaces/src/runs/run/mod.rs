//! One run folder: `run.json` (the run's record, rewritten atomically on every change),
//! `events.jsonl` (the supervisor's events, appended), `spec.toml` (the resolved spec, frozen),
//! and what the trainer writes (`logs/`, `metrics/`, `checkpoints/`, `tb/`, `model.safetensors`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

mod runs_on;
mod slurm_job;
mod spark_app;
pub use runs_on::RunsOn;
pub use slurm_job::SlurmJob;
pub use spark_app::SparkApp;

/// Lifecycle: queued → running → completed | failed | stopped, with restarting in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Restarting,
    Completed,
    Failed,
    Stopped,
    /// Trained up to its `pause_at` (a search's rung) and checkpointed there; `ddp resume` or
    /// its sweep's scheduler goes on from that checkpoint.
    Paused,
}

impl RunStatus {
    /// Whether the run is over (nothing will change it but `ddp resume`).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Stopped | RunStatus::Paused
        )
    }

    /// Whether `ddp resume` takes the run on from its newest checkpoint: stopped, failed or
    /// paused.
    pub fn can_resume(self) -> bool {
        matches!(
            self,
            RunStatus::Stopped | RunStatus::Failed | RunStatus::Paused
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Restarting => "restarting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Stopped => "stopped",
            RunStatus::Paused => "paused",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            Error::Invalid(format!(
                "unknown status `{s}`; expected one of queued, running, restarting, completed, failed, stopped, paused"
            ))
        })
    }
}

/// The supervising process, identified by pid and start time (pids are reused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_ticks: u64,
}

impl ProcessId {
    pub fn current() -> ProcessId {
        let pid = std::process::id();
        ProcessId {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
        }
    }

    /// Whether this exact process still exists.
    pub fn is_alive(&self) -> bool {
        match start_ticks(self.pid) {
            Some(t) => self.start_ticks == 0 || t == self.start_ticks,
            None => false,
        }
    }
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let state = rest.split(' ').next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    rest.split(' ').nth(19)?.parse().ok()
}

/// `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub experiment: String,
    /// `--name` given to `ddp run`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The sweep this run belongs to (`ddp sweep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    pub status: RunStatus,
    pub spec_hash: String,
    /// The command that created the run (`ddp run ...`).
    pub command: Vec<String>,
    pub host: String,
    pub replicas: usize,
    /// Where the replicas run: "cpu (1 thread per replica)", "cuda:0,1", ...
    #[serde(default)]
    pub devices: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor: Option<ProcessId>,
    /// Replica pids by rank (of the current attempt).
    #[serde(default)]
    pub replica_pids: BTreeMap<usize, u32>,
    /// Unix seconds.
    pub created: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<f64>,
    /// Exit code (or 128 + signal) of each replica of the last attempt, by rank.
    #[serde(default)]
    pub exit_codes: BTreeMap<usize, i32>,
    #[serde(default)]
    pub restarts: u32,
    /// The executable the replicas run (`ddp run --trainer PATH`, a program made with
    /// `ddp_trainer::main_with`); none: the built-in trainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<std::path::PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the run's own data came to (from the trainer's `data.json`), once it has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataSummary>,
    /// The Slurm job of a run submitted with `--on slurm` (none: a local run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmJob>,
    /// The Spark application of a run submitted with `--on spark` (none: not on Spark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark: Option<SparkApp>,
    /// Where the next launch pauses (`epoch:N`, `step:N`; `ddp-trainer --pause-at`), set by a
    /// sweep's scheduler before it starts or resumes a trial; none: trains to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_at: Option<String>,
}

/// The run's own data in a line: its format, samples per part, classes, files skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSummary {
    pub format: String,
    pub train_samples: usize,
    pub test_samples: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// True when the test part was held out of the training files (`data.test_fraction`).
    #[serde(default)]
    pub test_held_out: bool,
    /// Unreadable files left out with `data.skip_bad = true`.
    #[serde(default)]
    pub skipped: usize,
}

impl DataSummary {
    /// The summary of the `data.json` in `run_dir`, if there is a readable one.
    pub fn read(run_dir: &Path) -> Option<DataSummary> {
        let path = run_dir.join(ddp_trainer::data::DataRecord::FILE);
        let text = std::fs::read_to_string(path).ok()?;
        let r: ddp_trainer::data::DataRecord = serde_json::from_str(&text).ok()?;
        Some(DataSummary {
            format: r.format,
            train_samples: r.train_samples,
            test_samples: r.test_samples,
            classes: r.classes.map(|c| c.len()),
            test_held_out: r.test_held_out,
            skipped: r.skipped.len(),
        })
    }

    /// `image-folder: 8000 train, 2000 test (held out), 10 classes, 3 files skipped (data.json)`.
    pub fn text(&self) -> String {
        let mut t = format!(
            "{}: {} train, {} test{}",
            self.format,
            self.train_samples,
            self.test_samples,
            if self.test_held_out {
                " (held out)"
            } else {
                ""
            }
        );
        if let Some(c) = self.classes {
            t.push_str(&format!(", {c} classes"));
        }
        if self.skipped > 0 {
            t.push_str(&format!(
                ", {} file{} skipped (data.json)",
                self.skipped,
                if self.skipped == 1 { "" } else { "s" }
            ));
        }
        t
    }
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub time: f64,
    #[serde(flatten)]
    pub event: SupervisorEvent,
}

/// What the supervisor did, as recorded in `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SupervisorEvent {
    Queued {
        waiting_for: String,
    },
    Started {
        attempt: u32,
        devices: String,
        resume: bool,
    },
    ReplicaExited {
        rank: usize,
        code: Option<i32>,
        signal: Option<i32>,
    },
    Restarting {
        attempt: u32,
        after_s: f64,
        reason: String,
    },
    Stopped,
    Completed,
    /// Paused at its `pause_at`: `epoch` epochs and `step` steps trained, checkpointed there.
    Paused {
        epoch: u64,
        step: u64,
    },
    Failed {
        reason: String,
    },
    /// An elastic run's group re-formed without (or with) some replicas; written by the
    /// trainer's rank 0 of the new group. Replicas are named by their first rank.
    Membership {
        step: u64,
        generation: u64,
        left: Vec<usize>,
        joined: Vec<usize>,
        world_before: usize,
        world_after: usize,
        seconds_lost: f64,
        /// Local steps (`[ddp.sync]`): the steps since the last sync that the replicas who left
        /// took and that went with them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        local_steps_dropped: Option<u64>,
    },
}

impl SupervisorEvent {
    /// A pause in words: `paused after epoch 3 (step 45)`, `paused after step 200`.
    pub fn pause_text(&self) -> Option<String> {
        let SupervisorEvent::Paused { epoch, step } = self else {
            return None;
        };
        Some(if *epoch > 0 {
            format!("paused after epoch {epoch} (step {step})")
        } else {
            format!("paused after step {step}")
        })
    }

    /// A membership change in words: `replica 1 left at step 38: 4 -> 3 replicas (1.4 s lost)`.
    pub fn membership_text(&self) -> Option<String> {
        let SupervisorEvent::Membership {
            step,
            left,
            joined,
            world_before,
            world_after,
            seconds_lost,
            local_steps_dropped,
            ..
        } = self
        else {
            return None;
        };
        let list = |v: &[usize]| {
            v.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut what = Vec::new();
        if !left.is_empty() {
            what.push(format!("replica {} left", list(left)));
        }
        if !joined.is_empty() {
            what.push(format!("replica {} joined", list(joined)));
        }
        let dropped = match local_steps_dropped {
            Some(n) if !left.is_empty() => {
                format!("; the {n} local steps since the last sync of those who left dropped")
            }
            _ => String::new(),
        };
        Some(format!(
            "{} at step {step}: {world_before} -> {world_after} replicas ({seconds_lost:.1} s lost){dropped}",
            what.join(", ")
        ))
    }
}

pub const RUN_JSON: &str = "run.json";
pub const EVENTS: &str = "events.jsonl";
pub const SPEC: &str = "spec.toml";
/// The source and build of a notebook cell's model (`%%ddp train`), when the run has one.
pub const CODE: &str = "code";
/// Free-form user notes (Markdown), editable any time with any editor.
pub const NOTES: &str = "notes.md";
/// User tags, one per line, editable any time.
pub const TAGS: &str = "tags";

/// A run folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub dir: PathBuf,
    pub record: RunRecord,
}

impl Run {
    /// Reads `dir/run.json`. A corrupt file is an error naming it (callers listing runs skip it).
    pub fn load(dir: &Path) -> Result<Run> {
        let path = dir.join(RUN_JSON);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let record = serde_json::from_str(&text).map_err(|e| Error::Corrupt {
            path: path.clone(),
            msg: format!("not a valid run record ({e})"),
        })?;
        Ok(Run {
            dir: dir.to_path_buf(),
            record,
        })
    }

    /// Reads the run and, if it claims to be live but its supervisor is gone (killed, machine
    /// rebooted), marks it failed on disk: whoever reads a stale run first repairs it.
    pub fn load_checked(dir: &Path) -> Result<Run> {
        Run::load(dir)?.repaired()
    }

    /// This run as it stands once an orphan is repaired: when this (possibly stale) copy claims
    /// to be live and its supervisor is gone, the record is read again, because a supervisor
    /// writes its last state (stopped, completed, failed) before it exits, and a reader that
    /// loaded the record just before must not overwrite that state with "failed". Only a record
    /// that still names the same dead supervisor is marked failed.
    pub fn repaired(self) -> Result<Run> {
        let dead = match &self.record.supervisor {
            Some(p) if !self.record.status.is_terminal() && !p.is_alive() => p.clone(),
            _ => return Ok(self),
        };
        let mut run = Run::load(&self.dir)?;
        if run.record.status.is_terminal() || run.record.supervisor.as_ref() != Some(&dead) {
            return Ok(run);
        }
        let reason = format!(
            "supervisor (pid {}) is gone: it was killed or the machine restarted",
            dead.pid
        );
        run.transition(
            SupervisorEvent::Failed {
                reason: reason.clone(),
            },
            |r| {
                r.status = RunStatus::Failed;
                r.error = Some(reason);
                r.ended.get_or_insert_with(now);
            },
        )?;
        Ok(run)
    }

    /// Writes `run.json` atomically (temp file, fsync, rename): on any failure the previous
    /// record stays intact.
    pub fn save(&self) -> Result<()> {
        let bytes =
            serde_json::to_vec_pretty(&self.record).expect("a run record always serialises");
        crate::files::fsutil::write_atomic(&self.dir.join(RUN_JSON), &bytes)?;
        Ok(())
    }

    /// Changes the record and saves it; on a failed save the in-memory record is rolled back too.
    pub fn update(&mut self, f: impl FnOnce(&mut RunRecord)) -> Result<()> {
        let before = self.record.clone();
        f(&mut self.record);
        if let Err(e) = self.save() {
            self.record = before;
            return Err(e);
        }
        Ok(())
    }

    /// Records a change of state: appends `event`, then changes and saves the record. The event
    /// goes first, so whoever sees the new record (a foreground `ddp run` that returns once the
    /// status is terminal, a watcher) also finds the event that explains it.
    pub fn transition(
        &mut self,
        event: SupervisorEvent,
        f: impl FnOnce(&mut RunRecord),
    ) -> Result<()> {
        self.event(event)?;
        self.update(f)
    }

    /// Appends one event to `events.jsonl` (one write of a whole line).
    pub fn event(&self, event: SupervisorEvent) -> Result<()> {
        let path = self.dir.join(EVENTS);
        let mut line =
            serde_json::to_vec(&EventRecord { time: now(), event }).expect("events serialise");
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        f.write_all(&line).map_err(|e| Error::io(&path, e))
    }

    pub fn events(&self) -> Result<Vec<EventRecord>> {
        let path = self.dir.join(EVENTS);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(Error::io(&path, e)),
        };
        // A line being written right now may be incomplete: only complete lines count.
        let complete = text.rsplit_once('\n').map(|(a, _)| a).unwrap_or("");
        complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| Error::Corrupt {
                    path: path.clone(),
                    msg: format!("line {}: {e}", i + 1),
                })
            })
            .collect()
    }

    pub fn spec_path(&self) -> PathBuf {
        self.dir.join(SPEC)
    }

    /// The user's notes (empty when there are none).
    pub fn notes(&self) -> String {
        std::fs::read_to_string(self.dir.join(NOTES)).unwrap_or_default()
    }

    /// The user's tags: non-empty lines of `tags`, trimmed, in file order, without duplicates.
    pub fn tags(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join(TAGS)).unwrap_or_default();
        let mut tags: Vec<String> = Vec::new();
        for t in text.lines().map(str::trim).filter(|t| !t.is_empty()) {
            if !tags.iter().any(|x| x == t) {
                tags.push(t.to_string());
            }
        }
        tags
    }

    /// Replaces the tags (atomically).
    pub fn set_tags(&self, tags: &[String]) -> Result<()> {
        let mut text = tags.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        crate::files::fsutil::write_atomic(&self.dir.join(TAGS), text.as_bytes())?;
        Ok(())
    }

    pub fn log_path(&self, rank: usize) -> PathBuf {
        ddp_trainer::launcher::log_path(&self.dir, rank)
    }

    pub fn supervisor_log(&self) -> PathBuf {
        self.dir.join("logs").join("supervisor.log")
    }

    pub fn metrics_path(&self, rank: usize) -> PathBuf {
        crate::metrics::metrics_path(&self.dir, rank)
    }

    /// Rank 0's metric records (train, val and test figures).
    pub fn metrics(&self) -> Result<Vec<crate::metrics::MetricRecord>> {
        let p = self.metrics_path(0);
        if !p.exists() {
            return Ok(vec![]);
        }
        crate::metrics::read_metrics(&p)
    }
}

/// Unix time in seconds.
pub fn now() -> f64 {
    crate::metrics::unix_time()
}

/// The workspace a run folder belongs to (`ROOT/experiments/EXP/runs/ID`).
pub fn workspace_root(run_dir: &Path) -> PathBuf {
    run_dir
        .ancestors()
        .nth(4)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| run_dir.to_path_buf())
}

/// The run shared between a supervisor's threads, locked (a panic elsewhere does not poison it
/// for the others).
pub fn locked(run: &std::sync::Arc<std::sync::Mutex<Run>>) -> std::sync::MutexGuard<'_, Run> {
    run.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_membership_change_in_words_names_the_local_steps_dropped() {
        let line = r#"{"time":1.0,"event":"membership","step":6,"generation":1,"left":[2],"joined":[],"world_before":4,"world_after":3,"seconds_lost":1.04,"local_steps_dropped":2}"#;
        let e: SupervisorEvent = serde_json::from_str(line).unwrap();
        assert_eq!(
            e.membership_text().unwrap(),
            "replica 2 left at step 6: 4 -> 3 replicas (1.0 s lost); the 2 local steps since the \
             last sync of those who left dropped"
        );
        let plain = line.replace(r#","local_steps_dropped":2"#, "");
        let e: SupervisorEvent = serde_json::from_str(&plain).unwrap();
        assert_eq!(
            e.membership_text().unwrap(),
            "replica 2 left at step 6: 4 -> 3 replicas (1.0 s lost)"
        );
    }

    #[test]
    fn workspace_of_a_run_folder() {
        assert_eq!(
            workspace_root(Path::new(
                "/ws/experiments/mnist/runs/20261121-101500-abc123"
            )),
            Path::new("/ws")
        );
    }

    /// Timestamps (f64 seconds) must survive run.json exactly: a record read back equals the one
    /// written (serde_json's `float_roundtrip`; without it this value comes back 2e-7 off).
    #[test]
    fn timestamps_round_trip_exactly() {
        let t = 1_795_270_959.849_771_7_f64;
        let back: f64 = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.to_bits(), t.to_bits());
    }

    #[test]
    fn save_load_round_trip_and_events() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunRecord::sample().in_dir(dir.path());
        run.save().unwrap();
        assert_eq!(Run::load(dir.path()).unwrap().record, run.record);
        run.event(SupervisorEvent::ReplicaExited {
            rank: 1,
            code: None,
            signal: Some(9),
        })
        .unwrap();
        run.event(SupervisorEvent::Completed).unwrap();
        let ev = run.events().unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(
            ev[0].event,
            SupervisorEvent::ReplicaExited {
                rank: 1,
                code: None,
                signal: Some(9)
            }
        );
        let line = std::fs::read_to_string(dir.path().join(EVENTS)).unwrap();
        assert!(
            line.starts_with("{\"time\":") && line.contains("\"event\":\"replica_exited\""),
            "{line}"
        );
    }

    #[test]
    fn tags_are_lines_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunRecord::sample().in_dir(dir.path());
        assert!(run.tags().is_empty() && run.notes().is_empty());
        std::fs::write(dir.path().join(TAGS), " baseline \n\nlr-sweep\nbaseline\n").unwrap();
        assert_eq!(run.tags(), vec!["baseline", "lr-sweep"]);
        run.set_tags(&["a".into(), "b".into()]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(TAGS)).unwrap(),
            "a\nb\n"
        );
    }

    #[test]
    fn corrupt_run_json_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RUN_JSON), "{not json").unwrap();
        let e = Run::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("run.json: not a valid run record"), "{e}");
    }

    #[test]
    fn a_status_is_never_ahead_of_its_event() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = RunRecord::sample().in_dir(dir.path());
        run.save().unwrap();
        // An events file that cannot be appended to: the status must not move either.
        std::fs::create_dir(dir.path().join(EVENTS)).unwrap();
        let e = run
            .transition(SupervisorEvent::Completed, |r| {
                r.status = RunStatus::Completed
            })
            .unwrap_err();
        assert!(e.to_string().contains(EVENTS), "{e}");
        assert_eq!(run.record.status, RunStatus::Running);
        assert_eq!(
            Run::load(dir.path()).unwrap().record.status,
            RunStatus::Running
        );
        std::fs::remove_dir(dir.path().join(EVENTS)).unwrap();
        run.transition(SupervisorEvent::Completed, |r| {
            r.status = RunStatus::Completed
        })
        .unwrap();
        assert_eq!(run.events().unwrap()[0].event, SupervisorEvent::Completed);
        assert_eq!(
            Run::load(dir.path()).unwrap().record.status,
            RunStatus::Completed
        );
    }

    #[test]
    fn failed_save_keeps_the_old_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = RunRecord::sample().in_dir(dir.path().join("missing-folder"));
        assert!(run.update(|r| r.status = RunStatus::Completed).is_err());
        assert_eq!(run.record.status, RunStatus::Running);
    }

    #[test]
    fn a_stale_copy_does_not_overwrite_the_state_its_supervisor_wrote_last() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = ProcessId {
            pid: u32::MAX - 1,
            start_ticks: 1,
        };
        // A reader loaded the run while it was running ...
        let stale = RunRecord::sample()
            .supervisor(Some(supervisor))
            .in_dir(dir.path());
        stale.save().unwrap();
        // ... then the supervisor recorded "stopped" and exited.
        let mut on_disk = Run::load(dir.path()).unwrap();
        on_disk
            .transition(SupervisorEvent::Stopped, |r| r.status = RunStatus::Stopped)
            .unwrap();
        let run = stale.repaired().unwrap();
        assert_eq!(run.record.status, RunStatus::Stopped);
        assert_eq!(
            Run::load(dir.path()).unwrap().record.status,
            RunStatus::Stopped
        );
        assert_eq!(run.events().unwrap().len(), 1);
    }

    #[test]
    fn stale_live_run_is_marked_failed_by_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        // A pid that cannot exist.
        let supervisor = ProcessId {
            pid: u32::MAX - 1,
            start_ticks: 1,
        };
        RunRecord::sample()
            .supervisor(Some(supervisor))
            .in_dir(dir.path())
            .save()
            .unwrap();
        let run = Run::load_checked(dir.path()).unwrap();
        assert_eq!(run.record.status, RunStatus::Failed);
        assert!(
            run.record
                .error
                .as_deref()
                .unwrap()
                .contains("supervisor (pid")
        );
        assert_eq!(
            Run::load(dir.path()).unwrap().record.status,
            RunStatus::Failed
        );
        assert!(matches!(
            run.events().unwrap()[0].event,
            SupervisorEvent::Failed { .. }
        ));
    }

    #[test]
    fn current_process_is_alive() {
        assert!(ProcessId::current().is_alive());
        assert!(ProcessId::current().start_ticks > 0);
    }
}
