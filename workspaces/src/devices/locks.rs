//! Per-GPU locks, so that runs of one workspace (each its own supervisor process) never share a
//! GPU.
//!
//! GPU `N` (its NVML index, the number `nvidia-smi` shows, whatever `CUDA_VISIBLE_DEVICES` says)
//! is held while some process holds `flock(2)` `LOCK_EX` on `<workspace>/locks/gpu-N.lock`. The
//! lock lives on an open file held by a [`DeviceLease`]: dropping the lease releases it, and so
//! does the death of the process, `kill -9` included, so a lost supervisor never leaks a GPU. The
//! file is opened close-on-exec: replicas the supervisor spawns do not inherit it (they die with
//! the supervisor anyway, through the launcher's parent-death signal).
//!
//! The file's content (`{"run":"...","pid":N}`) only says who holds it, for `ddp ls` and the TUI;
//! the lock is the truth: a file left behind by a killed supervisor still names it but is free.
//! [`acquire`] is all-or-nothing (it holds no GPU unless it got all of them), so two runs that
//! want overlapping GPUs cannot each hold half and wait for the other.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The folder of a workspace that holds the lock files.
pub const LOCKS_DIR: &str = "locks";

/// `<workspace>/locks/gpu-N.lock`.
pub fn lock_path(ws_root: &Path, physical: usize) -> PathBuf {
    ws_root.join(LOCKS_DIR).join(format!("gpu-{physical}.lock"))
}

/// Who holds a GPU, as its lock file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The run id, or `(unknown)` for a file caught between locking and writing.
    pub run: String,
    /// The supervisor's process id.
    pub pid: Option<u32>,
}

/// The GPUs (NVML indices) a run holds; dropping it releases them.
#[derive(Debug)]
pub struct DeviceLease {
    run_id: String,
    held: Vec<HeldLock>,
}

impl DeviceLease {
    /// The NVML indices held, ascending.
    pub fn gpus(&self) -> Vec<usize> {
        self.held.iter().map(|h| h.gpu).collect()
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// One locked file; dropping it empties the file and unlocks it.
#[derive(Debug)]
struct HeldLock {
    gpu: usize,
    file: File,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        // Only the lock is released: the holder's record stays in the file, which `holders`
        // ignores once the file is free and the next lease rewrites. Emptying it first let a
        // reader that saw the lock still held read an empty file and name the holder
        // "(unknown)".
        // SAFETY: flock on a file descriptor this struct owns.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Takes every GPU of `gpus` (NVML indices) for `run_id`, or none: `Ok(None)` when any of them
/// is held by another lease (of this process or another one).
pub fn acquire(ws_root: &Path, gpus: &[usize], run_id: &str) -> Result<Option<DeviceLease>> {
    let mut sorted = gpus.to_vec();
    sorted.sort_unstable();
    if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(Error::Invalid(format!(
            "run {run_id} asks to lock GPU {} twice",
            pair[0]
        )));
    }
    let dir = ws_root.join(LOCKS_DIR);
    fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let record = Holder {
        run: run_id.to_string(),
        pid: Some(std::process::id()),
    };
    let record = serde_json::to_string(&record).expect("a holder serialises") + "\n";
    let mut held = Vec::with_capacity(sorted.len());
    for gpu in sorted {
        let path = lock_path(ws_root, gpu);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        // A few tries: `holders` probing the file at this instant must not look like a holder.
        if !try_flock(&file, libc::LOCK_EX, 3, &path)? {
            return Ok(None); // `held` drops: the GPUs taken so far are released
        }
        let lock = HeldLock { gpu, file };
        lock.file
            .set_len(0)
            .and_then(|()| lock.file.write_all_at(record.as_bytes(), 0))
            .map_err(|e| Error::io(&path, e))?;
        held.push(lock);
    }
    Ok(Some(DeviceLease {
        run_id: run_id.to_string(),
        held,
    }))
}

/// The held GPUs of the workspace (NVML index → holder). GPUs whose file exists but is not
/// locked are free and absent.
pub fn holders(ws_root: &Path) -> Result<BTreeMap<usize, Holder>> {
    let dir = ws_root.join(LOCKS_DIR);
    let mut found = BTreeMap::new();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let name = entry.file_name();
        let Some(gpu) = name
            .to_str()
            .and_then(|n| n.strip_prefix("gpu-")?.strip_suffix(".lock")?.parse().ok())
        else {
            continue;
        };
        let path = entry.path();
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&path, e)),
        };
        if try_flock(&file, libc::LOCK_SH, 1, &path)? {
            continue; // nobody holds it (the shared lock goes with `file`)
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut &file, &mut text).map_err(|e| Error::io(&path, e))?;
        let holder = serde_json::from_str(text.trim()).unwrap_or_else(|_| Holder {
            run: "(unknown)".to_string(),
            pid: None,
        });
        found.insert(gpu, holder);
    }
    Ok(found)
}

