//! Starting a hidden sub-command of this executable as a detached process: its own session
//! (it survives the terminal and the caller), no input, its output appended to a log file.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::{Error, Result};

/// Starts `EXE ARGS...` (`EXE`: this executable) detached, its stdout and stderr appended to
/// `log` (whose folder is created). The caller reaps the child if it outlives it, or drops it.
pub fn spawn_detached<I, S>(args: I, log: &Path) -> Result<Child>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", e))?;
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::io(log, e))?;
    let err = out.try_clone().map_err(|e| Error::io(log, e))?;
    let mut cmd = Command::new(&exe);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| Error::io(exe, e))
}
