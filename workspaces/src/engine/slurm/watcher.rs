//! The workspace's Slurm watcher: one process per workspace (`EXE __slurm-watch ROOT`, started
//! by whoever submits, stops or resumes a run on Slurm, and by readers that find a live Slurm
//! run unwatched), detached from the front end, that keeps the `run.json` of every live Slurm
//! run in step with its job. Each poll is ONE `squeue --json --me --states=all` for all of them; a job Slurm
//! no longer lists is asked of `sacct` (once found disabled, never again), then `scontrol show
//! job`, then judged by its run folder. It polls every second for 15 s after it starts or a
//! front end wakes it (`locks/slurm-watch.wake`: a job was submitted, stopped or resubmitted),
//! and on any change; otherwise the interval doubles up to 30 s (`DDP_SLURM_POLL_MAX_S`). It exits when no Slurm run has been live for two
//! minutes; a reader that finds a live Slurm run unwatched starts it again ([`adopt`]). Only one runs per workspace: it holds an exclusive lock (`locks/slurm-watch.lock`)
//! for its life, which the kernel drops when it dies.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::client::{self, SacctAnswer};
use super::policy::{FolderFacts, Verdict, failed_rank, judge, judge_forgotten, while_requeued};
use super::squeue::JobInfo;
use crate::Result;
use crate::files::lockfile::{self, LockFile};
use crate::runs::run::{DataSummary, Run, RunStatus, SupervisorEvent, now};
use crate::runs::workspace::Workspace;

const LOCK: &str = "slurm-watch.lock";
const WAKE: &str = "slurm-watch.wake";
const LOG: &str = "slurm-watch.log";
/// How long after the last live Slurm run ended the watcher keeps watching (a job may still
/// requeue itself).
const LINGER: Duration = Duration::from_secs(120);
const MIN_POLL: Duration = Duration::from_secs(1);
/// How long after it starts or is woken the watcher polls at [`MIN_POLL`] before it backs off:
/// a job just submitted usually starts within seconds.
const EAGER: Duration = Duration::from_secs(15);
const DEFAULT_MAX_POLL: Duration = Duration::from_secs(30);

fn max_poll() -> Duration {
    std::env::var("DDP_SLURM_POLL_MAX_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s >= 0.1)
        .map_or(DEFAULT_MAX_POLL, Duration::from_secs_f64)
}

/// `Some` when this process now holds the watcher's lock.
fn try_lock(root: &Path) -> Result<Option<LockFile>> {
    let dir = Workspace::open(root)?.locks_dir();
    lockfile::try_lock(&dir.join(LOCK), None)
}

/// Starts the workspace's watcher unless one runs, and wakes it either way (so that it polls
/// now rather than after its back-off): after submitting, stopping or resubmitting a job.
pub fn ensure_watcher(root: &Path) -> Result<()> {
    wake(root);
    ensure_running(root)
}

/// Starts the watcher when `runs` hold a live Slurm run and no watcher runs (its machine
/// restarted, it was killed): readers of the run list call it, as they repair stale local runs.
pub fn adopt<'a>(root: &Path, runs: impl IntoIterator<Item = &'a Run>) -> Result<()> {
    if runs
        .into_iter()
        .any(|r| r.record.slurm.is_some() && !r.record.status.is_terminal())
    {
        ensure_running(root)?;
    }
    Ok(())
}

/// Starts the workspace's watcher unless one runs.
fn ensure_running(root: &Path) -> Result<()> {
    if try_lock(root)?.is_none() {
        return Ok(());
    }
    // Not running (the lock was free; it is released as the file drops here).
    let log = Workspace::open(root)?.locks_dir().join(LOG);
    let cmd = crate::invocation::HiddenCommand::SlurmWatch {
        root: root.to_path_buf(),
    };
    let child = crate::engine::detach::spawn_detached(cmd.to_args(), &log)?;
    // Reap it when it exits, from a thread, so that it never lingers as a zombie of a
    // long-lived front end (a TUI, a kernel).
    std::thread::spawn(move || {
        let mut child = child;
        child.wait()
    });
    Ok(())
}

