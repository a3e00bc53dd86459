//! What some collectives can do beyond the core collectives of [`Collective`]: re-form an
//! elastic group ([`Membership`]: the tcp backend's process group) and hand the DDP step its
//! buffers in shared memory ([`SharedStep`]: ranks on one host). A collective offers each
//! through [`Collective::membership`] and [`Collective::shared_step`]; the functions here ask
//! for one and say what a collective without it gives.

use std::time::Duration;

use super::elastic::NextGeneration;
use super::shm::{HeldGrads, ShardUpdate, StepBuffers};
use super::{Collective, ReduceOp};
use crate::{Error, Result};

/// An elastic group's membership: its next generation after a collective failed, and whether
/// a replica waits to join.
pub trait Membership {
    /// The next generation of the group ([`super::group::ProcessGroup::reform`]); this
    /// replica's rank and the world size change.
    fn reform(&mut self, step: u64, settle: Duration) -> Result<NextGeneration>;
    /// Whether a replica waits to join the group (a look at the store).
    fn joiner_waiting(&mut self) -> Result<bool>;
}

/// The DDP step's gradient and parameter buffers in memory the other ranks read in place.
pub trait SharedStep {
    /// Buffers of `len` floats each (every rank calls this at the same point). `Ok(Err(why))`
    /// where there are none (ranks on several hosts, no room in `/dev/shm`): the step then
    /// keeps its own buffers and uses [`Collective::reduce_scatter`] and
    /// [`Collective::all_gather_shards`].
    fn step_buffers(&mut self, len: usize) -> Result<std::result::Result<StepBuffers, String>>;

    /// [`Collective::reduce_scatter`] of the gradients of `step`, with the same bits, fused
    /// with the update of this rank's shard ([`StepBuffers::shard`]): `update` gets each
    /// reduced block of it with this rank's parameters there. The reduced gradients are not
    /// stored. `held`: this rank's gradients of its shard that it did not copy into its buffer.
    fn reduce_scatter_step(
        &mut self,
        step: &mut StepBuffers,
        op: ReduceOp,
        held: &[HeldGrads<'_>],
        update: &mut ShardUpdate<'_>,
    ) -> Result<()>;

    /// [`Collective::all_gather_shards`] of the parameters of `step`: on return every rank's
    /// shard is updated, and [`StepBuffers::read_params`] reads it in place until this rank's
    /// next [`SharedStep::reduce_scatter_step`].
    fn all_gather_step(&mut self, step: &mut StepBuffers) -> Result<()>;
}

/// `comm`'s membership, or the error of a collective that cannot re-form its group.
pub fn membership(comm: &mut dyn Collective) -> Result<&mut dyn Membership> {
    let rank = comm.rank();
    comm.membership().ok_or_else(|| Error::Rendezvous {
        rank,
        msg: "this collective cannot re-form its group (an elastic run needs the tcp backend)"
            .into(),
    })
}

/// Whether a replica waits to join `comm`'s group; never for a collective without membership.
pub fn joiner_waiting(comm: &mut dyn Collective) -> Result<bool> {
    match comm.membership() {
        Some(m) => m.joiner_waiting(),
        None => Ok(false),
    }
}

/// [`SharedStep::step_buffers`] of `comm`; `Ok(Err(why))` for a collective without them.
pub fn step_buffers(
    comm: &mut dyn Collective,
    len: usize,
) -> Result<std::result::Result<StepBuffers, String>> {
    match comm.shared_step() {
        Some(s) => s.step_buffers(len),
        None => Ok(Err("this collective has no shared buffers".into())),
    }
}

/// `comm`'s shared step buffers for step op `op`, or the error of a collective that handed out
/// none.
pub fn shared_step<'a>(
    comm: &'a mut dyn Collective,
    op: &'static str,
) -> Result<&'a mut dyn SharedStep> {
    let rank = comm.rank();
    comm.shared_step().ok_or_else(|| no_step_buffers(op, rank))
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
