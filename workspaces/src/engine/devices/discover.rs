//! The GPUs this process may use: NVML (loaded at run time, so a machine without the NVIDIA
//! driver simply has none) or `DDP_SIMULATED_GPUS=N`, then filtered by `CUDA_VISIBLE_DEVICES`.
//!
//! Discovery never fails because a GPU is missing: no driver, no NVML or no GPU gives an empty
//! list and a one-line [`Discovery::note`]. It fails only on settings that are wrong
//! (`CUDA_VISIBLE_DEVICES` naming a GPU that does not exist, `DDP_SIMULATED_GPUS=two`).

use std::ffi::OsStr;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::gpu::{CUDA_VISIBLE_DEVICES, Gpu, gpu_range};
use super::visible::apply_visible;
use crate::error::{Error, Result};

/// `DDP_SIMULATED_GPUS=N`: report N fake GPUs without asking NVML (tests, CPU-only machines).
pub const SIMULATED_GPUS_VAR: &str = "DDP_SIMULATED_GPUS";
/// The library NVML is loaded from (nvml-wrapper's default on Linux).
pub(crate) const NVML_LIB: &str = "libnvidia-ml.so.1";

/// What [`discover()`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Discovery {
    /// The usable GPUs, in CUDA ordinal order (`gpus[i].index == i`).
    pub gpus: Vec<Gpu>,
    /// One line on how the list came about when it is not simply "NVML's GPUs": no driver,
    /// no GPU, hidden by `CUDA_VISIBLE_DEVICES`, simulated.
    pub note: Option<String>,
    /// The GPUs come from `DDP_SIMULATED_GPUS`: replicas are pointed at them by index, not UUID.
    pub simulated: bool,
    /// The `CUDA_VISIBLE_DEVICES` value applied, if any (for messages).
    pub cuda_visible_devices: Option<String>,
}

impl Discovery {
    /// No GPU, for the reason given.
    pub fn none(note: impl Into<String>) -> Self {
        Discovery {
            gpus: Vec::new(),
            note: Some(note.into()),
            simulated: false,
            cuda_visible_devices: None,
        }
    }

    /// `n` simulated GPUs (what `DDP_SIMULATED_GPUS=n` gives).
    pub fn simulated(n: usize) -> Self {
        Discovery {
            gpus: simulated_gpus(n),
            note: Some(format!(
                "simulated: {n} GPU(s) from {SIMULATED_GPUS_VAR} (NVML not used)"
            )),
            simulated: true,
            cuda_visible_devices: None,
        }
    }

    /// The GPU with this CUDA ordinal.
    pub fn gpu(&self, index: usize) -> Option<&Gpu> {
        self.gpus.get(index)
    }

    /// The CUDA ordinal of the GPU with this NVML index, if it is visible.
    pub fn index_of_physical(&self, physical: usize) -> Option<usize> {
        self.gpus
            .iter()
            .find(|g| g.physical == physical)
            .map(|g| g.index)
    }

    /// "GPUs 0-3", "GPU 0", "no GPUs (why)": for messages about what exists.
    pub fn describe(&self) -> String {
        let mut text = gpu_range(self.gpus.len());
        if self.gpus.is_empty() {
            if let Some(note) = &self.note {
                text.push_str(&format!(" ({note})"));
            }
        } else if let Some(cvd) = &self.cuda_visible_devices {
            text.push_str(&format!(" ({CUDA_VISIBLE_DEVICES}={cvd:?})"));
        }
        text
    }
}

/// The GPUs of this machine as the process environment allows: `DDP_SIMULATED_GPUS`, else NVML;
/// then `CUDA_VISIBLE_DEVICES`.
pub fn discover() -> Result<Discovery> {
    let simulated = env_string(SIMULATED_GPUS_VAR)?;
    let cvd = env_string(CUDA_VISIBLE_DEVICES)?;
    discover_with(simulated.as_deref(), cvd.as_deref(), || {
        probe_nvml(NVML_LIB)
    })
}

/// What asking NVML gave: the GPUs in NVML order (`index == physical`), or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Found(Vec<Gpu>),
    Unavailable(String),
}