/// Asks a running watcher to poll now.
pub fn wake(root: &Path) {
    if let Ok(ws) = Workspace::open(root) {
        let dir = ws.locks_dir();
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(WAKE), now().to_string());
    }
}

fn wake_mark(root: &Path) -> Option<SystemTime> {
    let ws = Workspace::open(root).ok()?;
    std::fs::metadata(ws.locks_dir().join(WAKE))
        .and_then(|m| m.modified())
        .ok()
}

/// `EXE __slurm-watch ROOT`: runs the watcher until no Slurm run is live (exit 0), or returns
/// at once when another watcher holds the lock.
pub fn watch(root: &Path) -> Result<()> {
    let Some(_lock) = try_lock(root)? else {
        return Ok(());
    };
    let ws = Workspace::open(root)?;
    let max = max_poll();
    let mut interval = MIN_POLL;
    let mut accounting = true;
    let mut last_live = Instant::now();
    let mut woken = wake_mark(root);
    let mut eager_until = Instant::now() + EAGER;
    loop {
        if Workspace::open(root).is_err() {
            println!(
                "the workspace {} is gone: the watcher exits",
                root.display()
            );
            return Ok(());
        }
        let (runs, _) = ws.runs()?;
        let slurm: Vec<Run> = runs
            .into_iter()
            .filter(|r| r.record.slurm.is_some())
            .collect();
        let live: Vec<&Run> = slurm
            .iter()
            .filter(|r| !r.record.status.is_terminal())
            .collect();
        let recent: Vec<&Run> = slurm
            .iter()
            .filter(|r| {
                r.record.status.is_terminal()
                    && r.record
                        .ended
                        .is_some_and(|e| now() - e < LINGER.as_secs_f64())
            })
            .collect();
        if !live.is_empty() {
            last_live = Instant::now();
        } else if recent.is_empty() && last_live.elapsed() > LINGER {
            println!("no live Slurm run in {}: the watcher exits", root.display());
            return Ok(());
        }
        let mut changed = false;
        if !live.is_empty() || !recent.is_empty() {
            match client::squeue() {
                Ok(jobs) => {
                    let by_id: HashMap<&str, &JobInfo> =
                        jobs.iter().map(|j| (j.id.as_str(), j)).collect();
                    for run in live.iter().chain(recent.iter()) {
                        match poll_run(run, &by_id, &mut accounting) {
                            Ok(c) => changed |= c,
                            Err(e) => eprintln!("run {}: {e}", run.record.id),
                        }
                    }
                }
                Err(e) => eprintln!("{e}"),
            }
        }
        interval = if changed || Instant::now() < eager_until {
            MIN_POLL
        } else {
            (interval * 2).min(max)
        };
        // Sleep, waking early when a front end asks.
        let until = Instant::now() + interval;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(200));
            let mark = wake_mark(root);
            if mark != woken {
                woken = mark;
                interval = MIN_POLL;
                eager_until = Instant::now() + EAGER;
                break;
            }
        }
    }
}

/// Brings one run up to date with its job; true when its record changed.
fn poll_run(run: &Run, listed: &HashMap<&str, &JobInfo>, accounting: &mut bool) -> Result<bool> {
    let Some(job) = run.record.slurm.as_ref() else {
        return Ok(false);
    };
    let id = job.job_id.clone();
    let facts = folder_facts(&run.dir, &id);
    let seen: Option<JobInfo> = match listed.get(id.as_str()) {
        Some(j) => Some((*j).clone()),
        None if run.record.status.is_terminal() => return Ok(false),
        None => forgotten_job(&id, accounting)?,
    };
    let verdict = match &seen {
        Some(j) => judge(j, &facts),
        None => judge_forgotten(&facts),
    };
    // Read again just before writing: `ddp resume` may have submitted a new job meanwhile.
    let mut fresh = Run::load(&run.dir)?;
    if fresh.record.slurm.as_ref().map(|j| j.job_id.as_str()) != Some(id.as_str()) {
        return Ok(false);
    }
    apply(&mut fresh, seen.as_ref(), &verdict)
}

