//! Where a replica learns its place in the world (rank, world size, rendezvous address) from the
//! variables its launcher set. The contract is documented in `docs/environment.md`.
//!
//! Layout:
//! - [`Role`]: what this process is: one replica, or the launcher of a Kubeflow pod's
//!   replicas ([`Role::from_env`]).
//! - [`LauncherKind`], [`DistEnv`]: a replica's place, with [`DistEnv::describe`] for logs.
//! - [`DistEnv::from_env`] / [`DistEnv::from_vars`]: detection in the order torchrun > Slurm >
//!   Open MPI > single process, then validation ([`Error::Env`] names the variable and its value).
//! - `kubeflow.rs`: [`NodeWorld`], a Kubeflow pod's node (`PET_NNODES`, `PET_NODE_RANK`,
//!   `PET_NPROC_PER_NODE`, `PET_MASTER_ADDR`, `PET_MASTER_PORT`).
//! - `nodelist.rs`: [`expand_slurm_nodelist`], Slurm's compressed host lists (`node[01-04,07]`).
//! - `vars.rs`: the variable lookup (trimmed, empty = unset, integers and ports parsed), the
//!   rendezvous defaults.
//! - `tests.rs`: detection and validation of each launcher's variables.

use std::fmt;

use crate::error::{Error, Result};

mod kubeflow;
mod nodelist;
mod vars;

pub use kubeflow::{KUBEFLOW_VARIABLES, NodeWorld};
pub use nodelist::expand_slurm_nodelist;
use nodelist::{MAX_HOSTS, expand_nodelist};
pub use vars::{DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT};
use vars::{Vars, env_err};

/// The variables that put a process into a launcher's world: the ones [`Role::from_env`]
/// detects torchrun, Slurm, Open MPI and a Kubeflow pod by, the placement read with them, the
/// group's token and torchelastic's restart count. A process that starts a trainer outside its
/// own launcher's world (a benchmark, a test) removes them from the child's environment, so that
/// the child sees no launcher at all.
pub const LAUNCHER_VARIABLES: [&str; 24] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_TASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "DDP_TOKEN",
    "TORCHELASTIC_RESTART_COUNT",
    LAUNCHER_NAME_VARIABLE,
    STORE_ELSEWHERE_VARIABLE,
    JOIN_VARIABLE,
    KUBEFLOW_VARIABLES[0],
    KUBEFLOW_VARIABLES[1],
    KUBEFLOW_VARIABLES[2],
    KUBEFLOW_VARIABLES[3],
    KUBEFLOW_VARIABLES[4],
];

/// Set to [`DDP_LAUNCHER`] by ddp's own launcher (`ddp-trainer --standalone`, and so the `ddp`
/// supervisor) beside torchrun's variables, so that its replicas name it as their launcher
/// ([`LauncherKind::Ddp`]) rather than torchrun.
pub const LAUNCHER_NAME_VARIABLE: &str = "DDP_LAUNCHER";
/// The value of [`LAUNCHER_NAME_VARIABLE`] that ddp's launcher sets.
pub const DDP_LAUNCHER: &str = "ddp";
/// Set to `1` by a launcher that serves the group's store itself at `MASTER_ADDR:MASTER_PORT`
/// (an elastic run's, so that no replica's death takes the store down): rank 0 then connects
/// to it like every other rank.
pub const STORE_ELSEWHERE_VARIABLE: &str = "DDP_STORE_ELSEWHERE";

/// Set to `1` by a launcher for a replica that joins an elastic group under way (restarted after
/// it failed, or added by `ddp scale`): it asks the store for the next generation instead of
/// forming the first, and takes the weights, optimizer state and position from a member.
pub const JOIN_VARIABLE: &str = "DDP_ELASTIC_JOIN";

/// Whether this replica joins a group under way ([`JOIN_VARIABLE`]).
pub fn joining() -> bool {
    std::env::var(JOIN_VARIABLE).is_ok_and(|v| v.trim() == "1")
}

/// Whether the launcher serves the store ([`STORE_ELSEWHERE_VARIABLE`]).
pub fn store_elsewhere() -> bool {
    std::env::var(STORE_ELSEWHERE_VARIABLE).is_ok_and(|v| v.trim() == "1")
}

const HINT_TORCHRUN: &str = "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, \
                             MASTER_ADDR and MASTER_PORT; set both RANK and WORLD_SIZE, or neither \
                             to run a single process";
const HINT_SLURM: &str = "srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and \
                          SLURM_TASKS_PER_NODE; start the replicas with srun \
                          (srun ddp-trainer SPEC --out DIR)";
const HINT_MPI: &str = "mpirun sets OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, \
                        OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE";

/// What this process is, from its launcher's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// One replica ([`DistEnv::from_vars`]).
    Replica(DistEnv),
    /// A Kubeflow pod without a launcher inside it: it starts its node's replicas itself
    /// ([`NodeWorld::from_vars`]).
    Node(NodeWorld),
}

