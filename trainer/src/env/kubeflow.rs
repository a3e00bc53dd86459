//! A pod of a Kubeflow job: one process per node that starts the node's replicas itself.
//!
//! Kubeflow's PyTorchJob (kubeflow.org/v1) and Kubeflow Trainer's torch runtime (TrainJob) start
//! one container per node with torchrun's node-level variables (`PET_NNODES`, `PET_NODE_RANK`,
//! `PET_NPROC_PER_NODE`, `PET_MASTER_ADDR`, `PET_MASTER_PORT`), meant for torchrun to read. A
//! PyTorchJob also sets `RANK` to the pod's index and `WORLD_SIZE` to pods × processes per node.
//! [`NodeWorld::from_vars`] reads them into the node's place; the process then launches
//! `PET_NPROC_PER_NODE` local replicas with global ranks `node_rank × nproc + local_rank`.

use super::vars::{DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT, Vars, env_err};
use crate::error::Result;

/// The node-level variables the Kubeflow operators set, which [`NodeWorld::from_vars`] detects a
/// pod by.
pub const KUBEFLOW_VARIABLES: [&str; 5] = [
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
];

const HINT: &str = "the Kubeflow training operators set PET_NNODES, PET_NODE_RANK (a PyTorchJob \
                    also RANK) and PET_NPROC_PER_NODE in every pod";
const HINT_NPROC: &str = "ddp-trainer starts a fixed number of replicas in each pod: set \
                          nprocPerNode (PyTorchJob) or trainer.numProcPerNode (TrainJob) to a \
                          number such as 2";

/// This node's place in a Kubeflow job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeWorld {
    /// Nodes (pods) in the job.
    pub nnodes: usize,
    /// This node, `0..nnodes`.
    pub node_rank: usize,
    /// Replicas this node starts.
    pub nproc_per_node: usize,
    /// Host of rank 0's rendezvous store (node 0).
    pub master_addr: String,
    pub master_port: u16,
    /// An elastic job's least number of nodes (`PET_NNODES` of `MIN:MAX`, a PyTorchJob's
    /// `elasticPolicy`); the job's world is its `MAX` nodes, `nnodes`. Only an elastic spec
    /// (`ddp.elastic`) trains in such a job.
    pub min_nodes: Option<usize>,
    /// What set the variables, for the log line: `$DDP_NODE_VIA` (a Spark task of a run on
    /// Spark says `spark`), else `kubeflow`.
    pub via: String,
}

/// Names what set a node's variables when it is not a Kubeflow operator (`spark`).
pub const NODE_VIA_VAR: &str = "DDP_NODE_VIA";

impl NodeWorld {
    /// Reads the process environment; see [`NodeWorld::from_vars`].
    pub fn from_env() -> Result<Option<NodeWorld>> {
        Self::from_vars(|var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()))
    }

    /// `Some` when `PET_NNODES`, `PET_NODE_RANK` or `PET_NPROC_PER_NODE` is set and neither
    /// `LOCAL_RANK` nor `LOCAL_WORLD_SIZE` is (those mark a replica that a launcher inside the pod
    /// started: torchrun, or this node's own launcher). The values are validated; an error names
    /// the variable and its value.
    ///
    /// - nodes: `PET_NNODES`; a range such as `1:4` (an elastic job) is its maximum, the
    ///   minimum in [`NodeWorld::min_nodes`];
    /// - node rank: `PET_NODE_RANK`, else `RANK` (equal when both are set);
    /// - replicas per node: `PET_NPROC_PER_NODE`; `auto` (a PyTorchJob without `nprocPerNode`)
    ///   or unset counts as 1 when `WORLD_SIZE` equals `PET_NNODES` (one replica per pod), and is
    ///   an error otherwise;
    /// - `WORLD_SIZE`, when set, is nodes × replicas per node (or nodes);
    /// - rendezvous: `PET_MASTER_ADDR`, else `MASTER_ADDR` (127.0.0.1 for a job of one node);
    ///   `PET_MASTER_PORT`, else `MASTER_PORT`, else 29500.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<NodeWorld>> {
        let vars = Vars(get);
        if vars.has("LOCAL_RANK") || vars.has("LOCAL_WORLD_SIZE") {
            return Ok(None);
        }
        let Some(seen) = KUBEFLOW_VARIABLES[..3].iter().find(|v| vars.has(v)) else {
            return Ok(None);
        };
        let (nnodes, min_nodes) = nodes(&vars, seen)?;
        let (rank_var, node_rank) = node_rank(&vars, seen)?;
        if node_rank >= nnodes {
            return Err(env_err(
                rank_var,
                format!(
                    "is {node_rank} but PET_NNODES is {nnodes}; node ranks run from 0 to {}",
                    nnodes - 1
                ),
            ));
        }
        let world: Option<usize> = vars.int("WORLD_SIZE")?;
        let nproc_per_node = nproc(&vars, nnodes, world)?;
        if let Some(w) = world
            && w != nnodes * nproc_per_node
            && w != nnodes
        {
            return Err(env_err(
                "WORLD_SIZE",
                format!(
                    "is {w} but PET_NNODES × PET_NPROC_PER_NODE = {nnodes} × {nproc_per_node} = {}; \
                     unset WORLD_SIZE or make it agree",
                    nnodes * nproc_per_node
                ),
            ));
        }
        let master_addr = match vars
            .get("PET_MASTER_ADDR")
            .or_else(|| vars.get("MASTER_ADDR"))
        {
            Some(addr) => addr,
            None if nnodes == 1 => DEFAULT_MASTER_ADDR.to_string(),
            None => {
                return Err(env_err(
                    "PET_MASTER_ADDR",
                    format!(
                        "is not set (nor MASTER_ADDR), and the job spans {nnodes} nodes; set it \
                         to the host of node 0 (the operators set it to node 0's service)"
                    ),
                ));
            }
        };
        let master_port = match vars.port("PET_MASTER_PORT")? {
            Some(port) => port,
            None => vars.port("MASTER_PORT")?.unwrap_or(DEFAULT_MASTER_PORT),
        };
        Ok(Some(NodeWorld {
            nnodes,
            node_rank,
            nproc_per_node,
            master_addr,
            master_port,
            min_nodes,
            via: vars
                .get(NODE_VIA_VAR)
                .unwrap_or_else(|| "kubeflow".to_string()),
        }))
    }

    /// Replicas in the whole job: nodes × replicas per node.
    pub fn world_size(&self) -> usize {
        self.nnodes * self.nproc_per_node
    }

    /// The global rank of this node's local replica 0.
    pub fn first_rank(&self) -> usize {
        self.node_rank * self.nproc_per_node
    }

    /// One line for logs: `node 1/2 via kubeflow: ranks 2-3 of 4, master job-master-0:23456`.
    pub fn describe(&self) -> String {
        let first = self.first_rank();
        let last = first + self.nproc_per_node - 1;
        let ranks = if first == last {
            format!("rank {first}")
        } else {
            format!("ranks {first}-{last}")
        };
        let host = if self.master_addr.contains(':') {
            format!("[{}]", self.master_addr)
        } else {
            self.master_addr.clone()
        };
        format!(
            "node {}/{} via {}: {ranks} of {}, master {host}:{}",
            self.node_rank,
            self.nnodes,
            self.via,
            self.world_size(),
            self.master_port
        )
    }
}

