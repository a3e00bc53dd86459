//! A bucket's communication hook, as PyTorch's `register_comm_hook`: what the overlapped DDP
//! step does to average one bucket of gradients across the replicas.
//!
//! The step holds one hook per bucket ([`CommHook`]), made by [`CommHooks`] from the bucket's
//! layout ([`BucketLayout`]) each time the buckets are laid out: once for the first step, which
//! learns the order backward finalizes the gradients in, and once more for the buckets laid out
//! by that order, which every later step keeps (a hook with state, as PowerSGD's, keeps it from
//! step to step). The hooks run on the communication thread, one bucket after another in the
//! buckets' order, the same on every rank.
//!
//! Layout: this file, the trait, the layouts and the factory (and the one a trainer executable
//! registers, [`crate::Trainer::comm_hook`]); `plain`, f32 all-reduce ([`Plain`]); `half`,
//! 16-bit floats on the wire ([`Half`]); `powersgd`, low-rank factors with error feedback
//! ([`PowerSgdHook`]).

mod half;
mod plain;
mod powersgd;

use std::sync::{Arc, OnceLock};

pub use half::Half;
pub use plain::Plain;
pub use powersgd::PowerSgdHook;

use crate::Result;
use crate::dist::Collective;
use crate::dist::codec::Codec;

/// Averages one bucket of gradients across the replicas.
///
/// Every rank's hook of a bucket runs at the same point of the step, with its rank's gradients;
/// it must issue the same collectives in the same order on every rank, and leave the same
/// values on every rank (the optimizer runs on them everywhere).
pub trait CommHook: Send {
    /// Leaves `grads` holding the average over the ranks of `comm` of the ranks' `grads` (or what
    /// stands for it, as a compressed average); returns the bytes this rank sent. The last
    /// bucket ends with one more element after its gradients, the control element (a stop
    /// request, a regroup): it must come back averaged as well.
    fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn Collective) -> Result<u64>;
}

/// One parameter's gradient in a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketTensor {
    /// The parameter's index in the model's parameter list (name order).
    pub param: usize,
    /// Where its values begin in the bucket.
    pub offset: usize,
    pub shape: Vec<usize>,
}

/// What a hook is made for: one bucket of a layout of the step's gradients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketLayout {
    /// This bucket (from 0, in the order the buckets are sent) of `count`.
    pub index: usize,
    pub count: usize,
    /// Floats in the bucket: its tensors, and in the last bucket the control element after
    /// them.
    pub len: usize,
    pub tensors: Vec<BucketTensor>,
    /// Whether the buckets are laid out by the order backward finalizes the gradients (every
    /// step but the first); `false` for the first step's, which last one step.
    pub learned: bool,
}

/// Makes each bucket's hook from its layout.
pub type MakeHook = dyn Fn(&BucketLayout) -> Box<dyn CommHook> + Send + Sync;

/// The factory of the step's hooks, one per bucket.
#[derive(Clone)]
pub struct CommHooks {
    make: Arc<MakeHook>,
    /// What the log says the gradients travel as.
    name: String,
}

impl CommHooks {
    /// Hooks made by `make`, named `name` in the log.
    pub fn new<F, H>(name: impl Into<String>, make: F) -> CommHooks
    where
        F: Fn(&BucketLayout) -> H + Send + Sync + 'static,
        H: CommHook + 'static,
    {
        CommHooks {
            make: Arc::new(move |layout| Box::new(make(layout)) as Box<dyn CommHook>),
            name: name.into(),
        }
    }

    /// The hook of the bucket `layout` describes.
    pub fn make(&self, layout: &BucketLayout) -> Box<dyn CommHook> {
        (self.make)(layout)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The built-in hooks: how the gradients travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// f32 ([`Plain`]).
    F32,
    /// 16 bits a value, added in f32 ([`Half`]).
    Half(Codec),
    /// Low-rank factors of rank `rank`, with error feedback ([`PowerSgdHook`]); the first step's
    /// buckets travel as f32.
    PowerSgd { rank: usize },
}

impl From<Wire> for CommHooks {
    fn from(wire: Wire) -> CommHooks {
        match wire {
            Wire::F32 => CommHooks::new("f32", |_| Plain),
            Wire::Half(codec) => CommHooks::new(codec.name(), move |_| Half(codec)),
            Wire::PowerSgd { rank } => CommHooks {
                make: Arc::new(move |layout| PowerSgdHook::for_bucket(layout, rank)),
                name: format!("powersgd (rank {rank})"),
            },
        }
    }
}

/// Bytes a rank sends in a ring all-reduce of `values` of `width` bytes over `world` ranks: the
/// reduce-scatter and the all-gather each send `(W-1)/W` of the buffer.
pub fn ring_bytes(values: usize, width: usize, world: usize) -> u64 {
    let w = world.max(1) as u64;
    values as u64 * width as u64 * 2 * (w - 1) / w
}

static REGISTERED: OnceLock<CommHooks> = OnceLock::new();

/// Registers this executable's hooks (once; later calls are ignored), used where the spec says
/// `ddp.overlap = true`.
pub fn register(hooks: CommHooks) {
    let _ = REGISTERED.set(hooks);
}

/// The hooks this executable registered, if it did.
pub fn registered() -> Option<CommHooks> {
    REGISTERED.get().cloned()
}
