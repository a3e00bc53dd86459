//! The device queue: plan and lock until a run has its devices, and what its replicas are told.
//!
//! [`wait_for`] looks at the workspace's GPU locks, asks [`plan()`] where the
//! replicas should go and takes the locks; while the GPUs it needs are held by other runs it
//! reports that once (and again whenever who holds them changes) and polls, so the run stays
//! queued until they are free, it is cancelled, or a timeout passes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use ddp_trainer::spec::Devices;

use super::discover::Discovery;
use super::gpu::{CUDA_VISIBLE_DEVICES, Gpu};
use super::locks::{DeviceLease, acquire, held_by};
use super::plan::{DeviceRequest, Plan, plan, threads_per_replica};
use crate::error::Result;

/// The longest sleep between two looks at `cancelled`.
const CANCEL_CHECK: Duration = Duration::from_millis(50);

/// Where a run's replicas go, with the locks that keep other runs off its GPUs.
#[derive(Debug)]
pub enum Assignment {
    /// Every replica on the CPU; `note` says why when `ddp.devices = "auto"` chose it.
    Cpu {
        threads_per_replica: usize,
        note: Option<String>,
    },
    /// Replica r on `gpus[r]`; the GPUs stay the run's while `lease` lives.
    Gpus {
        gpus: Vec<Gpu>,
        threads_per_replica: usize,
        /// `CUDA_VISIBLE_DEVICES` for the replicas (see [`Assignment::replica_env`]).
        cuda_visible_devices: String,
        lease: DeviceLease,
    },
}

impl Assignment {
    /// CPU threads per replica (`LaunchOptions::threads_per_replica`).
    pub fn threads_per_replica(&self) -> usize {
        match self {
            Assignment::Cpu {
                threads_per_replica,
                ..
            }
            | Assignment::Gpus {
                threads_per_replica,
                ..
            } => *threads_per_replica,
        }
    }

    /// Variables for every replica (`LaunchOptions::env`), so that the trainer's own device
    /// choice lands where the plan says:
    /// - CPU: `CUDA_VISIBLE_DEVICES=""`, so `ddp.devices = "auto"` cannot pick a GPU anyway.
    /// - GPUs, `ddp.devices = "auto"`: exactly the run's GPUs, in replica order, so the trainer's
    ///   `auto` (CUDA ordinal = local rank) puts replica r on `gpus[r]`.
    /// - GPUs, a list: every GPU this process sees, in its order, so the list's ordinals mean in
    ///   the replicas what they meant here.
    ///
    /// GPUs are named by UUID (by index when simulated), with `CUDA_DEVICE_ORDER=PCI_BUS_ID` so
    /// that indices follow NVML's order, as discovery assumes.
    pub fn replica_env(&self) -> Vec<(String, String)> {
        match self {
            Assignment::Cpu { .. } => vec![(CUDA_VISIBLE_DEVICES.to_string(), String::new())],
            Assignment::Gpus {
                cuda_visible_devices,
                ..
            } => vec![
                ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
                (
                    CUDA_VISIBLE_DEVICES.to_string(),
                    cuda_visible_devices.clone(),
                ),
            ],
        }
    }

    /// One line for the run's log: "CPU, 4 threads per replica" or
    /// "GPUs 2 (NVIDIA H100), 3 (NVIDIA H100)".
    pub fn describe(&self) -> String {
        match self {
            Assignment::Cpu {
                threads_per_replica,
                note,
            } => {
                let mut text = format!("CPU, {threads_per_replica} thread(s) per replica");
                if let Some(note) = note {
                    text.push_str(&format!(" ({note})"));
                }
                text
            }
            Assignment::Gpus { gpus, .. } => {
                let list: Vec<String> = gpus
                    .iter()
                    .map(|g| format!("{} ({})", g.index, g.name))
                    .collect();
                format!("GPUs {}", list.join(", "))
            }
        }
    }
}

/// Why a run is still queued: the CUDA ordinals it waits for and the runs holding them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub busy: Vec<usize>,
    /// CUDA ordinal → run id, for the busy GPUs whose holder is known.
    pub holders: BTreeMap<usize, String>,
}

impl fmt::Display for Waiting {
    /// `waiting for GPUs [0, 1] held by run 0412-mnist` (or `by runs a, b`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs: BTreeSet<&str> = self.holders.values().map(String::as_str).collect();
        let runs: Vec<&str> = runs.into_iter().collect();
        write!(f, "waiting for GPUs {:?} held by ", self.busy)?;
        match runs.as_slice() {
            [] => write!(f, "other runs"),
            [run] => write!(f, "run {run}"),
            many => write!(f, "runs {}", many.join(", ")),
        }
    }
}