impl Role {
    /// Reads the process environment; see [`Role::from_vars`].
    pub fn from_env() -> Result<Role> {
        Self::from_vars(|var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()))
    }

    /// A Kubeflow pod's node when `PET_*` variables are set without a launcher's `LOCAL_RANK`
    /// (so a PyTorchJob's `RANK`, the pod's index, is not taken for a replica's rank), else the
    /// replica [`DistEnv::from_vars`] detects.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Role> {
        match NodeWorld::from_vars(&get)? {
            Some(node) => Ok(Role::Node(node)),
            None => Ok(Role::Replica(DistEnv::from_vars(get)?)),
        }
    }
}

/// Which launcher started this replica, as detected from its variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    /// No launcher variables: a world of one.
    Single,
    /// `RANK` and `WORLD_SIZE` (torchrun, `ddp-trainer --standalone`, a Kubernetes pod's
    /// one replica).
    Torchrun,
    /// torchrun's variables set by the `ddp` supervisor (`DDP_LAUNCHER=ddp` beside them).
    Ddp,
    /// `SLURM_PROCID` (srun).
    Slurm,
    /// `OMPI_COMM_WORLD_RANK` (Open MPI's mpirun).
    OpenMpi,
}

impl fmt::Display for LauncherKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LauncherKind::Single => "single process",
            LauncherKind::Torchrun => "torchrun",
            LauncherKind::Ddp => "ddp",
            LauncherKind::Slurm => "slurm",
            LauncherKind::OpenMpi => "open mpi",
        })
    }
}

/// This replica's place in the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// Global rank, `0..world_size`.
    pub rank: usize,
    pub world_size: usize,
    /// Rank among the replicas on this node, `0..local_world_size`.
    pub local_rank: usize,
    /// Replicas on this node.
    pub local_world_size: usize,
    /// Host of rank 0's rendezvous store.
    pub master_addr: String,
    pub master_port: u16,
    /// How many times the launcher restarted the job (0 on the first attempt).
    pub restart_count: u32,
    pub kind: LauncherKind,
}

