//! The process group: rendezvous at `MASTER_ADDR:MASTER_PORT`, then a ring of sockets.
//!
//! [`ProcessGroup::init`] runs the same steps on every rank: rank 0 binds the store server
//! first, every rank connects a store client, waits until all ranks have joined, then builds the
//! `tcp` ring. When every rank runs on one host (and `shared_memory` is on) the ranks then map a
//! shared segment that carries the all-reduces ([`super::shm`]); the ring carries everything else.
//! A world of one opens no socket at all.
//!
//! An elastic group ([`ProcessGroup::reform`]) has its store served outside the replicas (by
//! the launcher: [`GroupConfig::store_elsewhere`]), so that any replica may die; after a
//! collective fails, the survivors ask the store for the next generation and connect a new
//! ring of its members. A replica started again after the group formed (its count under
//! [`STARTED_KEY`] exceeds the world) stands by to join it, as a replica started with
//! [`GroupConfig::joining`] does.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::capability::{Membership, SharedStep, no_step_buffers};
use super::elastic::{JOIN, JOIN_KEY, NextGeneration, STARTED_KEY};
use super::ledger::{self, Cause, Ledger, Op, Publisher};
use super::ring::TcpRing;
use super::shm::ShmReducer;
use super::shm::{HeldGrads, ShardUpdate, StepBuffers};
use super::store::{StoreClient, StoreServer};
use super::{Collective, ReduceOp};
use crate::{Error, Result};

/// Everything a rank needs to join its group (torchrun's RANK, WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT, plus `ddp.timeout_s` and DDP_TOKEN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub rank: usize,
    pub world_size: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// Bound on every wait: rendezvous steps and each collective's progress.
    pub timeout: Duration,
    /// Shared secret; when set, every connection answers an HMAC challenge. Empty means none.
    pub token: Option<String>,
    /// All-reduce through shared memory when every rank runs on this host (`ddp.shared_memory`).
    pub shared_memory: bool,
    /// The store is served outside the replicas (a launcher's, for an elastic run): rank 0
    /// connects to it as every rank does instead of serving it.
    pub store_elsewhere: bool,
    /// This replica joins an elastic group under way ([`crate::env::JOIN_VARIABLE`]): it only
    /// connects to the store, and stands alone until [`ProcessGroup::reform`] brings it in.
    pub joining: bool,
}

/// What carries a group's all-reduces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A world of one: nothing to carry.
    Single,
    /// The TCP ring; `why` says why shared memory is not used.
    Tcp { why: String },
    /// Shared memory between the ranks of this host; `staged` says why the data is copied
    /// through the segment instead of directly between the processes.
    SharedMemory { staged: Option<String> },
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Single => write!(f, "none (world of one)"),
            Transport::Tcp { why } => write!(f, "tcp ring ({why})"),
            Transport::SharedMemory { staged: None } => write!(
                f,
                "shared memory (all ranks on this host; direct copies between processes)"
            ),
            Transport::SharedMemory { staged: Some(why) } => {
                write!(f, "shared memory (all ranks on this host; {why})")
            }
        }
    }
}

/// A joined process group. Drop order matters: the ring, then the ledger's publisher, the store
/// client, then (rank 0) the store server.
pub struct ProcessGroup {
    rank: usize,
    world_size: usize,
    ring: TcpRing,
    shm: Option<ShmReducer>,
    transport: Transport,
    /// Every collective of this group, published to the store ([`ledger`]).
    ledger: Ledger,
    publisher: Option<Publisher>,
    store: Option<Arc<Mutex<StoreClient>>>,
    server: Option<StoreServer>,
    /// This replica's identity in an elastic group: its rank when the group first formed.
    id: usize,
    /// The membership's generation: 0, then one more each time the group re-forms.
    generation: u64,
    /// Shared memory is wanted where every member runs on one host ([`GroupConfig`]'s); each
    /// generation of an elastic group sets it up again for its members.
    shared_memory: bool,
    token: Option<String>,
    timeout: Duration,
}

