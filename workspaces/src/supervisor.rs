//! The supervisor: one process per run (`EXE __supervise RUN_DIR`, where `EXE` is the binary of
//! the front end that started the run: `ddp`, a TUI, ...), detached from whoever started it. It
//! launches the replicas (replicas of that same executable, `EXE __replica`, with the trainer's
//! environment contract; every such front end calls [`crate::run_hidden_command`] first in
//! `main`), records every change in `run.json` and `events.jsonl`,
//! and applies the restart policy ([`crate::policy`]) when a replica dies. Before anything else,
//! a run of a sweep with a parallelism limit waits for one of the sweep's slots
//! ([`crate::sweep`]); then it waits for its devices ([`crate::devices`]).
//!
//! SIGTERM (`ddp stop`) makes it stop the replicas (they finish their step and exit), then mark
//! the run stopped. The replicas die with it if it is killed (parent-death signal), and a reader
//! that finds its pid gone marks the run failed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ddp_trainer::cli::ReplicaArgs;
use ddp_trainer::launcher::{
    Ended, LaunchOptions, ReplicaFailure, SpawnHook, StopRequest, launch_ended,
};
use ddp_trainer::spec::Spec;

use crate::devices;
use crate::invocation::HiddenCommand;
use crate::policy::{Attempt, Decision, Exit, decide};
use crate::run::{ProcessId, Run, RunStatus, SupervisorEvent, now, workspace_root};
use crate::{Error, Result};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Supervises the run in `run_dir` until it completes, fails or is stopped. `resume` makes the
/// first attempt continue from the newest checkpoint (`ddp resume`).
pub fn supervise(run_dir: &Path, resume: bool) -> Result<RunStatus> {
    let handler = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
    let run = Arc::new(Mutex::new(Run::load(run_dir)?));
    let spec = Spec::load(&lock(&run).spec_path(), &[])?;
    // The replicas run the run's own trainer (`--trainer`), else this executable's built-in one.
    let trainer = lock(&run).record.trainer.clone();
    let program = match &trainer {
        Some(t) => t.clone(),
        None => std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", e))?,
    };
    lock(&run).update(|r| r.supervisor = Some(ProcessId::current()))?;
    // A run of a sweep with `--max-parallel` first takes one of the sweep's slots, held until
    // this function returns (see `crate::sweep`); it stays queued meanwhile.
    let _slot = match take_sweep_slot(&run)? {
        Some(slot) => slot,
        None => return finish(&run, Decision::Stop),
    };
    // Where the replicas run; a run whose GPUs are held by another run stays queued here. The
    // assignment (and its GPU lease) is kept across restarts.
    let assignment = match assign_devices(&run, &spec)? {
        Some(a) => a,
        None => return finish(&run, Decision::Stop),
    };
    let threads = assignment.threads_per_replica();
    let devices = assignment.describe();
    lock(&run).update(|r| r.devices = devices.clone())?;
    let replica_env = assignment.replica_env();

    let backoff = spec.restart.backoff();
    let mut resume_next = resume;
    loop {
        if STOP.load(Ordering::SeqCst) {
            return finish(&run, Decision::Stop);
        }
        let attempt = lock(&run).record.restarts;
        {
            let mut r = lock(&run);
            r.transition(
                SupervisorEvent::Started {
                    attempt,
                    devices: devices.clone(),
                    resume: resume_next,
                },
                |r| {
                    r.status = RunStatus::Running;
                    r.started.get_or_insert_with(now);
                    r.replica_pids.clear();
                    r.exit_codes.clear();
                    r.error = None;
                },
            )?;
        }
        let outcome = launch_attempt(&run, &program, &spec, threads, &replica_env, resume_next);
        if let Attempt::ReplicaFailed { rank, exit, .. } = &outcome {
            let (code, signal) = match exit {
                Exit::Code(c) => (Some(*c), None),
                Exit::Signal(s) => (None, Some(*s)),
            };
            let mut r = lock(&run);
            r.transition(
                SupervisorEvent::ReplicaExited {
                    rank: *rank,
                    code,
                    signal,
                },
                |r| {
                    r.exit_codes
                        .insert(*rank, code.unwrap_or_else(|| 128 + signal.unwrap_or(0)));
                },
            )?;
        }
        let used = lock(&run).record.restarts;
        match decide(&outcome, used, spec.restart.max_restarts, backoff) {
            Decision::Restart {
                attempt,
                after,
                reason,
            } => {
                {
                    let mut r = lock(&run);
                    r.transition(
                        SupervisorEvent::Restarting {
                            attempt,
                            after_s: after.as_secs_f64(),
                            reason,
                        },
                        |r| {
                            r.status = RunStatus::Restarting;
                            r.restarts = attempt;
                        },
                    )?;
                }
                sleep_unless_stopped(after);
                resume_next = true;
            }
            d => return finish(&run, d),
        }
    }
}

