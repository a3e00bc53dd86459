//! The placement policy: from `ddp.devices`, `ddp.replicas` and `ddp.threads`, what GPUs exist
//! and which are held by other runs, decide where the replicas run. Pure: no I/O.
//!
//! - `"cpu"`: every replica on the CPU, never waits.
//! - `"auto"`: GPUs when the process sees at least `ddp.replicas` of them (one per replica, the
//!   lowest free ordinals), else the CPU with a note saying why. When there are enough GPUs but
//!   too few are free, the run waits for them rather than falling back to the CPU: a spec that fits
//!   the machine's GPUs should train on GPUs, only later.
//! - `[i, ...]`: exactly these CUDA ordinals, replica r on `list[r]`; waits while any is held.
//!   The list must have one distinct, existing GPU per replica.
//!
//! CPU threads per replica are `ddp.threads`, else `max(1, cores / replicas)`.

use std::collections::BTreeSet;

use ddp_trainer::spec::{DdpSpec, DeviceKeyword, Devices};

use super::discover::Discovery;
use crate::error::{Error, Result};

/// What a spec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRequest {
    /// `ddp.devices`.
    pub devices: Devices,
    /// `ddp.replicas`.
    pub replicas: usize,
    /// `ddp.threads`.
    pub threads: Option<usize>,
}

impl DeviceRequest {
    pub fn from_spec(ddp: &DdpSpec) -> Self {
        DeviceRequest {
            devices: ddp.devices.clone(),
            replicas: ddp.replicas,
            threads: ddp.threads,
        }
    }
}

/// Where the replicas go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Every replica on the CPU; `note` says why when `auto` chose it.
    Cpu {
        threads_per_replica: usize,
        note: Option<String>,
    },
    /// Replica r on CUDA ordinal `gpus[r]` (all free now).
    Gpus(Vec<usize>),
    /// The GPUs exist but these ordinals are held by other runs: stay queued.
    Wait { busy: Vec<usize> },
}

/// Decides where `request`'s replicas run, given the GPUs found and the CUDA ordinals `held` by
/// other runs, with `cores` CPU cores. Errors are spec mistakes (a list that cannot work here).
pub fn plan(
    request: &DeviceRequest,
    discovery: &Discovery,
    held: &BTreeSet<usize>,
    cores: usize,
) -> Result<Plan> {
    let replicas = request.replicas;
    if replicas == 0 {
        return Err(Error::Invalid("ddp.replicas: must be at least 1".into()));
    }
    let cpu = |note: Option<String>| Plan::Cpu {
        threads_per_replica: threads_per_replica(request, cores),
        note,
    };
    let gpus = discovery.gpus.len();
    match &request.devices {
        Devices::Named(DeviceKeyword::Cpu) => Ok(cpu(None)),
        Devices::Named(DeviceKeyword::Auto) if gpus < replicas => {
            let why = if gpus == 0 {
                discovery
                    .note
                    .clone()
                    .unwrap_or_else(|| "no GPUs".to_string())
            } else {
                format!(
                    "{replicas} replicas but this machine has only {} (ddp.replicas = {gpus} would train on GPUs)",
                    discovery.describe()
                )
            };
            Ok(cpu(Some(format!(
                "ddp.devices = \"auto\": {why}: running on CPU"
            ))))
        }
        Devices::Named(DeviceKeyword::Auto) => {
            let free: Vec<usize> = (0..gpus).filter(|i| !held.contains(i)).collect();
            if free.len() >= replicas {
                Ok(Plan::Gpus(free[..replicas].to_vec()))
            } else {
                let busy = (0..gpus).filter(|i| held.contains(i)).collect();
                Ok(Plan::Wait { busy })
            }
        }
        Devices::Cuda(list) => {
            check_list(list, replicas, discovery)?;
            let mut busy: Vec<usize> = list.iter().copied().filter(|i| held.contains(i)).collect();
            busy.sort_unstable();
            if busy.is_empty() {
                Ok(Plan::Gpus(list.clone()))
            } else {
                Ok(Plan::Wait { busy })
            }
        }
    }
}

