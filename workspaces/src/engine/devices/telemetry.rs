//! Device telemetry for a devices view: each GPU's utilisation, memory, temperature and power
//! with the run holding it, the CPU cores and memory, and the CPU time and memory of every
//! supervisor and replica of the workspace's live runs.
//!
//! A [`TelemetrySampler`] is made once and asked for a [`Telemetry`] now and then (every second
//! or so). Sampling never fails: whatever cannot be read is a `None` field or a note. GPUs come
//! from NVML (loaded at run time, opened once, reopened at most every [`NVML_RETRY`] after a
//! failure), all of the machine's GPUs by NVML index whatever `CUDA_VISIBLE_DEVICES` says;
//! without a driver there are none and [`Telemetry::gpu_note`] says why. With
//! `DDP_SIMULATED_GPUS=N` (or [`TelemetrySampler::with_simulated_gpus`]) there are N made-up GPUs
//! whose readings depend only on the GPU index and the sample's sequence number, so a UI can be
//! built and tested without hardware. CPU and memory come from `/proc`; CPU percentages are over
//! the time since the previous sample ([`Telemetry::interval_s`]).
//!
//! Which process belongs to which run comes from the runs' records ([`process_owners`]); which
//! run holds which GPU from the workspace's GPU locks ([`held_by`]).
//!
//! Layout:
//! - this file: [`process_owners`] and the [`TelemetrySampler`].
//! - `readings`: the readings ([`Telemetry`] and its parts, [`Owner`], [`ProcessOwners`]),
//!   imported by the other parts; it imports none of them.
//! - `procfs`: pure parsers of `/proc/stat`, `/proc/meminfo`, `/proc/PID/{stat,statm,cmdline}`
//!   and their readers.
//! - `gpu`: NVML readings (retried every [`NVML_RETRY`]) and simulated GPUs.
//! - `history`: [`History`] (a ring buffer for sparklines) and [`TelemetryHistory`].

pub mod history;
pub mod procfs;

mod gpu;
mod readings;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use self::gpu::GpuSource;
use self::procfs::CpuStat;
use crate::engine::devices::discover::{NVML_LIB, SIMULATED_GPUS_VAR};
use crate::engine::devices::locks::held_by;
use crate::runs::run::{Run, RunStatus};

pub use gpu::NVML_RETRY;
pub use history::{GpuHistory, History, TelemetryHistory};
pub use readings::{
    CpuSample, GpuProcess, GpuSample, MemorySample, Owner, ProcessOwners, ProcessSample, Telemetry,
};

/// The processes of the runs that are not over: each one's supervisor and, unless it is queued,
/// its replicas (`replica_pids`, the current attempt's). Records are trusted as they are: runs
/// read with [`Workspace::runs`](crate::Workspace::runs) have had dead supervisors marked failed,
/// and the sampler leaves out a recorded replica pid whose parent is not the run's supervisor
/// (the pid was reused).
pub fn process_owners(runs: &[Run]) -> ProcessOwners {
    let mut owners = ProcessOwners::new();
    for run in runs.iter().filter(|r| !r.record.status.is_terminal()) {
        let record = &run.record;
        let owner = |rank| Owner {
            run_id: record.id.clone(),
            experiment: record.experiment.clone(),
            rank,
        };
        if let Some(supervisor) = &record.supervisor {
            owners.insert(supervisor.pid, owner(None));
        }
        if record.status != RunStatus::Queued {
            for (&rank, &pid) in &record.replica_pids {
                owners.insert(pid, owner(Some(rank)));
            }
        }
    }
    owners
}

/// Takes [`Telemetry`] samples, keeping what the next one needs: the previous CPU counters, the
/// NVML handle.
pub struct TelemetrySampler {
    ws_root: Option<PathBuf>,
    gpus: GpuSource,
    sequence: u64,
    nvml_init_attempts: u32,
    clock_ticks: f64,
    previous_at: Instant,
    previous_cpu: Option<CpuStat>,
    previous_processes: HashMap<u32, ProcessTicks>,
}

/// A process's CPU time when last seen.
struct ProcessTicks {
    start_ticks: u64,
    cpu_ticks: u64,
    at: Instant,
}

impl TelemetrySampler {
    /// A sampler for the workspace at `ws_root` (GPU locks are looked up there; `None`: no
    /// `held_by`). GPUs: `DDP_SIMULATED_GPUS` if set (a value that is not a number gives no GPUs
    /// and a note), else NVML, opened at the first sample. Reads the CPU counters, so the first
    /// sample measures from now.
    pub fn new(ws_root: Option<PathBuf>) -> Self {
        let simulated = std::env::var_os(SIMULATED_GPUS_VAR);
        let simulated = simulated.as_ref().map(|v| v.to_string_lossy());
        TelemetrySampler {
            ws_root,
            gpus: GpuSource::from_env(simulated.as_deref(), NVML_LIB),
            sequence: 0,
            nvml_init_attempts: 0,
            clock_ticks: procfs::clock_ticks_per_second() as f64,
            previous_at: Instant::now(),
            previous_cpu: procfs::read_cpu_stat().ok(),
            previous_processes: HashMap::new(),
        }
    }

