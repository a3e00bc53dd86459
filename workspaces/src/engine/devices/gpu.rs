//! What ddp knows of one GPU ([`Gpu`]: its CUDA ordinal in this process and its NVML index) and
//! the name of the CUDA runtime's device filter, shared by discovery, `CUDA_VISIBLE_DEVICES`
//! parsing and placement; `gpu_range` words a number of GPUs for their messages.

/// The CUDA runtime's device filter, honoured by [`discover()`](super::discover::discover).
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// One GPU this process may use.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gpu {
    /// CUDA ordinal in this process (its position in `CUDA_VISIBLE_DEVICES`, else the NVML
    /// index): the numbers `ddp.devices` lists.
    pub index: usize,
    /// NVML index, the number `nvidia-smi` shows (PCI bus order), the same whatever
    /// `CUDA_VISIBLE_DEVICES` says: lock files are named after it.
    pub physical: usize,
    /// `GPU-8c7b...`.
    pub uuid: String,
    pub name: String,
    /// Total memory in MiB (0 for simulated GPUs).
    pub memory_total_mb: u64,
}

/// The CUDA ordinals of `n` GPUs in words: "GPUs 0-3", "GPU 0", "no GPUs".
pub(crate) fn gpu_range(n: usize) -> String {
    match n {
        0 => "no GPUs".to_string(),
        1 => "GPU 0".to_string(),
        _ => format!("GPUs 0-{}", n - 1),
    }
}