/// How [`wait_for`] polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitOptions {
    /// Time between two looks at the locks.
    pub poll: Duration,
    /// Give up after this long (`Some(Duration::ZERO)`: try once).
    pub timeout: Option<Duration>,
}

impl Default for WaitOptions {
    /// Every second, forever.
    fn default() -> Self {
        WaitOptions {
            poll: Duration::from_secs(1),
            timeout: None,
        }
    }
}

/// How [`wait_for`] ended.
#[derive(Debug)]
pub enum Waited {
    Assigned(Assignment),
    /// `cancelled` said so (before any GPU was taken).
    Cancelled,
    /// The timeout passed while still waiting.
    TimedOut(Waiting),
}

/// Plans and locks until `run_id` has its devices in workspace `ws_root`. `on_wait` hears why
/// the run waits, once per change of the busy GPUs or their holders; `cancelled` is asked
/// between polls (every 50 ms at least). Errors: the request cannot work on this machine
/// (see [`plan()`]) or the lock folder cannot be used.
#[allow(clippy::too_many_arguments)]
pub fn wait_for(
    ws_root: &Path,
    run_id: &str,
    request: &DeviceRequest,
    discovery: &Discovery,
    cores: usize,
    opts: &WaitOptions,
    mut on_wait: impl FnMut(&Waiting),
    mut cancelled: impl FnMut() -> bool,
) -> Result<Waited> {
    let start = Instant::now();
    let mut reported: Option<Waiting> = None;
    loop {
        if cancelled() {
            return Ok(Waited::Cancelled);
        }
        let mut held = held_ordinals(ws_root, discovery)?;
        let set: BTreeSet<usize> = held.keys().copied().collect();
        let busy = match plan(request, discovery, &set, cores)? {
            Plan::Cpu {
                threads_per_replica,
                note,
            } => {
                return Ok(Waited::Assigned(Assignment::Cpu {
                    threads_per_replica,
                    note,
                }));
            }
            Plan::Gpus(ordinals) => {
                let gpus: Vec<Gpu> = ordinals
                    .iter()
                    .map(|&i| discovery.gpus[i].clone())
                    .collect();
                let physical: Vec<usize> = gpus.iter().map(|g| g.physical).collect();
                match acquire(ws_root, &physical, run_id)? {
                    Some(lease) => {
                        return Ok(Waited::Assigned(Assignment::Gpus {
                            cuda_visible_devices: visible_for_replicas(request, discovery, &gpus),
                            gpus,
                            threads_per_replica: threads_per_replica(request, cores),
                            lease,
                        }));
                    }
                    // Another run took one of them since we looked: wait for it like any other.
                    None => {
                        held = held_ordinals(ws_root, discovery)?;
                        ordinals
                            .into_iter()
                            .filter(|i| held.contains_key(i))
                            .collect()
                    }
                }
            }
            Plan::Wait { busy } => busy,
        };
        let holders = held.into_iter().filter(|(i, _)| busy.contains(i)).collect();
        let waiting = Waiting { busy, holders };
        if !waiting.busy.is_empty() && reported.as_ref() != Some(&waiting) {
            on_wait(&waiting);
            reported = Some(waiting.clone());
        }
        let elapsed = start.elapsed();
        if opts.timeout.is_some_and(|t| elapsed >= t) {
            return Ok(Waited::TimedOut(waiting));
        }
        let mut pause = opts.poll;
        if let Some(t) = opts.timeout {
            pause = pause.min(t - elapsed);
        }
        let wake = Instant::now() + pause;
        while let Some(left) = wake
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        {
            if cancelled() {
                return Ok(Waited::Cancelled);
            }
            std::thread::sleep(left.min(CANCEL_CHECK));
        }
    }
}

/// The workspace's held GPUs that this process sees, by CUDA ordinal.
fn held_ordinals(ws_root: &Path, discovery: &Discovery) -> Result<BTreeMap<usize, String>> {
    Ok(held_by(ws_root)?
        .into_iter()
        .filter_map(|(physical, run)| Some((discovery.index_of_physical(physical)?, run)))
        .collect())
}

