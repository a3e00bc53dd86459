//! What a launch starts: [`LaunchOptions`] and their defaults.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::spec::Spec;

/// The file in the output folder that an elastic launch reads its wanted number of replicas
/// from ([`LaunchOptions::scale_file`]; `ddp scale` writes it).
pub const SCALE_FILE: &str = "scale";

/// Default time between SIGTERM and SIGKILL when the replicas are stopped.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// What [`launch`](super::launch) starts.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of replicas on this node, local ranks `0..nproc`.
    pub nproc: usize,
    /// Nodes in the world, each running `nproc` replicas (1: this node is the whole world).
    pub nnodes: usize,
    /// This node, `0..nnodes`: its replicas have the global ranks `node_rank × nproc + local`.
    pub node_rank: usize,
    /// The replica program (normally `ddp-trainer` itself) and its arguments.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Logs go to `out_dir/logs/rank-R.log` (R: the global rank).
    pub out_dir: PathBuf,
    /// `MASTER_ADDR` for the replicas.
    pub master_addr: String,
    /// `MASTER_PORT`; `None` picks a free port.
    pub master_port: Option<u16>,
    /// `RAYON_NUM_THREADS` / `DDP_THREADS`; `None` gives `max(1, cores / nproc)`.
    pub threads_per_replica: Option<usize>,
    /// Extra variables for every replica, set last (they override the launcher's).
    pub env: Vec<(String, String)>,
    /// Time between SIGTERM and SIGKILL when the replicas are stopped.
    pub grace: Duration,
    /// Echo rank 0's stdout and every rank's stderr to the launcher's own streams (off when the
    /// launcher's output already goes to a log, as for the `ddp` supervisor).
    pub echo: bool,
    /// Called with (rank, pid) for every replica started.
    pub on_spawn: Option<SpawnHook>,
    /// An elastic run (`ddp.elastic.min_replicas`): a replica that fails is left behind while
    /// at least this many are running or done, and the launcher serves the group's store, so
    /// that no replica's death takes it down.
    pub elastic_min: Option<usize>,
    /// Replicas an elastic launch may restart, in all (`restart.max_restarts`): a replica that
    /// fails is started again to join the group under way, while the group goes on.
    pub elastic_restarts: u32,
    /// How long after its failure a replica is started again (`restart.backoff_s`).
    pub elastic_backoff: Duration,
    /// An elastic launch's wanted number of replicas, read from this file (one number, written
    /// by `ddp scale`) whenever it changes: replicas beyond it leave at a step boundary, and
    /// missing ones are started to join.
    pub scale_file: Option<PathBuf>,
}

/// A callback told about every replica the launcher starts.
#[derive(Clone)]
pub struct SpawnHook(pub Arc<dyn Fn(usize, u32) + Send + Sync>);

impl std::fmt::Debug for SpawnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpawnHook(..)")
    }
}

impl LaunchOptions {
    /// `nproc` replicas of `program` with the defaults: one node, 127.0.0.1, a free port,
    /// cores / nproc threads each, no extra variables, [`DEFAULT_GRACE`].
    pub fn new(nproc: usize, program: impl Into<PathBuf>, out_dir: impl Into<PathBuf>) -> Self {
        LaunchOptions {
            nproc,
            nnodes: 1,
            node_rank: 0,
            program: program.into(),
            args: Vec::new(),
            out_dir: out_dir.into(),
            master_addr: "127.0.0.1".to_string(),
            master_port: None,
            threads_per_replica: None,
            env: Vec::new(),
            grace: DEFAULT_GRACE,
            echo: true,
            on_spawn: None,
            elastic_min: None,
            elastic_restarts: 0,
            elastic_backoff: Duration::ZERO,
            scale_file: None,
        }
    }

    /// The launch of `spec`'s replicas, the one constructor every launch path starts from
    /// (`ddp-trainer --standalone`, a node launcher, the workspace's supervisor): `nproc`
    /// replicas of `program` on this node, outputs and logs in `out_dir`, `ddp.threads` threads
    /// each (else [`threads::per_replica`](super::threads::per_replica)'s share of the cores);
    /// for an elastic run (`ddp.elastic`) its minimum, its replicas' restart budget
    /// (`restart.max_restarts`), their back-off ([`RestartSpec::backoff`](crate::spec::RestartSpec::backoff))
    /// and the scale file `ddp scale` writes. What only the caller knows (the arguments, the
    /// devices' variables and threads, the node's rendezvous) it sets on the result.
    pub fn for_spec(
        spec: &Spec,
        nproc: usize,
        program: impl Into<PathBuf>,
        out_dir: impl Into<PathBuf>,
    ) -> Self {
        let mut opts = LaunchOptions::new(nproc, program, out_dir);
        opts.threads_per_replica = spec.ddp.threads;
        if let Some(elastic) = spec.ddp.elastic {
            opts.elastic_min = Some(elastic.min_replicas);
            opts.elastic_restarts = spec.restart.max_restarts;
            opts.elastic_backoff = spec.restart.backoff();
            opts.scale_file = Some(opts.out_dir.join(SCALE_FILE));
        }
        opts
    }
}