    /// `n` simulated GPUs instead of NVML (what `DDP_SIMULATED_GPUS=n` gives).
    pub fn with_simulated_gpus(mut self, n: usize) -> Self {
        self.gpus = GpuSource::Simulated(n);
        self
    }

    /// NVML loaded from `lib` (a file name searched like `dlopen` does, or a path) instead of
    /// `DDP_SIMULATED_GPUS` and the default `libnvidia-ml.so.1`.
    pub fn with_nvml_library(mut self, lib: impl Into<OsString>) -> Self {
        self.gpus = GpuSource::nvml(lib);
        self
    }

    /// The workspace whose GPU locks are read.
    pub fn workspace(&self) -> Option<&Path> {
        self.ws_root.as_deref()
    }

    /// Reads everything once. `owners` says which processes to follow and whose GPU processes
    /// are (see [`process_owners`]).
    pub fn sample(&mut self, owners: &ProcessOwners) -> Telemetry {
        let now = Instant::now();
        let interval_s = now.duration_since(self.previous_at).as_secs_f64();
        self.previous_at = now;
        let mut notes = Vec::new();

        let cpu = match procfs::read_cpu_stat() {
            Ok(stat) => {
                let since = self.previous_cpu.take().unwrap_or_default();
                let (per_core_pct, total_pct) = stat.utilization_since(&since);
                self.previous_cpu = Some(stat);
                CpuSample {
                    per_core_pct,
                    total_pct,
                }
            }
            Err(e) => {
                notes.push(e.to_string());
                CpuSample::default()
            }
        };
        let memory = match procfs::read_meminfo() {
            Ok((total_bytes, available_bytes)) => MemorySample {
                total_bytes,
                available_bytes,
            },
            Err(e) => {
                notes.push(e.to_string());
                MemorySample::default()
            }
        };
        let processes = self.sample_processes(owners, &mut notes);

        let (mut gpus, gpu_note) =
            self.gpus
                .sample(self.sequence, owners, &mut self.nvml_init_attempts);
        if let (Some(root), false) = (&self.ws_root, gpus.is_empty()) {
            match held_by(root) {
                Ok(held) => {
                    for gpu in &mut gpus {
                        gpu.held_by = held.get(&gpu.index).cloned();
                    }
                }
                Err(e) => notes.push(format!("GPU locks: {e}")),
            }
        }
        self.sequence += 1;
        Telemetry {
            time: crate::runs::run::now(),
            interval_s,
            gpus,
            gpu_note,
            cpu,
            memory,
            processes,
            notes,
        }
    }

    fn sample_processes(
        &mut self,
        owners: &ProcessOwners,
        notes: &mut Vec<String>,
    ) -> Vec<ProcessSample> {
        let supervisors: HashMap<&str, u32> = owners
            .iter()
            .filter(|(_, owner)| owner.rank.is_none())
            .map(|(pid, owner)| (owner.run_id.as_str(), *pid))
            .collect();
        let mut seen = HashMap::with_capacity(owners.len());
        let mut samples = Vec::with_capacity(owners.len());
        for (&pid, owner) in owners {
            let stat = match procfs::read_pid_stat(pid) {
                Ok(Some(stat)) if !matches!(stat.state, 'Z' | 'X') => stat,
                Ok(_) => continue, // gone, or dead and not yet reaped
                Err(e) => {
                    notes.push(e.to_string());
                    continue;
                }
            };
            let supervisor = supervisors.get(owner.run_id.as_str());
            if owner.rank.is_some() && supervisor.is_some_and(|&s| s != stat.ppid) {
                continue; // the replica is gone and its pid belongs to someone else now
            }
            let at = Instant::now();
            let cpu_pct = self
                .previous_processes
                .get(&pid)
                .filter(|before| before.start_ticks == stat.start_ticks)
                .and_then(|before| {
                    let wall = at.duration_since(before.at).as_secs_f64();
                    let ticks = stat.cpu_ticks.saturating_sub(before.cpu_ticks) as f64;
                    (wall > 0.0).then(|| ticks / (wall * self.clock_ticks) * 100.0)
                });
            seen.insert(
                pid,
                ProcessTicks {
                    start_ticks: stat.start_ticks,
                    cpu_ticks: stat.cpu_ticks,
                    at,
                },
            );
            let rss_bytes = procfs::read_rss_bytes(pid).unwrap_or_else(|e| {
                notes.push(e.to_string());
                None
            });
            let command = match procfs::read_cmdline(pid) {
                Ok(Some(line)) if !line.is_empty() => line,
                Ok(_) => format!("[{}]", stat.comm),
                Err(e) => {
                    notes.push(e.to_string());
                    format!("[{}]", stat.comm)
                }
            };
            samples.push(ProcessSample {
                pid,
                owner: owner.clone(),
                cpu_pct,
                rss_bytes,
                command,
            });
        }
        self.previous_processes = seen;
        samples.sort_by(|a, b| (&a.owner, a.pid).cmp(&(&b.owner, b.pid)));
        samples
    }
}

impl std::fmt::Debug for TelemetrySampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetrySampler")
            .field("ws_root", &self.ws_root)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