/// One launch of all replicas; never fails itself, it reports how the attempt ended.
fn launch_attempt(
    run: &Arc<Mutex<Run>>,
    program: &Path,
    spec: &Spec,
    threads: usize,
    replica_env: &[(String, String)],
    resume: bool,
) -> Attempt {
    let dir = lock(run).dir.clone();
    let mut replica = ReplicaArgs::new(lock(run).spec_path(), &dir).resuming(resume);
    let pause_at = lock(run).record.pause_at.clone();
    if let Some(p) = pause_at {
        match p.parse() {
            Ok(p) => replica.pause_at = Some(p),
            Err(e) => return Attempt::LaunchFailed(format!("run.json: pause_at {e}")),
        }
    }
    // The run's own trainer is a `ddp-trainer`; this executable runs it as a hidden command.
    let args = match lock(run).record.trainer {
        Some(_) => replica.to_args(),
        None => HiddenCommand::Replica(replica).to_args(),
    };
    if lock(run).record.spark.is_some() {
        // A pause of an earlier launch is over.
        let _ = std::fs::remove_file(dir.join(ddp_trainer::train::PAUSED_FILE));
        let mut command = vec![program.display().to_string()];
        command.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
        return match on_spark(run, spec, command, threads, replica_env, resume) {
            Attempt::Completed => match ddp_trainer::train::paused_at(&dir) {
                Some((epoch, step)) => Attempt::Paused { epoch, step },
                None => Attempt::Completed,
            },
            other => other,
        };
    }
    let mut opts = LaunchOptions::for_spec(spec, spec.ddp.replicas, program, &dir);
    opts.args = args;
    // The device plan's threads (`ddp.threads`, else the cores the run was given).
    opts.threads_per_replica = Some(threads);
    opts.echo = false;
    opts.env.extend(replica_env.iter().cloned());
    opts.env.push((
        "TORCHELASTIC_RESTART_COUNT".into(),
        lock(run).record.restarts.to_string(),
    ));
    // Where this attempt's lines start in each rank's log (logs are appended across restarts).
    let log_starts: Vec<u64> = (0..spec.ddp.replicas)
        .map(|rank| {
            let log = ddp_trainer::launcher::log_path(&dir, rank);
            std::fs::metadata(log).map_or(0, |m| m.len())
        })
        .collect();
    let hook_run = run.clone();
    opts.on_spawn = Some(SpawnHook(Arc::new(move |rank, pid| {
        let mut r = lock(&hook_run);
        // Best effort: a failure to record a pid must not kill the launch.
        let _ = r.update(|r| {
            r.replica_pids.insert(rank, pid);
        });
    })));
    let failed = |failure: &ReplicaFailure| {
        let exit = match (failure.exit.code(), failure.exit.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Code(-1),
        };
        // A replica that stopped on our request is a stop, not a failure.
        if STOP.load(Ordering::SeqCst) && exit == Exit::Code(143) {
            return Attempt::Stopped;
        }
        // A replica that exited (not killed) said why on its last error line.
        let error = match exit {
            Exit::Code(_) => replica_error(
                &failure.log,
                log_starts.get(failure.rank).copied().unwrap_or(0),
            ),
            Exit::Signal(_) => None,
        };
        Attempt::ReplicaFailed {
            rank: failure.rank,
            exit,
            error,
        }
    };
    match launch_ended(&opts) {
        Ok(Ended::Completed) => Attempt::Completed,
        Ok(Ended::Paused { epoch, step }) => Attempt::Paused { epoch, step },
        // `ddp stop` (SIGTERM to this process, passed on to the replicas).
        Ok(Ended::Stopped(StopRequest::Signal { .. }) | Ended::Interrupted { .. }) => {
            STOP.store(true, Ordering::SeqCst);
            Attempt::Stopped
        }
        // Replicas that stopped on a request of their own, not ours, go on from their
        // checkpoint (restartable, exit 143).
        Ok(Ended::Stopped(StopRequest::Replica(failure)) | Ended::Failed(failure)) => {
            failed(&failure)
        }
        Err(e) => Attempt::LaunchFailed(e.to_string()),
    }
}

