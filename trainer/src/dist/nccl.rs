//! The `nccl` backend (feature `cuda`): one NCCL communicator per replica on its GPU.
//!
//! Rank 0 creates NCCL's unique id and publishes it in the group's store (key
//! [`UNIQUE_ID_KEY`]); the other ranks read it from there, with the group's timeout. Gradient
//! all-reduces then run on the GPU stream of the replica's device, in place. NCCL itself waits
//! forever for a peer that died, so every all-reduce is followed by a bounded wait on a stream
//! event: past `ddp.timeout_s` the op fails with a message naming it (NCCL does not say which
//! rank is missing), and dropping the communicator aborts it instead of blocking the exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::safe::{Comm, Id, ReduceOp as NcclOp};

use super::ReduceOp;
use super::group::ProcessGroup;
use crate::{Error, Result};

/// Store key under which rank 0 publishes NCCL's unique id (128 bytes).
pub const UNIQUE_ID_KEY: &str = "nccl/unique-id";

/// How often a wait on the GPU looks at its event and the clock.
const POLL: Duration = Duration::from_micros(20);

/// One replica's NCCL communicator.
pub struct Nccl {
    comm: Comm,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    timeout: Duration,
}

impl Nccl {
    /// Joins the communicator of `group` on `stream` (the stream of the replica's device).
    /// Every rank calls this at the same point, after the group is formed.
    pub fn init(
        group: &mut ProcessGroup,
        stream: Arc<CudaStream>,
        timeout: Duration,
    ) -> Result<Nccl> {
        let (rank, world) = (group.rank(), group.world_size());
        let fail = |msg: String| Error::Rendezvous { rank, msg };
        let id = if rank == 0 {
            let id = Id::new().map_err(|e| fail(format!("NCCL cannot create its unique id: {e:?} (is libnccl.so.2 installed and on LD_LIBRARY_PATH?)")))?;
            if let Some(mut store) = group.store() {
                let bytes: Vec<u8> = id.internal().iter().map(|&c| c as u8).collect();
                store.set(UNIQUE_ID_KEY, &bytes)?;
            }
            id
        } else {
            let mut store = group
                .store()
                .ok_or_else(|| fail("no store to read NCCL's unique id from".into()))?;
            let bytes = store.get(UNIQUE_ID_KEY, timeout)?;
            let internal: [std::ffi::c_char; 128] = bytes
                .iter()
                .map(|&b| b as std::ffi::c_char)
                .collect::<Vec<_>>()
                .try_into()
                .map_err(|_| {
                    fail(format!(
                        "rank 0 published an NCCL unique id of {} bytes, expected 128",
                        bytes.len()
                    ))
                })?;
            Id::uninit(internal)
        };
        let comm = Comm::from_rank(stream.clone(), rank, world, id)
            .map_err(|e| fail(format!("NCCL communicator (rank {rank} of {world}): {e:?}")))?;
        Ok(Nccl {
            comm,
            stream,
            rank,
            world,
            timeout,
        })
    }

    /// Replicas in the communicator.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// All-reduces `buf` in place across the replicas; `seq` numbers the op for errors.
    pub fn all_reduce(&self, seq: u64, buf: &mut CudaSlice<f32>, op: ReduceOp) -> Result<()> {
        let nccl_op = match op {
            ReduceOp::Sum => NcclOp::Sum,
            ReduceOp::Avg => NcclOp::Avg,
        };
        let fail = |msg: String| Error::Collective {
            op: "all_reduce (nccl)",
            seq,
            rank: self.rank,
            peer: None,
            msg,
        };
        self.comm
            .all_reduce_in_place(buf, &nccl_op)
            .map_err(|e| fail(format!("NCCL refused the all-reduce: {e:?}")))?;
        let done = self
            .stream
            .record_event(None)
            .map_err(|e| fail(format!("cannot record a CUDA event: {e:?}")))?;
        let start = Instant::now();
        loop {
            match done.try_is_complete() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(fail(format!("the GPU reported an error: {e:?}"))),
            }
            if start.elapsed() >= self.timeout {
                return Err(fail(format!(
                    "NCCL did not complete within {:.1} s (ddp.timeout_s): a peer replica probably died or stopped; see the other ranks' logs",
                    self.timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(POLL);
        }
    }
}