impl DistEnv {
    /// Reads the process environment; see [`DistEnv::from_vars`].
    pub fn from_env() -> Result<DistEnv> {
        Self::from_vars(|var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Detects the launcher from the variables `get` returns, in the order torchrun > Slurm >
    /// Open MPI > single process, and validates them. Values are trimmed; an empty value counts as
    /// unset. torchrun's variables with `DDP_LAUNCHER=ddp` are the `ddp` supervisor's.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<DistEnv> {
        let vars = Vars(get);
        if vars.has("RANK") || vars.has("WORLD_SIZE") {
            let env = torchrun(&vars)?;
            let by_ddp = vars.get(LAUNCHER_NAME_VARIABLE).as_deref() == Some(DDP_LAUNCHER);
            let kind = if by_ddp {
                LauncherKind::Ddp
            } else {
                LauncherKind::Torchrun
            };
            Ok(DistEnv { kind, ..env })
        } else if vars.has("SLURM_PROCID") {
            slurm(&vars)
        } else if vars.has("OMPI_COMM_WORLD_RANK") || vars.has("OMPI_COMM_WORLD_SIZE") {
            open_mpi(&vars)
        } else {
            Ok(DistEnv::single())
        }
    }

    /// A world of one, as when no launcher variables are set.
    pub fn single() -> DistEnv {
        DistEnv {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            local_world_size: 1,
            master_addr: DEFAULT_MASTER_ADDR.to_string(),
            master_port: DEFAULT_MASTER_PORT,
            restart_count: 0,
            kind: LauncherKind::Single,
        }
    }

    /// One line for logs: `rank 1/4 (local 1/2) via torchrun, master 10.0.0.1:29500`.
    pub fn describe(&self) -> String {
        if self.kind == LauncherKind::Single {
            return "rank 0/1 (single process, no launcher)".to_string();
        }
        let host = if self.master_addr.contains(':') {
            format!("[{}]", self.master_addr)
        } else {
            self.master_addr.clone()
        };
        let restart = match self.restart_count {
            0 => String::new(),
            n => format!(", restart {n}"),
        };
        format!(
            "rank {}/{} (local {}/{}) via {}, master {host}:{}{restart}",
            self.rank,
            self.world_size,
            self.local_rank,
            self.local_world_size,
            self.kind,
            self.master_port
        )
    }
}

/// Variable names of one launcher, for validation messages.
struct Names {
    rank: &'static str,
    world: &'static str,
    local_rank: &'static str,
    local_world: &'static str,
}

fn torchrun(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<DistEnv> {
    let rank = vars.required("RANK", HINT_TORCHRUN)?;
    let world = vars.required("WORLD_SIZE", HINT_TORCHRUN)?;
    // A PyTorchJob of an operator before v1.7 sets neither local variable (nor PET_*): one
    // replica per pod.
    let (local_rank, local_world) = match (vars.int("LOCAL_RANK")?, vars.int("LOCAL_WORLD_SIZE")?) {
        (Some(lr), Some(lw)) => (lr, lw),
        (None, None) => (0, 1),
        (Some(_), None) => return Err(missing("LOCAL_WORLD_SIZE", "LOCAL_RANK", HINT_TORCHRUN)),
        (None, Some(_)) => return Err(missing("LOCAL_RANK", "LOCAL_WORLD_SIZE", HINT_TORCHRUN)),
    };
    let names = Names {
        rank: "RANK",
        world: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        local_world: "LOCAL_WORLD_SIZE",
    };
    check_ranks(&names, rank, world, local_rank, local_world)?;
    let master_addr = master_addr_or_local(vars, &names, world, local_world)?;
    Ok(DistEnv {
        rank,
        world_size: world,
        local_rank,
        local_world_size: local_world,
        master_addr,
        master_port: master_port(vars)?,
        restart_count: vars.int("TORCHELASTIC_RESTART_COUNT")?.unwrap_or(0),
        kind: LauncherKind::Torchrun,
    })
}

fn slurm(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<DistEnv> {
    let rank = vars.required("SLURM_PROCID", HINT_SLURM)?;
    // SLURM_NPROCS is the older spelling of SLURM_NTASKS.
    let (world_var, world) = match vars.int("SLURM_NTASKS")? {
        Some(n) => ("SLURM_NTASKS", n),
        None => match vars.int("SLURM_NPROCS")? {
            Some(n) => ("SLURM_NPROCS", n),
            None => return Err(env_err("SLURM_NTASKS", format!("is not set; {HINT_SLURM}"))),
        },
    };
    let local_rank = vars.required("SLURM_LOCALID", HINT_SLURM)?;
    let (local_world_var, local_world) = slurm_local_world(vars)?;
    let names = Names {
        rank: "SLURM_PROCID",
        world: world_var,
        local_rank: "SLURM_LOCALID",
        local_world: local_world_var,
    };
    check_ranks(&names, rank, world, local_rank, local_world)?;
    let master_addr = match vars.get("MASTER_ADDR") {
        Some(addr) => addr,
        None => {
            let (var, list) = match vars.get("SLURM_JOB_NODELIST") {
                Some(list) => ("SLURM_JOB_NODELIST", list),
                None => match vars.get("SLURM_NODELIST") {
                    Some(list) => ("SLURM_NODELIST", list),
                    None => {
                        return Err(env_err(
                            "MASTER_ADDR",
                            "is not set, and neither is SLURM_JOB_NODELIST (nor SLURM_NODELIST) \
                             to take rank 0's host from; set MASTER_ADDR to the host of rank 0",
                        ));
                    }
                },
            };
            let hosts = expand_nodelist(&list).map_err(|msg| {
                env_err(
                    var,
                    format!("{msg}; fix it or set MASTER_ADDR to the host of rank 0"),
                )
            })?;
            hosts.into_iter().next().unwrap_or_default()
        }
    };
    Ok(DistEnv {
        rank,
        world_size: world,
        local_rank,
        local_world_size: local_world,
        master_addr,
        master_port: master_port(vars)?,
        restart_count: vars.int("SLURM_RESTART_COUNT")?.unwrap_or(0),
        kind: LauncherKind::Slurm,
    })
}

/// Replicas on this node: `SLURM_NTASKS_PER_NODE`, else this node's entry (`SLURM_NODEID`) of
/// `SLURM_TASKS_PER_NODE` (`2(x3),1` = 2, 2, 2, 1).
fn slurm_local_world(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
) -> Result<(&'static str, usize)> {
    let var = if vars.has("SLURM_NTASKS_PER_NODE") {
        "SLURM_NTASKS_PER_NODE"
    } else if vars.has("SLURM_TASKS_PER_NODE") {
        "SLURM_TASKS_PER_NODE"
    } else {
        return Err(env_err(
            "SLURM_TASKS_PER_NODE",
            format!(
                "is not set, and neither is SLURM_NTASKS_PER_NODE, so the replicas per node are \
                 unknown; {HINT_SLURM} (or set SLURM_NTASKS_PER_NODE)"
            ),
        ));
    };
    let value = vars.get(var).unwrap_or_default();
    let counts = parse_tasks_per_node(&value).map_err(|msg| {
        env_err(
            var,
            format!("{value:?} {msg}; expected counts like `4` or `4(x2),3`"),
        )
    })?;
    if counts.iter().all(|&c| c == counts[0]) {
        return Ok((var, counts[0]));
    }
    let node: usize = vars.required(
        "SLURM_NODEID",
        "srun sets it to this node's index in the job",
    )?;
    match counts.get(node) {
        Some(&count) => Ok((var, count)),
        None => Err(env_err(
            "SLURM_NODEID",
            format!(
                "is {node} but {var} = {value:?} lists {} nodes",
                counts.len()
            ),
        )),
    }
}

/// `4(x2),3` → `[4, 4, 3]`.
fn parse_tasks_per_node(value: &str) -> std::result::Result<Vec<usize>, String> {
    let mut counts = Vec::new();
    for item in value.split(',').map(str::trim) {
        let (count, repeat) = match item.strip_suffix(')').and_then(|s| s.split_once("(x")) {
            Some((count, repeat)) => (count, repeat),
            None => (item, "1"),
        };
        let (Ok(count), Ok(repeat)) = (count.parse::<usize>(), repeat.parse::<usize>()) else {
            return Err(format!("has an unreadable entry {item:?}"));
        };
        if repeat > MAX_HOSTS || counts.len() + repeat > MAX_HOSTS {
            return Err(format!("repeats more than {MAX_HOSTS} nodes"));
        }
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    if counts.is_empty() {
        return Err("lists no nodes".to_string());
    }
    Ok(counts)
}

fn open_mpi(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<DistEnv> {
    let names = Names {
        rank: "OMPI_COMM_WORLD_RANK",
        world: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_world: "OMPI_COMM_WORLD_LOCAL_SIZE",
    };
    let rank = vars.required(names.rank, HINT_MPI)?;
    let world = vars.required(names.world, HINT_MPI)?;
    let local_rank = vars.required(names.local_rank, HINT_MPI)?;
    let local_world = vars.required(names.local_world, HINT_MPI)?;
    check_ranks(&names, rank, world, local_rank, local_world)?;
    let master_addr = master_addr_or_local(vars, &names, world, local_world)?;
    Ok(DistEnv {
        rank,
        world_size: world,
        local_rank,
        local_world_size: local_world,
        master_addr,
        master_port: master_port(vars)?,
        restart_count: 0,
        kind: LauncherKind::OpenMpi,
    })
}

/// `world ≥ 1`, `rank < world`, `1 ≤ local_world ≤ world`, `local_rank < local_world`.
fn check_ranks(
    names: &Names,
    rank: usize,
    world: usize,
    local_rank: usize,
    local_world: usize,
) -> Result<()> {
    if world == 0 {
        return Err(env_err(
            names.world,
            "is 0; a world needs at least one replica",
        ));
    }
    if rank >= world {
        let msg = format!(
            "is {rank} but {} is {world}; ranks run from 0 to {}",
            names.world,
            world - 1
        );
        return Err(env_err(names.rank, msg));
    }
    if local_world == 0 {
        return Err(env_err(
            names.local_world,
            "is 0; a node needs at least one replica",
        ));
    }
    if local_world > world {
        let msg = format!(
            "is {local_world} but {} is {world}; a node cannot run more replicas than the world",
            names.world
        );
        return Err(env_err(names.local_world, msg));
    }
    if local_rank >= local_world {
        let msg = format!(
            "is {local_rank} but {} is {local_world}; local ranks run from 0 to {}",
            names.local_world,
            local_world - 1
        );
        return Err(env_err(names.local_rank, msg));
    }
    Ok(())
}

/// `MASTER_ADDR`, or 127.0.0.1 when this node runs the whole world.
fn master_addr_or_local(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
    names: &Names,
    world: usize,
    local_world: usize,
) -> Result<String> {
    match vars.get("MASTER_ADDR") {
        Some(addr) => Ok(addr),
        None if local_world == world => Ok(DEFAULT_MASTER_ADDR.to_string()),
        None => Err(env_err(
            "MASTER_ADDR",
            format!(
                "is not set, and the world spans several nodes ({} = {world}, {} = {local_world}); \
                 set MASTER_ADDR to the host of rank 0 (and MASTER_PORT to a free port on it)",
                names.world, names.local_world
            ),
        )),
    }
}

/// `MASTER_PORT` in `1..=65535`, else [`DEFAULT_MASTER_PORT`].
fn master_port(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<u16> {
    Ok(vars.port("MASTER_PORT")?.unwrap_or(DEFAULT_MASTER_PORT))
}

/// `var` is missing although `because` is set.
fn missing(var: &str, because: &str, hint: &str) -> Error {
    env_err(var, format!("is not set but {because} is; {hint}"))
}

/// This machine's host name (`unknown` if it cannot be read); `/` and control characters are
/// replaced so the name can be used as one path component (event file names, run records).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..end])
        .chars()
        .map(|c| if c == '/' || c.is_control() { '_' } else { c })
        .collect();
    if name.is_empty() {
        "unknown".to_string()
    } else {
        name
    }
}

#[cfg(test)]
mod tests;
