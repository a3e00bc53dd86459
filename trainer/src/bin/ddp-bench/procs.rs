//! Child processes: a clean environment, spawning with output to files, waiting with a deadline
//! (reaping with `wait4` to learn the peak resident set), stopping, and log tails for errors.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ddp_trainer::env::LAUNCHER_VARIABLES;

/// Time between SIGTERM and SIGKILL when a child is stopped (the launcher itself gives its
/// replicas 10 s), and the longest wait for a killed child to be reaped.
pub const GRACE: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);

/// How a reaped child ended.
pub struct Reaped {
    pub status: ExitStatus,
    /// The largest resident set of the child and of the descendants it waited for, in KiB
    /// (Linux's `ru_maxrss` as `wait4` reports it for a child); `None` if the kernel gave 0.
    pub peak_rss_kib: Option<u64>,
}

/// KiB (`ru_maxrss`) to MB (10^6 bytes).
pub fn kib_to_mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

pub fn clean_env(cmd: &mut Command) {
    for v in LAUNCHER_VARIABLES {
        cmd.env_remove(v);
    }
}

/// Starts `cmd` with its output in two files and `PR_SET_PDEATHSIG(SIGKILL)`, so that it dies
/// with the bench.
pub fn spawn(mut cmd: Command, stdout: &Path, stderr: &Path) -> std::io::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only makes async-signal-safe calls (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "the bench exited before the child started",
                ));
            }
            Ok(())
        });
    }
    cmd.stdin(Stdio::null())
        .stdout(File::create(stdout)?)
        .stderr(File::create(stderr)?)
        .spawn()
}

/// Waits for `child` until `limit`, reaping it with `wait4` (for its peak RSS); past the limit:
/// SIGTERM (the launcher stops its replicas), SIGKILL after [`GRACE`], and an error. Takes the
/// `Child` so that nobody can `kill`/`wait` its pid once it is reaped here.
pub fn wait_deadline(child: Child, limit: Duration, what: &str) -> Result<Reaped, String> {
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    loop {
        if let Some(exit) = try_reap(pid).map_err(|e| format!("waiting for {what}: {e}"))? {
            return Ok(exit);
        }
        if start.elapsed() > limit {
            terminate(pid);
            return Err(format!(
                "{what} did not finish within {} s (--timeout-s); stopped it",
                limit.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Kills a child that has not been reaped yet and reaps it (for at most [`GRACE`]).
pub fn stop(child: Child) {
    let pid = child.id() as libc::pid_t;
    signal(pid, libc::SIGKILL);
    reap_within(pid, GRACE);
}

/// SIGTERM, then SIGKILL if it is still there after [`GRACE`]; reaps it.
fn terminate(pid: libc::pid_t) {
    signal(pid, libc::SIGTERM);
    if !reap_within(pid, GRACE) {
        signal(pid, libc::SIGKILL);
        reap_within(pid, GRACE);
    }
}

fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of our own child, which no one has reaped yet (callers reap it
    // only through `try_reap`, and stop signalling once it is gone).
    unsafe { libc::kill(pid, sig) };
}

/// Polls until the child is gone; false if it is still there after `limit`.
fn reap_within(pid: libc::pid_t, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        match try_reap(pid) {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) => std::thread::sleep(POLL),
        }
    }
    false
}

/// `wait4(pid, WNOHANG)`: the child's exit and peak RSS if it has ended, `None` if not yet.
fn try_reap(pid: libc::pid_t) -> std::io::Result<Option<Reaped>> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is a plain C struct of integers; all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live locals of the right types.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            return Ok(Some(Reaped {
                status: ExitStatus::from_raw(status),
                peak_rss_kib: u64::try_from(usage.ru_maxrss).ok().filter(|k| *k > 0),
            }));
        }
        if reaped == 0 {
            return Ok(None);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Kills every child and reaps it (each for at most [`GRACE`]); for children reaped, if at all,
/// through `Child::try_wait` (which then makes `kill` a no-op).
pub fn kill_all(children: &mut [(Child, PathBuf)]) {
    for (c, _) in children.iter_mut() {
        let _ = c.kill();
    }
    for (c, _) in children.iter_mut() {
        let start = Instant::now();
        while !matches!(c.try_wait(), Ok(Some(_)) | Err(_)) && start.elapsed() < GRACE {
            std::thread::sleep(POLL);
        }
    }
}

/// A free rendezvous port on 127.0.0.1 (the launcher's choice, see
/// [`ddp_trainer::launcher::free_port`]).
pub fn free_port() -> Result<u16, String> {
    ddp_trainer::launcher::free_port().map_err(|e| e.to_string())
}

/// The last few lines of a log file, for error messages.
pub fn tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map_or(0, |m| m.len());
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(4000)));
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let last = &lines[lines.len().saturating_sub(20)..];
    format!(
        "--- last lines of {} ---\n{}",
        path.display(),
        last.join("\n")
    )
}
