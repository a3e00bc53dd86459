//! The workspace's lock files (`<workspace>/locks/`): a GPU held by a run, a sweep's slot, the
//! Slurm watcher. A lock is an exclusive `flock(2)` on an open file, held by a [`LockFile`]:
//! dropping it releases the lock, and so does the death of its process, `kill -9` included, so
//! a lost holder never leaks one. Files are opened close-on-exec (Rust's default): child
//! processes do not inherit the lock.
//!
//! A lock file may say who holds it (`{"run":"...","pid":N}`, a [`Holder`]), for `ddp ls`, the
//! dashboard and the waiting messages; the lock is the truth: a file left behind by a killed
//! holder still names it but is free, and [`holder`] reports it free.
//!
//! This module imports nothing of its siblings.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The folder of a workspace that holds the lock files.
pub const LOCKS_DIR: &str = "locks";

/// `<workspace>/locks/NAME`.
pub fn lock_path(ws_root: &Path, name: &str) -> PathBuf {
    ws_root.join(LOCKS_DIR).join(name)
}

/// Who holds a lock, as its file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The run id, or `(unknown)` for a file caught between locking and writing.
    pub run: String,
    /// The holding process's id.
    pub pid: Option<u32>,
}

impl Holder {
    /// `run`, held by this process.
    pub fn this_process(run: &str) -> Holder {
        Holder {
            run: run.to_string(),
            pid: Some(std::process::id()),
        }
    }
}

/// A held lock; dropping it releases the lock (the holder's record stays in the file, which
/// counts for nothing once the file is free: emptying it first would let a reader that saw the
/// lock still held read an empty file and name the holder "(unknown)").
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
}

impl LockFile {
    /// The lock's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // SAFETY: flock on a file descriptor this struct owns.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Takes the lock at `path` (its folder is created), writing `holder` into it when given;
/// `Ok(None)` when another [`LockFile`] (of this process or another) holds it.
pub fn try_lock(path: &Path, holder: Option<&Holder>) -> Result<Option<LockFile>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    // A few tries: a reader probing the file at this instant must not look like a holder.
    if !try_flock(&file, libc::LOCK_EX, 3, path)? {
        return Ok(None);
    }
    let lock = LockFile {
        file,
        path: path.to_path_buf(),
    };
    if let Some(holder) = holder {
        let record = serde_json::to_string(holder).expect("a holder serialises") + "\n";
        lock.file
            .set_len(0)
            .and_then(|()| lock.file.write_all_at(record.as_bytes(), 0))
            .map_err(|e| Error::io(path, e))?;
    }
    Ok(Some(lock))
}

/// Who holds the lock at `path`: `None` when it is free or has no file.
pub fn holder(path: &Path) -> Result<Option<Holder>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    if try_flock(&file, libc::LOCK_SH, 1, path)? {
        return Ok(None); // nobody holds it (the shared lock goes with `file`)
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut &file, &mut text).map_err(|e| Error::io(path, e))?;
    Ok(Some(serde_json::from_str(text.trim()).unwrap_or_else(
        |_| Holder {
            run: "(unknown)".to_string(),
            pid: None,
        },
    )))
}

/// `flock(op | LOCK_NB)`, up to `tries` times 2 ms apart: `Ok(false)` when it stays held.
fn try_flock(file: &File, op: libc::c_int, tries: usize, path: &Path) -> Result<bool> {
    let mut tries_left = tries;
    loop {
        // SAFETY: flock on a file descriptor `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::Interrupted => continue,
            ErrorKind::WouldBlock => {
                tries_left = tries_left.saturating_sub(1);
                if tries_left == 0 {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => return Err(Error::io(path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_free_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path(), "x.lock");
        assert_eq!(holder(&path).unwrap(), None);
        let a = try_lock(&path, Some(&Holder::this_process("run-a")))
            .unwrap()
            .unwrap();
        assert_eq!(a.path(), path);
        assert!(try_lock(&path, None).unwrap().is_none());
        assert_eq!(holder(&path).unwrap(), Some(Holder::this_process("run-a")));
        drop(a);
        assert_eq!(holder(&path).unwrap(), None);
        // The record stays, counting for nothing; a lock without a record names nobody known.
        assert!(std::fs::read_to_string(&path).unwrap().contains("run-a"));
        let b = try_lock(&path, None).unwrap().unwrap();
        assert_eq!(holder(&path).unwrap().unwrap().run, "run-a");
        drop(b);
        std::fs::write(&path, "").unwrap();
        let _c = try_lock(&path, None).unwrap().unwrap();
        assert_eq!(holder(&path).unwrap().unwrap().run, "(unknown)");
    }
}
