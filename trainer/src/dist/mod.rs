//! Process groups: rendezvous through a TCP store hosted by rank 0, and collectives between replicas.
//!
//! Layout:
//! - this file: the [`Collective`] trait every backend implements (the core collectives), and
//!   [`ReduceOp`].
//! - `capability`: what some collectives offer beyond it: an elastic group's membership
//!   ([`capability::Membership`]) and the DDP step's shared buffers ([`capability::SharedStep`]).
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
//! - `quant`: block-scaled 8- and 4-bit integers, how local steps' syncs may travel.
//! - `probe`: the link measured at start, and the bucket size `ddp.bucket_mb = "auto"` picks.
//! - `segment`: the W segments a buffer is cut into, one per rank.
//! - `ring`: the `tcp` backend, a ring of sockets (reduce-scatter + all-gather all-reduce).
//! - `shm`: the `tcp` backend's all-reduce through shared memory when all ranks share a host, and
//!   the DDP step's shared buffers.
//! - `nccl` (feature `cuda`): NCCL communicator, unique id shared through the store.
//! - `bench`: the all-reduce benchmark (`ddp-bench allreduce`).

pub mod bench;
pub mod capability;
pub mod codec;
pub mod elastic;
pub mod group;
pub(crate) mod handshake;
pub mod ledger;
#[cfg(feature = "cuda")]
pub mod nccl;
pub mod powersgd;
pub mod probe;
pub mod quant;
pub mod ring;
pub(crate) mod segment;
pub mod shm;
pub mod store;
pub(crate) mod wire;

use std::ops::Range;

use crate::Result;

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

    /// This collective's elastic membership, where it has one ([`capability::Membership`]:
    /// the tcp backend's process group).
    fn membership(&mut self) -> Option<&mut dyn capability::Membership> {
        None
    }

    /// The DDP step's buffers in shared memory, where this collective can hand them out
    /// ([`capability::SharedStep`]).
    fn shared_step(&mut self) -> Option<&mut dyn capability::SharedStep> {
        None
    }
}