/// `CUDA_VISIBLE_DEVICES` for the replicas of a run placed on `gpus` (see
/// [`Assignment::replica_env`]).
fn visible_for_replicas(request: &DeviceRequest, discovery: &Discovery, gpus: &[Gpu]) -> String {
    let shown: &[Gpu] = match request.devices {
        Devices::Cuda(_) => &discovery.gpus,
        Devices::Named(_) => gpus,
    };
    let names: Vec<String> = shown
        .iter()
        .map(|g| {
            if discovery.simulated {
                g.physical.to_string()
            } else {
                g.uuid.clone()
            }
        })
        .collect();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::devices::discover::discover_with;
    use crate::engine::devices::locks::holders;
    use ddp_trainer::spec::DeviceKeyword;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    const AUTO: Devices = Devices::Named(DeviceKeyword::Auto);

    fn request(devices: Devices, replicas: usize) -> DeviceRequest {
        DeviceRequest {
            devices,
            replicas,
            threads: None,
        }
    }

    fn fast(timeout_ms: Option<u64>) -> WaitOptions {
        WaitOptions {
            poll: Duration::from_millis(10),
            timeout: timeout_ms.map(Duration::from_millis),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `wait_for` that records what it reported.
    fn wait(
        ws: &Path,
        run: &str,
        req: &DeviceRequest,
        d: &Discovery,
        opts: &WaitOptions,
    ) -> (Waited, Vec<String>) {
        let mut said = Vec::new();
        let waited = wait_for(
            ws,
            run,
            req,
            d,
            8,
            opts,
            |w| said.push(w.to_string()),
            || false,
        )
        .unwrap();
        (waited, said)
    }

    #[test]
    fn cpu_is_assigned_at_once_and_hides_gpus() {
        let ws = tempfile::tempdir().unwrap();
        let d = Discovery::none("no NVIDIA driver (libnvidia-ml.so.1 not found)");
        let (waited, said) = wait(ws.path(), "r1", &request(AUTO, 2), &d, &fast(None));
        let Waited::Assigned(a) = waited else {
            panic!("{waited:?}")
        };
        assert!(said.is_empty());
        assert_eq!(a.threads_per_replica(), 4);
        assert_eq!(a.replica_env(), env(&[("CUDA_VISIBLE_DEVICES", "")]));
        assert_eq!(
            a.describe(),
            "CPU, 4 thread(s) per replica (ddp.devices = \"auto\": no NVIDIA driver (libnvidia-ml.so.1 not found): running on CPU)"
        );
        // No lock was taken.
        assert!(!ws.path().join("locks").exists());
    }

    #[test]
    fn auto_locks_free_gpus_and_shows_replicas_only_theirs() {
        let ws = tempfile::tempdir().unwrap();
        // Seen through CUDA_VISIBLE_DEVICES=3,1,2: ordinal 0 is GPU 3, 1 is GPU 1, 2 is GPU 2.
        let d = discover_with(Some("4"), Some("3,1,2"), || unreachable!()).unwrap();
        let other = acquire(ws.path(), &[3], "other").unwrap().unwrap();
        let (waited, said) = wait(ws.path(), "mine", &request(AUTO, 2), &d, &fast(None));
        let Waited::Assigned(a) = waited else {
            panic!("{waited:?}")
        };
        assert!(said.is_empty());
        let Assignment::Gpus { gpus, lease, .. } = &a else {
            panic!("{a:?}")
        };
        let placed: Vec<(usize, usize)> = gpus.iter().map(|g| (g.index, g.physical)).collect();
        assert_eq!(placed, [(1, 1), (2, 2)]);
        assert_eq!(lease.gpus(), [1, 2]);
        assert_eq!(
            a.replica_env(),
            env(&[
                ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                ("CUDA_VISIBLE_DEVICES", "1,2")
            ])
        );
        assert_eq!(a.describe(), "GPUs 1 (Simulated GPU), 2 (Simulated GPU)");
        let holders = holders(ws.path()).unwrap();
        let runs: Vec<(usize, &str)> = holders.iter().map(|(g, h)| (*g, h.run.as_str())).collect();
        assert_eq!(runs, [(1, "mine"), (2, "mine"), (3, "other")]);
        drop(other);
    }

    #[test]
    fn replicas_see_gpus_by_uuid() {
        let ws = tempfile::tempdir().unwrap();
        let mut d = Discovery::simulated(3);
        d.simulated = false;
        for g in &mut d.gpus {
            g.uuid = format!("GPU-uuid{}", g.physical);
        }
        let req = request(AUTO, 1);
        let Waited::Assigned(a) = wait(ws.path(), "r", &req, &d, &fast(None)).0 else {
            panic!()
        };
        assert_eq!(a.replica_env()[1].1, "GPU-uuid0");
        drop(a);
        // A list keeps every GPU visible so that its ordinals keep their meaning.
        let req = request(Devices::Cuda(vec![2]), 1);
        let Waited::Assigned(a) = wait(ws.path(), "r", &req, &d, &fast(None)).0 else {
            panic!()
        };
        assert_eq!(a.replica_env()[1].1, "GPU-uuid0,GPU-uuid1,GPU-uuid2");
        assert_eq!(a.describe(), "GPUs 2 (Simulated GPU)");
    }

    #[test]
    fn a_queued_run_starts_when_the_gpus_are_released() {
        let ws = tempfile::tempdir().unwrap();
        let d = Discovery::simulated(2);
        let first = acquire(ws.path(), &[1], "0412-mnist").unwrap().unwrap();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            drop(first);
        });
        let t0 = Instant::now();
        let (waited, said) = wait(
            ws.path(),
            "second",
            &request(AUTO, 2),
            &d,
            &fast(Some(5000)),
        );
        releaser.join().unwrap();
        let Waited::Assigned(a) = waited else {
            panic!("{waited:?}")
        };
        assert!(t0.elapsed() >= Duration::from_millis(150));
        // Reported once, though it polled ~15 times.
        assert_eq!(said, ["waiting for GPUs [1] held by run 0412-mnist"]);
        let Assignment::Gpus { lease, .. } = a else {
            panic!()
        };
        assert_eq!(lease.gpus(), [0, 1]);
    }

    #[test]
    fn timeout_and_cancel() {
        let ws = tempfile::tempdir().unwrap();
        let d = Discovery::simulated(2);
        let _a = acquire(ws.path(), &[0], "run-a").unwrap().unwrap();
        let _b = acquire(ws.path(), &[1], "run-b").unwrap().unwrap();
        let list = request(Devices::Cuda(vec![1, 0]), 2);
        let t0 = Instant::now();
        let (waited, said) = wait(ws.path(), "c", &list, &d, &fast(Some(100)));
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(t0.elapsed() < Duration::from_secs(2));
        let Waited::TimedOut(w) = waited else {
            panic!("{waited:?}")
        };
        assert_eq!(w.busy, [0, 1]);
        assert_eq!(said, ["waiting for GPUs [0, 1] held by runs run-a, run-b"]);
        // Try once.
        let (waited, _) = wait(ws.path(), "c", &list, &d, &fast(Some(0)));
        assert!(matches!(waited, Waited::TimedOut(_)));

        // Cancelled from the callback's side (a stop request while queued).
        let stop = Arc::new(AtomicBool::new(false));
        let heard = Arc::new(Mutex::new(0));
        let t0 = Instant::now();
        let waited = wait_for(
            ws.path(),
            "c",
            &list,
            &d,
            8,
            &WaitOptions {
                poll: Duration::from_secs(30),
                timeout: None,
            },
            |_| {
                *heard.lock().unwrap() += 1;
                stop.store(true, Ordering::SeqCst);
            },
            || stop.load(Ordering::SeqCst),
        )
        .unwrap();
        assert!(matches!(waited, Waited::Cancelled));
        assert_eq!(*heard.lock().unwrap(), 1);
        // Cancelled within one check, not after the 30 s poll.
        assert!(t0.elapsed() < Duration::from_secs(1));
        // Nothing of the waiting run is held.
        let runs: BTreeSet<String> = held_by(ws.path()).unwrap().into_values().collect();
        assert_eq!(runs, ["run-a".to_string(), "run-b".to_string()].into());
    }

    #[test]
    fn impossible_requests_fail_at_once() {
        let ws = tempfile::tempdir().unwrap();
        let d = Discovery::simulated(2);
        let err = wait_for(
            ws.path(),
            "r",
            &request(Devices::Cuda(vec![0, 2]), 2),
            &d,
            8,
            &fast(None),
            |_| panic!("must not wait"),
            || false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ddp.devices asks for GPU 2 but this machine has GPUs 0-1"
        );
    }

    #[test]
    fn waiting_messages() {
        let w = |busy: Vec<usize>, holders: &[(usize, &str)]| {
            Waiting {
                busy,
                holders: holders.iter().map(|(g, r)| (*g, r.to_string())).collect(),
            }
            .to_string()
        };
        assert_eq!(
            w(vec![0, 1], &[(0, "x"), (1, "x")]),
            "waiting for GPUs [0, 1] held by run x"
        );
        assert_eq!(w(vec![2], &[]), "waiting for GPUs [2] held by other runs");
        assert_eq!(
            w(vec![0, 1], &[(0, "b"), (1, "a")]),
            "waiting for GPUs [0, 1] held by runs a, b"
        );
    }
}
