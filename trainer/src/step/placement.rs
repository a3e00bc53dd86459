//! Where a replica runs: its device (`ddp.devices` for its local rank), the backend of its
//! gradient all-reduce (`ddp.backend`), and the collectives that carry it (the process group's
//! ring or shared memory, or NCCL).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use candle_core::Device;

use crate::Result;
use crate::dist::group::ProcessGroup;
use crate::env::DistEnv;
use crate::spec::{Backend, Spec};
use crate::step::comm::SharedCollective;
use crate::step::device::Reducer;

/// CUDA devices this process can use (0 without the `cuda` feature, without a driver, or when
/// the driver finds no GPU).
fn cuda_device_count() -> usize {
    #[cfg(feature = "cuda")]
    {
        cudarc::driver::CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
    }
    #[cfg(not(feature = "cuda"))]
    0
}

/// This replica's device: `ddp.devices` resolved for its local rank.
pub fn device_for(spec: &Spec, env: &DistEnv) -> Result<Device> {
    use crate::spec::{DeviceKeyword, Devices};
    let open = |ordinal: usize, visible: usize| {
        if visible == 0 {
            return Err(spec.error(
                "ddp.devices",
                "names a CUDA device, but the driver finds none (no GPU, no driver, or CUDA_VISIBLE_DEVICES empty); use devices = \"auto\" or \"cpu\"",
            ));
        }
        if ordinal >= visible {
            return Err(spec.error(
                "ddp.devices",
                format!(
                    "local rank {} needs CUDA device {ordinal}, but {visible} device(s) are visible (CUDA_VISIBLE_DEVICES={}); run at most {visible} replica(s) per node, list visible devices, or use devices = \"cpu\"",
                    env.local_rank,
                    std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into())
                ),
            ));
        }
        Device::new_cuda(ordinal).map_err(|e| {
            spec.error(
                "ddp.devices",
                format!("cannot open CUDA device {ordinal}: {e}"),
            )
        })
    };
    match &spec.ddp.devices {
        Devices::Named(DeviceKeyword::Cpu) => Ok(Device::Cpu),
        Devices::Named(DeviceKeyword::Auto) => match cuda_device_count() {
            0 => Ok(Device::Cpu),
            visible => open(env.local_rank, visible),
        },
        Devices::Cuda(list) => {
            let Some(&ordinal) = list.get(env.local_rank) else {
                return Err(spec.error(
                    "ddp.devices",
                    format!("lists {} device(s) but this is local rank {}; list one device per local replica", list.len(), env.local_rank),
                ));
            };
            if !cfg!(feature = "cuda") {
                return Err(spec.error(
                    "ddp.devices",
                    "names CUDA devices but this ddp-trainer was built without the `cuda` feature; use devices = \"cpu\" or rebuild with --features cuda",
                ));
            }
            open(ordinal, cuda_device_count())
        }
    }
}

/// The backend that carries the gradient all-reduce: `auto` is `nccl` on CUDA devices and `tcp`
/// on the CPU. `nccl` on the CPU is refused before anyone waits on peers.
pub fn backend_for(spec: &Spec, device: &Device) -> Result<Backend> {
    match spec.ddp.backend {
        Backend::Auto if device.is_cpu() => Ok(Backend::Tcp),
        Backend::Auto => Ok(Backend::Nccl),
        Backend::Nccl if device.is_cpu() => Err(spec.error(
            "ddp.backend",
            "\"nccl\" needs CUDA devices, but this replica runs on the CPU; use backend = \"tcp\" or \"auto\"",
        )),
        b => Ok(b),
    }
}

/// The group's shared collective, and the reducer of the device step: NCCL (joined here) for
/// the `nccl` backend, else the group's collective itself.
#[cfg_attr(not(feature = "cuda"), allow(unused_variables, unused_mut))]
pub fn collectives(
    backend: Backend,
    device: &Device,
    mut group: ProcessGroup,
    timeout: Duration,
) -> Result<(SharedCollective, Reducer)> {
    let (rank, world) = (group.rank(), group.world_size());
    #[cfg(feature = "cuda")]
    if let (Backend::Nccl, Device::Cuda(cuda)) = (backend, device) {
        let nccl = crate::dist::nccl::Nccl::init(&mut group, cuda.cuda_stream(), timeout)?;
        if rank == 0 && world > 1 {
            println!("all-reduce through nccl");
        }
        let comm: SharedCollective = Arc::new(Mutex::new(Box::new(group)));
        return Ok((comm, Reducer::Nccl(nccl)));
    }
    if rank == 0 && world > 1 {
        println!("all-reduce through {}", group.transport());
    }
    let comm: SharedCollective = Arc::new(Mutex::new(Box::new(group)));
    Ok((comm.clone(), Reducer::Host(comm)))
}
