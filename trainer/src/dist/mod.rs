//! Process groups: rendezvous through a TCP store hosted by rank 0, and collectives between replicas.
//!
//! Layout:
//! - this file: the [`Collective`] trait every backend implements, and [`ReduceOp`].
//! - `group`: [`group::ProcessGroup`], the rendezvous on every rank, then the ring and (on one
//!   host) the shared memory.
//! - `wire`: length-prefixed frames and the store's messages, parsed once at the edge.
//! - `handshake`: Hello, the HMAC challenge with DDP_TOKEN, Welcome or a refusal; opens every store
//!   connection and every ring link.
//! - `store`: the key-value store (server on rank 0, client everywhere).
//! - `elastic`: which replicas form an elastic group's next generation once one is lost (pure
//!   policy; the store decides).
//! - `ledger`: each rank's ledger of its collectives, published to the store, and the message
//!   naming the rank that is behind when a collective times out or loses a peer.
//! - `codec`: 16-bit floats on the wire for the compressed all-reduce ([`codec::Codec`]).
//! - `powersgd`: the average of a buffer of gradients as low-rank factors with error feedback
//!   ([`powersgd::PowerSgd`]).
//! - `probe`: the link measured at start, and the bucket size `ddp.bucket_mb = "auto"` picks.
//! - `segment`: the W segments a buffer is cut into, one per rank.
//! - `ring`: the `tcp` backend, a ring of sockets (reduce-scatter + all-gather all-reduce).
//! - `shm`: the `tcp` backend's all-reduce through shared memory when all ranks share a host, and
//!   the DDP step's shared buffers.
//! - `nccl` (feature `cuda`): NCCL communicator, unique id shared through the store.
//! - `bench`: the all-reduce benchmark (`ddp-bench allreduce`).

pub mod bench;
pub mod codec;
pub mod elastic;
pub mod group;
pub(crate) mod handshake;
pub mod ledger;
#[cfg(feature = "cuda")]
pub mod nccl;
pub mod powersgd;
pub mod probe;
pub mod ring;
pub(crate) mod segment;
pub mod shm;
pub mod store;
pub(crate) mod wire;

use std::ops::Range;

pub use shm::{HeldGrads, ShardUpdate, StepBuffers};

use crate::{Error, Result};

/// How `all_reduce` combines the replicas' buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size.
    Avg,
}