/// One launch of a run on Spark: `spark-submit` of the run's driver, its application recorded
/// in `run.json` as the driver reports it ([`crate::spark`]).
fn on_spark(
    run: &Arc<Mutex<Run>>,
    spec: &Spec,
    command: Vec<String>,
    threads: usize,
    replica_env: &[(String, String)],
    resume: bool,
) -> Attempt {
    let (dir, id) = {
        let r = lock(run);
        (r.dir.clone(), r.record.id.clone())
    };
    // The driver and the executors are given whole paths (they start elsewhere).
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let mut env: std::collections::BTreeMap<String, String> = replica_env.iter().cloned().collect();
    for key in ["RAYON_NUM_THREADS", "DDP_THREADS"] {
        env.insert(key.to_string(), threads.to_string());
    }
    let folder = dir.join(crate::spark::SPARK_DIR);
    let job = crate::spark::Job {
        name: format!("ddp-{id}"),
        tasks: spec.spark.task_count(spec.ddp.replicas),
        replicas_per_task: spec.spark.replicas_per_task(),
        command,
        resume,
        env,
        out: dir.clone(),
        logs: dir.join("logs"),
        // The replicas start where a local launch's would (relative data paths).
        cwd: std::env::current_dir().unwrap_or_else(|_| dir.clone()),
        state: folder.join("state.json"),
        failure: folder.join("failure.json"),
        stop: folder.join("stop"),
        wait_s: spec.spark.wait_secs(),
        // Spark's attempts of the stage are the restarts left (and the first attempt).
        stage_attempts: spec
            .restart
            .max_restarts
            .saturating_sub(lock(run).record.restarts)
            .saturating_add(1),
    };
    // Queued until the application's stage runs (the driver says so).
    {
        let mut r = lock(run);
        let master = crate::spark::master_of(spec);
        let _ = r.transition(
            SupervisorEvent::Queued {
                waiting_for: format!("Spark application: submitted to {master}"),
            },
            |r| {
                r.status = RunStatus::Queued;
                if let Some(app) = r.spark.as_mut() {
                    *app = crate::spark::SparkApp {
                        master: master.clone(),
                        tasks: app.tasks,
                        ..Default::default()
                    };
                }
            },
        );
    }
    // Where this launch's lines start in each rank's log, for the failing one's error.
    let starts: Vec<u64> = (0..spec.ddp.replicas)
        .map(|rank| {
            let log = ddp_trainer::launcher::log_path(&dir, rank);
            std::fs::metadata(log).map_or(0, |m| m.len())
        })
        .collect();
    let hook_run = run.clone();
    let mut on_state = move |state: &crate::spark::AppState| {
        // Best effort: the run goes on if its record cannot say so.
        let _ = spark_state(&mut lock(&hook_run), state);
    };
    let ended = crate::spark::submit_once(
        &dir,
        spec,
        &job,
        &|| STOP.load(Ordering::SeqCst),
        &mut on_state,
    );
    if ended.refused {
        let _ = lock(run).update(|r| {
            if let Some(app) = r.spark.as_mut() {
                app.refused = true;
                app.waiting = None;
            }
        });
    }
    match ended.outcome {
        Attempt::ReplicaFailed { rank, exit, .. } => Attempt::ReplicaFailed {
            rank,
            exit,
            error: replica_error(
                &ddp_trainer::launcher::log_path(&dir, rank),
                starts.get(rank).copied().unwrap_or(0),
            ),
        },
        other => other,
    }
}