/// What Slurm still says of a job `squeue` no longer lists: accounting first (unless it is
/// off), then the controller's memory.
fn forgotten_job(id: &str, accounting: &mut bool) -> Result<Option<JobInfo>> {
    if *accounting {
        match client::sacct(id)? {
            SacctAnswer::Job(j) => return Ok(Some(j)),
            SacctAnswer::Unknown => {}
            SacctAnswer::Disabled => *accounting = false,
        }
    }
    client::scontrol_show_job(id)
}

/// What the run folder says beside Slurm.
fn folder_facts(dir: &Path, job_id: &str) -> FolderFacts {
    let exit = std::fs::read_to_string(dir.join("slurm").join("exit"))
        .ok()
        .and_then(|t| {
            let mut w = t.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        });
    let log = std::fs::read_to_string(dir.join("logs").join(format!("slurm-{job_id}.out")))
        .unwrap_or_default();
    FolderFacts {
        stop_requested: dir.join("slurm").join("stop").exists(),
        failed_rank: failed_rank(&log),
        exit,
        finished: dir.join("model.safetensors").exists(),
    }
}

/// Writes what changed (the job's state, the run's status, with the event that explains it).
fn apply(run: &mut Run, seen: Option<&JobInfo>, verdict: &Verdict) -> Result<bool> {
    let before = run.record.clone();
    let mut job = before.slurm.clone().expect("a Slurm run");
    if let Some(j) = seen {
        job.state = j.state.clone();
        job.reason = j.reason.clone().filter(|r| r != "None");
        if j.nodes.is_some() {
            job.node_list = j.nodes.clone();
        }
        job.requeues = job.requeues.max(j.restarts);
    } else {
        job.state = "GONE".into();
    }
    let requeued = job.requeues > before.slurm.as_ref().map_or(0, |j| j.requeues);
    let status = while_requeued(verdict.status, &job.state, requeued, before.status);
    // A job that ran and ended between two polls: record that it started first, so that the
    // run's events always tell queued → running → its end.
    if status.is_terminal()
        && matches!(before.status, RunStatus::Queued | RunStatus::Restarting)
        && job.node_list.is_some()
    {
        let running = Verdict {
            status: RunStatus::Running,
            detail: None,
        };
        apply(run, seen, &running)?;
        return apply(run, seen, verdict).map(|_| true);
    }
    if status == before.status && Some(&job) == before.slurm.as_ref() && !requeued {
        return Ok(false);
    }
    let where_ = format!(
        "Slurm job {}{}",
        job.job_id,
        job.node_list
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default()
    );
    let restarting = SupervisorEvent::Restarting {
        attempt: job.requeues,
        after_s: 0.0,
        reason: format!("Slurm requeued job {}", job.job_id),
    };
    if requeued && status == RunStatus::Running {
        // requeued and running again between two polls: both are told
        run.event(restarting.clone())?;
    }
    let event = match status {
        RunStatus::Queued | RunStatus::Restarting if requeued => Some(restarting),
        RunStatus::Queued | RunStatus::Restarting
            if status != before.status
                || job.reason != before.slurm.as_ref().and_then(|j| j.reason.clone()) =>
        {
            Some(SupervisorEvent::Queued {
                waiting_for: format!(
                    "Slurm job {} ({})",
                    job.job_id,
                    verdict.detail.as_deref().unwrap_or("pending")
                ),
            })
        }
        RunStatus::Running if status != before.status || requeued => {
            Some(SupervisorEvent::Started {
                attempt: job.requeues + 1,
                devices: where_.clone(),
                resume: job.requeues > 0,
            })
        }
        RunStatus::Completed if status != before.status => Some(SupervisorEvent::Completed),
        RunStatus::Stopped if status != before.status => Some(SupervisorEvent::Stopped),
        RunStatus::Failed if status != before.status => Some(SupervisorEvent::Failed {
            reason: verdict.detail.clone().unwrap_or_default(),
        }),
        _ => None,
    };
    let dir = run.dir.clone();
    let write = |r: &mut crate::runs::run::RunRecord| {
        r.status = status;
        r.restarts = job.requeues;
        r.slurm = Some(job.clone());
        // Slurm's own times where it gives them, else when this poll saw the change
        let slurm_time = |t: Option<i64>| t.map_or_else(now, |t| t as f64);
        if status == RunStatus::Running {
            r.started
                .get_or_insert_with(|| slurm_time(seen.and_then(|j| j.start_time)));
            r.devices = format!("{} (Slurm)", job.node_list.as_deref().unwrap_or("?"));
        }
        if status.is_terminal() {
            let ended = slurm_time(seen.and_then(|j| j.end_time));
            r.ended
                .get_or_insert(r.started.map_or(ended, |s| ended.max(s)));
            r.error = match status {
                RunStatus::Failed | RunStatus::Stopped => verdict.detail.clone(),
                _ => None,
            };
            r.data = DataSummary::read(&dir);
        } else {
            r.ended = None;
            r.error = None;
        }
    };
    match event {
        Some(e) => run.transition(e, write)?,
        None => run.update(write)?,
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::slurm::SlurmJob;
    use crate::runs::run::RunRecord;

    fn seen(state: &str, restarts: u32) -> JobInfo {
        JobInfo {
            id: "42".into(),
            state: state.into(),
            nodes: Some("n[1-2]".into()),
            restarts,
            start_time: Some(1_000 + 100 * i64::from(restarts)),
            end_time: Some(2_000),
            ..JobInfo::default()
        }
    }

    /// A run on Slurm job 42, saved in `dir`: `status`, the job last seen in `state`.
    fn run_in(dir: &Path, status: RunStatus, state: &str, node_list: Option<&str>) -> Run {
        let mut record = RunRecord::sample();
        record.status = status;
        record.slurm = Some(SlurmJob {
            state: state.into(),
            node_list: node_list.map(String::from),
            ..SlurmJob::sample()
        });
        let run = record.in_dir(dir);
        run.save().unwrap();
        run
    }

    /// The run's event names, in order.
    fn event_names(run: &Run) -> Vec<String> {
        run.events()
            .unwrap()
            .iter()
            .map(|e| {
                serde_json::to_value(&e.event).unwrap()["event"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    /// Applies what Slurm says next; the run's status.
    fn step(run: &mut Run, info: &JobInfo) -> RunStatus {
        apply(run, Some(info), &judge(info, &FolderFacts::default())).unwrap();
        run.record.status
    }

    #[test]
    fn a_run_follows_its_job_with_slurms_times_and_requeues() {
        let tmp = tempfile::tempdir().unwrap();
        let mut run = run_in(tmp.path(), RunStatus::Queued, "SUBMITTED", None);

        assert_eq!(step(&mut run, &seen("RUNNING", 0)), RunStatus::Running);
        assert_eq!(run.record.started, Some(1_000.0));
        assert_eq!(run.record.devices, "n[1-2] (Slurm)");
        // Requeued after a node failure: COMPLETING with the count up, then pending again.
        assert_eq!(
            step(&mut run, &seen("COMPLETING", 1)),
            RunStatus::Restarting
        );
        assert_eq!(
            step(&mut run, &seen("COMPLETING", 1)),
            RunStatus::Restarting
        );
        assert_eq!(step(&mut run, &seen("PENDING", 1)), RunStatus::Queued);
        assert_eq!(step(&mut run, &seen("RUNNING", 1)), RunStatus::Running);
        assert_eq!(step(&mut run, &seen("COMPLETED", 1)), RunStatus::Completed);
        // the first start stays; the end is Slurm's
        assert_eq!(
            (run.record.started, run.record.ended),
            (Some(1_000.0), Some(2_000.0))
        );
        assert_eq!(run.record.restarts, 1);
        assert_eq!(
            event_names(&run),
            ["started", "restarting", "queued", "started", "completed"]
        );
    }

    #[test]
    fn a_job_requeued_and_running_again_between_polls_tells_both() {
        let tmp = tempfile::tempdir().unwrap();
        let mut run = run_in(tmp.path(), RunStatus::Running, "RUNNING", Some("n[1-2]"));
        assert_eq!(step(&mut run, &seen("RUNNING", 1)), RunStatus::Running);
        assert_eq!(event_names(&run), ["restarting", "started"]);
    }
}
