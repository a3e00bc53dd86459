//! GPU readings: NVML (opened once, loaded at run time; retried at most every
//! [`NVML_RETRY`] after a failure) or `DDP_SIMULATED_GPUS` (made-up,
//! deterministic readings).

use std::ffi::OsString;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;

use super::readings::{GpuProcess, GpuSample, ProcessOwners};
use crate::engine::devices::discover::{SIMULATED_GPUS_VAR, nvml_unavailable};

/// How long a sampler waits before trying NVML again after it failed to start.
pub const NVML_RETRY: Duration = Duration::from_secs(30);

/// Where GPU readings come from.
pub(super) enum GpuSource {
    /// `n` simulated GPUs.
    Simulated(usize),
    /// A `DDP_SIMULATED_GPUS` that is not a number: no GPUs, and this note.
    Invalid(String),
    /// NVML loaded from `lib`.
    Nvml { lib: OsString, state: NvmlState },
}

pub(super) enum NvmlState {
    NotTried,
    Ready(Box<Nvml>),
    Failed { note: String, retry_at: Instant },
}

impl GpuSource {
    /// From the value of `DDP_SIMULATED_GPUS` (unset or empty: NVML from `lib`).
    pub(super) fn from_env(simulated: Option<&str>, lib: &str) -> GpuSource {
        match simulated.map(str::trim).filter(|s| !s.is_empty()) {
            None => GpuSource::nvml(lib),
            Some(text) => match text.parse() {
                Ok(n) => GpuSource::Simulated(n),
                Err(_) => GpuSource::Invalid(format!(
                    "{SIMULATED_GPUS_VAR}={text:?}: expected a number of GPUs (0 or more)"
                )),
            },
        }
    }

    pub(super) fn nvml(lib: impl Into<OsString>) -> GpuSource {
        GpuSource::Nvml {
            lib: lib.into(),
            state: NvmlState::NotTried,
        }
    }

    /// The GPUs' readings (`held_by` left empty) and a note on anything missing.
    /// `sequence` numbers the sample (it drives the simulated readings).
    pub(super) fn sample(
        &mut self,
        sequence: u64,
        owners: &ProcessOwners,
        init_attempts: &mut u32,
    ) -> (Vec<GpuSample>, Option<String>) {
        match self {
            GpuSource::Simulated(n) => (
                (0..*n).map(|i| simulated(i, sequence)).collect(),
                Some(format!(
                    "simulated: {n} GPU(s) from {SIMULATED_GPUS_VAR} (NVML not used)"
                )),
            ),
            GpuSource::Invalid(note) => (Vec::new(), Some(note.clone())),
            GpuSource::Nvml { lib, state } => {
                let retry = match state {
                    NvmlState::NotTried => true,
                    NvmlState::Failed { retry_at, .. } => Instant::now() >= *retry_at,
                    NvmlState::Ready(_) => false,
                };
                if retry {
                    *init_attempts += 1;
                    *state = match Nvml::builder().lib_path(lib.as_os_str()).init() {
                        Ok(nvml) => NvmlState::Ready(Box::new(nvml)),
                        Err(e) => NvmlState::Failed {
                            note: nvml_unavailable(&lib.to_string_lossy(), &e),
                            retry_at: Instant::now() + NVML_RETRY,
                        },
                    };
                }
                match state {
                    NvmlState::Ready(nvml) => sample_nvml(nvml, owners),
                    NvmlState::Failed { note, .. } => (Vec::new(), Some(note.clone())),
                    NvmlState::NotTried => unreachable!("NVML was just tried"),
                }
            }
        }
    }
}

/// Every GPU NVML reports, by NVML index (not filtered by `CUDA_VISIBLE_DEVICES`).
fn sample_nvml(nvml: &Nvml, owners: &ProcessOwners) -> (Vec<GpuSample>, Option<String>) {
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => return (Vec::new(), Some(format!("NVML cannot count the GPUs: {e}"))),
    };
    let mut problems = Vec::new();
    let mut gpus = Vec::with_capacity(count as usize);
    for i in 0..count {
        let device = match nvml.device_by_index(i) {
            Ok(device) => device,
            Err(e) => {
                problems.push(format!("NVML cannot read GPU {i}: {e}"));
                gpus.push(GpuSample::unread(i as usize, "unknown GPU".into()));
                continue;
            }
        };
        let memory = device.memory_info().ok();
        let mut processes: Vec<GpuProcess> = Vec::new();
        let compute = device.running_compute_processes().unwrap_or_default();
        let graphics = device.running_graphics_processes().unwrap_or_default();
        for p in compute.into_iter().chain(graphics) {
            if processes.iter().any(|q| q.pid == p.pid) {
                continue;
            }
            processes.push(GpuProcess {
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
                owner: owners.get(&p.pid).cloned(),
            });
        }
        gpus.push(GpuSample {
            index: i as usize,
            uuid: device.uuid().ok(),
            name: device.name().unwrap_or_else(|_| "unknown GPU".into()),
            utilization_pct: device.utilization_rates().ok().map(|u| f64::from(u.gpu)),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            temperature_c: device
                .temperature(TemperatureSensor::Gpu)
                .ok()
                .map(f64::from),
            power_w: device.power_usage().ok().map(milliwatts),
            power_limit_w: device.enforced_power_limit().ok().map(milliwatts),
            processes,
            held_by: None,
        });
    }
    let note = match (count, problems.is_empty()) {
        (0, _) => Some("NVML reports no GPUs".to_string()),
        (_, true) => None,
        (_, false) => Some(problems.join("; ")),
    };
    (gpus, note)
}

fn milliwatts(mw: u32) -> f64 {
    f64::from(mw) / 1000.0
}

/// Total memory of a simulated GPU: 80 GiB.
pub(super) const SIMULATED_MEMORY_BYTES: u64 = 80 << 30;
/// Power limit of a simulated GPU, watts.
pub(super) const SIMULATED_POWER_LIMIT_W: f64 = 700.0;

/// Simulated GPU `index` at sample `sequence`: utilisation follows a slow wave (5–95 %, each
/// GPU out of phase), and memory, temperature and power follow the utilisation.
fn simulated(index: usize, sequence: u64) -> GpuSample {
    let phase = sequence as f64 * 0.4 + index as f64 * 1.3;
    let util = (50.0 + 45.0 * phase.sin()).round();
    let memory_used = ((0.2 + 0.006 * util) * (SIMULATED_MEMORY_BYTES >> 20) as f64) as u64;
    GpuSample {
        index,
        uuid: Some(format!("GPU-00000000-0000-0000-0000-{index:012}")),
        name: "Simulated GPU".to_string(),
        utilization_pct: Some(util),
        memory_used_bytes: Some(memory_used << 20),
        memory_total_bytes: Some(SIMULATED_MEMORY_BYTES),
        temperature_c: Some((35.0 + 0.45 * util).round()),
        power_w: Some((60.0 + 6.0 * util).round()),
        power_limit_w: Some(SIMULATED_POWER_LIMIT_W),
        processes: Vec::new(),
        held_by: None,
    }
}
