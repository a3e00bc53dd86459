//! Per-GPU locks, so that runs of one workspace (each its own supervisor process) never share a
//! GPU.
//!
//! GPU `N` (its NVML index, the number `nvidia-smi` shows, whatever `CUDA_VISIBLE_DEVICES` says)
//! is held while some process holds the lock file `<workspace>/locks/gpu-N.lock`
//! ([`crate::files::lockfile`]), through a [`DeviceLease`]: dropping the lease releases it, and so does
//! the death of the process, so a lost supervisor never leaks a GPU. Replicas the supervisor
//! spawns do not inherit it (they die with the supervisor anyway, through the launcher's
//! parent-death signal).
//! [`acquire`] is all-or-nothing (it holds no GPU unless it got all of them), so two runs that
//! want overlapping GPUs cannot each hold half and wait for the other.

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::files::lockfile::{self, Holder, LOCKS_DIR, LockFile};

/// `<workspace>/locks/gpu-N.lock`.
pub fn lock_path(ws_root: &Path, physical: usize) -> PathBuf {
    lockfile::lock_path(ws_root, &format!("gpu-{physical}.lock"))
}

/// The GPUs (NVML indices) a run holds; dropping it releases them.
#[derive(Debug)]
pub struct DeviceLease {
    run_id: String,
    held: Vec<(usize, LockFile)>,
}

impl DeviceLease {
    /// The NVML indices held, ascending.
    pub fn gpus(&self) -> Vec<usize> {
        self.held.iter().map(|(gpu, _)| *gpu).collect()
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
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
    let holder = Holder::this_process(run_id);
    let mut held = Vec::with_capacity(sorted.len());
    for gpu in sorted {
        match lockfile::try_lock(&lock_path(ws_root, gpu), Some(&holder))? {
            Some(lock) => held.push((gpu, lock)),
            None => return Ok(None), // `held` drops: the GPUs taken so far are released
        }
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
        if let Some(holder) = lockfile::holder(&entry.path())? {
            found.insert(gpu, holder);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Duration;

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
        fs::write(&path, "").unwrap();
        let _held = lockfile::try_lock(&path, None).unwrap().unwrap();
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