impl ProcessGroup {
    /// Joins the group described by `cfg`; returns once the ring is connected on every rank.
    pub fn init(cfg: &GroupConfig) -> Result<ProcessGroup> {
        if cfg.world_size == 0 {
            return Err(Error::Env {
                var: "WORLD_SIZE".into(),
                msg: "must be at least 1".into(),
            });
        }
        if cfg.rank >= cfg.world_size {
            return Err(Error::Env {
                var: "RANK".into(),
                msg: format!(
                    "RANK={} is out of range for WORLD_SIZE={}",
                    cfg.rank, cfg.world_size
                ),
            });
        }
        if cfg.world_size == 1 {
            return Ok(Self::alone(cfg.timeout, None, 0, 0, None));
        }
        if cfg.joining {
            return Self::standing_by(cfg);
        }
        let server = if cfg.rank == 0 && !cfg.store_elsewhere {
            Some(StoreServer::bind(
                &cfg.master_addr,
                cfg.master_port,
                cfg.world_size,
                token(cfg).map(String::from),
            )?)
        } else {
            None
        };
        Self::join(cfg, server)
    }

    /// A joining replica before the group takes it in: connected to the store as replica
    /// `cfg.rank`, a world of one with no ring.
    fn standing_by(cfg: &GroupConfig) -> Result<ProcessGroup> {
        if !cfg.store_elsewhere {
            return Err(Error::Rendezvous {
                rank: cfg.rank,
                msg: "a replica joins an elastic group through a store its launcher serves \
                      (ddp-trainer --standalone, ddp run); none is announced here"
                    .into(),
            });
        }
        let store = StoreClient::connect(
            &cfg.master_addr,
            cfg.master_port,
            cfg.rank,
            cfg.world_size,
            token(cfg),
            cfg.timeout,
        )?;
        Ok(Self::standing_by_with(cfg, store))
    }

    /// A joiner connected to the store as `store`: alone until the group takes it in, then
    /// with the group's transport.
    fn standing_by_with(cfg: &GroupConfig, store: StoreClient) -> ProcessGroup {
        let mut group = Self::alone(
            cfg.timeout,
            Some(Arc::new(Mutex::new(store))),
            cfg.rank,
            JOIN,
            token(cfg).map(String::from),
        );
        group.shared_memory = cfg.shared_memory;
        group
    }

    /// A group of this replica alone (rank 0 of 1, no ring): a world of one, or a joiner
    /// standing by with its `store` connection as replica `id`.
    fn alone(
        timeout: Duration,
        store: Option<Arc<Mutex<StoreClient>>>,
        id: usize,
        generation: u64,
        token: Option<String>,
    ) -> ProcessGroup {
        ProcessGroup {
            rank: 0,
            world_size: 1,
            ring: TcpRing::single(timeout),
            shm: None,
            transport: Transport::Single,
            ledger: Ledger::new(),
            publisher: None,
            store,
            server: None,
            id,
            generation,
            shared_memory: false,
            token,
            timeout,
        }
    }

    /// Whether this replica stands by to join an elastic group under way (started with
    /// [`GroupConfig::joining`], or started again after the group formed).
    pub fn is_standing_by(&self) -> bool {
        self.generation == JOIN
    }

    /// Whether a replica waits to join this elastic group (announced by the store under
    /// [`JOIN_KEY`] for this generation); one look at the store.
    pub fn joiner_waiting(&mut self) -> Result<bool> {
        let Some(store) = self.store.clone() else {
            return Ok(false);
        };
        let value = store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_get(JOIN_KEY)?;
        Ok(value.is_some_and(|v| v == self.generation.to_string().as_bytes()))
    }