/// `ddp.threads`, else `max(1, cores / replicas)`.
pub fn threads_per_replica(request: &DeviceRequest, cores: usize) -> usize {
    ddp_trainer::launcher::threads::per_replica(request.threads, request.replicas, cores)
}

/// The cores this process may use (1 when unknown).
pub use ddp_trainer::launcher::threads::available_cores;

/// One distinct, existing GPU per replica.
fn check_list(list: &[usize], replicas: usize, discovery: &Discovery) -> Result<()> {
    if list.len() != replicas {
        return Err(Error::Invalid(format!(
            "ddp.devices lists {} GPU(s) but ddp.replicas = {replicas}: list one GPU per replica",
            list.len()
        )));
    }
    for (i, gpu) in list.iter().enumerate() {
        if list[..i].contains(gpu) {
            return Err(Error::Invalid(format!(
                "ddp.devices lists GPU {gpu} twice: each replica needs a GPU of its own"
            )));
        }
    }
    if let Some(missing) = list.iter().find(|&&i| i >= discovery.gpus.len()) {
        return Err(Error::Invalid(format!(
            "ddp.devices asks for GPU {missing} but this machine has {}",
            discovery.describe()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(devices: Devices, replicas: usize) -> DeviceRequest {
        DeviceRequest {
            devices,
            replicas,
            threads: None,
        }
    }

    const AUTO: Devices = Devices::Named(DeviceKeyword::Auto);
    const CPU: Devices = Devices::Named(DeviceKeyword::Cpu);

    fn held(list: &[usize]) -> BTreeSet<usize> {
        list.iter().copied().collect()
    }

    fn cpu(threads_per_replica: usize, note: Option<&str>) -> Plan {
        Plan::Cpu {
            threads_per_replica,
            note: note.map(str::to_string),
        }
    }

    #[test]
    fn request_from_spec() {
        let mut ddp = DdpSpec::default();
        assert_eq!(DeviceRequest::from_spec(&ddp), request(AUTO, 1));
        ddp.devices = Devices::Cuda(vec![1, 0]);
        ddp.replicas = 2;
        ddp.threads = Some(3);
        let r = DeviceRequest::from_spec(&ddp);
        assert_eq!(r.devices, Devices::Cuda(vec![1, 0]));
        assert_eq!((r.replicas, r.threads), (2, Some(3)));
    }

    #[test]
    fn auto_takes_the_lowest_free_gpus() {
        let d = Discovery::simulated(4);
        let p = plan(&request(AUTO, 2), &d, &held(&[]), 16).unwrap();
        assert_eq!(p, Plan::Gpus(vec![0, 1]));
        let p = plan(&request(AUTO, 2), &d, &held(&[0, 2]), 16).unwrap();
        assert_eq!(p, Plan::Gpus(vec![1, 3]));
        let p = plan(&request(AUTO, 4), &d, &held(&[]), 16).unwrap();
        assert_eq!(p, Plan::Gpus(vec![0, 1, 2, 3]));
    }

    #[test]
    fn auto_waits_when_the_gpus_exist_but_are_held() {
        let d = Discovery::simulated(2);
        let p = plan(&request(AUTO, 2), &d, &held(&[1]), 16).unwrap();
        assert_eq!(p, Plan::Wait { busy: vec![1] });
        let p = plan(&request(AUTO, 1), &d, &held(&[0, 1]), 16).unwrap();
        assert_eq!(p, Plan::Wait { busy: vec![0, 1] });
        // Held locks of GPUs this process does not see (another CUDA_VISIBLE_DEVICES) are ignored.
        let p = plan(&request(AUTO, 2), &d, &held(&[5]), 16).unwrap();
        assert_eq!(p, Plan::Gpus(vec![0, 1]));
    }

    #[test]
    fn auto_with_fewer_gpus_than_replicas_runs_on_cpu() {
        let d = Discovery::simulated(1);
        let p = plan(&request(AUTO, 2), &d, &held(&[]), 8).unwrap();
        assert_eq!(
            p,
            cpu(
                4,
                Some(
                    "ddp.devices = \"auto\": 2 replicas but this machine has only GPU 0 (ddp.replicas = 1 would train on GPUs): running on CPU"
                )
            )
        );
        let d = Discovery::none("no NVIDIA driver (libnvidia-ml.so.1 not found)");
        let p = plan(&request(AUTO, 3), &d, &held(&[]), 8).unwrap();
        assert_eq!(
            p,
            cpu(
                2,
                Some(
                    "ddp.devices = \"auto\": no NVIDIA driver (libnvidia-ml.so.1 not found): running on CPU"
                )
            )
        );
    }

    #[test]
    fn cpu_never_uses_or_waits_for_gpus() {
        let d = Discovery::simulated(2);
        let p = plan(&request(CPU, 2), &d, &held(&[0, 1]), 8).unwrap();
        assert_eq!(p, cpu(4, None));
    }

    #[test]
    fn threads_split_the_cores_or_follow_ddp_threads() {
        let d = Discovery::simulated(0);
        let threads = |replicas, threads, cores| {
            let r = DeviceRequest {
                devices: CPU,
                replicas,
                threads,
            };
            match plan(&r, &d, &held(&[]), cores).unwrap() {
                Plan::Cpu {
                    threads_per_replica,
                    ..
                } => threads_per_replica,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(threads(1, None, 8), 8);
        assert_eq!(threads(3, None, 8), 2);
        assert_eq!(threads(4, None, 2), 1);
        assert_eq!(threads(2, None, 0), 1);
        assert_eq!(threads(2, Some(5), 2), 5);
    }

    #[test]
    fn a_list_uses_exactly_those_gpus() {
        let d = Discovery::simulated(3);
        let list = Devices::Cuda(vec![2, 0]);
        let p = plan(&request(list.clone(), 2), &d, &held(&[1]), 8).unwrap();
        assert_eq!(p, Plan::Gpus(vec![2, 0]));
        let p = plan(&request(list, 2), &d, &held(&[1, 2, 0]), 8).unwrap();
        assert_eq!(p, Plan::Wait { busy: vec![0, 2] });
    }

    #[test]
    fn impossible_lists_are_errors() {
        let error = |list: Vec<usize>, replicas, d: &Discovery| {
            plan(&request(Devices::Cuda(list), replicas), d, &held(&[]), 8)
                .unwrap_err()
                .to_string()
        };
        let two = Discovery::simulated(2);
        assert_eq!(
            error(vec![0, 3], 2, &two),
            "ddp.devices asks for GPU 3 but this machine has GPUs 0-1"
        );
        assert_eq!(
            error(vec![0, 1], 3, &two),
            "ddp.devices lists 2 GPU(s) but ddp.replicas = 3: list one GPU per replica"
        );
        assert_eq!(
            error(vec![1, 1], 2, &two),
            "ddp.devices lists GPU 1 twice: each replica needs a GPU of its own"
        );
        let none = Discovery::none("no NVIDIA driver (libnvidia-ml.so.1 not found)");
        assert_eq!(
            error(vec![0], 1, &none),
            "ddp.devices asks for GPU 0 but this machine has no GPUs (no NVIDIA driver (libnvidia-ml.so.1 not found))"
        );
        let mut hidden = Discovery::simulated(1);
        hidden.cuda_visible_devices = Some("1".into());
        assert_eq!(
            error(vec![1], 1, &hidden),
            "ddp.devices asks for GPU 1 but this machine has GPU 0 (CUDA_VISIBLE_DEVICES=\"1\")"
        );
        let p = plan(&request(AUTO, 0), &two, &held(&[]), 8);
        assert_eq!(
            p.unwrap_err().to_string(),
            "ddp.replicas: must be at least 1"
        );
    }
}
