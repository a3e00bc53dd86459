//! What ddp knows of one GPU ([`Gpu`]: its CUDA ordinal in this process and its NVML index) and
//! the name of the CUDA runtime's device filter, shared by discovery, `CUDA_VISIBLE_DEVICES`
//! parsing and placement.

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
