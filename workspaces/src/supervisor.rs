//! The supervisor: one process per run (`EXE __supervise RUN_DIR`, where `EXE` is the binary of
//! the front end that started the run: `ddp`, a TUI, ...), detached from whoever started it. It
//! launches the replicas (replicas of that same executable, `EXE __replica`, with the trainer's
//! environment contract; every such front end calls [`run_hidden_command`] first in `main`), records every change in `run.json` and `events.jsonl`,
//! and applies the restart policy ([`crate::policy`]) when a replica dies. Before anything else,
//! a run of a sweep with a parallelism limit waits for one of the sweep's slots
//! ([`crate::sweep`]); then it waits for its devices ([`crate::devices`]).
//!
//! SIGTERM (`ddp stop`) makes it stop the replicas (they finish their step and exit), then mark
//! the run stopped. The replicas die with it if it is killed (parent-death signal), and a reader
//! that finds its pid gone marks the run failed.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ddp_trainer::launcher::{LaunchOptions, SpawnHook, launch};
use ddp_trainer::spec::Spec;

use crate::devices;
use crate::policy::{Decision, Exit, Outcome, decide};
use crate::run::{ProcessId, Run, RunStatus, SupervisorEvent, now};
use crate::{Error, Result};

/// The hidden sub-command that runs one replica (the `ddp-trainer` contract).
pub const REPLICA_COMMAND: &str = "__replica";
/// The hidden sub-command that runs a run's supervisor: `EXE __supervise RUN_DIR [--resume]`.
pub const SUPERVISE_COMMAND: &str = "__supervise";

/// Runs the hidden sub-command named by `args` (the whole command line, `args[0]` being the
/// executable), if it names one, and returns its exit code; `None` for any other command line.
///
/// **Call this first in `main` of every front end that starts runs** (the `ddp` CLI, a TUI, a
/// notebook kernel), before parsing arguments or starting anything:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
///     if let Some(code) = ddp_workspaces::supervisor::run_hidden_command(&args) {
///         return code;
///     }
///     // ... the front end itself
///     std::process::ExitCode::SUCCESS
/// }
/// ```
///
/// A run's supervisor ([`spawn_supervisor`]) and its replicas are started from
/// `std::env::current_exe()`, that is from the front end's own binary, with these arguments:
/// - `EXE __supervise RUN_DIR [--resume]` runs the supervisor of the run in `RUN_DIR`
///   ([`supervise`]); exit code 0 when the run completed, 1 otherwise, 2 without `RUN_DIR`.
/// - `EXE __replica ...` runs one replica (delegating to the trainer's command line).
pub fn run_hidden_command(args: &[OsString]) -> Option<ExitCode> {
    let rest = args.get(2..).unwrap_or_default();
    match args.get(1).and_then(|a| a.to_str()) {
        Some(REPLICA_COMMAND) => Some(ddp_trainer::cli::main_from(
            std::iter::once(OsString::from("ddp-trainer")).chain(rest.iter().cloned()),
        )),
        Some(SUPERVISE_COMMAND) => Some(supervise_main(rest)),
        Some(crate::slurm::WATCH_COMMAND) => Some(watch_main(rest)),
        _ => None,
    }
}

/// `EXE __slurm-watch ROOT`: the workspace's Slurm watcher ([`crate::slurm::watcher`]).
fn watch_main(args: &[OsString]) -> ExitCode {
    let Some(root) = args.first() else {
        eprintln!("ddp __slurm-watch: missing workspace folder");
        return ExitCode::from(2);
    };
    match crate::slurm::watcher::watch(Path::new(root)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddp __slurm-watch: {e}");
            ExitCode::from(1)
        }
    }
}

