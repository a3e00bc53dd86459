//! Stopping a run (asking, then optionally waiting) and removing one.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::run::Run;
use crate::{Error, Result};

/// What [`request_stop`] did.
#[derive(Debug, Clone)]
pub enum StopRequest {
    /// The run had already ended: nothing was sent.
    AlreadyTerminal(Run),
    /// SIGTERM was sent to the run's supervisor (process `pid`): its replicas finish their step
    /// and exit, then it marks the run stopped. [`wait_until_terminal`] waits for that.
    Signalled { run: Run, pid: u32 },
    /// The run's Slurm job was cancelled (`scancel`); the watcher records it stopped.
    Cancelled { run: Run, job_id: String },
}

impl StopRequest {
    /// The run as read when the request was made.
    pub fn run(&self) -> &Run {
        match self {
            StopRequest::AlreadyTerminal(run)
            | StopRequest::Signalled { run, .. }
            | StopRequest::Cancelled { run, .. } => run,
        }
    }

    /// What every front end says of it.
    pub fn message(&self) -> String {
        match self {
            StopRequest::AlreadyTerminal(run) => {
                format!("run {} is already {}", run.record.id, run.record.status)
            }
            StopRequest::Signalled { run, .. } => format!(
                "stopping run {} (replicas finish their step)...",
                run.record.id
            ),
            StopRequest::Cancelled { run, job_id } => format!(
                "stopping run {}: cancelled Slurm job {job_id} (replicas checkpoint and stop)...",
                run.record.id
            ),
        }
    }
}

/// How long a front end waits for a run it asked to stop: its replicas finish their step and
/// rank 0 checkpoints, which a large model on a slow disk can take a while for.
pub const STOP_LIMIT: Duration = Duration::from_secs(120);

/// Stops a run and waits for it (`ddp stop`, `%ddp stop`): [`request_stop`], then
/// [`wait_until_terminal`] within [`STOP_LIMIT`]. `say` gets each line to show, as it happens
/// ([`StopRequest::message`], then `run ID STATUS`); the run as it ended is returned.
pub fn stop_and_wait(run: &Run, mut say: impl FnMut(&str)) -> Result<Run> {
    let request = request_stop(run)?;
    say(&request.message());
    if let StopRequest::AlreadyTerminal(run) = request {
        return Ok(run);
    }
    let now = wait_until_terminal(&run.dir, STOP_LIMIT)?;
    say(&format!("run {} {}", now.record.id, now.record.status));
    Ok(now)
}

/// Asks a run to stop, without waiting: reads the run again (a supervisor found dead marks it
/// failed), and unless it has ended sends SIGTERM to its supervisor. A live run without a
/// supervisor yet (it is being started) is [`Error::Refused`]: try again in a moment.
pub fn request_stop(run: &Run) -> Result<StopRequest> {
    let run = Run::load_checked(&run.dir)?;
    if run.record.status.is_terminal() {
        return Ok(StopRequest::AlreadyTerminal(run));
    }
    if let Some(job) = &run.record.slurm {
        let job_id = job.job_id.clone();
        crate::slurm::submit::stop(&run)?;
        return Ok(StopRequest::Cancelled { run, job_id });
    }
    let Some(sup) = run.record.supervisor.clone() else {
        return Err(Error::Refused(format!(
            "run {} has no supervisor yet (status {}); try again in a moment",
            run.record.id, run.record.status
        )));
    };
    // SAFETY: kill(2) with a pid we recorded and checked alive (load_checked).
    if unsafe { libc::kill(sup.pid as i32, libc::SIGTERM) } != 0 {
        return Err(Error::Supervisor(format!(
            "cannot signal the supervisor (pid {}): {}",
            sup.pid,
            std::io::Error::last_os_error()
        )));
    }
    Ok(StopRequest::Signalled { run, pid: sup.pid })
}

/// How often [`wait_until_terminal`] reads `run.json`.
const POLL: Duration = Duration::from_millis(100);

/// Blocks until the run in `dir` has ended (completed, failed or stopped) and returns it; after
/// `timeout`, [`Error::Supervisor`] names the run, its supervisor's pid and its log. Meant for
/// after [`request_stop`]: the message says the run "did not stop".
pub fn wait_until_terminal(dir: &Path, timeout: Duration) -> Result<Run> {
    let start = Instant::now();
    loop {
        let now = Run::load_checked(dir)?;
        if now.record.status.is_terminal() {
            return Ok(now);
        }
        if start.elapsed() > timeout {
            let pid = now
                .record
                .supervisor
                .as_ref()
                .map_or_else(|| "none yet".to_string(), |p| p.pid.to_string());
            return Err(Error::Supervisor(format!(
                "run {} did not stop within {timeout:?} (supervisor pid {pid}); see {}",
                now.record.id,
                now.supervisor_log().display()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Deletes the run's folder. Reads the run again first and refuses a run that is still live
/// ([`Error::Refused`]: stop it first).
pub fn remove_run(run: &Run) -> Result<()> {
    let run = Run::load_checked(&run.dir)?;
    if !run.record.status.is_terminal() {
        return Err(Error::Refused(format!(
            "run {} is {}: stop it first (`ddp stop {}`)",
            run.record.id, run.record.status, run.record.id
        )));
    }
    std::fs::remove_dir_all(&run.dir).map_err(|e| Error::io(&run.dir, e))
}
