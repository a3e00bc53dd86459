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
//! ring of its members.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::elastic::{Decision, JOIN, JOIN_KEY};
use super::ledger::{self, Cause, Ledger, Op, Publisher};
use super::ring::TcpRing;
use super::shm::ShmReducer;
use super::store::{StoreClient, StoreServer};
use super::{Collective, HeldGrads, ReduceOp, ShardUpdate, StepBuffers, no_step_buffers};
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
            return Ok(ProcessGroup {
                rank: 0,
                world_size: 1,
                ring: TcpRing::single(cfg.timeout),
                shm: None,
                transport: Transport::Single,
                ledger: Ledger::new(),
                publisher: None,
                store: None,
                server: None,
                id: 0,
                generation: 0,
                token: None,
                timeout: cfg.timeout,
            });
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
        Ok(ProcessGroup {
            rank: 0,
            world_size: 1,
            ring: TcpRing::single(cfg.timeout),
            shm: None,
            transport: Transport::Single,
            ledger: Ledger::new(),
            publisher: None,
            store: Some(Arc::new(Mutex::new(store))),
            server: None,
            id: cfg.rank,
            generation: JOIN,
            token: token(cfg).map(String::from),
            timeout: cfg.timeout,
        })
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
    pub fn reform(&mut self, step: u64, settle: Duration) -> Result<Decision> {
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
        let ring = if world == 1 {
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
        self.ring = ring;
        self.rank = rank;
        self.world_size = world;
        self.generation = d.generation.number;
        self.transport = Transport::Tcp {
            why: format!("elastic group, generation {}", self.generation),
        };
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
    fn reform(&mut self, step: u64, settle: Duration) -> Result<Decision> {
        ProcessGroup::reform(self, step, settle)
    }
    fn joiner_waiting(&mut self) -> Result<bool> {
        ProcessGroup::joiner_waiting(self)
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

/// How long rank 0 keeps its store after a collective failed, for the other ranks' reading of
/// the ledgers.
const LINGER: Duration = Duration::from_millis(1500);

fn token(cfg: &GroupConfig) -> Option<&str> {
    cfg.token.as_deref().filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ReduceOp;
    use std::net::TcpListener;
    use std::time::Instant;

    fn config(
        rank: usize,
        world_size: usize,
        port: u16,
        timeout: Duration,
        token: Option<&str>,
    ) -> GroupConfig {
        GroupConfig {
            rank,
            world_size,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            timeout,
            token: token.map(String::from),
            shared_memory: true,
            store_elsewhere: false,
            joining: false,
        }
    }

    /// Runs `f` on every rank of a group whose rank 0 serves the store on a free port.
    fn with_group<R: Send>(
        world: usize,
        ranks: &[usize],
        timeout: Duration,
        token: Option<&str>,
        f: impl Fn(Result<ProcessGroup>) -> R + Sync,
    ) -> Vec<R> {
        let server = StoreServer::bind("127.0.0.1", 0, world, token.map(String::from)).unwrap();
        let port = server.port();
        let mut server = Some(server);
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .iter()
                .map(|&rank| {
                    let server = if rank == 0 { server.take() } else { None };
                    let cfg = config(rank, world, port, timeout, token);
                    s.spawn(move || f(ProcessGroup::join(&cfg, server)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn rendezvous_msg<T>(r: &Result<T>) -> (usize, String) {
        match r {
            Err(Error::Rendezvous { rank, msg }) => (*rank, msg.clone()),
            Err(e) => panic!("expected a rendezvous error, got {e}"),
            Ok(_) => panic!("expected a rendezvous error, got success"),
        }
    }

    #[test]
    fn group_of_three_with_token_reduces_and_shuts_down() {
        let results = with_group(3, &[0, 1, 2], Duration::from_secs(5), Some("tok"), |pg| {
            let mut pg = pg.unwrap();
            let rank = pg.rank() as f32;
            assert_eq!(pg.world_size(), 3);
            let mut buf = vec![rank; 7];
            pg.collective().all_reduce(&mut buf, ReduceOp::Sum).unwrap();
            pg.store().unwrap().add("done", 1).unwrap();
            pg.shutdown().unwrap();
            buf
        });
        assert!(results.iter().all(|b| *b == [3.0; 7]));
    }

    #[test]
    fn init_binds_the_store_on_rank_0() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let results = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    s.spawn(move || {
                        let mut pg = ProcessGroup::init(&config(
                            rank,
                            2,
                            port,
                            Duration::from_secs(5),
                            None,
                        ))?;
                        let mut buf = [rank as f32 + 1.0];
                        pg.collective().all_reduce(&mut buf, ReduceOp::Avg)?;
                        pg.shutdown()?;
                        Ok::<_, Error>(buf[0])
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        for r in results {
            assert_eq!(r.unwrap(), 1.5);
        }
    }

    #[test]
    fn world_of_one_opens_no_socket() {
        // The port is taken: a world of one must not even try to bind it.
        let holder = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let mut pg = ProcessGroup::init(&config(0, 1, port, Duration::from_secs(1), None)).unwrap();
        assert!(pg.store().is_none());
        let mut buf = [2.0, 4.0];
        pg.collective().all_reduce(&mut buf, ReduceOp::Avg).unwrap();
        assert_eq!(buf, [2.0, 4.0]);
        pg.shutdown().unwrap();
    }

    #[test]
    fn bad_rank_and_world_size_are_configuration_errors() {
        let err = ProcessGroup::init(&config(2, 2, 1, Duration::from_secs(1), None))
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "environment variable RANK: RANK=2 is out of range for WORLD_SIZE=2"
        );
        assert_eq!(err.exit_code(), crate::error::EXIT_CONFIG);
        let err = ProcessGroup::init(&config(0, 0, 1, Duration::from_secs(1), None))
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "environment variable WORLD_SIZE: must be at least 1"
        );
    }

    #[test]
    fn rank_that_never_comes_is_named() {
        let t0 = Instant::now();
        let results = with_group(3, &[0, 1], Duration::from_secs(1), None, |pg| {
            rendezvous_msg(&pg)
        });
        assert!(t0.elapsed() < Duration::from_secs(4));
        for (rank, (err_rank, msg)) in results.into_iter().enumerate() {
            assert_eq!(err_rank, rank);
            assert!(msg.starts_with("rank 2 never joined within 1 s"), "{msg}");
        }
    }

    #[test]
    fn world_size_mismatch_is_reported_on_both_sides() {
        let server = StoreServer::bind("127.0.0.1", 0, 2, None).unwrap();
        let port = server.port();
        let (r0, r1) = std::thread::scope(|s| {
            let r0 = s.spawn(move || {
                ProcessGroup::join(
                    &config(0, 2, port, Duration::from_secs(1), None),
                    Some(server),
                )
            });
            let r1 = s.spawn(move || {
                ProcessGroup::join(&config(1, 3, port, Duration::from_secs(1), None), None)
            });
            (r0.join().unwrap(), r1.join().unwrap())
        });
        assert_eq!(
            rendezvous_msg(&r1),
            (
                1,
                "rank 1 says WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2".into()
            )
        );
        let (rank, msg) = rendezvous_msg(&r0);
        assert_eq!(rank, 0);
        assert!(msg.starts_with("rank 1 never joined within 1 s"), "{msg}");
    }

    #[test]
    fn wrong_token_is_refused() {
        let server = StoreServer::bind("127.0.0.1", 0, 2, Some("right".into())).unwrap();
        let port = server.port();
        let r1 = ProcessGroup::join(
            &config(1, 2, port, Duration::from_secs(1), Some("wrong")),
            None,
        );
        let (rank, msg) = rendezvous_msg(&r1);
        assert_eq!(rank, 1);
        assert_eq!(
            msg,
            format!(
                "rank 1 was refused by the store at 127.0.0.1:{port}: wrong or missing DDP_TOKEN"
            )
        );
    }

    #[test]
    fn port_in_use_on_rank_0() {
        let holder = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let r0 = ProcessGroup::init(&config(0, 2, port, Duration::from_secs(1), None));
        let (rank, msg) = rendezvous_msg(&r0);
        assert_eq!(rank, 0);
        assert!(
            msg.starts_with(&format!(
                "MASTER_ADDR:MASTER_PORT 127.0.0.1:{port} is already in use"
            )),
            "{msg}"
        );
    }

    /// Four replicas whose store is served outside them; replica `dead` leaves after one
    /// all-reduce (its ring and store connection close, as when its process is killed). The
    /// others' next all-reduce fails; they re-form as three, ranks following their ids, and
    /// all-reduce again.
    fn three_survivors_reform(dead: usize) {
        let server = StoreServer::bind("127.0.0.1", 0, 4, None).unwrap();
        let port = server.port();
        let t = Duration::from_secs(10);
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|id| {
                    s.spawn(move || {
                        let mut cfg = config(id, 4, port, t, None);
                        cfg.store_elsewhere = true;
                        let mut pg = ProcessGroup::join(&cfg, None).unwrap();
                        let mut buf = vec![id as f32 + 1.0; 1000];
                        pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                        assert_eq!(buf[999], 10.0);
                        if id == dead {
                            // Everyone has the first sum before this replica's sockets close.
                            std::thread::sleep(Duration::from_millis(300));
                            return None;
                        }
                        let mut buf = vec![1.0; 1000];
                        assert!(pg.all_reduce(&mut buf, ReduceOp::Sum).is_err());
                        let t0 = Instant::now();
                        let d = pg.reform(1, Duration::from_secs(30)).unwrap();
                        let took = t0.elapsed();
                        let mut buf = vec![id as f32 + 1.0; 1000];
                        pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                        Some((id, pg.rank(), pg.world_size(), buf[999], d, took))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let survivors: Vec<_> = results.into_iter().flatten().collect();
        assert_eq!(survivors.len(), 3);
        let ids: Vec<u32> = (0..4).filter(|&i| i != dead as u32).collect();
        for (i, (id, rank, world, sum, d, took)) in survivors.into_iter().enumerate() {
            assert_eq!((rank, world), (i, 3), "replica {id}");
            assert_eq!(sum, 10.0 - (dead as f32 + 1.0));
            assert_eq!(d.generation.members, ids);
            assert_eq!(d.left, vec![dead as u32]);
            assert!(took < Duration::from_secs(5), "replica {id} took {took:?}");
        }
    }

    #[test]
    fn survivors_of_a_lost_replica_reform_the_group() {
        three_survivors_reform(2);
    }

    #[test]
    fn survivors_of_rank_0_reform_the_group_with_the_store_elsewhere() {
        three_survivors_reform(0);
    }

    /// Under torchrun (rank 0 serves the store), a lost replica other than rank 0 is survived.
    #[test]
    fn a_group_whose_rank_0_serves_the_store_outlives_another_replica() {
        let server = StoreServer::bind("127.0.0.1", 0, 3, None).unwrap();
        let port = server.port();
        let t = Duration::from_secs(10);
        let mut server = Some(server);
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|id| {
                    let own = if id == 0 { server.take() } else { None };
                    s.spawn(move || {
                        let cfg = config(id, 3, port, t, None);
                        let mut pg = ProcessGroup::join(&cfg, own).unwrap();
                        let mut buf = vec![1.0; 100];
                        pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                        if id == 2 {
                            std::thread::sleep(Duration::from_millis(300));
                            return None;
                        }
                        assert!(pg.all_reduce(&mut buf, ReduceOp::Sum).is_err());
                        let d = pg.reform(1, Duration::from_secs(30)).unwrap();
                        let mut buf = vec![id as f32 + 1.0; 100];
                        pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                        Some((pg.world_size(), buf[99], d.left))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let survivors: Vec<_> = results.into_iter().flatten().collect();
        assert_eq!(survivors, vec![(2, 3.0, vec![2]); 2]);
    }

    /// A replica standing by joins at a boundary the members choose: rank 0 sees it waiting,
    /// every member re-forms, and the joiner is taken in as its id's rank.
    #[test]
    fn a_replica_standing_by_is_taken_in_when_the_members_re_form() {
        let server = StoreServer::bind("127.0.0.1", 0, 4, None).unwrap();
        let port = server.port();
        let t = Duration::from_secs(10);
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|id| {
                    s.spawn(move || {
                        let mut cfg = config(id, if id == 3 { 4 } else { 3 }, port, t, None);
                        cfg.store_elsewhere = true;
                        cfg.joining = id == 3;
                        let mut pg = if id == 3 {
                            ProcessGroup::init(&cfg).unwrap()
                        } else {
                            cfg.world_size = 4;
                            // The members' generation 0 is ids 0..3 of a store for 4.
                            let mut pg = ProcessGroup::standing_by(&cfg).unwrap();
                            pg.generation = 0;
                            pg
                        };
                        if id == 3 {
                            assert_eq!((pg.rank(), pg.world_size()), (0, 1));
                            let d = pg.reform(0, t).unwrap();
                            assert_eq!(d.joined, vec![3]);
                        } else {
                            // Every member is connected (as in a group under way); rank 0
                            // waits until the joiner has asked, then all re-form.
                            pg.store().unwrap().wait_all_joined(t).unwrap();
                            if id == 0 {
                                let start = Instant::now();
                                while !pg.joiner_waiting().unwrap() {
                                    assert!(start.elapsed() < t, "no joiner announced");
                                    std::thread::sleep(Duration::from_millis(20));
                                }
                            }
                            let d = pg.reform(7, Duration::from_secs(30)).unwrap();
                            assert_eq!(d.generation.members, vec![0, 1, 2, 3]);
                        }
                        let mut buf = vec![id as f32 + 1.0; 100];
                        pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                        (pg.rank(), pg.world_size(), buf[99])
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        drop(server);
        assert_eq!(
            results,
            vec![(0, 4, 10.0), (1, 4, 10.0), (2, 4, 10.0), (3, 4, 10.0)]
        );
    }
}
