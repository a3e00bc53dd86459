//! The supervisor: one process per run (`EXE __supervise RUN_DIR`, where `EXE` is the binary of
//! the front end that started the run: `ddp`, a TUI, ...), detached from whoever started it. It
//! runs each attempt of the replicas through the run's engine ([`crate::engine`]: the launcher
//! here, or `spark-submit` of a Spark driver; replicas of that same executable, `EXE __replica`,
//! with the trainer's environment contract; every such front end calls
//! [`crate::run_hidden_command`] first in `main`), records every change in `run.json` and
//! `events.jsonl`, and applies the restart policy ([`crate::engine::policy`]) when a replica dies. Before anything else,
//! a run of a sweep with a parallelism limit waits for one of the sweep's slots
//! ([`crate::sweep`]); then it waits for its devices ([`crate::engine::devices`]).
//!
//! SIGTERM (`ddp stop`) makes it stop the replicas (they finish their step and exit), then mark
//! the run stopped. The replicas die with it if it is killed (parent-death signal), and a reader
//! that finds its pid gone marks the run failed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ddp_trainer::cli::ReplicaArgs;
use ddp_trainer::spec::Spec;

use crate::engine::AttemptInputs;
use crate::engine::devices;
use crate::engine::policy::{Attempt, Decision, decide};
use crate::invocation::HiddenCommand;
use crate::runs::run::{ProcessId, Run, RunStatus, SupervisorEvent, locked, now, workspace_root};
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
    let spec = Spec::load(&locked(&run).spec_path(), &[])?;
    // The replicas run the run's own trainer (`--trainer`), else this executable's built-in one.
    let trainer = locked(&run).record.trainer.clone();
    let program = match &trainer {
        Some(t) => t.clone(),
        None => std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", e))?,
    };
    locked(&run).update(|r| r.supervisor = Some(ProcessId::current()))?;
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
    locked(&run).update(|r| r.devices = devices.clone())?;
    let replica_env = assignment.replica_env();

    let backoff = spec.restart.backoff();
    let mut resume_next = resume;
    loop {
        if STOP.load(Ordering::SeqCst) {
            return finish(&run, Decision::Stop);
        }
        let attempt = locked(&run).record.restarts;
        {
            let mut r = locked(&run);
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
            let (code, signal) = (exit.code(), exit.signal());
            let mut r = locked(&run);
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
        let used = locked(&run).record.restarts;
        match decide(&outcome, used, spec.restart.max_restarts, backoff) {
            Decision::Restart {
                attempt,
                after,
                reason,
            } => {
                {
                    let mut r = locked(&run);
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

/// One attempt of all replicas, by the run's engine; never fails itself, it reports how the
/// attempt ended.
fn launch_attempt(
    run: &Arc<Mutex<Run>>,
    program: &Path,
    spec: &Spec,
    threads: usize,
    replica_env: &[(String, String)],
    resume: bool,
) -> Attempt {
    let dir = locked(run).dir.clone();
    let mut replica = ReplicaArgs::new(locked(run).spec_path(), &dir).resuming(resume);
    let pause_at = locked(run).record.pause_at.clone();
    if let Some(p) = pause_at {
        match p.parse() {
            Ok(p) => replica.pause_at = Some(p),
            Err(e) => return Attempt::LaunchFailed(format!("run.json: pause_at {e}")),
        }
    }
    // The run's own trainer is a `ddp-trainer`; this executable runs it as a hidden command.
    let args = match locked(run).record.trainer {
        Some(_) => replica.to_args(),
        None => HiddenCommand::Replica(replica).to_args(),
    };
    let engine = crate::engine::of_run(&locked(run).record);
    engine.attempt(&AttemptInputs {
        run,
        program,
        args,
        spec,
        threads,
        replica_env,
        resume,
        stop: &STOP,
    })
}

/// Waits (status queued, one event per change) for a slot of the run's sweep when the sweep
/// limits its parallelism. `None` when a stop was requested while waiting.
fn take_sweep_slot(run: &Arc<Mutex<Run>>) -> Result<Option<crate::sweep::SlotWait>> {
    let (dir, record) = {
        let r = locked(run);
        (r.dir.clone(), r.record.clone())
    };
    let waited = crate::sweep::wait_for_slot(
        &workspace_root(&dir),
        &record,
        Duration::from_millis(250),
        |why| {
            let _ = locked(run).event(SupervisorEvent::Queued {
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
        let r = locked(run);
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
            let _ = locked(run).event(SupervisorEvent::Queued {
                waiting_for: w.to_string(),
            });
        },
        || STOP.load(Ordering::SeqCst),
    )
    .map_err(|e| Error::Invalid(format!("{}: {e}", locked(run).spec_path().display())));
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
    let mut r = locked(run);
    // The plots come before the final status, so a run seen as ended has all its outputs.
    if status == RunStatus::Completed || r.dir.join("metrics").exists() {
        // Best effort: a run without figures yet just gets no plots.
        if let Err(e) = crate::present::plot::plot_run_folder(&r.dir, &r.dir.join("plots")) {
            eprintln!("ddp supervisor: no plots: {e}");
        }
    }
    let data = crate::runs::run::DataSummary::read(&r.dir);
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