    /// The steps after rank 0 bound its server (tests pass a server bound on port 0).
    fn join(cfg: &GroupConfig, server: Option<StoreServer>) -> Result<ProcessGroup> {
        let (rank, world_size, timeout) = (cfg.rank, cfg.world_size, cfg.timeout);
        let port = server.as_ref().map_or(cfg.master_port, StoreServer::port);
        let mut store = StoreClient::connect(
            &cfg.master_addr,
            port,
            rank,
            world_size,
            token(cfg),
            timeout,
        )?;
        if cfg.store_elsewhere && store.add(STARTED_KEY, 1)? > world_size as i64 {
            // The elastic group formed before this replica (started again) connected.
            return Ok(Self::standing_by_with(cfg, store));
        }
        store.wait_all_joined(timeout)?;
        // The ring listens on the address this rank uses to reach MASTER_ADDR: loopback for a
        // loopback master, the right interface on a multi-homed host.
        let bind_ip = store.local_ip()?;
        let mut ring =
            TcpRing::connect(&mut store, rank, world_size, bind_ip, token(cfg), timeout)?;
        let (shm, transport) = if cfg.shared_memory {
            match ShmReducer::establish(&mut ring, rank, world_size, timeout)? {
                Ok(shm) => {
                    let staged = shm.staged_because().map(str::to_string);
                    (Some(shm), Transport::SharedMemory { staged })
                }
                Err(why) => (None, Transport::Tcp { why }),
            }
        } else {
            let why = "shared memory turned off".into();
            (None, Transport::Tcp { why })
        };
        let ledger = Ledger::new();
        let store = Arc::new(Mutex::new(store));
        Ok(ProcessGroup {
            rank,
            world_size,
            ring,
            shm,
            transport,
            publisher: Some(ledger.publish(rank, store.clone())),
            ledger,
            store: Some(store),
            server,
            id: rank,
            generation: 0,
            shared_memory: cfg.shared_memory,
            token: token(cfg).map(String::from),
            timeout,
        })
    }

    /// The next generation of an elastic group, after one of its collectives failed or at a
    /// step boundary the members agreed on (a replica joins or leaves); for a replica standing
    /// by to join, the generation that takes it in. Closes this replica's ring (so that members
    /// still inside a collective notice at once), asks the store for the generation after this
    /// one having completed `step` steps, and
    /// connects the ring of its members, this replica's rank being its place among them.
    /// Members still connected to the store that have not asked within `settle` (a stopped
    /// process) are left out. An error when this replica was left out, or the store is gone.
    pub fn reform(&mut self, step: u64, settle: Duration) -> Result<NextGeneration> {
        let fail = |rank, msg: String| Error::Rendezvous { rank, msg };
        let Some(store) = self.store.clone() else {
            return Err(fail(
                self.rank,
                "a world of one has no group to re-form".into(),
            ));
        };
        // A rank 0 that serves the store itself (under torchrun or Slurm's srun alone) re-forms
        // too: the group outlives any replica but this one, whose loss takes the store away.
        self.ring = TcpRing::single(self.timeout);
        self.shm = None;
        self.publisher = None;
        let lock = || store.lock().unwrap_or_else(|p| p.into_inner());
        let d = lock().rejoin(self.generation, step, settle, self.timeout + settle)?;
        let Some(rank) = d.generation.rank_of(self.id as u32) else {
            return Err(fail(
                self.rank,
                format!(
                    "replica {} was left out of the group's generation {} (members {:?}): it \
                     did not rejoin within {} s of the others",
                    self.id,
                    d.generation.number,
                    d.generation.members,
                    settle.as_secs_f64()
                ),
            ));
        };
        let world = d.generation.members.len();
        let mut ring = if world == 1 {
            TcpRing::single(self.timeout)
        } else {
            let mut client = lock();
            let bind_ip = client.local_ip()?;
            TcpRing::connect_generation(
                &mut client,
                d.generation.number,
                rank,
                world,
                bind_ip,
                self.token.as_deref(),
                self.timeout,
            )?
        };
        let generation = d.generation.number;
        let (shm, transport) = match world > 1 && self.shared_memory {
            true => match ShmReducer::establish(&mut ring, rank, world, self.timeout)? {
                Ok(shm) => {
                    let staged = shm.staged_because().map(str::to_string);
                    (Some(shm), Transport::SharedMemory { staged })
                }
                Err(why) => {
                    let why = format!("elastic group, generation {generation}: {why}");
                    (None, Transport::Tcp { why })
                }
            },
            false => {
                let why = format!("elastic group, generation {generation}");
                (None, Transport::Tcp { why })
            }
        };
        self.ring = ring;
        self.shm = shm;
        self.transport = transport;
        self.rank = rank;
        self.world_size = world;
        self.generation = generation;
        self.ledger = Ledger::new();
        self.publisher = Some(self.ledger.publish(rank, store));
        Ok(d)
    }