/// `PET_NNODES`: a number of nodes, at least 1, or an elastic job's range `MIN:MAX` (the
/// nodes, `MAX`, and the least, `MIN`).
fn nodes(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
    seen: &str,
) -> Result<(usize, Option<usize>)> {
    let Some(value) = vars.get("PET_NNODES") else {
        return Err(env_err(
            "PET_NNODES",
            format!("is not set but {seen} is; {HINT}"),
        ));
    };
    if let Some((min, max)) = value.split_once(':') {
        let bound = |s: &str| s.trim().parse::<usize>().ok().filter(|&n| n > 0);
        return match (bound(min), bound(max)) {
            (Some(min), Some(max)) if min <= max => Ok((max, Some(min))),
            _ => Err(env_err(
                "PET_NNODES",
                format!(
                    "{value:?} is not a range of nodes MIN:MAX with 1 <= MIN <= MAX (an elastic \
                     job's elasticPolicy minReplicas:maxReplicas)"
                ),
            )),
        };
    }
    match vars.int::<usize>("PET_NNODES")? {
        Some(0) => Err(env_err("PET_NNODES", "is 0; a job needs at least one node")),
        n => Ok((n.unwrap_or(1), None)),
    }
}

/// `PET_NODE_RANK`, else `RANK`, with the variable it came from.
fn node_rank(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
    seen: &str,
) -> Result<(&'static str, usize)> {
    match (vars.int("PET_NODE_RANK")?, vars.int("RANK")?) {
        (Some(p), Some(r)) if p != r => Err(env_err(
            "PET_NODE_RANK",
            format!(
                "is {p} but RANK is {r}; in a Kubeflow pod both are the pod's index (unset RANK \
                 or make it agree)"
            ),
        )),
        (Some(p), _) => Ok(("PET_NODE_RANK", p)),
        (None, Some(r)) => Ok(("RANK", r)),
        (None, None) => Err(env_err(
            "PET_NODE_RANK",
            format!("is not set (nor RANK) but {seen} is; {HINT}"),
        )),
    }
}

/// `PET_NPROC_PER_NODE`: a number, at least 1; `auto` or unset is 1 when `WORLD_SIZE` says one
/// replica per pod.
fn nproc(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
    nnodes: usize,
    world: Option<usize>,
) -> Result<usize> {
    let value = vars.get("PET_NPROC_PER_NODE");
    match value.as_deref().map(str::parse::<usize>) {
        Some(Ok(0)) => Err(env_err(
            "PET_NPROC_PER_NODE",
            "is 0; a node needs at least one replica",
        )),
        Some(Ok(n)) => Ok(n),
        // PyTorchJob's default nprocPerNode `auto` comes with WORLD_SIZE = pods: one per pod.
        _ if world == Some(nnodes) => Ok(1),
        Some(Err(_)) => Err(env_err(
            "PET_NPROC_PER_NODE",
            format!("is {:?}; {HINT_NPROC}", value.unwrap_or_default()),
        )),
        None => Err(env_err(
            "PET_NPROC_PER_NODE",
            format!("is not set; {HINT_NPROC}"),
        )),
    }
}