/// [`discover()`] with the environment as parameters and NVML behind `probe` (not called when
/// `simulated` is set).
pub fn discover_with(
    simulated: Option<&str>,
    cuda_visible_devices: Option<&str>,
    probe: impl FnOnce() -> Probe,
) -> Result<Discovery> {
    let (all, note, is_simulated) = match simulated.map(str::trim).filter(|s| !s.is_empty()) {
        Some(text) => {
            let n: usize = text.parse().map_err(|_| {
                Error::Invalid(format!(
                    "{SIMULATED_GPUS_VAR}={text:?}: expected a number of GPUs (0 or more)"
                ))
            })?;
            let sim = Discovery::simulated(n);
            (sim.gpus, sim.note, true)
        }
        None => match probe() {
            Probe::Found(gpus) if gpus.is_empty() => {
                (gpus, Some("NVML reports no GPUs".to_string()), false)
            }
            Probe::Found(gpus) => (gpus, None, false),
            Probe::Unavailable(why) => return Ok(Discovery::none(why)),
        },
    };
    // Without any GPU there is nothing to filter (and nothing to check the entries against).
    let Some(cvd) = cuda_visible_devices.filter(|_| !all.is_empty()) else {
        return Ok(Discovery {
            gpus: all,
            note,
            simulated: is_simulated,
            cuda_visible_devices: None,
        });
    };
    let gpus = apply_visible(&all, cvd)?;
    let note = if gpus.is_empty() {
        Some(format!(
            "{CUDA_VISIBLE_DEVICES}={cvd:?} hides all {} GPU(s)",
            all.len()
        ))
    } else {
        note
    };
    Ok(Discovery {
        gpus,
        note,
        simulated: is_simulated,
        cuda_visible_devices: Some(cvd.to_string()),
    })
}

/// `n` fake GPUs, UUIDs `GPU-00000000-0000-0000-0000-00000000000i`.
fn simulated_gpus(n: usize) -> Vec<Gpu> {
    (0..n)
        .map(|i| Gpu {
            index: i,
            physical: i,
            uuid: format!("GPU-00000000-0000-0000-0000-{i:012}"),
            name: "Simulated GPU".to_string(),
            memory_total_mb: 0,
        })
        .collect()
}

/// The GPUs NVML (loaded from `lib`) reports.
pub fn probe_nvml(lib: &str) -> Probe {
    let nvml = match Nvml::builder().lib_path(OsStr::new(lib)).init() {
        Ok(nvml) => nvml,
        Err(e) => return Probe::Unavailable(nvml_unavailable(lib, &e)),
    };
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => return Probe::Unavailable(format!("NVML cannot count the GPUs: {e}")),
    };
    let mut gpus = Vec::with_capacity(count as usize);
    for i in 0..count {
        let read = nvml.device_by_index(i).and_then(|device| {
            let uuid = device.uuid()?;
            let name = device.name().unwrap_or_else(|_| "unknown GPU".to_string());
            let memory_total_mb = device
                .memory_info()
                .map(|m| m.total / (1024 * 1024))
                .unwrap_or(0);
            Ok((uuid, name, memory_total_mb))
        });
        match read {
            Ok((uuid, name, memory_total_mb)) => gpus.push(Gpu {
                index: i as usize,
                physical: i as usize,
                uuid,
                name,
                memory_total_mb,
            }),
            // Skipping it would shift every later CUDA ordinal: better no GPU than wrong ones.
            Err(e) => return Probe::Unavailable(format!("NVML cannot read GPU {i}: {e}")),
        }
    }
    Probe::Found(gpus)
}

/// One line on why NVML could not start.
pub(crate) fn nvml_unavailable(lib: &str, e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(load) => {
            let text = load.to_string();
            if text.contains("No such file") || text.contains("cannot open shared object") {
                format!("no NVIDIA driver ({lib} not found)")
            } else {
                format!("no NVIDIA driver ({lib} could not be loaded: {text})")
            }
        }
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        NvmlError::NoPermission => "NVML has no permission to talk to the driver".to_string(),
        NvmlError::FailedToLoadSymbol(symbol) => {
            format!("{lib} is too old (missing {symbol})")
        }
        other => format!("NVML failed to start: {other}"),
    }
}