/// The run's record follows its Spark application: queued while it waits for executors (an
/// event per reason), running once its stage runs, restarting when Spark runs the stage again.
fn spark_state(run: &mut Run, state: &crate::spark::AppState) -> Result<()> {
    let before = run.record.spark.clone().unwrap_or_default();
    let waiting = state.is_waiting().then(|| state.waiting.clone()).flatten();
    let status = run.record.status;
    run.update(|r| {
        if let Some(app) = r.spark.as_mut() {
            app.app_id = state.app_id.clone();
            app.ui = state.ui.clone();
            app.waiting = waiting.clone();
            app.stage_retries = app.stage_retries.max(state.attempt);
        }
    })?;
    if let Some(why) = &waiting
        && before.waiting.as_ref() != Some(why)
    {
        run.transition(
            SupervisorEvent::Queued {
                waiting_for: format!("Spark application: {why}"),
            },
            |r| r.status = RunStatus::Queued,
        )?;
    } else if state.attempt > before.stage_retries {
        let attempt = run.record.restarts + (state.attempt - before.stage_retries);
        run.transition(
            SupervisorEvent::Restarting {
                attempt,
                after_s: 0.0,
                reason: format!(
                    "Spark ran the barrier stage again (attempt {})",
                    state.attempt + 1
                ),
            },
            |r| {
                r.restarts = attempt;
                r.status = RunStatus::Running;
            },
        )?;
    } else if waiting.is_none() && status == RunStatus::Queued {
        run.update(|r| r.status = RunStatus::Running)?;
    }
    Ok(())
}

/// The last error line ([`crate::policy::last_error_line`]) a replica wrote to its log `log`
/// after byte `from` (this attempt's part), read from the log's last 64 KiB at most.
fn replica_error(log: &Path, from: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 << 10;
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    let start = from.max(len.saturating_sub(TAIL)).min(len);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(len - start).read_to_end(&mut bytes).ok()?;
    crate::policy::last_error_line(&String::from_utf8_lossy(&bytes)).map(str::to_string)
}

/// Waits (status queued, one event per change) for a slot of the run's sweep when the sweep
/// limits its parallelism. `None` when a stop was requested while waiting.
fn take_sweep_slot(run: &Arc<Mutex<Run>>) -> Result<Option<crate::sweep::SlotWait>> {
    let (dir, record) = {
        let r = lock(run);
        (r.dir.clone(), r.record.clone())
    };
    let waited = crate::sweep::wait_for_slot(
        &workspace_root(&dir),
        &record,
        Duration::from_millis(250),
        |why| {
            let _ = lock(run).event(SupervisorEvent::Queued {
                waiting_for: why.to_string(),
            });
        },
        || STOP.load(Ordering::SeqCst),
    );
    match waited {
        Ok(crate::sweep::SlotWait::Cancelled) => Ok(None),
        Ok(w) => Ok(Some(w)),
        Err(e) => {
            finish(
                run,
                Decision::Fail {
                    reason: e.to_string(),
                },
            )?;
            Err(e)
        }
    }
}

/// Plans devices and waits (status queued, one event per change) until they are free. `None`
/// when a stop was requested while waiting.
fn assign_devices(run: &Arc<Mutex<Run>>, spec: &Spec) -> Result<Option<devices::Assignment>> {
    let (dir, id) = {
        let r = lock(run);
        (r.dir.clone(), r.record.id.clone())
    };
    let ws_root = workspace_root(&dir);
    let discovery = devices::discover()?;
    if let Some(note) = &discovery.note {
        println!("{note}");
    }
    let request = devices::DeviceRequest::from_spec(&spec.ddp);
    let waited = devices::wait_for(
        &ws_root,
        &id,
        &request,
        &discovery,
        devices::available_cores(),
        &devices::WaitOptions::default(),
        |w| {
            let _ = lock(run).event(SupervisorEvent::Queued {
                waiting_for: w.to_string(),
            });
        },
        || STOP.load(Ordering::SeqCst),
    )
    .map_err(|e| Error::Invalid(format!("{}: {e}", lock(run).spec_path().display())));
    match waited {
        Ok(devices::Waited::Assigned(a)) => {
            if let devices::Assignment::Cpu {
                note: Some(note), ..
            } = &a
            {
                println!("{note}");
            }
            Ok(Some(a))
        }
        Ok(devices::Waited::Cancelled) => Ok(None),
        Ok(devices::Waited::TimedOut(w)) => Err(Error::Invalid(format!("gave up {w}"))),
        Err(e) => {
            let reason = e.to_string();
            finish(run, Decision::Fail { reason })?;
            Err(e)
        }
    }
}