/// The held GPUs of the workspace (NVML index → run id), for `ddp ls` and the TUI.
pub fn held_by(ws_root: &Path) -> Result<BTreeMap<usize, String>> {
    Ok(holders(ws_root)?
        .into_iter()
        .map(|(gpu, holder)| (gpu, holder.run))
        .collect())
}

/// `flock(op | LOCK_NB)`, up to `tries` times 2 ms apart: `Ok(false)` when it stays held.
pub(crate) fn try_flock(file: &File, op: libc::c_int, tries: usize, path: &Path) -> Result<bool> {
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
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    fn ws() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn runs(map: BTreeMap<usize, String>) -> Vec<(usize, String)> {
        map.into_iter().collect()
    }

    #[test]
    fn a_gpu_has_one_holder_at_a_time() {
        let ws = ws();
        assert!(held_by(ws.path()).unwrap().is_empty());
        let a = acquire(ws.path(), &[1, 0], "run-a").unwrap().unwrap();
        assert_eq!(a.gpus(), [0, 1]);
        assert_eq!(a.run_id(), "run-a");
        assert!(acquire(ws.path(), &[1], "run-b").unwrap().is_none());
        let holders = holders(ws.path()).unwrap();
        assert_eq!(holders.len(), 2);
        assert_eq!(
            holders[&1],
            Holder {
                run: "run-a".into(),
                pid: Some(std::process::id())
            }
        );
        drop(a);
        assert!(held_by(ws.path()).unwrap().is_empty());
        // The files stay with the last holder's record, which counts for nothing once free.
        let text = fs::read_to_string(lock_path(ws.path(), 1)).unwrap();
        assert!(text.contains("\"run-a\""), "{text}");
        let b = acquire(ws.path(), &[1], "run-b").unwrap().unwrap();
        assert_eq!(
            runs(held_by(ws.path()).unwrap()),
            [(1, "run-b".to_string())]
        );
        drop(b);
    }

    #[test]
    fn acquire_is_all_or_nothing() {
        let ws = ws();
        let a = acquire(ws.path(), &[1], "run-a").unwrap().unwrap();
        assert!(acquire(ws.path(), &[0, 1, 2], "run-b").unwrap().is_none());
        // run-b kept neither GPU 0 (locked before it met 1) nor GPU 2.
        assert_eq!(
            runs(held_by(ws.path()).unwrap()),
            [(1, "run-a".to_string())]
        );
        let c = acquire(ws.path(), &[0, 2], "run-c").unwrap().unwrap();
        assert_eq!(c.gpus(), [0, 2]);
        drop(a);
        drop(c);
    }

    #[test]
    fn duplicates_and_no_gpus() {
        let ws = ws();
        let err = acquire(ws.path(), &[0, 1, 0], "run-a").unwrap_err();
        assert_eq!(err.to_string(), "run run-a asks to lock GPU 0 twice");
        let none = acquire(ws.path(), &[], "run-a").unwrap().unwrap();
        assert!(none.gpus().is_empty());
    }

    #[test]
    fn foreign_and_unreadable_files() {
        let ws = ws();
        fs::create_dir_all(ws.path().join(LOCKS_DIR)).unwrap();
        // Stale content of a free file (a killed supervisor) and unrelated files are ignored.
        fs::write(lock_path(ws.path(), 3), "{\"run\":\"dead\",\"pid\":1}\n").unwrap();
        fs::write(ws.path().join(LOCKS_DIR).join("notes.txt"), "x").unwrap();
        assert!(held_by(ws.path()).unwrap().is_empty());
        // A held file whose content is not a record: the holder is unknown.
        let path = lock_path(ws.path(), 4);
        let file = File::create(&path).unwrap();
        assert!(try_flock(&file, libc::LOCK_EX, 1, &path).unwrap());
        assert_eq!(
            holders(ws.path()).unwrap()[&4],
            Holder {
                run: "(unknown)".into(),
                pid: None
            }
        );
        // A lease takes over the stale file 3 and rewrites it.
        let lease = acquire(ws.path(), &[3], "run-new").unwrap().unwrap();
        assert_eq!(held_by(ws.path()).unwrap()[&3], "run-new");
        drop(lease);
    }

    /// Set in the child process of `a_killed_holder_releases_its_gpus`: the workspace to lock in.
    const CHILD_WS: &str = "DDP_DEVICES_TEST_LOCK_WS";

    /// Not a test on its own: the child process of `a_killed_holder_releases_its_gpus`, which
    /// takes GPUs 0 and 1 and sleeps until killed.
    #[test]
    #[ignore = "helper process for a_killed_holder_releases_its_gpus"]
    fn lease_holder_child() {
        let Some(ws) = std::env::var_os(CHILD_WS) else {
            return;
        };
        let lease = acquire(Path::new(&ws), &[0, 1], "child-run").unwrap();
        assert!(lease.is_some(), "the child could not take GPUs 0 and 1");
        println!("LEASED");
        std::thread::sleep(Duration::from_secs(30));
    }

    #[test]
    fn a_killed_holder_releases_its_gpus() {
        let ws = ws();
        // This test binary's own path to `lease_holder_child` (module path without the crate).
        let module = module_path!().split_once("::").unwrap().1;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                &format!("{module}::lease_holder_child"),
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_WS, ws.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        while let Some(Ok(line)) = lines.next() {
            // libtest prints the test's name on the same line.
            if line.ends_with("LEASED") {
                break;
            }
            seen.push(line);
        }
        let leased = held_by(ws.path()).unwrap();
        let other = acquire(ws.path(), &[1], "run-b").unwrap();
        child.kill().unwrap(); // SIGKILL: no destructor runs in the child
        child.wait().unwrap();
        assert_eq!(
            runs(leased),
            [(0, "child-run".to_string()), (1, "child-run".to_string())],
            "child output: {seen:?}"
        );
        assert!(other.is_none(), "GPU 1 was taken while the child held it");
        let holder = fs::read_to_string(lock_path(ws.path(), 1)).unwrap();
        assert!(holder.contains("child-run"), "{holder}"); // stale but ...
        assert!(held_by(ws.path()).unwrap().is_empty()); // ... not held
        let lease = acquire(ws.path(), &[0, 1], "run-b").unwrap();
        assert_eq!(lease.unwrap().gpus(), [0, 1]);
    }

    #[test]
    fn the_flock_command_sees_the_same_lock() {
        // Interoperates with util-linux `flock` (skipped where it is missing).
        let ws = ws();
        let lease = acquire(ws.path(), &[2], "run-a").unwrap().unwrap();
        let path = lock_path(ws.path(), 2);
        let status = match Command::new("flock")
            .args(["--nonblock", "--conflict-exit-code", "7"])
            .arg(&path)
            .arg("true")
            .status()
        {
            Ok(status) => status,
            Err(e) if e.kind() == ErrorKind::NotFound => return,
            Err(e) => panic!("flock: {e}"),
        };
        assert_eq!(status.code(), Some(7));
        drop(lease);
        let status = Command::new("flock")
            .args(["--nonblock", "--conflict-exit-code", "7"])
            .arg(&path)
            .arg("true")
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }
}