/// `EXE __supervise RUN_DIR [--resume]`, its arguments after the sub-command.
fn supervise_main(args: &[OsString]) -> ExitCode {
    let resume = args.iter().any(|a| a == "--resume");
    let Some(dir) = args.iter().find(|a| *a != "--resume") else {
        eprintln!("ddp __supervise: missing run folder");
        return ExitCode::from(2);
    };
    match supervise(Path::new(dir), resume) {
        Ok(RunStatus::Completed) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("ddp supervisor: run {status}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("ddp supervisor: {e}");
            ExitCode::from(1)
        }
    }
}

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

    let backoff = Duration::from_secs_f64(spec.restart.backoff_s.max(0.0));
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
        let outcome = launch_once(&run, &program, &spec, threads, &replica_env, resume_next);
        if let Outcome::ReplicaFailed { rank, exit } = &outcome {
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
fn launch_once(
    run: &Arc<Mutex<Run>>,
    program: &Path,
    spec: &Spec,
    threads: usize,
    replica_env: &[(String, String)],
    resume: bool,
) -> Outcome {
    let dir = lock(run).dir.clone();
    let own_trainer = lock(run).record.trainer.is_some();
    let mut args: Vec<OsString> = Vec::new();
    if !own_trainer {
        args.push(REPLICA_COMMAND.into());
    }
    args.extend([
        lock(run).spec_path().into(),
        "--out".into(),
        dir.clone().into(),
    ]);
    if resume {
        args.push("--resume".into());
    }
    let mut opts = LaunchOptions::new(spec.ddp.replicas, program, &dir);
    opts.args = args;
    opts.threads_per_replica = Some(threads);
    opts.echo = false;
    opts.env.extend(replica_env.iter().cloned());
    opts.env.push((
        "TORCHELASTIC_RESTART_COUNT".into(),
        lock(run).record.restarts.to_string(),
    ));
    let hook_run = run.clone();
    opts.on_spawn = Some(SpawnHook(Arc::new(move |rank, pid| {
        let mut r = lock(&hook_run);
        // Best effort: a failure to record a pid must not kill the launch.
        let _ = r.update(|r| {
            r.replica_pids.insert(rank, pid);
        });
    })));
    match launch(&opts) {
        Ok(()) => Outcome::Completed,
        Err(ddp_trainer::Error::Replica {
            rank, code, signal, ..
        }) => {
            let exit = match (code, signal) {
                (Some(c), _) => Exit::Code(c),
                (None, Some(s)) => Exit::Signal(s),
                (None, None) => Exit::Code(-1),
            };
            // A replica that stopped on our request is a stop, not a failure.
            if STOP.load(Ordering::SeqCst) && exit == Exit::Code(143) {
                Outcome::Stopped
            } else {
                Outcome::ReplicaFailed { rank, exit }
            }
        }
        Err(ddp_trainer::Error::Launch(msg)) if msg.contains("interrupted") => {
            STOP.store(true, Ordering::SeqCst);
            Outcome::Stopped
        }
        Err(e) => Outcome::LaunchFailed(e.to_string()),
    }
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

/// `<ws>` of the run folder `<ws>/experiments/<experiment>/runs/<id>`.
/// The workspace a run folder belongs to (`ROOT/experiments/EXP/runs/ID`).
pub(crate) fn workspace_root(run_dir: &Path) -> PathBuf {
    run_dir
        .ancestors()
        .nth(4)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| run_dir.to_path_buf())
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

/// Starts `EXE __supervise RUN_DIR` (`EXE`: this executable, see [`run_hidden_command`]) as a
/// detached process (its own session, so it survives the
/// terminal and the caller), with its output in `logs/supervisor.log`. The caller should reap
/// the child if it outlives it (`wait` on it from a thread), or simply drop it.
pub fn spawn_supervisor(run_dir: &Path, resume: bool) -> Result<std::process::Child> {
    let mut args: Vec<&OsStr> = vec![SUPERVISE_COMMAND.as_ref(), run_dir.as_os_str()];
    if resume {
        args.push("--resume".as_ref());
    }
    crate::detach::spawn_detached(args, &run_dir.join("logs").join("supervisor.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_commands_are_recognised() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(run_hidden_command(&args(&["ddp", "ls"])), None);
        assert_eq!(run_hidden_command(&args(&["ddp"])), None);
        assert_eq!(run_hidden_command(&[]), None);
        assert_eq!(
            run_hidden_command(&args(&["ddp", SUPERVISE_COMMAND])),
            Some(ExitCode::from(2))
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
}
