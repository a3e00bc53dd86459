//! One reading of the machine ([`Telemetry`]): the GPUs, CPU and memory, and the processes of the
//! workspace's runs with the run and rank each belongs to ([`Owner`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One reading of the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Telemetry {
    /// Unix seconds.
    pub time: f64,
    /// Seconds since the previous sample (or since the sampler was made): the window CPU
    /// percentages are measured over.
    pub interval_s: f64,
    /// The machine's GPUs by NVML index (or the simulated ones).
    pub gpus: Vec<GpuSample>,
    /// Why there are no GPUs (no driver, NVML reports none), that they are simulated, or what
    /// NVML could not read.
    pub gpu_note: Option<String>,
    pub cpu: CpuSample,
    pub memory: MemorySample,
    /// The processes of the owners given to
    /// [`TelemetrySampler::sample`](super::TelemetrySampler::sample) that still exist, by run id,
    /// then supervisor before ranks.
    pub processes: Vec<ProcessSample>,
    /// Anything else that could not be read (each names the file).
    pub notes: Vec<String>,
}

/// One GPU. Readings NVML cannot give (not supported, no permission) are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML index (what `nvidia-smi` and lock files use).
    pub index: usize,
    pub uuid: Option<String>,
    pub name: String,
    /// Percent of the last sample period (1/6 s to 1 s, by product) a kernel was running.
    pub utilization_pct: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_c: Option<f64>,
    /// Power draw, watts.
    pub power_w: Option<f64>,
    /// The enforced power limit, watts.
    pub power_limit_w: Option<f64>,
    /// Compute and graphics processes using the GPU (none for simulated GPUs).
    pub processes: Vec<GpuProcess>,
    /// The run holding the GPU's lock in the workspace, if any.
    pub held_by: Option<String>,
}

impl GpuSample {
    /// A GPU nothing could be read from.
    pub(super) fn unread(index: usize, name: String) -> Self {
        GpuSample {
            index,
            uuid: None,
            name,
            utilization_pct: None,
            memory_used_bytes: None,
            memory_total_bytes: None,
            temperature_c: None,
            power_w: None,
            power_limit_w: None,
            processes: Vec::new(),
            held_by: None,
        }
    }
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// GPU memory it uses (`None` where the driver does not say).
    pub used_bytes: Option<u64>,
    /// The run and rank it belongs to, when it is one of the workspace's.
    pub owner: Option<Owner>,
}

/// CPU utilisation over [`Telemetry::interval_s`], percent of each core's time.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuSample {
    /// One entry per online core (empty when `/proc/stat` cannot be read).
    pub per_core_pct: Vec<f64>,
    /// All cores together (100 = every core busy).
    pub total_pct: f64,
}

/// The machine's memory (zero when `/proc/meminfo` cannot be read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemorySample {
    pub total_bytes: u64,
    /// What new programs can still get without swapping (`MemAvailable`).
    pub available_bytes: u64,
}

impl MemorySample {
    /// `total - available`.
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.available_bytes)
    }

    /// Used memory, percent of total (0 when the total is unknown).
    pub fn used_pct(&self) -> f64 {
        if self.total_bytes == 0 {
            return 0.0;
        }
        self.used_bytes() as f64 / self.total_bytes as f64 * 100.0
    }
}

/// A supervisor or replica process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub pid: u32,
    pub owner: Owner,
    /// Percent of one core over the time since the previous sample that saw it (`None` the
    /// first time: CPU time needs two readings). A process using 4 cores shows 400.
    pub cpu_pct: Option<f64>,
    /// Resident memory.
    pub rss_bytes: Option<u64>,
    /// The command line, or `[comm]` when it has none.
    pub command: String,
}

/// Whose process it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Owner {
    pub run_id: String,
    pub experiment: String,
    /// The replica's rank; `None` for the run's supervisor.
    pub rank: Option<usize>,
}

impl Owner {
    /// `rank 2` or `supervisor`.
    pub fn role(&self) -> String {
        match self.rank {
            Some(rank) => format!("rank {rank}"),
            None => "supervisor".to_string(),
        }
    }
}

/// Process id → owner.
pub type ProcessOwners = BTreeMap<u32, Owner>;