/// An environment variable as text; unset → `None`; not UTF-8 → an error naming it.
fn env_string(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(value)) => Err(Error::Invalid(format!(
            "{name}={value:?} is not valid UTF-8"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(n: usize) -> Vec<Gpu> {
        (0..n)
            .map(|i| Gpu {
                index: i,
                physical: i,
                uuid: format!("GPU-{i}a{i}b-real"),
                name: "NVIDIA H100".to_string(),
                memory_total_mb: 81559,
            })
            .collect()
    }

    fn no_probe() -> Probe {
        panic!("NVML must not be asked")
    }

    #[test]
    fn simulated_gpus_skip_nvml() {
        let d = discover_with(Some("2"), None, no_probe).unwrap();
        assert!(d.simulated);
        assert_eq!(d.gpus.len(), 2);
        assert_eq!(d.gpus[1].index, 1);
        assert_eq!(d.gpus[1].physical, 1);
        assert_eq!(d.gpus[1].uuid, "GPU-00000000-0000-0000-0000-000000000001");
        assert_eq!(d.gpus[1].name, "Simulated GPU");
        assert_eq!(
            d.note.as_deref(),
            Some("simulated: 2 GPU(s) from DDP_SIMULATED_GPUS (NVML not used)")
        );
        assert_eq!(d.describe(), "GPUs 0-1");
        // Zero simulated GPUs is a CPU-only machine.
        let d = discover_with(Some(" 0 "), None, no_probe).unwrap();
        assert!(d.gpus.is_empty());
        assert_eq!(
            d.describe(),
            "no GPUs (simulated: 0 GPU(s) from DDP_SIMULATED_GPUS (NVML not used))"
        );
    }

    #[test]
    fn simulated_gpus_honour_cuda_visible_devices() {
        let d = discover_with(Some("4"), Some("3,1"), no_probe).unwrap();
        let pairs: Vec<_> = d.gpus.iter().map(|g| (g.index, g.physical)).collect();
        assert_eq!(pairs, [(0, 3), (1, 1)]);
        assert_eq!(d.index_of_physical(1), Some(1));
        assert_eq!(d.index_of_physical(0), None);
        assert_eq!(d.describe(), "GPUs 0-1 (CUDA_VISIBLE_DEVICES=\"3,1\")");
        let d = discover_with(
            Some("4"),
            Some("GPU-00000000-0000-0000-0000-000000000002"),
            no_probe,
        )
        .unwrap();
        assert_eq!(d.gpus[0].physical, 2);
    }

    #[test]
    fn bad_simulated_count_is_an_error() {
        let err = discover_with(Some("two"), None, no_probe).unwrap_err();
        assert_eq!(
            err.to_string(),
            "DDP_SIMULATED_GPUS=\"two\": expected a number of GPUs (0 or more)"
        );
        // Empty means unset.
        let d = discover_with(Some(""), None, || Probe::Found(real(1))).unwrap();
        assert_eq!(d.gpus.len(), 1);
        assert!(!d.simulated);
        assert_eq!(d.note, None);
    }

    #[test]
    fn nvml_gpus_are_filtered_by_cuda_visible_devices() {
        let d = discover_with(None, Some("1"), || Probe::Found(real(2))).unwrap();
        assert_eq!(d.gpus.len(), 1);
        assert_eq!((d.gpus[0].index, d.gpus[0].physical), (0, 1));
        assert_eq!(d.gpus[0].uuid, "GPU-1a1b-real");
        assert_eq!(d.cuda_visible_devices.as_deref(), Some("1"));

        let d = discover_with(None, Some(""), || Probe::Found(real(2))).unwrap();
        assert!(d.gpus.is_empty());
        assert_eq!(
            d.note.as_deref(),
            Some("CUDA_VISIBLE_DEVICES=\"\" hides all 2 GPU(s)")
        );

        let err = discover_with(None, Some("0,2"), || Probe::Found(real(2))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CUDA_VISIBLE_DEVICES=\"0,2\": there is no GPU 2 (this machine has GPUs 0-1)"
        );
    }

    #[test]
    fn no_nvml_means_no_gpus_and_a_note() {
        // CUDA_VISIBLE_DEVICES cannot be checked without GPUs and is left alone.
        let d = discover_with(None, Some("0,1"), || {
            Probe::Unavailable("no NVIDIA driver (libnvidia-ml.so.1 not found)".into())
        })
        .unwrap();
        assert!(d.gpus.is_empty());
        assert!(!d.simulated);
        assert_eq!(d.cuda_visible_devices, None);
        assert_eq!(
            d.describe(),
            "no GPUs (no NVIDIA driver (libnvidia-ml.so.1 not found))"
        );
        let d = discover_with(None, None, || Probe::Found(Vec::new())).unwrap();
        assert_eq!(d.note.as_deref(), Some("NVML reports no GPUs"));
    }

    #[test]
    fn a_missing_nvml_library_is_a_note_not_an_error() {
        let lib = "libnvidia-ml-ddp-test-missing.so.1";
        assert_eq!(
            probe_nvml(lib),
            Probe::Unavailable(format!("no NVIDIA driver ({lib} not found)"))
        );
    }

    #[test]
    fn the_real_probe_never_fails() {
        // Whatever this machine has (a GPU or no driver at all), discovery gives a list or a note.
        match probe_nvml(NVML_LIB) {
            Probe::Found(gpus) => {
                for (i, g) in gpus.iter().enumerate() {
                    assert_eq!((g.index, g.physical), (i, i));
                    assert!(g.uuid.starts_with("GPU-"), "{}", g.uuid);
                }
            }
            Probe::Unavailable(note) => assert!(!note.is_empty()),
        }
    }
}