fn finish(run: &Arc<Mutex<Run>>, decision: Decision) -> Result<RunStatus> {
    let (status, event, error) = match decision {
        Decision::Complete => (RunStatus::Completed, SupervisorEvent::Completed, None),
        Decision::Stop => (RunStatus::Stopped, SupervisorEvent::Stopped, None),
        Decision::Pause { epoch, step } => (
            RunStatus::Paused,
            SupervisorEvent::Paused { epoch, step },
            None,
        ),
        Decision::Fail { reason } => (
            RunStatus::Failed,
            SupervisorEvent::Failed {
                reason: reason.clone(),
            },
            Some(reason),
        ),
        Decision::Restart { .. } => unreachable!("restarts are handled by the loop"),
    };
    let mut r = lock(run);
    // The plots come before the final status, so a run seen as ended has all its outputs.
    if status == RunStatus::Completed || r.dir.join("metrics").exists() {
        // Best effort: a run without figures yet just gets no plots.
        if let Err(e) = crate::plot::plot_run_folder(&r.dir, &r.dir.join("plots")) {
            eprintln!("ddp supervisor: no plots: {e}");
        }
    }
    let data = crate::run::DataSummary::read(&r.dir);
    r.transition(event, |r| {
        r.status = status;
        r.ended = Some(now());
        r.error = error;
        r.replica_pids.clear();
        r.data = data;
    })?;
    Ok(status)
}

fn sleep_unless_stopped(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lock(run: &Arc<Mutex<Run>>) -> std::sync::MutexGuard<'_, Run> {
    run.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts `EXE __supervise RUN_DIR` (`EXE`: this executable, see [`crate::run_hidden_command`])
/// as a detached process (its own session, so it survives the terminal and the caller), with its
/// output in `logs/supervisor.log`. The caller should reap the child if it outlives it (`wait` on
/// it from a thread), or simply drop it.
pub fn spawn_supervisor(run_dir: &Path, resume: bool) -> Result<std::process::Child> {
    let cmd = HiddenCommand::Supervise {
        run_dir: run_dir.to_path_buf(),
        resume,
    };
    crate::detach::spawn_detached(cmd.to_args(), &run_dir.join("logs").join("supervisor.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_error_is_read_from_this_attempts_part_of_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("rank-0.log");
        assert_eq!(replica_error(&log, 0), None, "no log yet");
        std::fs::write(
            &log,
            "x | rank 0 of 1\nddp-trainer: rank 0: the first attempt's\n",
        )
        .unwrap();
        let start = std::fs::metadata(&log).unwrap().len();
        assert_eq!(
            replica_error(&log, 0).as_deref(),
            Some("ddp-trainer: rank 0: the first attempt's")
        );
        // The next attempt wrote no error line: the old one is not its error.
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("x | rank 0 of 1\nepoch 1\n");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(replica_error(&log, start), None);
        text.push_str("ddp-trainer: rank 0: /d/a.csv: line 3 has 2 fields\n");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(
            replica_error(&log, start).as_deref(),
            Some("ddp-trainer: rank 0: /d/a.csv: line 3 has 2 fields")
        );
        // A long log is read from its end.
        let long = format!(
            "{}ddp-trainer: rank 0: late\n",
            "epoch 1 loss 2.3\n".repeat(10_000)
        );
        std::fs::write(&log, long).unwrap();
        assert_eq!(
            replica_error(&log, 0).as_deref(),
            Some("ddp-trainer: rank 0: late")
        );
    }
}
