//! Stopping a run (asking, then optionally waiting) and removing one.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::engine::StopRequest;
use crate::runs::run::Run;
use crate::{Error, Result};

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
/// failed), and unless it has ended asks its engine: SIGTERM to its supervisor, or `scancel` of
/// its Slurm job. A live run without a supervisor yet (it is being started) is
/// [`Error::Refused`]: try again in a moment.
pub fn request_stop(run: &Run) -> Result<StopRequest> {
    let run = Run::load_checked(&run.dir)?;
    if run.record.status.is_terminal() {
        return Ok(StopRequest::AlreadyTerminal(run));
    }
    crate::engine::of_run(&run.record).stop(run)
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