    /// A group of an already connected ring and shared memory, without a store (tests of the
    /// shared-memory collectives with their own slot sizes and copy modes).
    #[cfg(test)]
    pub(crate) fn from_parts(ring: TcpRing, shm: ShmReducer) -> ProcessGroup {
        use super::Collective;
        ProcessGroup {
            rank: ring.rank(),
            world_size: ring.world_size(),
            transport: Transport::SharedMemory {
                staged: shm.staged_because().map(str::to_string),
            },
            timeout: ring.timeout(),
            ring,
            shm: Some(shm),
            ledger: Ledger::new(),
            publisher: None,
            store: None,
            server: None,
            id: 0,
            generation: 0,
            shared_memory: true,
            token: None,
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The collectives of this group.
    pub fn collective(&mut self) -> &mut dyn Collective {
        self
    }

    /// What carries this group's all-reduces.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The rendezvous store (None in a world of one), shared with the ledger's publisher.
    pub fn store(&self) -> Option<MutexGuard<'_, StoreClient>> {
        self.store
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// This group's ledger of collectives.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Runs collective `f` in the ledger; a timeout or a lost peer is explained from every
    /// rank's ledger ([`ledger::explain`]).
    fn logged<T>(
        &mut self,
        op: Op,
        bytes: usize,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        if self.world_size == 1 {
            return f(self);
        }
        let seq = self.ledger.enter(op, bytes);
        match f(self) {
            Ok(v) => {
                self.ledger.complete(seq);
                Ok(v)
            }
            Err(e) => Err(self.explained(e, seq)),
        }
    }

    /// The error of collective `seq`, saying where every rank is when the ledgers tell.
    fn explained(&mut self, e: Error, seq: u64) -> Error {
        let Error::Collective {
            op,
            rank,
            peer,
            msg,
            ..
        } = e
        else {
            return e;
        };
        let cause = if msg.contains("unusable after an earlier failure") {
            // Explained where it first failed.
            None
        } else if msg.contains("no progress") || msg.contains("timed out") {
            Some(Cause::Timeout)
        } else if msg.contains("closed") || msg.contains("failed during") || msg.contains("socket")
        {
            Some(Cause::Lost)
        } else {
            None
        };
        let why = cause.zip(self.store.as_ref()).and_then(|(cause, store)| {
            let waited = self.ledger.waited();
            let (marks, still) = self.ledger.survey(self.rank, self.world_size, store);
            ledger::explain(self.rank, &marks, &still, waited, cause, peer)
        });
        if self.server.is_some() && why.is_some() {
            // The other ranks read the ledgers from this rank's store: keep it a moment.
            std::thread::sleep(LINGER);
        }
        Error::Collective {
            op,
            seq,
            rank,
            peer,
            msg: match why {
                Some(why) => format!("{why} (rank {rank} saw: {msg})"),
                None => msg,
            },
        }
    }

    /// Leaves the group: a final barrier, so rank 0's store outlives every other rank's use of
    /// it, then closes the ring, the client and the server.
    pub fn shutdown(self) -> Result<()> {
        let ProcessGroup {
            mut ring,
            publisher,
            store,
            server,
            ..
        } = self;
        let result = ring.barrier();
        drop(ring);
        drop(publisher);
        drop(store);
        drop(server);
        result
    }
}

impl Collective for ProcessGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn membership(&mut self) -> Option<&mut dyn Membership> {
        Some(self)
    }
    fn shared_step(&mut self) -> Option<&mut dyn SharedStep> {
        Some(self)
    }
    fn transport_line(&self) -> Option<String> {
        Some(self.transport.to_string())
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn label_bucket(&mut self, index: usize, count: usize) {
        self.ledger.label_bucket(index, count);
    }
    fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.logged(Op::AllReduce, size_of_val(buf), |g| match g.shm.as_mut() {
            Some(shm) => shm.all_reduce(&mut g.ring, buf, op),
            None => g.ring.all_reduce(buf, op),
        })
    }
    fn all_reduce_coded(
        &mut self,
        buf: &mut [f32],
        op: ReduceOp,
        codec: crate::dist::codec::Codec,
    ) -> Result<()> {
        self.logged(Op::AllReduce, size_of_val(buf), |g| match g.shm.as_mut() {
            // Within one host nothing is saved by sending less: f32, rounded the same way.
            Some(shm) => {
                shm.all_reduce(&mut g.ring, buf, op)?;
                codec.round(buf);
                Ok(())
            }
            None => g.ring.all_reduce_coded(buf, op, codec),
        })
    }
    fn shard(&self, len: usize, rank: usize) -> std::ops::Range<usize> {
        match &self.shm {
            Some(shm) => shm.shard(len, rank),
            None => self.ring.shard(len, rank),
        }
    }
    fn reduce_scatter(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.logged(Op::ReduceScatter, size_of_val(buf), |g| {
            match g.shm.as_mut() {
                Some(shm) => shm.reduce_scatter(&mut g.ring, buf, op),
                None => g.ring.reduce_scatter(buf, op),
            }
        })
    }
    fn all_gather_shards(&mut self, buf: &mut [f32]) -> Result<()> {
        self.logged(Op::AllGather, size_of_val(buf), |g| match g.shm.as_mut() {
            Some(shm) => shm.all_gather_shards(&mut g.ring, buf),
            None => g.ring.all_gather_shards(buf),
        })
    }
    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<()> {
        self.logged(Op::Broadcast, size_of_val(buf), |g| {
            g.ring.broadcast(buf, root)
        })
    }
    fn all_gather(&mut self, input: &[f32], output: &mut [f32]) -> Result<()> {
        self.logged(Op::AllGather, size_of_val(output), |g| {
            g.ring.all_gather(input, output)
        })
    }
    fn all_gather_bytes(&mut self, input: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.logged(Op::GatherBytes, input.len(), |g| {
            g.ring.all_gather_bytes(input)
        })
    }
    fn barrier(&mut self) -> Result<()> {
        self.logged(Op::Barrier, 0, |g| g.ring.barrier())
    }
}

impl Membership for ProcessGroup {
    fn reform(&mut self, step: u64, settle: Duration) -> Result<NextGeneration> {
        ProcessGroup::reform(self, step, settle)
    }
    fn joiner_waiting(&mut self) -> Result<bool> {
        ProcessGroup::joiner_waiting(self)
    }
}

impl SharedStep for ProcessGroup {
    fn step_buffers(&mut self, len: usize) -> Result<std::result::Result<StepBuffers, String>> {
        match self.shm.is_some() {
            true => self.logged(Op::StepBuffers, len * 4, |g| {
                let shm = g.shm.as_mut().expect("checked");
                shm.step_buffers(&mut g.ring, len)
            }),
            false => Ok(Err("no shared memory between the ranks".into())),
        }
    }
    fn reduce_scatter_step(
        &mut self,
        step: &mut StepBuffers,
        op: ReduceOp,
        held: &[HeldGrads<'_>],
        update: &mut ShardUpdate<'_>,
    ) -> Result<()> {
        let bytes = step.len() * 4;
        self.logged(Op::ReduceScatter, bytes, |g| match g.shm.as_mut() {
            Some(shm) => shm.reduce_scatter_step(&mut g.ring, step, op, held, update),
            None => Err(no_step_buffers("reduce_scatter", g.rank)),
        })
    }
    fn all_gather_step(&mut self, step: &mut StepBuffers) -> Result<()> {
        let bytes = step.len() * 4;
        self.logged(Op::AllGather, bytes, |g| match g.shm.as_mut() {
            Some(shm) => shm.all_gather_step(&mut g.ring, step),
            None => Err(no_step_buffers("all_gather_shards", g.rank)),
        })
    }
}

/// How long rank 0 keeps its store after a collective failed, for the other ranks' reading of
/// the ledgers.
const LINGER: Duration = Duration::from_millis(1500);

fn token(cfg: &GroupConfig) -> Option<&str> {
    cfg.token.as_deref().filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests;