/// Collective operations between the replicas of one process group.
///
/// Every rank must call the same operations in the same order with buffers of the same length.
/// Each call waits at most the group's timeout; a failure names the op, its sequence number and
/// the rank that was missing. A dead peer is noticed from its closed socket immediately.
pub trait Collective: Send {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// The next collective carries gradient bucket `index` (from 0) of `count`, for the ledger's
    /// messages ([`ledger`]). Collectives without a ledger ignore it.
    fn label_bucket(&mut self, index: usize, count: usize) {
        let _ = (index, count);
    }
    /// The next generation of an elastic group after a collective failed
    /// ([`group::ProcessGroup::reform`]); this replica's rank and the world size change.
    fn reform(
        &mut self,
        step: u64,
        settle: std::time::Duration,
    ) -> Result<elastic::NextGeneration> {
        let _ = (step, settle);
        Err(Error::Rendezvous {
            rank: self.rank(),
            msg: "this collective cannot re-form its group (an elastic run needs the tcp backend)"
                .into(),
        })
    }
    /// Whether a replica waits to join this elastic group (a look at the store).
    fn joiner_waiting(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// What carries this group's all-reduces, for the log (`None`: not a process group).
    fn transport_line(&self) -> Option<String> {
        None
    }
    /// Element-wise reduction of `buf` across all ranks, in place, result on every rank.
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()>;
    /// [`Collective::all_reduce`] with the values on the wire as 16-bit floats (`codec`) and
    /// added in f32, the result rounded to 16 bits, the same on every rank (the TCP ring). A
    /// collective without a compressed path (shared memory, NCCL) reduces in f32, rounding the
    /// result the same way.
    fn all_reduce_coded(
        &mut self,
        buf: &mut [f32],
        op: ReduceOp,
        codec: codec::Codec,
    ) -> Result<()> {
        self.all_reduce(buf, op)?;
        codec.round(buf);
        Ok(())
    }

    /// Copies `buf` of rank `root` into `buf` of every other rank.
    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<()>;
    /// `output` (length `input.len() * world_size`) receives every rank's `input`, in rank order.
    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) -> Result<()>;
    /// Gathers a variable-length byte message from every rank (for small metadata: parameter
    /// names and shapes, configuration digests). Returns one message per rank, in rank order.
    fn all_gather_bytes(&mut self, input: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every rank has entered the barrier.
    fn barrier(&mut self) -> Result<()>;

    /// The part of a `len`-element buffer that `rank` owns in [`Collective::reduce_scatter`] and
    /// [`Collective::all_gather_shards`]: the ranks' shards are disjoint and cover the buffer.
    fn shard(&self, len: usize, rank: usize) -> Range<usize> {
        segment::segment(len, self.world_size(), rank)
    }

    /// Reduce-scatter in place: on return this rank's [shard](Collective::shard) of `buf` holds
    /// the reduction across all ranks, bit for bit what [`Collective::all_reduce`] would give
    /// there; the rest of `buf` is unspecified. Half of an all-reduce: with
    /// [`Collective::all_gather_shards`] after it, each rank can work on its own shard alone
    /// (the DDP step updates the parameters of its shard only, see [`crate::step::ddp`]).
    fn reduce_scatter(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.all_reduce(buf, op)
    }

    /// All-gather of shards in place: every rank's [shard](Collective::shard) of its `buf` is
    /// copied into that shard of `buf` on every other rank.
    fn all_gather_shards(&mut self, buf: &mut [f32]) -> Result<()> {
        for q in 0..self.world_size() {
            let part = self.shard(buf.len(), q);
            self.broadcast(&mut buf[part], q)?;
        }
        Ok(())
    }

    /// The DDP step's gradient and parameter buffers, `len` floats each, in memory that the
    /// other ranks read in place (every rank calls this at the same point). `Ok(Err(why))` where
    /// this collective has none (ranks on several hosts, no room in `/dev/shm`): the step then
    /// keeps its own buffers and uses [`Collective::reduce_scatter`] and
    /// [`Collective::all_gather_shards`].
    fn step_buffers(&mut self, len: usize) -> Result<std::result::Result<StepBuffers, String>> {
        let _ = len;
        Ok(Err("this collective has no shared buffers".into()))
    }

    /// [`Collective::reduce_scatter`] of the gradients of `step` (from
    /// [`Collective::step_buffers`]), with the same bits, fused with the update of this rank's
    /// shard ([`StepBuffers::shard`]): `update` gets each reduced block of it with this rank's
    /// parameters there. The reduced gradients are not stored. `held`: this rank's gradients of
    /// its shard that it did not copy into its buffer.
    fn reduce_scatter_step(
        &mut self,
        step: &mut StepBuffers,
        op: ReduceOp,
        held: &[HeldGrads<'_>],
        update: &mut ShardUpdate<'_>,
    ) -> Result<()> {
        let _ = (step, op, held, update);
        Err(no_step_buffers("reduce_scatter", self.rank()))
    }

    /// [`Collective::all_gather_shards`] of the parameters of `step`: on return every rank's
    /// shard is updated, and [`StepBuffers::read_params`] reads it in place until this rank's
    /// next [`Collective::reduce_scatter_step`].
    fn all_gather_step(&mut self, step: &mut StepBuffers) -> Result<()> {
        let _ = step;
        Err(no_step_buffers("all_gather_shards", self.rank()))
    }
}

/// The error of a step op on a collective that handed out no [`StepBuffers`].
pub(crate) fn no_step_buffers(op: &'static str, rank: usize) -> Error {
    Error::Collective {
        op,
        seq: 0,
        rank,
        peer: None,
        msg: "step buffers come from another collective".into(),
    }
}
